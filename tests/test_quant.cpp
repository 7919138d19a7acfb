// test_quant.cpp: fp16 conversion, block layouts and the reference (de)quantizers, against values
// worked out by hand.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <utility>
#include <vector>

#include "error.h"
#include "quant.h"

namespace {

float bits_float(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

constexpr uint16_t kHalfOne = 0x3c00;
constexpr uint16_t kHalfHalf = 0x3800;     // 0.5
constexpr uint16_t kHalfQuarter = 0x3400;  // 0.25

}  // namespace

TEST_CASE("quant: fp16 to fp32 on special values", "[quant]") {
  CHECK(fp16_to_fp32(0x0000) == 0.0f);
  CHECK(std::signbit(fp16_to_fp32(0x8000)));
  CHECK(fp16_to_fp32(0x8000) == 0.0f);
  CHECK(fp16_to_fp32(kHalfOne) == 1.0f);
  CHECK(fp16_to_fp32(0xc000) == -2.0f);
  CHECK(fp16_to_fp32(0x3555) == 0.333251953125f);
  CHECK(fp16_to_fp32(0x7bff) == 65504.0f);                  // largest finite
  CHECK(fp16_to_fp32(0x0400) == std::ldexp(1.0f, -14));     // smallest normal
  CHECK(fp16_to_fp32(0x0001) == std::ldexp(1.0f, -24));     // smallest subnormal
  CHECK(fp16_to_fp32(0x03ff) == std::ldexp(1023.0f, -24));  // largest subnormal
  CHECK(fp16_to_fp32(0x8001) == -std::ldexp(1.0f, -24));
  CHECK(fp16_to_fp32(0x7c00) == std::numeric_limits<float>::infinity());
  CHECK(fp16_to_fp32(0xfc00) == -std::numeric_limits<float>::infinity());
  CHECK(std::isnan(fp16_to_fp32(0x7e00)));
  CHECK(std::isnan(fp16_to_fp32(0x7c01)));  // signalling nan stays a nan
}

TEST_CASE("quant: fp32 to fp16 rounds to nearest even", "[quant]") {
  const float ulp1 = std::ldexp(1.0f, -10);  // spacing of halves in [1, 2)
  CHECK(fp32_to_fp16(1.0f) == kHalfOne);
  CHECK(fp32_to_fp16(1.0f + ulp1 / 2) == 0x3c00);                // tie -> even (down)
  CHECK(fp32_to_fp16(1.0f + 3 * ulp1 / 2) == 0x3c02);            // tie -> even (up)
  CHECK(fp32_to_fp16(1.0f + ulp1 / 2 + ulp1 / 1024) == 0x3c01);  // above the tie
  CHECK(fp32_to_fp16(-0.0f) == 0x8000);
  CHECK(fp32_to_fp16(65504.0f) == 0x7bff);
  CHECK(fp32_to_fp16(65519.0f) == 0x7bff);
  CHECK(fp32_to_fp16(65520.0f) == 0x7c00);  // tie between 65504 and 65536 -> even = inf
  CHECK(fp32_to_fp16(1e10f) == 0x7c00);
  CHECK(fp32_to_fp16(-1e10f) == 0xfc00);
  CHECK(fp32_to_fp16(std::numeric_limits<float>::infinity()) == 0x7c00);
  const uint16_t nan = fp32_to_fp16(std::numeric_limits<float>::quiet_NaN());
  CHECK((nan & 0x7c00) == 0x7c00);
  CHECK((nan & 0x03ff) != 0);
  CHECK(fp32_to_fp16(bits_float(0x7f800001)) != 0x7c00);  // nan with low payload is not inf
  // Subnormals count units of 2^-24.
  CHECK(fp32_to_fp16(std::ldexp(1.0f, -24)) == 0x0001);
  CHECK(fp32_to_fp16(std::ldexp(1.0f, -25)) == 0x0000);           // tie -> even (zero)
  CHECK(fp32_to_fp16(std::ldexp(1.0f, -25) * 1.001f) == 0x0001);  // above the tie
  CHECK(fp32_to_fp16(std::ldexp(3.0f, -25)) == 0x0002);           // 1.5 units: tie -> 2
  CHECK(fp32_to_fp16(std::ldexp(1.0f, -26)) == 0x0000);
  CHECK(fp32_to_fp16(std::ldexp(2047.0f, -25)) == 0x0400);  // halfway 0x3ff..0x400 -> normal
  CHECK(fp32_to_fp16(1e-30f) == 0x0000);
  CHECK(fp32_to_fp16(-1e-30f) == 0x8000);
  CHECK(fp32_to_fp16(bits_float(0x00000001)) == 0x0000);  // f32 subnormal
}

TEST_CASE("quant: fp16 round trip is exact for all 65536 halves", "[quant]") {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const float f = fp16_to_fp32(uint16_t(h));
    if (std::isnan(f)) {
      REQUIRE(std::isnan(fp16_to_fp32(fp32_to_fp16(f))));
    } else {
      REQUIRE(fp32_to_fp16(f) == h);
    }
  }
}

#if defined(__FLT16_MAX__)
TEST_CASE("quant: fp32 to fp16 agrees with the compiler's _Float16", "[quant]") {
  // A stride through all float bit patterns (every exponent, many mantissas).
  constexpr uint32_t kStride = 997;
  for (uint64_t bits = 0; bits <= 0xffffffffull; bits += kStride) {
    const float f = bits_float(uint32_t(bits));
    if (std::isnan(f)) continue;
    const _Float16 h = static_cast<_Float16>(f);
    uint16_t expected;
    std::memcpy(&expected, &h, sizeof expected);
    if (fp32_to_fp16(f) != expected) {
      FAIL("bits 0x" << std::hex << bits << ": got 0x" << fp32_to_fp16(f) << ", expected 0x"
                     << expected);
    }
  }
}
#endif

TEST_CASE("quant: type table", "[quant]") {
  const GGMLType kAll[] = {GGMLType::F32,  GGMLType::F16,  GGMLType::BF16, GGMLType::Q4_0,
                           GGMLType::Q4_1, GGMLType::Q5_0, GGMLType::Q5_1, GGMLType::Q8_0,
                           GGMLType::Q2_K, GGMLType::Q3_K, GGMLType::Q4_K, GGMLType::Q5_K,
                           GGMLType::Q6_K};
  for (GGMLType t : kAll) {
    INFO(ggml_type_name(t));
    CHECK(type_supported(t));
    const TypeTraits* traits = type_traits(t);
    REQUIRE(traits != nullptr);
    CHECK(traits->type == t);
    // The table agrees with the GGUF reader's layouts (what sizes tensors in a file).
    CHECK(traits->block_size == ggml_type_layout(t)->block_size);
    CHECK(traits->block_bytes == ggml_type_layout(t)->block_bytes);
    CHECK(type_block_size(t) == traits->block_size);
    CHECK(type_block_bytes(t) == traits->block_bytes);
    CHECK(type_from_name(ggml_type_name(t)) == t);
  }
  CHECK_THROWS_WITH(type_from_name("q8_1"),
                    Catch::Contains("unknown type 'q8_1'") && Catch::Contains("q4_0, q4_1"));
  CHECK_THROWS_AS(type_from_name("Q4_0"), Error);  // ggml's names, as files and tools write them
  for (GGMLType t : {GGMLType::Q8_1, GGMLType::Q8_K, GGMLType(99)}) {
    CHECK_FALSE(type_supported(t));
    CHECK(type_traits(t) == nullptr);
  }
  CHECK(type_block_size(GGMLType::F32) == 1);
  CHECK(type_block_size(GGMLType::Q4_0) == 32);
  CHECK(type_block_size(GGMLType::Q6_K) == 256);
  CHECK(type_block_bytes(GGMLType::F16) == 2);
  CHECK(type_block_bytes(GGMLType::Q8_0) == 34);
  CHECK(type_row_bytes(GGMLType::F32, 5) == 20);
  CHECK(type_row_bytes(GGMLType::F16, 3) == 6);
  CHECK(type_row_bytes(GGMLType::BF16, 3) == 6);
  CHECK(type_row_bytes(GGMLType::Q4_0, 64) == 36);
  CHECK(type_row_bytes(GGMLType::Q8_0, 96) == 102);
  CHECK(type_row_bytes(GGMLType::Q6_K, 512) == 420);
  CHECK(type_row_bytes(GGMLType::Q2_K, 512) == 168);
  CHECK_THROWS_AS(type_row_bytes(GGMLType::Q4_0, 33), Error);
  CHECK_THROWS_WITH(type_block_size(GGMLType::Q8_K), Catch::Matchers::Contains("q8_K"));
  // The message lists what is supported, from the table.
  CHECK_THROWS_WITH(type_block_size(GGMLType::Q8_1),
                    Catch::Matchers::Contains("f32, f16, bf16, q4_0, q4_1, q5_0, q5_1, q8_0, "
                                              "q2_K, q3_K, q4_K, q5_K, q6_K"));
  float out[256];
  const uint8_t zeros[292] = {};
  CHECK_THROWS_WITH(dequantize_row(GGMLType::Q8_K, zeros, out, 256),
                    Catch::Matchers::Contains("q8_K"));
  CHECK_THROWS_WITH(quantize_row(GGMLType::Q8_1, out, out, 32), Catch::Matchers::Contains("q8_1"));
}

TEST_CASE("quant: bits per weight", "[quant]") {
  const std::pair<GGMLType, float> kExpected[] = {
      {GGMLType::F32, 32.0f},    {GGMLType::F16, 16.0f}, {GGMLType::BF16, 16.0f},
      {GGMLType::Q4_0, 4.5f},    {GGMLType::Q4_1, 5.0f}, {GGMLType::Q5_0, 5.5f},
      {GGMLType::Q5_1, 6.0f},    {GGMLType::Q8_0, 8.5f}, {GGMLType::Q2_K, 2.625f},
      {GGMLType::Q3_K, 3.4375f}, {GGMLType::Q4_K, 4.5f}, {GGMLType::Q5_K, 5.5f},
      {GGMLType::Q6_K, 6.5625f}};
  for (const auto& [type, bits] : kExpected) {
    INFO(ggml_type_name(type));
    CHECK(type_traits(type)->bits_per_weight() == bits);
  }
}

TEST_CASE("quant: bf16 conversion rounds to nearest even and keeps NaN a NaN", "[quant]") {
  CHECK(fp32_to_bf16(1.0f) == 0x3f80);
  CHECK(fp32_to_bf16(-2.0f) == 0xc000);
  CHECK(fp32_to_bf16(-0.0f) == 0x8000);
  CHECK(fp32_to_bf16(bits_float(0x3f808000)) == 0x3f80);  // tie -> even (down)
  CHECK(fp32_to_bf16(bits_float(0x3f818000)) == 0x3f82);  // tie -> even (up)
  CHECK(fp32_to_bf16(bits_float(0x3f808001)) == 0x3f81);  // above the tie
  CHECK(fp32_to_bf16(bits_float(0x3f807fff)) == 0x3f80);  // below the tie
  CHECK(fp32_to_bf16(bits_float(0x7f7fffff)) == 0x7f80);  // the largest float rounds to inf
  CHECK(fp32_to_bf16(std::numeric_limits<float>::infinity()) == 0x7f80);
  CHECK(fp32_to_bf16(-std::numeric_limits<float>::infinity()) == 0xff80);
  CHECK(fp32_to_bf16(bits_float(0x00010000)) == 0x0001);  // subnormals are kept
  // A NaN whose payload is only in the dropped bits would round to inf: it is made quiet.
  CHECK(fp32_to_bf16(bits_float(0x7f800001)) == 0x7fc0);
  CHECK(fp32_to_bf16(bits_float(0xff800001)) == 0xffc0);
  CHECK(std::isnan(bf16_to_fp32(fp32_to_bf16(std::nanf("")))));
  CHECK(bf16_to_fp32(0x3f80) == 1.0f);
  CHECK(bf16_to_fp32(0x4049) == 3.140625f);
  CHECK(bf16_to_fp32(0x0001) == bits_float(0x00010000));
  for (uint32_t h = 0; h <= 0xffff; ++h) {  // bf16 -> f32 -> bf16 is exact for every non-NaN
    const float f = bf16_to_fp32(uint16_t(h));
    if (!std::isnan(f)) REQUIRE(fp32_to_bf16(f) == h);
  }
}

TEST_CASE("quant: F32, F16 and BF16 rows", "[quant]") {
  const float f[3] = {1.5f, -2.0f, 0.0f};
  float out[3];
  dequantize_row(GGMLType::F32, f, out, 3);
  CHECK(std::memcmp(f, out, sizeof f) == 0);
  const uint16_t h[4] = {kHalfOne, 0xc000, 0x0001, 0x7bff};
  float hout[4];
  dequantize_row(GGMLType::F16, h, hout, 4);
  CHECK(hout[0] == 1.0f);
  CHECK(hout[1] == -2.0f);
  CHECK(hout[2] == std::ldexp(1.0f, -24));
  CHECK(hout[3] == 65504.0f);
  const uint16_t b[3] = {0x3f80, 0xc049, 0x7f80};
  float bout[3];
  dequantize_row(GGMLType::BF16, b, bout, 3);
  CHECK(bout[0] == 1.0f);
  CHECK(bout[1] == -3.140625f);
  CHECK(bout[2] == std::numeric_limits<float>::infinity());

  // quantize_row for the float types converts each value.
  float copy[3];
  quantize_row(GGMLType::F32, f, copy, 3);
  CHECK(std::memcmp(f, copy, sizeof f) == 0);
  uint16_t h2[3], b2[3];
  quantize_row(GGMLType::F16, f, h2, 3);
  quantize_row(GGMLType::BF16, f, b2, 3);
  for (int i = 0; i < 3; ++i) {
    CHECK(h2[i] == fp32_to_fp16(f[i]));
    CHECK(b2[i] == fp32_to_bf16(f[i]));
  }
}

TEST_CASE("quant: a Q4_0 block by hand", "[quant]") {
  // d = 0.5; qs[j] has low nibble j and high nibble 15 - j.
  BlockQ4_0 block[2];
  for (int b = 0; b < 2; ++b) {
    block[b].d = b == 0 ? kHalfHalf : kHalfOne;
    for (int j = 0; j < 16; ++j) block[b].qs[j] = uint8_t(j | ((15 - j) << 4));
  }
  const float expected[32] = {-4,  -3.5, -3,   -2.5, -2,   -1.5, -1,   -0.5, 0,    0.5, 1,
                              1.5, 2,    2.5,  3,    3.5,  3.5,  3,    2.5,  2,    1.5, 1,
                              0.5, 0,    -0.5, -1,   -1.5, -2,   -2.5, -3,   -3.5, -4};
  float out[64];
  dequantize_row(GGMLType::Q4_0, block, out, 64);
  for (int j = 0; j < 32; ++j) {
    INFO("weight " << j);
    CHECK(out[j] == expected[j]);
    CHECK(out[32 + j] == 2 * expected[j]);  // second block: d = 1
  }
}

TEST_CASE("quant: a Q8_0 block by hand", "[quant]") {
  BlockQ8_0 block;
  block.d = kHalfQuarter;
  for (int j = 0; j < 32; ++j) block.qs[j] = int8_t(j - 16);
  block.qs[0] = -128;
  block.qs[31] = 127;
  float out[32];
  dequantize_row(GGMLType::Q8_0, &block, out, 32);
  CHECK(out[0] == -32.0f);
  CHECK(out[1] == -3.75f);
  CHECK(out[16] == 0.0f);
  CHECK(out[17] == 0.25f);
  CHECK(out[30] == 3.5f);
  CHECK(out[31] == 31.75f);
}

TEST_CASE("quant: a Q6_K block by hand", "[quant]") {
  // All ql/qh zero: every weight is (0 - 32) * d * scale. Then a few bytes set by hand.
  BlockQ6_K block;
  std::memset(&block, 0, sizeof block);
  block.d = kHalfHalf;
  for (int k = 0; k < 16; ++k) block.scales[k] = int8_t(k + 1);
  block.scales[12] = -3;
  block.ql[0] = 0x21;       // weight 0: low 1; weight 64: low 2 (high nibble = quarter 2)
  block.ql[32 + 5] = 0x43;  // weight 37: low 3; weight 101: low 4
  block.qh[3] = 0xE4;       // 2-bit highs 0,1,2,3 for weights 3, 35, 67, 99
  block.ql[64 + 7] = 0xF0;  // second half: weight 135 low 0, weight 199 low 15
  block.qh[32 + 7] = 0x03;  // weight 135 high 3
  float out[256];
  dequantize_row(GGMLType::Q6_K, &block, out, 256);

  std::vector<float> expected(256);
  for (int i = 0; i < 256; ++i) expected[i] = -16.0f * block.scales[i / 16];  // -32 * 0.5 * s
  expected[0] = -15.5f;                                                       // (1 - 32) * 0.5 * 1
  expected[64] = -75.0f;                                                      // (2 - 32) * 0.5 * 5
  expected[37] = -43.5f;                                                      // (3 - 32) * 0.5 * 3
  expected[101] = -98.0f;                                                     // (4 - 32) * 0.5 * 7
  expected[3] = -16.0f;                                                       // (0 - 32) * 0.5 * 1
  expected[35] = -24.0f;                                                      // (16 - 32) * 0.5 * 3
  expected[67] = 0.0f;                                                        // (32 - 32)
  expected[99] = 56.0f;                                                       // (48 - 32) * 0.5 * 7
  expected[135] = 72.0f;                                                      // (48 - 32) * 0.5 * 9
  expected[199] = 25.5f;  // (15 - 32) * 0.5 * -3
  for (int i = 0; i < 256; ++i) {
    INFO("weight " << i);
    CHECK(out[i] == expected[i]);
  }
}

TEST_CASE("quant: Q4_1, Q5_0 and Q5_1 blocks by hand", "[quant]") {
  // Q4_1: d = 0.5, m = -2; qs[j] has low nibble j and high nibble 15 - j.
  BlockQ4_1 q41;
  q41.d = kHalfHalf;
  q41.m = 0xc000;  // -2
  for (int j = 0; j < 16; ++j) q41.qs[j] = uint8_t(j | ((15 - j) << 4));
  float out[32];
  dequantize_row(GGMLType::Q4_1, &q41, out, 32);
  CHECK(out[0] == -2.0f);   // 0 * 0.5 - 2
  CHECK(out[5] == 0.5f);    // 5 * 0.5 - 2
  CHECK(out[15] == 5.5f);   // 15 * 0.5 - 2
  CHECK(out[16] == 5.5f);   // high nibble of qs[0]: 15
  CHECK(out[31] == -2.0f);  // high nibble of qs[15]: 0

  // Q5_0: d = 0.25, w = (q - 16) d. Fifth bits 0, 17 and 31 set: qh = 0x80020001, little-endian.
  BlockQ5_0 q50 = {};
  q50.d = kHalfQuarter;
  q50.qs[0] = 0x3F;  // weight 0: low 15; weight 16: low 3
  q50.qs[1] = 0x21;  // weight 1: low 1; weight 17: low 2
  const uint8_t qh50[4] = {0x01, 0x00, 0x02, 0x80};
  std::memcpy(q50.qh, qh50, 4);
  dequantize_row(GGMLType::Q5_0, &q50, out, 32);
  CHECK(out[0] == 3.75f);    // (15 + 16 - 16) * 0.25
  CHECK(out[16] == -3.25f);  // (3 - 16) * 0.25
  CHECK(out[1] == -3.75f);   // (1 - 16) * 0.25
  CHECK(out[17] == 0.5f);    // (2 + 16 - 16) * 0.25
  CHECK(out[31] == 0.0f);    // (0 + 16 - 16)
  CHECK(out[2] == -4.0f);    // (0 - 16) * 0.25

  // Q5_1: d = 1, m = 0.5. Weight 3: low 10 + fifth bit (qh bit 3); weight 19: low 7 + bit 19.
  BlockQ5_1 q51 = {};
  q51.d = kHalfOne;
  q51.m = kHalfHalf;
  q51.qs[3] = 0x7A;
  const uint8_t qh51[4] = {0x08, 0x00, 0x08, 0x00};
  std::memcpy(q51.qh, qh51, 4);
  dequantize_row(GGMLType::Q5_1, &q51, out, 32);
  CHECK(out[3] == 26.5f);   // 26 * 1 + 0.5
  CHECK(out[19] == 23.5f);  // 23 * 1 + 0.5
  CHECK(out[0] == 0.5f);
  CHECK(out[20] == 0.5f);
}

TEST_CASE("quant: Q4_1 and Q5_1 quantization of exact ramps", "[quant]") {
  // Sixteen levels from -1 in steps of 0.25: d = 3.75 / 15 = 0.25 exactly, m = -1, q = j % 16.
  float x[32];
  for (int j = 0; j < 32; ++j) x[j] = float(j % 16) * 0.25f - 1.0f;
  BlockQ4_1 q41;
  quantize_row(GGMLType::Q4_1, x, &q41, 32);
  CHECK(q41.d == kHalfQuarter);
  CHECK(q41.m == 0xbc00);  // -1
  for (int j = 0; j < 16; ++j) CHECK(q41.qs[j] == uint8_t(j | (j << 4)));
  // 32 levels for Q5_1: d = 7.75 / 31 = 0.25, q = j; weights 16..31 carry the fifth bit.
  for (int j = 0; j < 32; ++j) x[j] = float(j) * 0.25f - 1.0f;
  BlockQ5_1 q51;
  quantize_row(GGMLType::Q5_1, x, &q51, 32);
  CHECK(q51.d == kHalfQuarter);
  CHECK(q51.m == 0xbc00);
  for (int j = 0; j < 16; ++j) CHECK(q51.qs[j] == uint8_t(j | (j << 4)));
  const uint8_t qh[4] = {0x00, 0x00, 0xFF, 0xFF};
  CHECK(std::memcmp(q51.qh, qh, 4) == 0);
  float y[32];
  dequantize_row(GGMLType::Q5_1, &q51, y, 32);
  for (int j = 0; j < 32; ++j) CHECK(y[j] == x[j]);
}

TEST_CASE("quant: a Q2_K block by hand", "[quant]") {
  // d = 0.5, dmin = 0.25; w = d * (scale nibble) * q - dmin * (min nibble), per 16 weights.
  BlockQ2_K block = {};
  block.d = kHalfHalf;
  block.dmin = kHalfQuarter;
  block.scales[0] = 0x21;   // weights 0..15: scale 1, min 2 -> 0.5 q - 0.5
  block.scales[1] = 0x03;   // weights 16..31: scale 3, min 0 -> 1.5 q
  block.scales[2] = 0xF4;   // weights 32..47: scale 4, min 15 -> 2 q - 3.75
  block.scales[12] = 0x11;  // weights 192..207: 0.5 q - 0.25
  block.qs[0] = 0xE4;       // 2-bit fields 0, 1, 2, 3: weights 0, 32, 64, 96
  block.qs[1] = 0x03;       // weight 1: 3
  block.qs[17] = 0x02;      // weight 17: 2
  block.qs[32] = 0x30;      // second half, field 2: weight 128 + 64 = 192: 3
  float out[256];
  dequantize_row(GGMLType::Q2_K, &block, out, 256);
  std::vector<float> expected(256, 0.0f);
  for (int i = 0; i < 16; ++i) expected[i] = -0.5f;
  for (int i = 32; i < 48; ++i) expected[i] = -3.75f;
  for (int i = 192; i < 208; ++i) expected[i] = -0.25f;
  expected[1] = 1.0f;     // 0.5 * 3 - 0.5
  expected[17] = 3.0f;    // 1.5 * 2
  expected[32] = -1.75f;  // 2 * 1 - 3.75
  expected[192] = 1.25f;  // 0.5 * 3 - 0.25
  // Weights 64 and 96 have q = 2 and 3, but scale and min 0.
  for (int i = 0; i < 256; ++i) {
    INFO("weight " << i);
    CHECK(out[i] == expected[i]);
  }
}

TEST_CASE("quant: a Q3_K block by hand", "[quant]") {
  // d = 0.5. 6-bit scales stored + 32: scale 0 = +1, scale 9 = -4, scale 15 = +31, others 0.
  // Low nibbles in bytes 0-7 (scales 0-7 low, 8-15 high); top 2 bits in bytes 8-11 (scale j at
  // bits 2 (j / 4) of byte 8 + j % 4). Stored 32 is 0b10'0000: every 2-bit field 2 = 0xAA.
  BlockQ3_K block = {};
  block.d = kHalfHalf;
  const uint8_t scales[12] = {0x01, 0xC0, 0, 0, 0, 0, 0, 0xF0, 0xAA, 0x9A, 0xAA, 0xEA};
  std::memcpy(block.scales, scales, 12);
  // hmask clear: every q is (low 2 bits) - 4.
  block.qs[54] = 0x03;     // weight 150 (second half, field 0, byte 22): low 3
  block.hmask[22] = 0x10;  // weight 150: high bit (bit 150 / 32 = 4) set -> q = 3
  block.qs[48] = 0xC0;     // weight 240 (second half, field 3, byte 16): low 3 -> q = -1
  block.hmask[0] = 0x01;   // weight 0: high bit -> q = 0
  float out[256];
  dequantize_row(GGMLType::Q3_K, &block, out, 256);
  std::vector<float> expected(256, 0.0f);
  for (int i = 0; i < 16; ++i) expected[i] = -2.0f;      // 0.5 * 1 * -4
  for (int i = 144; i < 160; ++i) expected[i] = 8.0f;    // 0.5 * -4 * -4
  for (int i = 240; i < 256; ++i) expected[i] = -62.0f;  // 0.5 * 31 * -4
  expected[0] = 0.0f;
  expected[150] = -6.0f;   // 0.5 * -4 * 3
  expected[240] = -15.5f;  // 0.5 * 31 * -1
  for (int i = 0; i < 256; ++i) {
    INFO("weight " << i);
    CHECK(out[i] == expected[i]);
  }
}

TEST_CASE("quant: Q4_K and Q5_K blocks by hand", "[quant]") {
  // d = 0.5, dmin = 1. Sub-block 0: scale 2, min 1 (bytes 0 and 4). Sub-block 5: scale 33 =
  // 0b10'0001, min 50 = 0b11'0010: low nibbles in byte 9 (0x21), top 2 bits in the top of bytes 1
  // (scale: 0x80) and 5 (min: 0xC0).
  const uint8_t scales[12] = {0x02, 0x80, 0, 0, 0x01, 0xC0, 0, 0, 0, 0x21, 0, 0};
  BlockQ4_K q4 = {};
  q4.d = kHalfHalf;
  q4.dmin = kHalfOne;
  std::memcpy(q4.scales, scales, 12);
  q4.qs[0] = 0x0F;       // weight 0: 15; weight 32 (sub-block 1, scale 0): 0
  q4.qs[3] = 0x50;       // weight 3: 0; weight 35: 5, but sub-block 1 has scale 0
  q4.qs[64 + 7] = 0x90;  // weight 135: 0; weight 167 (sub-block 5, high nibble): 9
  float out[256];
  dequantize_row(GGMLType::Q4_K, &q4, out, 256);
  std::vector<float> expected(256, 0.0f);
  for (int i = 0; i < 32; ++i) expected[i] = -1.0f;      // 0.5 * 2 * 0 - 1 * 1
  for (int i = 160; i < 192; ++i) expected[i] = -50.0f;  // 0.5 * 33 * 0 - 1 * 50
  expected[0] = 14.0f;                                   // 0.5 * 2 * 15 - 1
  expected[167] = 98.5f;                                 // 0.5 * 33 * 9 - 50
  for (int i = 0; i < 256; ++i) {
    INFO("Q4_K weight " << i);
    CHECK(out[i] == expected[i]);
  }

  // Q5_K: the same scales and nibbles, plus fifth bits (bit i / 32 of qh[i % 32]).
  BlockQ5_K q5 = {};
  q5.d = q4.d;
  q5.dmin = q4.dmin;
  std::memcpy(q5.scales, scales, 12);
  std::memcpy(q5.qs, q4.qs, sizeof q5.qs);
  q5.qh[0] = 0x01;  // weight 0: 15 + 16
  q5.qh[7] = 0x20;  // weight 167: 9 + 16
  dequantize_row(GGMLType::Q5_K, &q5, out, 256);
  expected[0] = 30.0f;     // 0.5 * 2 * 31 - 1
  expected[167] = 362.5f;  // 0.5 * 33 * 25 - 50
  for (int i = 0; i < 256; ++i) {
    INFO("Q5_K weight " << i);
    CHECK(out[i] == expected[i]);
  }
}

TEST_CASE("quant: Q4_0 quantization follows ggml's rounding", "[quant]") {
  // Largest magnitude is negative (-4): d = -4 / -8 = 0.5, so q = trunc(x * 2 + 8.5).
  float x[32];
  for (int j = 0; j < 32; ++j) x[j] = (j - 16) * 0.25f;
  BlockQ4_0 b;
  quantize_row_q4_0(x, &b, 32);
  CHECK(fp16_to_fp32(b.d) == 0.5f);
  CHECK((b.qs[0] & 0xF) == 0);   // -4 -> 0.5 -> 0
  CHECK((b.qs[1] & 0xF) == 1);   // -3.75 -> 1.0 -> 1
  CHECK((b.qs[2] & 0xF) == 1);   // -3.5 -> 1.5 -> 1 (truncation)
  CHECK((b.qs[15] >> 4) == 15);  // x[31] = 3.75 -> 16 -> clamped to 15
  float y[32];
  dequantize_row(GGMLType::Q4_0, &b, y, 32);
  CHECK(y[0] == -4.0f);
  CHECK(y[31] == 3.5f);

  // Largest magnitude positive: d is negative, and the maximum itself is exact.
  for (int j = 0; j < 32; ++j) x[j] = j * 0.25f;
  quantize_row_q4_0(x, &b, 32);
  CHECK(fp16_to_fp32(b.d) == -0.96875f);  // 7.75 / -8
  dequantize_row(GGMLType::Q4_0, &b, y, 32);
  CHECK(y[31] == 7.75f);

  // All zeros: d = 0, every nibble 8.
  for (float& v : x) v = 0;
  quantize_row_q4_0(x, &b, 32);
  CHECK(b.d == 0x8000);  // 0 / -8 is -0, as in ggml
  for (int j = 0; j < 16; ++j) CHECK(b.qs[j] == 0x88);
}

TEST_CASE("quant: Q8_0 quantization follows ggml's rounding", "[quant]") {
  float x[32];
  for (int j = 0; j < 32; ++j) x[j] = (j - 16) * 0.5f;  // amax 8 -> d = 8/127
  BlockQ8_0 b;
  quantize_row_q8_0(x, &b, 32);
  CHECK(b.qs[0] == -127);  // -8 / d
  CHECK(b.qs[5] == -87);   // -5.5 * 127 / 8 = -87.3 -> -87
  CHECK(b.qs[16] == 0);
  CHECK(b.qs[17] == 8);    // 0.5 * 127 / 8 = 7.94 -> 8
  CHECK(b.qs[31] == 119);  // 7.5 * 127 / 8 = 119.06 -> 119
  CHECK(fp16_to_fp32(b.d) == fp16_to_fp32(fp32_to_fp16(8.0f / 127.0f)));
  for (float& v : x) v = 0;
  quantize_row_q8_0(x, &b, 32);
  CHECK(b.d == 0);
  for (int j = 0; j < 32; ++j) CHECK(b.qs[j] == 0);
}

TEST_CASE("quant: Q8_0 rounds halves away from zero, as std::round, for random and tied blocks",
          "[quant]") {
  // amax 127 makes d = 1 and 1/d = 1 exactly, so x * id = x: the ties (k + 0.5), the floats
  // next to them and signed zeros reach the rounding as they are. Then random blocks, whose
  // scales are not exact, against the formula written with std::round.
  auto reference = [](const float* x, int8_t* qs) {
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int j = 0; j < 32; ++j) qs[j] = int8_t(std::round(x[j] * id));
  };
  std::vector<float> x(32 * 2001);
  const float ties[] = {0.5f, -0.5f, 1.5f, -2.5f, 126.5f, -126.5f, -0.0f, 0.0f};
  for (int j = 0; j < 32; ++j) {
    const float t = ties[j % 8];
    x[j] = j == 0 ? 127.0f : (j < 16 ? t : std::nextafter(t, j % 2 ? 0.0f : 200.0f));
  }
  std::mt19937 gen(7);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (size_t i = 32; i < x.size(); ++i) x[i] = normal(gen);
  std::vector<BlockQ8_0> q(x.size() / 32);
  quantize_row_q8_0(x.data(), q.data(), int64_t(x.size()));
  for (size_t b = 0; b < q.size(); ++b) {
    int8_t expected[32];
    reference(x.data() + 32 * b, expected);
    INFO("block " << b);
    CHECK(std::memcmp(q[b].qs, expected, sizeof expected) == 0);
  }
  CHECK(q[0].qs[8] == 1);     // 0.5 -> 1
  CHECK(q[0].qs[3] == -3);    // -2.5 -> -3
  CHECK(q[0].qs[17] == 0);    // -0.49999997 -> 0
  CHECK(q[0].qs[12] == 127);  // 126.5 -> 127
}

TEST_CASE("quant: quantize then dequantize stays within the step size", "[quant]") {
  std::mt19937 rng(1234);
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  constexpr int kBlocks = 64;
  std::vector<float> x(32 * kBlocks);
  for (float& v : x) v = uni(rng);
  x[7] = 3.0f;  // one outlier block
  std::vector<BlockQ4_0> q4(kBlocks);
  std::vector<BlockQ8_0> q8(kBlocks);
  quantize_row_q4_0(x.data(), q4.data(), int64_t(x.size()));
  quantize_row_q8_0(x.data(), q8.data(), int64_t(x.size()));
  std::vector<float> y4(x.size()), y8(x.size());
  dequantize_row(GGMLType::Q4_0, q4.data(), y4.data(), int64_t(x.size()));
  dequantize_row(GGMLType::Q8_0, q8.data(), y8.data(), int64_t(x.size()));
  for (int b = 0; b < kBlocks; ++b) {
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b * 32 + j]));
    for (int j = 0; j < 32; ++j) {
      const int i = b * 32 + j;
      INFO("weight " << i);
      // Q4_0: steps of amax/8; the end opposite the maximum is clamped one step short.
      CHECK(std::fabs(x[i] - y4[i]) <= amax / 8 * 1.002f);
      // Q8_0: half a step of amax/127, plus the fp16 rounding of d.
      CHECK(std::fabs(x[i] - y8[i]) <= amax / 254 + amax / 1024);
    }
  }
  CHECK_THROWS_AS(quantize_row_q4_0(x.data(), q4.data(), 31), Error);
}

TEST_CASE("quant: a block with NaN or infinity quantizes to a NaN scale, never an int8 cast",
          "[quant]") {
  const float kBad[] = {std::nanf(""), std::numeric_limits<float>::infinity(),
                        -std::numeric_limits<float>::infinity()};
  for (float bad : kBad) {
    INFO("bad value " << bad);
    std::vector<float> x(64, 0.5f);
    x[33] = bad;  // second block only
    BlockQ4_0 q4[2];
    BlockQ8_0 q8[2];
    quantize_row_q4_0(x.data(), q4, 64);
    quantize_row_q8_0(x.data(), q8, 64);
    CHECK(std::isnan(fp16_to_fp32(q4[1].d)));
    CHECK(std::isnan(fp16_to_fp32(q8[1].d)));
    for (int j = 0; j < 16; ++j) CHECK(q4[1].qs[j] == 0);
    for (int j = 0; j < 32; ++j) CHECK(q8[1].qs[j] == 0);
    CHECK(std::isfinite(fp16_to_fp32(q4[0].d)));  // the clean block is untouched
    CHECK(fp16_to_fp32(q8[0].d) == fp16_to_fp32(fp32_to_fp16(0.5f / 127.0f)));
    std::vector<float> y(64);
    dequantize_row(GGMLType::Q8_0, q8, y.data(), 64);
    CHECK(std::isnan(y[40]));  // the whole bad block reads back as NaN
  }
  // A block too small for its inverse scale to be finite (1 / (1e-39 / 127) overflows) reads back
  // as zeros, as its fp16 scale is 0, and never casts infinity to int8.
  std::vector<float> tiny(32, 1e-39f);
  BlockQ4_0 q4;
  BlockQ8_0 q8;
  quantize_row_q4_0(tiny.data(), &q4, 32);
  quantize_row_q8_0(tiny.data(), &q8, 32);
  CHECK(fp16_to_fp32(q8.d) == 0.0f);
  for (int j = 0; j < 32; ++j) CHECK(q8.qs[j] == 0);
  CHECK(fp16_to_fp32(q4.d) == 0.0f);
  for (int j = 0; j < 16; ++j) CHECK(q4.qs[j] == 0x88);
}

namespace {

const GGMLType kBlockTypes[] = {GGMLType::Q4_0, GGMLType::Q4_1, GGMLType::Q5_0, GGMLType::Q5_1,
                                GGMLType::Q8_0, GGMLType::Q2_K, GGMLType::Q3_K, GGMLType::Q4_K,
                                GGMLType::Q5_K, GGMLType::Q6_K};

/// x through quantize_row and dequantize_row of type.
std::vector<float> round_trip(GGMLType type, const std::vector<float>& x) {
  const int64_t n = int64_t(x.size());
  std::vector<unsigned char> q(type_row_bytes(type, n));
  quantize_row(type, x.data(), q.data(), n);
  std::vector<float> y(x.size());
  dequantize_row(type, q.data(), y.data(), n);
  return y;
}

}  // namespace

TEST_CASE("quant: every type round-trips normal rows within its error", "[quant]") {
  // RMS error over RMS of the input, for N(0, 1) rows: each bound a little above what ggml's
  // algorithms give (measured over 400 rows: mean F16 0.0002, BF16 0.0017, Q8_0 0.0053, Q6_K
  // 0.018, Q5_K 0.036, Q5_1 0.038, Q5_0 0.042, Q4_K 0.071, Q4_1 0.078, Q4_0 0.086, Q3_K 0.151,
  // Q2_K 0.297).
  const std::pair<GGMLType, double> kBounds[] = {
      {GGMLType::F16, 0.00025}, {GGMLType::BF16, 0.002}, {GGMLType::Q8_0, 0.006},
      {GGMLType::Q6_K, 0.02},   {GGMLType::Q5_K, 0.04},  {GGMLType::Q5_1, 0.042},
      {GGMLType::Q5_0, 0.047},  {GGMLType::Q4_K, 0.08},  {GGMLType::Q4_1, 0.087},
      {GGMLType::Q4_0, 0.095},  {GGMLType::Q3_K, 0.17},  {GGMLType::Q2_K, 0.33}};
  std::mt19937 rng(42);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const auto& [type, bound] : kBounds) {
    double error2 = 0, signal2 = 0;
    for (int64_t n : {512, 512, 512, 256, 256, 256}) {
      std::vector<float> x(static_cast<size_t>(n));
      for (float& v : x) v = normal(rng);
      const std::vector<float> y = round_trip(type, x);
      for (size_t i = 0; i < x.size(); ++i) {
        error2 += double(x[i] - y[i]) * double(x[i] - y[i]);
        signal2 += double(x[i]) * double(x[i]);
      }
    }
    const double relative = std::sqrt(error2 / signal2);
    INFO(ggml_type_name(type) << ": relative RMS error " << relative);
    CHECK(relative < bound);
    CHECK(relative > bound / 4);  // the type really quantizes (not a copy)
  }
  CHECK(round_trip(GGMLType::F32, {1.5f, -2.25f}) == std::vector<float>{1.5f, -2.25f});
}

TEST_CASE("quant: every type quantizes a zero row to zeros", "[quant]") {
  const std::vector<float> zeros(512, 0.0f);
  for (GGMLType type : kBlockTypes) {
    INFO(ggml_type_name(type));
    const std::vector<float> y = round_trip(type, zeros);
    for (float v : y) REQUIRE(v == 0.0f);
  }
}

TEST_CASE("quant: every type turns a block with NaN or infinity into NaN", "[quant]") {
  const float kBad[] = {std::nanf(""), std::numeric_limits<float>::infinity(),
                        -std::numeric_limits<float>::infinity()};
  for (GGMLType type : kBlockTypes) {
    const int block = type_block_size(type);
    for (float bad : kBad) {
      INFO(ggml_type_name(type) << ", bad value " << bad);
      std::vector<float> x(size_t(2 * block), 0.5f);
      x[size_t(block + 3)] = bad;  // second block only
      const std::vector<float> y = round_trip(type, x);
      for (int i = 0; i < block; ++i) REQUIRE(std::isfinite(y[size_t(i)]));
      for (int i = block; i < 2 * block; ++i) REQUIRE(std::isnan(y[size_t(i)]));
    }
  }
  // A finite block whose range overflows a float (max - min = inf) cannot be scaled either.
  std::vector<float> wide(32, 0.0f);
  wide[0] = 3e38f;
  wide[1] = -3e38f;
  for (GGMLType type : {GGMLType::Q4_1, GGMLType::Q5_1}) {
    INFO(ggml_type_name(type));
    for (float v : round_trip(type, wide)) CHECK(std::isnan(v));
  }
}

TEST_CASE("quant: rows that are not whole blocks are refused", "[quant]") {
  std::vector<float> x(600, 1.0f), y(600);
  std::vector<unsigned char> q(4096);
  for (GGMLType type : kBlockTypes) {
    INFO(ggml_type_name(type));
    const int64_t n = type_block_size(type) + 1;
    CHECK_THROWS_AS(quantize_row(type, x.data(), q.data(), n), Error);
    CHECK_THROWS_AS(dequantize_row(type, q.data(), y.data(), n), Error);
    CHECK_THROWS_AS(type_traits(type)->quantize(x.data(), q.data(), n), Error);
    CHECK_THROWS_AS(type_traits(type)->dequantize(q.data(), y.data(), n), Error);
  }
  CHECK_THROWS_AS(quantize_row(GGMLType::F16, x.data(), q.data(), -1), Error);
  CHECK_THROWS_AS(quantize_row_q8_0(x.data(), reinterpret_cast<BlockQ8_0*>(q.data()), 48), Error);
}

namespace {

/// A row that is the same on every platform (std::mt19937 is, unlike the distributions): sums of
/// four uniforms, an outlier every 97 weights, and 16-weight groups that are all zero, all
/// positive, tiny or all negative, so the scale searches' side branches run too.
std::vector<float> reproducible_row(int64_t n, uint32_t seed) {
  constexpr int kTerms = 4;
  constexpr float kUnit = 1.0f / float(1 << 23);
  std::mt19937 rng(seed);
  std::vector<float> x(size_t(n), 0.0f);
  for (int64_t i = 0; i < n; ++i) {
    float sum = 0.0f;
    for (int k = 0; k < kTerms; ++k) sum += float(int32_t(rng() >> 8) - (1 << 23)) * kUnit;
    x[size_t(i)] = i % 97 == 0 ? 8.0f * sum : sum;
  }
  for (int i = 16; i < 32; ++i) x[size_t(i)] = 0.0f;
  for (int i = 48; i < 64; ++i) x[size_t(i)] = std::fabs(x[size_t(i)]) + 0.125f;
  for (int i = 80; i < 96; ++i) x[size_t(i)] *= 1e-6f;
  for (int i = 96; i < 112; ++i) x[size_t(i)] = -std::fabs(x[size_t(i)]);
  return x;
}

uint64_t fnv1a(const std::vector<unsigned char>& bytes) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : bytes) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

}  // namespace

TEST_CASE("quant: the quantizers write the bytes ggml writes", "[quant]") {
  // FNV-1a hashes of what ggml (llama.cpp c392e50, quantize_row_*_ref and
  // ggml_fp32_to_bf16_row_ref, built as ggml-base is: no FMA) writes for reproducible_row(1024,
  // 2024).
  const std::pair<GGMLType, uint64_t> kGgml[] = {
      {GGMLType::Q4_0, 0xda2a9ca6a9f87843ull}, {GGMLType::Q4_1, 0xea1b7891f5608115ull},
      {GGMLType::Q5_0, 0x105d5c5466e7b66eull}, {GGMLType::Q5_1, 0xe6509cf0dfa7ea95ull},
      {GGMLType::Q8_0, 0xd2484485954d298eull}, {GGMLType::Q2_K, 0x6b59e8147252290dull},
      {GGMLType::Q3_K, 0x89c62f77a43f6594ull}, {GGMLType::Q4_K, 0x63ba2c9dad03ca8bull},
      {GGMLType::Q5_K, 0x0f05a54641a0385full}, {GGMLType::Q6_K, 0xb60ce5e2dce5dc8bull},
      {GGMLType::BF16, 0x2b6408cda074d0e1ull}};
  constexpr int64_t kN = 1024;
  const std::vector<float> x = reproducible_row(kN, 2024);
  for (const auto& [type, hash] : kGgml) {
    INFO(ggml_type_name(type));
    std::vector<unsigned char> q(type_row_bytes(type, kN));
    quantize_row(type, x.data(), q.data(), kN);
    CHECK(fnv1a(q) == hash);
  }
  std::vector<BlockQ8_K> q8k(kN / kQK_K);  // quantize_row_q8_K_ref
  quantize_row_q8_k(x.data(), q8k.data(), kN);
  std::vector<unsigned char> bytes(q8k.size() * sizeof(BlockQ8_K));
  std::memcpy(bytes.data(), q8k.data(), bytes.size());
  CHECK(fnv1a(bytes) == 0x4cb9f7072b7f6941ull);
}

TEST_CASE("quant: Q8_K activations by hand", "[quant]") {
  std::vector<float> x(512, 0.0f);
  for (int i = 0; i < 256; ++i) x[size_t(i)] = float(i % 16) - 4.0f;  // max |x| = 11 at i % 16 = 15
  x[300] = std::nanf("");                                             // second block only
  BlockQ8_K b[2];
  quantize_row_q8_k(x.data(), b, 512);
  CHECK(b[0].d == 1 / (-127.0f / 11.0f));
  // The signed extreme (+11) maps to -127: q = round(x * -127 / 11).
  CHECK(int(b[0].qs[15]) == -127);
  CHECK(int(b[0].qs[4]) == 0);   // x = 0
  CHECK(int(b[0].qs[0]) == 46);  // -4 * -127 / 11 = 46.18
  CHECK(int(b[0].qs[1]) == 35);  // -3 * -127 / 11 = 34.64
  int16_t sum = 0;
  for (int i = 0; i < 16; ++i) sum = int16_t(sum + b[0].qs[i]);
  for (int g = 0; g < 16; ++g) CHECK(b[0].bsums[g] == sum);  // every group is the same ramp
  CHECK(std::isnan(b[1].d));
  for (int i = 0; i < 256; ++i) CHECK(b[1].qs[i] == 0);
  std::vector<float> zeros(256, 0.0f);
  quantize_row_q8_k(zeros.data(), b, 256);
  CHECK(b[0].d == 0.0f);
  CHECK_THROWS_AS(quantize_row_q8_k(zeros.data(), b, 128), Error);
  CHECK(type_traits(GGMLType::Q8_K) == nullptr);  // never a tensor type
}
