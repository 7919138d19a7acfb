// model.h: the model's configuration and its weights, read from a GGUF file and validated.
//
// Supported: DeepSeek's dense families.
//   llama: deepseek-llm-7b base/chat, deepseek-coder (linear rope scaling),
//   DeepSeek-R1-Distill-Llama
//          (GQA, llama3 rope frequency factors in rope_freqs.weight). RoPE on adjacent pairs.
//   qwen2: DeepSeek-R1-Distill-Qwen (GQA, q/k/v biases). RoPE pairs element i with i + head_dim/2.
// Any other general.architecture is refused by name.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "gguf.h"

enum class Arch { Llama, Qwen2 };

/// How RoPE pairs the elements of a head: llama's (2i, 2i+1) or qwen2/neox's (i, i + head_dim/2).
enum class RopeStyle { AdjacentPairs, HalfSplit };

/// Everything the forward pass needs to know about rotary embeddings.
struct RopeParams {
  RopeStyle style = RopeStyle::AdjacentPairs;
  int n_rot = 0;               ///< rotated dimensions per head (= head_dim here)
  float freq_base = 10000.0f;  ///< theta_i = pos * freq_scale * base^(-2i/n_rot) / factor_i
  float freq_scale = 1.0f;     ///< 1 / linear scaling factor (deepseek-coder: 1/4)
  const float* freq_factors = nullptr;  ///< n_rot/2 llama3 factors (rope_freqs.weight) or nullptr
};

struct ModelConfig {
  Arch arch = Arch::Llama;
  std::string arch_name;  ///< general.architecture
  int n_vocab = 0;
  int n_embd = 0;  ///< model width
  int n_layer = 0;
  int n_head = 0;
  int n_head_kv = 0;  ///< < n_head for grouped-query attention
  int head_dim = 0;   ///< n_embd / n_head
  int n_ff = 0;       ///< FFN hidden width
  int n_ctx_train = 0;
  float rms_eps = 1e-6f;
  RopeParams rope;
  bool tied_output = false;   ///< no output.weight: logits use token_embd.weight
  bool has_qkv_bias = false;  ///< qwen2
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
  Weight w_gate, w_up, w_down;      ///< (n_ff, n_embd) x2, (n_embd, n_ff)
};

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
