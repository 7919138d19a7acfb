// model.h: the model's configuration and its weights, read from a GGUF file and validated.
//
// Supported: DeepSeek's dense families.
//   llama: deepseek-llm-7b base/chat, deepseek-coder (linear rope scaling),
//   DeepSeek-R1-Distill-Llama
//          (GQA, llama3 rope frequency factors in rope_freqs.weight). RoPE on adjacent pairs.
//   qwen2: DeepSeek-R1-Distill-Qwen (GQA, q/k/v biases). RoPE pairs element i with i + head_dim/2.
// And DeepSeek's own architecture:
//   deepseek2: DeepSeek-V2, V2-Lite, Coder-V2, V2.5, V3, R1. Multi-head Latent Attention (keys and
//          values decompressed from a cached latent, RoPE on a slice of each head, YaRN) and
//          DeepSeekMoE (a router picks experts per token, shared experts always run).
// Any other general.architecture is refused by name.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "gguf.h"

enum class Arch { Llama, Qwen2, DeepSeek2 };

/// How RoPE pairs the elements of a head: llama's (2i, 2i+1) or qwen2/neox's (i, i + head_dim/2).
enum class RopeStyle { AdjacentPairs, HalfSplit };

/// Everything the forward pass needs to know about rotary embeddings.
struct RopeParams {
  RopeStyle style = RopeStyle::AdjacentPairs;
  int n_rot = 0;               ///< rotated dimensions per head (= head_dim here)
  float freq_base = 10000.0f;  ///< theta_i = pos * freq_scale * base^(-2i/n_rot) / factor_i
  float freq_scale = 1.0f;     ///< 1 / linear scaling factor (deepseek-coder: 1/4)
  const float* freq_factors = nullptr;  ///< n_rot/2 llama3 factors (rope_freqs.weight) or nullptr
  /// YaRN (deepseek2): pair i turns by theta_i * (1 - r_i) + theta_i / freq_scale * r_i, a ramp
  /// r_i from 1 (pairs below yarn_low keep their unscaled angle) to 0 (above yarn_high: scaled).
  bool yarn = false;
  float yarn_low = 0.0f;  ///< ggml's correction dims, in pairs
  float yarn_high = 0.0f;
};

/// deepseek2's Multi-head Latent Attention. Per token: q (n_head, qk_nope + qk_rope) from x (or
/// from a compressed query of q_lora_rank), and one latent c (kv_lora_rank) plus one RoPE key
/// (qk_rope) shared by every head; each head's key and value come from c through wkv_b.
struct MlaConfig {
  int q_lora_rank = 0;    ///< compressed query width; 0: wq reads x directly (V2-Lite)
  int kv_lora_rank = 0;   ///< the latent's width (V2-Lite: 512)
  int qk_nope = 0;        ///< dims of a query/key head without RoPE (128)
  int qk_rope = 0;        ///< dims with RoPE (64) = rope.n_rot
  int v_head = 0;         ///< dims of a value head (128)
  float kq_scale = 0.0f;  ///< score scale: mscale^2 / sqrt(qk_nope + qk_rope), mscale from YaRN
  int k_head() const { return qk_nope + qk_rope; }
};

/// How the router turns logits into expert probabilities (expert_gating_func 1 and 2).
enum class Gating { Softmax, Sigmoid };

/// deepseek2's DeepSeekMoE. Layers from n_dense_lead on replace the dense FFN with
/// n_expert_shared shared experts (one SwiGLU of n_ff_exp * n_expert_shared) plus n_expert_used of
/// n_expert routed ones, picked per token by the router.
struct MoeConfig {
  int n_dense_lead = 0;  ///< the first layers keep a dense FFN of n_ff
  int n_expert = 0;
  int n_expert_used = 0;
  int n_expert_shared = 0;
  int n_ff_exp = 0;  ///< one expert's width (V2-Lite: 1408)
  Gating gating = Gating::Softmax;
  bool norm_weights = false;   ///< the picked experts' probabilities renormalised to sum 1
  float weights_scale = 1.0f;  ///< then multiplied by this (routed_scaling_factor)
  bool is_moe_layer(int layer) const { return n_expert > 0 && layer >= n_dense_lead; }
};

struct ModelConfig {
  Arch arch = Arch::Llama;
  std::string arch_name;  ///< general.architecture
  int n_vocab = 0;
  int n_embd = 0;  ///< model width
  int n_layer = 0;
  int n_head = 0;
  int n_head_kv = 0;  ///< < n_head for grouped-query attention
  int head_dim = 0;   ///< n_embd / n_head; deepseek2: a query/key head, qk_nope + qk_rope
  int n_ff = 0;       ///< FFN hidden width
  int n_ctx_train = 0;
  float rms_eps = 1e-6f;
  RopeParams rope;
  bool tied_output = false;   ///< no output.weight: logits use token_embd.weight
  bool has_qkv_bias = false;  ///< qwen2
  MlaConfig mla;              ///< deepseek2 only
  MoeConfig moe;              ///< deepseek2 only (n_expert = 0 elsewhere)
  int kv_dim() const { return n_head_kv * head_dim; }
};

/// A weight matrix W (rows, cols) stored row-major in GGUF order: ne[0] = cols ("in"),
/// ne[1] = rows ("out"); quantization blocks run along a row. y (rows,) = W @ x (cols,).
struct Weight {
  std::string name;
  GGMLType type = GGMLType::F32;
  int64_t rows = 0;
  int64_t cols = 0;
  const void* data = nullptr;
  size_t row_bytes = 0;
  const void* row(int64_t r) const { return static_cast<const char*>(data) + r * row_bytes; }
};

/// Throws Error (naming the weight) unless w can go to a kernel: a supported type, a positive
/// shape of whole blocks, and row_bytes matching them. Model's weights always pass; the kernels
/// check anyway, since tests and tools build Weights by hand.
void check_weight(const Weight& w);

struct LayerWeights {
  const float* attn_norm = nullptr;  ///< (n_embd,)
  Weight wq, wk, wv, wo;      ///< (n_head*hd, n_embd), (kv_dim, n_embd) x2, (n_embd, n_head*hd)
  const float* bq = nullptr;  ///< qwen2 biases, nullptr for llama
  const float* bk = nullptr;
  const float* bv = nullptr;
  const float* ffn_norm = nullptr;  ///< (n_embd,)
  Weight w_gate, w_up, w_down;      ///< (n_ff, n_embd) x2, (n_embd, n_ff); dense layers only

  // deepseek2 attention (MLA): wq, or wq_a and wq_b when the query is compressed; no wk, wv.
  Weight wq_a;                       ///< (q_lora_rank, n_embd)
  const float* q_a_norm = nullptr;   ///< (q_lora_rank,)
  Weight wq_b;                       ///< (n_head * k_head, q_lora_rank)
  Weight wkv_a;                      ///< (kv_lora_rank + qk_rope, n_embd): latent, RoPE key
  const float* kv_a_norm = nullptr;  ///< (kv_lora_rank,)
  Weight wkv_b;                      ///< (n_head * (qk_nope + v_head), kv_lora_rank)
  // deepseek2 MoE layers: the router, the routed experts stacked (expert e's rows follow expert
  // e-1's: expert_rows() views one) and the shared experts as one SwiGLU.
  Weight router;                         ///< ffn_gate_inp (n_expert, n_embd)
  const float* router_bias = nullptr;    ///< exp_probs_b (n_expert,), V3; added for picking only
  Weight gate_exps, up_exps, down_exps;  ///< n_expert x (n_ff_exp, n_embd) x2, (n_embd, n_ff_exp)
  Weight gate_shexp, up_shexp, down_shexp;  ///< (n_ff_exp * n_shared, n_embd) x2, transposed
};

/// Expert e's matrix inside a stacked expert tensor of n_expert (a view: no copy).
Weight expert_rows(const Weight& stacked, int e, int n_expert);

/// A loaded model: the mapped file, its config and every weight, all shapes checked.
class Model {
 public:
  /// Reads the config and binds every tensor; throws Error naming the file and tensor.
  explicit Model(std::shared_ptr<const GGUFFile> file);

  const GGUFFile& file() const { return *file_; }
  const ModelConfig& config() const { return config_; }
  const Weight& token_embd() const { return token_embd_; }  ///< (n_vocab, n_embd)
  const float* output_norm() const { return output_norm_; }
  const Weight& output() const { return output_; }  ///< (n_vocab, n_embd); token_embd when tied
  const std::vector<LayerWeights>& layers() const { return layers_; }

  /// Copies token's embedding row (n_embd floats, dequantized) into out.
  void embed(int token, float* out) const;

 private:
  std::shared_ptr<const GGUFFile> file_;
  ModelConfig config_;
  Weight token_embd_;
  const float* output_norm_ = nullptr;
  Weight output_;
  std::vector<LayerWeights> layers_;
};

/// Reads and validates the config alone (no tensors bound). Throws Error on anything unsupported.
ModelConfig read_config(const GGUFFile& file);
