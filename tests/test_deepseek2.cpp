// test_deepseek2.cpp: DeepSeek's own architecture (deepseek2: MLA and mixture of experts), read
// from tiny files built in memory, refused by name before stage 20, and run from stage 20 on.
//
// Logits against the PyTorch reference are test_engine.cpp's golden test (tiny-deepseek2-*).
#include <catch2/catch.hpp>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <vector>

#include "engine.h"
#include "error.h"
#include "gguf.h"
#include "model.h"
#include "quant.h"
#include "support/gguf_builder.h"
#include "support/paths.h"

using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;

namespace {

// A V2-Lite-like model of 3 layers (layer 0 dense, 1 and 2 MoE), f32 weights whose element k is
// 0.01 * (k % 7) - 0.03; tweak the fields, then build().
struct TinyDeepSeek2 {
  int n_vocab = 12, n_embd = 16, n_layer = 3, n_ff = 24, n_head = 2;
  int qk_nope = 4, qk_rope = 4, v_head = 4, kv_lora = 8, q_lora = 0;
  int n_expert = 4, n_expert_used = 2, n_shared = 1, n_ff_exp = 8, n_dense_lead = 1;
  bool yarn = true, router_bias = false;
  std::map<std::string, std::vector<int64_t>> shape_override;  // tensor name -> ne
  std::set<std::string> drop;                                  // keys or tensors to leave out
  std::function<void(GGUFBuilder&)> extra_kv;                  // more metadata

  std::string build(const std::string& name) const {
    GGUFBuilder b;
    const std::string a = "deepseek2.";
    b.add_string("general.architecture", "deepseek2");
    auto u32 = [&](const std::string& k, uint32_t v) {
      if (!drop.count(k)) b.add_u32(a + k, v);
    };
    auto f32 = [&](const std::string& k, float v) {
      if (!drop.count(k)) b.add_f32(a + k, v);
    };
    u32("context_length", 64);
    u32("embedding_length", n_embd);
    u32("block_count", n_layer);
    u32("feed_forward_length", n_ff);
    u32("attention.head_count", n_head);
    u32("attention.head_count_kv", n_head);
    f32("attention.layer_norm_rms_epsilon", 1e-6f);
    u32("attention.key_length", qk_nope + qk_rope);
    u32("attention.value_length", v_head);
    u32("rope.dimension_count", qk_rope);
    u32("attention.kv_lora_rank", kv_lora);
    if (q_lora > 0) u32("attention.q_lora_rank", q_lora);
    u32("leading_dense_block_count", n_dense_lead);
    u32("expert_count", n_expert);
    u32("expert_used_count", n_expert_used);
    u32("expert_shared_count", n_shared);
    u32("expert_feed_forward_length", n_ff_exp);
    f32("expert_weights_scale", 1.0f);
    if (yarn) {
      b.add_string(a + "rope.scaling.type", "yarn");
      f32("rope.scaling.factor", 40.0f);
      u32("rope.scaling.original_context_length", 4096);
      f32("rope.scaling.yarn_log_multiplier", 0.0707f);
    }
    if (extra_kv) extra_kv(b);

    const int64_t k_head = qk_nope + qk_rope;
    add(b, "token_embd.weight", {n_embd, n_vocab});
    add(b, "output_norm.weight", {n_embd});
    add(b, "output.weight", {n_embd, n_vocab});
    for (int i = 0; i < n_layer; ++i) {
      const std::string p = "blk." + std::to_string(i) + ".";
      add(b, p + "attn_norm.weight", {n_embd});
      if (q_lora > 0) {
        add(b, p + "attn_q_a.weight", {n_embd, q_lora});
        add(b, p + "attn_q_a_norm.weight", {q_lora});
        add(b, p + "attn_q_b.weight", {q_lora, n_head * k_head});
      } else {
        add(b, p + "attn_q.weight", {n_embd, n_head * k_head});
      }
      add(b, p + "attn_kv_a_mqa.weight", {n_embd, kv_lora + qk_rope});
      add(b, p + "attn_kv_a_norm.weight", {kv_lora});
      add(b, p + "attn_kv_b.weight", {kv_lora, n_head * (qk_nope + v_head)});
      add(b, p + "attn_output.weight", {n_head * v_head, n_embd});
      add(b, p + "ffn_norm.weight", {n_embd});
      if (i < n_dense_lead) {
        add(b, p + "ffn_gate.weight", {n_embd, n_ff});
        add(b, p + "ffn_up.weight", {n_embd, n_ff});
        add(b, p + "ffn_down.weight", {n_ff, n_embd});
        continue;
      }
      add(b, p + "ffn_gate_inp.weight", {n_embd, n_expert});
      if (router_bias) add(b, p + "exp_probs_b.bias", {n_expert});
      add(b, p + "ffn_gate_exps.weight", {n_embd, n_ff_exp, n_expert});
      add(b, p + "ffn_up_exps.weight", {n_embd, n_ff_exp, n_expert});
      add(b, p + "ffn_down_exps.weight", {n_ff_exp, n_embd, n_expert});
      add(b, p + "ffn_gate_shexp.weight", {n_embd, n_ff_exp * n_shared});
      add(b, p + "ffn_up_shexp.weight", {n_embd, n_ff_exp * n_shared});
      add(b, p + "ffn_down_shexp.weight", {n_ff_exp * n_shared, n_embd});
    }
    return b.write_temp(name);
  }

  void add(GGUFBuilder& b, const std::string& name, std::vector<int64_t> ne) const {
    if (drop.count(name)) return;
    if (auto it = shape_override.find(name); it != shape_override.end()) ne = it->second;
    int64_t n = 1;
    for (int64_t d : ne) n *= d;
    std::vector<float> v(n);
    for (int64_t k = 0; k < n; ++k) v[k] = 0.01f * float(k % 7) - 0.03f;
    if (name.find("norm") != std::string::npos) std::fill(v.begin(), v.end(), 1.0f);
    b.add_tensor(name, GGMLType::F32, ne, GGUFBuilder::f32_bytes(v));
  }
};

std::unique_ptr<Model> load(const std::string& path) {
  return std::make_unique<Model>(std::make_shared<GGUFFile>(path));
}

// Expects loading to fail with a message starting with the path and containing needle.
void require_load_error(const TinyDeepSeek2& m, const std::string& name,
                        const std::string& needle) {
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

TEST_CASE("deepseek2: MLA and MoE metadata and tensors read as llama.cpp reads them",
          "[deepseek2]") {
  TinyDeepSeek2 m;
  auto model = load(m.build("ds2.gguf"));
  const ModelConfig& c = model->config();
  CHECK(c.arch == Arch::DeepSeek2);
  CHECK(c.n_head_kv == 2);
  CHECK(c.head_dim == 8);  // a query/key head: qk_nope + qk_rope
  CHECK(c.mla.qk_nope == 4);
  CHECK(c.mla.qk_rope == 4);
  CHECK(c.rope.n_rot == 4);
  CHECK(c.rope.style == RopeStyle::AdjacentPairs);
  CHECK(c.mla.v_head == 4);
  CHECK(c.mla.kv_lora_rank == 8);
  CHECK(c.mla.q_lora_rank == 0);
  // YaRN, factor 40 from 4096 positions: ggml's correction dims for 4 rotated dims, and the
  // score scale (1 + 0.0707 ln 40)^2 / sqrt(8).
  CHECK(c.rope.yarn);
  CHECK(c.rope.freq_scale == Approx(1.0 / 40));
  CHECK(c.rope.yarn_low == 0.0f);   // floor(4 ln(4096 / (32 2pi)) / (2 ln 10^4)) = floor(0.65)
  CHECK(c.rope.yarn_high == 2.0f);  // ceil(1.41)
  const double mscale = 1 + 0.0707 * std::log(40.0);
  CHECK(c.mla.kq_scale == Approx(mscale * mscale / std::sqrt(8.0)).epsilon(1e-6));
  CHECK(c.moe.n_dense_lead == 1);
  CHECK(c.moe.n_expert == 4);
  CHECK(c.moe.n_expert_used == 2);
  CHECK(c.moe.n_expert_shared == 1);
  CHECK(c.moe.n_ff_exp == 8);
  CHECK(c.moe.gating == Gating::Softmax);  // no expert_gating_func: DeepSeek-V2's softmax
  CHECK_FALSE(c.moe.norm_weights);
  CHECK_FALSE(c.moe.is_moe_layer(0));
  CHECK(c.moe.is_moe_layer(2));

  const LayerWeights& dense = model->layers()[0];
  CHECK(dense.wq.rows == 16);  // n_head * k_head
  CHECK(dense.wk.data == nullptr);
  CHECK(dense.w_gate.rows == 24);
  CHECK(dense.router.data == nullptr);
  const LayerWeights& l = model->layers()[1];
  CHECK(l.wkv_a.rows == 12);  // kv_lora + qk_rope
  CHECK(l.wkv_b.rows == 16);  // n_head * (qk_nope + v_head)
  CHECK(l.wkv_b.cols == 8);
  CHECK(l.wo.cols == 8);  // n_head * v_head
  CHECK(l.w_gate.data == nullptr);
  CHECK(l.router.rows == 4);
  CHECK(l.router_bias == nullptr);
  CHECK(l.gate_exps.rows == 4 * 8);  // stacked: expert e's rows follow expert e-1's
  CHECK(l.down_exps.rows == 4 * 16);
  const Weight e2 = expert_rows(l.up_exps, 2, 4);
  CHECK(e2.rows == 8);
  CHECK(e2.cols == 16);
  CHECK(e2.data == l.up_exps.row(16));
  CHECK_THROWS_AS(expert_rows(l.up_exps, 4, 4), Error);
  CHECK(l.gate_shexp.rows == 8);
}

TEST_CASE("deepseek2: compressed queries, sigmoid routing with a bias, no rope scaling",
          "[deepseek2]") {
  TinyDeepSeek2 m;
  m.q_lora = 8;
  m.yarn = false;
  m.router_bias = true;
  m.extra_kv = [](GGUFBuilder& b) {
    b.add_u32("deepseek2.expert_gating_func", 2);
    b.add_bool("deepseek2.expert_weights_norm", true);
  };
  auto model = load(m.build("ds3.gguf"));
  const ModelConfig& c = model->config();
  CHECK(c.mla.q_lora_rank == 8);
  CHECK_FALSE(c.rope.yarn);
  CHECK(c.rope.freq_scale == 1.0f);
  CHECK(c.mla.kq_scale == Approx(1 / std::sqrt(8.0)));
  CHECK(c.moe.gating == Gating::Sigmoid);
  CHECK(c.moe.norm_weights);
  const LayerWeights& l = model->layers()[2];
  CHECK(l.wq.data == nullptr);
  CHECK(l.wq_a.rows == 8);
  CHECK(l.q_a_norm != nullptr);
  CHECK(l.wq_b.rows == 16);
  CHECK(l.wq_b.cols == 8);
  CHECK(l.router_bias != nullptr);
}

TEST_CASE("deepseek2: bad metadata and tensors name the key or tensor", "[deepseek2]") {
  TinyDeepSeek2 m;
  SECTION("more experts used than there are") {
    m.n_expert_used = 5;
    require_load_error(m, "used.gguf", "expert_used_count 5 exceeds expert_count 4");
  }
  SECTION("a query compression rank with an uncompressed query tensor") {
    m.extra_kv = [](GGUFBuilder& b) { b.add_u32("deepseek2.attention.q_lora_rank", 8); };
    require_load_error(m, "qlora.gguf", "attn_q_a.weight' is absent");
  }
  SECTION("an unknown gating function") {
    m.extra_kv = [](GGUFBuilder& b) { b.add_u32("deepseek2.expert_gating_func", 3); };
    require_load_error(m, "gating.gguf", "expert_gating_func' = 3");
  }
  SECTION("YaRN without its log multiplier") {
    m.drop = {"rope.scaling.yarn_log_multiplier"};
    require_load_error(m, "yarn.gguf", "yarn_log_multiplier");
  }
  SECTION("linear rope scaling") {
    m.yarn = false;
    m.extra_kv = [](GGUFBuilder& b) { b.add_string("deepseek2.rope.scaling.type", "linear"); };
    require_load_error(m, "linear.gguf", "rope scaling type 'linear' is not supported");
  }
  SECTION("fewer key/value heads than heads") {
    m.extra_kv = [](GGUFBuilder& b) { b.add_u32("deepseek2.attention.head_count_kv", 1); };
    m.drop = {"attention.head_count_kv"};  // the builder's own, replaced
    require_load_error(m, "kvheads.gguf", "head_count_kv 1 differs from head_count 2");
  }
  SECTION("a rotated part as wide as the key head") {
    m.qk_nope = 0;
    require_load_error(m, "rope.gguf", "must be even and below attention.key_length");
  }
  SECTION("no expert count in a model with MoE layers") {
    m.drop = {"expert_count"};
    require_load_error(m, "count.gguf", "expert_count");
  }
  SECTION("no expert_weights_scale") {
    m.drop = {"expert_weights_scale"};
    require_load_error(m, "scale.gguf", "expert_weights_scale");
  }
  SECTION("a stacked expert tensor of the wrong shape") {
    m.shape_override["blk.1.ffn_up_exps.weight"] = {16, 8, 3};
    require_load_error(m, "exps.gguf", "'blk.1.ffn_up_exps.weight' has shape [16, 8, 3]");
  }
  SECTION("a missing latent norm") {
    m.drop = {"blk.2.attn_kv_a_norm.weight"};
    require_load_error(m, "norm.gguf", "missing tensor 'blk.2.attn_kv_a_norm.weight'");
  }
}

TEST_CASE("deepseek2: stages before 17 refuse it by name; later ones run it", "[deepseek2]") {
  TinyDeepSeek2 m;
  auto model = load(m.build("ds2-run.gguf"));
  EngineOptions options;
  options.n_ctx = 16;
  if (!stage_runs(Arch::DeepSeek2)) {
    CHECK_THROWS_WITH(create_engine(*model, options),
                      Contains("architecture 'deepseek2'") &&
                          Contains("needs stage " + std::string(kFirstDeepSeek2Stage)));
    return;
  }
  auto engine = create_engine(*model, options);
  const std::vector<int> tokens = {1, 5, 7, 2, 11, 3};
  const float* logits = engine->forward(tokens.data(), int(tokens.size()), 0);
  const std::vector<float> batched(logits, logits + model->config().n_vocab);
  auto one_by_one = create_engine(*model, options);
  for (int i = 0; i < int(tokens.size()); ++i) logits = one_by_one->forward(&tokens[i], 1, i);
  for (int v = 0; v < model->config().n_vocab; ++v) {
    REQUIRE(std::isfinite(batched[v]));
    CHECK(logits[v] == Approx(batched[v]).margin(1e-5));
  }
}

TEST_CASE("deepseek2: the ring cache slides with MLA's keys and values", "[deepseek2]") {
  if (!stage_runs(Arch::DeepSeek2)) {
    WARN("not run: this stage refuses deepseek2 (" << kFirstDeepSeek2Stage << " on runs it)");
    return;
  }
  const std::string path = project_path("data/models/tiny-deepseek2-lite-f32.gguf");
  auto model = load(path);
  constexpr int kSmall = 12, kSteps = 40;
  EngineOptions small;
  small.n_ctx = kSmall;
  EngineOptions large;
  large.n_ctx = kSteps;
  auto ring = create_engine(*model, small);
  auto full = create_engine(*model, large);
  REQUIRE(ring->slides_past_context());
  const int n_vocab = model->config().n_vocab;
  int token = 1;
  for (int pos = 0; pos < kSteps; ++pos) {
    const float* a = ring->forward(&token, 1, pos);
    const std::vector<float> ring_logits(a, a + n_vocab);
    const float* b = full->forward(&token, 1, pos);
    for (int v = 0; v < n_vocab; ++v) REQUIRE(std::isfinite(ring_logits[v]));
    if (pos < kSmall) {  // until the ring wraps, the same cache contents: the same logits
      for (int v = 0; v < n_vocab; ++v) REQUIRE(ring_logits[v] == b[v]);
    }
    token = (token * 7 + 3) % n_vocab;
  }
}
