// test_exercises.cpp: graders for coursework exercises whose answers are NOT in the repository.
//
// Hidden from `make test` (Catch2 tags starting with '.'): they fail until a learner implements
// the exercise in their own stage. Run one with, e.g.,
//   make new-stage FROM=05 NAME=q4_1 && <implement> && make build/05x_q4_1/tests &&
//   build/05x_q4_1/tests "[q4_1]"
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "engine.h"
#include "quant.h"

namespace {

// Q4_1 (ggml): 32 weights in 20 bytes {fp16 d; fp16 m; u8 qs[16]}, w[j] = lo4(qs[j]) * d + m and
// w[j + 16] = hi4(qs[j]) * d + m. Unlike Q4_0 there is no -8: the offset is the stored minimum m.
constexpr int kQ4_1Bytes = 20;

std::vector<unsigned char> q4_1_block(float d, float m, const uint8_t (&qs)[16]) {
  std::vector<unsigned char> block(kQ4_1Bytes);
  const uint16_t dh = fp32_to_fp16(d), mh = fp32_to_fp16(m);
  std::memcpy(block.data(), &dh, 2);
  std::memcpy(block.data() + 2, &mh, 2);
  std::memcpy(block.data() + 4, qs, 16);
  return block;
}

}  // namespace

TEST_CASE("exercise 05: Q4_1 dequantizes and multiplies like ggml", "[.exercise][q4_1]") {
  uint8_t qs[16];
  for (int j = 0; j < 16; ++j) qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  const float d = 0.5f, m = -2.0f;
  const std::vector<unsigned char> block = q4_1_block(d, m, qs);
  REQUIRE(type_supported(GGMLType::Q4_1));
  REQUIRE(type_row_bytes(GGMLType::Q4_1, 32) == kQ4_1Bytes);

  std::vector<float> w(32);
  dequantize_row(GGMLType::Q4_1, block.data(), w.data(), 32);
  for (int j = 0; j < 16; ++j) {
    CHECK(w[j] == j * d + m);              // hand-computed: low nibble j
    CHECK(w[j + 16] == (15 - j) * d + m);  // high nibble 15 - j
  }
  // linear() with a one-row Q4_1 weight: y = w . x
  Weight weight;
  weight.name = "q4_1";
  weight.type = GGMLType::Q4_1;
  weight.rows = 1;
  weight.cols = 32;
  weight.row_bytes = kQ4_1Bytes;
  weight.data = block.data();
  std::vector<float> x(32);
  double expected = 0;
  for (int k = 0; k < 32; ++k) {
    x[k] = 0.25f * static_cast<float>(k % 7) - 0.5f;
    expected += static_cast<double>(w[k]) * x[k];
  }
  float y = 0;
  MatmulScratch scratch;
  linear(weight, x.data(), &y, 1, scratch);
  CHECK(std::fabs(y - expected) <= 1e-4 * (1 + std::fabs(expected)));
}
