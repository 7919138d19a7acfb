// matmul.cpp: linear() with the dequantization fused into the dot products (seed article §3.4).
//
// W stays as the file stores it (rows = "out", quantization blocks along a row), and each output
// is the dot product of one stored row with x, every block decoded in registers: a Q4_0 weight
// costs 4.5 bits of memory traffic, where turning the whole matrix into fp32 B = W^T on every
// call costs 4 + 32 + 32 bits (read, fp32 copy written, read back: for a 7B Q4_0 model ~27 GB a
// token against 3.9 GB in the file) and a scratch as large as the largest matrix (1.6 GB). Rows
// are split among threads.
//
// For Q4_0 and Q8_0 weights, x is first quantized to Q8_0 (llama.cpp's way), once per
// call, so that a block's 32 products are int8 x int8, summed exactly in int32 by SIMD
// instructions (simd.cpp). The kernels below are the portable fallback and the reference the SIMD
// ones must equal bit for bit.
#include "matmul.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "dequantized.h"
#include "error.h"
#include "parallel.h"
#include "quant.h"
#include "simd.h"

namespace {

// -DENGINE_CHECK_AGAINST_SCALAR makes every linear() recompute its Q8_0-activation
// outputs with the scalar kernels and require the same bits (a debugging build: ~10x slower).
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

// Q4_0 weights . Q8_0 activations. Weight j of a block is (low nibble of qs[j]) - 8,
// weight j + 16 is (high nibble) - 8, times the block's scale. Integer products are summed
// exactly in int32 (|sum| <= 32 x 8 x 127, so also exact as a float), then scaled by d_w * d_x
// (exact in fp32: two 11-bit significands). std::fma rounds once, as the SIMD kernels' fused
// multiply-add does. (One instruction wherever the target has FMA: x86 since 2013, every ARMv8.)
//
// The SIMD kernels keep 8 float lanes per row and sum them once at the end (simd.h's
// lane structure); these kernels do the same operations in the same order, so the bits agree.

/// Float lanes of one (row, token) dot product, as simd.h defines them.
struct DotLanes {
  static constexpr int kParities = 2;  ///< even and odd blocks
  float acc[kParities][simd::kDotLanes] = {};

  /// acc[b % 2][j] = fma(lane j, scale, acc[b % 2][j]) for the 8 exact int32 lanes of block b.
  void add_block(int64_t b, const int32_t (&lane)[simd::kDotLanes], float scale) {
    float* a = acc[b % kParities];
    for (int j = 0; j < simd::kDotLanes; ++j)
      a[j] = std::fma(static_cast<float>(lane[j]), scale, a[j]);
  }

  /// e = even + odd lanes, then ((e0 + e4) + (e2 + e6)) + ((e1 + e5) + (e3 + e7)).
  float sum() const {
    constexpr int kHalf = simd::kDotLanes / 2;
    float e[simd::kDotLanes];
    for (int j = 0; j < simd::kDotLanes; ++j) e[j] = acc[0][j] + acc[1][j];
    float s[kHalf];
    for (int j = 0; j < kHalf; ++j) s[j] = e[j] + e[j + kHalf];
    return (s[0] + s[2]) + (s[1] + s[3]);
  }
};
static_assert(simd::kDotLanes == 8, "DotLanes::sum() reduces 8 lanes");

float dot_q4_0_q8_0(const BlockQ4_0* w, const BlockQ8_0* x, int64_t n_blocks, const float* fp16) {
  constexpr int kHalf = kQK4_0 / 2;
  constexpr int kOffset = 8;
  DotLanes lanes;
  for (int64_t b = 0; b < n_blocks; ++b) {
    int32_t lane[simd::kDotLanes] = {};
    for (int j = 0; j < kQK4_0; ++j) {  // weight j: low nibbles first, then high nibbles
      const uint8_t packed = w[b].qs[j % kHalf];
      const int weight = (j < kHalf ? (packed & 0x0F) : (packed >> 4)) - kOffset;
      lane[j / simd::kProductsPerLane] += weight * x[b].qs[j];
    }
    lanes.add_block(b, lane, fp16[w[b].d] * fp16[x[b].d]);
  }
  return lanes.sum();
}

// Q8_0 weights . Q8_0 activations: a lane is at most 4 x 128 x 127, exact as a float too.
float dot_q8_0_q8_0(const BlockQ8_0* w, const BlockQ8_0* x, int64_t n_blocks, const float* fp16) {
  DotLanes lanes;
  for (int64_t b = 0; b < n_blocks; ++b) {
    int32_t lane[simd::kDotLanes] = {};
    for (int j = 0; j < kQK8_0; ++j) lane[j / simd::kProductsPerLane] += w[b].qs[j] * x[b].qs[j];
    lanes.add_block(b, lane, fp16[w[b].d] * fp16[x[b].d]);
  }
  return lanes.sum();
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

/// One token's activations: x as floats, and (for Q4_0 and Q8_0 weights) quantized to Q8_0.
struct Activations {
  const float* x;       ///< (n,)
  const BlockQ8_0* xq;  ///< (n / 32,) blocks, or nullptr when the weight type keeps floats
};

/// True for the weight types whose dot products take Q8_0 activations.
bool quantizes_activations(GGMLType type) {
  return type == GGMLType::Q4_0 || type == GGMLType::Q8_0;
}

float dot_row_scalar(const Weight& w, int64_t r, const Activations& a, const float* fp16) {
  const void* row = w.row(r);
  switch (w.type) {
    case GGMLType::F32:
      return dot_f32_scalar(static_cast<const float*>(row), a.x, w.cols);
    case GGMLType::F16:
      return dot_f16_scalar(static_cast<const uint16_t*>(row), a.x, w.cols, fp16);
    case GGMLType::Q4_0:
      return dot_q4_0_q8_0(static_cast<const BlockQ4_0*>(row), a.xq, w.cols / kQK4_0, fp16);
    case GGMLType::Q8_0:
      return dot_q8_0_q8_0(static_cast<const BlockQ8_0*>(row), a.xq, w.cols / kQK8_0, fp16);
    case GGMLType::Q6_K:
      return dot_q6_k(static_cast<const BlockQ6_K*>(row), a.x, w.cols, fp16);
    default:
      return dot_dequantized(w, r, a.x);
  }
}

/// y[t * w.rows + i] = row r0 + i of W . token t's x, for i < n_rows and t < n_tokens: the SIMD
/// kernels where this build has them (simd.h), else the scalar ones above. x (n_tokens, w.cols);
/// xq its Q8_0 blocks (or nullptr); y points at row r0 of token 0.
void dot_rows(const Weight& w, int64_t r0, int64_t n_rows, const float* x, const BlockQ8_0* xq,
              int n_tokens, float* y, [[maybe_unused]] const float* fp16) {
  const int64_t x_blocks = w.cols / kQK8_0;
#if ENGINE_SIMD != ENGINE_SIMD_NONE
  const void* row0 = w.row(r0);
  switch (w.type) {
    case GGMLType::Q4_0:
      return simd::dot_q4_0_q8_0(row0, w.row_bytes, n_rows, xq, x_blocks, n_tokens, y, w.rows);
    case GGMLType::Q8_0:
      return simd::dot_q8_0_q8_0(row0, w.row_bytes, n_rows, xq, x_blocks, n_tokens, y, w.rows);
    default:
      break;
  }
  // Float weights: one row at a time, every token.
  for (int64_t i = 0; i < n_rows; ++i) {
    const void* row = w.row(r0 + i);
    for (int t = 0; t < n_tokens; ++t) {
      const float* xt = x + t * w.cols;
      float& out = y[t * w.rows + i];
      switch (w.type) {
        case GGMLType::F32:
          out = simd::dot_f32(static_cast<const float*>(row), xt, w.cols);
          break;
        case GGMLType::F16:
          out = simd::dot_f16(static_cast<const uint16_t*>(row), xt, w.cols);
          break;
        case GGMLType::Q6_K:
          out = simd::dot_q6_k(static_cast<const BlockQ6_K*>(row), xt, w.cols);
          break;
        default:
          out = dot_dequantized(w, r0 + i, xt);
          break;
      }
    }
  }
#else
  for (int64_t i = 0; i < n_rows; ++i) {
    for (int t = 0; t < n_tokens; ++t) {
      const Activations a = {x + t * w.cols, xq == nullptr ? nullptr : xq + t * x_blocks};
      y[t * w.rows + i] = dot_row_scalar(w, r0 + i, a, fp16);
    }
  }
#endif
}

/// x (n_tokens, n) -> n_tokens rows of n / 32 Q8_0 blocks in scratch, by the reference quantizer
/// (ggml's rounding, |q| <= 127, which the SIMD kernels rely on). O(n) against the matmul's
/// O(rows x n): ~0.1% of a 4096 x 4096 call.
const BlockQ8_0* quantize_activations(const float* x, int n_tokens, int64_t n,
                                      MatmulScratch& scratch) {
  const size_t n_blocks = static_cast<size_t>(n_tokens) * (n / kQK8_0);
  scratch.x_quantized.resize(n_blocks * sizeof(BlockQ8_0));
  auto* xq = reinterpret_cast<BlockQ8_0*>(scratch.x_quantized.data());
  quantize_row_q8_0(x, xq, n_tokens * n);
  return xq;
}

/// Requires y (n_tokens, rows) to equal, bit for bit, the scalar kernels' result, for the weight
/// types with integer dot products (the float ones associate their sums differently).
void check_against_scalar(const Weight& w, const float* x, const BlockQ8_0* xq, const float* y,
                          int n_tokens, const float* fp16) {
  if (!quantizes_activations(w.type)) return;
  const int64_t x_blocks = w.cols / kQK8_0;
  for (int t = 0; t < n_tokens; ++t) {
    const Activations a = {x + t * w.cols, xq + t * x_blocks};
    for (int64_t r = 0; r < w.rows; ++r) {
      const float expected = dot_row_scalar(w, r, a, fp16);
      const float got = y[t * w.rows + r];
      check(std::memcmp(&expected, &got, sizeof(float)) == 0, w.name, ": ", simd::kPathName,
            " kernel gives ", got, " for row ", r, " of token ", t, ", the scalar one ", expected);
    }
  }
}

}  // namespace

void linear(const Weight& w, const float* x, float* y, int n_tokens, MatmulScratch& scratch) {
  check_weight(w);
  const float* fp16 = fp16_table().value;
  // x is quantized once, before the threads start, and shared by all of them.
  const BlockQ8_0* xq =
      quantizes_activations(w.type) ? quantize_activations(x, n_tokens, w.cols, scratch) : nullptr;
  // W (d, n) @ x (n_tokens, n)^T -> y (n_tokens, d): each thread takes a contiguous share of the
  // rows (in whole tiles of simd::kTileRows), so it streams its own part of W once.
  // The share goes in chunks of ~kChunkBytes of weights, which stay in L2 (2 MB a core here)
  // while every token tile passes over them; the token tiles' activations stay in L1.
  constexpr size_t kChunkBytes = 256 * 1024;
  const int64_t tile = simd::kTileRows;
  const int64_t chunk_rows =
      std::max<int64_t>(tile, static_cast<int64_t>(kChunkBytes / w.row_bytes) / tile * tile);
  const int64_t n_tiles = (w.rows + tile - 1) / tile;
  ParallelError error;  // dot_rows() throws for a type it lacks: not out of the region (parallel.h)
#pragma omp parallel
  {
    const int64_t n_threads = omp_get_num_threads();
    const int64_t id = omp_get_thread_num();
    const int64_t begin = n_tiles * id / n_threads * tile;
    const int64_t end = std::min<int64_t>(w.rows, n_tiles * (id + 1) / n_threads * tile);
    error.guard([&] {
      for (int64_t r0 = begin; r0 < end; r0 += chunk_rows) {
        const int64_t n_rows = std::min<int64_t>(chunk_rows, end - r0);
        dot_rows(w, r0, n_rows, x, xq, n_tokens, y + r0, fp16);
      }
    });
  }
  error.rethrow();
  if (kCheckAgainstScalar) check_against_scalar(w, x, xq, y, n_tokens, fp16);
}

// Q4_0 and Q8_0 layers see x rounded to Q8_0 (8 bits per value, one scale per 32):
// each activation moves by up to half a step, amax / 254 of its block, and every logit inherits
// those moves through the layers. Measured against the fp64 reference (tests/test_engine.cpp):
// 1.57% of max |logit| for tiny-llama-q4_0, 1.44% for tiny-qwen2-q4_0; 0.05 leaves 3x room. F32,
// F16 and Q6_K weights keep fp32 x (F32 models stay ~4e-7 off): 1e-4 as before.
double logit_tolerance(const Model& model) {
  constexpr double kFp32 = 1e-4;
  constexpr double kQ8Activations = 0.05;
  bool any = quantizes_activations(model.output().type);
  for (const LayerWeights& l : model.layers()) {
    for (const Weight* w : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down})
      any = any || quantizes_activations(w->type);
  }
  return any ? kQ8Activations : kFp32;
}
