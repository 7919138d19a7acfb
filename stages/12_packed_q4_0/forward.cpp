// forward.cpp: the transformer, a batch of tokens at a time through every layer.
//
// Per token (d = n_embd, hd = head_dim, kv_dim = n_head_kv * hd):
//   x = embed(token)
//   per layer:  x += wo @ attention(rope(wq @ rmsnorm(x)), cache of rope(wk @ ..), wv @ ..)
//               x += w_down @ swiglu(w_gate @ rmsnorm(x), w_up @ rmsnorm(x))
//   logits = output @ rmsnorm(x)
// A prompt goes through each layer as one batch of up to kMaxBatch tokens (rows of
// x), so each weight matrix is read once per layer for the whole batch, not once per token.
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

/// Tokens per batch. 512 is llama.cpp's default batch and the pp512 benchmark; the
/// activations of a 7B model's batch take ~110 MB.
constexpr int kMaxBatch = 512;
/// A batch's activations take at most this many bytes (a 7B model's 512 tokens take ~100 MB):
/// a file with very wide rows (n_ff = 2^20) gets fewer tokens per batch, not gigabytes.
constexpr size_t kMaxBatchBytes = size_t(128) << 20;

/// Tokens per batch: kMaxBatch, or fewer for a short context or wide rows.
int batch_tokens(const ModelConfig& c, int n_ctx) {
  // x, xb, xb2, q, att (d or n_head * hd each), k, v (kv_dim), and two rows of n_ff.
  const size_t row_floats = 5 * size_t(std::max(c.n_embd, c.n_head * c.head_dim)) +
                            2 * size_t(c.kv_dim()) + 2 * size_t(c.n_ff);
  const size_t fit = std::max<size_t>(1, kMaxBatchBytes / (row_floats * sizeof(float)));
  return static_cast<int>(std::max<size_t>(1, std::min({size_t(kMaxBatch), size_t(n_ctx), fit})));
}

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
  /// Runs n tokens at positions pos .. pos + n - 1 through every layer; leaves their hidden
  /// states in the rows of x_.
  void run_batch(const int* tokens, int n, int pos);
  void attention_block(int layer, int n, int pos);
  void ffn_block(int layer, int n);

  const Model& model_;
  const ModelConfig& config_;
  int n_threads_;  ///< OpenMP threads (default: physical cores, seed article §7.2)
  int max_batch_;  ///< Rows of the activation buffers
  KVCache cache_;
  MatmulScratch scratch_;
  // Activations of a batch of B = max_batch_ tokens, one row each, allocated once.
  AlignedFloats x_;       ///< (B, d) the residual stream
  AlignedFloats xb_;      ///< (B, d) rmsnorm(x), a block's input
  AlignedFloats xb2_;     ///< (B, d) a block's output
  AlignedFloats q_;       ///< (B, n_head * hd)
  AlignedFloats k_;       ///< (B, kv_dim)
  AlignedFloats v_;       ///< (B, kv_dim)
  AlignedFloats att_;     ///< (B, n_head * hd) attention output
  AlignedFloats scores_;  ///< (n_head, n_ctx) attention weights of one token
  AlignedFloats hb_;      ///< (B, n_ff) gate, then swiglu(gate, up)
  AlignedFloats hb2_;     ///< (B, n_ff) up
  AlignedFloats logits_;  ///< (n_vocab,)
};

TransformerEngine::TransformerEngine(const Model& model, const EngineOptions& options)
    : model_(model),
      config_(model.config()),
      n_threads_(options.n_threads),
      max_batch_(batch_tokens(model.config(), options.n_ctx)),
      cache_(config_.n_layer, options.n_ctx, config_.kv_dim()),
      x_(static_cast<size_t>(max_batch_) * config_.n_embd),
      xb_(static_cast<size_t>(max_batch_) * config_.n_embd),
      xb2_(static_cast<size_t>(max_batch_) * config_.n_embd),
      q_(static_cast<size_t>(max_batch_) * config_.n_head * config_.head_dim),
      k_(static_cast<size_t>(max_batch_) * config_.kv_dim()),
      v_(static_cast<size_t>(max_batch_) * config_.kv_dim()),
      att_(static_cast<size_t>(max_batch_) * config_.n_head * config_.head_dim),
      scores_(static_cast<size_t>(config_.n_head) * options.n_ctx),
      hb_(static_cast<size_t>(max_batch_) * config_.n_ff),
      hb2_(static_cast<size_t>(max_batch_) * config_.n_ff),
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
  // Batches of up to max_batch_ tokens. A batch never wraps the ring (a slot it
  // overwrote could still be needed by an earlier token of the same batch), so from the wrap on,
  // tokens go one at a time, as at decode time.
  int n = 0;
  for (int done = 0; done < n_tokens; done += n) {
    const int p = pos + done;
    n = std::min(n_tokens - done, max_batch_);
    if (p + n > cache_.capacity()) n = std::max(1, cache_.capacity() - p);
    run_batch(tokens + done, n, p);
  }

  // Logits for the last token only: the output matrix is the largest of the model.
  const int d = config_.n_embd;
  float* last = x_.data() + static_cast<size_t>(n - 1) * d;
  rmsnorm(last, last, model_.output_norm(), d, config_.rms_eps);
  // output (n_vocab, d) @ x (d,) -> logits (n_vocab,)
  linear(model_.output(), last, logits_.data(), 1, scratch_);
  return logits_.data();
}

void TransformerEngine::run_batch(const int* tokens, int n, int pos) {
  const size_t d = config_.n_embd;
  for (int t = 0; t < n; ++t) model_.embed(tokens[t], x_.data() + t * d);  // x[t] = token_embd[..]
  for (int layer = 0; layer < config_.n_layer; ++layer) {
    attention_block(layer, n, pos);
    ffn_block(layer, n);
  }
}

void TransformerEngine::attention_block(int layer, int n, int pos) {
  const ModelConfig& c = config_;
  const LayerWeights& w = model_.layers()[layer];
  const int d = c.n_embd;
  const int q_dim = c.n_head * c.head_dim;
  const int kv_dim = c.kv_dim();

  for (int t = 0; t < n; ++t) {
    rmsnorm(xb_.data() + t * d, x_.data() + t * d, w.attn_norm, d, c.rms_eps);
  }
  // One linear() per matrix for the whole batch: each weight row is read once, used n
  // times.
  linear(w.wq, xb_.data(), q_.data(), n, scratch_);  // xb (n, d) @ wq^T -> q (n, n_head*hd)
  linear(w.wk, xb_.data(), k_.data(), n, scratch_);  // xb (n, d) @ wk^T -> k (n, kv_dim)
  linear(w.wv, xb_.data(), v_.data(), n, scratch_);  // xb (n, d) @ wv^T -> v (n, kv_dim)
  for (int t = 0; t < n; ++t) {
    float* q = q_.data() + t * q_dim;
    float* k = k_.data() + t * kv_dim;
    float* v = v_.data() + t * kv_dim;
    if (w.bq != nullptr) add(q, w.bq, q_dim);  // qwen2's biases
    if (w.bk != nullptr) add(k, w.bk, kv_dim);
    if (w.bv != nullptr) add(v, w.bv, kv_dim);
    // Keys are cached already rotated for their position; the query rotates for its own.
    rope(q, c.n_head, c.head_dim, pos + t, c.rope);
    cache_.keep_sink_key(layer, pos + t, k);  // Sinks are re-rotated after a wrap
    rope(k, c.n_head_kv, c.head_dim, pos + t, c.rope);
    cache_.store(layer, pos + t, k, v);
    cache_.place_sinks(layer, pos + t, c.n_head_kv, c.head_dim, c.rope);
  }
  // Causal attention over the batch in one pass: token t sees the cache up to its own position.
  for (int t = 0; t < n; ++t) {
    // q (n_head, hd) over keys, values (n_keys, kv_dim) -> att (n_head * hd,)
    attention(att_.data() + t * q_dim, q_.data() + t * q_dim, cache_.keys(layer),
              cache_.values(layer), cache_.n_keys(pos + t), c.n_head, c.n_head_kv, c.head_dim,
              scores_.data());
  }
  linear(w.wo, att_.data(), xb2_.data(), n, scratch_);  // att (n, n_head*hd) @ wo^T -> xb2 (n, d)
  add(x_.data(), xb2_.data(), n * d);                   // residual
}

void TransformerEngine::ffn_block(int layer, int n) {
  const ModelConfig& c = config_;
  const LayerWeights& w = model_.layers()[layer];
  const int d = c.n_embd;

  for (int t = 0; t < n; ++t) {
    rmsnorm(xb_.data() + t * d, x_.data() + t * d, w.ffn_norm, d, c.rms_eps);
  }
  linear(w.w_gate, xb_.data(), hb_.data(), n, scratch_);   // xb (n, d) @ w_gate^T -> hb (n, n_ff)
  linear(w.w_up, xb_.data(), hb2_.data(), n, scratch_);    // xb (n, d) @ w_up^T -> hb2 (n, n_ff)
  swiglu(hb_.data(), hb2_.data(), n * c.n_ff);             // hb = silu(hb) * hb2
  linear(w.w_down, hb_.data(), xb2_.data(), n, scratch_);  // hb (n, n_ff) @ w_down^T -> xb2 (n, d)
  add(x_.data(), xb2_.data(), n * d);                      // residual
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
