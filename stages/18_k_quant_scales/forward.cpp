// forward.cpp: the transformer, a batch of tokens at a time through every layer.
//
// Per token (d = n_embd, hd = head_dim, kv_dim = n_head_kv * hd):
//   x = embed(token)
//   per layer:  x += wo @ attention(rope(wq @ rmsnorm(x)), cache of rope(wk @ ..), wv @ ..)
//               x += w_down @ swiglu(w_gate @ rmsnorm(x), w_up @ rmsnorm(x))
//   logits = output @ rmsnorm(x)
// A prompt goes through each layer as one batch of up to kMaxBatch tokens (rows of
// x), so each weight matrix is read once per layer for the whole batch, not once per token.
// The engine packs every weight matrix once, at load, into the SIMD kernels' layout.
// The elementwise work between the matmuls (RMSNorm per token, SwiGLU) is shared by
// the threads too: one thread doing it alone made prefill scale 1.35x from 1 to 2 threads.
// q, k and v come from one linear() call, as do gate and up (matmul.cpp).
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

/// Elements of an elementwise kernel a thread takes at a time (11008 / 2048: a decode
/// step's SwiGLU splits into 6 slices).
constexpr int64_t kElementwiseStep = 2048;
// A parallel region costs a fork and a join, and a sleeping thread's wake-up. A decode step's
// RMSNorm (4096 floats, ~1 us) and SwiGLU (11008, ~4 us) are cheaper than that: with one token
// they run on the calling thread (`if (n > 1)`), and the threads meet only around the matmuls.

/// w packed (matmul.h). When the packed copy replaces it, w's pages of the mapped file are
/// released: the process then holds the weights once, not twice (7B Q4_0: 3.6 GB, not 7.2).
PackedWeight pack_and_release(const Model& model, const Weight& w) {
  PackedWeight p = pack_weight(w);
  if (!p.data.empty()) model.file().release(w.data, static_cast<size_t>(w.rows) * w.row_bytes);
  return p;
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

  /// A layer's matrices, packed (matmul.h).
  struct PackedLayer {
    PackedWeight wq, wk, wv, wo, w_gate, w_up, w_down;
  };

  const Model& model_;
  const ModelConfig& config_;
  std::vector<PackedLayer> layers_;
  PackedWeight output_;
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
  // A copy of the weights, reordered (3.6 GB for a 7B Q4_0 model: load_ms in the stats).
  auto pack = [&model](const Weight& w) { return pack_and_release(model, w); };
  for (const LayerWeights& l : model.layers()) {
    layers_.push_back({pack(l.wq), pack(l.wk), pack(l.wv), pack(l.wo), pack(l.w_gate), pack(l.w_up),
                       pack(l.w_down)});
  }
  output_ = pack(model.output());
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
  linear(output_, last, logits_.data(), 1, scratch_);
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
  const PackedLayer& p = layers_[layer];
  const int d = c.n_embd;
  const int q_dim = c.n_head * c.head_dim;
  const int kv_dim = c.kv_dim();

#pragma omp parallel for schedule(static) if (n > 1)
  for (int t = 0; t < n; ++t) {
    rmsnorm(xb_.data() + t * d, x_.data() + t * d, w.attn_norm, d, c.rms_eps);
  }
  // One linear() for the whole batch: each weight row is read once, used n times.
  // xb (n, d) @ wq^T, wk^T, wv^T -> q (n, n_head*hd), k (n, kv_dim), v (n, kv_dim)
  linear({{p.wq, q_.data()}, {p.wk, k_.data()}, {p.wv, v_.data()}}, xb_.data(), n, scratch_);
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
  linear(p.wo, att_.data(), xb2_.data(), n, scratch_);  // att (n, n_head*hd) @ wo^T -> xb2 (n, d)
  add(x_.data(), xb2_.data(), n * d);                   // residual
}

void TransformerEngine::ffn_block(int layer, int n) {
  const ModelConfig& c = config_;
  const LayerWeights& w = model_.layers()[layer];
  const PackedLayer& p = layers_[layer];
  const int d = c.n_embd;

#pragma omp parallel for schedule(static) if (n > 1)
  for (int t = 0; t < n; ++t) {
    rmsnorm(xb_.data() + t * d, x_.data() + t * d, w.ffn_norm, d, c.rms_eps);
  }
  // xb (n, d) @ w_gate^T, w_up^T -> hb (n, n_ff), hb2 (n, n_ff)
  linear({{p.w_gate, hb_.data()}, {p.w_up, hb2_.data()}}, xb_.data(), n, scratch_);
  const int64_t n_ff_all = static_cast<int64_t>(n) * c.n_ff;  // hb = silu(hb) * hb2, in slices
#pragma omp parallel for schedule(static) if (n > 1)
  for (int64_t i = 0; i < n_ff_all; i += kElementwiseStep) {
    swiglu(hb_.data() + i, hb2_.data() + i,
           static_cast<int>(std::min(kElementwiseStep, n_ff_all - i)));
  }
  linear(p.w_down, hb_.data(), xb2_.data(), n, scratch_);  // hb (n, n_ff) @ w_down^T -> xb2 (n, d)
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
    fail(model.file().path(), ": out of memory for the engine (packed weights, KV cache of ",
         options.n_ctx, " positions)");
  }
}
