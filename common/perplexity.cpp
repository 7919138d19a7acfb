// perplexity.cpp: chunked perplexity and KL divergence (see perplexity.h).
#include "perplexity.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <memory>
#include <tuple>
#include <utility>

#include "error.h"

namespace {

// Base log-probability file: magic, then int32 n_vocab, n_ctx, n_chunks, the chunks' tokens
// (n_chunks * n_ctx int32, as scored: BOS already in place), then for every scored position its
// n_vocab float32 log-probabilities. Host byte order (little-endian here); the file is made and
// read on the same machine, as llama-perplexity's is.
constexpr char kBaseMagic[8] = {'D', 'S', 'P', 'P', 'L', 'K', 'L', '1'};
constexpr double kPercentile = 0.99;

/// out (n) = log softmax(logits): logits - max - log(sum exp(logits - max)), the sum in double.
void log_softmax(const float* logits, int n, std::vector<float>& out) {
  out.resize(n);
  const float max = *std::max_element(logits, logits + n);
  double sum = 0;
  for (int i = 0; i < n; ++i) sum += std::exp(double(logits[i]) - max);
  const double log_sum = std::log(sum);
  for (int i = 0; i < n; ++i) out[i] = float(double(logits[i]) - max - log_sum);
}

int argmax(const float* x, int n) {
  return int(std::max_element(x, x + n) - x);
}

/// Mean of the values whose sum and sum of squares are given, and its standard error.
std::pair<double, double> mean_and_error(double sum, double sum_sq, int n) {
  const double mean = sum / n;
  const double variance = sum_sq / n - mean * mean;
  return {mean, n > 1 && variance > 0 ? std::sqrt(variance / (n - 1)) : 0.0};
}

/// The p-quantile of values (sorted in place), interpolating between neighbours.
double quantile(std::vector<float>& values, double p) {
  std::sort(values.begin(), values.end());
  const double at = p * double(values.size() - 1);
  const size_t lo = size_t(at);
  const size_t hi = std::min(lo + 1, values.size() - 1);
  return values[lo] + (at - double(lo)) * (values[hi] - values[lo]);
}

class BaseFile {
 public:
  /// Opens path for writing (write = true) or reading, and writes or checks the header.
  BaseFile(const std::string& path, bool write, int n_vocab, int n_ctx,
           const std::vector<int>& chunk_tokens)
      : path_(path), write_(write), n_vocab_(n_vocab) {
    const int32_t header[] = {n_vocab, n_ctx, int32_t(chunk_tokens.size() / size_t(n_ctx))};
    if (write) {
      out_.open(path, std::ios::binary | std::ios::trunc);
      check(out_.good(), "cannot write KL divergence base file '", path, "'");
      out_.write(kBaseMagic, sizeof kBaseMagic);
      out_.write(reinterpret_cast<const char*>(header), sizeof header);
      out_.write(reinterpret_cast<const char*>(chunk_tokens.data()),
                 std::streamsize(chunk_tokens.size() * sizeof(int32_t)));
      check(out_.good(), "cannot write KL divergence base file '", path, "'");
      return;
    }
    in_.open(path, std::ios::binary);
    check(in_.good(), "cannot read KL divergence base file '", path, "'");
    char magic[sizeof kBaseMagic] = {};
    int32_t stored[3] = {};
    in_.read(magic, sizeof magic);
    in_.read(reinterpret_cast<char*>(stored), sizeof stored);
    check(in_.good() && std::memcmp(magic, kBaseMagic, sizeof magic) == 0, path,
          ": not a KL divergence base file (write one with --kl-divergence-base)");
    check(std::memcmp(stored, header, sizeof header) == 0, path, ": made with n_vocab ", stored[0],
          ", -c ", stored[1], ", ", stored[2], " chunks; this run has ", header[0], ", ", header[1],
          ", ", header[2]);
    std::vector<int32_t> tokens(chunk_tokens.size());
    in_.read(reinterpret_cast<char*>(tokens.data()), std::streamsize(tokens.size() * 4));
    check(in_.good() && std::equal(tokens.begin(), tokens.end(), chunk_tokens.begin()), path,
          ": made from other tokens (another text or vocabulary)");
  }

  /// Writes log_probs (base run) or reads the stored ones into log_probs.
  void exchange(std::vector<float>& log_probs) {
    const auto bytes = std::streamsize(size_t(n_vocab_) * sizeof(float));
    if (write_) {
      out_.write(reinterpret_cast<const char*>(log_probs.data()), bytes);
      check(out_.good(), "cannot write KL divergence base file '", path_, "'");
    } else {
      log_probs.resize(n_vocab_);
      in_.read(reinterpret_cast<char*>(log_probs.data()), bytes);
      check(in_.good(), path_, ": ends early (truncated?)");
    }
  }

 private:
  std::string path_;
  bool write_;
  int n_vocab_;
  std::ofstream out_;
  std::ifstream in_;
};

}  // namespace

PerplexityResult perplexity(Engine& engine, const Tokenizer& tokenizer, const std::string& text,
                            int n_vocab, const PerplexityOptions& options) {
  const int n_ctx = options.n_ctx;
  check(n_ctx >= 4 && n_ctx <= engine.context_length(), "perplexity: chunks of ", n_ctx,
        " tokens need a context of 4 to ", engine.context_length(), " positions");
  std::vector<int> tokens;
  const bool add_bos = tokenizer.add_bos() && tokenizer.bos() >= 0;
  if (add_bos) tokens.push_back(tokenizer.bos());
  const std::vector<int> body = tokenizer.encode(text, /*parse_special=*/false);
  tokens.insert(tokens.end(), body.begin(), body.end());
  check(tokens.size() >= size_t(2) * n_ctx, "perplexity: the text has ", tokens.size(),
        " tokens; chunks of -c ", n_ctx, " need at least ", 2 * n_ctx);
  int n_chunks = int(tokens.size() / size_t(n_ctx));
  if (options.max_chunks > 0) n_chunks = std::min(n_chunks, options.max_chunks);

  // Each chunk as it is run: BOS replaces its first token, as in llama-perplexity.
  std::vector<int> chunks(tokens.begin(), tokens.begin() + size_t(n_chunks) * n_ctx);
  if (add_bos) {
    for (int c = 0; c < n_chunks; ++c) chunks[size_t(c) * n_ctx] = tokenizer.bos();
  }
  std::unique_ptr<BaseFile> base;
  if (!options.kl_base_out.empty()) {
    base = std::make_unique<BaseFile>(options.kl_base_out, true, n_vocab, n_ctx, chunks);
  } else if (!options.kl_base_in.empty()) {
    base = std::make_unique<BaseFile>(options.kl_base_in, false, n_vocab, n_ctx, chunks);
  }
  const bool compare = base != nullptr && options.kl_base_out.empty();

  const int first = n_ctx / 2;  // positions first .. n_ctx - 2 are scored
  PerplexityResult r;
  double nll_sum = 0, nll_sq = 0, kl_sum = 0, kl_sq = 0;
  int same_top = 0;
  std::vector<float> kl_values, log_probs, base_log_probs;
  for (int c = 0; c < n_chunks; ++c) {
    const int* chunk = chunks.data() + size_t(c) * n_ctx;
    // Positions 0 .. first in one batch (their logits before `first` are not needed), then one
    // token at a time: the engine returns the last position's logits only.
    const float* logits = engine.forward(chunk, first + 1, 0);
    for (int j = first; j <= n_ctx - 2; ++j) {
      if (j > first) logits = engine.forward(chunk + j, 1, j);
      log_softmax(logits, n_vocab, log_probs);
      const double nll = -double(log_probs[chunk[j + 1]]);
      nll_sum += nll;
      nll_sq += nll * nll;
      ++r.scored;
      if (base == nullptr) continue;
      if (!compare) {
        base->exchange(log_probs);
        continue;
      }
      base->exchange(base_log_probs);
      double kl = 0;  // KL(base || model) = sum_i p_i (log p_i - log q_i)
      for (int i = 0; i < n_vocab; ++i) {
        kl += std::exp(double(base_log_probs[i])) * (double(base_log_probs[i]) - log_probs[i]);
      }
      kl_sum += kl;
      kl_sq += kl * kl;
      kl_values.push_back(float(kl));
      same_top += argmax(base_log_probs.data(), n_vocab) == argmax(log_probs.data(), n_vocab);
    }
    r.chunks = c + 1;
    if (options.progress != nullptr) {
      std::fprintf(options.progress, "[%d]%.4f,", r.chunks, std::exp(nll_sum / r.scored));
      std::fflush(options.progress);
    }
  }
  if (options.progress != nullptr) std::fputs("\n", options.progress);

  const auto [nll_mean, nll_err] = mean_and_error(nll_sum, nll_sq, r.scored);
  r.ppl = std::exp(nll_mean);
  r.ppl_err = r.ppl * nll_err;
  if (compare) {
    r.has_kl = true;
    std::tie(r.kl_mean, r.kl_err) = mean_and_error(kl_sum, kl_sq, r.scored);
    r.kl_p99 = quantile(kl_values, kPercentile);
    r.same_top = double(same_top) / r.scored;
    r.same_top_err = std::sqrt(r.same_top * (1 - r.same_top) / std::max(1, r.scored - 1));
  }
  return r;
}
