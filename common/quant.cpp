// quant.cpp: IEEE half conversion and ggml's reference block (de)quantizers, written for reading
// rather than speed. Stages with faster kernels check themselves against these.
#include "quant.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

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

// ---- type table ----

bool type_supported(GGMLType type) {
  return type == GGMLType::F32 || type == GGMLType::F16 || type == GGMLType::Q4_0 ||
         type == GGMLType::Q8_0 || type == GGMLType::Q6_K;
}

namespace {

const GGMLTypeLayout& supported_layout(GGMLType type) {
  check(type_supported(type), "tensor type ", ggml_type_name(type),
        " is not supported (supported: f32, f16, q4_0, q8_0, q6_K)");
  return *ggml_type_layout(type);
}

}  // namespace

int type_block_size(GGMLType type) {
  return supported_layout(type).block_size;
}

size_t type_block_bytes(GGMLType type) {
  return supported_layout(type).block_bytes;
}

size_t type_row_bytes(GGMLType type, int64_t n) {
  const GGMLTypeLayout& layout = supported_layout(type);
  check(n >= 0 && n % layout.block_size == 0, "row of ", n, " ", ggml_type_name(type),
        " weights is not a whole number of ", layout.block_size, "-weight blocks");
  return size_t(n / layout.block_size) * layout.block_bytes;
}

// ---- dequantizers: one block at a time, in ggml's element order ----

namespace {

void dequantize_q4_0(const BlockQ4_0* blocks, float* y, int64_t n_blocks) {
  constexpr int kHalf = kQK4_0 / 2;
  constexpr int kOffset = 8;  // nibbles 0..15 stand for -8..7
  for (int64_t b = 0; b < n_blocks; ++b, y += kQK4_0) {
    const float d = fp16_to_fp32(blocks[b].d);
    for (int j = 0; j < kHalf; ++j) {
      y[j] = float((blocks[b].qs[j] & 0x0F) - kOffset) * d;
      y[j + kHalf] = float((blocks[b].qs[j] >> 4) - kOffset) * d;
    }
  }
}

void dequantize_q8_0(const BlockQ8_0* blocks, float* y, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, y += kQK8_0) {
    const float d = fp16_to_fp32(blocks[b].d);
    for (int j = 0; j < kQK8_0; ++j) y[j] = float(blocks[b].qs[j]) * d;
  }
}

// Q6_K: each 6-bit weight is 4 low bits from ql and 2 high bits from qh, minus 32, times
// d * scales[k] for its group of 16. A super-block is two halves of 128 weights; within a half,
// weight l + 32*q (l < 32, quarter q < 4) takes ql[l + 32*(q&1)] (low nibble for q < 2, high
// nibble after) and bits 2q..2q+1 of qh[l].
void dequantize_q6_k(const BlockQ6_K* blocks, float* y, int64_t n_blocks) {
  constexpr int kHalfBlock = 128;
  constexpr int kQuarter = 32;
  constexpr int kGroup = 16;  // weights per scale
  constexpr int kOffset = 32;
  for (int64_t b = 0; b < n_blocks; ++b) {
    const BlockQ6_K& x = blocks[b];
    const float d = fp16_to_fp32(x.d);
    for (int half = 0; half < kQK_K / kHalfBlock; ++half, y += kHalfBlock) {
      const uint8_t* ql = x.ql + half * (kHalfBlock / 2);
      const uint8_t* qh = x.qh + half * (kHalfBlock / 4);
      const int8_t* sc = x.scales + half * (kHalfBlock / kGroup);
      for (int q = 0; q < 4; ++q) {
        for (int l = 0; l < kQuarter; ++l) {
          const uint8_t low_byte = ql[l + kQuarter * (q & 1)];
          const int low = q < 2 ? (low_byte & 0x0F) : (low_byte >> 4);
          const int high = (qh[l] >> (2 * q)) & 3;
          const int value = (low | (high << 4)) - kOffset;
          const int scale = sc[(q * kQuarter + l) / kGroup];
          y[q * kQuarter + l] = d * float(scale) * float(value);
        }
      }
    }
  }
}

}  // namespace

void dequantize_row(GGMLType type, const void* src, float* dst, int64_t n) {
  const int64_t n_blocks = int64_t(type_row_bytes(type, n) / type_block_bytes(type));
  switch (type) {
    case GGMLType::F32:
      std::memcpy(dst, src, size_t(n) * sizeof(float));
      return;
    case GGMLType::F16: {
      const uint16_t* h = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_fp32(h[i]);
      return;
    }
    case GGMLType::Q4_0:
      return dequantize_q4_0(static_cast<const BlockQ4_0*>(src), dst, n_blocks);
    case GGMLType::Q8_0:
      return dequantize_q8_0(static_cast<const BlockQ8_0*>(src), dst, n_blocks);
    case GGMLType::Q6_K:
      return dequantize_q6_k(static_cast<const BlockQ6_K*>(src), dst, n_blocks);
    default:
      fail("dequantize_row: type ", ggml_type_name(type), " is not supported");
  }
}

// ---- reference quantizers (ggml's quantize_row_*_ref rounding) ----

namespace {

/// A block holding a NaN or an infinity cannot be scaled to integers (converting NaN to int8 is
/// undefined behaviour, and std::max skips NaN when finding the scale). Such a block gets scale
/// NaN and zero quants, so every product with it is NaN and the run stops at the sampler ("logit
/// ... is NaN") instead of printing text computed from garbage. Returns true when it did that.
bool poison_block(const float* x, int n, uint16_t& d, void* quants, size_t quant_bytes) {
  for (int j = 0; j < n; ++j) {
    if (!std::isfinite(x[j])) {
      d = uint16_t(kF16Infinity | kF16QuietBit);  // a quiet NaN
      std::memset(quants, 0, quant_bytes);
      return true;
    }
  }
  return false;
}

/// 1 / d, or 0 where that is not finite: d = 0, or |d| below ~3e-39, whose inverse overflows
/// (x * inf would then reach an int8 cast). Such a d is 0 once stored as fp16 (its smallest step
/// is 6e-8), so the block reads back as zeros whatever its quants are.
float inverse_scale(float d) {
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  return std::isfinite(id) ? id : 0.0f;
}

}  // namespace

void quantize_row_q4_0(const float* src, BlockQ4_0* dst, int64_t n) {
  check(n % kQK4_0 == 0, "quantize_row_q4_0: n = ", n, " is not a multiple of ", kQK4_0);
  constexpr int kHalf = kQK4_0 / 2;
  constexpr float kLevels = -8.0f;         // the signed extreme maps to level -8 (nibble 0)
  constexpr float kRoundingOffset = 8.5f;  // + 8 to unsign, + 0.5 so truncation rounds
  constexpr int kMaxNibble = 15;
  for (int64_t b = 0; b < n / kQK4_0; ++b) {
    const float* x = src + b * kQK4_0;
    if (poison_block(x, kQK4_0, dst[b].d, dst[b].qs, sizeof(dst[b].qs))) continue;
    float amax = 0.0f;
    float max = 0.0f;  // the element of largest magnitude, with its sign
    for (int j = 0; j < kQK4_0; ++j) {
      if (amax < std::fabs(x[j])) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    }
    const float d = max / kLevels;
    const float id = inverse_scale(d);
    dst[b].d = fp32_to_fp16(d);
    for (int j = 0; j < kHalf; ++j) {
      const int lo = std::min(kMaxNibble, int(int8_t(x[j] * id + kRoundingOffset)));
      const int hi = std::min(kMaxNibble, int(int8_t(x[j + kHalf] * id + kRoundingOffset)));
      dst[b].qs[j] = uint8_t(lo | (hi << 4));
    }
  }
}

void quantize_row_q8_0(const float* src, BlockQ8_0* dst, int64_t n) {
  check(n % kQK8_0 == 0, "quantize_row_q8_0: n = ", n, " is not a multiple of ", kQK8_0);
  constexpr float kMaxLevel = 127.0f;  // (1 << 7) - 1
  for (int64_t b = 0; b < n / kQK8_0; ++b) {
    const float* x = src + b * kQK8_0;
    if (poison_block(x, kQK8_0, dst[b].d, dst[b].qs, sizeof(dst[b].qs))) continue;
    float amax = 0.0f;
    for (int j = 0; j < kQK8_0; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / kMaxLevel;
    const float id = inverse_scale(d);
    dst[b].d = fp32_to_fp16(d);
    for (int j = 0; j < kQK8_0; ++j) dst[b].qs[j] = int8_t(std::round(x[j] * id));
  }
}
