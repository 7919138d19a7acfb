// main.cpp: the engine's command line. Compiled once per stage (STAGE_NAME names it); every stage
// shares this file, so all of them take the same flags and print the same stats line.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>

#include "chat.h"
#include "cli.h"
#include "engine.h"
#include "error.h"
#include "generate.h"
#include "model.h"
#include "perplexity.h"
#include "timing.h"
#include "tokenizer.h"

#ifndef STAGE_NAME
#define STAGE_NAME "unknown"
#endif

namespace {

// Prints streamed text at once, so tokens appear as they are generated.
bool print_text(int /*token*/, const std::string& text) {
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
  return true;
}

void print_stats(double load_ms, const GenerationStats& s, int threads) {
  auto per_second = [](int n, double ms) { return ms > 0 ? 1000.0 * n / ms : 0.0; };
  std::fprintf(stderr,
               "stats: load_ms=%.1f prompt_tokens=%d prefill_tok_s=%.2f gen_tokens=%d "
               "decode_tok_s=%.2f threads=%d peak_rss_mb=%.1f\n",
               load_ms, s.prompt_tokens, per_second(s.prompt_tokens, s.prefill_ms), s.gen_tokens,
               per_second(s.decode_steps, s.decode_ms), threads, peak_rss_mb());
}

void report_stop(const GenerationStats& s, const Engine& engine) {
  if (s.stop != StopReason::ContextFull) return;
  std::fprintf(stderr, "\n[context full: %d positions; stopped (%s)]\n", engine.context_length(),
               engine.slides_past_context()
                   ? "-n -1 ends with the context: give -n N to slide past it, or raise -c"
                   : "raise -c, or use a stage with a ring KV cache");
}

void write_logits(const std::string& path, const float* logits, int n_vocab) {
  std::ofstream out(path, std::ios::binary);
  check(out.good(), "cannot write logits to '", path, "'");
  out.write(reinterpret_cast<const char*>(logits), static_cast<std::streamsize>(n_vocab) * 4);
  check(out.good(), "cannot write logits to '", path, "'");
}

// Interactive (or, with -p, single-turn) chat: each user turn is formatted by the template and
// the session keeps the whole conversation in the KV cache. Each turn ends with its own stats
// line on stderr.
void run_chat(Session& session, const Tokenizer& tokenizer, const GGUFFile& file,
              const CliOptions& o, const Engine& engine, double load_ms) {
  const ChatTemplate tmpl = detect_chat_template(file, o.chat_template);
  const std::string bos = bos_text(tokenizer);
  const bool interactive = !o.prompt_given;
  GenerationStats last;
  std::string line = o.prompt;
  for (bool first = true;; first = false) {
    if (interactive) {
      // Empty lines are skipped without counting as a turn: the first real one opens the chat.
      do {
        std::fputs("> ", stdout);
        std::fflush(stdout);
      } while (std::getline(std::cin, line) && line.empty());
      if (!std::cin) {
        std::fputs("\n", stdout);  // end the prompt's line at the end of input
        break;
      }
    }
    std::string text = format_user_turn(tmpl, o.system_prompt, line, first, bos);
    if (!first) {  // close the previous reply; its end-of-generation token is already fed
      const bool ended = last.stop == StopReason::EndOfGeneration;
      text = format_reply_end(tmpl, ended ? tokenizer.piece(last.last_token, true) : "") + text;
    }
    last =
        session.generate(tokenizer.encode(text, /*parse_special=*/true), o.n_predict, print_text);
    std::fputs("\n", stdout);
    std::fflush(stdout);
    report_stop(last, engine);
    print_stats(load_ms, last, engine.threads());
    if (!interactive || last.stop == StopReason::ContextFull) break;
  }
}

// --perplexity: the running figure per chunk on stderr, the results on stdout, in
// llama-perplexity's words.
void run_perplexity(Engine& engine, const Tokenizer& tokenizer, const CliOptions& o, int n_vocab,
                    int n_ctx) {
  PerplexityOptions options;
  options.n_ctx = n_ctx;
  options.max_chunks = o.ppl_chunks;
  options.kl_base_out = o.kl_base_out;
  options.kl_base_in = o.kl_base_in;
  options.progress = stderr;
  const double start = now_ms();
  const PerplexityResult r = perplexity(engine, tokenizer, o.prompt, n_vocab, options);
  std::printf("chunks: %d of %d tokens, %d tokens scored, %.1f s\n", r.chunks, n_ctx, r.scored,
              (now_ms() - start) / 1000.0);
  std::printf("Final estimate: PPL = %.4f +/- %.5f\n", r.ppl, r.ppl_err);
  if (r.has_kl) {
    constexpr double kPercent = 100.0;
    std::printf("Mean    KLD: %10.6f +/- %10.6f\n", r.kl_mean, r.kl_err);
    std::printf("99.0%%   KLD: %10.6f\n", r.kl_p99);
    std::printf("Same top p: %6.3f +/- %5.3f %%\n", kPercent * r.same_top,
                kPercent * r.same_top_err);
  }
}

int run(int argc, char** argv) {
  const CliOptions o = parse_cli(argc, argv);
  if (o.help) {
    std::cout << cli_usage(argv[0]) << "stage: " << STAGE_NAME << "\n";
    return 0;
  }
  const double start = now_ms();
  auto file = std::make_shared<const GGUFFile>(o.model_path);
  const Tokenizer tokenizer(*file);
  if (o.tokenize_only) {
    const std::vector<int> ids = tokenizer.encode(o.prompt, /*parse_special=*/false);
    for (size_t i = 0; i < ids.size(); ++i) std::printf(i ? " %d" : "%d", ids[i]);
    std::printf("\n");
    return 0;
  }
  const Model model(file);
  const ModelConfig& config = model.config();
  check(tokenizer.n_vocab() == config.n_vocab, o.model_path, ": the tokenizer has ",
        tokenizer.n_vocab(), " tokens but the model's vocabulary is ", config.n_vocab);
  EngineOptions engine_options;
  engine_options.n_ctx = o.n_ctx > 0 ? o.n_ctx : std::min(config.n_ctx_train, kDefaultContext);
  engine_options.n_threads = o.n_threads > 0 ? o.n_threads : physical_cores();
  // More threads than CPUs only take turns on them (and each one costs a stack): cap, and say so.
  if (const int cpus = usable_cpus(); engine_options.n_threads > cpus) {
    std::fprintf(stderr, "warning: -t %d is more than the %d CPUs this process may use; using %d\n",
                 engine_options.n_threads, cpus, cpus);
    engine_options.n_threads = cpus;
  }
  std::unique_ptr<Engine> engine = create_engine(model, engine_options);
  const double load_ms = now_ms() - start;

  SamplerParams sampler = o.sampler;
  if (!o.seed_given) sampler.seed = static_cast<uint64_t>(now_ms() * 1000.0);
  Session session(*engine, tokenizer, sampler, config.n_vocab, o.show_special);

  if (!o.dump_logits_path.empty()) {
    write_logits(o.dump_logits_path, session.evaluate(prompt_tokens(tokenizer, o.prompt)),
                 config.n_vocab);
    return 0;
  }
  if (o.perplexity) {
    run_perplexity(*engine, tokenizer, o, config.n_vocab, engine_options.n_ctx);
    return 0;
  }
  if (o.chat) {
    run_chat(session, tokenizer, *file, o, *engine, load_ms);
    return 0;
  }
  print_text(-1, o.prompt);  // echo the prompt, as llama.cpp does
  const GenerationStats stats =
      session.generate(prompt_tokens(tokenizer, o.prompt), o.n_predict, print_text);
  std::fputs("\n", stdout);
  std::fflush(stdout);  // the text ends before the stats line on a shared terminal
  report_stop(stats, *engine);
  print_stats(load_ms, stats, engine->threads());
  return 0;
}

#ifdef _OPENMP
/// Polls an OpenMP thread makes at a barrier before it sleeps (libgomp's GOMP_SPINCOUNT): 1000,
/// unless the stage's stage.mk defines ENGINE_SPIN_COUNT (stage 34 on).
#ifdef ENGINE_SPIN_COUNT
constexpr const char* kSpinCount = ENGINE_SPIN_COUNT;
#else
constexpr const char* kSpinCount = "1000";
#endif

/// A thread that reaches an OpenMP barrier first waits for the others. libgomp's default is to
/// poll 300,000 times (milliseconds) before it sleeps: on a machine with a core busy elsewhere,
/// the polling thread holds a core that the thread it waits for needs, at each of the ~300
/// barriers of a decode step. A short poll, then sleep, gives the core away on a busy machine;
/// on a quiet one a thread that waits longer than the poll sleeps and must be woken, so stage
/// 34, whose thread chooser (stage 29) copes with a busy core, polls as long as libgomp. libgomp
/// reads its settings from the environment once, before main(), so the engine sets GOMP_SPINCOUNT
/// and runs itself again, unless the user chose (OMP_WAIT_POLICY or GOMP_SPINCOUNT set).
void bound_barrier_spinning(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr || std::getenv("GOMP_SPINCOUNT") != nullptr) return;
  if (setenv("GOMP_SPINCOUNT", kSpinCount, /*overwrite=*/1) == 0) execv("/proc/self/exe", argv);
  std::fprintf(stderr,
               "warning: cannot re-run with GOMP_SPINCOUNT=%s (%s): threads poll at "
               "barriers for milliseconds\n",
               kSpinCount, std::strerror(errno));
}
#endif

}  // namespace

int main(int argc, char** argv) {
#ifdef _OPENMP
  bound_barrier_spinning(argv);
#endif
  return run_reporting_errors(run, argc, argv);
}
