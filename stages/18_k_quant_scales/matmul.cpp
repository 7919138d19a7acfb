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
// pack_weight() reorders a Q4_0 or Q8_0 matrix once, at load, into simd.h's layout
// (16 rows side by side, one per int32 lane). The scalar kernels read the file's layout: the
// order of the bytes does not change the sums, only how many instructions the SIMD ones need.
//
// Matrices that read the same x go through one call (wq, wk, wv; w_gate, w_up): x is
// quantized once instead of 3 (2) times, and the threads meet at one barrier instead of 3 (2).
// A decode step makes 4 calls a layer, 121 a token on a 7B model (with the output), where one
// call per matrix makes 7 and 211.
#include "matmul.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "dequantized.h"
#include "error.h"
#include "kquants.h"
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
// One float sum per (row, token), block after block (simd.h), as the packed kernels
// keep one lane per row.
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

// Q8_0 weights . Q8_0 activations: a block's sum is at most 32 x 128 x 127, exact as a float too.
float dot_q8_0_q8_0(const BlockQ8_0* w, const simd::XBlock* x, int64_t n_blocks,
                    const float* fp16) {
  float acc = 0.0f;
  for (int64_t b = 0; b < n_blocks; ++b) {
    int32_t dot = 0;
    for (int j = 0; j < kQK8_0; ++j) dot += w[b].qs[j] * x[b].qs[j];
    acc = std::fma(static_cast<float>(dot), fp16[w[b].d] * x[b].d, acc);
  }
  return acc;
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

/// One token's activations: x as floats, and (for Q4_0 and Q8_0 weights) quantized to Q8_0,
/// and, for Q4_K and Q5_K, to Q8_K.
struct Activations {
  const float* x;            ///< (n,)
  const simd::XBlock* xq;    ///< (n / 32,) blocks, or nullptr when the weight type keeps floats
  const kquant::XBlock* xk;  ///< (n / 256,) super-blocks, or nullptr
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
      if (kquant::is_k_type(w.type)) return kquant::dot_scalar(w.type, row, a.xk, w.cols / kQK_K);
      return dot_dequantized(w, r, a.x);
  }
}

/// y[t * w.rows + i] = row r0 + i of W . token t's x, for i < n_rows and t < n_tokens: the SIMD
/// kernels where this build has them (simd.h), else the scalar ones above. x (n_tokens, w.cols);
/// xq its Q8_0 blocks, xk its Q8_K super-blocks (or nullptr); y points at row r0 of token 0.
void dot_rows(const PackedWeight& p, int64_t r0, int64_t n_rows, const float* x,
              const simd::XBlock* xq, const kquant::XBlock* xk, int n_tokens, float* y,
              [[maybe_unused]] const float* fp16) {
  const Weight& w = p.source;
  const int64_t x_blocks = w.cols / kQK8_0;
  const int64_t k_blocks = w.cols / kQK_K;
  // A K-quant row is decoded once per token; it stays in L1 between tokens.
  if (kquant::is_k_type(w.type)) {
    for (int64_t i = 0; i < n_rows; ++i) {
      for (int t = 0; t < n_tokens; ++t)
        y[t * w.rows + i] = kquant::dot(w.type, w.row(r0 + i), xk + t * k_blocks, k_blocks);
    }
    return;
  }
#if ENGINE_SIMD != ENGINE_SIMD_NONE
  if (!p.data.empty()) {
    return simd::dot_packed(w.type, p.data.data(), p.group_bytes, r0, n_rows, xq, x_blocks,
                            n_tokens, y, w.rows);
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
      const Activations a = {x + t * w.cols, xq == nullptr ? nullptr : xq + t * x_blocks,
                             xk == nullptr ? nullptr : xk + t * k_blocks};
      y[t * w.rows + i] = dot_row_scalar(w, r0 + i, a, fp16);
    }
  }
#endif
}

/// Activation blocks a thread quantizes at a time (4 KB of floats).
constexpr int64_t kQuantizeStep = 32;

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
void check_against_scalar(const Weight& w, const float* x, const simd::XBlock* xq,
                          const kquant::XBlock* xk, const float* y, int n_tokens,
                          const float* fp16) {
  const bool k_type = kquant::is_k_type(w.type);
  if (!quantizes_activations(w.type) && !k_type) return;
  const int64_t x_blocks = w.cols / kQK8_0;
  const int64_t k_blocks = w.cols / kQK_K;
  for (int t = 0; t < n_tokens; ++t) {
    const Activations a = {x + t * w.cols, k_type ? nullptr : xq + t * x_blocks,
                           k_type ? xk + t * k_blocks : nullptr};
    for (int64_t r = 0; r < w.rows; ++r) {
      const float expected = dot_row_scalar(w, r, a, fp16);
      const float got = y[t * w.rows + r];
      check(std::memcmp(&expected, &got, sizeof(float)) == 0, w.name, ": ", simd::kPathName,
            " kernel gives ", got, " for row ", r, " of token ", t, ", the scalar one ", expected);
    }
  }
}

}  // namespace

PackedWeight pack_weight(const Weight& w) {
  check_weight(w);
  PackedWeight p{w, {}, 0};
  // The scalar kernels read the file's layout; only the SIMD ones gain from the reorder.
  if (!quantizes_activations(w.type) || ENGINE_SIMD == ENGINE_SIMD_NONE) return p;
  // Group g, block b, slice s, row r: the row's qs bytes kBytesPerLane s .. (simd.h).
  const int64_t n_blocks = w.cols / kQK8_0;
  const size_t block_bytes = type_block_bytes(w.type);
  const size_t qs_bytes = block_bytes - sizeof(uint16_t);  // after the fp16 scale d
  const size_t quant_bytes = simd::kGroupRows * qs_bytes;  // a block's slices
  const int64_t n_groups = (w.rows + simd::kTileRows - 1) / simd::kTileRows * simd::kGroupsPerTile;
  p.group_bytes =
      (n_blocks * simd::kGroupRows * block_bytes + kCacheLine - 1) / kCacheLine * kCacheLine;
  p.data.assign(n_groups * p.group_bytes, 0);  // padding rows: zero scales, zero bytes
#pragma omp parallel for schedule(static)
  for (int64_t g = 0; g < n_groups; ++g) {
    unsigned char* quants = p.data.data() + g * p.group_bytes;
    unsigned char* scales = quants + n_blocks * quant_bytes;
    for (int r = 0; r < simd::kGroupRows && g * simd::kGroupRows + r < w.rows; ++r) {
      const auto* row = static_cast<const unsigned char*>(w.row(g * simd::kGroupRows + r));
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
  return p;
}

void linear(const Weight& w, const float* x, float* y, int n_tokens, MatmulScratch& scratch) {
  linear(pack_weight(w), x, y, n_tokens, scratch);
}

void linear(const PackedWeight& p, const float* x, float* y, int n_tokens, MatmulScratch& scratch) {
  linear({{p, y}}, x, n_tokens, scratch);
}

void linear(std::initializer_list<LinearPart> parts, const float* x, int n_tokens,
            MatmulScratch& scratch) {
  constexpr int kMaxParts = 4;
  check(parts.size() > 0 && parts.size() <= kMaxParts, "linear: ", parts.size(),
        " matrices in one call, not 1 to ", kMaxParts);
  const int64_t cols = parts.begin()->w.source.cols;
  // W (d, n) @ x (n_tokens, n)^T -> y (n_tokens, d) in chunks of ~kChunkBytes of weights, which
  // stay in L2 (2 MB a core here) while every token tile passes over them.
  constexpr size_t kChunkBytes = 256 * 1024;
  const int64_t tile = simd::kTileRows;
  int64_t chunk_rows[kMaxParts];
  int64_t first_chunk[kMaxParts + 1] = {0};  // part i's chunks: first_chunk[i] .. [i + 1] - 1
  bool quantize = false;
  bool quantize_k = false;  // a K-quant part needs Q8_K activations
  int i = 0;
  for (const LinearPart& part : parts) {
    const Weight& w = part.w.source;
    check_weight(w);
    check(w.cols == cols, w.name, ": ", w.cols, " columns, but the matrices fused with it have ",
          cols);
    quantize = quantize || quantizes_activations(w.type);
    quantize_k = quantize_k || kquant::is_k_type(w.type);
    chunk_rows[i] =
        std::max<int64_t>(tile, static_cast<int64_t>(kChunkBytes / w.row_bytes) / tile * tile);
    first_chunk[i + 1] = first_chunk[i] + (w.rows + chunk_rows[i] - 1) / chunk_rows[i];
    ++i;
  }
  const int64_t n_chunks = first_chunk[parts.size()];
  const float* fp16 = fp16_table().value;
  // x is quantized once per call and shared by all threads (n_x_blocks blocks).
  const int64_t n_x_blocks = quantize ? n_tokens * (cols / kQK8_0) : 0;
  // And the K-quants' super-blocks after them, in the same scratch.
  const int64_t n_k_blocks = quantize_k ? n_tokens * (cols / kQK_K) : 0;
  const size_t k_offset = n_x_blocks * sizeof(simd::XBlock);
  scratch.x_quantized.resize(k_offset + n_k_blocks * sizeof(kquant::XBlock));
  auto* xq = n_x_blocks > 0 ? reinterpret_cast<simd::XBlock*>(scratch.x_quantized.data()) : nullptr;
  auto* xk = n_k_blocks > 0
                 ? reinterpret_cast<kquant::XBlock*>(scratch.x_quantized.data() + k_offset)
                 : nullptr;
  // No thread waits for another. Both quantize x, a share of its blocks each (one
  // thread did all of it while the other spun); then each takes the next chunk of rows as soon
  // as it is done with one (dynamic schedule), so the two finish within one chunk of each other
  // (a fixed half each left one thread waiting at the end of every call).
  // One token's activations (128 to 344 blocks, a few microseconds) are quantized by the calling
  // thread before the others start: splitting them would cost a barrier more than it saves.
  const bool quantize_here = n_tokens == 1;
  if (quantize_here) {
    quantize_activations(x, 0, n_x_blocks, xq);
    kquant::quantize(x, xk, n_k_blocks);
  }
  // Each iteration is guarded, not the region: a thread that threw still meets the others at
  // the loops' barriers (parallel.h).
  ParallelError error;
#pragma omp parallel
  {
    if (!quantize_here) {
#pragma omp for schedule(static)
      for (int64_t b = 0; b < n_x_blocks; b += kQuantizeStep) {
        error.guard(
            [&] { quantize_activations(x, b, std::min(n_x_blocks, b + kQuantizeStep), xq); });
      }
#pragma omp for schedule(static)
      for (int64_t b = 0; b < n_k_blocks; ++b) {
        error.guard([&] { kquant::quantize(x + b * kQK_K, xk + b, 1); });
      }
    }
#pragma omp for schedule(dynamic, 1)
    for (int64_t c = 0; c < n_chunks; ++c) {
      error.guard([&] {
        int part = 0;
        while (c >= first_chunk[part + 1]) ++part;
        const LinearPart& lp = parts.begin()[part];
        const int64_t r0 = (c - first_chunk[part]) * chunk_rows[part];
        dot_rows(lp.w, r0, std::min(chunk_rows[part], lp.w.source.rows - r0), x, xq, xk, n_tokens,
                 lp.y + r0, fp16);
      });
    }
  }
  error.rethrow();
  if (kCheckAgainstScalar) {
    for (const LinearPart& part : parts)
      check_against_scalar(part.w.source, x, xq, xk, part.y, n_tokens, fp16);
  }
}

// Q4_0 and Q8_0 layers see x rounded to Q8_0 (8 bits per value, one scale per 32):
// each activation moves by up to half a step, amax / 254 of its block, and every logit inherits
// those moves through the layers. Measured against the fp64 reference (tests/test_engine.cpp):
// 1.57% of max |logit| for tiny-llama-q4_0, 1.44% for tiny-qwen2-q4_0; 0.05 leaves 3x room. F32,
// F16 and Q6_K weights keep fp32 x (F32 models stay ~4e-7 off): 1e-4 as before. Q4_K and Q5_K
// see x rounded to Q8_K (8 bits, one scale per 256).
double logit_tolerance(const Model& model) {
  constexpr double kFp32 = 1e-4;
  constexpr double kQ8Activations = 0.05;
  auto rounds_x = [](GGMLType t) { return quantizes_activations(t) || kquant::is_k_type(t); };
  bool any = rounds_x(model.output().type);
  for (const LayerWeights& l : model.layers()) {
    for (const Weight* w : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down})
      any = any || rounds_x(w->type);
  }
  return any ? kQ8Activations : kFp32;
}
