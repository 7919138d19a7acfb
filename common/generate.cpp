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
  if (unfed_ >= 0) pending_ = unfed_;  // a generation left without finish()
  unfed_ = -1;
  ended_ = true;
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
  step_logits_ = engine_.forward(input.data(), n, pos_);
  pos_ += n;
  return checked_logits(step_logits_, n_vocab_);
}

const float* Session::evaluate(const std::vector<int>& input) {
  return run(with_pending(input));
}

void Session::reset() {
  pos_ = 0;
  pending_ = -1;
  step_logits_ = nullptr;
  ended_ = true;
  unfed_ = -1;
}

GenerationStats Session::generate(const std::vector<int>& input, int n_predict,
                                  const TokenCallback& on_token) {
  start(input, n_predict);
  GenerationStep step;
  while (next(step)) {
    if (!on_token(step.token, step.text)) break;
  }
  const std::string tail = finish();
  if (!tail.empty()) on_token(-1, tail);
  return stats_;
}

void Session::start(const std::vector<int>& input, int n_predict) {
  const std::vector<int> all = with_pending(input);  // ends any generation in progress
  stats_ = GenerationStats();
  stats_.prompt_tokens = static_cast<int>(all.size());
  const double start = now_ms();
  run(all);
  stats_.prefill_ms = now_ms() - start;
  decoder_.emplace(tokenizer_, show_special_);
  n_predict_ = n_predict;
  ended_ = false;
}

void Session::end(StopReason reason) {
  stats_.stop = reason;
  ended_ = true;
}

bool Session::next(GenerationStep& step) {
  step = GenerationStep();
  if (ended_) return false;
  if (n_predict_ >= 0 && stats_.gen_tokens == n_predict_) {
    end(StopReason::TokenLimit);  // no forward pass that nobody reads: fed with the next input
    return false;
  }
  if (unfed_ >= 0) {
    // "Until the end of text" (n_predict < 0) also ends where the context does, even in a ring
    // cache that could slide on: a model that never ends its text would otherwise never stop.
    const bool may_slide = engine_.slides_past_context() && n_predict_ >= 0;
    if (!may_slide && pos_ >= engine_.context_length()) {
      end(StopReason::ContextFull);
      return false;
    }
    ended_ = true;  // should anything below throw, this generation is over
    const double start = now_ms();
    step_logits_ = engine_.forward(&unfed_, 1, pos_);
    stats_.decode_ms += now_ms() - start;  // the check below is not the engine's time
    ++stats_.decode_steps;
    ++pos_;
    unfed_ = -1;
    checked_logits(step_logits_, n_vocab_);
    ended_ = false;
  }
  // Sampling may modify its input: a copy, so the engine's logits stay as computed.
  std::copy(step_logits_, step_logits_ + n_vocab_, logits_.begin());
  const int token = sample_token(logits_.data(), n_vocab_, params_, rng_, candidates_);
  ++stats_.gen_tokens;
  stats_.last_token = token;
  if (tokenizer_.is_end_of_generation(token)) {
    pending_ = token;
    end(StopReason::EndOfGeneration);
    if (!show_special_) return false;
    step.token = token;  // e.g. "<｜end▁of▁sentence｜>" with --special
    step.text = decoder_->push(token);
    return true;
  }
  unfed_ = token;
  step.token = token;
  step.text = decoder_->push(token);
  return true;
}

std::string Session::finish() {
  if (!ended_) end(StopReason::Callback);
  if (unfed_ >= 0) pending_ = unfed_;
  unfed_ = -1;
  if (!decoder_) return "";
  std::string tail = decoder_->flush();
  decoder_.reset();
  return tail;
}
