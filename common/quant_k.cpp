// quant_k.cpp: ggml's K-quants. A super-block of 256 weights is cut into sub-blocks of 16 (Q2_K,
// Q3_K, Q6_K) or 32 (Q4_K, Q5_K) weights; each sub-block has a small integer scale (and, for
// Q2_K/Q4_K/Q5_K, a min), and those integers are scaled by the super-block's fp16 d (and dmin):
//   w = d * scale * q - dmin * min      (Q2_K, Q4_K, Q5_K; q unsigned)
//   w = d * scale * q                   (Q3_K, Q6_K; q signed, stored with an offset)
//
// The quantizers follow ggml's quantize_row_*_ref step by step: fit each sub-block's scale (and
// min) by ggml's search, quantize those against the largest of the super-block, store d (and
// dmin) as fp16, then round every weight again with the values as stored. Sums run in float in
// index order, as ggml's do, and the file is compiled with -ffp-contract=off (see quant.cpp), so
// the bytes are ggml's.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "quant.h"

namespace {

using quant_detail::poison_if_non_finite;
using quant_detail::whole_blocks;

constexpr int kGroup16 = 16;  // weights per sub-block of Q2_K, Q3_K, Q6_K
constexpr int kGroup32 = 32;  // weights per sub-block of Q4_K, Q5_K
constexpr int kSubBlocks16 = kQK_K / kGroup16;
constexpr int kSubBlocks32 = kQK_K / kGroup32;
constexpr int kMaxGroup = kGroup32;     // the scale searches below take n <= 32 weights
constexpr float kGroupMaxEps = 1e-15f;  // ggml's GROUP_MAX_EPS: a group below it is all zeros

// ---- where weight i (0..255) of a super-block keeps its bits ----
//
// Q2_K/Q3_K: each half of 128 weights has 32 bytes of qs; weight 128h + 32j + l (l < 32) is bits
// 2j..2j+1 of byte 32h + l. Q3_K's third bit and Q5_K's fifth bit: bit i / 32 of hmask/qh[i % 32].
// Q4_K/Q5_K: each 64 weights have 32 bytes of qs; weight 64p + l is the low nibble of byte
// 32p + l for l < 32, the high nibble of byte 32p + l - 32 after.

/// Where a weight's bits sit: from bit `shift` of byte `byte` up.
struct BitField {
  int byte;
  int shift;
};

BitField two_bit_field(int i) {
  return {32 * (i / 128) + i % 32, 2 * ((i % 128) / 32)};
}
BitField nibble_field(int i) {
  return {32 * (i / 64) + i % 32, (i % 64) < 32 ? 0 : 4};
}
bool high_bit(const uint8_t* mask, int i) {
  return (mask[i % 32] >> (i / 32)) & 1;
}
void set_high_bit(uint8_t* mask, int i) {
  mask[i % 32] |= uint8_t(1u << (i / 32));
}
int read_field(const uint8_t* bytes, BitField f, int mask) {
  return (bytes[f.byte] >> f.shift) & mask;
}

/// Stores levels L[0..255] (0..3) into qs, two bits each.
void pack_two_bits(const uint8_t* L, uint8_t* qs) {
  std::memset(qs, 0, kQK_K / 4);
  for (int i = 0; i < kQK_K; ++i) {
    const BitField f = two_bit_field(i);
    qs[f.byte] |= uint8_t(L[i] << f.shift);
  }
}

/// Stores levels L[0..255] (0..15) into qs, a nibble each.
void pack_nibbles(const uint8_t* L, uint8_t* qs) {
  std::memset(qs, 0, kQK_K / 2);
  for (int i = 0; i < kQK_K; ++i) {
    const BitField f = nibble_field(i);
    qs[f.byte] |= uint8_t(L[i] << f.shift);
  }
}

// Q4_K/Q5_K: 8 6-bit scales and 8 6-bit mins in 12 bytes. Sub-blocks 0-3 take the low 6 bits of
// bytes 0-3 (scale) and 4-7 (min); sub-blocks 4-7 a nibble of bytes 8-11 (scale low, min high)
// and, as their top 2 bits, the top 2 bits of bytes 0-3 (scale) and 4-7 (min).
void scale_min_k4(const uint8_t* s, int j, int& scale, int& min) {
  if (j < 4) {
    scale = s[j] & 63;
    min = s[j + 4] & 63;
  } else {
    scale = (s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4);
    min = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

/// The inverse of scale_min_k4, into bytes s that start zeroed.
void set_scale_min_k4(uint8_t* s, int j, int scale, int min) {
  if (j < 4) {
    s[j] |= uint8_t(scale);
    s[j + 4] |= uint8_t(min);
  } else {
    s[j + 4] = uint8_t((scale & 0x0F) | ((min & 0x0F) << 4));
    s[j - 4] |= uint8_t((scale >> 4) << 6);
    s[j] |= uint8_t((min >> 4) << 6);
  }
}

// Q3_K: 16 6-bit scales in 12 bytes, stored + 32. Low 4 bits: bytes 0-7 (low nibble for scales
// 0-7, high nibble for 8-15); top 2 bits: bits 2(j/4)..2(j/4)+1 of byte 8 + j%4.
constexpr int kQ3ScaleOffset = 32;

int q3_scale(const uint8_t* s, int j) {
  const int low = j < 8 ? s[j] & 0x0F : s[j - 8] >> 4;
  const int high = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
  return (low | (high << 4)) - kQ3ScaleOffset;
}

/// The inverse of q3_scale for stored = scale + 32 (0..63), into bytes s that start zeroed.
void set_q3_scale(uint8_t* s, int j, int stored) {
  if (j < 8) {
    s[j] |= uint8_t(stored & 0x0F);
  } else {
    s[j - 8] |= uint8_t((stored & 0x0F) << 4);
  }
  s[8 + j % 4] |= uint8_t((stored >> 4) << (2 * (j / 4)));
}

// Q6_K: each 6-bit weight is 4 low bits from ql and 2 high bits from qh, minus 32. A super-block
// is two halves of 128 weights; within a half, weight l + 32q (l < 32, quarter q < 4) takes
// ql[l + 32 (q & 1)] (low nibble for q < 2, high nibble after) and bits 2q..2q+1 of qh[l]: the
// high bits sit where Q2_K keeps its 2-bit fields.
BitField q6_low_field(int i) {
  return {64 * (i / 128) + 32 * ((i % 128 / 32) & 1) + i % 32, (i % 128) < 64 ? 0 : 4};
}
constexpr int kQ6Offset = 32;  // 6-bit values 0..63 stand for -32..31

}  // namespace

// ---- dequantizers, in ggml's element order (weight 0 to 255) ----

void quant_detail::dequantize_q2_k(const void* src, float* y, int64_t n) {
  const BlockQ2_K* blocks = static_cast<const BlockQ2_K*>(src);
  const int64_t nb = whole_blocks(n, kQK_K, "q2_K");
  for (int64_t b = 0; b < nb; ++b) {
    const BlockQ2_K& x = blocks[b];
    const float d = fp16_to_fp32(x.d), dmin = fp16_to_fp32(x.dmin);
    for (int g = 0; g < kSubBlocks16; ++g, y += kGroup16) {
      const float dl = d * float(x.scales[g] & 0x0F), ml = dmin * float(x.scales[g] >> 4);
      for (int l = 0, i = kGroup16 * g; l < kGroup16; ++l, ++i) {
        y[l] = dl * float(read_field(x.qs, two_bit_field(i), 3)) - ml;
      }
    }
  }
}

void quant_detail::dequantize_q3_k(const void* src, float* y, int64_t n) {
  constexpr int kOffset = 4;  // 3-bit values 0..7 stand for -4..3: hmask's bit adds the 4
  const BlockQ3_K* blocks = static_cast<const BlockQ3_K*>(src);
  const int64_t nb = whole_blocks(n, kQK_K, "q3_K");
  for (int64_t b = 0; b < nb; ++b) {
    const BlockQ3_K& x = blocks[b];
    const float d = fp16_to_fp32(x.d);
    for (int g = 0; g < kSubBlocks16; ++g, y += kGroup16) {
      const float dl = d * float(q3_scale(x.scales, g));
      for (int l = 0, i = kGroup16 * g; l < kGroup16; ++l, ++i) {
        const int low = read_field(x.qs, two_bit_field(i), 3);
        y[l] = dl * float(low - (high_bit(x.hmask, i) ? 0 : kOffset));
      }
    }
  }
}

namespace {

/// Q4_K (kFifth = false) and Q5_K (kFifth: qh adds 16).
template <class Block, bool kFifth>
void dequantize_q45_k(const void* src, float* y, int64_t n, const char* name) {
  constexpr int kFifthBit = 16;
  const Block* blocks = static_cast<const Block*>(src);
  const int64_t nb = whole_blocks(n, kQK_K, name);
  for (int64_t b = 0; b < nb; ++b) {
    const Block& x = blocks[b];
    const float d = fp16_to_fp32(x.d), dmin = fp16_to_fp32(x.dmin);
    for (int g = 0; g < kSubBlocks32; ++g, y += kGroup32) {
      int scale, min;
      scale_min_k4(x.scales, g, scale, min);
      const float dl = d * float(scale), ml = dmin * float(min);
      for (int l = 0, i = kGroup32 * g; l < kGroup32; ++l, ++i) {
        int q = read_field(x.qs, nibble_field(i), 0x0F);
        if constexpr (kFifth) q += high_bit(x.qh, i) ? kFifthBit : 0;
        y[l] = dl * float(q) - ml;
      }
    }
  }
}

}  // namespace

void quant_detail::dequantize_q4_k(const void* src, float* y, int64_t n) {
  dequantize_q45_k<BlockQ4_K, false>(src, y, n, "q4_K");
}

void quant_detail::dequantize_q5_k(const void* src, float* y, int64_t n) {
  dequantize_q45_k<BlockQ5_K, true>(src, y, n, "q5_K");
}

void quant_detail::dequantize_q6_k(const void* src, float* y, int64_t n) {
  const BlockQ6_K* blocks = static_cast<const BlockQ6_K*>(src);
  const int64_t nb = whole_blocks(n, kQK_K, "q6_K");
  for (int64_t b = 0; b < nb; ++b) {
    const BlockQ6_K& x = blocks[b];
    const float d = fp16_to_fp32(x.d);
    for (int g = 0; g < kSubBlocks16; ++g, y += kGroup16) {
      const float dl = d * float(x.scales[g]);
      for (int l = 0, i = kGroup16 * g; l < kGroup16; ++l, ++i) {
        const int low = read_field(x.ql, q6_low_field(i), 0x0F);
        const int high = read_field(x.qh, two_bit_field(i), 3);
        y[l] = dl * float((low | (high << 4)) - kQ6Offset);
      }
    }
  }
}

// ---- ggml's scale searches ----

namespace {

/// ggml's nearest_int: round to nearest, ties to even, for |f| < 2^22. Adding 1.5 * 2^23 puts the
/// integer in the low mantissa bits (the float's spacing there is exactly 1). A larger f (or NaN)
/// gives a meaningless level, as in ggml, but no float-to-int conversion (undefined if out of
/// range) ever happens.
int nearest_int(float f) {
  constexpr float kMagic = 12582912.0f;  // 1.5 * 2^23
  constexpr int32_t kMantissa = 0x007fffff;
  constexpr int32_t kMagicMantissa = 0x00400000;  // the 0.5 * 2^23 part of kMagic
  return (std::bit_cast<int32_t>(f + kMagic) & kMantissa) - kMagicMantissa;
}

int clamp_level(int l, int lo, int hi) {
  return std::max(lo, std::min(hi, l));
}

/// The element of largest magnitude, with its sign (the first one on a tie).
float signed_absmax(const float* x, int n) {
  float amax = 0.0f;
  float max = 0.0f;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  return max;
}

/// Levels l = round(iscale * x) clamped to -nmax..nmax-1, stored + nmax in L; sums, weighted by
/// x^2, of x l (sumlx) and l^2 (suml2): the least-squares scale is sumlx / suml2.
void symmetric_levels(int n, int nmax, const float* x, float iscale, uint8_t* L, float& sumlx,
                      float& suml2) {
  sumlx = 0.0f;
  suml2 = 0.0f;
  for (int i = 0; i < n; ++i) {
    const int l = clamp_level(nearest_int(iscale * x[i]), -nmax, nmax - 1);
    L[i] = uint8_t(l + nmax);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * float(l);
    suml2 += w * float(l) * float(l);
  }
}

/// ggml's make_qx_quants as Q6_K uses it (rmse_type 1: error weighted by x^2). Maps the signed
/// extreme to -nmax, then tries 18 more scales around it, -(nmax + 0.1 k) / max for k = -9..9,
/// keeping the levels of least weighted error. Returns the scale; L gets levels + nmax.
float make_qx_quants(int n, int nmax, const float* x, uint8_t* L) {
  constexpr int kSteps = 9;
  constexpr float kStep = 0.1f;
  const float max = signed_absmax(x, n);
  if (std::fabs(max) < kGroupMaxEps) {
    std::memset(L, 0, size_t(n));
    return 0.0f;
  }
  float sumlx, suml2;
  symmetric_levels(n, nmax, x, float(-nmax) / max, L, sumlx, suml2);
  float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  uint8_t trial[kMaxGroup];
  for (int k = -kSteps; k <= kSteps; ++k) {
    if (k == 0) continue;
    const float iscale = -(float(nmax) + kStep * float(k)) / max;
    symmetric_levels(n, nmax, x, iscale, trial, sumlx, suml2);
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {  // sumlx^2 / suml2 is the error removed
      std::memcpy(L, trial, size_t(n));
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

/// ggml's make_q3_quants with its error search on (as Q3_K uses it): levels -nmax..nmax-1 from
/// the signed extreme, then up to 5 sweeps that move single levels to where the x^2-weighted
/// least-squares fit wants them, keeping each move that improves sumlx^2 / suml2. Returns the
/// scale; L gets levels + nmax.
float make_q3_quants(int n, int nmax, const float* x, uint8_t* L) {
  constexpr int kMaxSweeps = 5;
  const float max = signed_absmax(x, n);
  if (std::fabs(max) < kGroupMaxEps) {
    std::memset(L, 0, size_t(n));
    return 0.0f;
  }
  const float iscale = float(-nmax) / max;
  int level[kMaxGroup];
  float sumlx = 0.0f;
  float suml2 = 0.0f;
  for (int i = 0; i < n; ++i) {
    level[i] = clamp_level(nearest_int(iscale * x[i]), -nmax, nmax - 1);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * float(level[i]);
    suml2 += w * float(level[i]) * float(level[i]);
  }
  for (int sweep = 0; sweep < kMaxSweeps; ++sweep) {
    int changed = 0;
    for (int i = 0; i < n; ++i) {
      const float w = x[i] * x[i];
      float slx = sumlx - w * x[i] * float(level[i]);  // the sums without weight i
      if (!(slx > 0)) continue;
      float sl2 = suml2 - w * float(level[i]) * float(level[i]);
      const int l = clamp_level(nearest_int(x[i] * sl2 / slx), -nmax, nmax - 1);
      if (l == level[i]) continue;
      slx += w * x[i] * float(l);
      sl2 += w * float(l) * float(l);
      if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
        level[i] = l;
        sumlx = slx;
        suml2 = sl2;
        ++changed;
      }
    }
    if (changed == 0) break;
  }
  for (int i = 0; i < n; ++i) L[i] = uint8_t(level[i] + nmax);
  return sumlx / suml2;
}

/// ggml's make_qkx2_quants parameters: the scales tried are (nmax + rmin + rdelta k) / range for
/// k = 0..nstep; use_mad weighs absolute instead of squared errors.
struct ScaleSearch {
  float rmin;
  float rdelta;
  int nstep;
  bool use_mad;
};
constexpr ScaleSearch kQ2Search{-0.5f, 0.1f, 15, true};
constexpr ScaleSearch kQ4Search{-1.0f, 0.1f, 20, false};
constexpr ScaleSearch kQ5Search{-0.5f, 0.1f, 15, false};

inline float error_term(float diff, bool use_mad) {
  return use_mad ? std::fabs(diff) : diff * diff;
}

/// ggml's make_qkx2_quants: x ~ scale * L + min with L in 0..nmax and min <= 0. Starts from the
/// full range, then for each trial scale rounds the levels and solves the weighted least squares
/// for (scale, min) in closed form, keeping the fit of least weighted error. Returns the scale;
/// the_min gets -min (>= 0).
float make_qkx2_quants(int n, int nmax, const float* x, const float* weights, uint8_t* L,
                       float& the_min, const ScaleSearch& search) {
  float min = x[0];
  float max = x[0];
  float sum_w = weights[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    sum_w += weights[i];
    sum_x += weights[i] * x[i];
  }
  if (min > 0) min = 0;
  if (max == min) {
    std::memset(L, 0, size_t(n));
    the_min = -min;
    return 0.0f;
  }
  float iscale = float(nmax) / (max - min);
  float scale = 1 / iscale;
  float best_error = 0;
  for (int i = 0; i < n; ++i) {
    L[i] = uint8_t(clamp_level(nearest_int(iscale * (x[i] - min)), 0, nmax));
    best_error += weights[i] * error_term(scale * float(L[i]) + min - x[i], search.use_mad);
  }
  uint8_t trial[kMaxGroup];
  for (int k = 0; k <= search.nstep; ++k) {
    iscale = (search.rmin + search.rdelta * float(k) + float(nmax)) / (max - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      const int l = clamp_level(nearest_int(iscale * (x[i] - min)), 0, nmax);
      trial[i] = uint8_t(l);
      const float w = weights[i];
      sum_l += w * float(l);
      sum_l2 += w * float(l) * float(l);
      sum_xl += w * float(l) * x[i];
    }
    const float det = sum_w * sum_l2 - sum_l * sum_l;
    if (!(det > 0)) continue;
    float this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
    float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
    if (this_min > 0) {  // a positive min is not allowed: refit the scale alone
      this_min = 0;
      this_scale = sum_xl / sum_l2;
    }
    float error = 0;
    for (int i = 0; i < n; ++i) {
      error +=
          weights[i] * error_term(this_scale * float(trial[i]) + this_min - x[i], search.use_mad);
    }
    if (error < best_error) {
      std::memcpy(L, trial, size_t(n));
      best_error = error;
      scale = this_scale;
      min = this_min;
    }
  }
  the_min = -min;
  return scale;
}

/// The re-rounding every K-quantizer does with its stored scales: L = clamp(round((x + dm) / d),
/// lo, hi) + offset. A zero d leaves L as the search left it, as in ggml. (For the symmetric
/// types dm is 0, and x + 0 rounds the same as x.)
void round_with(const float* x, int n, float d, float dm, int lo, int hi, int offset, uint8_t* L) {
  if (d == 0.0f) return;
  for (int i = 0; i < n; ++i) {
    L[i] = uint8_t(clamp_level(nearest_int((x[i] + dm) / d), lo, hi) + offset);
  }
}

}  // namespace

// ---- the quantizers ----

void quant_detail::quantize_q2_k(const float* src, void* dst, int64_t n) {
  constexpr int kNmax = 3;               // 2-bit levels 0..3
  constexpr float kScaleLevels = 15.0f;  // scales and mins are 4-bit
  BlockQ2_K* blocks = static_cast<BlockQ2_K*>(dst);
  const int64_t nb = whole_blocks(n, kQK_K, "q2_K");
  for (int64_t b = 0; b < nb; ++b) {
    const float* x = src + b * kQK_K;
    BlockQ2_K& y = blocks[b];
    if (poison_if_non_finite(x, kQK_K, y)) continue;
    uint8_t L[kQK_K];
    float scales[kSubBlocks16], mins[kSubBlocks16], weights[kGroup16];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < kSubBlocks16; ++j) {
      const float* xj = x + kGroup16 * j;
      for (int l = 0; l < kGroup16; ++l) weights[l] = std::fabs(xj[l]);
      scales[j] =
          make_qkx2_quants(kGroup16, kNmax, xj, weights, L + kGroup16 * j, mins[j], kQ2Search);
      max_scale = std::max(max_scale, scales[j]);
      max_min = std::max(max_min, mins[j]);
    }
    // Each sub-block's scale and min as 4 bits against the largest (both are >= 0).
    std::memset(y.scales, 0, sizeof y.scales);
    y.d = fp32_to_fp16(0.0f);
    y.dmin = fp32_to_fp16(0.0f);
    if (max_scale > 0) {
      const float iscale = kScaleLevels / max_scale;
      for (int j = 0; j < kSubBlocks16; ++j) y.scales[j] = uint8_t(nearest_int(iscale * scales[j]));
      y.d = fp32_to_fp16(max_scale / kScaleLevels);
    }
    if (max_min > 0) {
      const float iscale = kScaleLevels / max_min;
      for (int j = 0; j < kSubBlocks16; ++j) {
        y.scales[j] |= uint8_t(uint32_t(nearest_int(iscale * mins[j])) << 4);
      }
      y.dmin = fp32_to_fp16(max_min / kScaleLevels);
    }
    const float d = fp16_to_fp32(y.d), dmin = fp16_to_fp32(y.dmin);
    for (int j = 0; j < kSubBlocks16; ++j) {
      round_with(x + kGroup16 * j, kGroup16, d * float(y.scales[j] & 0x0F),
                 dmin * float(y.scales[j] >> 4), 0, kNmax, 0, L + kGroup16 * j);
    }
    pack_two_bits(L, y.qs);
  }
}

void quant_detail::quantize_q3_k(const float* src, void* dst, int64_t n) {
  constexpr int kNmax = 4;       // 3-bit levels -4..3
  constexpr int kScaleMax = 32;  // scales are 6-bit signed: -32..31
  constexpr int kHighLevel = 4;  // a stored level >= 4 keeps its 4 in hmask
  BlockQ3_K* blocks = static_cast<BlockQ3_K*>(dst);
  const int64_t nb = whole_blocks(n, kQK_K, "q3_K");
  for (int64_t b = 0; b < nb; ++b) {
    const float* x = src + b * kQK_K;
    BlockQ3_K& y = blocks[b];
    if (poison_if_non_finite(x, kQK_K, y)) continue;
    uint8_t L[kQK_K];
    float scales[kSubBlocks16];
    float max_scale = 0, amax = 0;  // the scale of largest magnitude, with its sign
    for (int j = 0; j < kSubBlocks16; ++j) {
      scales[j] = make_q3_quants(kGroup16, kNmax, x + kGroup16 * j, L + kGroup16 * j);
      if (std::fabs(scales[j]) > amax) {
        amax = std::fabs(scales[j]);
        max_scale = scales[j];
      }
    }
    std::memset(y.scales, 0, sizeof y.scales);
    y.d = fp32_to_fp16(0.0f);
    if (max_scale != 0) {
      const float iscale = float(-kScaleMax) / max_scale;  // the extreme scale maps to -32
      for (int j = 0; j < kSubBlocks16; ++j) {
        const int8_t l = int8_t(nearest_int(iscale * scales[j]));
        set_q3_scale(y.scales, j, clamp_level(l, -kScaleMax, kScaleMax - 1) + kQ3ScaleOffset);
      }
      y.d = fp32_to_fp16(1 / iscale);
    }
    const float d = fp16_to_fp32(y.d);
    for (int j = 0; j < kSubBlocks16; ++j) {
      round_with(x + kGroup16 * j, kGroup16, d * float(q3_scale(y.scales, j)), 0.0f, -kNmax,
                 kNmax - 1, kNmax, L + kGroup16 * j);
    }
    std::memset(y.hmask, 0, sizeof y.hmask);
    for (int i = 0; i < kQK_K; ++i) {
      if (L[i] >= kHighLevel) {
        set_high_bit(y.hmask, i);
        L[i] -= kHighLevel;
      }
    }
    pack_two_bits(L, y.qs);
  }
}

namespace {

/// Q4_K and Q5_K up to their levels: fit each 32-weight sub-block (weights: the sub-block's RMS
/// plus |x|), quantize the scales and mins to 6 bits against the largest, store d and dmin, then
/// round every weight again with the stored values. L gets levels 0..nmax.
template <class Block>
void quantize_q45_k_levels(const float* x, int nmax, const ScaleSearch& search, Block& y,
                           uint8_t* L) {
  constexpr float kScaleLevels = 63.0f;  // scales and mins are 6-bit
  constexpr int kScaleMax = 63;
  float scales[kSubBlocks32], mins[kSubBlocks32], weights[kGroup32];
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < kSubBlocks32; ++j) {
    const float* xj = x + kGroup32 * j;
    float sum_x2 = 0;
    for (int l = 0; l < kGroup32; ++l) sum_x2 += xj[l] * xj[l];
    const float av_x = std::sqrt(sum_x2 / float(kGroup32));
    for (int l = 0; l < kGroup32; ++l) weights[l] = av_x + std::fabs(xj[l]);
    scales[j] = make_qkx2_quants(kGroup32, nmax, xj, weights, L + kGroup32 * j, mins[j], search);
    max_scale = std::max(max_scale, scales[j]);
    max_min = std::max(max_min, mins[j]);
  }
  const float inv_scale = max_scale > 0 ? kScaleLevels / max_scale : 0.0f;
  const float inv_min = max_min > 0 ? kScaleLevels / max_min : 0.0f;
  std::memset(y.scales, 0, sizeof y.scales);
  for (int j = 0; j < kSubBlocks32; ++j) {
    // As ggml: wrapped to 8 bits first, then capped at 63.
    const uint8_t ls = uint8_t(nearest_int(inv_scale * scales[j]));
    const uint8_t lm = uint8_t(nearest_int(inv_min * mins[j]));
    set_scale_min_k4(y.scales, j, std::min<int>(kScaleMax, ls), std::min<int>(kScaleMax, lm));
  }
  y.d = fp32_to_fp16(max_scale / kScaleLevels);
  y.dmin = fp32_to_fp16(max_min / kScaleLevels);
  const float d = fp16_to_fp32(y.d), dmin = fp16_to_fp32(y.dmin);
  for (int j = 0; j < kSubBlocks32; ++j) {
    int scale, min;
    scale_min_k4(y.scales, j, scale, min);
    round_with(x + kGroup32 * j, kGroup32, d * float(scale), dmin * float(min), 0, nmax, 0,
               L + kGroup32 * j);
  }
}

}  // namespace

void quant_detail::quantize_q4_k(const float* src, void* dst, int64_t n) {
  constexpr int kNmax = 15;  // 4-bit levels
  BlockQ4_K* blocks = static_cast<BlockQ4_K*>(dst);
  const int64_t nb = whole_blocks(n, kQK_K, "q4_K");
  for (int64_t b = 0; b < nb; ++b) {
    const float* x = src + b * kQK_K;
    if (poison_if_non_finite(x, kQK_K, blocks[b])) continue;
    uint8_t L[kQK_K];
    quantize_q45_k_levels(x, kNmax, kQ4Search, blocks[b], L);
    pack_nibbles(L, blocks[b].qs);
  }
}

void quant_detail::quantize_q5_k(const float* src, void* dst, int64_t n) {
  constexpr int kNmax = 31;       // 5-bit levels
  constexpr int kHighLevel = 16;  // a level >= 16 keeps its 16 in qh
  BlockQ5_K* blocks = static_cast<BlockQ5_K*>(dst);
  const int64_t nb = whole_blocks(n, kQK_K, "q5_K");
  for (int64_t b = 0; b < nb; ++b) {
    const float* x = src + b * kQK_K;
    BlockQ5_K& y = blocks[b];
    if (poison_if_non_finite(x, kQK_K, y)) continue;
    uint8_t L[kQK_K];
    quantize_q45_k_levels(x, kNmax, kQ5Search, y, L);
    std::memset(y.qh, 0, sizeof y.qh);
    for (int i = 0; i < kQK_K; ++i) {
      if (L[i] >= kHighLevel) {
        set_high_bit(y.qh, i);
        L[i] -= kHighLevel;
      }
    }
    pack_nibbles(L, y.qs);
  }
}

void quant_detail::quantize_q6_k(const float* src, void* dst, int64_t n) {
  constexpr int kNmax = 32;       // 6-bit levels -32..31
  constexpr int kScaleMax = 127;  // scales are int8; the extreme maps to -128
  constexpr float kScaleLevels = -128.0f;
  BlockQ6_K* blocks = static_cast<BlockQ6_K*>(dst);
  const int64_t nb = whole_blocks(n, kQK_K, "q6_K");
  for (int64_t b = 0; b < nb; ++b) {
    const float* x = src + b * kQK_K;
    BlockQ6_K& y = blocks[b];
    if (poison_if_non_finite(x, kQK_K, y)) continue;
    uint8_t L[kQK_K];
    float scales[kSubBlocks16];
    float max_scale = 0, max_abs_scale = 0;  // the scale of largest magnitude, with its sign
    for (int j = 0; j < kSubBlocks16; ++j) {
      scales[j] = make_qx_quants(kGroup16, kNmax, x + kGroup16 * j, L + kGroup16 * j);
      if (std::fabs(scales[j]) > max_abs_scale) {
        max_abs_scale = std::fabs(scales[j]);
        max_scale = scales[j];
      }
    }
    y = BlockQ6_K{};
    if (max_abs_scale < kGroupMaxEps) continue;  // all zeros, d = 0
    const float iscale = kScaleLevels / max_scale;
    y.d = fp32_to_fp16(1 / iscale);
    for (int j = 0; j < kSubBlocks16; ++j) {
      y.scales[j] = int8_t(std::min(kScaleMax, nearest_int(iscale * scales[j])));
    }
    const float d = fp16_to_fp32(y.d);
    for (int j = 0; j < kSubBlocks16; ++j) {
      round_with(x + kGroup16 * j, kGroup16, d * float(y.scales[j]), 0.0f, -kNmax, kNmax - 1, kNmax,
                 L + kGroup16 * j);
    }
    for (int i = 0; i < kQK_K; ++i) {
      const BitField low = q6_low_field(i), high = two_bit_field(i);
      y.ql[low.byte] |= uint8_t((L[i] & 0x0F) << low.shift);
      y.qh[high.byte] |= uint8_t((L[i] >> 4) << high.shift);
    }
  }
}

// Q8_K (activations): the signed extreme maps to -127, q = round(x * -127 / max).
void quantize_row_q8_k(const float* src, BlockQ8_K* dst, int64_t n) {
  constexpr float kLevels = -127.0f;
  constexpr int kMaxLevel = 127;
  const int64_t nb = whole_blocks(n, kQK_K, "q8_K");
  for (int64_t b = 0; b < nb; ++b) {
    const float* x = src + b * kQK_K;
    BlockQ8_K& y = dst[b];
    y = BlockQ8_K{};
    if (quant_detail::has_non_finite(x, kQK_K)) {  // see poison_if_non_finite; d is a float here
      y.d = std::numeric_limits<float>::quiet_NaN();
      continue;
    }
    const float max = signed_absmax(x, kQK_K);
    if (max == 0) continue;  // all zeros: d = 0
    const float iscale = kLevels / max;
    for (int i = 0; i < kQK_K; ++i)
      y.qs[i] = int8_t(std::min(kMaxLevel, nearest_int(iscale * x[i])));
    for (int g = 0; g < kSubBlocks16; ++g) {
      int sum = 0;
      for (int i = kGroup16 * g; i < kGroup16 * (g + 1); ++i) sum += y.qs[i];
      y.bsums[g] = int16_t(sum);
    }
    y.d = 1 / iscale;
  }
}
