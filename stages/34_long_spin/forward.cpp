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
// deepseek2 (DeepSeek-V2, V3, R1), its two new layers as the architecture writes them:
//   attention (MLA): c = rmsnorm(latent of wkv_a @ x); per head, key = [rope(k_pe), k_nope] and
//     value from wkv_b @ c, k_pe (qk_rope wide) shared by the heads; the cache holds the keys
//     and values so decompressed (n_head x (192 + 128) floats a token a layer for V2-Lite)
//   FFN (MoE), from layer n_dense_lead on: the shared experts' SwiGLU, plus the SwiGLU of each of
//     the n_expert_used experts the router picks for the token, weighted (moe.h); only those
//     experts' weights are read.
// MLA in the latent space (absorb.h): the cache holds [rope(k_pe), c] per token, one
//   row for all heads (576 floats for V2-Lite); the queries are folded through wkv_b's key part,
//   the attention's output through its value part.
// The experts at speed: a decode step's picked experts in one call (the threads split
//   all their rows), a prompt's tokens grouped by expert so each expert is read once per batch.
// Matrices that read inputs of their own (wkv_b's heads, the experts' down matrices) go through
//   one stacked call (matmul.h) each: a V2-Lite decode step meets the threads 8 times a layer.
// Several sequences (a server's requests), each with its own KV cache: a batch's rows may belong
//   to different sequences, each at its own position (Row), so one decode step of s sequences is
//   one pass over the weights for all of them, as a prompt's batch is.
// A decode step runs on the thread count that the last steps found faster (thread_chooser.h):
//   all of them on a quiet machine, fewer when another process keeps a core busy.
// Under mpirun, each process (rank) runs a range of the layers (pipeline.h): rank 0 embeds, sends
//   each batch's hidden states on and waits for the logits; ranks after it serve() batches, the
//   last one computing the logits. A prompt goes in small batches, so the ranks work at once.
#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "absorb.h"
#include "aligned.h"
#include "engine.h"
#include "error.h"
#include "kv_cache.h"
#include "matmul.h"
#include "moe.h"
#include "ops.h"
#include "pipeline.h"
#include "thread_chooser.h"
#include "timing.h"

namespace {

/// Tokens per batch. 512 is llama.cpp's default batch and the pp512 benchmark; the
/// activations of a 7B model's batch take ~110 MB.
constexpr int kMaxBatch = 512;
/// A batch's activations take at most this many bytes (a 7B model's 512 tokens take ~100 MB):
/// a file with very wide rows (n_ff = 2^20) gets fewer tokens per batch, not gigabytes.
constexpr size_t kMaxBatchBytes = size_t(128) << 20;
/// Query tokens whose attention goes over the cache together: a 7B layer's keys and values for
/// a 512-token prompt are 16 MB, which one query at a time read from memory once each. 16
/// measured no faster than 8 (7B, 512-token prompt, 2 threads), with twice the scores' scratch.
constexpr int kQueryBlock = 8;

/// The widest FFN row: the dense n_ff, the shared experts' n_ff_exp * n_shared, or decode's k
/// routed experts side by side.
int ffn_width(const ModelConfig& c) {
  const int n_ff_exp = c.moe.n_ff_exp;
  return std::max(
      {c.n_ff, n_ff_exp * std::max(1, c.moe.n_expert_shared), n_ff_exp * c.moe.n_expert_used});
}

/// A row of MLA's latents: the compressed query, or wkv_a's latent and RoPE key.
int latent_width(const ModelConfig& c) {
  return std::max(c.mla.q_lora_rank, c.mla.kv_lora_rank + c.mla.qk_rope);
}

/// A cached row of absorbed MLA, the RoPE key and the latent.
int latent_row_width(const ModelConfig& c) {
  return c.mla.qk_rope + c.mla.kv_lora_rank;
}

/// Every head's rows gathered for one stacked linear(): q_nope, the latent, the value head.
int gather_width(const ModelConfig& c) {
  return c.n_head * std::max({c.mla.qk_nope, c.mla.kv_lora_rank, c.mla.v_head});
}

/// Tokens per batch: kMaxBatch, or fewer for a short context or wide rows.
int batch_tokens(const ModelConfig& c, int n_ctx) {
  // x, xb, xb2, q, att (d or n_head * hd each), k, v (kv_dim), two rows of n_ff; two
  // latents and the router's logits; the absorbed queries, the attention's latent output and
  // every head's rows gathered, twice; an expert's tokens' rows and its output for them.
  const size_t row_floats = 5 * size_t(std::max(c.n_embd, c.n_head * c.head_dim)) +
                            2 * size_t(c.kv_dim()) + 2 * size_t(ffn_width(c)) +
                            2 * size_t(latent_width(c)) + c.moe.n_expert +
                            size_t(c.n_head) * (latent_row_width(c) + c.mla.kv_lora_rank) +
                            2 * size_t(gather_width(c)) + 2 * size_t(c.n_embd);
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

/// w packed, or nothing for a matrix the layer does not have (an empty Weight).
PackedWeight pack_if_present(const Model& model, const Weight& w) {
  return w.data != nullptr ? pack_and_release(model, w) : PackedWeight{};
}

/// A stacked expert tensor's n_expert matrices, each packed on its own (a token reads only its
/// experts' rows) but all in one block, on 2 MiB pages (matmul.h); nothing for a layer without.
PackedBlock pack_experts(const Model& model, const Weight& stacked, int n_expert) {
  if (stacked.data == nullptr) return {};
  std::vector<Weight> experts;
  for (int e = 0; e < n_expert; ++e) experts.push_back(expert_rows(stacked, e, n_expert));
  PackedBlock block = pack_weights(experts);
  if (block[0].packed()) {
    model.file().release(stacked.data, static_cast<size_t>(stacked.rows) * stacked.row_bytes);
  }
  return block;
}

/// y (n,) += b (n,): a bias, or a block's output onto the residual stream.
void add(float* y, const float* b, int n) {
  for (int i = 0; i < n; ++i) y[i] += b[i];
}

/// y (n,) += a * b (n,), an expert's output by its weight.
void add_scaled(float* y, float a, const float* b, int n) {
  for (int i = 0; i < n; ++i) y[i] += a * b[i];
}

class TransformerEngine final : public Engine {
 public:
  /// model must outlive the engine.
  TransformerEngine(const Model& model, const EngineOptions& options);

  float* forward(const int* tokens, int n_tokens, int pos) override {
    return forward_seq(0, tokens, n_tokens, pos);
  }
  float* forward_seq(int seq, const int* tokens, int n_tokens, int pos) override;
  float* forward_batch(const int* tokens, const int* seqs, const int* positions, int n) override;
  int context_length() const override { return caches_[0].capacity(); }
  bool slides_past_context() const override { return caches_[0].slides(); }
  int threads() const override { return n_threads_; }
  int sequences() const override { return static_cast<int>(caches_.size()); }
  /// True on ranks after 0: they run serve(), not forward().
  bool serves() const { return !pipe_.first(); }
  /// Runs the previous rank's batches until it says stop.
  void serve();

 private:
  void check_tokens(const int* tokens, int n) const;
  /// Runs n tokens through every layer, token t into rows[t]'s cache at its position; leaves
  /// their hidden states in the rows of x_.
  void run_batch(const int* tokens, int n, const Row* rows);
  /// logits_ (n, n_vocab) from the last n rows of x_ .. the first n: output @ rmsnorm(x[t]).
  void logits_of(const float* x, int n);
  void attention_block(int layer, int n, const Row* rows);
  void ffn_block(int layer, int n);
  /// deepseek2's attention (MLA) and mixture-of-experts FFN.
  void mla_attention_block(int layer, int n, const Row* rows);
  void moe_ffn_block(int layer, int n);
  /// The routed experts of one token (decode), or of a batch grouped by expert.
  struct PackedLayer;
  void decode_experts(const PackedLayer& p, int k);
  void prefill_experts(const PackedLayer& p, int n, int k);
  /// hb (n, n_ff) = swiglu(hb, hb2), in slices shared by the threads.
  void swiglu_rows(int n, int n_ff);

  /// A layer's matrices, packed (matmul.h). deepseek2's too; matrices a
  /// layer does not have stay empty.
  struct PackedLayer {
    PackedWeight wq, wk, wv, wo, w_gate, w_up, w_down;
    PackedWeight wq_a, wq_b, wkv_a;  ///< MLA
    AbsorbedKvB kv_b;                ///< wkv_b per head, for the latent space (absorb.h)
    PackedWeight router, gate_shexp, up_shexp, down_shexp;  ///< MoE
    PackedBlock gate_exps, up_exps, down_exps;  ///< all routed experts of a kind in one block
  };

  const Model& model_;
  const ModelConfig& config_;
  int max_batch_;                    ///< Rows of the activation buffers
  Pipeline pipe_;                    ///< this rank's layers, and the ranks before and after it
  std::vector<PackedLayer> layers_;  ///< all of them; only this rank's are packed
  PackedWeight output_;
  int n_threads_;                ///< OpenMP threads (default: physical cores, seed article §7.2)
  ThreadChooser chooser_;        ///< how many of them a decode step runs on (thread_chooser.h)
  std::vector<KVCache> caches_;  ///< one per sequence
  std::vector<Row> rows_;        ///< (B,) the rows of the batch being run
  MatmulScratch scratch_;
  // Activations of a batch of B = max_batch_ tokens, one row each, allocated once.
  AlignedFloats x_;       ///< (B, d) the residual stream
  AlignedFloats xb_;      ///< (B, d) rmsnorm(x), a block's input
  AlignedFloats xb2_;     ///< (B, d) a block's output
  AlignedFloats q_;       ///< (B, n_head * hd)
  AlignedFloats k_;       ///< (B, kv_dim)
  AlignedFloats v_;       ///< (B, kv_dim)
  AlignedFloats att_;     ///< (B, n_head * hd) attention output
  AlignedFloats scores_;  ///< (kQueryBlock, n_head, n_ctx) attention weights of a query block
  AlignedFloats hb_;      ///< (B, n_ff) gate, then swiglu(gate, up)
  AlignedFloats hb2_;     ///< (B, n_ff) up
  AlignedFloats logits_;  ///< (n_seq, n_vocab): a decode step's, one row per sequence
  // deepseek2's activations.
  AlignedFloats latent_;    ///< (B, q_lora_rank or kv_lora_rank + qk_rope) wq_a's or wkv_a's output
  AlignedFloats latent2_;   ///< (B, kv_lora_rank) rmsnorm(c), wkv_b's input; or the normed query
  AlignedFloats router_;    ///< (B, n_expert) the router's logits, then probabilities
  AlignedFloats expert_x_;  ///< (B, d) The rows of xb of one expert's tokens
  AlignedFloats expert_y_;  ///< (B, d) that expert's output for them; decode's (k, d) outputs
  std::vector<ExpertPick> routes_;         ///< (B, n_expert_used) Every token's picks
  std::vector<int> first_, next_, order_;  ///< routes_ sorted by expert
  std::vector<LinearPart> expert_parts_;   ///< Decode's gate and up, then down matrices
  std::vector<LinearPart> head_parts_;     ///< wkv_b's per-head matrices, one per head
  // Absorbed MLA's.
  AlignedFloats q_abs_;            ///< (B, n_head, qk_rope + kv_lora_rank) absorbed queries
  AlignedFloats att_lat_;          ///< (B, n_head, kv_lora_rank) attention output, latent space
  AlignedFloats gather_;           ///< (n_head, B, row) every head's rows, gathered
  AlignedFloats gathered_;         ///< (n_head, B, row) linear_stacked() of them
  std::vector<float> cache_row_;   ///< (qk_rope + kv_lora_rank,) one token's cached row
  std::vector<ExpertPick> picks_;  ///< one token's routed experts
};

TransformerEngine::TransformerEngine(const Model& model, const EngineOptions& options)
    : model_(model),
      config_(model.config()),
      max_batch_(batch_tokens(model.config(), options.n_ctx)),
      pipe_(model, max_batch_),
      n_threads_(options.n_threads),
      chooser_(std::max(1, options.n_threads)),
      rows_(max_batch_),
      x_(static_cast<size_t>(max_batch_) * config_.n_embd),
      xb_(static_cast<size_t>(max_batch_) * config_.n_embd),
      xb2_(static_cast<size_t>(max_batch_) * config_.n_embd),
      q_(static_cast<size_t>(max_batch_) * config_.n_head * config_.head_dim),
      k_(static_cast<size_t>(max_batch_) * config_.kv_dim()),
      v_(static_cast<size_t>(max_batch_) * config_.kv_dim()),
      att_(static_cast<size_t>(max_batch_) * config_.n_head * config_.head_dim),
      scores_(static_cast<size_t>(kQueryBlock) * config_.n_head * options.n_ctx),
      hb_(static_cast<size_t>(max_batch_) * ffn_width(config_)),
      hb2_(static_cast<size_t>(max_batch_) * ffn_width(config_)),
      logits_(static_cast<size_t>(std::max(1, options.n_seq)) * config_.n_vocab),
      latent_(static_cast<size_t>(max_batch_) * latent_width(config_)),
      latent2_(static_cast<size_t>(max_batch_) * latent_width(config_)),
      router_(static_cast<size_t>(max_batch_) * config_.moe.n_expert),
      expert_x_(static_cast<size_t>(max_batch_) * config_.n_embd),
      expert_y_(static_cast<size_t>(std::max(max_batch_, config_.moe.n_expert_used)) *
                config_.n_embd),
      routes_(static_cast<size_t>(max_batch_) * config_.moe.n_expert_used),
      first_(config_.moe.n_expert + 1),
      next_(config_.moe.n_expert),
      order_(static_cast<size_t>(max_batch_) * config_.moe.n_expert_used),
      q_abs_(static_cast<size_t>(max_batch_) * config_.n_head * latent_row_width(config_)),
      att_lat_(static_cast<size_t>(max_batch_) * config_.n_head * config_.mla.kv_lora_rank),
      gather_(static_cast<size_t>(max_batch_) * gather_width(config_)),
      gathered_(static_cast<size_t>(max_batch_) * gather_width(config_)),
      cache_row_(latent_row_width(config_)) {
  const ModelConfig& c = config_;
  const std::string& path = model.file().path();
  check(c.n_head_kv > 0 && c.n_head % c.n_head_kv == 0, path, ": n_head ", c.n_head,
        " is not a multiple of n_head_kv ", c.n_head_kv);
  check(c.rope.n_rot > 0 && c.rope.n_rot % 2 == 0 && c.rope.n_rot <= c.head_dim, path,
        ": rope dimension ", c.rope.n_rot, " must be even and at most head_dim ", c.head_dim);
  check(n_threads_ > 0, path, ": thread count must be positive, got ", n_threads_);
  check(options.n_seq >= 1 && options.n_seq <= max_batch_, path, ": ", options.n_seq,
        " sequences asked; this context holds 1 to ", max_batch_, " (one batch row each)");
  // MLA caches one row [k_pe, c] per position, no values of their own. This rank's layers only.
  const bool mla = c.arch == Arch::DeepSeek2;
  const LayerRange& mine = pipe_.layers();
  caches_.reserve(options.n_seq);
  for (int seq = 0; seq < options.n_seq; ++seq) {
    caches_.emplace_back(mine.end - mine.first, options.n_ctx,
                         mla ? latent_row_width(c) : c.kv_dim(), mla ? 0 : c.kv_dim(), mine.first);
  }
  omp_set_num_threads(n_threads_);  // Every parallel loop uses this many threads
  // A copy of this rank's weights, reordered (3.6 GB for a 7B Q4_0 model: load_ms in the stats).
  // The other ranks' are never read, so their pages of the file are never in this process.
  auto pack = [&model](const Weight& w) { return pack_if_present(model, w); };
  const int n_expert = c.moe.n_expert;
  layers_.resize(c.n_layer);
  for (int layer = pipe_.layers().first; layer < pipe_.layers().end; ++layer) {
    const LayerWeights& l = model.layers()[layer];
    PackedLayer p{pack(l.wq),
                  pack(l.wk),
                  pack(l.wv),
                  pack(l.wo),
                  pack(l.w_gate),
                  pack(l.w_up),
                  pack(l.w_down),
                  pack(l.wq_a),
                  pack(l.wq_b),
                  pack(l.wkv_a),
                  {},
                  pack(l.router),
                  pack(l.gate_shexp),
                  pack(l.up_shexp),
                  pack(l.down_shexp),
                  pack_experts(model, l.gate_exps, n_expert),
                  pack_experts(model, l.up_exps, n_expert),
                  pack_experts(model, l.down_exps, n_expert)};
    // wkv_b split per head and its key part transposed, for the latent space.
    if (l.wkv_b.data != nullptr) p.kv_b = absorb_kv_b(model, l.wkv_b);
    layers_[layer] = std::move(p);
  }
  if (pipe_.last()) output_ = pack(model.output());
}

void TransformerEngine::check_tokens(const int* tokens, int n) const {
  check(n > 0, "forward: no tokens to run");
  for (int i = 0; i < n; ++i) {
    check(tokens[i] >= 0 && tokens[i] < config_.n_vocab, "forward: token id ", tokens[i],
          " is outside the vocabulary of ", config_.n_vocab);
  }
}

float* TransformerEngine::forward_seq(int seq, const int* tokens, int n_tokens, int pos) {
  check_tokens(tokens, n_tokens);
  check(seq >= 0 && seq < sequences(), "forward: sequence ", seq, " of ", sequences());
  KVCache& cache = caches_[seq];
  cache.claim(pos, n_tokens);
  // A decode step of this process alone runs on the chooser's count and tells it how long it
  // took; prompts, and ranks that wait on each other, use every thread.
  const bool decode_step = n_tokens == 1 && pipe_.alone();
  omp_set_num_threads(decode_step ? chooser_.next() : n_threads_);
  const double start = now_ms();
  // Batches of up to max_batch_ tokens. A batch never wraps the ring (a slot it
  // overwrote could still be needed by an earlier token of the same batch), so from the wrap on,
  // tokens go one at a time, as at decode time.
  int n = 0;
  for (int done = 0; done < n_tokens; done += n) {
    const int p = pos + done;
    n = std::min(n_tokens - done, pipe_.micro_batch(n_tokens, max_batch_));
    if (p + n > cache.capacity()) n = std::max(1, cache.capacity() - p);
    for (int t = 0; t < n; ++t) rows_[t] = {seq, p + t};
    run_batch(tokens + done, n, rows_.data());
    if (!pipe_.alone()) pipe_.send_batch(rows_.data(), n, done + n == n_tokens, x_.data());
  }
  // Logits for the last token only: the output matrix is the largest of the model.
  if (pipe_.alone()) {
    logits_of(x_.data() + static_cast<size_t>(n - 1) * config_.n_embd, 1);
  } else {
    pipe_.receive_logits(logits_.data(), 1);
  }
  if (decode_step) chooser_.record(now_ms() - start);
  return logits_.data();
}

float* TransformerEngine::forward_batch(const int* tokens, const int* seqs, const int* positions,
                                        int n) {
  check_tokens(tokens, n);
  check(n <= sequences(), "forward_batch: ", n, " rows, the engine holds ", sequences(),
        " sequences");
  for (int i = 0; i < n; ++i) {
    check(seqs[i] >= 0 && seqs[i] < sequences(), "forward_batch: sequence ", seqs[i], " of ",
          sequences());
    for (int j = 0; j < i; ++j) {
      check(seqs[j] != seqs[i], "forward_batch: sequence ", seqs[i], " twice in one step");
    }
    // Checked for all rows before any cache counts its row: a bad one leaves every cache as is.
    const int length = caches_[seqs[i]].length();
    check(positions[i] == length || positions[i] == 0, "forward_batch: sequence ", seqs[i],
          " holds ", length, " positions; position ", positions[i], " would leave a gap");
  }
  for (int i = 0; i < n; ++i) {
    caches_[seqs[i]].claim(positions[i], 1);
    rows_[i] = {seqs[i], positions[i]};
  }
  omp_set_num_threads(n_threads_);  // the server's batches: every thread
  run_batch(tokens, n, rows_.data());
  if (pipe_.alone()) {
    logits_of(x_.data(), n);
  } else {
    pipe_.send_batch(rows_.data(), n, n, x_.data());
    pipe_.receive_logits(logits_.data(), n);
  }
  return logits_.data();
}

void TransformerEngine::serve() {
  const size_t d = config_.n_embd;
  int n_logits = 0;
  for (int n; (n = pipe_.receive_batch(rows_.data(), &n_logits, x_.data())) > 0;) {
    for (int t = 0; t < n; ++t) caches_[rows_[t].seq].claim(rows_[t].pos, 1);  // as rank 0 did
    run_batch(nullptr, n, rows_.data());
    if (!pipe_.last()) {
      pipe_.send_batch(rows_.data(), n, n_logits, x_.data());
    } else if (n_logits > 0) {  // the last n_logits rows' logits, to rank 0
      logits_of(x_.data() + (n - n_logits) * d, n_logits);
      pipe_.send_logits(logits_.data(), n_logits);
    }
  }
}

void TransformerEngine::logits_of(const float* x, int n) {
  const int d = config_.n_embd;
  for (int t = 0; t < n; ++t) {
    rmsnorm(xb_.data() + static_cast<size_t>(t) * d, x + static_cast<size_t>(t) * d,
            model_.output_norm(), d, config_.rms_eps);
  }
  // output (n_vocab, d) @ xb (n, d) -> logits (n, n_vocab)
  linear(output_, xb_.data(), logits_.data(), n, scratch_);
}

void TransformerEngine::run_batch(const int* tokens, int n, const Row* rows) {
  const size_t d = config_.n_embd;
  // x[t] = token_embd[tokens[t]] on rank 0; the later ranks received x.
  for (int t = 0; pipe_.first() && t < n; ++t) model_.embed(tokens[t], x_.data() + t * d);
  const bool mla = config_.arch == Arch::DeepSeek2;
  for (int layer = pipe_.layers().first; layer < pipe_.layers().end; ++layer) {
    if (mla) {
      mla_attention_block(layer, n, rows);
    } else {
      attention_block(layer, n, rows);
    }
    if (config_.moe.is_moe_layer(layer)) {
      moe_ffn_block(layer, n);
    } else {
      ffn_block(layer, n);
    }
  }
}

void TransformerEngine::attention_block(int layer, int n, const Row* rows) {
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
    const int pos = rows[t].pos;
    KVCache& cache = caches_[rows[t].seq];
    rope(q, c.n_head, c.head_dim, pos, c.rope);
    cache.keep_sink_key(layer, pos, k);  // Sinks are re-rotated after a wrap
    rope(k, c.n_head_kv, c.head_dim, pos, c.rope);
    cache.store(layer, pos, k, v);
    cache.place_sinks(layer, pos, c.n_head_kv, c.head_dim, c.rope);
  }
  // Causal attention over the batch: token t sees its sequence's cache up to its own position.
  // Up to kQueryBlock consecutive tokens of one sequence go together, so that each block of the
  // cache is read once for all of them (ops.h).
  const AttentionShape shape = plain_heads(c.n_head, c.n_head_kv, c.head_dim);
  for (int t = 0; t < n;) {
    const KVCache& cache = caches_[rows[t].seq];
    int n_keys[kQueryBlock];
    int count = 0;
    for (; count < kQueryBlock && t + count < n && rows[t + count].seq == rows[t].seq; ++count)
      n_keys[count] = cache.n_keys(rows[t + count].pos);
    // q (count, n_head, hd) over keys, values (n_keys, kv_dim) -> att (count, n_head * hd)
    attention(att_.data() + t * q_dim, q_dim, q_.data() + t * q_dim, q_dim, cache.keys(layer),
              cache.values(layer), n_keys, count, shape, scores_.data());
    t += count;
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
  swiglu_rows(n, c.n_ff);
  linear(p.w_down, hb_.data(), xb2_.data(), n, scratch_);  // hb (n, n_ff) @ w_down^T -> xb2 (n, d)
  add(x_.data(), xb2_.data(), n * d);                      // residual
}

void TransformerEngine::swiglu_rows(int n, int n_ff) {
  const int64_t n_ff_all = static_cast<int64_t>(n) * n_ff;  // hb = silu(hb) * hb2, in slices
#pragma omp parallel for schedule(static) if (n > 1)
  for (int64_t i = 0; i < n_ff_all; i += kElementwiseStep) {
    swiglu(hb_.data() + i, hb2_.data() + i,
           static_cast<int>(std::min(kElementwiseStep, n_ff_all - i)));
  }
}

void TransformerEngine::mla_attention_block(int layer, int n, const Row* rows) {
  const ModelConfig& c = config_;
  const MlaConfig& m = c.mla;
  const LayerWeights& w = model_.layers()[layer];
  const PackedLayer& p = layers_[layer];
  const int d = c.n_embd;
  const int k_head = m.k_head();        // 192 for V2-Lite: qk_nope 128 + qk_rope 64
  const int q_dim = c.n_head * k_head;  // = kv_dim(): keys as wide as queries
  const int kv_a_dim = m.kv_lora_rank + m.qk_rope;
  const int v_dim = c.n_head * m.v_head;

#pragma omp parallel for schedule(static) if (n > 1)
  for (int t = 0; t < n; ++t) {
    rmsnorm(xb_.data() + t * d, x_.data() + t * d, w.attn_norm, d, c.rms_eps);
  }
  // The query: xb (n, d) @ wq^T -> q (n, n_head * k_head), or through the compressed query
  // (q_lora_rank): q = wq_b @ rmsnorm(wq_a @ xb). The latent and RoPE key: xb @ wkv_a^T ->
  // (n, kv_lora_rank + qk_rope), in latent2_ when latent_ holds the compressed query.
  float* kv_a = m.q_lora_rank > 0 ? latent2_.data() : latent_.data();
  if (m.q_lora_rank > 0) {
    linear({{p.wq_a, latent_.data()}, {p.wkv_a, kv_a}}, xb_.data(), n, scratch_);
    for (int t = 0; t < n; ++t) {
      float* q_a = latent_.data() + static_cast<size_t>(t) * m.q_lora_rank;  // (q_lora_rank,)
      rmsnorm(q_a, q_a, w.q_a_norm, m.q_lora_rank, c.rms_eps);
    }
    linear(p.wq_b, latent_.data(), q_.data(), n, scratch_);  // (n, q_lora) @ wq_b^T -> q
  } else {
    linear({{p.wq, q_.data()}, {p.wkv_a, kv_a}}, xb_.data(), n, scratch_);
  }
  // c (n, kv_lora_rank) = rmsnorm of each row's latent.
  float* c_norm = m.q_lora_rank > 0 ? latent_.data() : latent2_.data();
  for (int t = 0; t < n; ++t) {
    rmsnorm(c_norm + static_cast<size_t>(t) * m.kv_lora_rank,
            kv_a + static_cast<size_t>(t) * kv_a_dim, w.kv_a_norm, m.kv_lora_rank, c.rms_eps);
  }
  // The latent is what the cache holds (and wkv_b is not applied to it): per token a
  // row [rope(k_pe), c] of qk_rope + kv_lora_rank floats, one key head for all query heads.
  const int row_dim = m.qk_rope + m.kv_lora_rank;  // 576 for V2-Lite
  for (int t = 0; t < n; ++t) {
    const float* c_t = c_norm + static_cast<size_t>(t) * m.kv_lora_rank;
    const float* k_pe = kv_a + static_cast<size_t>(t) * kv_a_dim + m.kv_lora_rank;
    std::copy(k_pe, k_pe + m.qk_rope, cache_row_.begin());
    std::copy(c_t, c_t + m.kv_lora_rank, cache_row_.begin() + m.qk_rope);
    const int pos = rows[t].pos;
    KVCache& cache = caches_[rows[t].seq];
    cache.keep_sink_key(layer, pos, cache_row_.data());
    rope(cache_row_.data(), 1, row_dim, pos, c.rope);  // turns the first qk_rope floats
    cache.store(layer, pos, cache_row_.data(), nullptr);
    cache.place_sinks(layer, pos, 1, row_dim, c.rope);
  }
  // The absorbed queries, per head [rope(q_pe_h), W_uk_h^T q_nope_h] (absorb.h): q_abs (n,
  // n_head, row_dim). Every head's q_nope rows are gathered, head after head, for one call.
  head_parts_.clear();
  for (int h = 0; h < c.n_head; ++h) {
    float* x_h = gather_.data() + static_cast<size_t>(h) * n * m.qk_nope;
    for (int t = 0; t < n; ++t) {
      const float* q_nope = q_.data() + static_cast<size_t>(t) * q_dim + h * k_head;
      std::copy(q_nope, q_nope + m.qk_nope, x_h + static_cast<size_t>(t) * m.qk_nope);
    }
    head_parts_.push_back(
        {p.kv_b.uk_t[h], gathered_.data() + static_cast<size_t>(h) * n * m.kv_lora_rank});
  }
  // (n_head, n, qk_nope), head h @ (W_uk_h^T)^T -> (n_head, n, kv_lora_rank)
  linear_stacked(head_parts_.data(), head_parts_.size(), gather_.data(), n, scratch_);
  for (int h = 0; h < c.n_head; ++h) {
    for (int t = 0; t < n; ++t) {
      float* q_abs = q_abs_.data() + (static_cast<size_t>(t) * c.n_head + h) * row_dim;
      const float* q_pe = q_.data() + static_cast<size_t>(t) * q_dim + h * k_head + m.qk_nope;
      const float* q_lat = gathered_.data() + (static_cast<size_t>(h) * n + t) * m.kv_lora_rank;
      std::copy(q_pe, q_pe + m.qk_rope, q_abs);
      std::copy(q_lat, q_lat + m.kv_lora_rank, q_abs + m.qk_rope);
    }
  }
  // Attention in the latent space: q_abs (n_head, row_dim) over the cached rows, whose last
  // kv_lora_rank floats are also the values -> att_lat (n_head, kv_lora_rank) per token. The
  // scores are plain MLA's, so is their scale.
  const AttentionShape shape{c.n_head, 1, row_dim, m.kv_lora_rank, m.kq_scale, row_dim};
  for (int t = 0; t < n; ++t) {
    const KVCache& cache = caches_[rows[t].seq];
    const float* keys = cache.keys(layer);
    float* q_abs = q_abs_.data() + static_cast<size_t>(t) * c.n_head * row_dim;
    rope(q_abs, c.n_head, row_dim, rows[t].pos, c.rope);
    attention(att_lat_.data() + static_cast<size_t>(t) * c.n_head * m.kv_lora_rank, q_abs, keys,
              keys + m.qk_rope, cache.n_keys(rows[t].pos), shape, scores_.data());
  }
  // Back to value space, per head: att_h = W_uv_h @ att_lat_h -> att (n, n_head * v_head),
  // every head's rows gathered for one call as above.
  head_parts_.clear();
  for (int h = 0; h < c.n_head; ++h) {
    float* x_h = gather_.data() + static_cast<size_t>(h) * n * m.kv_lora_rank;
    for (int t = 0; t < n; ++t) {
      const float* a = att_lat_.data() + (static_cast<size_t>(t) * c.n_head + h) * m.kv_lora_rank;
      std::copy(a, a + m.kv_lora_rank, x_h + static_cast<size_t>(t) * m.kv_lora_rank);
    }
    head_parts_.push_back({p.kv_b.uv[h], gathered_.data() + static_cast<size_t>(h) * n * m.v_head});
  }
  // (n_head, n, kv_lora_rank), head h @ W_uv_h^T -> (n_head, n, v_head)
  linear_stacked(head_parts_.data(), head_parts_.size(), gather_.data(), n, scratch_);
  for (int h = 0; h < c.n_head; ++h) {
    for (int t = 0; t < n; ++t) {
      const float* o = gathered_.data() + (static_cast<size_t>(h) * n + t) * m.v_head;
      std::copy(o, o + m.v_head, att_.data() + static_cast<size_t>(t) * v_dim + h * m.v_head);
    }
  }
  linear(p.wo, att_.data(), xb2_.data(), n, scratch_);  // att (n, n_head*v_head) @ wo^T -> (n, d)
  add(x_.data(), xb2_.data(), n * d);                   // residual
}

void TransformerEngine::moe_ffn_block(int layer, int n) {
  const ModelConfig& c = config_;
  const MoeConfig& e = c.moe;
  const LayerWeights& w = model_.layers()[layer];
  const PackedLayer& p = layers_[layer];
  const int d = c.n_embd;

#pragma omp parallel for schedule(static) if (n > 1)
  for (int t = 0; t < n; ++t) {
    rmsnorm(xb_.data() + t * d, x_.data() + t * d, w.ffn_norm, d, c.rms_eps);
  }
  // The router and the shared experts read the same x: one call.
  // xb (n, d) @ router^T, gate_shexp^T, up_shexp^T -> logits (n, n_expert), hb, hb2
  if (e.n_expert_shared > 0) {
    linear({{p.router, router_.data()}, {p.gate_shexp, hb_.data()}, {p.up_shexp, hb2_.data()}},
           xb_.data(), n, scratch_);
    swiglu_rows(n, e.n_ff_exp * e.n_expert_shared);
    linear(p.down_shexp, hb_.data(), xb2_.data(), n, scratch_);  // the shared experts -> xb2
  } else {
    linear(p.router, xb_.data(), router_.data(), n, scratch_);
    std::fill(xb2_.data(), xb2_.data() + static_cast<size_t>(n) * d, 0.0f);
  }
  const int k = e.n_expert_used;
  for (int t = 0; t < n; ++t) {  // routes_[t * k + j]: token t's j-th expert and its weight
    route(e, router_.data() + static_cast<size_t>(t) * e.n_expert, w.router_bias, picks_);
    std::copy(picks_.begin(), picks_.end(), routes_.begin() + static_cast<size_t>(t) * k);
  }
  if (n == 1) {
    decode_experts(p, k);
  } else {
    prefill_experts(p, n, k);
  }
  add(x_.data(), xb2_.data(), n * d);  // residual
}

void TransformerEngine::decode_experts(const PackedLayer& p, int k) {
  const MoeConfig& e = config_.moe;
  const int d = config_.n_embd;
  // The k experts' gate and up matrices in one call: the threads share out the rows of
  // all 2k matrices (12 of 1408 x 2048 for V2-Lite), meeting once, not once per expert.
  // xb (d,) -> hb, hb2 (k, n_ff_exp): expert j's slice at j * n_ff_exp
  expert_parts_.clear();
  for (int j = 0; j < k; ++j) {
    const int x = routes_[j].expert;
    expert_parts_.push_back({p.gate_exps[x], hb_.data() + static_cast<size_t>(j) * e.n_ff_exp});
    expert_parts_.push_back({p.up_exps[x], hb2_.data() + static_cast<size_t>(j) * e.n_ff_exp});
  }
  linear(expert_parts_.data(), expert_parts_.size(), xb_.data(), 1, scratch_);
  swiglu(hb_.data(), hb2_.data(), k * e.n_ff_exp);
  // The k down matrices in one call too, each reading its expert's slice of hb, stacked:
  // hb (k, n_ff_exp), slice j @ down_x^T -> expert_y (k, d), then weighted onto xb2.
  expert_parts_.clear();
  for (int j = 0; j < k; ++j) {
    expert_parts_.push_back(
        {p.down_exps[routes_[j].expert], expert_y_.data() + static_cast<size_t>(j) * d});
  }
  linear_stacked(expert_parts_.data(), expert_parts_.size(), hb_.data(), 1, scratch_);
  for (int j = 0; j < k; ++j) {
    add_scaled(xb2_.data(), routes_[j].weight, expert_y_.data() + static_cast<size_t>(j) * d, d);
  }
}

void TransformerEngine::prefill_experts(const PackedLayer& p, int n, int k) {
  const MoeConfig& e = config_.moe;
  const int d = config_.n_embd;
  // The batch's (token, expert) pairs sorted by expert (a counting sort): expert x's
  // pairs are order_[first_[x] .. first_[x + 1] - 1], indices into routes_.
  std::fill(first_.begin(), first_.end(), 0);
  for (int i = 0; i < n * k; ++i) ++first_[routes_[i].expert + 1];
  for (int x = 0; x < e.n_expert; ++x) first_[x + 1] += first_[x];
  std::copy(first_.begin(), first_.end() - 1, next_.begin());
  for (int i = 0; i < n * k; ++i) order_[next_[routes_[i].expert]++] = i;
  // Each expert once for all the tokens that picked it: its rows read once per batch, not once
  // per token (V2-Lite, 512 tokens: each expert for ~48 of them).
  for (int x = 0; x < e.n_expert; ++x) {
    const int n_x = first_[x + 1] - first_[x];
    if (n_x == 0) continue;
    const int* pairs = order_.data() + first_[x];
    for (int i = 0; i < n_x; ++i) {  // expert_x (n_x, d): the rows of xb of its tokens
      const float* row = xb_.data() + static_cast<size_t>(pairs[i] / k) * d;
      std::copy(row, row + d, expert_x_.data() + static_cast<size_t>(i) * d);
    }
    // expert_x (n_x, d) @ gate_x^T, up_x^T -> hb, hb2 (n_x, n_ff_exp); hb @ down_x^T -> (n_x, d)
    linear({{p.gate_exps[x], hb_.data()}, {p.up_exps[x], hb2_.data()}}, expert_x_.data(), n_x,
           scratch_);
    swiglu_rows(n_x, e.n_ff_exp);
    linear(p.down_exps[x], hb_.data(), expert_y_.data(), n_x, scratch_);
    for (int i = 0; i < n_x; ++i) {  // xb2[t] += weight * expert_x(xb[t])
      const ExpertPick& pick = routes_[pairs[i]];
      add_scaled(xb2_.data() + static_cast<size_t>(pairs[i] / k) * d, pick.weight,
                 expert_y_.data() + static_cast<size_t>(i) * d, d);
    }
  }
}

}  // namespace

/// deepseek2 too.
bool stage_runs(Arch) {
  return true;
}

std::unique_ptr<Engine> create_engine(const Model& model, const EngineOptions& options) {
  require_stage_runs(model);
  check(options.n_ctx > 0, model.file().path(), ": context length must be positive, got ",
        options.n_ctx);
  std::unique_ptr<TransformerEngine> engine;
  try {
    engine = std::make_unique<TransformerEngine>(model, options);
  } catch (const std::bad_alloc&) {
    fail(model.file().path(), ": out of memory for the engine (packed weights, KV cache of ",
         options.n_ctx, " positions)");
  }
  if (engine->serves()) {  // a rank after 0: serve rank 0's batches, then end the process here
    engine->serve();
    engine.reset();  // reports, ends MPI
    std::exit(0);
  }
  return engine;
}
