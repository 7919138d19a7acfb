// model.cpp: the config from GGUF metadata, then every tensor bound and its shape checked.
#include "model.h"

#include <cmath>
#include <cstdint>
#include <set>

#include "error.h"
#include "quant.h"

namespace {

// Upper bounds that no real dense model reaches; past them a file is corrupt, not big.
constexpr int64_t kMaxLayers = 1024;
constexpr int64_t kMaxEmbd = 65536;
constexpr int64_t kMaxFF = 1 << 20;
constexpr int64_t kMaxHeads = 4096;
constexpr int64_t kMaxVocab = 1 << 24;
constexpr int64_t kMaxContext = 1 << 24;
constexpr double kDefaultFreqBase = 10000.0;  // llama's RoPE base when the file gives none
constexpr int64_t kMaxExperts = 4096;         // V3 has 256
// YaRN's ramp: pairs that turn fewer than kYarnBetaSlow times over the original context get
// the scaled angle, more than kYarnBetaFast keep theirs (llama.cpp's defaults, DeepSeek's too).
constexpr float kYarnBetaFast = 32.0f;
constexpr float kYarnBetaSlow = 1.0f;
// llama.cpp's expert_gating_func: absent or 0 means softmax (DeepSeek-V2 files predate the key).
constexpr int64_t kGatingNone = 0, kGatingSoftmax = 1, kGatingSigmoid = 2;

std::string key(const std::string& arch, const std::string& name) {
  return arch + "." + name;
}

// A required (or defaulted, when fallback >= 0) integer in 1..max.
int positive_int(const GGUFFile& f, const std::string& k, int64_t max, int64_t fallback = -1) {
  const int64_t v = fallback >= 0 ? f.get_int_or(k, fallback) : f.get_int(k);
  check(v >= 1 && v <= max, f.path(), ": metadata '", k, "' = ", v, " is out of range (1 to ", max,
        ")");
  return static_cast<int>(v);
}

double positive_float(const GGUFFile& f, const std::string& k, double fallback) {
  const double v = f.get_float_or(k, fallback);
  check(std::isfinite(v) && v > 0, f.path(), ": metadata '", k, "' = ", v,
        " must be a positive number");
  return v;
}

// llama.cpp's reading: the type defaults to linear; the factor comes from rope.scaling.factor or
// the older rope.scale_linear, and 0 or absent means no scaling.
float rope_freq_scale(const GGUFFile& f, const std::string& arch) {
  const std::string type = f.get_string_or(key(arch, "rope.scaling.type"), "linear");
  const std::string factor_key = f.has(key(arch, "rope.scaling.factor"))
                                     ? key(arch, "rope.scaling.factor")
                                     : key(arch, "rope.scale_linear");
  const double factor = f.get_float_or(factor_key, 0.0);
  check(std::isfinite(factor) && factor >= 0, f.path(), ": metadata '", factor_key, "' = ", factor,
        " must be a non-negative number");
  if (type == "none") {
    check(factor == 0 || factor == 1, f.path(), ": rope scaling type is 'none' but '", factor_key,
          "' = ", factor);
    return 1.0f;
  }
  check(type == "linear", f.path(), ": rope scaling type '", type,
        "' is not supported (supported: none, linear)");
  return factor == 0 ? 1.0f : static_cast<float>(1.0 / factor);
}

// A required (or defaulted) integer in 0..max.
int count_int(const GGUFFile& f, const std::string& k, int64_t max, int64_t fallback = -1) {
  const int64_t v = fallback >= 0 ? f.get_int_or(k, fallback) : f.get_int(k);
  check(v >= 0 && v <= max, f.path(), ": metadata '", k, "' = ", v, " is out of range (0 to ", max,
        ")");
  return static_cast<int>(v);
}

// The dims of n_dims where YaRN's ramp starts and ends (ggml_rope_yarn_corr_dims, in float as
// ggml computes them): pair i turns n_ctx_orig * theta_i / (2 pi) times over the original context.
void yarn_ramp(RopeParams& rope, int n_ctx_orig) {
  const auto corr_dim = [&](float turns) {
    return rope.n_rot * std::log(n_ctx_orig / (turns * 2.0f * static_cast<float>(M_PI))) /
           (2.0f * std::log(rope.freq_base));
  };
  rope.yarn = true;
  rope.yarn_low = std::max(0.0f, std::floor(corr_dim(kYarnBetaFast)));
  rope.yarn_high = std::min(static_cast<float>(rope.n_rot - 1), std::ceil(corr_dim(kYarnBetaSlow)));
}

float rms_eps(const GGUFFile& f, const std::string& a) {
  const std::string eps_key = key(a, "attention.layer_norm_rms_epsilon");
  const double eps = f.get_float(eps_key);
  check(std::isfinite(eps) && eps > 0 && eps < 1, f.path(), ": metadata '", eps_key, "' = ", eps,
        " is out of range (0 to 1)");
  return static_cast<float>(eps);
}

// The vocabulary size and whether the output matrix is the token embedding.
ModelConfig finish_config(const GGUFFile& f, ModelConfig c) {
  const std::string& a = c.arch_name;
  if (f.has(key(a, "vocab_size"))) {
    c.n_vocab = positive_int(f, key(a, "vocab_size"), kMaxVocab);
  } else {
    const TensorInfo* embd = f.find_tensor("token_embd.weight");
    check(embd != nullptr && embd->ne.size() == 2, f.path(), ": no '", key(a, "vocab_size"),
          "' and no 2-D token_embd.weight to tell the vocabulary size");
    check(embd->ne[1] <= kMaxVocab, f.path(), ": token_embd.weight has ", embd->ne[1],
          " rows, more than ", kMaxVocab);
    c.n_vocab = static_cast<int>(embd->ne[1]);
  }
  c.tied_output = f.find_tensor("output.weight") == nullptr;
  return c;
}

// deepseek2's attention heads, rope (none or YaRN) and experts, as llama.cpp reads them.
void read_deepseek2(const GGUFFile& f, ModelConfig& c) {
  const std::string& a = c.arch_name;
  check(c.n_head_kv == c.n_head, f.path(), ": head_count_kv ", c.n_head_kv,
        " differs from head_count ", c.n_head, " (MLA gives every head its own key and value)");
  MlaConfig& m = c.mla;
  const int k_head = positive_int(f, key(a, "attention.key_length"), kMaxEmbd);
  m.v_head = positive_int(f, key(a, "attention.value_length"), kMaxEmbd);
  m.qk_rope = positive_int(f, key(a, "rope.dimension_count"), kMaxEmbd);
  check(m.qk_rope % 2 == 0 && m.qk_rope < k_head, f.path(), ": rope.dimension_count ", m.qk_rope,
        " must be even and below attention.key_length ", k_head);
  m.qk_nope = k_head - m.qk_rope;
  m.q_lora_rank = count_int(f, key(a, "attention.q_lora_rank"), kMaxEmbd, 0);
  m.kv_lora_rank = positive_int(f, key(a, "attention.kv_lora_rank"), kMaxEmbd);
  c.head_dim = k_head;
  c.rope.n_rot = m.qk_rope;

  // RoPE: none or YaRN. llama.cpp scales the scores by mscale^2 (mscale = 1 + log_mul * ln(factor))
  // and, for the rotation, cancels YaRN's own magnitude factor: cos and sin stay unscaled.
  const std::string type = f.get_string_or(key(a, "rope.scaling.type"), "none");
  float factor = 1.0f, log_mul = 0.0f;
  if (type == "yarn") {
    factor = static_cast<float>(positive_float(f, key(a, "rope.scaling.factor"), 1.0));
    check(factor >= 1, f.path(), ": metadata '", key(a, "rope.scaling.factor"), "' = ", factor,
          " is below 1");
    const std::string log_mul_key = key(a, "rope.scaling.yarn_log_multiplier");
    check(f.has(log_mul_key), f.path(), ": YaRN rope scaling without '", log_mul_key, "'");
    log_mul = static_cast<float>(f.get_float(log_mul_key));
    check(std::isfinite(log_mul) && log_mul >= 0, f.path(), ": metadata '", log_mul_key,
          "' = ", log_mul, " must be a non-negative number");
    c.rope.freq_scale = 1.0f / factor;
    yarn_ramp(c.rope, positive_int(f, key(a, "rope.scaling.original_context_length"), kMaxContext,
                                   c.n_ctx_train));
  } else {
    check(type == "none", f.path(), ": rope scaling type '", type,
          "' is not supported for deepseek2 (supported: none, yarn)");
  }
  const float mscale = 1.0f + log_mul * std::log(factor);
  m.kq_scale = mscale * mscale / std::sqrt(static_cast<float>(k_head));

  MoeConfig& e = c.moe;
  e.n_dense_lead = count_int(f, key(a, "leading_dense_block_count"), c.n_layer);
  if (e.n_dense_lead == c.n_layer) return;  // every layer dense: no experts to read
  e.n_expert = positive_int(f, key(a, "expert_count"), kMaxExperts);
  e.n_expert_used = positive_int(f, key(a, "expert_used_count"), kMaxExperts);
  check(e.n_expert_used <= e.n_expert, f.path(), ": expert_used_count ", e.n_expert_used,
        " exceeds expert_count ", e.n_expert);
  e.n_expert_shared = count_int(f, key(a, "expert_shared_count"), kMaxExperts);
  e.n_ff_exp = positive_int(f, key(a, "expert_feed_forward_length"), kMaxFF);
  check(int64_t(e.n_ff_exp) * std::max(1, e.n_expert_shared) <= kMaxFF, f.path(),
        ": shared experts of ", e.n_expert_shared, " x ", e.n_ff_exp, " exceed ", kMaxFF);
  const std::string scale_key = key(a, "expert_weights_scale");
  check(f.has(scale_key), f.path(), ": missing metadata '", scale_key, "'");
  e.weights_scale = static_cast<float>(positive_float(f, scale_key, 1.0));
  e.norm_weights = f.get_bool_or(key(a, "expert_weights_norm"), false);
  const int64_t gating = f.get_int_or(key(a, "expert_gating_func"), kGatingNone);
  check(gating == kGatingNone || gating == kGatingSoftmax || gating == kGatingSigmoid, f.path(),
        ": metadata '", key(a, "expert_gating_func"), "' = ", gating,
        " is not a known gating function (1 softmax, 2 sigmoid)");
  e.gating = gating == kGatingSigmoid ? Gating::Sigmoid : Gating::Softmax;
}

}  // namespace

ModelConfig read_config(const GGUFFile& f) {
  ModelConfig c;
  c.arch_name = f.get_string("general.architecture");
  const std::string& a = c.arch_name;
  if (a == "llama") {
    c.arch = Arch::Llama;
    c.rope.style = RopeStyle::AdjacentPairs;
  } else if (a == "qwen2") {
    c.arch = Arch::Qwen2;
    c.rope.style = RopeStyle::HalfSplit;
    c.has_qkv_bias = true;
  } else if (a == "deepseek2") {
    c.arch = Arch::DeepSeek2;
    c.rope.style = RopeStyle::AdjacentPairs;  // llama.cpp's NORM rope, DeepSeek's layout
  } else {
    fail(f.path(), ": unsupported architecture '", a, "' (supported: llama, qwen2, deepseek2)");
  }

  c.n_ctx_train = positive_int(f, key(a, "context_length"), kMaxContext);
  c.n_embd = positive_int(f, key(a, "embedding_length"), kMaxEmbd);
  c.n_layer = positive_int(f, key(a, "block_count"), kMaxLayers);
  c.n_ff = positive_int(f, key(a, "feed_forward_length"), kMaxFF);
  c.n_head = positive_int(f, key(a, "attention.head_count"), kMaxHeads);
  c.n_head_kv = positive_int(f, key(a, "attention.head_count_kv"), kMaxHeads, c.n_head);
  c.rms_eps = rms_eps(f, a);
  c.rope.freq_base =
      static_cast<float>(positive_float(f, key(a, "rope.freq_base"), kDefaultFreqBase));
  if (c.arch == Arch::DeepSeek2) {
    read_deepseek2(f, c);
    return finish_config(f, c);
  }
  check(c.n_embd % c.n_head == 0, f.path(), ": embedding_length ", c.n_embd,
        " is not a multiple of head_count ", c.n_head);
  check(c.n_head % c.n_head_kv == 0, f.path(), ": head_count ", c.n_head,
        " is not a multiple of head_count_kv ", c.n_head_kv);
  c.head_dim = c.n_embd / c.n_head;
  check(c.head_dim % 2 == 0, f.path(), ": head dimension ", c.head_dim,
        " is odd; RoPE rotates pairs");
  for (const char* length : {"attention.key_length", "attention.value_length"}) {
    const int64_t v = f.get_int_or(key(a, length), c.head_dim);
    check(v == c.head_dim, f.path(), ": metadata '", key(a, length), "' = ", v,
          " differs from the head dimension ", c.head_dim, " (not supported)");
  }

  c.rope.n_rot = positive_int(f, key(a, "rope.dimension_count"), kMaxEmbd, c.head_dim);
  check(c.rope.n_rot == c.head_dim, f.path(), ": rope.dimension_count ", c.rope.n_rot,
        " differs from the head dimension ", c.head_dim, " (partial RoPE is not supported)");
  c.rope.freq_scale = rope_freq_scale(f, a);
  return finish_config(f, c);
}

// ---- binding tensors ----

namespace {

std::string shape_string(const std::vector<int64_t>& ne) {
  std::string s = "[";
  for (size_t d = 0; d < ne.size(); ++d) s += (d ? ", " : "") + std::to_string(ne[d]);
  return s + "]";
}

// Looks tensors up by name, checks their shapes and types, and remembers which were used.
class Binder {
 public:
  explicit Binder(const GGUFFile& f) : f_(f) {}

  // The tensor, checked to have shape ne and data aligned for elements of `alignment` bytes.
  const TensorInfo& shaped(const std::string& name, const std::vector<int64_t>& ne,
                           size_t alignment) {
    const TensorInfo* t = f_.find_tensor(name);
    check(t != nullptr, f_.path(), ": missing tensor '", name, "'");
    check(t->ne == ne, f_.path(), ": tensor '", name, "' has shape ", shape_string(t->ne),
          ", expected ", shape_string(ne));
    check(reinterpret_cast<uintptr_t>(t->data) % alignment == 0, f_.path(), ": tensor '", name,
          "' data is not ", alignment, "-byte aligned");
    used_.insert(name);
    return *t;
  }

  // W (rows, cols): ggml shape [cols, rows], aligned for its elements: 4 bytes for f32, 2 for
  // f16 and for the quantized blocks (their scales are fp16), so that no kernel loads a float
  // from a misaligned address (a file with general.alignment = 2 could place one there).
  Weight matrix(const std::string& name, int64_t rows, int64_t cols) {
    const TensorInfo& t = shaped(name, {cols, rows}, element_alignment(name));
    check_computable(t);
    return {name, t.type, rows, cols, t.data, type_row_bytes(t.type, cols)};
  }

  // n_expert matrices (rows, cols) in one 3-D tensor [cols, rows, n_expert], as one Weight of
  // n_expert * rows rows (expert_rows() views one expert).
  Weight experts(const std::string& name, int64_t n_expert, int64_t rows, int64_t cols) {
    const TensorInfo& t = shaped(name, {cols, rows, n_expert}, element_alignment(name));
    check_computable(t);
    // One 2-D matrix, as it lies in memory: expert e's rows follow expert e-1's.
    return {name, t.type, rows * n_expert, cols, t.data, type_row_bytes(t.type, cols)};
  }

  // A 1-D F32 vector of n (norm weights, biases, rope factors).
  const float* vector(const std::string& name, int64_t n) {
    const TensorInfo& t = shaped(name, {n}, alignof(float));
    check(t.type == GGMLType::F32, f_.path(), ": tensor '", name, "' has type ",
          ggml_type_name(t.type), ", expected f32");
    return static_cast<const float*>(t.data);
  }

  // llama.cpp refuses files with tensors it did not ask for; so do we, naming one.
  void check_all_used() const {
    for (const TensorInfo& t : f_.tensors()) {
      check(used_.count(t.name) != 0, f_.path(), ": unexpected tensor '", t.name, "' (",
            f_.tensors().size(), " tensors in the file, ", used_.size(), " used)");
    }
  }

 private:
  // The alignment a tensor's elements need: 4 bytes for f32, 2 for everything else.
  size_t element_alignment(const std::string& name) const {
    const TensorInfo* info = f_.find_tensor(name);
    return info != nullptr && info->type == GGMLType::F32 ? alignof(float) : alignof(uint16_t);
  }

  void check_computable(const TensorInfo& t) const {
    check(type_supported(t.type), f_.path(), ": tensor '", t.name, "' has type ",
          ggml_type_name(t.type),
          ", which this engine cannot compute with (supported: ", supported_type_names(), ")");
  }

  const GGUFFile& f_;
  std::set<std::string> used_;
};

// deepseek2 layer i's tensors: MLA attention, then a dense FFN or the experts.
void bind_deepseek2_layer(Binder& bind, const GGUFFile& f, const ModelConfig& c, int i,
                          LayerWeights& l) {
  const MlaConfig& m = c.mla;
  const MoeConfig& e = c.moe;
  const std::string p = "blk." + std::to_string(i) + ".";
  const int64_t q_dim = int64_t(c.n_head) * m.k_head();
  l.attn_norm = bind.vector(p + "attn_norm.weight", c.n_embd);
  // The query straight from x (q_lora_rank 0, V2-Lite) or through a normed bottleneck.
  const bool has_q_a = f.find_tensor(p + "attn_q_a.weight") != nullptr;
  check(has_q_a == (m.q_lora_rank > 0), f.path(), ": attention.q_lora_rank is ", m.q_lora_rank,
        " but tensor '", p, "attn_q_a.weight' is ", has_q_a ? "present" : "absent");
  if (m.q_lora_rank > 0) {
    l.wq_a = bind.matrix(p + "attn_q_a.weight", m.q_lora_rank, c.n_embd);
    l.q_a_norm = bind.vector(p + "attn_q_a_norm.weight", m.q_lora_rank);
    l.wq_b = bind.matrix(p + "attn_q_b.weight", q_dim, m.q_lora_rank);
  } else {
    l.wq = bind.matrix(p + "attn_q.weight", q_dim, c.n_embd);
  }
  l.wkv_a = bind.matrix(p + "attn_kv_a_mqa.weight", m.kv_lora_rank + m.qk_rope, c.n_embd);
  l.kv_a_norm = bind.vector(p + "attn_kv_a_norm.weight", m.kv_lora_rank);
  l.wkv_b = bind.matrix(p + "attn_kv_b.weight", int64_t(c.n_head) * (m.qk_nope + m.v_head),
                        m.kv_lora_rank);
  l.wo = bind.matrix(p + "attn_output.weight", c.n_embd, int64_t(c.n_head) * m.v_head);
  l.ffn_norm = bind.vector(p + "ffn_norm.weight", c.n_embd);
  if (!e.is_moe_layer(i)) {
    l.w_gate = bind.matrix(p + "ffn_gate.weight", c.n_ff, c.n_embd);
    l.w_up = bind.matrix(p + "ffn_up.weight", c.n_ff, c.n_embd);
    l.w_down = bind.matrix(p + "ffn_down.weight", c.n_embd, c.n_ff);
    return;
  }
  l.router = bind.matrix(p + "ffn_gate_inp.weight", e.n_expert, c.n_embd);
  if (f.find_tensor(p + "exp_probs_b.bias") != nullptr) {
    l.router_bias = bind.vector(p + "exp_probs_b.bias", e.n_expert);
  }
  l.gate_exps = bind.experts(p + "ffn_gate_exps.weight", e.n_expert, e.n_ff_exp, c.n_embd);
  l.up_exps = bind.experts(p + "ffn_up_exps.weight", e.n_expert, e.n_ff_exp, c.n_embd);
  l.down_exps = bind.experts(p + "ffn_down_exps.weight", e.n_expert, c.n_embd, e.n_ff_exp);
  if (e.n_expert_shared > 0) {
    const int64_t n_ff_shared = int64_t(e.n_ff_exp) * e.n_expert_shared;
    l.gate_shexp = bind.matrix(p + "ffn_gate_shexp.weight", n_ff_shared, c.n_embd);
    l.up_shexp = bind.matrix(p + "ffn_up_shexp.weight", n_ff_shared, c.n_embd);
    l.down_shexp = bind.matrix(p + "ffn_down_shexp.weight", c.n_embd, n_ff_shared);
  }
}

}  // namespace

Model::Model(std::shared_ptr<const GGUFFile> file) : file_(std::move(file)) {
  check(file_ != nullptr, "Model: no file");
  const GGUFFile& f = *file_;
  check(!f.tensors().empty(), f.path(), ": has no tensors (vocab-only file?)");
  config_ = read_config(f);
  const ModelConfig& c = config_;
  const int64_t q_dim = int64_t(c.n_head) * c.head_dim;  // = n_embd
  Binder bind(f);

  token_embd_ = bind.matrix("token_embd.weight", c.n_vocab, c.n_embd);
  output_norm_ = bind.vector("output_norm.weight", c.n_embd);
  output_ = c.tied_output ? token_embd_ : bind.matrix("output.weight", c.n_vocab, c.n_embd);
  if (f.find_tensor("rope_freqs.weight") != nullptr) {
    config_.rope.freq_factors = bind.vector("rope_freqs.weight", c.rope.n_rot / 2);
  }

  layers_.resize(c.n_layer);
  if (c.arch == Arch::DeepSeek2) {
    for (int i = 0; i < c.n_layer; ++i) bind_deepseek2_layer(bind, f, c, i, layers_[i]);
    bind.check_all_used();
    return;
  }
  for (int i = 0; i < c.n_layer; ++i) {
    const std::string p = "blk." + std::to_string(i) + ".";
    LayerWeights& l = layers_[i];
    l.attn_norm = bind.vector(p + "attn_norm.weight", c.n_embd);
    l.wq = bind.matrix(p + "attn_q.weight", q_dim, c.n_embd);
    l.wk = bind.matrix(p + "attn_k.weight", c.kv_dim(), c.n_embd);
    l.wv = bind.matrix(p + "attn_v.weight", c.kv_dim(), c.n_embd);
    l.wo = bind.matrix(p + "attn_output.weight", c.n_embd, q_dim);
    if (c.has_qkv_bias) {
      l.bq = bind.vector(p + "attn_q.bias", q_dim);
      l.bk = bind.vector(p + "attn_k.bias", c.kv_dim());
      l.bv = bind.vector(p + "attn_v.bias", c.kv_dim());
    }
    l.ffn_norm = bind.vector(p + "ffn_norm.weight", c.n_embd);
    l.w_gate = bind.matrix(p + "ffn_gate.weight", c.n_ff, c.n_embd);
    l.w_up = bind.matrix(p + "ffn_up.weight", c.n_ff, c.n_embd);
    l.w_down = bind.matrix(p + "ffn_down.weight", c.n_embd, c.n_ff);
  }
  bind.check_all_used();
}

Weight expert_rows(const Weight& stacked, int e, int n_expert) {
  check(n_expert > 0 && stacked.rows % n_expert == 0 && e >= 0 && e < n_expert, stacked.name,
        ": expert ", e, " of ", n_expert, " in a tensor of ", stacked.rows, " rows");
  const int64_t rows = stacked.rows / n_expert;
  Weight w = stacked;
  w.rows = rows;
  w.data = stacked.row(e * rows);
  return w;
}

void Model::embed(int token, float* out) const {
  check(token >= 0 && token < config_.n_vocab, file_->path(), ": token id ", token,
        " is out of range (vocabulary of ", config_.n_vocab, ")");
  dequantize_row(token_embd_.type, token_embd_.row(token), out, config_.n_embd);
}

void check_weight(const Weight& w) {
  // Every matrix product checks its weights: the messages' strings are made only on failure.
  if (!type_supported(w.type)) {
    fail(w.name, ": weight type ", ggml_type_name(w.type), " is not supported");
  }
  if (w.rows <= 0 || w.cols <= 0 || w.cols % type_block_size(w.type) != 0) {
    fail(w.name, ": shape (", w.rows, ", ", w.cols, ") does not hold whole ",
         ggml_type_name(w.type), " blocks");
  }
  const size_t row_bytes = type_row_bytes(w.type, w.cols);
  check(w.row_bytes == row_bytes, w.name, ": row of ", w.row_bytes, " bytes, expected ", row_bytes);
}
