// quant.cpp: IEEE half and bfloat16 conversion, ggml's 32-weight block formats (Q4_0, Q4_1, Q5_0,
// Q5_1, Q8_0) and the type table. The K-quants are in quant_k.cpp. Written for reading rather
// than speed; stages with faster kernels check themselves against these.
//
// The quantizers mirror ggml's quantize_row_*_ref float operation for operation, so they write the
// bytes ggml writes. The Makefile compiles this file with -ffp-contract=off: an a*b+c fused into
// one FMA (which -march=native allows) rounds once instead of twice and would change them.
#include "quant.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "error.h"

// ---- IEEE half precision: 1 sign bit, 5 exponent bits (bias 15), 10 mantissa bits ----

namespace {

constexpr uint32_t kF32ExpBias = 127;
constexpr uint32_t kF16ExpBias = 15;
constexpr uint32_t kF16ExpMax = 31;      // all-ones exponent: inf or nan
constexpr int kMantissaShift = 23 - 10;  // f32 mantissa bits - f16 mantissa bits
constexpr uint32_t kF16Infinity = 0x7c00;
constexpr uint32_t kF16QuietBit = 0x0200;  // top mantissa bit: keeps a nan a nan
constexpr uint32_t kF32Infinity = 0x7f800000;
constexpr uint32_t kF32SmallestF16Normal = 0x38800000;  // 2^-14
constexpr uint32_t kF32F16Overflow = 0x477ff000;        // 65520: halfway past 65504, ties to inf
constexpr uint32_t kF32ImplicitOne = 0x00800000;
constexpr int kF16SubnormalExponent = -24;  // a subnormal half is mantissa * 2^-24

// value >> shift, rounded to nearest with ties to even (shift >= 1).
uint32_t shift_round_even(uint32_t value, int shift) {
  const uint32_t kept = value >> shift;
  const uint32_t rest = value & ((1u << shift) - 1);
  const uint32_t half = 1u << (shift - 1);
  return kept + ((rest > half || (rest == half && (kept & 1))) ? 1 : 0);
}

}  // namespace

float fp16_to_fp32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & kF16ExpMax;
  const uint32_t mant = h & 0x3ff;
  if (exp == kF16ExpMax) {
    return std::bit_cast<float>(sign | kF32Infinity | (mant << kMantissaShift));
  }
  if (exp != 0) {
    return std::bit_cast<float>(sign | ((exp - kF16ExpBias + kF32ExpBias) << 23) |
                                (mant << kMantissaShift));
  }
  // Zero or subnormal half: mant * 2^-24, exact in float.
  const float magnitude = std::ldexp(float(mant), kF16SubnormalExponent);
  return sign ? -magnitude : magnitude;
}

uint16_t fp32_to_fp16(float f) {
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (bits >> 16) & 0x8000;
  const uint32_t abs = bits & 0x7fffffff;
  if (abs > kF32Infinity) {  // nan: keep the top payload bits, force quiet so it stays a nan
    return uint16_t(sign | kF16Infinity | kF16QuietBit | ((abs & 0x7fffff) >> kMantissaShift));
  }
  if (abs >= kF32F16Overflow) return uint16_t(sign | kF16Infinity);
  if (abs < kF32SmallestF16Normal) {
    // Subnormal (or zero) half: count units of 2^-24. value = m * 2^(e - 150), m with implicit 1.
    const uint32_t e = abs >> 23;
    const int shift = int(kF32ExpBias - 1) - int(e);  // 150 - 24 = 126 = bias - 1
    if (shift > 24) return uint16_t(sign);            // below half of 2^-24: rounds to zero
    const uint32_t m = (abs & 0x7fffff) | kF32ImplicitOne;
    return uint16_t(sign | shift_round_even(m, shift));  // may round up to the smallest normal
  }
  // Normal: rebias the exponent, drop 13 mantissa bits; a carry rolls into the exponent.
  const uint32_t rebiased = abs - ((kF32ExpBias - kF16ExpBias) << 23);
  return uint16_t(sign | shift_round_even(rebiased, kMantissaShift));
}

// ---- bfloat16: the top 16 bits of an IEEE float (same exponent, 7 mantissa bits) ----

namespace {

constexpr int kBF16Shift = 16;  // bf16 bits = f32 bits >> 16
constexpr uint32_t kF32AbsMask = 0x7fffffff;
constexpr uint32_t kBF16QuietBit = 0x0040;  // top mantissa bit of a bf16
constexpr uint32_t kBF16HalfUlp = 0x7fff;   // just under half of the dropped 16 bits

}  // namespace

float bf16_to_fp32(uint16_t h) {
  return std::bit_cast<float>(uint32_t(h) << kBF16Shift);
}

uint16_t fp32_to_bf16(float f) {
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  // A nan whose payload sits only in the dropped bits would round to inf: force it quiet.
  if ((bits & kF32AbsMask) > kF32Infinity) return uint16_t((bits >> kBF16Shift) | kBF16QuietBit);
  // Round to nearest even: add just under half, plus one when the kept part is odd (a tie then
  // carries up to the even neighbour). A carry out of the mantissa bumps the exponent, up to inf.
  const uint32_t odd = (bits >> kBF16Shift) & 1;
  return uint16_t((bits + kBF16HalfUlp + odd) >> kBF16Shift);
}

// ---- helpers shared with quant_k.cpp ----

int64_t quant_detail::whole_blocks(int64_t n, int block_size, const char* what) {
  check(n >= 0 && n % block_size == 0, what, ": row of ", n, " weights is not a whole number of ",
        block_size, "-weight blocks");
  return n / block_size;
}

namespace {

using quant_detail::poison;
using quant_detail::poison_if_non_finite;
using quant_detail::whole_blocks;

/// 1 / d, or 0 where that is not finite: d = 0 (ggml's own guard), or |d| below ~3e-39, whose
/// inverse overflows (x * inf would then reach an int8 cast). Such a d is 0 once stored as fp16
/// (its smallest step is 6e-8), so the block reads back as zeros (or its minimum) whatever its
/// quants are.
float inverse_scale(float d) {
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  return std::isfinite(id) ? id : 0.0f;
}

/// A 32-bit little-endian word at p (Q5_0/Q5_1's fifth bits). The engine runs little-endian only.
uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// ---- F32, F16, BF16: one value per "block" ----

void dequantize_f32(const void* src, float* y, int64_t n) {
  std::memcpy(y, src, size_t(whole_blocks(n, 1, "f32")) * sizeof(float));
}
void quantize_f32(const float* x, void* dst, int64_t n) {
  std::memcpy(dst, x, size_t(whole_blocks(n, 1, "f32")) * sizeof(float));
}

void dequantize_f16(const void* src, float* y, int64_t n) {
  const uint16_t* h = static_cast<const uint16_t*>(src);
  const int64_t count = whole_blocks(n, 1, "f16");
  for (int64_t i = 0; i < count; ++i) y[i] = fp16_to_fp32(h[i]);
}
void quantize_f16(const float* x, void* dst, int64_t n) {
  uint16_t* h = static_cast<uint16_t*>(dst);
  const int64_t count = whole_blocks(n, 1, "f16");
  for (int64_t i = 0; i < count; ++i) h[i] = fp32_to_fp16(x[i]);
}

void dequantize_bf16(const void* src, float* y, int64_t n) {
  const uint16_t* h = static_cast<const uint16_t*>(src);
  const int64_t count = whole_blocks(n, 1, "bf16");
  for (int64_t i = 0; i < count; ++i) y[i] = bf16_to_fp32(h[i]);
}
void quantize_bf16(const float* x, void* dst, int64_t n) {
  uint16_t* h = static_cast<uint16_t*>(dst);
  const int64_t count = whole_blocks(n, 1, "bf16");
  for (int64_t i = 0; i < count; ++i) h[i] = fp32_to_bf16(x[i]);
}

// ---- 32-weight blocks. Weight j < 16 is the low nibble of qs[j], weight j + 16 its high
// nibble; Q5_* add bit j of the little-endian word qh as bit 4 of weight j. ----

constexpr int kHalf = 16;        // weights per nibble half of a 32-weight block
constexpr int kFifthBit = 0x10;  // Q5_*: the bit qh adds above the nibble

/// Q5_*'s 5-bit values of weights j and j + 16.
inline int q5_low(const uint8_t* qs, uint32_t qh, int j) {
  return (qs[j] & 0x0F) | (((qh >> j) & 1) ? kFifthBit : 0);
}
inline int q5_high(const uint8_t* qs, uint32_t qh, int j) {
  return (qs[j] >> 4) | (((qh >> (j + kHalf)) & 1) ? kFifthBit : 0);
}

// Q4_0: w = (q - 8) * d.
void dequantize_q4_0(const void* src, float* y, int64_t n) {
  constexpr int kOffset = 8;  // nibbles 0..15 stand for -8..7
  const BlockQ4_0* blocks = static_cast<const BlockQ4_0*>(src);
  const int64_t nb = whole_blocks(n, kQK4_0, "q4_0");
  for (int64_t b = 0; b < nb; ++b, y += kQK4_0) {
    const float d = fp16_to_fp32(blocks[b].d);
    for (int j = 0; j < kHalf; ++j) {
      y[j] = float((blocks[b].qs[j] & 0x0F) - kOffset) * d;
      y[j + kHalf] = float((blocks[b].qs[j] >> 4) - kOffset) * d;
    }
  }
}

// Q4_1: w = q * d + m.
void dequantize_q4_1(const void* src, float* y, int64_t n) {
  const BlockQ4_1* blocks = static_cast<const BlockQ4_1*>(src);
  const int64_t nb = whole_blocks(n, kQK4_1, "q4_1");
  for (int64_t b = 0; b < nb; ++b, y += kQK4_1) {
    const float d = fp16_to_fp32(blocks[b].d);
    const float m = fp16_to_fp32(blocks[b].m);
    for (int j = 0; j < kHalf; ++j) {
      y[j] = float(blocks[b].qs[j] & 0x0F) * d + m;
      y[j + kHalf] = float(blocks[b].qs[j] >> 4) * d + m;
    }
  }
}

// Q5_0: w = (q - 16) * d.
void dequantize_q5_0(const void* src, float* y, int64_t n) {
  constexpr int kOffset = 16;  // 5-bit values 0..31 stand for -16..15
  const BlockQ5_0* blocks = static_cast<const BlockQ5_0*>(src);
  const int64_t nb = whole_blocks(n, kQK5_0, "q5_0");
  for (int64_t b = 0; b < nb; ++b, y += kQK5_0) {
    const float d = fp16_to_fp32(blocks[b].d);
    const uint32_t qh = load_u32(blocks[b].qh);
    for (int j = 0; j < kHalf; ++j) {
      y[j] = float(q5_low(blocks[b].qs, qh, j) - kOffset) * d;
      y[j + kHalf] = float(q5_high(blocks[b].qs, qh, j) - kOffset) * d;
    }
  }
}

// Q5_1: w = q * d + m.
void dequantize_q5_1(const void* src, float* y, int64_t n) {
  const BlockQ5_1* blocks = static_cast<const BlockQ5_1*>(src);
  const int64_t nb = whole_blocks(n, kQK5_1, "q5_1");
  for (int64_t b = 0; b < nb; ++b, y += kQK5_1) {
    const float d = fp16_to_fp32(blocks[b].d);
    const float m = fp16_to_fp32(blocks[b].m);
    const uint32_t qh = load_u32(blocks[b].qh);
    for (int j = 0; j < kHalf; ++j) {
      y[j] = float(q5_low(blocks[b].qs, qh, j)) * d + m;
      y[j + kHalf] = float(q5_high(blocks[b].qs, qh, j)) * d + m;
    }
  }
}

// Q8_0: w = q * d.
void dequantize_q8_0(const void* src, float* y, int64_t n) {
  const BlockQ8_0* blocks = static_cast<const BlockQ8_0*>(src);
  const int64_t nb = whole_blocks(n, kQK8_0, "q8_0");
  for (int64_t b = 0; b < nb; ++b, y += kQK8_0) {
    const float d = fp16_to_fp32(blocks[b].d);
    for (int j = 0; j < kQK8_0; ++j) y[j] = float(blocks[b].qs[j]) * d;
  }
}

/// The element of largest magnitude, with its sign (the first one on a tie), as ggml finds it.
float signed_absmax(const float* x, int n) {
  float amax = 0.0f;
  float max = 0.0f;
  for (int j = 0; j < n; ++j) {
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  return max;
}

/// Smallest and largest element. False when max - min overflows a float: such a block cannot be
/// scaled either (d would be inf, 1 / d zero, and (x - min) * 0 NaN where x - min overflows too),
/// so it is poisoned as well.
bool finite_range(const float* x, int n, float& min, float& max) {
  min = std::numeric_limits<float>::max();
  max = -std::numeric_limits<float>::max();
  for (int j = 0; j < n; ++j) {
    if (x[j] < min) min = x[j];
    if (x[j] > max) max = x[j];
  }
  return std::isfinite(max - min);
}

// Symmetric 4- and 5-bit blocks: the signed extreme maps to the lowest level (-8 or -16), d =
// max / -levels, and q = trunc(x / d + levels + 0.5), clamped to the top level.
void quantize_q4_0(const float* src, void* dst, int64_t n) {
  constexpr float kLevels = -8.0f;         // the signed extreme maps to level -8 (nibble 0)
  constexpr float kRoundingOffset = 8.5f;  // + 8 to unsign, + 0.5 so truncation rounds
  constexpr int kMaxNibble = 15;
  BlockQ4_0* blocks = static_cast<BlockQ4_0*>(dst);
  const int64_t nb = whole_blocks(n, kQK4_0, "q4_0");
  for (int64_t b = 0; b < nb; ++b) {
    const float* x = src + b * kQK4_0;
    BlockQ4_0& y = blocks[b];
    if (poison_if_non_finite(x, kQK4_0, y)) continue;
    const float d = signed_absmax(x, kQK4_0) / kLevels;
    const float id = inverse_scale(d);
    y.d = fp32_to_fp16(d);
    for (int j = 0; j < kHalf; ++j) {
      const int lo = std::min(kMaxNibble, int(int8_t(x[j] * id + kRoundingOffset)));
      const int hi = std::min(kMaxNibble, int(int8_t(x[j + kHalf] * id + kRoundingOffset)));
      y.qs[j] = uint8_t(lo | (hi << 4));
    }
  }
}

void quantize_q5_0(const float* src, void* dst, int64_t n) {
  constexpr float kLevels = -16.0f;
  constexpr float kRoundingOffset = 16.5f;
  constexpr int kMaxValue = 31;
  BlockQ5_0* blocks = static_cast<BlockQ5_0*>(dst);
  const int64_t nb = whole_blocks(n, kQK5_0, "q5_0");
  for (int64_t b = 0; b < nb; ++b) {
    const float* x = src + b * kQK5_0;
    BlockQ5_0& y = blocks[b];
    if (poison_if_non_finite(x, kQK5_0, y)) continue;
    const float d = signed_absmax(x, kQK5_0) / kLevels;
    const float id = inverse_scale(d);
    y.d = fp32_to_fp16(d);
    uint32_t qh = 0;
    for (int j = 0; j < kHalf; ++j) {
      const int lo = std::min(kMaxValue, int(int8_t(x[j] * id + kRoundingOffset)));
      const int hi = std::min(kMaxValue, int(int8_t(x[j + kHalf] * id + kRoundingOffset)));
      y.qs[j] = uint8_t((lo & 0x0F) | ((hi & 0x0F) << 4));
      qh |= uint32_t((lo & kFifthBit) ? 1 : 0) << j;
      qh |= uint32_t((hi & kFifthBit) ? 1 : 0) << (j + kHalf);
    }
    std::memcpy(y.qh, &qh, sizeof qh);
  }
}

// Blocks with a minimum: d = (max - min) / top level, m = min, q = trunc((x - min) / d + 0.5).
void quantize_q4_1(const float* src, void* dst, int64_t n) {
  constexpr float kMaxLevel = 15.0f;  // (1 << 4) - 1
  constexpr int kMaxNibble = 15;
  BlockQ4_1* blocks = static_cast<BlockQ4_1*>(dst);
  const int64_t nb = whole_blocks(n, kQK4_1, "q4_1");
  for (int64_t b = 0; b < nb; ++b) {
    const float* x = src + b * kQK4_1;
    BlockQ4_1& y = blocks[b];
    if (poison_if_non_finite(x, kQK4_1, y)) continue;
    float min, max;
    if (!finite_range(x, kQK4_1, min, max)) {
      poison(y);
      continue;
    }
    const float d = (max - min) / kMaxLevel;
    const float id = inverse_scale(d);
    y.d = fp32_to_fp16(d);
    y.m = fp32_to_fp16(min);
    for (int j = 0; j < kHalf; ++j) {
      const int lo = std::min(kMaxNibble, int(int8_t((x[j] - min) * id + 0.5f)));
      const int hi = std::min(kMaxNibble, int(int8_t((x[j + kHalf] - min) * id + 0.5f)));
      y.qs[j] = uint8_t(lo | (hi << 4));
    }
  }
}

void quantize_q5_1(const float* src, void* dst, int64_t n) {
  constexpr float kMaxLevel = 31.0f;  // (1 << 5) - 1
  BlockQ5_1* blocks = static_cast<BlockQ5_1*>(dst);
  const int64_t nb = whole_blocks(n, kQK5_1, "q5_1");
  for (int64_t b = 0; b < nb; ++b) {
    const float* x = src + b * kQK5_1;
    BlockQ5_1& y = blocks[b];
    if (poison_if_non_finite(x, kQK5_1, y)) continue;
    float min, max;
    if (!finite_range(x, kQK5_1, min, max)) {
      poison(y);
      continue;
    }
    const float d = (max - min) / kMaxLevel;
    const float id = inverse_scale(d);
    y.d = fp32_to_fp16(d);
    y.m = fp32_to_fp16(min);
    uint32_t qh = 0;
    for (int j = 0; j < kHalf; ++j) {
      // No clamp, as in ggml: (max - min) * id stays below 31.5.
      const int lo = uint8_t((x[j] - min) * id + 0.5f);
      const int hi = uint8_t((x[j + kHalf] - min) * id + 0.5f);
      y.qs[j] = uint8_t((lo & 0x0F) | ((hi & 0x0F) << 4));
      qh |= uint32_t((lo & kFifthBit) ? 1 : 0) << j;
      qh |= uint32_t((hi & kFifthBit) ? 1 : 0) << (j + kHalf);
    }
    std::memcpy(y.qh, &qh, sizeof qh);
  }
}

/// The largest |x[j]|, or infinity when x holds a NaN or an infinity: the magnitudes' bit
/// patterns order as the magnitudes do, NaNs and infinities above every finite one, so one
/// integer maximum finds both (the compiler vectorizes it; a float maximum it would not, for
/// the sake of NaN and -0, nor an early exit on the first non-finite value). For finite x it
/// equals a std::max over std::fabs, bit for bit.
float absmax_or_inf(const float* x, int n) {
  constexpr uint32_t kMagnitude = 0x7FFFFFFFu;  // all but the sign bit
  constexpr uint32_t kInfinity = 0x7F800000u;   // the smallest non-finite magnitude
  uint32_t max_bits = 0;
  for (int j = 0; j < n; ++j) {
    uint32_t bits;
    std::memcpy(&bits, x + j, sizeof bits);
    max_bits = std::max(max_bits, bits & kMagnitude);
  }
  max_bits = std::min(max_bits, kInfinity);  // a NaN's pattern is above infinity's
  float amax;
  std::memcpy(&amax, &max_bits, sizeof amax);
  return amax;
}

/// int(std::round(v)) for |v| < 2^31, bit for bit: v plus the float just below 0.5, with v's
/// sign, then cut towards zero by the conversion (checked against std::round for every finite
/// float). std::round is a call to libm that the compiler cannot vectorize; this is an add and
/// a conversion, so Q8_0's loop below runs 8 floats at a time. Every decode step quantizes its
/// activations with it: 2048 values took 7.9 us with std::round, 0.43 us so (best of 200).
/// Needs -ffp-contract=off (this file's): fused with the product before it, the addition would
/// round differently.
int round_half_away(float v) {
  constexpr float kJustBelowHalf = 0.49999997f;  // 0.5 - 2^-25; 0.5 would round 0.49999997 up
  return int(v + std::copysign(kJustBelowHalf, v));
}

// Q8_0: d = amax / 127, q = round(x / d) (half away from zero, as roundf).
void quantize_q8_0(const float* src, void* dst, int64_t n) {
  constexpr float kMaxLevel = 127.0f;  // (1 << 7) - 1
  BlockQ8_0* blocks = static_cast<BlockQ8_0*>(dst);
  const int64_t nb = whole_blocks(n, kQK8_0, "q8_0");
  for (int64_t b = 0; b < nb; ++b) {
    const float* x = src + b * kQK8_0;
    BlockQ8_0& y = blocks[b];
    const float amax = absmax_or_inf(x, kQK8_0);
    if (!std::isfinite(amax)) {  // a NaN or an infinity in the block
      poison(y);
      continue;
    }
    const float d = amax / kMaxLevel;
    const float id = inverse_scale(d);
    y.d = fp32_to_fp16(d);
    int8_t qs[kQK8_0];  // not y.qs directly: int8_t may alias x, which keeps the loop scalar
    for (int j = 0; j < kQK8_0; ++j) qs[j] = int8_t(round_half_away(x[j] * id));
    std::memcpy(y.qs, qs, sizeof qs);
  }
}

// ---- the table ----

namespace qd = quant_detail;

// In the order supported_type_names() lists them.
constexpr TypeTraits kTypes[] = {
    {GGMLType::F32, 1, sizeof(float), dequantize_f32, quantize_f32},
    {GGMLType::F16, 1, sizeof(uint16_t), dequantize_f16, quantize_f16},
    {GGMLType::BF16, 1, sizeof(uint16_t), dequantize_bf16, quantize_bf16},
    {GGMLType::Q4_0, kQK4_0, sizeof(BlockQ4_0), dequantize_q4_0, quantize_q4_0},
    {GGMLType::Q4_1, kQK4_1, sizeof(BlockQ4_1), dequantize_q4_1, quantize_q4_1},
    {GGMLType::Q5_0, kQK5_0, sizeof(BlockQ5_0), dequantize_q5_0, quantize_q5_0},
    {GGMLType::Q5_1, kQK5_1, sizeof(BlockQ5_1), dequantize_q5_1, quantize_q5_1},
    {GGMLType::Q8_0, kQK8_0, sizeof(BlockQ8_0), dequantize_q8_0, quantize_q8_0},
    {GGMLType::Q2_K, kQK_K, sizeof(BlockQ2_K), qd::dequantize_q2_k, qd::quantize_q2_k},
    {GGMLType::Q3_K, kQK_K, sizeof(BlockQ3_K), qd::dequantize_q3_k, qd::quantize_q3_k},
    {GGMLType::Q4_K, kQK_K, sizeof(BlockQ4_K), qd::dequantize_q4_k, qd::quantize_q4_k},
    {GGMLType::Q5_K, kQK_K, sizeof(BlockQ5_K), qd::dequantize_q5_k, qd::quantize_q5_k},
    {GGMLType::Q6_K, kQK_K, sizeof(BlockQ6_K), qd::dequantize_q6_k, qd::quantize_q6_k},
};

const TypeTraits& supported_traits(GGMLType type) {
  const TypeTraits* traits = type_traits(type);
  // Not check(): its arguments, two strings built from the type table, would be made on every
  // call, and every matrix product asks (V2-Lite: ~1,500 weights a token; making the strings
  // took ~2% of the calling thread's decode samples in perf).
  if (traits == nullptr) {
    fail("tensor type ", ggml_type_name(type),
         " is not supported (supported: ", supported_type_names(), ")");
  }
  return *traits;
}

}  // namespace

const TypeTraits* type_traits(GGMLType type) {
  for (const TypeTraits& t : kTypes) {
    if (t.type == type) return &t;
  }
  return nullptr;
}

std::string supported_type_names() {
  std::string names;
  for (const TypeTraits& t : kTypes) names += (names.empty() ? "" : ", ") + ggml_type_name(t.type);
  return names;
}

GGMLType type_from_name(const std::string& name) {
  for (const TypeTraits& t : kTypes) {
    if (ggml_type_name(t.type) == name) return t.type;
  }
  fail("unknown type '", name, "' (", supported_type_names(), ")");
}

bool type_supported(GGMLType type) {
  return type_traits(type) != nullptr;
}

int type_block_size(GGMLType type) {
  return supported_traits(type).block_size;
}

size_t type_block_bytes(GGMLType type) {
  return supported_traits(type).block_bytes;
}

size_t type_row_bytes(GGMLType type, int64_t n) {
  const TypeTraits& t = supported_traits(type);
  if (n < 0 || n % t.block_size != 0) {  // the name is made only for the message, as above
    fail("row of ", n, " ", ggml_type_name(type), " weights is not a whole number of ",
         t.block_size, "-weight blocks");
  }
  return size_t(n / t.block_size) * t.block_bytes;
}

void dequantize_row(GGMLType type, const void* src, float* dst, int64_t n) {
  supported_traits(type).dequantize(src, dst, n);
}

void quantize_row(GGMLType type, const float* src, void* dst, int64_t n) {
  supported_traits(type).quantize(src, dst, n);
}

void quantize_row_q4_0(const float* src, BlockQ4_0* dst, int64_t n) {
  quantize_q4_0(src, dst, n);
}

void quantize_row_q8_0(const float* src, BlockQ8_0* dst, int64_t n) {
  quantize_q8_0(src, dst, n);
}
