// kquants.cpp: Q4_K and Q5_K weights dotted with Q8_K activations (see kquants.h), scalar and
// SIMD.
//
// Every kernel computes, per super-block, two exact int32 sums: sumi = sum over sub-blocks of the
// sub-block's integer scale times its integer dot product, and summ = sum over sub-blocks of the
// integer min times the activations' sum there. finish() turns them into floats in one fixed
// order, so the SIMD kernels equal the scalar ones bit for bit. Bounds: |q x| <= 31 x 127, 256 of
// them times a 6-bit scale stay below 2^31.
//
// The SIMD kernels use 256-bit registers: vpmaddubsw multiplies 32 unsigned weights (0..31) by
// 32 signed activations and adds neighbours into 16 int16 lanes (at most 2 x 31 x 127 = 7874:
// no saturation), then vpmaddwd (AVX2) or vpdpwssd (AVX-512 VNNI, which also adds) multiplies
// those by the sub-block's scale and adds neighbours into 8 int32 lanes.
#include "kquants.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "error.h"
#include "simd.h"

#if ENGINE_SIMD != ENGINE_SIMD_NONE
#include <immintrin.h>
#endif

namespace kquant {
namespace {

constexpr int kSub32 = 32;  // weights in a Q4_K/Q5_K sub-block
constexpr float kMaxQ = 127.0f;

/// acc + d_w d_x sumi - dmin_w d_x summ: the one float order every path uses.
inline float finish(float acc, int32_t sumi, int32_t summ, float d, float dmin, float dx) {
  acc = std::fma(static_cast<float>(sumi), d * dx, acc);
  return std::fma(static_cast<float>(summ), -(dmin * dx), acc);
}

/// Q4_K/Q5_K: 8 6-bit scales and 8 6-bit mins packed into 12 bytes. Sub-blocks 0-3 take the
/// low 6 bits of bytes 0-3 (scales) and 4-7 (mins); sub-blocks 4-7 take a nibble of bytes
/// 8-11 (scale: low, min: high) and, as their top 2 bits, the top 2 bits of bytes 0-3 / 4-7.
void unpack_scales_mins(const uint8_t* s, uint8_t* sc, uint8_t* m) {
  constexpr int kHalf = 4;
  for (int j = 0; j < kHalf; ++j) {
    sc[j] = s[j] & 63;
    m[j] = s[j + kHalf] & 63;
    sc[j + kHalf] = (s[j + 2 * kHalf] & 0x0F) | ((s[j] >> 6) << 4);
    m[j + kHalf] = (s[j + 2 * kHalf] >> 4) | ((s[j + kHalf] >> 6) << 4);
  }
}

/// Sum over the sub-blocks of min x (the activations' sum there), for 8 sub-blocks of 32.
int32_t mins_times_sums(const uint8_t* m, const int16_t* bsums) {
  int32_t s = 0;
  for (int j = 0; j < 8; ++j) s += m[j] * (bsums[2 * j] + bsums[2 * j + 1]);
  return s;
}

// ---- scalar kernels: weight order exactly as common/'s dequantizers ----

/// Q4_K (high = false) and Q5_K (high = true: a fifth bit per weight from qh).
template <class Block, bool kHigh>
float dot_q45_k(const Block* w, const XBlock* x, int64_t nb) {
  float acc = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    uint8_t sc[8], m[8];
    unpack_scales_mins(w[b].scales, sc, m);
    int32_t sumi = 0;
    for (int j = 0; j < 4; ++j) {  // 64 weights: sub-block 2j (low nibbles), 2j + 1 (high)
      const uint8_t* q = w[b].qs + kSub32 * j;
      const int8_t* xs = x[b].qs + 2 * kSub32 * j;
      int32_t lo = 0, hi = 0;
      for (int l = 0; l < kSub32; ++l) {
        int vlo = q[l] & 0x0F, vhi = q[l] >> 4;
        if constexpr (kHigh) {
          vlo += ((w[b].qh[l] >> (2 * j)) & 1) << 4;
          vhi += ((w[b].qh[l] >> (2 * j + 1)) & 1) << 4;
        }
        lo += vlo * xs[l];
        hi += vhi * xs[l + kSub32];
      }
      sumi += sc[2 * j] * lo + sc[2 * j + 1] * hi;
    }
    acc = finish(acc, sumi, mins_times_sums(m, x[b].bsums), fp16_to_fp32(w[b].d),
                 fp16_to_fp32(w[b].dmin), x[b].d);
  }
  return acc;
}

// ---- SIMD kernels ----
#if ENGINE_SIMD != ENGINE_SIMD_NONE

/// acc + products of int16 pairs p and scales s, pairwise added into int32 lanes.
inline __m256i scaled_add(__m256i acc, __m256i p, __m256i s) {
#if ENGINE_SIMD == ENGINE_SIMD_AVX512_VNNI
  return _mm256_dpwssd_epi32(acc, p, s);
#else
  return _mm256_add_epi32(acc, _mm256_madd_epi16(p, s));
#endif
}

inline __m256i load(const void* p) {
  return _mm256_loadu_si256(static_cast<const __m256i*>(p));
}

/// 255 where bit of byte is set, else 0, for 32 bytes.
inline __m256i bit_mask(__m256i bytes, uint8_t bit) {
  const __m256i b = _mm256_set1_epi8(static_cast<char>(bit));
  return _mm256_cmpeq_epi8(_mm256_and_si256(bytes, b), b);
}

/// An fp16 scale as a float: one F16C instruction where the build has it (exact, as
/// fp16_to_fp32(), which is a call into common/ with a branch per case).
inline float half(uint16_t h) {
#ifdef __F16C__
  return _cvtsh_ss(h);
#else
  return fp16_to_fp32(h);
#endif
}

/// Two int32 sums at once, of a's 8 lanes and of b's: {sum a, sum b}.
inline void sum_lanes2(__m256i a, __m256i b, int32_t& sa, int32_t& sb) {
  const __m256i h = _mm256_hadd_epi32(a, b);  // per half: a01 a23 b01 b23
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
  s = _mm_hadd_epi32(s, s);  // a b a b
  sa = _mm_cvtsi128_si32(s);
  sb = _mm_extract_epi32(s, 1);
}

/// Shuffle masks that broadcast int16 lane k of a 128-bit half to all 8 lanes of that half:
/// kBroadcast16[k].
alignas(32) constexpr uint8_t kBroadcast16[8][16] = {
    {0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1},
    {2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3},
    {4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5},
    {6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7},
    {8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9},
    {10, 11, 10, 11, 10, 11, 10, 11, 10, 11, 10, 11, 10, 11, 10, 11},
    {12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 12, 13},
    {14, 15, 14, 15, 14, 15, 14, 15, 14, 15, 14, 15, 14, 15, 14, 15}};

/// Lane k of scales in every int16 lane (a 32-weight sub-block has one scale).
inline __m256i pick_scale(__m256i scales, int k) {
  return _mm256_shuffle_epi8(scales, _mm256_broadcastsi128_si256(_mm_load_si128(
                                         reinterpret_cast<const __m128i*>(kBroadcast16[k]))));
}

/// Q4_K/Q5_K's 12 scale bytes as two 8-byte words, scales and mins (unpack_scales_mins, a
/// 32-bit word at a time: byte j of each word is sub-block j's or j + 4's).
inline void unpack_scales_mins_words(const uint8_t* packed, uint64_t& scales, uint64_t& mins) {
  constexpr uint32_t kLow6 = 0x3f3f3f3f, kLow4 = 0x0f0f0f0f, kTop2 = 0x03030303;
  uint32_t s[3];
  std::memcpy(s, packed, sizeof s);
  const uint32_t sc_lo = s[0] & kLow6;
  const uint32_t sc_hi = (s[2] & kLow4) | (((s[0] >> 6) & kTop2) << 4);
  const uint32_t m_lo = s[1] & kLow6;
  const uint32_t m_hi = ((s[2] >> 4) & kLow4) | (((s[1] >> 6) & kTop2) << 4);
  scales = sc_lo | (uint64_t(sc_hi) << 32);
  mins = m_lo | (uint64_t(m_hi) << 32);
}

template <class Block, bool kHigh>
float dot_q45_k_simd(const Block* w, const XBlock* x, int64_t nb) {
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const __m256i sixteen = _mm256_set1_epi8(16);
  float acc = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    uint64_t sc8, m8;
    unpack_scales_mins_words(w[b].scales, sc8, m8);
    // summ = sum_g min[g / 2] bsums[g]: the mins doubled to 16 int16 lanes, one vpmaddwd.
    const __m128i m = _mm_cvtsi64_si128(static_cast<long long>(m8));
    const __m256i mins16 = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(m, m));
    const __m256i summ = _mm256_madd_epi16(mins16, load(x[b].bsums));
    const __m256i scales = _mm256_broadcastsi128_si256(
        _mm_cvtepu8_epi16(_mm_cvtsi64_si128(static_cast<long long>(sc8))));
    __m256i qh = _mm256_setzero_si256();
    if constexpr (kHigh) qh = load(w[b].qh);
    __m256i sum = _mm256_setzero_si256();
    for (int j = 0; j < 4; ++j) {
      const __m256i q = load(w[b].qs + kSub32 * j);
      __m256i lo = _mm256_and_si256(q, low4);
      __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), low4);
      if constexpr (kHigh) {
        lo = _mm256_or_si256(lo, _mm256_and_si256(bit_mask(qh, uint8_t(1u << (2 * j))), sixteen));
        hi = _mm256_or_si256(hi,
                             _mm256_and_si256(bit_mask(qh, uint8_t(1u << (2 * j + 1))), sixteen));
      }
      const int8_t* xs = x[b].qs + 2 * kSub32 * j;
      sum = scaled_add(sum, _mm256_maddubs_epi16(lo, load(xs)), pick_scale(scales, 2 * j));
      sum = scaled_add(sum, _mm256_maddubs_epi16(hi, load(xs + kSub32)),
                       pick_scale(scales, 2 * j + 1));
    }
    int32_t sumi, summ_i;
    sum_lanes2(sum, summ, sumi, summ_i);
    acc = finish(acc, sumi, summ_i, half(w[b].d), half(w[b].dmin), x[b].d);
  }
  return acc;
}

#endif  // ENGINE_SIMD != ENGINE_SIMD_NONE

}  // namespace

bool is_k_type(GGMLType type) {
  return type == GGMLType::Q4_K || type == GGMLType::Q5_K;
}

void quantize(const float* x, XBlock* out, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, x += kQK_K) {
    XBlock& o = out[b];
    float amax = 0.0f;
    bool finite = true;
    for (int i = 0; i < kQK_K; ++i) {
      finite = finite && std::isfinite(x[i]);
      amax = std::max(amax, std::fabs(x[i]));
    }
    std::memset(o.qs, 0, sizeof o.qs);
    std::memset(o.bsums, 0, sizeof o.bsums);
    // A NaN or infinity cannot become int8 (undefined behaviour): scale NaN, so every product
    // with this block is NaN and the run stops at the sampler. All zeros: scale 0.
    if (!finite || amax == 0.0f) {
      o.d = finite ? 0.0f : std::nanf("");
      continue;
    }
    const float id = kMaxQ / amax;
    o.d = amax / kMaxQ;
    for (int i = 0; i < kQK_K; ++i) {
      o.qs[i] = static_cast<int8_t>(std::nearbyint(x[i] * id));  // |.| <= 127: no overflow
      o.bsums[i / kGroup] = static_cast<int16_t>(o.bsums[i / kGroup] + o.qs[i]);
    }
  }
}

float dot_scalar(GGMLType type, const void* row, const XBlock* x, int64_t n_blocks) {
  switch (type) {
    case GGMLType::Q4_K:
      return dot_q45_k<BlockQ4_K, false>(static_cast<const BlockQ4_K*>(row), x, n_blocks);
    case GGMLType::Q5_K:
      return dot_q45_k<BlockQ5_K, true>(static_cast<const BlockQ5_K*>(row), x, n_blocks);
    default:
      fail("kquant::dot: type ", ggml_type_name(type), " is not Q4_K or Q5_K");
  }
}

float dot(GGMLType type, const void* row, const XBlock* x, int64_t n_blocks) {
#if ENGINE_SIMD != ENGINE_SIMD_NONE
  switch (type) {
    case GGMLType::Q4_K:
      return dot_q45_k_simd<BlockQ4_K, false>(static_cast<const BlockQ4_K*>(row), x, n_blocks);
    case GGMLType::Q5_K:
      return dot_q45_k_simd<BlockQ5_K, true>(static_cast<const BlockQ5_K*>(row), x, n_blocks);
    default:
      break;
  }
#endif
  return dot_scalar(type, row, x, n_blocks);
}

}  // namespace kquant
