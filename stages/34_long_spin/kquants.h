// kquants.h: the K-quants (Q2_K to Q6_K) computed in integers, as llama.cpp does.
//
// A K-quant keeps 256 weights in a super-block: 8 or 16 sub-blocks, each with a small integer
// scale (Q2_K, Q4_K, Q5_K: and an integer min), times one or two fp16 super-block scales
// (quant.h draws the layouts). The activations are quantized once per call into matching
// super-blocks of 256 int8 values with one float scale (ggml's Q8_K), plus the sum of each group
// of 16. A super-block's dot product is then integer work, summed exactly in int32:
//   sum_i w_i x_i = d_w d_x sum_s sc_s (sum_{i in s} q_i x_i) - dmin_w d_x sum_s m_s (sum_{i in s}
//   x_i)
// the second sum from the stored group sums, and two float multiply-adds per super-block.
//
// Bits per weight: Q2_K 2.625, Q3_K 3.4375, Q4_K 4.5, Q5_K 5.5, Q6_K 6.5625 (Q4_0: 4.5).
#pragma once

#include <cstdint>

#include "quant.h"

namespace kquant {

constexpr int kGroup = 16;  ///< activations per stored sum (the smallest sub-block, Q6_K's)

/// 256 activations as int8 (|q| <= 127) with their scale: x_i ~ d * qs[i]; bsums[g] is the sum
/// of qs[16g .. 16g + 15].
struct XBlock {
  float d;
  int16_t bsums[kQK_K / kGroup];
  int8_t qs[kQK_K];
};

/// True for Q2_K, Q3_K, Q4_K, Q5_K, Q6_K.
bool is_k_type(GGMLType type);

/// x (n_blocks * 256,) -> n_blocks XBlocks. A super-block with a NaN or infinity gets scale NaN.
void quantize(const float* x, XBlock* out, int64_t n_blocks);

/// One row of n_blocks super-blocks of a K type . x: the SIMD kernel where this build has one,
/// else dot_scalar(). Both give the same bits (the integer sums are exact, the float steps equal).
float dot(GGMLType type, const void* row, const XBlock* x, int64_t n_blocks);

/// The portable reference.
float dot_scalar(GGMLType type, const void* row, const XBlock* x, int64_t n_blocks);

// ---- Q4_K, Q5_K and Q6_K matrices repacked at load (AVX-512 VNNI builds) ----
//
// As simd.h's layout does for Q4_0, rows go in groups of kPackedRows = 16, one per int32 lane of
// a 512-bit register, so one vpdpbusd with 4 activations broadcast adds 4 products to 16 rows'
// sums, and no sum is ever horizontal. A group stores its super-blocks one after another, each
// as (64-byte slices: bytes 4v .. 4v + 3 of row 0's field, then row 1's, .. row 15's):
//   Q4_K  qs: slice 8j + v = qs bytes 32j + 4v ..: low nibbles are weights 64j + 4v .. (sub-block
//         2j), high nibbles 64j + 32 + 4v .. (sub-block 2j + 1)               2048 bytes
//   Q5_K  the same, then qh: slice v = qh bytes 4v .. (bit 2j / 2j + 1: the fifth bit of the
//         low / high nibble of chunk j)                                          + 512
//   Q4_K, Q5_K  sub-block scales, unpacked: 8 x 16 bytes, [sub-block][row]      + 128
//         mins, unpacked: 4 x 32 bytes, [pair k][row][2]: the mins of sub-blocks 2k, 2k + 1
//         d, then dmin: 16 fp16 each                                            + 128 + 64
//   Q6_K  for each half n and v = 0..7: slices ql 64n + 4v, ql 64n + 32 + 4v, qh 32n + 4v
//         (3072 bytes); scales: 16 x 16 int8, [group of 16][row] (256); d: 16 fp16 (64)
// The 6-bit scales and mins are unpacked once here instead of once per row and token: 2368 bytes
// for 16 x 144 of the file's Q4_K (+2.8%).
constexpr int kPackedRows = 16;

/// True where this build computes type from the packed layout.
bool packs(GGMLType type);
/// Bytes of one super-block of a group of kPackedRows rows in the packed layout.
size_t packed_block_bytes(GGMLType type);
/// Rows first .. first + n_rows - 1 (n_rows <= 16, row_bytes apart) -> one group of n_blocks
/// super-blocks at out (zeroed beforehand: missing rows stay zero).
void pack_group(GGMLType type, const unsigned char* first, size_t row_bytes, int n_rows,
                int64_t n_blocks, unsigned char* out);
/// y[t * y_stride + i] = row row0 + i of the packed matrix . token t's x, for i < n_rows and
/// t < n_tokens, row0 a multiple of 16; x holds n_tokens x n_blocks super-blocks. The same bits
/// as dot_scalar().
void dot_packed(GGMLType type, const unsigned char* packed, size_t group_bytes, int64_t row0,
                int64_t n_rows, const XBlock* x, int64_t n_blocks, int n_tokens, float* y,
                int64_t y_stride);

}  // namespace kquant
