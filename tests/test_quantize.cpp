// test_quantize.cpp: what build/quantize is made of: llama-quantize's per-tensor mixes
// (quant_mix.h) and the GGUF writer, read back by the reader.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>

#include "error.h"
#include "gguf.h"
#include "gguf_writer.h"
#include "quant_mix.h"

namespace {

constexpr int kLayers7B = 30;  // deepseek-llm-7b
constexpr int64_t kRow7B = 4096;
constexpr int64_t kRowFfn7B = 11008;  // 43 super-blocks
constexpr int64_t kRowTiny = 128;     // tiny-kjv: not a whole super-block

/// The types a mix gives layer i's attn_v and ffn_down, and then some other matrices.
struct Chosen {
  GGMLType v, down;
};

std::vector<Chosen> layer_types(const char* type, int n_layer, int n_gqa = 1) {
  QuantMix mix(*find_file_type(type), n_layer, n_gqa, /*has_output=*/true, /*pure=*/false);
  std::vector<Chosen> out;
  bool fell_back = false;
  for (int i = 0; i < n_layer; ++i) {
    const std::string blk = "blk." + std::to_string(i) + ".";
    const GGMLType v = mix.choose(blk + "attn_v.weight", kRow7B, fell_back);
    const GGMLType down = mix.choose(blk + "ffn_down.weight", kRowFfn7B, fell_back);
    out.push_back({v, down});
  }
  return out;
}

GGMLType choose_one(const char* type, const std::string& name, int64_t nx, bool& fell_back,
                    bool has_output = true, bool pure = false) {
  QuantMix mix(*find_file_type(type), kLayers7B, 1, has_output, pure);
  return mix.choose(name, nx, fell_back);
}

}  // namespace

TEST_CASE("quantize: file type names as llama-quantize takes them", "[quantize]") {
  REQUIRE(find_file_type("Q4_K_M") != nullptr);
  CHECK(find_file_type("q4_k_m")->id == 15);
  CHECK(find_file_type("Q4_K")->id == 15);  // the _M mix, as llama-quantize
  CHECK(find_file_type("Q3_K")->id == 12);
  CHECK(find_file_type("Q5_K_S")->base == GGMLType::Q5_K);
  CHECK(find_file_type("bf16")->id == 32);
  CHECK(find_file_type("Q8_0")->id == 7);
  CHECK(find_file_type("IQ4_NL") == nullptr);
  CHECK(find_file_type("") == nullptr);
}

TEST_CASE("quantize: which tensors are quantized", "[quantize]") {
  CHECK(is_quantizable("token_embd.weight", 2));
  CHECK(is_quantizable("blk.3.ffn_down.weight", 2));
  CHECK_FALSE(is_quantizable("blk.3.attn_norm.weight", 1));
  CHECK_FALSE(is_quantizable("blk.3.attn_norm.weight", 2));  // norms never, whatever their shape
  CHECK_FALSE(is_quantizable("rope_freqs.weight", 1));
  CHECK_FALSE(is_quantizable("blk.0.attn_q.bias", 1));
}

TEST_CASE("quantize: Q4_K_M gives Q6_K to attn_v and ffn_down on the more-bits layers",
          "[quantize]") {
  // 30 layers: the first 3 (30/8), from 26 (7*30/8) on, and every third from layer 5.
  const std::vector<Chosen> t = layer_types("Q4_K_M", kLayers7B);
  for (int i = 0; i < kLayers7B; ++i) {
    INFO("layer " << i);
    const bool more = i < 3 || i >= 26 || (i - 3) % 3 == 2;
    CHECK(t[i].v == (more ? GGMLType::Q6_K : GGMLType::Q4_K));
    CHECK(t[i].down == (more ? GGMLType::Q6_K : GGMLType::Q4_K));
  }
  bool fell_back = true;
  CHECK(choose_one("Q4_K_M", "output.weight", kRow7B, fell_back) == GGMLType::Q6_K);
  CHECK_FALSE(fell_back);
  CHECK(choose_one("Q4_K_M", "token_embd.weight", kRow7B, fell_back) == GGMLType::Q4_K);
  CHECK(choose_one("Q4_K_M", "blk.7.attn_q.weight", kRow7B, fell_back) == GGMLType::Q4_K);
  // Tied output: token_embd.weight is the output matrix and gets its type.
  CHECK(choose_one("Q4_K_M", "token_embd.weight", kRow7B, fell_back, false) == GGMLType::Q6_K);
}

TEST_CASE("quantize: the other K mixes", "[quantize]") {
  const std::vector<Chosen> s = layer_types("Q4_K_S", kLayers7B);
  CHECK(s[3].v == GGMLType::Q5_K);
  CHECK(s[4].v == GGMLType::Q4_K);
  CHECK(s[2].down == GGMLType::Q5_K);  // first 30/8 = 3 layers
  CHECK(s[3].down == GGMLType::Q4_K);
  const std::vector<Chosen> m3 = layer_types("Q3_K_M", kLayers7B);
  CHECK(m3[1].v == GGMLType::Q5_K);
  CHECK(m3[2].v == GGMLType::Q4_K);
  CHECK(m3[0].down == GGMLType::Q5_K);  // first 30/16 = 1 layer
  CHECK(m3[1].down == GGMLType::Q4_K);
  const std::vector<Chosen> l3 = layer_types("Q3_K_L", kLayers7B);
  CHECK(l3[10].v == GGMLType::Q5_K);
  CHECK(l3[10].down == GGMLType::Q5_K);
  CHECK(layer_types("Q2_K", kLayers7B)[0].v == GGMLType::Q3_K);
  CHECK(layer_types("Q2_K", kLayers7B, 4)[0].v == GGMLType::Q4_K);  // 4 queries per KV head
  CHECK(layer_types("Q2_K", kLayers7B)[0].down == GGMLType::Q3_K);
  CHECK(layer_types("Q5_K_S", kLayers7B)[0].v == GGMLType::Q5_K);  // no mix but the output
  bool fell_back = false;
  CHECK(choose_one("Q2_K", "blk.0.attn_output.weight", kRow7B, fell_back) == GGMLType::Q3_K);
  CHECK(choose_one("Q3_K_M", "blk.0.attn_output.weight", kRow7B, fell_back) == GGMLType::Q4_K);
  CHECK(choose_one("Q3_K_L", "blk.0.attn_output.weight", kRow7B, fell_back) == GGMLType::Q5_K);
  CHECK(choose_one("Q4_0", "output.weight", kRow7B, fell_back) == GGMLType::Q6_K);
  CHECK(choose_one("Q8_0", "output.weight", kRow7B, fell_back) == GGMLType::Q8_0);
  CHECK(choose_one("F16", "output.weight", kRow7B, fell_back) == GGMLType::F16);
}

TEST_CASE("quantize: rows that are not whole super-blocks fall back", "[quantize]") {
  bool fell_back = false;
  CHECK(choose_one("Q4_K_M", "blk.9.attn_q.weight", kRowTiny, fell_back) == GGMLType::Q5_0);
  CHECK(fell_back);
  CHECK(choose_one("Q5_K_M", "blk.9.attn_q.weight", kRowTiny, fell_back) == GGMLType::Q5_1);
  CHECK(choose_one("Q6_K", "blk.9.attn_q.weight", kRowTiny, fell_back) == GGMLType::Q8_0);
  CHECK(choose_one("Q3_K_S", "blk.9.attn_q.weight", kRowTiny, fell_back) == GGMLType::Q4_0);
  CHECK(choose_one("Q4_K_M", "blk.0.attn_v.weight", kRowTiny, fell_back) == GGMLType::Q8_0);
  CHECK(choose_one("Q4_K_M", "output.weight", kRowTiny, fell_back) == GGMLType::Q8_0);
  CHECK(choose_one("Q4_0", "output.weight", kRowTiny, fell_back) == GGMLType::Q8_0);
  CHECK(choose_one("Q4_K_M", "blk.9.attn_q.weight", 48, fell_back) == GGMLType::F16);
  CHECK_THROWS_AS(choose_one("Q4_0", "blk.9.attn_q.weight", 48, fell_back), Error);
  // --pure: no mix and no fallback.
  CHECK(choose_one("Q4_K_M", "output.weight", kRow7B, fell_back, true, true) == GGMLType::Q4_K);
  CHECK_THROWS_WITH(choose_one("Q4_K_M", "blk.0.attn_q.weight", kRowTiny, fell_back, true, true),
                    Catch::Matchers::Contains("blk.0.attn_q.weight"));
}

TEST_CASE("quantize: the GGUF writer's file reads back", "[quantize]") {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("writer-" + std::to_string(getpid()) + ".gguf"))
          .string();
  const size_t kAlignment = 64;
  GGUFValue name, count, scale, tokens, ids, factors, flag, big;
  name.type = GGUFType::STRING;
  name.s = "llama";
  count.type = GGUFType::UINT32;
  count.i = 30;
  scale.type = GGUFType::FLOAT32;
  scale.f = 0.1f;
  tokens.type = GGUFType::ARRAY;
  tokens.array_type = GGUFType::STRING;
  tokens.strings = {"<s>", "a", "\xc4\xa0the"};
  ids.type = GGUFType::ARRAY;
  ids.array_type = GGUFType::INT32;
  ids.ints = {-1, 0, 7};
  factors.type = GGUFType::ARRAY;
  factors.array_type = GGUFType::FLOAT32;
  factors.floats = {1.0, 0.25f};
  flag.type = GGUFType::BOOL;
  flag.i = 1;
  big.type = GGUFType::UINT64;
  big.u = uint64_t(1) << 40;
  big.i = int64_t(big.u);
  const std::vector<float> a = {1, 2, 3, 4, 5, 6};
  const std::vector<uint16_t> b = {0x3c00, 0xc000, 0x3800};
  {
    GGUFWriter w(path, kAlignment);
    w.add_metadata("general.architecture", name);
    w.add_metadata("llama.block_count", count);
    w.add_metadata("x.scale", scale);
    w.add_metadata("tokenizer.ggml.tokens", tokens);
    w.add_metadata("x.ids", ids);
    w.add_metadata("x.factors", factors);
    w.add_metadata("x.flag", flag);
    w.add_metadata("x.big", big);
    w.set_u32("general.alignment", kAlignment);
    w.add_tensor("a.weight", GGMLType::F32, {3, 2});
    w.add_tensor("b.weight", GGMLType::F16, {3});
    w.write_header();
    CHECK_THROWS_AS(w.write_tensor("b.weight", b.data(), 6), Error);  // out of order
    w.write_tensor("a.weight", a.data(), a.size() * sizeof(float));
    CHECK_THROWS_AS(w.write_tensor("b.weight", b.data(), 4), Error);  // wrong size
    w.write_tensor("b.weight", b.data(), b.size() * sizeof(uint16_t));
    w.finish();
  }
  const GGUFFile f(path);
  CHECK(f.alignment() == kAlignment);
  CHECK(f.get_string("general.architecture") == "llama");
  CHECK(f.get_int("llama.block_count") == 30);
  CHECK(f.get_float("x.scale") == Approx(0.1f).epsilon(0));
  CHECK(f.get_string_array("tokenizer.ggml.tokens") == tokens.strings);
  CHECK(f.get_int_array("x.ids") == ids.ints);
  CHECK(f.get_float_array("x.factors") == factors.floats);
  CHECK(f.get_bool("x.flag"));
  CHECK(f.find("x.big")->u == big.u);
  const TensorInfo& ta = f.tensor("a.weight");
  CHECK(ta.type == GGMLType::F32);
  CHECK(ta.ne == std::vector<int64_t>{3, 2});
  CHECK(std::memcmp(ta.data, a.data(), a.size() * sizeof(float)) == 0);
  CHECK(reinterpret_cast<uintptr_t>(ta.data) % kAlignment == 0);
  const TensorInfo& tb = f.tensor("b.weight");
  CHECK(std::memcmp(tb.data, b.data(), b.size() * sizeof(uint16_t)) == 0);
  std::remove(path.c_str());
}
