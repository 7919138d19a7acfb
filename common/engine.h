// engine.h: what each stage provides. common/ declares it; every stages/NN_name/ defines it.
//
// The generation loop, CLI and tests talk to a stage only through this header, so one test suite
// and one main() serve every stage. Shapes use the model's config: d = n_embd, hd = head_dim.
#pragma once

#include <memory>
#include <vector>

#include "error.h"
#include "model.h"
#include "sampler.h"

struct EngineOptions {
  int n_ctx = 0;      ///< KV cache positions (validated > 0 by the caller), per sequence
  int n_threads = 1;  ///< stages before 04 are single-threaded and ignore it
  int n_seq = 1;      ///< sequences held at once, each with its own cache (kFirstBatchedStage on)
};

/// The first stage that holds several sequences and decodes them together (the server's).
inline constexpr const char* kFirstBatchedStage = "23_batched_sequences";

class Engine {
 public:
  virtual ~Engine() = default;
  /// Runs n_tokens tokens at positions pos, pos+1, ..., appending them to the KV cache. pos is
  /// the number of tokens already run (continue) or 0 (start again); any other is an Error, since
  /// the cache rows in between would hold nothing. Returns the logits (n_vocab) after the last
  /// one; valid until the next call.
  virtual float* forward(const int* tokens, int n_tokens, int pos) = 0;
  /// KV cache positions.
  virtual int context_length() const = 0;
  /// True when the cache slides (a ring): forward() accepts positions past context_length().
  virtual bool slides_past_context() const = 0;
  /// Threads actually used.
  virtual int threads() const = 0;

  // Several sequences (EngineOptions::n_seq), each with its own KV cache; forward() is sequence 0.
  /// Sequences held: 1 in the stages before kFirstBatchedStage.
  virtual int sequences() const { return 1; }
  /// forward() for sequence seq (0 .. sequences() - 1).
  virtual float* forward_seq(int seq, const int* tokens, int n_tokens, int pos) {
    check(seq == 0, "sequence ", seq, ": this stage holds one sequence (", kFirstBatchedStage,
          " and later hold several)");
    return forward(tokens, n_tokens, pos);
  }
  /// One token of each of n different sequences together: tokens[i] at position positions[i] of
  /// sequence seqs[i] (each continues its sequence, as forward() does), so each weight is read
  /// once for all of them. Returns the logits (n, n_vocab), row i for sequence seqs[i]; valid
  /// until the next call.
  virtual float* forward_batch(const int* tokens, const int* seqs, const int* positions, int n) {
    check(n == 1, "this stage runs one sequence at a time (", kFirstBatchedStage,
          " and later run several together)");
    return forward_seq(seqs[0], tokens, 1, positions[0]);
  }
};

/// The stage's engine for model. Throws Error when the model cannot be run (e.g. out of memory,
/// or an architecture the stage does not run: require_stage_runs).
std::unique_ptr<Engine> create_engine(const Model& model, const EngineOptions& options);

/// True when this stage runs models of arch. Stages before kFirstDeepSeek2Stage run the dense
/// llama and qwen2 only: deepseek2's attention and FFN are other layers.
bool stage_runs(Arch arch);
/// The first stage that runs deepseek2 (MLA and mixture of experts).
inline constexpr const char* kFirstDeepSeek2Stage = "20_mla_moe";

/// Throws Error unless stage_runs(model's architecture), naming the file and the stage that does.
inline void require_stage_runs(const Model& model) {
  const ModelConfig& c = model.config();
  check(stage_runs(c.arch), model.file().path(), ": architecture '", c.arch_name,
        "' (multi-head latent attention, mixture of experts) needs stage ", kFirstDeepSeek2Stage,
        " or later");
}

// ---- Kernels, exposed so the shared suite checks every stage's versions. ----

/// Scratch a stage's matmul may need: stages 01-04 dequantize a whole weight matrix into
/// weights_f32; later stages quantize activations into x_quantized; stage 12 copies each thread's
/// chunk of weight rows into its slice of packed_rows. Kept between calls: no allocation per call.
struct MatmulScratch {
  std::vector<float> weights_f32;
  std::vector<unsigned char> x_quantized;
  std::vector<unsigned char> packed_rows;
};

/// y (n_tokens, W.rows) = x (n_tokens, W.cols) @ W^T, for any supported weight type.
void linear(const Weight& w, const float* x, float* y, int n_tokens, MatmulScratch& scratch);
/// out (n,) = x / sqrt(mean(x^2) + eps) * weight. out may alias x.
void rmsnorm(float* out, const float* x, const float* weight, int n, float eps);
/// Rotates n_heads heads of head_dim floats each (contiguous) in place for position pos.
void rope(float* x, int n_heads, int head_dim, int pos, const RopeParams& params);
/// In place, stable for huge logits (subtracts the max first).
void softmax(float* x, int n);
/// Causal attention of one query token: q (n_head, hd) over n_keys cached rows of keys and values
/// (each row kv_dim = n_head_kv * hd floats; query head h uses kv head h / (n_head / n_head_kv)).
/// out (n_head * hd). scores: scratch for n_head * n_keys floats.
void attention(float* out, const float* q, const float* keys, const float* values, int n_keys,
               int n_head, int n_head_kv, int head_dim, float* scores);
/// gate (n,) = silu(gate) * up, SwiGLU's elementwise part.
void swiglu(float* gate, const float* up, int n);

/// How far this stage's logits for model may lie from the fp64 reference, relative to
/// max(1, max |logit|). fp32 arithmetic: 1e-4 (its rounding is ~1e-6). A stage that quantizes
/// activations for some weight types says more for models that have them.
double logit_tolerance(const Model& model);

/// Picks the next token from logits (n_vocab, may be modified) by the contract in sampler.h.
/// candidates is scratch, reused between calls.
int sample_token(float* logits, int n_vocab, const SamplerParams& params, Rng& rng,
                 std::vector<Candidate>& candidates);
