// quant_mix.h: which type each tensor gets in a llama-quantize file type (Q4_K_M, Q3_K_S, ...).
//
// A file type names a default type (Q4_K for Q4_K_M) and a mix: llama-quantize (llama.cpp
// c392e50, src/llama-quant.cpp) gives some tensors more bits, by name and layer:
//   - output.weight (or token_embd.weight when the output is tied to it): Q6_K, or Q8_0 when
//     its rows are not whole 256-weight super-blocks (unless the default is Q8_0 already);
//   - attn_v.weight: Q4_K_M/Q5_K_M: Q6_K on "more bits" layers (the first and last eighth of
//     the layers, and every third one between); Q4_K_S: Q5_K on the first 4; Q3_K_M: Q5_K on
//     the first 2, then Q4_K; Q3_K_L: Q5_K; Q2_K: Q3_K (Q4_K with 4+ query heads per KV head);
//   - ffn_down: Q4_K_M/Q5_K_M: Q6_K on "more bits" layers; Q4_K_S: Q5_K on the first eighth;
//     Q3_K_M: Q5_K on the first sixteenth, then Q4_K; Q3_K_L: Q5_K; Q2_K: Q3_K;
//   - attn_output.weight: Q2_K: Q3_K; Q3_K_M: Q4_K; Q3_K_L: Q5_K.
// A row that is not a whole number of the chosen type's blocks falls back: Q4_K -> Q5_0,
// Q5_K -> Q5_1, Q6_K -> Q8_0, Q2_K/Q3_K -> Q4_0 (llama-quantize writes IQ4_NL there, a type this
// engine does not have; Q4_0 has the same 4.5 bits per weight), then F16 if still not whole.
// --pure: the default type everywhere (no mix, no fallback).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gguf.h"

/// A file type llama-quantize writes: its name, its general.file_type number, its default type.
struct FileType {
  const char* name;
  uint32_t id;
  GGMLType base;
};

/// Every file type build/quantize writes.
const std::vector<FileType>& file_types();
/// By name, case-insensitive ("q4_k_m"; "Q4_K" means Q4_K_M as in llama-quantize); or nullptr.
const FileType* find_file_type(const std::string& name);

/// True for the tensors llama-quantize converts: 2-D or more, name ending in "weight", not a norm.
bool is_quantizable(const std::string& name, int n_dims);

/// The per-tensor choices for one model. Call choose() once per quantizable tensor, in file
/// order: the layer counters advance as attn_v and ffn_down tensors go by, as llama-quantize's do.
class QuantMix {
 public:
  /// n_layer: the model's blocks; n_gqa: query heads per KV head; has_output: an output.weight
  /// exists (else token_embd.weight doubles as the output); pure: --pure.
  QuantMix(const FileType& type, int n_layer, int n_gqa, bool has_output, bool pure);

  /// The type for tensor name whose rows hold nx weights. fell_back is set when a row was not a
  /// whole number of the wanted type's blocks. Throws Error when no type fits nx.
  GGMLType choose(const std::string& name, int64_t nx, bool& fell_back);

 private:
  GGMLType mixed(const std::string& name, int64_t nx);

  FileType type_;
  int n_layer_;
  int n_gqa_;
  bool has_output_;
  bool pure_;
  int i_attention_wv_ = 0;
  int i_ffn_down_ = 0;
};
