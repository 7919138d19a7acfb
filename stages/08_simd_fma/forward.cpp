// forward.cpp: the transformer, one token at a time through every layer, llama2.c style.
//
// Per token (d = n_embd, hd = head_dim, kv_dim = n_head_kv * hd):
//   x = embed(token)
//   per layer:  x += wo @ attention(rope(wq @ rmsnorm(x)), cache of rope(wk @ ..), wv @ ..)
//               x += w_down @ swiglu(w_gate @ rmsnorm(x), w_up @ rmsnorm(x))
//   logits = output @ rmsnorm(x)
// A prompt of n tokens is n such passes (batched prefill is a later stage).
#include <omp.h>

#include <algorithm>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "aligned.h"
#include "engine.h"
#include "error.h"
#include "kv_cache.h"
#include "matmul.h"

namespace {

/// y (n,) += b (n,): a bias, or a block's output onto the residual stream.
void add(float* y, const float* b, int n) {
  for (int i = 0; i < n; ++i) y[i] += b[i];
}

class TransformerEngine final : public Engine {
 public:
  /// model must outlive the engine.
  TransformerEngine(const Model& model, const EngineOptions& options);

  float* forward(const int* tokens, int n_tokens, int pos) override;
  int context_length() const override { return cache_.capacity(); }
  bool slides_past_context() const override { return cache_.slides(); }
  int threads() const override { return n_threads_; }

 private:
  /// Runs token at position pos through every layer; leaves the hidden state in x_.
  void run_token(int token, int pos);
  void attention_block(int layer, int pos);
  void ffn_block(int layer);

  const Model& model_;
  const ModelConfig& config_;
  int n_threads_;  ///< OpenMP threads (default: physical cores, seed article §7.2)
  KVCache cache_;
  MatmulScratch scratch_;
  // Activations of one token, allocated once.
  AlignedFloats x_;       ///< (d,) the residual stream
  AlignedFloats xb_;      ///< (d,) rmsnorm(x), a block's input
  AlignedFloats xb2_;     ///< (d,) a block's output
  AlignedFloats q_;       ///< (n_head * hd,)
  AlignedFloats k_;       ///< (kv_dim,)
  AlignedFloats v_;       ///< (kv_dim,)
  AlignedFloats att_;     ///< (n_head * hd,) attention output
  AlignedFloats scores_;  ///< (n_head, n_ctx) attention weights
  AlignedFloats hb_;      ///< (n_ff,) gate, then swiglu(gate, up)
  AlignedFloats hb2_;     ///< (n_ff,) up
  AlignedFloats logits_;  ///< (n_vocab,)
};

TransformerEngine::TransformerEngine(const Model& model, const EngineOptions& options)
    : model_(model),
      config_(model.config()),
      n_threads_(options.n_threads),
      cache_(config_.n_layer, options.n_ctx, config_.kv_dim()),
      x_(config_.n_embd),
      xb_(config_.n_embd),
      xb2_(config_.n_embd),
      q_(static_cast<size_t>(config_.n_head) * config_.head_dim),
      k_(config_.kv_dim()),
      v_(config_.kv_dim()),
      att_(static_cast<size_t>(config_.n_head) * config_.head_dim),
      scores_(static_cast<size_t>(config_.n_head) * options.n_ctx),
      hb_(config_.n_ff),
      hb2_(config_.n_ff),
      logits_(config_.n_vocab) {
  const ModelConfig& c = config_;
  const std::string& path = model.file().path();
  check(c.n_head_kv > 0 && c.n_head % c.n_head_kv == 0, path, ": n_head ", c.n_head,
        " is not a multiple of n_head_kv ", c.n_head_kv);
  check(c.rope.n_rot > 0 && c.rope.n_rot % 2 == 0 && c.rope.n_rot <= c.head_dim, path,
        ": rope dimension ", c.rope.n_rot, " must be even and at most head_dim ", c.head_dim);
  check(n_threads_ > 0, path, ": thread count must be positive, got ", n_threads_);
  omp_set_num_threads(n_threads_);  // Every parallel loop uses this many threads
}

float* TransformerEngine::forward(const int* tokens, int n_tokens, int pos) {
  check(n_tokens > 0, "forward: no tokens to run");
  for (int i = 0; i < n_tokens; ++i) {
    check(tokens[i] >= 0 && tokens[i] < config_.n_vocab, "forward: token id ", tokens[i],
          " is outside the vocabulary of ", config_.n_vocab);
  }
  cache_.claim(pos, n_tokens);
  for (int i = 0; i < n_tokens; ++i) run_token(tokens[i], pos + i);

  // Logits for the last token only: the output matrix is the largest of the model.
  const int d = config_.n_embd;
  rmsnorm(x_.data(), x_.data(), model_.output_norm(), d, config_.rms_eps);
  // output (n_vocab, d) @ x (d,) -> logits (n_vocab,)
  linear(model_.output(), x_.data(), logits_.data(), 1, scratch_);
  return logits_.data();
}

void TransformerEngine::run_token(int token, int pos) {
  model_.embed(token, x_.data());  // x (d,) = token_embd[token]
  for (int layer = 0; layer < config_.n_layer; ++layer) {
    attention_block(layer, pos);
    ffn_block(layer);
  }
}

void TransformerEngine::attention_block(int layer, int pos) {
  const ModelConfig& c = config_;
  const LayerWeights& w = model_.layers()[layer];
  const int d = c.n_embd;
  const int q_dim = c.n_head * c.head_dim;
  const int kv_dim = c.kv_dim();

  rmsnorm(xb_.data(), x_.data(), w.attn_norm, d, c.rms_eps);
  linear(w.wq, xb_.data(), q_.data(), 1, scratch_);  // wq (n_head*hd, d) @ xb (d,) -> q
  linear(w.wk, xb_.data(), k_.data(), 1, scratch_);  // wk (kv_dim, d) @ xb (d,) -> k (kv_dim,)
  linear(w.wv, xb_.data(), v_.data(), 1, scratch_);  // wv (kv_dim, d) @ xb (d,) -> v (kv_dim,)
  if (w.bq != nullptr) add(q_.data(), w.bq, q_dim);  // qwen2's biases
  if (w.bk != nullptr) add(k_.data(), w.bk, kv_dim);
  if (w.bv != nullptr) add(v_.data(), w.bv, kv_dim);

  // Keys are cached already rotated for their position; the query rotates for its own.
  rope(q_.data(), c.n_head, c.head_dim, pos, c.rope);
  cache_.keep_sink_key(layer, pos, k_.data());  // Sinks are re-rotated after a wrap
  rope(k_.data(), c.n_head_kv, c.head_dim, pos, c.rope);
  cache_.store(layer, pos, k_.data(), v_.data());
  cache_.place_sinks(layer, pos, c.n_head_kv, c.head_dim, c.rope);

  // q (n_head, hd) over keys, values (n_keys, kv_dim) -> att (n_head * hd,)
  attention(att_.data(), q_.data(), cache_.keys(layer), cache_.values(layer), cache_.n_keys(pos),
            c.n_head, c.n_head_kv, c.head_dim, scores_.data());
  linear(w.wo, att_.data(), xb2_.data(), 1, scratch_);  // wo (d, n_head*hd) @ att -> xb2 (d,)
  add(x_.data(), xb2_.data(), d);                       // residual
}

void TransformerEngine::ffn_block(int layer) {
  const ModelConfig& c = config_;
  const LayerWeights& w = model_.layers()[layer];
  const int d = c.n_embd;

  rmsnorm(xb_.data(), x_.data(), w.ffn_norm, d, c.rms_eps);
  linear(w.w_gate, xb_.data(), hb_.data(), 1, scratch_);   // w_gate (n_ff, d) @ xb -> hb (n_ff,)
  linear(w.w_up, xb_.data(), hb2_.data(), 1, scratch_);    // w_up (n_ff, d) @ xb -> hb2 (n_ff,)
  swiglu(hb_.data(), hb2_.data(), c.n_ff);                 // hb = silu(hb) * hb2
  linear(w.w_down, hb_.data(), xb2_.data(), 1, scratch_);  // w_down (d, n_ff) @ hb -> xb2 (d,)
  add(x_.data(), xb2_.data(), d);                          // residual
}

}  // namespace

bool stage_runs(Arch arch) { return arch == Arch::Llama || arch == Arch::Qwen2; }

std::unique_ptr<Engine> create_engine(const Model& model, const EngineOptions& options) {
  require_stage_runs(model);
  check(options.n_ctx > 0, model.file().path(), ": context length must be positive, got ",
        options.n_ctx);
  try {
    return std::make_unique<TransformerEngine>(model, options);
  } catch (const std::bad_alloc&) {
    fail(model.file().path(), ": out of memory for the engine (KV cache of ", options.n_ctx,
         " positions)");
  }
}
