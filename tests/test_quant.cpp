// test_quant.cpp: fp16 conversion, block layouts and the reference (de)quantizers, against values
// worked out by hand.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
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
  for (GGMLType t :
       {GGMLType::F32, GGMLType::F16, GGMLType::Q4_0, GGMLType::Q8_0, GGMLType::Q6_K}) {
    CHECK(type_supported(t));
  }
  for (GGMLType t : {GGMLType::BF16, GGMLType::Q4_1, GGMLType::Q4_K, GGMLType::Q8_K}) {
    CHECK_FALSE(type_supported(t));
  }
  CHECK(type_block_size(GGMLType::F32) == 1);
  CHECK(type_block_size(GGMLType::Q4_0) == 32);
  CHECK(type_block_size(GGMLType::Q6_K) == 256);
  CHECK(type_block_bytes(GGMLType::F16) == 2);
  CHECK(type_block_bytes(GGMLType::Q8_0) == 34);
  CHECK(type_row_bytes(GGMLType::F32, 5) == 20);
  CHECK(type_row_bytes(GGMLType::F16, 3) == 6);
  CHECK(type_row_bytes(GGMLType::Q4_0, 64) == 36);
  CHECK(type_row_bytes(GGMLType::Q8_0, 96) == 102);
  CHECK(type_row_bytes(GGMLType::Q6_K, 512) == 420);
  CHECK_THROWS_AS(type_row_bytes(GGMLType::Q4_0, 33), Error);
  CHECK_THROWS_WITH(type_block_size(GGMLType::Q4_K), Catch::Matchers::Contains("q4_K"));
  float out[256];
  const uint8_t zeros[144] = {};
  CHECK_THROWS_WITH(dequantize_row(GGMLType::Q4_K, zeros, out, 256),
                    Catch::Matchers::Contains("q4_K"));
}

TEST_CASE("quant: F32 and F16 rows", "[quant]") {
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
