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
//
// The SIMD kernel for Q4_0 reads rows reordered into simd.h's layout (16 rows side by side, one
// per int32 lane): pack_rows() copies each chunk of rows there, in L2, before the kernel runs
// over it. The scalar kernels read the file's layout: the order of the bytes does not change the
// sums, only how many instructions the SIMD ones need.
#include "matmul.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "aligned.h"
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
// Q4_0: one float sum per (row, token), block after block (simd.h), as the packed kernel
// keeps one lane per row.
float dot_q4_0_q8_0(const BlockQ4_0* w, const simd::XBlock* x, int64_t n_blocks,
                    const float* fp16) {
  constexpr int kHalf = kQK4_0 / 2;
  constexpr int kOffset = 8;
  float acc = 0.0f;
  for (int64_t b = 0; b < n_blocks; ++b) {
    int32_t dot = 0;
    for (int j = 0; j < kHalf; ++j) {  // qs[j] holds weights j (low nibble) and j + 16 (high)
      dot += ((w[b].qs[j] & 0x0F) - kOffset) * x[b].qs[j];
      dot += ((w[b].qs[j] >> 4) - kOffset) * x[b].qs[j + kHalf];
    }
    acc = std::fma(static_cast<float>(dot), fp16[w[b].d] * x[b].d, acc);
  }
  return acc;
}

// Q8_0: the SIMD kernel keeps 8 float lanes per row and sums them once at the end (simd.h's
// lane structure); this kernel does the same operations in the same order, so the bits agree.

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

// Q8_0 weights . Q8_0 activations: a lane is at most 4 x 128 x 127, exact as a float too.
float dot_q8_0_q8_0(const BlockQ8_0* w, const simd::XBlock* x, int64_t n_blocks,
                    const float* fp16) {
  DotLanes lanes;
  for (int64_t b = 0; b < n_blocks; ++b) {
    int32_t lane[simd::kDotLanes] = {};
    for (int j = 0; j < kQK8_0; ++j) lane[j / simd::kProductsPerLane] += w[b].qs[j] * x[b].qs[j];
    lanes.add_block(b, lane, fp16[w[b].d] * x[b].d);
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
  const float* x;          ///< (n,)
  const simd::XBlock* xq;  ///< (n / 32,) blocks, or nullptr when the weight type keeps floats
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

/// Bytes of one group of simd::kGroupRows Q4_0 rows in the packed layout (simd.h), padded to
/// a cache line.
size_t packed_group_bytes(const Weight& w) {
  const size_t bytes = w.cols / kQK4_0 * simd::kGroupRows * sizeof(BlockQ4_0);
  return (bytes + kCacheLine - 1) / kCacheLine * kCacheLine;
}

#if ENGINE_SIMD != ENGINE_SIMD_NONE
/// Rows [r0, r0 + n_groups x 16) of W in simd.h's packed layout, n_groups groups of group_bytes
/// at out (r0 a multiple of simd::kGroupRows). Rows past the matrix are not written: their lanes
/// are computed from what out held and never stored.
void pack_rows(const Weight& w, int64_t r0, int64_t n_groups, size_t group_bytes,
               unsigned char* out) {
  // Group g, block b, slice s, row r: the row's qs bytes kBytesPerLane s .. (simd.h).
  const int64_t n_blocks = w.cols / kQK8_0;
  const size_t block_bytes = type_block_bytes(w.type);
  const size_t qs_bytes = block_bytes - sizeof(uint16_t);  // after the fp16 scale d
  const size_t quant_bytes = simd::kGroupRows * qs_bytes;  // a block's slices
  for (int64_t g = 0; g < n_groups; ++g) {
    unsigned char* quants = out + g * group_bytes;
    unsigned char* scales = quants + n_blocks * quant_bytes;
    const int64_t first = r0 + g * simd::kGroupRows;
    for (int r = 0; r < simd::kGroupRows && first + r < w.rows; ++r) {
      const auto* row = static_cast<const unsigned char*>(w.row(first + r));
      for (int64_t b = 0; b < n_blocks; ++b) {
        const unsigned char* block = row + b * block_bytes;
        std::memcpy(scales + b * simd::kScaleBytes + r * sizeof(uint16_t), block, sizeof(uint16_t));
        for (size_t s = 0; s < qs_bytes / simd::kBytesPerLane; ++s) {
          std::memcpy(quants + b * quant_bytes + s * simd::kSliceBytes + r * simd::kBytesPerLane,
                      block + sizeof(uint16_t) + s * simd::kBytesPerLane, simd::kBytesPerLane);
        }
      }
    }
  }
}
#endif

/// y[t * w.rows + i] = row r0 + i of W . token t's x, for i < n_rows and t < n_tokens: the SIMD
/// kernels where this build has them (simd.h), else the scalar ones above. x (n_tokens, w.cols);
/// xq its Q8_0 blocks (or nullptr); y points at row r0 of token 0. packed: this thread's buffer
/// for the chunk's rows in the packed layout (Q4_0 in SIMD builds).
void dot_rows(const Weight& w, int64_t r0, int64_t n_rows, const float* x, const simd::XBlock* xq,
              int n_tokens, float* y, [[maybe_unused]] const float* fp16,
              [[maybe_unused]] unsigned char* packed) {
  const int64_t x_blocks = w.cols / kQK8_0;
#if ENGINE_SIMD != ENGINE_SIMD_NONE
  if (w.type == GGMLType::Q4_0) {
    // The chunk's rows, reordered into this thread's buffer (it stays in L2), then read by the
    // packed kernel as often as there are token tiles.
    const size_t group_bytes = packed_group_bytes(w);
    const int64_t n_groups =
        (n_rows + simd::kTileRows - 1) / simd::kTileRows * simd::kGroupsPerTile;
    pack_rows(w, r0, n_groups, group_bytes, packed);
    return simd::dot_packed_q4_0(packed, group_bytes, n_rows, xq, x_blocks, n_tokens, y, w.rows);
  }
  if (w.type == GGMLType::Q8_0) {
    return simd::dot_q8_0_q8_0(w.row(r0), w.row_bytes, n_rows, xq, x_blocks, n_tokens, y, w.rows);
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

/// Blocks [begin, end) of x (n_tokens, n) as XBlocks, by the reference quantizer (ggml's
/// rounding, |q| <= 127, which the SIMD kernels rely on). O(n) against the matmul's O(rows x n).
void quantize_activations(const float* x, int64_t begin, int64_t end, simd::XBlock* xq) {
  for (int64_t b = begin; b < end; ++b) {
    BlockQ8_0 q8;
    quantize_row_q8_0(x + b * kQK8_0, &q8, kQK8_0);
    xq[b].d = fp16_to_fp32(q8.d);
    xq[b].sum = 0;
    for (int j = 0; j < kQK8_0; ++j) {
      xq[b].qs[j] = q8.qs[j];
      xq[b].sum += q8.qs[j];
    }
  }
}

/// Requires y (n_tokens, rows) to equal, bit for bit, the scalar kernels' result, for the weight
/// types with integer dot products (the float ones associate their sums differently).
void check_against_scalar(const Weight& w, const float* x, const simd::XBlock* xq, const float* y,
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
  // x is quantized once per call and shared by all threads (n_x_blocks blocks).
  const int64_t n_x_blocks = quantizes_activations(w.type) ? n_tokens * (w.cols / kQK8_0) : 0;
  scratch.x_quantized.resize(n_x_blocks * sizeof(simd::XBlock));
  auto* xq = n_x_blocks > 0 ? reinterpret_cast<simd::XBlock*>(scratch.x_quantized.data()) : nullptr;
  quantize_activations(x, 0, n_x_blocks, xq);  // before the threads start
  // W (d, n) @ x (n_tokens, n)^T -> y (n_tokens, d): each thread takes a contiguous share of the
  // rows (in whole tiles of simd::kTileRows), so it streams its own part of W once.
  // The share goes in chunks of ~kChunkBytes of weights, which stay in L2 (2 MB a core here)
  // while every token tile passes over them; the token tiles' activations stay in L1.
  constexpr size_t kChunkBytes = 256 * 1024;
  const int64_t tile = simd::kTileRows;
  const int64_t chunk_rows =
      std::max<int64_t>(tile, static_cast<int64_t>(kChunkBytes / w.row_bytes) / tile * tile);
  const int64_t n_tiles = (w.rows + tile - 1) / tile;
  // Each thread's buffer for one chunk of Q4_0 rows in the packed layout (dot_rows): a slice of
  // scratch.packed_rows, which grows to the largest matrix's need, starting on a cache line (the
  // kernel's aligned loads).
  const bool packs = w.type == GGMLType::Q4_0 && ENGINE_SIMD != ENGINE_SIMD_NONE;
  const size_t pack_bytes = packs ? chunk_rows / simd::kGroupRows * packed_group_bytes(w) : 0;
  const size_t all_bytes = omp_get_max_threads() * pack_bytes;
  if (scratch.packed_rows.size() < all_bytes + kCacheLine) {
    scratch.packed_rows.resize(all_bytes + kCacheLine);
  }
  void* start = scratch.packed_rows.data();
  size_t space = scratch.packed_rows.size();
  auto* packed = static_cast<unsigned char*>(std::align(kCacheLine, all_bytes, start, space));
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
        dot_rows(w, r0, n_rows, x, xq, n_tokens, y + r0, fp16, packed + id * pack_bytes);
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
