// quant_mix.cpp: llama-quantize's per-tensor type choices (see quant_mix.h).
#include "quant_mix.h"

#include <algorithm>
#include <cctype>

#include "error.h"

namespace {

using T = GGMLType;

// llama_ftype numbers (general.file_type).
const std::vector<FileType> kFileTypes = {
    {"F32", 0, T::F32},      {"F16", 1, T::F16},      {"Q4_0", 2, T::Q4_0},
    {"Q4_1", 3, T::Q4_1},    {"Q8_0", 7, T::Q8_0},    {"Q5_0", 8, T::Q5_0},
    {"Q5_1", 9, T::Q5_1},    {"Q2_K", 10, T::Q2_K},   {"Q3_K_S", 11, T::Q3_K},
    {"Q3_K_M", 12, T::Q3_K}, {"Q3_K_L", 13, T::Q3_K}, {"Q4_K_S", 14, T::Q4_K},
    {"Q4_K_M", 15, T::Q4_K}, {"Q5_K_S", 16, T::Q5_K}, {"Q5_K_M", 17, T::Q5_K},
    {"Q6_K", 18, T::Q6_K},   {"BF16", 32, T::BF16},
};

// Query heads per KV head from which Q2_K's attn_v gets Q4_K instead of Q3_K.
constexpr int kManyQueriesPerKV = 4;
// Q4_K_S's attn_v: this many first layers get Q5_K; Q3_K_M's: this many.
constexpr int kQ4KSBetterV = 4;
constexpr int kQ3KMBetterV = 2;

bool is_quantized(GGMLType t) {
  return t != T::F32 && t != T::F16 && t != T::BF16;
}

bool contains(const std::string& s, const char* part) {
  return s.find(part) != std::string::npos;
}

/// llama-quantize's "more bits" layers: the first and last eighth, and every third in between.
bool use_more_bits(int i, int n) {
  return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

bool whole_blocks(GGMLType t, int64_t nx) {
  return nx % ggml_type_layout(t)->block_size == 0;
}

}  // namespace

const std::vector<FileType>& file_types() {
  return kFileTypes;
}

const FileType* find_file_type(const std::string& name) {
  std::string upper = name;
  std::transform(upper.begin(), upper.end(), upper.begin(),
                 [](unsigned char c) { return char(std::toupper(c)); });
  if (upper == "Q3_K" || upper == "Q4_K" || upper == "Q5_K") upper += "_M";  // as llama-quantize
  for (const FileType& t : kFileTypes) {
    if (upper == t.name) return &t;
  }
  return nullptr;
}

bool is_quantizable(const std::string& name, int n_dims) {
  constexpr const char* kSuffix = "weight";
  const size_t n = std::char_traits<char>::length(kSuffix);
  return n_dims >= 2 && name.size() >= n && name.compare(name.size() - n, n, kSuffix) == 0 &&
         !contains(name, "_norm.weight");
}

QuantMix::QuantMix(const FileType& type, int n_layer, int n_gqa, bool has_output, bool pure)
    : type_(type), n_layer_(n_layer), n_gqa_(n_gqa), has_output_(has_output), pure_(pure) {}

GGMLType QuantMix::choose(const std::string& name, int64_t nx, bool& fell_back) {
  fell_back = false;
  if (pure_ || !is_quantized(type_.base)) {
    check(whole_blocks(type_.base, nx), "tensor '", name, "': rows of ", nx,
          " weights are not whole ", ggml_type_name(type_.base), " blocks");
    return type_.base;
  }
  GGMLType t = mixed(name, nx);
  if (whole_blocks(t, nx)) return t;
  fell_back = true;
  switch (t) {
    case T::Q2_K:
    case T::Q3_K:
      t = T::Q4_0;
      break;
    case T::Q4_K:
      t = T::Q5_0;
      break;
    case T::Q5_K:
      t = T::Q5_1;
      break;
    case T::Q6_K:
      t = T::Q8_0;
      break;
    default:
      fail("tensor '", name, "': rows of ", nx, " weights are not whole ", ggml_type_name(t),
           " blocks");
  }
  return whole_blocks(t, nx) ? t : T::F16;
}

GGMLType QuantMix::mixed(const std::string& name, int64_t nx) {
  const std::string f = type_.name;
  GGMLType t = type_.base;
  if (name == "output.weight" || (!has_output_ && name == "token_embd.weight")) {
    if (!whole_blocks(t, nx)) return T::Q8_0;
    return t == T::Q8_0 ? t : T::Q6_K;
  }
  if (contains(name, "attn_v.weight")) {
    const int i = i_attention_wv_++;
    if (f == "Q2_K") t = n_gqa_ >= kManyQueriesPerKV ? T::Q4_K : T::Q3_K;
    if (f == "Q3_K_M") t = i < kQ3KMBetterV ? T::Q5_K : T::Q4_K;
    if (f == "Q3_K_L") t = T::Q5_K;
    if ((f == "Q4_K_M" || f == "Q5_K_M") && use_more_bits(i, n_layer_)) t = T::Q6_K;
    if (f == "Q4_K_S" && i < kQ4KSBetterV) t = T::Q5_K;
    return t;
  }
  if (contains(name, "ffn_down")) {
    const int i = i_ffn_down_++;
    const int n = n_layer_;
    if (f == "Q2_K") t = T::Q3_K;
    if (f == "Q3_K_M") t = i < n / 16 ? T::Q5_K : T::Q4_K;
    if (f == "Q3_K_L") t = T::Q5_K;
    if ((f == "Q4_K_M" || f == "Q5_K_M") && use_more_bits(i, n)) t = T::Q6_K;
    if (f == "Q4_K_S" && i < n / 8) t = T::Q5_K;
    return t;
  }
  if (contains(name, "attn_output.weight")) {
    if (f == "Q2_K") t = T::Q3_K;
    if (f == "Q3_K_M") t = T::Q4_K;
    if (f == "Q3_K_L") t = T::Q5_K;
  }
  return t;
}
