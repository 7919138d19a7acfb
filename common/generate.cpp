// generate.cpp: prefill the input, then sample and decode one token at a time.
#include "generate.h"

#include <algorithm>
#include <cmath>

#include "error.h"
#include "timing.h"

Session::Session(Engine& engine, const Tokenizer& tokenizer, const SamplerParams& params,
                 int n_vocab, bool show_special)
    : engine_(engine),
      tokenizer_(tokenizer),
      params_(params),
      n_vocab_(n_vocab),
      show_special_(show_special),
      rng_(params.seed),
      logits_(n_vocab) {}

namespace {

/// Logits that are NaN or infinite mean the forward pass went wrong (non-finite weights in the
/// file, or an overflow): say so, instead of sampling text from them.
const float* checked_logits(const float* logits, int n_vocab) {
  for (int i = 0; i < n_vocab; ++i) {
    check(std::isfinite(logits[i]), "the forward pass gave a non-finite logit (token ", i, ": ",
          logits[i], "); the model file's weights may hold NaN or infinity");
  }
  return logits;
}

}  // namespace

// The last sampled token of a previous call is fed first, so a chat keeps it in its context.
std::vector<int> Session::with_pending(const std::vector<int>& input) {
  std::vector<int> all;
  if (pending_ >= 0) all.push_back(pending_);
  all.insert(all.end(), input.begin(), input.end());
  pending_ = -1;
  return all;
}

const float* Session::run(const std::vector<int>& input) {
  const int n_ctx = engine_.context_length();
  const int n = static_cast<int>(input.size());
  check(n > 0, "nothing to evaluate: the prompt is empty and the model has no BOS token");
  check(n <= n_ctx, "prompt is too long: ", n, " tokens, the context holds ", n_ctx, " (raise -c)");
  check(engine_.slides_past_context() || pos_ + n <= n_ctx, "prompt does not fit: ", pos_ + n,
        " tokens in all, the context holds ", n_ctx, " (raise -c)");
  const float* logits = engine_.forward(input.data(), n, pos_);
  pos_ += n;
  return checked_logits(logits, n_vocab_);
}

const float* Session::evaluate(const std::vector<int>& input) {
  return run(with_pending(input));
}

GenerationStats Session::generate(const std::vector<int>& input, int n_predict,
                                  const TokenCallback& on_token) {
  GenerationStats stats;
  const std::vector<int> all = with_pending(input);
  stats.prompt_tokens = static_cast<int>(all.size());
  double start = now_ms();
  const float* logits = run(all);
  stats.prefill_ms = now_ms() - start;

  StreamDecoder decoder(tokenizer_, show_special_);
  while (n_predict < 0 || stats.gen_tokens < n_predict) {
    std::copy(logits, logits + n_vocab_, logits_.begin());  // sampling may modify its input
    const int token = sample_token(logits_.data(), n_vocab_, params_, rng_, candidates_);
    ++stats.gen_tokens;
    stats.last_token = token;
    if (tokenizer_.is_end_of_generation(token)) {
      if (show_special_) on_token(token, decoder.push(token));  // e.g. "<｜end▁of▁sentence｜>"
      pending_ = token;
      stats.stop = StopReason::EndOfGeneration;
      break;
    }
    if (!on_token(token, decoder.push(token))) {
      pending_ = token;
      stats.stop = StopReason::Callback;
      break;
    }
    if (n_predict >= 0 && stats.gen_tokens == n_predict) {
      pending_ = token;  // fed on the next call, if any: no forward pass that nobody reads
      stats.stop = StopReason::TokenLimit;
      break;
    }
    // "Until the end of text" (n_predict < 0) also ends where the context does, even in a ring
    // cache that could slide on: a model that never ends its text would otherwise never stop.
    const bool may_slide = engine_.slides_past_context() && n_predict >= 0;
    if (!may_slide && pos_ >= engine_.context_length()) {
      pending_ = token;
      stats.stop = StopReason::ContextFull;
      break;
    }
    start = now_ms();
    logits = engine_.forward(&token, 1, pos_);
    stats.decode_ms += now_ms() - start;  // the check below is not the engine's time
    checked_logits(logits, n_vocab_);
    ++stats.decode_steps;
    ++pos_;
  }
  const std::string tail = decoder.flush();
  if (!tail.empty()) on_token(-1, tail);
  return stats;
}
