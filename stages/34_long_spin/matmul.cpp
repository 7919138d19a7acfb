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
// (16 rows side by side, one per int32 lane), and Q4_K, Q5_K and Q6_K matrices into kquants.h's
// (the same idea, with the sub-block scales unpacked). The scalar kernels read the file's layout:
// the order of the bytes does not change the sums, only how many instructions the SIMD ones need.
//
// Matrices that read the same x go through one call (wq, wk, wv; w_gate, w_up): x is
// quantized once instead of 3 (2) times, and the threads meet at one barrier instead of 3 (2).
// A decode step makes 4 calls a layer, 121 a token on a 7B model (with the output), where one
// call per matrix makes 7 and 211.
// Matrices that each read an input of their own, of the same width, go through one stacked call
// in the same way (linear_stacked): the inputs lie one after another in x, part j reads the j-th.
#include "matmul.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <span>

#include "amx.h"
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

/// One token's activations: x as floats, and (for Q4_0 and Q8_0 weights) quantized to Q8_0,
/// and, for the K-quants, to Q8_K.
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
    default:
      if (kquant::is_k_type(w.type)) return kquant::dot_scalar(w.type, row, a.xk, w.cols / kQK_K);
      return dot_dequantized(w, r, a.x);
  }
}

/// y[t * w.rows + i] = row r0 + i of W . token t's x, for i < n_rows and t < n_tokens: the SIMD
/// kernels where this build has them (simd.h), else the scalar ones above. x (n_tokens, w.cols);
/// xq its Q8_0 blocks, tiles the same as AMX tiles (amx.h), xk its Q8_K super-blocks (each or
/// nullptr); y points at row r0 of token 0.
void dot_rows(const PackedWeight& p, int64_t r0, int64_t n_rows, const float* x,
              const simd::XBlock* xq, [[maybe_unused]] const simd::TokenTileBlock* tiles,
              const kquant::XBlock* xk, int n_tokens, float* y,
              [[maybe_unused]] const float* fp16) {
  const Weight& w = p.source;
  const int64_t x_blocks = w.cols / kQK8_0;
  const int64_t k_blocks = w.cols / kQK_K;
  if (kquant::is_k_type(w.type) && p.packed()) {
    return kquant::dot_packed(w.type, p.bytes(), p.group_bytes, r0, n_rows, xk, k_blocks, n_tokens,
                              y, w.rows);
  }
  // Other K-quant rows are decoded once per token; a row stays in L1 between tokens.
  if (kquant::is_k_type(w.type)) {
    for (int64_t i = 0; i < n_rows; ++i) {
      for (int t = 0; t < n_tokens; ++t)
        y[t * w.rows + i] = kquant::dot(w.type, w.row(r0 + i), xk + t * k_blocks, k_blocks);
    }
    return;
  }
#if ENGINE_SIMD != ENGINE_SIMD_NONE
  if (p.packed()) {
    return simd::dot_packed(w.type, p.bytes(), p.group_bytes, r0, n_rows, xq, tiles, x_blocks,
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
/// on_tiles: how many of the tokens the AMX tiles computed.
void check_against_scalar(const Weight& w, const float* x, const simd::XBlock* xq,
                          const kquant::XBlock* xk, const float* y, int n_tokens, int on_tiles,
                          const float* fp16) {
  const bool k_type = kquant::is_k_type(w.type);
  if (!quantizes_activations(w.type) && !k_type) return;
  const int64_t x_blocks = w.cols / kQK8_0;
  const int64_t k_blocks = w.cols / kQK_K;
  if (k_type) on_tiles = 0;
  for (int t = 0; t < n_tokens; ++t) {
    const Activations a = {x + t * w.cols, k_type ? nullptr : xq + t * x_blocks,
                           k_type ? xk + t * k_blocks : nullptr};
    const char* path = t < on_tiles ? "amx" : simd::kPathName;
    for (int64_t r = 0; r < w.rows; ++r) {
      const float expected = dot_row_scalar(w, r, a, fp16);
      const float got = y[t * w.rows + r];
      check(std::memcmp(&expected, &got, sizeof(float)) == 0, w.name, ": ", path, " kernel gives ",
            got, " for row ", r, " of token ", t, ", the scalar one ", expected);
    }
  }
}

void linear_parts(const LinearPart* parts, size_t n_parts, const float* x, int n_tokens,
                  bool stacked, MatmulScratch& scratch);

/// The size of w's packed copy: 0 bytes where the kernels read w as the file has it.
struct PackedSize {
  size_t bytes = 0;
  size_t group_bytes = 0;  ///< one group of 16 rows
};

PackedSize packed_size(const Weight& w) {
  if (kquant::packs(w.type)) {  // kquants.h's layout, in groups of 16 rows
    const int64_t n_groups = (w.rows + kquant::kPackedRows - 1) / kquant::kPackedRows;
    const size_t group_bytes = (w.cols / kQK_K) * kquant::packed_block_bytes(w.type);
    return {n_groups * group_bytes, group_bytes};
  }
  // The scalar kernels read the file's layout; only the SIMD ones gain from the reorder.
  if (!quantizes_activations(w.type) || ENGINE_SIMD == ENGINE_SIMD_NONE) return {};
  const int64_t n_blocks = w.cols / kQK8_0;
  const int64_t n_groups = (w.rows + simd::kTileRows - 1) / simd::kTileRows * simd::kGroupsPerTile;
  const size_t group_bytes =
      round_up(n_blocks * simd::kGroupRows * type_block_bytes(w.type), kCacheLine);
  return {n_groups * group_bytes, group_bytes};
}

/// w's rows in the kernels' layout into out (packed_size(w) bytes, zeroed: padding rows keep
/// zero scales and zero bytes).
void pack_into(const Weight& w, const PackedSize& size, unsigned char* out) {
  if (kquant::packs(w.type)) {
    const int64_t n_blocks = w.cols / kQK_K;
    const int64_t n_groups = static_cast<int64_t>(size.bytes / size.group_bytes);
#pragma omp parallel for schedule(static)
    for (int64_t g = 0; g < n_groups; ++g) {
      const int64_t r0 = g * kquant::kPackedRows;
      kquant::pack_group(w.type, static_cast<const unsigned char*>(w.row(r0)), w.row_bytes,
                         static_cast<int>(std::min<int64_t>(kquant::kPackedRows, w.rows - r0)),
                         n_blocks, out + g * size.group_bytes);
    }
    return;
  }
  // Group g, block b, slice s, row r: the row's qs bytes kBytesPerLane s .. (simd.h).
  const int64_t n_blocks = w.cols / kQK8_0;
  const size_t block_bytes = type_block_bytes(w.type);
  const size_t qs_bytes = block_bytes - sizeof(uint16_t);  // after the fp16 scale d
  const size_t quant_bytes = simd::kGroupRows * qs_bytes;  // a block's slices
  const int64_t n_groups = static_cast<int64_t>(size.bytes / size.group_bytes);
#pragma omp parallel for schedule(static)
  for (int64_t g = 0; g < n_groups; ++g) {
    unsigned char* quants = out + g * size.group_bytes;
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
}

}  // namespace

PackedWeight pack_weight(const Weight& w) {
  check_weight(w);
  const PackedSize size = packed_size(w);
  PackedWeight p{w, {}, size.group_bytes};
  if (size.bytes == 0) return p;
  p.data.assign(size.bytes, 0);
  pack_into(w, size, p.data.data());
  return p;
}

PackedBlock pack_weights(const std::vector<Weight>& ws) {
  PackedBlock block;
  std::vector<PackedSize> sizes;
  std::vector<size_t> offsets;  // each matrix from a cache line, as operator new would put it
  size_t total = 0;
  for (const Weight& w : ws) {
    check_weight(w);
    sizes.push_back(packed_size(w));
    offsets.push_back(total);
    total += round_up(sizes.back().bytes, kCacheLine);
  }
  block.bytes.assign(total, 0);
  for (size_t i = 0; i < ws.size(); ++i) {
    PackedWeight p{ws[i], {}, sizes[i].group_bytes};
    if (sizes[i].bytes > 0) {
      p.in_block = block.bytes.data() + offsets[i];
      pack_into(ws[i], sizes[i], block.bytes.data() + offsets[i]);
    }
    block.weights.push_back(std::move(p));
  }
  return block;
}

void linear(const Weight& w, const float* x, float* y, int n_tokens, MatmulScratch& scratch) {
  linear(pack_weight(w), x, y, n_tokens, scratch);
}

void linear(const PackedWeight& p, const float* x, float* y, int n_tokens, MatmulScratch& scratch) {
  linear({{p, y}}, x, n_tokens, scratch);
}

void linear(std::initializer_list<LinearPart> parts, const float* x, int n_tokens,
            MatmulScratch& scratch) {
  linear(parts.begin(), parts.size(), x, n_tokens, scratch);
}

void linear(const LinearPart* parts, size_t n_parts, const float* x, int n_tokens,
            MatmulScratch& scratch) {
  linear_parts(parts, n_parts, x, n_tokens, false, scratch);
}

void linear_stacked(const LinearPart* parts, size_t n_parts, const float* x, int n_tokens,
                    MatmulScratch& scratch) {
  linear_parts(parts, n_parts, x, n_tokens, true, scratch);
}

namespace {

/// linear() and linear_stacked(): with stacked, part j reads the j-th of n_parts inputs in x.
void linear_parts(const LinearPart* parts, size_t n_parts, const float* x, int n_tokens,
                  bool stacked, MatmulScratch& scratch) {
  // Up to 256 matrices: wkv_b's heads (128 in V2 and V3), or a token's experts.
  constexpr size_t kMaxParts = 256;
  check(n_parts > 0 && n_parts <= kMaxParts, "linear: ", n_parts,
        " matrices in one call, not 1 to ", kMaxParts);
  const std::span<const LinearPart> all(parts, n_parts);
  const int64_t cols = parts[0].w.source.cols;
  // W (d, n) @ x (n_tokens, n)^T -> y (n_tokens, d) in chunks of ~kChunkBytes of weights, which
  // stay in L2 (2 MB a core here) while every token tile passes over them.
  constexpr size_t kChunkBytes = 256 * 1024;
  // One token passes over a chunk once, so nothing needs to stay in L2: decode takes larger
  // chunks of whole pairs of tiles (simd::kDecodeTiles), which every matrix has (a 256 KB chunk
  // of the 7B's w_down is 32 rows, one tile).
  constexpr size_t kDecodeChunkBytes = 1024 * 1024;
  const bool decode = n_tokens == 1;
  const size_t chunk_bytes = decode ? kDecodeChunkBytes : kChunkBytes;
  // A chunk is whole units of rows: tiles, or in decode pairs of tiles.
  const int64_t chunk_unit = decode ? simd::kDecodeTiles * simd::kTileRows : simd::kTileRows;
  int64_t chunk_rows[kMaxParts];
  int64_t first_chunk[kMaxParts + 1] = {0};  // part i's chunks: first_chunk[i] .. [i + 1] - 1
  bool quantize = false;
  bool quantize_k = false;  // a K-quant part needs Q8_K activations
  int i = 0;
  for (const LinearPart& part : all) {
    const Weight& w = part.w.source;
    check_weight(w);
    check(w.cols == cols, w.name, ": ", w.cols, " columns, but the matrices fused with it have ",
          cols);
    quantize = quantize || quantizes_activations(w.type);
    quantize_k = quantize_k || kquant::is_k_type(w.type);
    chunk_rows[i] = std::max<int64_t>(
        chunk_unit, static_cast<int64_t>(chunk_bytes / w.row_bytes) / chunk_unit * chunk_unit);
    first_chunk[i + 1] = first_chunk[i] + (w.rows + chunk_rows[i] - 1) / chunk_rows[i];
    ++i;
  }
  const int64_t n_chunks = first_chunk[n_parts];
  const float* fp16 = fp16_table().value;
  // x is quantized once per call and shared by all threads (n_x_blocks blocks): a stacked call's
  // inputs one after the other.
  const int64_t n_inputs = stacked ? static_cast<int64_t>(n_parts) : 1;
  const int64_t n_x_blocks = quantize ? n_inputs * n_tokens * (cols / kQK8_0) : 0;
  // And the K-quants' super-blocks after them, in the same scratch.
  const int64_t n_k_blocks = quantize_k ? n_inputs * n_tokens * (cols / kQK_K) : 0;
  const size_t k_offset = n_x_blocks * sizeof(simd::XBlock);
  // And, on a CPU with AMX, the tokens of whole tiles of 16 once more, as the tiles load them
  // (of a single input: a stacked call's inputs take the AVX-512 kernels).
  const int n_tiled = quantize && !stacked ? simd::amx_tokens(n_tokens) : 0;
  const int64_t n_t_blocks = n_tiled * (cols / kQK8_0);
  const size_t t_offset = k_offset + n_k_blocks * sizeof(kquant::XBlock);
  scratch.x_quantized.resize(t_offset + n_t_blocks * sizeof(simd::TokenTileBlock));
  auto* xq = n_x_blocks > 0 ? reinterpret_cast<simd::XBlock*>(scratch.x_quantized.data()) : nullptr;
  auto* xk = n_k_blocks > 0
                 ? reinterpret_cast<kquant::XBlock*>(scratch.x_quantized.data() + k_offset)
                 : nullptr;
  auto* xt = n_t_blocks > 0
                 ? reinterpret_cast<simd::TokenTileBlock*>(scratch.x_quantized.data() + t_offset)
                 : nullptr;
  // Part j's input: the call's x, or (stacked) the j-th input, n_tokens rows after the last.
  auto input_of = [&](int64_t j) {
    const int64_t in = stacked ? j : 0;
    return Activations{x + in * n_tokens * cols,
                       xq == nullptr ? nullptr : xq + in * n_tokens * (cols / kQK8_0),
                       xk == nullptr ? nullptr : xk + in * n_tokens * (cols / kQK_K)};
  };
  // No thread waits for another. Both quantize x, a share of its blocks each (one
  // thread did all of it while the other spun); then each takes the next chunk of rows as soon
  // as it is done with one (dynamic schedule), so the two finish within one chunk of each other
  // (a fixed half each left one thread waiting at the end of every call).
  // One token's activations (128 to 344 blocks, a few microseconds; 256 for V2-Lite's 16 stacked
  // heads) are quantized by the calling thread before the others start: splitting them would cost
  // a barrier more than it saves.
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
        error.guard([&] {
          const int64_t end = std::min(n_x_blocks, b + kQuantizeStep);
          quantize_activations(x, b, end, xq);
          if (xt != nullptr) simd::tile_tokens(xq, b, end, cols / kQK8_0, n_tiled, xt);
        });
      }
#pragma omp for schedule(static)
      for (int64_t b = 0; b < n_k_blocks; ++b) {
        error.guard([&] { kquant::quantize(x + b * kQK_K, xk + b, 1); });
      }
    }
#pragma omp for schedule(dynamic, 1)
    for (int64_t c = 0; c < n_chunks; ++c) {
      error.guard([&] {
        const int part = static_cast<int>(
            std::upper_bound(first_chunk + 1, first_chunk + n_parts + 1, c) - (first_chunk + 1));
        const LinearPart& lp = parts[part];
        const int64_t r0 = (c - first_chunk[part]) * chunk_rows[part];
        const Activations a = input_of(part);
        dot_rows(lp.w, r0, std::min(chunk_rows[part], lp.w.source.rows - r0), a.x, a.xq, xt, a.xk,
                 n_tokens, lp.y + r0, fp16);
      });
    }
  }
  error.rethrow();
  if (kCheckAgainstScalar) {
    for (size_t j = 0; j < n_parts; ++j) {
      const Activations a = input_of(j);
      check_against_scalar(parts[j].w.source, a.x, a.xq, a.xk, parts[j].y, n_tokens, n_tiled, fp16);
    }
  }
}

}  // namespace

// Q4_0 and Q8_0 layers see x rounded to Q8_0 (8 bits per value, one scale per 32):
// each activation moves by up to half a step, amax / 254 of its block, and every logit inherits
// those moves through the layers. Measured against the fp64 reference (tests/test_engine.cpp):
// 1.57% of max |logit| for tiny-llama-q4_0, 1.44% for tiny-qwen2-q4_0; 0.05 leaves 3x room. F32
// and F16 weights keep fp32 x (F32 models stay ~4e-7 off): 1e-4 as before. The
// K-quants see x rounded to Q8_K (8 bits, one scale per 256).
double logit_tolerance(const Model& model) {
  constexpr double kFp32 = 1e-4;
  constexpr double kQ8Activations = 0.05;
  auto rounds_x = [](GGMLType t) { return quantizes_activations(t) || kquant::is_k_type(t); };
  bool any = rounds_x(model.output().type);
  for (const LayerWeights& l : model.layers()) {
    for (const Weight* w : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down, &l.wq_a,
                            &l.wq_b, &l.wkv_a, &l.wkv_b, &l.router, &l.gate_exps, &l.up_exps,
                            &l.down_exps, &l.gate_shexp, &l.up_shexp, &l.down_shexp})
      any = any || rounds_x(w->type);
  }
  return any ? kQ8Activations : kFp32;
}
