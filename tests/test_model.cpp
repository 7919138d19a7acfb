// test_model.cpp: config reading and tensor binding on tiny models built in memory.
#include <catch2/catch.hpp>
#include <functional>
#include <map>
#include <memory>
#include <set>

#include "error.h"
#include "gguf.h"
#include "model.h"
#include "quant.h"
#include "support/gguf_builder.h"
#include "support/paths.h"

using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;

namespace {

// A tiny model description; tweak the fields, then build().
struct TinyModel {
  std::string arch = "llama";
  int n_vocab = 10, n_embd = 8, n_layer = 2, n_ff = 16, n_head = 2, n_head_kv = 2;
  bool tied = false;
  bool qkv_bias = false;  // add blk.N.attn_{q,k,v}.bias
  bool rope_freqs = false;
  std::map<std::string, std::vector<int64_t>> shape_override;  // tensor name -> ne
  std::map<std::string, GGMLType> type_override;               // tensor name -> type
  std::set<std::string> drop;                                  // tensors to leave out
  std::function<void(GGUFBuilder&)> extra_kv;                  // more metadata

  int head_dim() const { return n_embd / n_head; }

  std::string build(const std::string& name) const {
    GGUFBuilder b;
    const std::string a = arch;
    b.add_string("general.architecture", a);
    b.add_u32(a + ".context_length", 64);
    b.add_u32(a + ".embedding_length", n_embd);
    b.add_u32(a + ".block_count", n_layer);
    b.add_u32(a + ".feed_forward_length", n_ff);
    b.add_u32(a + ".attention.head_count", n_head);
    b.add_u32(a + ".attention.head_count_kv", n_head_kv);
    b.add_f32(a + ".attention.layer_norm_rms_epsilon", 1e-5f);
    if (extra_kv) extra_kv(b);
    const int64_t kv = int64_t(n_head_kv) * head_dim();
    add(b, "token_embd.weight", {n_embd, n_vocab});
    add(b, "output_norm.weight", {n_embd});
    if (!tied) add(b, "output.weight", {n_embd, n_vocab});
    if (rope_freqs) add(b, "rope_freqs.weight", {head_dim() / 2});
    for (int i = 0; i < n_layer; ++i) {
      const std::string p = "blk." + std::to_string(i) + ".";
      add(b, p + "attn_norm.weight", {n_embd});
      add(b, p + "attn_q.weight", {n_embd, n_embd});
      add(b, p + "attn_k.weight", {n_embd, kv});
      add(b, p + "attn_v.weight", {n_embd, kv});
      add(b, p + "attn_output.weight", {n_embd, n_embd});
      if (qkv_bias) {
        add(b, p + "attn_q.bias", {n_embd});
        add(b, p + "attn_k.bias", {kv});
        add(b, p + "attn_v.bias", {kv});
      }
      add(b, p + "ffn_norm.weight", {n_embd});
      add(b, p + "ffn_gate.weight", {n_embd, n_ff});
      add(b, p + "ffn_up.weight", {n_embd, n_ff});
      add(b, p + "ffn_down.weight", {n_ff, n_embd});
    }
    return b.write_temp(name);
  }

  // Adds a tensor whose element k (row-major over ne) is 100 * row + column, as f32, or zeros
  // of the right size for other types.
  void add(GGUFBuilder& b, const std::string& name, std::vector<int64_t> ne) const {
    if (drop.count(name)) return;
    if (auto it = shape_override.find(name); it != shape_override.end()) ne = it->second;
    GGMLType type = GGMLType::F32;
    if (auto it = type_override.find(name); it != type_override.end()) type = it->second;
    int64_t n = 1;
    for (int64_t d : ne) n *= d;
    const GGMLTypeLayout& layout = *ggml_type_layout(type);
    std::string raw;
    if (type == GGMLType::F32) {
      std::vector<float> v(n);
      for (int64_t k = 0; k < n; ++k) v[k] = float(100 * (k / ne[0]) + k % ne[0]);
      raw = GGUFBuilder::f32_bytes(v);
    } else {
      raw.assign(size_t(n / layout.block_size) * layout.block_bytes, '\0');
    }
    b.add_tensor(name, type, ne, raw);
  }
};

std::unique_ptr<Model> load(const std::string& path) {
  return std::make_unique<Model>(std::make_shared<GGUFFile>(path));
}

// Expects loading to fail with a message starting with the path and containing needle.
void require_load_error(const TinyModel& m, const std::string& name, const std::string& needle) {
  const std::string path = m.build(name);
  try {
    load(path);
    FAIL("no error for " << name << " (expected '" << needle << "')");
  } catch (const Error& e) {
    REQUIRE_THAT(e.what(), StartsWith(path + ": "));
    REQUIRE_THAT(e.what(), Contains(needle));
  }
}

}  // namespace

TEST_CASE("model: a tiny llama loads with every weight bound", "[model]") {
  TinyModel m;
  auto model = load(m.build("llama.gguf"));
  const ModelConfig& c = model->config();
  CHECK(c.arch == Arch::Llama);
  CHECK(c.arch_name == "llama");
  CHECK(c.n_vocab == 10);  // from token_embd.weight: no vocab_size key
  CHECK(c.n_embd == 8);
  CHECK(c.n_layer == 2);
  CHECK(c.n_head == 2);
  CHECK(c.n_head_kv == 2);
  CHECK(c.head_dim == 4);
  CHECK(c.kv_dim() == 8);
  CHECK(c.n_ff == 16);
  CHECK(c.n_ctx_train == 64);
  CHECK(c.rms_eps == 1e-5f);
  CHECK(c.rope.style == RopeStyle::AdjacentPairs);
  CHECK(c.rope.n_rot == 4);
  CHECK(c.rope.freq_base == 10000.0f);
  CHECK(c.rope.freq_scale == 1.0f);
  CHECK(c.rope.freq_factors == nullptr);
  CHECK_FALSE(c.tied_output);
  CHECK_FALSE(c.has_qkv_bias);

  REQUIRE(model->layers().size() == 2);
  const LayerWeights& l = model->layers()[1];
  CHECK(l.wq.name == "blk.1.attn_q.weight");
  CHECK(l.wq.rows == 8);
  CHECK(l.wq.cols == 8);
  CHECK(l.wq.row_bytes == 32);
  CHECK(l.w_down.rows == 8);
  CHECK(l.w_down.cols == 16);
  CHECK(l.w_gate.rows == 16);
  CHECK(static_cast<const float*>(l.w_down.row(3))[5] == 305.0f);
  CHECK(l.attn_norm[7] == 7.0f);
  CHECK(l.bq == nullptr);
  CHECK(model->output().name == "output.weight");
  CHECK(model->output_norm()[2] == 2.0f);

  float row[8];
  model->embed(4, row);
  for (int i = 0; i < 8; ++i) CHECK(row[i] == float(400 + i));
  CHECK_THROWS_WITH(model->embed(10, row), Contains("token id 10 is out of range"));
  CHECK_THROWS_AS(model->embed(-1, row), Error);
}

TEST_CASE("model: grouped-query attention, tied output, vocab_size key", "[model]") {
  TinyModel m;
  m.n_head = 4;
  m.n_head_kv = 2;
  m.tied = true;
  m.extra_kv = [](GGUFBuilder& b) { b.add_u32("llama.vocab_size", 10); };
  auto model = load(m.build("gqa.gguf"));
  const ModelConfig& c = model->config();
  CHECK(c.head_dim == 2);
  CHECK(c.kv_dim() == 4);
  CHECK(model->layers()[0].wk.rows == 4);
  CHECK(c.tied_output);
  CHECK(model->output().name == "token_embd.weight");
  CHECK(model->output().data == model->token_embd().data);

  m.extra_kv = [](GGUFBuilder& b) { b.add_u32("llama.vocab_size", 12); };
  require_load_error(m, "vocabmismatch.gguf", "'token_embd.weight' has shape [8, 10]");
}

TEST_CASE("model: qwen2 needs q/k/v biases and splits rope in halves", "[model]") {
  TinyModel m;
  m.arch = "qwen2";
  m.qkv_bias = true;
  m.n_head_kv = 1;
  auto model = load(m.build("qwen2.gguf"));
  const ModelConfig& c = model->config();
  CHECK(c.arch == Arch::Qwen2);
  CHECK(c.rope.style == RopeStyle::HalfSplit);
  CHECK(c.has_qkv_bias);
  const LayerWeights& l = model->layers()[0];
  REQUIRE(l.bq != nullptr);
  REQUIRE(l.bk != nullptr);
  REQUIRE(l.bv != nullptr);
  CHECK(l.bv[3] == 3.0f);

  m.drop = {"blk.1.attn_k.bias"};
  require_load_error(m, "qwen2nobias.gguf", "missing tensor 'blk.1.attn_k.bias'");
  m.drop.clear();
  m.shape_override = {{"blk.0.attn_k.bias", {8}}};
  require_load_error(m, "qwen2badbias.gguf", "'blk.0.attn_k.bias' has shape [8], expected [4]");

  TinyModel llama_with_bias;
  llama_with_bias.qkv_bias = true;
  require_load_error(llama_with_bias, "llamabias.gguf", "unexpected tensor 'blk.0.attn_q.bias'");
}

TEST_CASE("model: unsupported architectures are refused by name", "[model]") {
  TinyModel m;
  m.arch = "gpt2";
  const std::string path = m.build("gpt2.gguf");
  CHECK_THROWS_WITH(load(path),
                    path + ": unsupported architecture 'gpt2' (supported: llama, qwen2, deepseek2)");
}

TEST_CASE("model: wrong shapes and types name the tensor", "[model]") {
  TinyModel m;
  m.shape_override = {{"blk.1.ffn_up.weight", {8, 15}}};
  require_load_error(m, "shape.gguf",
                     "tensor 'blk.1.ffn_up.weight' has shape [8, 15], expected [8, 16]");

  TinyModel transposed;
  transposed.shape_override = {{"blk.0.ffn_down.weight", {8, 16}}};
  require_load_error(transposed, "transposed.gguf", "'blk.0.ffn_down.weight' has shape [8, 16]");

  TinyModel missing;
  missing.drop = {"blk.0.attn_v.weight"};
  require_load_error(missing, "missing.gguf", "missing tensor 'blk.0.attn_v.weight'");

  TinyModel norm3d;
  norm3d.shape_override = {{"output_norm.weight", {8, 1}}};
  require_load_error(norm3d, "norm2d.gguf", "'output_norm.weight' has shape [8, 1], expected [8]");

  TinyModel norm_f16;
  norm_f16.type_override = {{"blk.0.ffn_norm.weight", GGMLType::F16}};
  require_load_error(norm_f16, "normf16.gguf",
                     "'blk.0.ffn_norm.weight' has type f16, expected f32");

  // A matrix of a type ggml knows but the engine cannot compute with (Q8_1 only ever holds
  // activations inside ggml; no file type writes it).
  TinyModel q8_1;
  q8_1.n_embd = 32;  // whole Q8_1 blocks
  q8_1.type_override = {{"blk.1.attn_output.weight", GGMLType::Q8_1}};
  require_load_error(q8_1, "q8_1.gguf",
                     "'blk.1.attn_output.weight' has type q8_1, which this engine cannot compute");

  TinyModel extra;
  extra.extra_kv = [](GGUFBuilder& b) {
    b.add_tensor("blk.2.attn_norm.weight", GGMLType::F32, {1}, GGUFBuilder::f32_bytes({0}));
  };
  require_load_error(extra, "extra.gguf", "unexpected tensor 'blk.2.attn_norm.weight'");
}

TEST_CASE("model: quantized matrices bind with their row bytes, and embed dequantizes", "[model]") {
  TinyModel m;
  m.n_embd = 64;
  m.n_ff = 256;
  m.type_override = {{"token_embd.weight", GGMLType::Q8_0},
                     {"blk.0.attn_q.weight", GGMLType::Q4_0},
                     {"blk.0.ffn_down.weight", GGMLType::Q6_K},
                     {"blk.1.ffn_up.weight", GGMLType::F16}};
  auto model = load(m.build("quantized.gguf"));
  CHECK(model->token_embd().type == GGMLType::Q8_0);
  CHECK(model->token_embd().row_bytes == 2 * 34);
  CHECK(model->layers()[0].wq.row_bytes == 2 * 18);
  CHECK(model->layers()[0].w_down.row_bytes == 210);
  CHECK(model->layers()[1].w_up.row_bytes == 64 * 2);
  std::vector<float> row(64, 1.0f);
  model->embed(9, row.data());  // all-zero blocks
  for (float v : row) CHECK(v == 0.0f);
}

TEST_CASE("model: rope parameters", "[model]") {
  TinyModel m;
  m.rope_freqs = true;
  m.extra_kv = [](GGUFBuilder& b) {
    b.add_f32("llama.rope.freq_base", 500000.0f);
    b.add_u32("llama.rope.dimension_count", 4);
    b.add_string("llama.rope.scaling.type", "linear");
    b.add_f32("llama.rope.scaling.factor", 4.0f);
  };
  auto model = load(m.build("rope.gguf"));
  const RopeParams& r = model->config().rope;
  CHECK(r.freq_base == 500000.0f);
  CHECK(r.freq_scale == 0.25f);
  REQUIRE(r.freq_factors != nullptr);
  CHECK(r.freq_factors[1] == 1.0f);

  m.rope_freqs = false;
  m.extra_kv = [](GGUFBuilder& b) { b.add_f32("llama.rope.scale_linear", 2.0f); };  // older key
  CHECK(load(m.build("ropeold.gguf"))->config().rope.freq_scale == 0.5f);

  m.extra_kv = [](GGUFBuilder& b) { b.add_string("llama.rope.scaling.type", "none"); };
  CHECK(load(m.build("ropenone.gguf"))->config().rope.freq_scale == 1.0f);

  m.extra_kv = [](GGUFBuilder& b) {
    b.add_string("llama.rope.scaling.type", "yarn");
    b.add_f32("llama.rope.scaling.factor", 4.0f);
  };
  require_load_error(m, "yarn.gguf", "rope scaling type 'yarn' is not supported");

  m.extra_kv = [](GGUFBuilder& b) { b.add_u32("llama.rope.dimension_count", 2); };
  require_load_error(m, "partialrope.gguf",
                     "rope.dimension_count 2 differs from the head dimension 4");

  m.rope_freqs = true;
  m.extra_kv = nullptr;
  m.shape_override = {{"rope_freqs.weight", {4}}};
  require_load_error(m, "ropefreqs.gguf", "'rope_freqs.weight' has shape [4], expected [2]");
}

TEST_CASE("model: config values are validated", "[model]") {
  struct Case {
    std::string name;
    std::function<void(TinyModel&)> tweak;
    std::string needle;
  };
  const std::vector<Case> cases = {
      {"heads.gguf", [](TinyModel& m) { m.n_head = 3; }, "not a multiple of head_count 3"},
      {"kvheads.gguf", [](TinyModel& m) { m.n_head_kv = 3; }, "not a multiple of head_count_kv 3"},
      {"keylength.gguf",
       [](TinyModel& m) {
         m.extra_kv = [](GGUFBuilder& b) { b.add_u32("llama.attention.key_length", 3); };
       },
       "attention.key_length"},
  };
  for (const Case& c : cases) {
    INFO(c.name);
    TinyModel m;
    c.tweak(m);
    require_load_error(m, c.name, c.needle);
  }
}

TEST_CASE("model: out-of-range and missing config values", "[model]") {
  // Built directly so each key can be left out or set badly.
  auto file_with = [](const std::map<std::string, int64_t>& ints, bool eps) {
    GGUFBuilder b;
    b.add_string("general.architecture", "llama");
    for (const auto& [k, v] : ints) b.add_i64(k, v);
    if (eps) b.add_f32("llama.attention.layer_norm_rms_epsilon", 1e-6f);
    b.add_tensor("token_embd.weight", GGMLType::F32, {1}, GGUFBuilder::f32_bytes({0}));
    return b;
  };
  const std::map<std::string, int64_t> good = {
      {"llama.context_length", 64},      {"llama.embedding_length", 8},
      {"llama.block_count", 1},          {"llama.feed_forward_length", 16},
      {"llama.attention.head_count", 2}, {"llama.vocab_size", 10}};
  {
    GGUFFile f(file_with(good, true).write_temp("cfg_ok.gguf"));
    CHECK(read_config(f).n_head_kv == 2);  // defaults to head_count
  }
  for (const auto& [k, v] : good) {
    INFO(k);
    auto missing = good;
    missing.erase(k);
    GGUFFile f(file_with(missing, true).write_temp("cfg_missing.gguf"));
    CHECK_THROWS_WITH(read_config(f), Contains("'" + k + "'"));
    for (int64_t bad : {int64_t(0), int64_t(-1), int64_t(1) << 40}) {
      auto wrong = good;
      wrong[k] = bad;
      GGUFFile g(file_with(wrong, true).write_temp("cfg_bad.gguf"));
      CHECK_THROWS_WITH(read_config(g), StartsWith(g.path() + ": ") && Contains(k));
    }
  }
  GGUFFile no_eps(file_with(good, false).write_temp("cfg_noeps.gguf"));
  CHECK_THROWS_WITH(read_config(no_eps), Contains("layer_norm_rms_epsilon"));
  auto huge_layers = good;
  huge_layers["llama.block_count"] = 100000;
  GGUFFile h(file_with(huge_layers, true).write_temp("cfg_layers.gguf"));
  CHECK_THROWS_WITH(read_config(h), Contains("out of range"));
}

TEST_CASE("model: a vocab-only file has no tensors to bind", "[model]") {
  GGUFBuilder b;
  b.add_string("general.architecture", "llama");
  b.add_string_array("tokenizer.ggml.tokens", {"a"});
  const std::string path = b.write_temp("vocab_only.gguf");
  CHECK_THROWS_WITH(load(path), path + ": has no tensors (vocab-only file?)");
}

TEST_CASE("model: the real deepseek vocab file is refused as a model", "[model]") {
  REQUIRE_SHARED_OR_SKIP(path, "vocab/ggml-vocab-deepseek-llm.gguf");
  auto file = std::make_shared<GGUFFile>(path);
  const ModelConfig c = read_config(*file);
  CHECK(c.n_vocab == 102400);
  CHECK(c.n_layer == 30);
  CHECK(c.head_dim == 128);
  CHECK_THROWS_WITH(Model(file), Contains("has no tensors (vocab-only file?)"));
}

TEST_CASE("model: stories260K loads", "[model]") {
  REQUIRE_SHARED_OR_SKIP(path, "models/stories260K.gguf");
  Model model(std::make_shared<GGUFFile>(path));
  const ModelConfig& c = model.config();
  CHECK(c.n_vocab == 512);
  CHECK(c.n_embd == 64);
  CHECK(c.n_layer == 5);
  CHECK(c.n_head == 8);
  CHECK(c.n_head_kv == 4);
  CHECK(c.head_dim == 8);
  CHECK(c.n_ff == 172);
  CHECK(c.rms_eps == 1e-5f);
  CHECK_FALSE(c.tied_output);
  CHECK(model.layers()[4].wk.rows == 32);
}

TEST_CASE("model: an f32 matrix must be 4-byte aligned, even where general.alignment is 2",
          "[model]") {
  // A 2-byte tensor first, in a file aligned to 2, moves token_embd.weight (f32) by 2 bytes. The
  // data section's own start depends on the header's length, so one of two pad sizes (1 or 2
  // f16 values) leaves token_embd at an address = 2 mod 4.
  bool tried = false;
  for (int pad : {1, 2}) {
    TinyModel m;
    m.extra_kv = [pad](GGUFBuilder& b) {
      b.set_alignment(2);
      b.add_tensor("pad", GGMLType::F16, {pad}, std::string(size_t(2 * pad), '\0'));
    };
    const std::string path = m.build("align2-pad" + std::to_string(pad) + ".gguf");
    const GGUFFile f(path);
    if (reinterpret_cast<uintptr_t>(f.find_tensor("token_embd.weight")->data) % alignof(float) == 0)
      continue;
    tried = true;
    require_load_error(m, "align2-pad" + std::to_string(pad) + ".gguf",
                       "tensor 'token_embd.weight' data is not 4-byte aligned");
  }
  CHECK(tried);
}
