// test_kernels.cpp: each stage's kernels (engine.h) against direct double-precision computations.
//
// Only engine.h and quant.h are used, so the same checks hold for every stage, whatever its
// matmul layout, loop order, blocking, threads or fused dequantization.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "engine.h"
#include "quant.h"

namespace {

// ---- helpers ----

/// n values uniform in [lo, hi) from the project's Rng (the same on every platform).
std::vector<float> random_floats(size_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  Rng rng(seed);
  std::vector<float> values(n);
  for (float& v : values) v = lo + (hi - lo) * rng.next_float();
  return values;
}

/// Scale of the random Q6_K super-blocks: 6-bit weights (-32..31) x int8 scales (-128..127) x this
/// stay below ~40 in magnitude, finite and of ordinary size.
constexpr float kQ6KScale = 0.01f;

/// A weight matrix over bytes the test owns.
struct TestWeight {
  std::vector<unsigned char> bytes;
  Weight w;
};

/// Random W (rows, cols) of type: F32/F16 from random floats, Q6_K from random bytes with a
/// fixed, finite super-block scale d, every other type by common/'s (ggml's) quantizer.
TestWeight make_weight(GGMLType type, int64_t rows, int64_t cols, uint64_t seed) {
  TestWeight t;
  const size_t row_bytes = type_row_bytes(type, cols);
  t.bytes.resize(row_bytes * rows);
  const std::vector<float> values = random_floats(static_cast<size_t>(rows * cols), seed);
  Rng byte_rng(seed + 1);
  for (int64_t r = 0; r < rows; ++r) {
    unsigned char* dst = t.bytes.data() + r * row_bytes;
    const float* src = values.data() + r * cols;
    switch (type) {
      case GGMLType::F32:
        std::memcpy(dst, src, cols * sizeof(float));
        break;
      case GGMLType::F16:
        for (int64_t k = 0; k < cols; ++k) {
          const uint16_t h = fp32_to_fp16(src[k]);
          std::memcpy(dst + k * sizeof(h), &h, sizeof(h));
        }
        break;
      case GGMLType::Q4_0:
        quantize_row_q4_0(src, reinterpret_cast<BlockQ4_0*>(dst), cols);
        break;
      case GGMLType::Q8_0:
        quantize_row_q8_0(src, reinterpret_cast<BlockQ8_0*>(dst), cols);
        break;
      case GGMLType::Q6_K:
        for (int64_t b = 0; b < cols / kQK_K; ++b) {
          BlockQ6_K block;
          unsigned char* raw = reinterpret_cast<unsigned char*>(&block);
          for (size_t i = 0; i < sizeof(block); ++i) raw[i] = byte_rng.next_u64() >> 56;
          block.d = fp32_to_fp16(kQ6KScale);
          std::memcpy(dst + b * sizeof(block), &block, sizeof(block));
        }
        break;
      default:
        quantize_row(type, src, dst, cols);
    }
  }
  t.w.name = "test." + ggml_type_name(type);
  t.w.type = type;
  t.w.rows = rows;
  t.w.cols = cols;
  t.w.data = t.bytes.data();
  t.w.row_bytes = row_bytes;
  return t;
}

// fp32 sums of K products drift from the exact sum like a random walk: ~eps * sqrt(K) of the
// magnitude sum_k |x_k w_k| (eps = 6e-8). 1e-6 * sqrt(K) allows ~16x that, and is still far below
// any indexing or dequantization error (which would be O(1) of the magnitude).
constexpr double kLinearTolerance = 1e-6;

/// Largest |y - x @ W^T| / tolerance over n_tokens rows of x, against a double matmul over
/// dequantize_row's weights; counts the outputs beyond their tolerance in n_bad (NaN included).
double linear_error(const Weight& w, const float* x, const float* y, int n_tokens, int64_t& n_bad) {
  const int64_t K = w.cols;
  const int64_t N = w.rows;
  std::vector<float> row(K);
  n_bad = 0;
  double worst_ratio = 0.0;  // |error| / tolerance, worst over all outputs
  for (int64_t j = 0; j < N; ++j) {
    dequantize_row(w.type, w.row(j), row.data(), K);
    for (int i = 0; i < n_tokens; ++i) {
      double exact = 0.0;
      double magnitude = 0.0;
      for (int64_t k = 0; k < K; ++k) {
        const double product = static_cast<double>(x[i * K + k]) * row[k];
        exact += product;
        magnitude += std::fabs(product);
      }
      const double tolerance = kLinearTolerance * std::sqrt(static_cast<double>(K)) * magnitude +
                               1e-30;  // all-zero rows (possible for Q4_0 of tiny values)
      const double error = std::fabs(y[i * N + j] - exact);
      if (!(error <= tolerance)) ++n_bad;  // also counts NaN
      // A NaN output is the worst error there is: std::fmax would drop it and report 0.
      if (std::isnan(error) && !std::isinf(worst_ratio)) {  // the first NaN, by position
        UNSCOPED_INFO("output of token " << i << ", row " << j << " is NaN");
        worst_ratio = std::numeric_limits<double>::infinity();
      }
      worst_ratio = std::fmax(worst_ratio, error / tolerance);
    }
  }
  return worst_ratio;
}

/// linear(w) on n_tokens rows of x against a double matmul over dequantize_row's weights. For
/// Q4_0 and Q8_0 weights a stage may first round x to Q8_0 (llama.cpp's integer dot products,
/// stage 09 on): then the whole call must match the product with that rounded x instead.
void check_linear(const Weight& w, const std::vector<float>& x, int n_tokens,
                  MatmulScratch& scratch) {
  INFO(w.name << " rows " << w.rows << " cols " << w.cols << " n_tokens " << n_tokens);
  const int64_t K = w.cols;
  const int64_t N = w.rows;
  std::vector<float> y(static_cast<size_t>(n_tokens * N), std::nanf(""));
  linear(w, x.data(), y.data(), n_tokens, scratch);

  int64_t n_bad = 0;
  const double worst_ratio = linear_error(w, x.data(), y.data(), n_tokens, n_bad);
  INFO("worst |error| / tolerance = " << worst_ratio);
  if (n_bad > 0 && (w.type == GGMLType::Q4_0 || w.type == GGMLType::Q8_0)) {
    std::vector<BlockQ8_0> blocks(x.size() / kQK8_0);
    quantize_row_q8_0(x.data(), blocks.data(), static_cast<int64_t>(x.size()));
    std::vector<float> x_q8(x.size());
    dequantize_row(GGMLType::Q8_0, blocks.data(), x_q8.data(), static_cast<int64_t>(x.size()));
    const double worst_q8 = linear_error(w, x_q8.data(), y.data(), n_tokens, n_bad);
    INFO("with x rounded to Q8_0: worst |error| / tolerance = " << worst_q8);
    CHECK(n_bad == 0);
    return;
  }
  // K-quant weights: from stage 18 on, x is rounded to Q8_K (256 per scale) instead.
  if (n_bad > 0 && K % kQK_K == 0 && type_block_size(w.type) == kQK_K) {
    std::vector<BlockQ8_K> blocks(x.size() / kQK_K);
    quantize_row_q8_k(x.data(), blocks.data(), static_cast<int64_t>(x.size()));
    std::vector<float> x_q8(x.size());
    for (size_t i = 0; i < x.size(); ++i)
      x_q8[i] = blocks[i / kQK_K].d * blocks[i / kQK_K].qs[i % kQK_K];
    const double worst_q8 = linear_error(w, x_q8.data(), y.data(), n_tokens, n_bad);
    INFO("with x rounded to Q8_K: worst |error| / tolerance = " << worst_q8);
    CHECK(n_bad == 0);
    return;
  }
  CHECK(n_bad == 0);
}

/// The same on n_tokens random rows of x.
void check_linear(const Weight& w, int n_tokens, MatmulScratch& scratch) {
  const int64_t K = w.cols;
  check_linear(w, random_floats(static_cast<size_t>(n_tokens * K), 7 + w.rows + K), n_tokens,
               scratch);
}

struct Shape {
  int64_t rows;
  int64_t cols;
};

/// linear for every shape and n_tokens 1, 3, 4, 5, 8, 33 and 48 (the AVX-512 kernels take 4
/// tokens per register tile, stage 27's packed Q4_K and Q5_K 8, AMX 16 per tile from 2 tiles on
/// (stage 25): whole tiles, and tiles plus one), sharing one scratch (so it grows and is reused).
void check_linear_shapes(GGMLType type, const std::vector<Shape>& shapes) {
  MatmulScratch scratch;
  uint64_t seed = 100;
  for (const Shape& shape : shapes) {
    const TestWeight t = make_weight(type, shape.rows, shape.cols, ++seed);
    for (int n_tokens : {1, 3, 4, 5, 8, 33, 48}) check_linear(t.w, n_tokens, scratch);
  }
}

// Awkward sizes: 1, primes-ish around 32 (one block +- 1), and just past 4096 (a 7B width).
const std::vector<Shape> kFloatShapes = {{1, 1},   {1, 31},    {31, 33},
                                         {33, 31}, {4097, 33}, {33, 4097}};
// Quantized rows hold whole blocks: cols a multiple of 32 (Q4_0, Q8_0) or 256 (Q6_K).
const std::vector<Shape> kQ32Shapes = {{1, 32}, {31, 64}, {33, 96}, {4097, 32}, {33, 4096}};
const std::vector<Shape> kQ256Shapes = {{1, 256}, {31, 256}, {33, 512}, {4097, 256}, {33, 4096}};

/// a rotated by angle: (a cos - b sin, a sin + b cos).
void rotate(double a, double b, double angle, double& out_a, double& out_b) {
  out_a = a * std::cos(angle) - b * std::sin(angle);
  out_b = a * std::sin(angle) + b * std::cos(angle);
}

/// Expected rope of two heads of 4: pair 0 turns by angle0, pair 1 by angle1. Adjacent pairs are
/// (0, 1), (2, 3); half-split pairs are (0, 2), (1, 3).
std::vector<double> expected_rope(const std::vector<float>& x, RopeStyle style, double angle0,
                                  double angle1) {
  std::vector<double> out(x.begin(), x.end());
  for (int h = 0; h < 2; ++h) {
    double* head = out.data() + 4 * h;
    const int a0 = 0, b0 = style == RopeStyle::AdjacentPairs ? 1 : 2;
    const int a1 = style == RopeStyle::AdjacentPairs ? 2 : 1, b1 = 3;
    const double x0 = head[a0], y0 = head[b0], x1 = head[a1], y1 = head[b1];
    rotate(x0, y0, angle0, head[a0], head[b0]);
    rotate(x1, y1, angle1, head[a1], head[b1]);
  }
  return out;
}

void check_rope(RopeStyle style, int pos, float freq_scale, const float* factors, double angle0,
                double angle1) {
  INFO("style " << (style == RopeStyle::AdjacentPairs ? "adjacent" : "half-split") << " pos " << pos
                << " freq_scale " << freq_scale << " factors " << (factors != nullptr));
  const std::vector<float> input = {1, 2, 3, 4, 5, 6, 7, 8};  // two heads of head_dim 4
  RopeParams params;
  params.style = style;
  params.n_rot = 4;
  params.freq_base = 10000.0f;
  params.freq_scale = freq_scale;
  params.freq_factors = factors;
  std::vector<float> x = input;
  rope(x.data(), 2, 4, pos, params);
  const std::vector<double> expected = expected_rope(input, style, angle0, angle1);
  for (size_t i = 0; i < x.size(); ++i) {
    INFO("element " << i);
    CHECK(x[i] == Approx(expected[i]).margin(1e-5));
  }
}

}  // namespace

// ---- linear ----

TEST_CASE("kernels: linear with F32 weights matches a double matmul", "[kernels]") {
  check_linear_shapes(GGMLType::F32, kFloatShapes);
}

TEST_CASE("kernels: linear with F16 weights matches a double matmul", "[kernels]") {
  check_linear_shapes(GGMLType::F16, kFloatShapes);
}

// Quantized weights: the reference is dequantize_row (ggml's reference dequantizer) + a double
// matmul, so only fp32 summation error is allowed (same tolerance as F32).
TEST_CASE("kernels: linear with Q4_0 weights matches dequantize_row + double matmul", "[kernels]") {
  check_linear_shapes(GGMLType::Q4_0, kQ32Shapes);
}

// The largest integer sums a Q4_0 block can make: every nibble 15 (weight 7) against activations
// that all round to +127 or -127. A SIMD kernel that sums a block's products in int16 lanes
// (stage 32's AVX2 path: 16 products of 15 x 127, 30480) must not saturate.
TEST_CASE("kernels: linear with Q4_0 weights at the integer sums' bound", "[kernels]") {
  constexpr int64_t kRows = 33;  // one whole 32-row tile and one row in a padded second tile
  constexpr int64_t kCols = 4096;
  constexpr unsigned char kAllFifteen = 0xFF;
  TestWeight t = make_weight(GGMLType::Q4_0, kRows, kCols, 1);
  for (int64_t r = 0; r < kRows; ++r) {
    auto* blocks = reinterpret_cast<BlockQ4_0*>(t.bytes.data() + r * t.w.row_bytes);
    for (int64_t b = 0; b < kCols / kQK4_0; ++b) {
      blocks[b].d = fp32_to_fp16(1.0f / (r + 1));
      std::memset(blocks[b].qs, kAllFifteen, sizeof blocks[b].qs);
    }
  }
  MatmulScratch scratch;
  for (int n_tokens : {1, 4, 5, 33}) {
    std::vector<float> x(static_cast<size_t>(n_tokens * kCols));
    // Token i: all +1, all -1, or +1 for each block's first 16 (the low nibbles) and -1 after.
    constexpr int kPatterns = 3;
    for (int i = 0; i < n_tokens; ++i) {
      const int pattern = i % kPatterns;
      for (int64_t k = 0; k < kCols; ++k) {
        const bool first_half = k % kQK4_0 < kQK4_0 / 2;
        x[i * kCols + k] = pattern == 0 ? 1.0f : pattern == 1 ? -1.0f : first_half ? 1.0f : -1.0f;
      }
    }
    check_linear(t.w, x, n_tokens, scratch);
  }
}

TEST_CASE("kernels: linear with Q8_0 weights matches dequantize_row + double matmul", "[kernels]") {
  check_linear_shapes(GGMLType::Q8_0, kQ32Shapes);
}

TEST_CASE("kernels: linear with Q6_K weights matches dequantize_row + double matmul", "[kernels]") {
  check_linear_shapes(GGMLType::Q6_K, kQ256Shapes);
}

// The other types llama-quantize writes: stages without a kernel of their own for a type
// compute it through common/'s dequantizer (dequantized.cpp); stages 18 and 19 compute the
// K-quants in integers.
TEST_CASE("kernels: linear with the other K-quant weights", "[kernels]") {
  for (GGMLType type : {GGMLType::Q2_K, GGMLType::Q3_K, GGMLType::Q4_K, GGMLType::Q5_K}) {
    INFO("type " << ggml_type_name(type));
    check_linear_shapes(type, kQ256Shapes);
  }
}

TEST_CASE("kernels: linear with Q4_1, Q5_0, Q5_1 and BF16 weights", "[kernels]") {
  for (GGMLType type : {GGMLType::Q4_1, GGMLType::Q5_0, GGMLType::Q5_1})
    check_linear_shapes(type, kQ32Shapes);
  check_linear_shapes(GGMLType::BF16, kFloatShapes);
}

// ---- rmsnorm ----

TEST_CASE("kernels: rmsnorm", "[kernels]") {
  const std::vector<float> x = {1, 2, 3, 4};
  const std::vector<float> weight = {1, 0.5f, 2, -1};
  // mean(x^2) = 30 / 4 = 7.5; scale = 1 / sqrt(7.5 + 1e-5) = 0.365148128...
  const std::vector<double> expected = {0.3651481282, 0.3651481282, 2.1908887694, -1.4605925130};
  std::vector<float> out(4);
  rmsnorm(out.data(), x.data(), weight.data(), 4, 1e-5f);
  for (int i = 0; i < 4; ++i) CHECK(out[i] == Approx(expected[i]).epsilon(1e-6));

  SECTION("in place (out aliases x)") {
    std::vector<float> y = x;
    rmsnorm(y.data(), y.data(), weight.data(), 4, 1e-5f);
    for (int i = 0; i < 4; ++i) CHECK(y[i] == Approx(expected[i]).epsilon(1e-6));
  }
  SECTION("eps keeps a zero vector finite") {
    std::vector<float> zeros(4, 0.0f);
    rmsnorm(out.data(), zeros.data(), weight.data(), 4, 1e-5f);
    for (float v : out) CHECK(v == 0.0f);
  }
}

TEST_CASE("kernels: rmsnorm of a model-sized vector matches a double computation", "[kernels]") {
  // n = 4099: whole SIMD registers and a tail, as in every stage's vector path.
  constexpr int kN = 4099;
  const std::vector<float> x = random_floats(kN, 41, -3.0f, 3.0f);
  const std::vector<float> weight = random_floats(kN, 42, 0.5f, 1.5f);
  double sum_squares = 0;
  for (float v : x) sum_squares += static_cast<double>(v) * v;
  const double scale = 1.0 / std::sqrt(sum_squares / kN + 1e-6);
  std::vector<float> out(kN);
  rmsnorm(out.data(), x.data(), weight.data(), kN, 1e-6f);
  for (int i = 0; i < kN; ++i) {
    INFO("element " << i);
    CHECK(out[i] == Approx(x[i] * scale * weight[i]).epsilon(1e-5).margin(1e-6));
  }
}

// ---- rope ----
// head_dim = n_rot = 4, base 10000: theta_i = pos * freq_scale * 10000^(-2i/4) / factor_i, so
// pair 0 turns by pos * freq_scale / factor_0 and pair 1 by pos * freq_scale * 0.01 / factor_1.

TEST_CASE("kernels: rope on adjacent pairs (llama)", "[kernels]") {
  check_rope(RopeStyle::AdjacentPairs, 0, 1.0f, nullptr, 0.0, 0.0);  // identity
  check_rope(RopeStyle::AdjacentPairs, 1, 1.0f, nullptr, 1.0, 0.01);
  check_rope(RopeStyle::AdjacentPairs, 7, 1.0f, nullptr, 7.0, 0.07);
}

TEST_CASE("kernels: rope on half-split pairs (qwen2)", "[kernels]") {
  check_rope(RopeStyle::HalfSplit, 0, 1.0f, nullptr, 0.0, 0.0);
  check_rope(RopeStyle::HalfSplit, 1, 1.0f, nullptr, 1.0, 0.01);
  check_rope(RopeStyle::HalfSplit, 7, 1.0f, nullptr, 7.0, 0.07);
}

TEST_CASE("kernels: rope with linear scaling and frequency factors", "[kernels]") {
  // freq_scale 1/4 (deepseek-coder): pos 7 turns like pos 1.75.
  check_rope(RopeStyle::AdjacentPairs, 7, 0.25f, nullptr, 1.75, 0.0175);
  check_rope(RopeStyle::HalfSplit, 7, 0.25f, nullptr, 1.75, 0.0175);
  // llama3 factors divide each pair's angle.
  const float factors[2] = {1.0f, 4.0f};
  check_rope(RopeStyle::AdjacentPairs, 7, 1.0f, factors, 7.0, 0.0175);
  check_rope(RopeStyle::HalfSplit, 7, 1.0f, factors, 7.0, 0.0175);
  const float factors2[2] = {2.0f, 1.0f};
  check_rope(RopeStyle::AdjacentPairs, 1, 0.5f, factors2, 0.25, 0.005);
}

TEST_CASE("kernels: rope of model-sized heads matches a double rotation", "[kernels]") {
  // 3 heads of 136 (68 pairs: whole SIMD registers and a tail), at a position past 1000.
  constexpr int kHeads = 3, kHeadDim = 136, kPos = 1234;
  for (RopeStyle style : {RopeStyle::AdjacentPairs, RopeStyle::HalfSplit}) {
    const bool adjacent = style == RopeStyle::AdjacentPairs;
    INFO("style " << (adjacent ? "adjacent" : "half-split"));
    RopeParams params;
    params.style = style;
    params.n_rot = kHeadDim;
    const std::vector<float> input = random_floats(kHeads * kHeadDim, 43);
    std::vector<float> x = input;
    rope(x.data(), kHeads, kHeadDim, kPos, params);
    for (int h = 0; h < kHeads; ++h) {
      for (int i = 0; i < kHeadDim / 2; ++i) {
        const int first = h * kHeadDim + (adjacent ? 2 * i : i);
        const int second = h * kHeadDim + (adjacent ? 2 * i + 1 : i + kHeadDim / 2);
        const double angle = kPos * std::pow(10000.0, -2.0 * i / kHeadDim);
        double a = 0, b = 0;
        rotate(input[first], input[second], angle, a, b);
        INFO("head " << h << " pair " << i);
        CHECK(x[first] == Approx(a).margin(1e-5));
        CHECK(x[second] == Approx(b).margin(1e-5));
      }
    }
  }
}

// ---- softmax ----

TEST_CASE("kernels: softmax is exact and stable for huge logits", "[kernels]") {
  SECTION("ordinary values") {
    std::vector<float> x = {1.0f, 2.0f, 3.0f};
    softmax(x.data(), 3);
    const double z = std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
    CHECK(x[0] == Approx(std::exp(1.0) / z).epsilon(1e-6));
    CHECK(x[1] == Approx(std::exp(2.0) / z).epsilon(1e-6));
    CHECK(x[2] == Approx(std::exp(3.0) / z).epsilon(1e-6));
  }
  SECTION("+-1e30") {
    std::vector<float> x = {1e30f, -1e30f, 0.0f, 1e30f};
    softmax(x.data(), 4);
    CHECK(x[0] == Approx(0.5));
    CHECK(x[1] == 0.0f);
    CHECK(x[2] == 0.0f);
    CHECK(x[3] == Approx(0.5));
  }
  SECTION("all -1e30") {
    std::vector<float> x(5, -1e30f);
    softmax(x.data(), 5);
    for (float v : x) CHECK(v == Approx(0.2));
  }
  SECTION("all equal and large") {
    std::vector<float> x(7, 88.0f);  // exp(88) alone would overflow a float
    softmax(x.data(), 7);
    for (float v : x) CHECK(v == Approx(1.0 / 7));
  }
  SECTION("a single element") {
    float x = 123.0f;
    softmax(&x, 1);
    CHECK(x == 1.0f);
  }
}

TEST_CASE("kernels: softmax of a long row matches a double computation", "[kernels]") {
  // 1000 scores over a range wide enough that the smallest terms are subnormal or 0.
  constexpr int kN = 1000;
  std::vector<float> x = random_floats(kN, 44, -60.0f, 60.0f);
  const std::vector<float> input = x;
  double max_value = input[0];
  for (float v : input) max_value = std::max<double>(max_value, v);
  double sum = 0;
  for (float v : input) sum += std::exp(v - max_value);
  softmax(x.data(), kN);
  for (int i = 0; i < kN; ++i) {
    INFO("score " << input[i]);
    CHECK(x[i] == Approx(std::exp(input[i] - max_value) / sum).epsilon(1e-5).margin(1e-37));
  }
}

// ---- swiglu ----

TEST_CASE("kernels: swiglu is silu(gate) * up", "[kernels]") {
  const std::vector<float> gate0 = {-100.0f, -2.0f, 0.0f, 0.5f, 3.0f, 100.0f};
  const std::vector<float> up = {1.5f, -1.0f, 2.0f, 3.0f, 0.25f, -2.0f};
  std::vector<float> gate = gate0;
  swiglu(gate.data(), up.data(), static_cast<int>(gate.size()));
  for (size_t i = 0; i < gate.size(); ++i) {
    const double g = gate0[i];
    const double expected = g / (1.0 + std::exp(-g)) * up[i];
    INFO("gate " << g << " up " << up[i]);
    CHECK(std::isfinite(gate[i]));
    CHECK(gate[i] == Approx(expected).epsilon(1e-6).margin(1e-30));
  }
}

TEST_CASE("kernels: swiglu over every range of gate values", "[kernels]") {
  // Gates from -120 to 120 in steps of 1/64 (e^-g from overflow to underflow), n not a multiple
  // of any SIMD width.
  constexpr int kSteps = 64, kN = 240 * kSteps + 3;
  std::vector<float> gate(kN), up(kN);
  for (int i = 0; i < kN; ++i) {
    gate[i] = -120.0f + static_cast<float>(i) / kSteps;
    up[i] = 1.0f + static_cast<float>(i % 7);
  }
  const std::vector<float> gate0 = gate;
  swiglu(gate.data(), up.data(), kN);
  for (int i = 0; i < kN; ++i) {
    const double g = gate0[i];
    INFO("gate " << g);
    CHECK(std::isfinite(gate[i]));
    // Below g = -88, e^-g overflows a float and silu(g) comes out as -0: hence the margin.
    CHECK(gate[i] == Approx(g / (1.0 + std::exp(-g)) * up[i]).epsilon(1e-6).margin(1e-30));
  }
}

// ---- attention ----

namespace {

/// attention() against softmax(q.k / sqrt(hd)) @ v computed in double, query head h reading kv head
/// h / (n_head / n_head_kv).
void check_attention(int n_head, int n_head_kv, int head_dim, int n_keys) {
  INFO("n_head " << n_head << " n_head_kv " << n_head_kv << " head_dim " << head_dim << " n_keys "
                 << n_keys);
  const int kv_dim = n_head_kv * head_dim;
  // Spread of 3: scores of a few units, so the softmax is neither flat nor one-hot.
  const std::vector<float> q = random_floats(n_head * head_dim, 11, -3.0f, 3.0f);
  const std::vector<float> keys = random_floats(n_keys * kv_dim, 12);
  const std::vector<float> values = random_floats(n_keys * kv_dim, 13);
  std::vector<float> out(n_head * head_dim, std::nanf(""));
  std::vector<float> scores(n_head * n_keys);
  attention(out.data(), q.data(), keys.data(), values.data(), n_keys, n_head, n_head_kv, head_dim,
            scores.data());

  const int group = n_head / n_head_kv;
  for (int h = 0; h < n_head; ++h) {
    const int kv = h / group;
    std::vector<double> weights(n_keys);
    double max_score = -INFINITY;
    for (int t = 0; t < n_keys; ++t) {
      double dot = 0.0;
      for (int i = 0; i < head_dim; ++i) {
        dot += static_cast<double>(q[h * head_dim + i]) * keys[t * kv_dim + kv * head_dim + i];
      }
      weights[t] = dot / std::sqrt(static_cast<double>(head_dim));
      max_score = std::fmax(max_score, weights[t]);
    }
    double total = 0.0;
    for (double& w : weights) total += (w = std::exp(w - max_score));
    for (int i = 0; i < head_dim; ++i) {
      double expected = 0.0;
      for (int t = 0; t < n_keys; ++t) {
        expected += weights[t] / total * values[t * kv_dim + kv * head_dim + i];
      }
      INFO("head " << h << " element " << i);
      // Outputs are averages of values in [-1, 1]: an absolute bound of 1e-5 is ~100 float ulps.
      CHECK(out[h * head_dim + i] == Approx(expected).margin(1e-5));
    }
  }
}

}  // namespace

TEST_CASE("kernels: attention with grouped-query heads matches a double computation", "[kernels]") {
  check_attention(4, 2, 8, 5);   // GQA: two query heads per kv head
  check_attention(8, 2, 16, 9);  // four per kv head
  check_attention(4, 1, 8, 3);   // multi-query
  check_attention(4, 4, 8, 6);   // plain multi-head
  check_attention(2, 1, 4, 1);   // the first token: the output is its value row
  check_attention(4, 2, 64, 40);
  check_attention(2, 2, 128, 70);  // 16-key blocks (AVX2: 8) and the keys left (stage 26 on)
  check_attention(4, 1, 32, 37);
}
