// cli.cpp: strict flag parsing. Every bad value is an Error that names the flag.
#include "cli.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <new>
#include <sstream>
#include <string_view>

#include "error.h"

namespace {

constexpr int kMaxThreads = 1024;
constexpr int kMaxContext = 1 << 20;  // 1M positions: far past any DeepSeek dense model
constexpr int kMaxPredict = 1 << 20;  // ~1M tokens: hours of text, but an end
constexpr int kSeedFromClock = -1;
constexpr uintmax_t kMaxPromptFileBytes = uintmax_t(64) << 20;  // 64 MiB: ~16M tokens of text

// Parses the whole of text as a T; false on trailing junk or overflow.
template <class T>
bool parse_number(std::string_view text, T& out) {
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, out);
  return ec == std::errc() && ptr == end && !text.empty();
}

int parse_int_flag(const std::string& flag, const std::string& text, int lo, int hi) {
  long long value = 0;
  if (!parse_number(text, value) || value < lo || value > hi)
    fail("invalid value '", text, "' for ", flag, ": expected an integer in [", lo, ", ", hi, "]");
  return static_cast<int>(value);
}

// A number in [lo, hi], or in (lo, hi] when lo_excluded.
float parse_float_flag(const std::string& flag, const std::string& text, float lo, float hi,
                       bool lo_excluded = false) {
  float value = 0;
  if (!parse_number(text, value) || !std::isfinite(value) || value < lo || value > hi ||
      (lo_excluded && value == lo))
    fail("invalid value '", text, "' for ", flag, ": expected a number in ",
         lo_excluded ? "(" : "[", lo, ", ", hi, "]");
  return value;
}

// Reads a prompt file: a regular file of at most kMaxPromptFileBytes. A FIFO would block (or
// never end), a device such as /dev/zero never ends, and a directory reads as nothing.
std::string read_file(const std::string& path, const char* what = "prompt file") {
  // O_NONBLOCK: opening a FIFO returns at once instead of waiting for a writer.
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  check(fd >= 0, "cannot read ", what, " '", path, "': ", std::strerror(errno));
  struct stat st {};
  const bool regular = fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
  const auto size = static_cast<uintmax_t>(st.st_size);
  std::string text(regular && size <= kMaxPromptFileBytes ? size : 0, '\0');
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = read(fd, text.data() + done, text.size() - done);
    if (n <= 0) break;  // an error, or the file shrank since fstat
    done += static_cast<size_t>(n);
  }
  close(fd);
  check(regular, what, " '", path,
        "' is not a regular file (a directory, FIFO or device); give a file, or the text with -p");
  check(size <= kMaxPromptFileBytes, what, " '", path, "' has ", size, " bytes; at most ",
        kMaxPromptFileBytes, " are read");
  check(done == text.size(), "cannot read ", what, " '", path, "'");
  return text;
}

}  // namespace

CliOptions parse_cli(int argc, char** argv) {
  CliOptions o;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    // Returns the flag's argument, or fails when it is missing.
    auto value = [&]() -> std::string {
      check(i + 1 < argc, "flag ", flag, " needs a value (see --help)");
      return argv[++i];
    };
    if (flag == "-h" || flag == "--help") {
      o.help = true;
    } else if (flag == "-m" || flag == "--model") {
      o.model_path = value();
    } else if (flag == "-p" || flag == "--prompt") {
      o.prompt = value();
      o.prompt_given = true;
    } else if (flag == "-f" || flag == "--file") {
      o.prompt = read_file(value());
      o.prompt_given = true;
    } else if (flag == "-n" || flag == "--n-predict") {
      o.n_predict = parse_int_flag(flag, value(), -1, kMaxPredict);
    } else if (flag == "-t" || flag == "--threads") {
      o.n_threads = parse_int_flag(flag, value(), 1, kMaxThreads);
    } else if (flag == "-c" || flag == "--ctx-size") {
      o.n_ctx = parse_int_flag(flag, value(), 0, kMaxContext);
    } else if (flag == "-s" || flag == "--seed") {
      const std::string text = value();
      long long seed = 0;
      if (!parse_number(text, seed) || seed < kSeedFromClock)
        fail("invalid value '", text, "' for ", flag, ": expected -1 (random) or an integer >= 0");
      o.seed_given = seed != kSeedFromClock;
      o.sampler.seed = static_cast<uint64_t>(seed);
    } else if (flag == "--temp") {
      o.sampler.temperature = parse_float_flag(flag, value(), 0.0f, 100.0f);
    } else if (flag == "--top-k") {
      o.sampler.top_k = parse_int_flag(flag, value(), 0, 1 << 30);
    } else if (flag == "--top-p") {
      o.sampler.top_p = parse_float_flag(flag, value(), 0.0f, 1.0f, /*lo_excluded=*/true);
    } else if (flag == "--tokenize") {
      o.tokenize_only = true;
    } else if (flag == "--dump-logits") {
      o.dump_logits_path = value();
    } else if (flag == "--chat") {
      o.chat = true;
    } else if (flag == "--chat-template") {
      o.chat_template = value();
    } else if (flag == "--system") {
      o.system_prompt = value();
    } else if (flag == "--special") {
      o.show_special = true;
    } else if (flag == "--perplexity") {
      o.prompt = read_file(value(), "perplexity text file");
      o.perplexity = true;
    } else if (flag == "--chunks") {
      o.ppl_chunks = parse_int_flag(flag, value(), 1, kMaxPredict);
    } else if (flag == "--kl-divergence-base") {
      o.kl_base_out = value();
    } else if (flag == "--kl-divergence") {
      o.kl_base_in = value();
    } else {
      fail("unknown flag '", flag, "' (see --help)");
    }
  }
  if (!o.help) check(!o.model_path.empty(), "no model given: use -m FILE.gguf (see --help)");
  check(o.perplexity || (o.kl_base_out.empty() && o.kl_base_in.empty() && o.ppl_chunks < 0),
        "--chunks, --kl-divergence and --kl-divergence-base need --perplexity FILE");
  check(o.kl_base_out.empty() || o.kl_base_in.empty(),
        "give --kl-divergence-base (write) or --kl-divergence (compare), not both");
  return o;
}

std::string cli_usage(const char* program) {
  std::ostringstream u;
  u << "usage: " << program << " -m MODEL.gguf [options]\n"
    << "\n"
    << "  -m, --model FILE      GGUF model (or a vocab-only GGUF with --tokenize)\n"
    << "  -p, --prompt TEXT     prompt to continue\n"
    << "  -f, --file FILE       read the prompt from FILE\n"
    << "  -n, --n-predict N     tokens to generate (default 128, at most " << kMaxPredict << ";\n"
    << "                        -1 = until end of text or a full context)\n"
    << "  -t, --threads N       threads (default: physical cores; stages before 04 use 1)\n"
    << "  -c, --ctx-size N      KV cache length (default: model's, at most " << kDefaultContext
    << ")\n"
    << "  -s, --seed N          sampling seed (default -1: from the clock)\n"
    << "      --temp T          temperature (default 0.8; 0 = greedy)\n"
    << "      --top-k K         keep the K most likely tokens (default 40; 0 = all)\n"
    << "      --top-p P         keep the smallest set with probability >= P (default 0.95)\n"
    << "      --chat            interactive chat (with -p: one formatted turn)\n"
    << "      --chat-template N deepseek-llm | deepseek-coder | deepseek-r1 (default: detected)\n"
    << "      --system TEXT     system prompt for --chat\n"
    << "      --special         print special tokens\n"
    << "      --tokenize        print the prompt's token ids (no BOS, specials as text) and exit\n"
    << "      --dump-logits F   write the last prompt position's logits (float32 LE) to F, exit\n"
    << "      --perplexity F    score F's text as llama-perplexity does (chunks of -c tokens,\n"
    << "                        second halves scored) and print PPL = x +/- y\n"
    << "      --chunks N        score at most N chunks\n"
    << "      --kl-divergence-base F  with --perplexity: write the log-probabilities to F\n"
    << "      --kl-divergence F       with --perplexity: KL divergence against F's\n"
    << "  -h, --help            this text\n"
    << "\n"
    << "At the end a line on stderr: stats: load_ms=.. prompt_tokens=.. prefill_tok_s=.. "
       "gen_tokens=.. decode_tok_s=.. threads=.. peak_rss_mb=..\n";
  return u.str();
}

int run_reporting_errors(int (*run)(int, char**), int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "error: out of memory\n");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
  }
  return 1;
}
