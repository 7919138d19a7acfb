// kquants.cpp: K-quant weights dotted with Q8_K activations (see kquants.h), scalar and SIMD.
//
// Every kernel computes, per super-block, two exact int32 sums: sumi = sum over sub-blocks of the
// sub-block's integer scale times its integer dot product, and summ = sum over sub-blocks of the
// integer min times the activations' sum there. finish() turns them into floats in one fixed
// order, so the SIMD kernels equal the scalar ones bit for bit. Bounds: |q x| <= 63 x 127, 256 of
// them times a 6- or 8-bit scale stay below 2^31.
//
// The SIMD kernels use 256-bit registers: vpmaddubsw multiplies 32 unsigned weights (0..63) by
// 32 signed activations and adds neighbours into 16 int16 lanes (at most 2 x 63 x 127 = 16002:
// no saturation), then vpmaddwd (AVX2) or vpdpwssd (AVX-512 VNNI, which also adds) multiplies
// those by the sub-block's scale and adds neighbours into 8 int32 lanes. Signed weights (Q3_K's
// -4..3, Q6_K's -32..31) are stored with an offset, so they enter as unsigned values and the
// offset times the group sums is taken off afterwards.
#include "kquants.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "error.h"
#include "simd.h"

#if ENGINE_SIMD != ENGINE_SIMD_NONE
// GCC 12.2's AVX-512 headers trip its own -Wuninitialized (bug 105593), as in simd.cpp.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#endif

namespace kquant {
namespace {

constexpr int kSub32 = 32;          // weights in a Q4_K/Q5_K sub-block
constexpr int kQ6Offset = 32;       // Q6_K stores q + 32
constexpr int kQ3Offset = 4;        // Q3_K's low 2 bits plus 4 x (high bit) = q + 4
constexpr int kQ3ScaleOffset = 32;  // Q3_K's 6-bit scales are stored + 32
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

/// Q3_K: 16 6-bit scales in 12 bytes: low 4 bits in bytes 0-7 (low nibble for scales 0-7, high
/// for 8-15), top 2 bits in bytes 8-11 (scale i: bits 2(i/4)..2(i/4)+1 of byte 8 + i%4). Stored
/// + 32: returns them signed.
void unpack_q3_scales(const uint8_t* s, int8_t* sc) {
  constexpr int kScales = 16;
  for (int i = 0; i < kScales; ++i) {
    const int low = i < 8 ? s[i] & 0x0F : s[i - 8] >> 4;
    const int high = (s[8 + i % 4] >> (2 * (i / 4))) & 3;
    sc[i] = static_cast<int8_t>((low | (high << 4)) - kQ3ScaleOffset);
  }
}

/// Sum over the sub-blocks of min x (the activations' sum there), for 8 sub-blocks of 32.
int32_t mins_times_sums(const uint8_t* m, const int16_t* bsums) {
  int32_t s = 0;
  for (int j = 0; j < 8; ++j) s += m[j] * (bsums[2 * j] + bsums[2 * j + 1]);
  return s;
}

// ---- scalar kernels: weight order exactly as common/'s dequantizers ----

float dot_q2_k(const BlockQ2_K* w, const XBlock* x, int64_t nb) {
  float acc = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    int32_t sumi = 0, summ = 0;
    for (int g = 0; g < kQK_K / kGroup; ++g) summ += (w[b].scales[g] >> 4) * x[b].bsums[g];
    for (int n = 0; n < 2; ++n) {  // halves of 128: 32 bytes of qs, 4 shifts
      const uint8_t* q = w[b].qs + 32 * n;
      for (int j = 0; j < 4; ++j) {
        for (int part = 0; part < 2; ++part) {  // groups of 16
          const int g = 8 * n + 2 * j + part;
          int32_t dot = 0;
          for (int l = 16 * part; l < 16 * part + 16; ++l)
            dot += ((q[l] >> (2 * j)) & 3) * x[b].qs[128 * n + 32 * j + l];
          sumi += (w[b].scales[g] & 0x0F) * dot;
        }
      }
    }
    acc = finish(acc, sumi, summ, fp16_to_fp32(w[b].d), fp16_to_fp32(w[b].dmin), x[b].d);
  }
  return acc;
}

float dot_q3_k(const BlockQ3_K* w, const XBlock* x, int64_t nb) {
  float acc = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    int8_t sc[16];
    unpack_q3_scales(w[b].scales, sc);
    int32_t sumi = 0;
    for (int n = 0; n < 2; ++n) {
      const uint8_t* q = w[b].qs + 32 * n;
      for (int j = 0; j < 4; ++j) {
        const uint8_t bit = uint8_t(1u << (4 * n + j));  // hmask bit of this quarter
        for (int part = 0; part < 2; ++part) {
          int32_t dot = 0;
          for (int l = 16 * part; l < 16 * part + 16; ++l) {
            const int v = ((q[l] >> (2 * j)) & 3) - ((w[b].hmask[l] & bit) ? 0 : kQ3Offset);
            dot += v * x[b].qs[128 * n + 32 * j + l];
          }
          sumi += sc[8 * n + 2 * j + part] * dot;
        }
      }
    }
    acc = finish(acc, sumi, 0, fp16_to_fp32(w[b].d), 0.0f, x[b].d);
  }
  return acc;
}

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

float dot_q6_k(const BlockQ6_K* w, const XBlock* x, int64_t nb) {
  float acc = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    int32_t sumi = 0;
    for (int n = 0; n < 2; ++n) {  // halves of 128 weights
      const uint8_t* ql = w[b].ql + 64 * n;
      const uint8_t* qh = w[b].qh + 32 * n;
      for (int q = 0; q < 4; ++q) {  // quarters of 32: two groups of 16 each
        for (int part = 0; part < 2; ++part) {
          int32_t dot = 0;
          for (int l = 16 * part; l < 16 * part + 16; ++l) {
            const int low = (ql[l + 32 * (q & 1)] >> (4 * (q >> 1))) & 0x0F;
            const int high = (qh[l] >> (2 * q)) & 3;
            dot += ((low | (high << 4)) - kQ6Offset) * x[b].qs[128 * n + 32 * q + l];
          }
          sumi += w[b].scales[8 * n + 2 * q + part] * dot;
        }
      }
    }
    acc = finish(acc, sumi, 0, fp16_to_fp32(w[b].d), 0.0f, x[b].d);
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

inline int32_t sum_lanes(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));  // swap 64-bit halves
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));  // swap neighbours
  return _mm_cvtsi128_si32(s);
}

inline __m256i load(const void* p) {
  return _mm256_loadu_si256(static_cast<const __m256i*>(p));
}

/// Scales for 32 weights whose first 16 use s0 and last 16 use s1 (vpmaddubsw's int16 lanes
/// 0-7 hold the first 16 weights' pair sums).
inline __m256i two_scales(int s0, int s1) {
  return _mm256_set_m128i(_mm_set1_epi16(static_cast<int16_t>(s1)),
                          _mm_set1_epi16(static_cast<int16_t>(s0)));
}

/// 255 where bit of byte is set, else 0, for 32 bytes.
inline __m256i bit_mask(__m256i bytes, uint8_t bit) {
  const __m256i b = _mm256_set1_epi8(static_cast<char>(bit));
  return _mm256_cmpeq_epi8(_mm256_and_si256(bytes, b), b);
}

float dot_q2_k_simd(const BlockQ2_K* w, const XBlock* x, int64_t nb) {
  const __m256i three = _mm256_set1_epi8(3);
  float acc = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    int32_t summ = 0;
    for (int g = 0; g < kQK_K / kGroup; ++g) summ += (w[b].scales[g] >> 4) * x[b].bsums[g];
    __m256i sum = _mm256_setzero_si256();
    for (int n = 0; n < 2; ++n) {
      const __m256i q = load(w[b].qs + 32 * n);
      for (int j = 0; j < 4; ++j) {
        const __m256i v = _mm256_and_si256(_mm256_srli_epi16(q, 2 * j), three);
        const int g = 8 * n + 2 * j;
        const __m256i p = _mm256_maddubs_epi16(v, load(x[b].qs + 128 * n + 32 * j));
        sum = scaled_add(sum, p, two_scales(w[b].scales[g] & 0x0F, w[b].scales[g + 1] & 0x0F));
      }
    }
    acc = finish(acc, sum_lanes(sum), summ, fp16_to_fp32(w[b].d), fp16_to_fp32(w[b].dmin), x[b].d);
  }
  return acc;
}

float dot_q3_k_simd(const BlockQ3_K* w, const XBlock* x, int64_t nb) {
  const __m256i three = _mm256_set1_epi8(3);
  const __m256i four = _mm256_set1_epi8(kQ3Offset);
  float acc = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    int8_t sc[16];
    unpack_q3_scales(w[b].scales, sc);
    int32_t offset = 0;  // 4 x sum of scale x group sum: the offset the unsigned values carry
    for (int g = 0; g < kQK_K / kGroup; ++g) offset += sc[g] * x[b].bsums[g];
    const __m256i hmask = load(w[b].hmask);
    __m256i sum = _mm256_setzero_si256();
    for (int n = 0; n < 2; ++n) {
      const __m256i q = load(w[b].qs + 32 * n);
      for (int j = 0; j < 4; ++j) {
        const __m256i high = _mm256_and_si256(bit_mask(hmask, uint8_t(1u << (4 * n + j))), four);
        const __m256i v =
            _mm256_add_epi8(_mm256_and_si256(_mm256_srli_epi16(q, 2 * j), three), high);
        const int g = 8 * n + 2 * j;
        const __m256i p = _mm256_maddubs_epi16(v, load(x[b].qs + 128 * n + 32 * j));
        sum = scaled_add(sum, p, two_scales(sc[g], sc[g + 1]));
      }
    }
    acc = finish(acc, sum_lanes(sum) - kQ3Offset * offset, 0, fp16_to_fp32(w[b].d), 0.0f, x[b].d);
  }
  return acc;
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

/// For 32 weights in one register: int16 lanes 0-7 (the first 16 weights' pair sums) get lane
/// k0 of scales (8 int16 in each 128-bit half), lanes 8-15 get lane k1.
inline __m256i pick_scales(__m256i scales, int k0, int k1) {
  const __m256i mask =
      _mm256_set_m128i(_mm_load_si128(reinterpret_cast<const __m128i*>(kBroadcast16[k1])),
                       _mm_load_si128(reinterpret_cast<const __m128i*>(kBroadcast16[k0])));
  return _mm256_shuffle_epi8(scales, mask);
}

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

float dot_q6_k_simd(const BlockQ6_K* w, const XBlock* x, int64_t nb) {
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const __m256i two_bits = _mm256_set1_epi8(3);
  float acc = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    // The +32 of every stored weight: 32 x sum_g scale[g] bsums[g], one vpmaddwd, taken off
    // lane by lane before the one horizontal sum.
    const __m256i scales16 =
        _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w[b].scales)));
    __m256i sum =
        _mm256_sub_epi32(_mm256_setzero_si256(),
                         _mm256_slli_epi32(_mm256_madd_epi16(scales16, load(x[b].bsums)), 5));
    static_assert(kQ6Offset == 1 << 5, "the offset is taken off as a shift by 5");
    for (int n = 0; n < 2; ++n) {
      // This half's 8 scales as int16, in both 128-bit halves.
      const __m256i scales = _mm256_broadcastsi128_si256(
          n == 0 ? _mm256_castsi256_si128(scales16) : _mm256_extracti128_si256(scales16, 1));
      const __m256i ql0 = load(w[b].ql + 64 * n);
      const __m256i ql1 = load(w[b].ql + 64 * n + 32);
      const __m256i qh = load(w[b].qh + 32 * n);
      for (int q = 0; q < 4; ++q) {
        const __m256i ql = (q & 1) ? ql1 : ql0;
        const __m256i low = _mm256_and_si256(_mm256_srli_epi16(ql, 4 * (q >> 1)), low4);
        const __m256i high = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * q), two_bits);
        const __m256i v = _mm256_or_si256(low, _mm256_slli_epi16(high, 4));  // 0..63
        const __m256i p = _mm256_maddubs_epi16(v, load(x[b].qs + 128 * n + 32 * q));
        sum = scaled_add(sum, p, pick_scales(scales, 2 * q, 2 * q + 1));
      }
    }
    acc = finish(acc, sum_lanes(sum), 0, half(w[b].d), 0.0f, x[b].d);
  }
  return acc;
}

#endif  // ENGINE_SIMD != ENGINE_SIMD_NONE

// ---- the packed layout (kquants.h) ----

constexpr int kSlice = 64;  // bytes of one slice: 16 rows x 4
constexpr int kLaneBytes = 4;
constexpr int kHalfBytes = 32;                                            // 16 fp16
constexpr int kQ45Quants = kQK_K / 2 / kLaneBytes * kSlice;               // 2048
constexpr int kQ5High = kQK_K / 8 / kLaneBytes * kSlice;                  // 512
constexpr int kQ45Scales = 8 * kPackedRows;                               // 128
constexpr int kQ45Mins = 8 * kPackedRows;                                 // 128
constexpr int kQ6Quants = (kQK_K / 2 + kQK_K / 4) / kLaneBytes * kSlice;  // 3072
constexpr int kQ6Scales = kQK_K / kGroup * kPackedRows;                   // 256
constexpr int kQ6Tail = 2 * kHalfBytes;  // d and a cache line's padding

/// Bytes of a packed super-block of 16 rows: Q4_K (kHigh = false) or Q5_K, and Q6_K.
template <bool kHigh>
constexpr size_t q45_bytes() {
  return kQ45Quants + (kHigh ? kQ5High : 0) + kQ45Scales + kQ45Mins + 2 * kHalfBytes;
}
constexpr size_t kQ6Bytes = kQ6Quants + kQ6Scales + kQ6Tail;
static_assert(q45_bytes<false>() % kSlice == 0 && q45_bytes<true>() % kSlice == 0 &&
                  kQ6Bytes % kSlice == 0,
              "every super-block starts on a cache line: the kernels' loads are aligned");

/// Bytes 4v .. 4v + 3 of field (one row's) into lane r of the slice at out.
inline void put_lane(unsigned char* out, int r, const uint8_t* field, int v) {
  std::memcpy(out + r * kLaneBytes, field + kLaneBytes * v, kLaneBytes);
}

template <class Block, bool kHigh>
void pack_q45(const Block& w, int r, unsigned char* out) {
  constexpr int kChunks = 4, kSlicesPerChunk = 8;
  for (int j = 0; j < kChunks; ++j) {
    for (int v = 0; v < kSlicesPerChunk; ++v)
      put_lane(out + (kSlicesPerChunk * j + v) * kSlice, r, w.qs + kHalfBytes * j, v);
  }
  unsigned char* tail = out + kQ45Quants;
  if constexpr (kHigh) {
    for (int v = 0; v < kQK_K / 8 / kLaneBytes; ++v) put_lane(tail + v * kSlice, r, w.qh, v);
    tail += kQ5High;
  }
  uint8_t sc[8], m[8];
  unpack_scales_mins(w.scales, sc, m);
  for (int s = 0; s < 8; ++s) {
    tail[s * kPackedRows + r] = sc[s];
    tail[kQ45Scales + (s / 2) * 2 * kPackedRows + 2 * r + s % 2] = m[s];
  }
  tail += kQ45Scales + kQ45Mins;
  std::memcpy(tail + r * sizeof(uint16_t), &w.d, sizeof(uint16_t));
  std::memcpy(tail + kHalfBytes + r * sizeof(uint16_t), &w.dmin, sizeof(uint16_t));
}

void pack_q6(const BlockQ6_K& w, int r, unsigned char* out) {
  constexpr int kSlicesPerHalf = 8;
  for (int n = 0; n < 2; ++n) {
    for (int v = 0; v < kSlicesPerHalf; ++v) {
      unsigned char* at = out + (kSlicesPerHalf * n + v) * 3 * kSlice;
      put_lane(at, r, w.ql + 2 * kHalfBytes * n, v);
      put_lane(at + kSlice, r, w.ql + 2 * kHalfBytes * n + kHalfBytes, v);
      put_lane(at + 2 * kSlice, r, w.qh + kHalfBytes * n, v);
    }
  }
  for (int g = 0; g < kQK_K / kGroup; ++g)
    out[kQ6Quants + g * kPackedRows + r] = static_cast<unsigned char>(w.scales[g]);
  std::memcpy(out + kQ6Quants + kQ6Scales + r * sizeof(uint16_t), &w.d, sizeof(uint16_t));
}

#if ENGINE_SIMD == ENGINE_SIMD_AVX512_VNNI

// ---- packed kernels: a group of 16 rows x T tokens, every sum in a register lane ----

/// Super-blocks the kernels prefetch ahead (~4.7 KB for Q4_K: past the prefetchers' 4 KiB page).
constexpr int kPrefetchAhead = 2;

inline __m512i broadcast4(const int8_t* q) {
  int32_t v;
  std::memcpy(&v, q, sizeof v);
  return _mm512_set1_epi32(v);
}
inline __m512i load_slice(const unsigned char* p) {
  return _mm512_load_si512(p);
}
inline void prefetch_line(const unsigned char* p) {
  _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T0);
}
/// Lines [from, bytes) of a super-block.
inline void prefetch_lines(const unsigned char* p, size_t from, size_t bytes) {
  for (size_t line = from; line < bytes; line += kSlice) prefetch_line(p + line);
}
/// Every byte's bit from (and those above it) moved to bit to: a 16-bit shift, whose bits
/// crossing into the other byte the caller masks off.
inline __m512i move_bits(__m512i v, int from, int to) {
  return from >= to ? _mm512_srli_epi16(v, from - to) : _mm512_slli_epi16(v, to - from);
}
/// 16 fp16 -> 16 floats.
inline __m512 load_halves(const unsigned char* p) {
  return _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(p)));
}
/// 16 bytes (one per row) -> 16 int32 lanes, unsigned or signed.
inline __m512i load_u8_rows(const unsigned char* p) {
  return _mm512_cvtepu8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(p)));
}
inline __m512i load_s8_rows(const unsigned char* p) {
  return _mm512_cvtepi8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(p)));
}

/// finish() for 16 rows: acc + d_w d_x sumi (- dmin_w d_x summ), the same roundings.
inline __m512 finish_rows(__m512 acc, __m512i sumi, __m512 d, float dx) {
  return _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi), _mm512_mul_ps(d, _mm512_set1_ps(dx)), acc);
}
inline __m512 finish_mins(__m512 acc, __m512i summ, __m512 dmin, float dx) {
  return _mm512_fnmadd_ps(_mm512_cvtepi32_ps(summ), _mm512_mul_ps(dmin, _mm512_set1_ps(dx)), acc);
}

/// Q4_K (kHigh = false) or Q5_K: one group x T tokens.
template <bool kHigh, int T>
void dot_group_q45(const unsigned char* group, int64_t n_blocks, const XBlock* x, float* y,
                   int64_t y_stride, int n_rows) {
  constexpr size_t kBytes = q45_bytes<kHigh>();
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  const __m512i fifth = _mm512_set1_epi8(16);
  __m512 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < n_blocks; ++b) {
    const unsigned char* blk = group + b * kBytes;
    // The super-block kPrefetchAhead on, a line per slice loaded: a burst of all 37 lines at
    // once filled the core's line-fill buffers, and the prefetches stalled (perf: 80% of decode's
    // samples on one prefetcht0).
    const unsigned char* next = blk + kPrefetchAhead * kBytes;
    const unsigned char* high = blk + kQ45Quants;
    const unsigned char* scales = high + (kHigh ? kQ5High : 0);
    const unsigned char* mins = scales + kQ45Scales;
    const unsigned char* halves = mins + kQ45Mins;
    __m512i sumi[T];
    for (int t = 0; t < T; ++t) sumi[t] = _mm512_setzero_si512();
    for (int j = 0; j < 4; ++j) {  // chunk j: sub-blocks 2j (low nibbles) and 2j + 1 (high)
      __m512i lo[T], hi[T];
      for (int t = 0; t < T; ++t) lo[t] = hi[t] = _mm512_setzero_si512();
#pragma GCC unroll 8
      for (int v = 0; v < 8; ++v) {
        prefetch_line(next + (8 * j + v) * kSlice);
        const __m512i q = load_slice(blk + (8 * j + v) * kSlice);
        __m512i wl = _mm512_and_si512(q, low4);
        __m512i wh = _mm512_and_si512(_mm512_srli_epi16(q, 4), low4);
        if constexpr (kHigh) {  // bit 2j of qh to bit 4 of the low weight, 2j + 1 of the high
          if (j == 0) prefetch_line(next + kQ45Quants + v * kSlice);
          const __m512i h = load_slice(high + v * kSlice);
          wl = _mm512_or_si512(wl, _mm512_and_si512(move_bits(h, 2 * j, 4), fifth));
          wh = _mm512_or_si512(wh, _mm512_and_si512(move_bits(h, 2 * j + 1, 4), fifth));
        }
        for (int t = 0; t < T; ++t) {
          const int8_t* xs = x[t * n_blocks + b].qs + 2 * kSub32 * j + kLaneBytes * v;
          lo[t] = _mm512_dpbusd_epi32(lo[t], wl, broadcast4(xs));
          hi[t] = _mm512_dpbusd_epi32(hi[t], wh, broadcast4(xs + kSub32));
        }
      }
      const __m512i sc_lo = load_u8_rows(scales + 2 * j * kPackedRows);
      const __m512i sc_hi = load_u8_rows(scales + (2 * j + 1) * kPackedRows);
      for (int t = 0; t < T; ++t) {
        sumi[t] = _mm512_add_epi32(sumi[t], _mm512_mullo_epi32(lo[t], sc_lo));
        sumi[t] = _mm512_add_epi32(sumi[t], _mm512_mullo_epi32(hi[t], sc_hi));
      }
    }
    prefetch_lines(next, halves - blk - (kQ45Scales + kQ45Mins), kBytes);
    const __m512 d = load_halves(halves);
    const __m512 dmin = load_halves(halves + kHalfBytes);
    for (int t = 0; t < T; ++t) {
      // summ: sub-block mins x the activations' sums over them, a pair of sub-blocks per
      // vpdpwssd (each sum of 32 int8 fits an int16).
      const XBlock& xb = x[t * n_blocks + b];
      const __m128i sums32 =
          _mm_hadd_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(xb.bsums)),
                         _mm_loadu_si128(reinterpret_cast<const __m128i*>(xb.bsums + 8)));
      __m512i summ = _mm512_setzero_si512();
      alignas(16) int32_t pairs[4];
      _mm_store_si128(reinterpret_cast<__m128i*>(pairs), sums32);
      for (int k = 0; k < 4; ++k) {
        const __m512i m = _mm512_cvtepu8_epi16(
            _mm256_load_si256(reinterpret_cast<const __m256i*>(mins + 2 * k * kPackedRows)));
        summ = _mm512_dpwssd_epi32(summ, m, _mm512_set1_epi32(pairs[k]));
      }
      acc[t] = finish_mins(finish_rows(acc[t], sumi[t], d, xb.d), summ, dmin, xb.d);
    }
  }
  const __mmask16 keep = static_cast<__mmask16>((1u << n_rows) - 1);
  for (int t = 0; t < T; ++t) _mm512_mask_storeu_ps(y + t * y_stride, keep, acc[t]);
}

/// Q6_K: one group x T tokens. Weights enter as 0..63 (stored + 32); each group of 16's dot
/// starts at -32 x its activations' sum.
template <int T>
void dot_group_q6(const unsigned char* group, int64_t n_blocks, const XBlock* x, float* y,
                  int64_t y_stride, int n_rows) {
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  const __m512i two_bits = _mm512_set1_epi8(0x30);
  __m512 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < n_blocks; ++b) {
    const unsigned char* blk = group + b * kQ6Bytes;
    const unsigned char* next = blk + kPrefetchAhead * kQ6Bytes;  // as dot_group_q45
    __m512i sumi[T];
    for (int t = 0; t < T; ++t) sumi[t] = _mm512_setzero_si512();
    for (int n = 0; n < 2; ++n) {
      for (int part = 0; part < 2; ++part) {  // quarter q's group 8n + 2q + part, q = 0..3
        __m512i dot[4][T];
        for (int q = 0; q < 4; ++q) {
          for (int t = 0; t < T; ++t)
            dot[q][t] =
                _mm512_set1_epi32(-kQ6Offset * x[t * n_blocks + b].bsums[8 * n + 2 * q + part]);
        }
#pragma GCC unroll 4
        for (int v = 4 * part; v < 4 * part + 4; ++v) {  // weights 128n + 32q + 4v .., each q
          const unsigned char* at = blk + (8 * n + v) * 3 * kSlice;
          prefetch_lines(next, at - blk, at - blk + 3 * kSlice);
          const __m512i ql[2] = {load_slice(at), load_slice(at + kSlice)};
          const __m512i qh = load_slice(at + 2 * kSlice);
#pragma GCC unroll 4
          for (int q = 0; q < 4; ++q) {
            const __m512i low =
                _mm512_and_si512(q >= 2 ? _mm512_srli_epi16(ql[q & 1], 4) : ql[q & 1], low4);
            const __m512i top = _mm512_and_si512(move_bits(qh, 2 * q, 4), two_bits);  // bits 4, 5
            const __m512i w = _mm512_or_si512(low, top);
            for (int t = 0; t < T; ++t) {
              const int8_t* xs = x[t * n_blocks + b].qs + 128 * n + 32 * q + kLaneBytes * v;
              dot[q][t] = _mm512_dpbusd_epi32(dot[q][t], w, broadcast4(xs));
            }
          }
        }
        for (int q = 0; q < 4; ++q) {
          const __m512i sc = load_s8_rows(blk + kQ6Quants + (8 * n + 2 * q + part) * kPackedRows);
          for (int t = 0; t < T; ++t)
            sumi[t] = _mm512_add_epi32(sumi[t], _mm512_mullo_epi32(dot[q][t], sc));
        }
      }
    }
    prefetch_lines(next, kQ6Quants, kQ6Bytes);
    const __m512 d = load_halves(blk + kQ6Quants + kQ6Scales);
    for (int t = 0; t < T; ++t) acc[t] = finish_rows(acc[t], sumi[t], d, x[t * n_blocks + b].d);
  }
  const __mmask16 keep = static_cast<__mmask16>((1u << n_rows) - 1);
  for (int t = 0; t < T; ++t) _mm512_mask_storeu_ps(y + t * y_stride, keep, acc[t]);
}

/// One group x T tokens (dot_group_q45, dot_group_q6).
template <int T>
using GroupKernel = void (*)(const unsigned char*, int64_t, const XBlock*, float*, int64_t, int);

/// Token tiles of T outside, groups inside: a tile's activations stay in L1 while the rows go
/// by; the tokens left over go one at a time.
template <int T>
void dot_tiles(GroupKernel<T> tile, GroupKernel<1> one, const unsigned char* first,
               size_t group_bytes, int64_t n_rows, const XBlock* x, int64_t n_blocks, int n_tokens,
               float* y, int64_t y_stride) {
  int t = 0;
  for (; t < n_tokens; t += (t + T <= n_tokens ? T : 1)) {
    for (int64_t r = 0; r < n_rows; r += kPackedRows) {
      const int rows = static_cast<int>(std::min<int64_t>(kPackedRows, n_rows - r));
      (t + T <= n_tokens ? tile : one)(first + r / kPackedRows * group_bytes, n_blocks,
                                       x + t * n_blocks, y + t * y_stride + r, y_stride, rows);
    }
  }
}

#endif  // ENGINE_SIMD == ENGINE_SIMD_AVX512_VNNI

}  // namespace

bool packs(GGMLType type) {
  return ENGINE_SIMD == ENGINE_SIMD_AVX512_VNNI &&
         (type == GGMLType::Q4_K || type == GGMLType::Q5_K || type == GGMLType::Q6_K);
}

size_t packed_block_bytes(GGMLType type) {
  switch (type) {
    case GGMLType::Q4_K:
      return q45_bytes<false>();
    case GGMLType::Q5_K:
      return q45_bytes<true>();
    case GGMLType::Q6_K:
      return kQ6Bytes;
    default:
      fail("kquant::packed_block_bytes: type ", ggml_type_name(type), " is not packed");
  }
}

void pack_group(GGMLType type, const unsigned char* first, size_t row_bytes, int n_rows,
                int64_t n_blocks, unsigned char* out) {
  const size_t bytes = packed_block_bytes(type);
  for (int r = 0; r < n_rows; ++r) {
    const unsigned char* row = first + r * row_bytes;
    for (int64_t b = 0; b < n_blocks; ++b) {
      unsigned char* at = out + b * bytes;
      switch (type) {
        case GGMLType::Q4_K:
          pack_q45<BlockQ4_K, false>(reinterpret_cast<const BlockQ4_K*>(row)[b], r, at);
          break;
        case GGMLType::Q5_K:
          pack_q45<BlockQ5_K, true>(reinterpret_cast<const BlockQ5_K*>(row)[b], r, at);
          break;
        default:
          pack_q6(reinterpret_cast<const BlockQ6_K*>(row)[b], r, at);
          break;
      }
    }
  }
}

void dot_packed([[maybe_unused]] GGMLType type, [[maybe_unused]] const unsigned char* packed,
                [[maybe_unused]] size_t group_bytes, [[maybe_unused]] int64_t row0,
                [[maybe_unused]] int64_t n_rows, [[maybe_unused]] const XBlock* x,
                [[maybe_unused]] int64_t n_blocks, [[maybe_unused]] int n_tokens,
                [[maybe_unused]] float* y, [[maybe_unused]] int64_t y_stride) {
#if ENGINE_SIMD == ENGINE_SIMD_AVX512_VNNI
  const unsigned char* first = packed + row0 / kPackedRows * group_bytes;
  // Tokens per tile, measured on 64 tokens: Q4_K 8 x (two sub-blocks' dots, the int sums, the
  // float sums) = 32 registers, 12% faster than 4; Q6_K 4 x (four quarters' dots, the sums),
  // where 8 spilled and ran 15% slower.
  switch (type) {
    case GGMLType::Q4_K:
      return dot_tiles<8>(dot_group_q45<false, 8>, dot_group_q45<false, 1>, first, group_bytes,
                          n_rows, x, n_blocks, n_tokens, y, y_stride);
    case GGMLType::Q5_K:
      return dot_tiles<8>(dot_group_q45<true, 8>, dot_group_q45<true, 1>, first, group_bytes,
                          n_rows, x, n_blocks, n_tokens, y, y_stride);
    case GGMLType::Q6_K:
      return dot_tiles<4>(dot_group_q6<4>, dot_group_q6<1>, first, group_bytes, n_rows, x, n_blocks,
                          n_tokens, y, y_stride);
    default:
      break;
  }
#endif
  fail("kquant::dot_packed: no packed kernel for ", ggml_type_name(type), " in this build");
}

bool is_k_type(GGMLType type) {
  return type == GGMLType::Q2_K || type == GGMLType::Q3_K || type == GGMLType::Q4_K ||
         type == GGMLType::Q5_K || type == GGMLType::Q6_K;
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
    case GGMLType::Q2_K:
      return dot_q2_k(static_cast<const BlockQ2_K*>(row), x, n_blocks);
    case GGMLType::Q3_K:
      return dot_q3_k(static_cast<const BlockQ3_K*>(row), x, n_blocks);
    case GGMLType::Q4_K:
      return dot_q45_k<BlockQ4_K, false>(static_cast<const BlockQ4_K*>(row), x, n_blocks);
    case GGMLType::Q5_K:
      return dot_q45_k<BlockQ5_K, true>(static_cast<const BlockQ5_K*>(row), x, n_blocks);
    case GGMLType::Q6_K:
      return dot_q6_k(static_cast<const BlockQ6_K*>(row), x, n_blocks);
    default:
      fail("kquant::dot: type ", ggml_type_name(type), " is not a K-quant");
  }
}

float dot(GGMLType type, const void* row, const XBlock* x, int64_t n_blocks) {
#if ENGINE_SIMD != ENGINE_SIMD_NONE
  switch (type) {
    case GGMLType::Q2_K:
      return dot_q2_k_simd(static_cast<const BlockQ2_K*>(row), x, n_blocks);
    case GGMLType::Q3_K:
      return dot_q3_k_simd(static_cast<const BlockQ3_K*>(row), x, n_blocks);
    case GGMLType::Q4_K:
      return dot_q45_k_simd<BlockQ4_K, false>(static_cast<const BlockQ4_K*>(row), x, n_blocks);
    case GGMLType::Q5_K:
      return dot_q45_k_simd<BlockQ5_K, true>(static_cast<const BlockQ5_K*>(row), x, n_blocks);
    case GGMLType::Q6_K:
      return dot_q6_k_simd(static_cast<const BlockQ6_K*>(row), x, n_blocks);
    default:
      break;
  }
#endif
  return dot_scalar(type, row, x, n_blocks);
}

}  // namespace kquant
