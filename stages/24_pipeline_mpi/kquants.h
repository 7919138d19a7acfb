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

}  // namespace kquant
