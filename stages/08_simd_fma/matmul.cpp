// matmul.cpp: linear() with the dequantization fused into the dot products (seed article §3.4).
//
// W stays as the file stores it (rows = "out", quantization blocks along a row), and each output
// is the dot product of one stored row with x, every block decoded in registers: a Q4_0 weight
// costs 4.5 bits of memory traffic, where turning the whole matrix into fp32 B = W^T on every
// call costs 4 + 32 + 32 bits (read, fp32 copy written, read back: for a 7B Q4_0 model ~27 GB a
// token against 3.9 GB in the file) and a scratch as large as the largest matrix (1.6 GB). Rows
// are split among threads.
//
// Where the build has SIMD (simd.h), the F32, F16, Q4_0, Q8_0 and Q6_K rows go to the kernels of
// simd.cpp, which widen the same weights to fp32 in registers and multiply-add 16 (or 8) of them
// per instruction. The kernels below are the portable fallback and the reference the SIMD ones are
// checked against.
#include "matmul.h"

#include <cmath>
#include <cstdint>
#include <vector>

#include "dequantized.h"
#include "error.h"
#include "parallel.h"
#include "quant.h"
#include "simd.h"

namespace {

// -DENGINE_CHECK_AGAINST_SCALAR makes every linear() recompute its outputs with the scalar
// kernels and require them to agree to within fp32 rounding (a debugging build: ~10x slower).
#ifdef ENGINE_CHECK_AGAINST_SCALAR
constexpr bool kCheckAgainstScalar = true;
#else
constexpr bool kCheckAgainstScalar = false;
#endif

/// fp16 -> fp32 by table: 65536 floats (256 KiB), built once, read-only after. The seed article
/// measured +8% over converting bit by bit in the inner loop.
struct Fp16Table {
  float value[1 << 16];
  Fp16Table() {
    for (int h = 0; h < (1 << 16); ++h) value[h] = fp16_to_fp32(static_cast<uint16_t>(h));
  }
};

const Fp16Table& fp16_table() {
  static const Fp16Table table;  // thread-safe one-time initialisation (C++11)
  return table;
}

// ---- one row of W (n weights) . x (n,) -> float, per storage type ----

float dot_f32_scalar(const float* w, const float* x, int64_t n) {
  float sum = 0.0f;
  for (int64_t k = 0; k < n; ++k) sum += w[k] * x[k];
  return sum;
}

float dot_f16_scalar(const uint16_t* w, const float* x, int64_t n, const float* fp16) {
  float sum = 0.0f;
  for (int64_t k = 0; k < n; ++k) sum += fp16[w[k]] * x[k];
  return sum;
}

// Q4_0: weight j of a block is (low nibble of qs[j]) - 8, weight j + 16 is (high nibble) - 8,
// both times the block's scale d; the scale multiplies the block's integer-weight sum once.
float dot_q4_0(const BlockQ4_0* w, const float* x, int64_t n, const float* fp16) {
  constexpr int kHalf = kQK4_0 / 2;
  constexpr int kOffset = 8;
  float sum = 0.0f;
  for (int64_t b = 0; b < n / kQK4_0; ++b, x += kQK4_0) {
    float block_sum = 0.0f;
    for (int j = 0; j < kHalf; ++j) {
      const int lo = (w[b].qs[j] & 0x0F) - kOffset;
      const int hi = (w[b].qs[j] >> 4) - kOffset;
      block_sum += static_cast<float>(lo) * x[j] + static_cast<float>(hi) * x[j + kHalf];
    }
    sum += fp16[w[b].d] * block_sum;
  }
  return sum;
}

float dot_q8_0(const BlockQ8_0* w, const float* x, int64_t n, const float* fp16) {
  float sum = 0.0f;
  for (int64_t b = 0; b < n / kQK8_0; ++b, x += kQK8_0) {
    float block_sum = 0.0f;
    for (int j = 0; j < kQK8_0; ++j) block_sum += static_cast<float>(w[b].qs[j]) * x[j];
    sum += fp16[w[b].d] * block_sum;
  }
  return sum;
}

// Q6_K (ggml's layout, see quant.cpp): per half of 128 weights, weight l + 32q takes its low 4
// bits from ql[l + 32(q&1)] (low nibble for q < 2) and bits 2q..2q+1 of qh[l]; minus 32; times
// d * scales[group of 16]. Each group's integer sum is scaled once.
float dot_q6_k(const BlockQ6_K* w, const float* x, int64_t n, const float* fp16) {
  constexpr int kHalfBlock = 128;
  constexpr int kQuarter = 32;
  constexpr int kGroup = 16;
  constexpr int kOffset = 32;
  float sum = 0.0f;
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const float d = fp16[w[b].d];
    for (int half = 0; half < kQK_K / kHalfBlock; ++half, x += kHalfBlock) {
      const uint8_t* ql = w[b].ql + half * (kHalfBlock / 2);
      const uint8_t* qh = w[b].qh + half * (kHalfBlock / 4);
      const int8_t* scales = w[b].scales + half * (kHalfBlock / kGroup);
      for (int g = 0; g < kHalfBlock / kGroup; ++g) {  // group g: weights 16g .. 16g + 15
        const int q = g / 2;                           // quarter of the half
        float group_sum = 0.0f;
        for (int i = 0; i < kGroup; ++i) {
          const int l = (g % 2) * kGroup + i;  // position within the quarter
          const uint8_t low_byte = ql[l + kQuarter * (q & 1)];
          const int low = q < 2 ? (low_byte & 0x0F) : (low_byte >> 4);
          const int high = (qh[l] >> (2 * q)) & 3;
          group_sum += static_cast<float>((low | (high << 4)) - kOffset) * x[q * kQuarter + l];
        }
        sum += d * static_cast<float>(scales[g]) * group_sum;
      }
    }
  }
  return sum;
}

float dot_row_scalar(const Weight& w, int64_t r, const float* x, const float* fp16) {
  const void* row = w.row(r);
  switch (w.type) {
    case GGMLType::F32:
      return dot_f32_scalar(static_cast<const float*>(row), x, w.cols);
    case GGMLType::F16:
      return dot_f16_scalar(static_cast<const uint16_t*>(row), x, w.cols, fp16);
    case GGMLType::Q4_0:
      return dot_q4_0(static_cast<const BlockQ4_0*>(row), x, w.cols, fp16);
    case GGMLType::Q8_0:
      return dot_q8_0(static_cast<const BlockQ8_0*>(row), x, w.cols, fp16);
    case GGMLType::Q6_K:
      return dot_q6_k(static_cast<const BlockQ6_K*>(row), x, w.cols, fp16);
    default:
      return dot_dequantized(w, r, x);
  }
}

/// Row r of W . x: the SIMD kernels where this build has them (simd.h), else the scalar ones
/// above.
float dot_row(const Weight& w, int64_t r, const float* x, [[maybe_unused]] const float* fp16) {
#if ENGINE_SIMD != ENGINE_SIMD_NONE
  const void* row = w.row(r);
  switch (w.type) {
    case GGMLType::F32:
      return simd::dot_f32(static_cast<const float*>(row), x, w.cols);
    case GGMLType::F16:
      return simd::dot_f16(static_cast<const uint16_t*>(row), x, w.cols);
    case GGMLType::Q4_0:
      return simd::dot_q4_0(static_cast<const BlockQ4_0*>(row), x, w.cols);
    case GGMLType::Q8_0:
      return simd::dot_q8_0(static_cast<const BlockQ8_0*>(row), x, w.cols);
    case GGMLType::Q6_K:
      return simd::dot_q6_k(static_cast<const BlockQ6_K*>(row), x, w.cols);
    default:
      return dot_dequantized(w, r, x);
  }
#else
  return dot_row_scalar(w, r, x, fp16);
#endif
}

/// Requires y (n_tokens, rows) to equal the scalar kernels' result to within fp32 rounding. Both
/// sum the same n products w_j x_j in different orders, and each such sum is within
/// (n + c) u sum |w_j x_j| of the exact dot (u = 2^-24; c covers the few roundings of the scales
/// and of the products), so the two may differ by twice that. In the short rows of the kernel
/// tests a wrong weight or a lost lane moves the result by far more.
void check_against_scalar(const Weight& w, const float* x, const float* y, int n_tokens,
                          const float* fp16) {
  constexpr double kUnitRoundoff = 0x1p-24;
  constexpr int kExtraRoundings = 8;
  const double per_magnitude = 2.0 * static_cast<double>(w.cols + kExtraRoundings) * kUnitRoundoff;
  std::vector<float> row(w.cols);
  for (int64_t r = 0; r < w.rows; ++r) {
    dequantize_row(w.type, w.row(r), row.data(), w.cols);
    for (int t = 0; t < n_tokens; ++t) {
      const float* xt = x + t * w.cols;
      double magnitude = 0.0;  // sum |w_j x_j|
      for (int64_t j = 0; j < w.cols; ++j) magnitude += std::fabs(double{row[j]} * xt[j]);
      const float expected = dot_row_scalar(w, r, xt, fp16);
      const float got = y[t * w.rows + r];
      check(std::fabs(double{got} - expected) <= per_magnitude * magnitude, w.name, ": ",
            simd::kPathName, " kernel gives ", got, " for row ", r, " of token ", t,
            ", the scalar one ", expected);
    }
  }
}

}  // namespace

void linear(const Weight& w, const float* x, float* y, int n_tokens,
            MatmulScratch& /*scratch: stage 05 needs none*/) {
  check_weight(w);
  const float* fp16 = fp16_table().value;
  // W (d, n) @ x (n_tokens, n)^T -> y (n_tokens, d): threads take contiguous shares of the rows, so
  // each streams its own part of W once and reuses it for every token.
  ParallelError error;  // dot_row() throws for a type it lacks: not out of the region (parallel.h)
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < w.rows; ++r) {
    error.guard([&] {
      for (int t = 0; t < n_tokens; ++t) y[t * w.rows + r] = dot_row(w, r, x + t * w.cols, fp16);
    });
  }
  error.rethrow();
  if (kCheckAgainstScalar) check_against_scalar(w, x, y, n_tokens, fp16);
}

// Every product and sum here is fp32, so the logits stay within ~1e-6 of their scale of the
// fp64 reference; the shared suite allows 1e-4.
double logit_tolerance(const Model& /*model*/) {
  return 1e-4;
}
