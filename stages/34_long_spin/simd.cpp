// simd.cpp: the dot products of matmul.cpp in AVX-512 or AVX2 (see simd.h for which).
//
// Quantized weights (Q4_0, Q8_0) meet activations quantized to Q8_0: int8 x int8 products summed
// exactly in int32 by the vector unit, then scaled. The weights are repacked at load
// (simd.h's layout), so each int32 lane of a register is one row and 4 activations broadcast to
// all lanes serve 16 rows at once: per block and 16 rows, 4 loads, 12 instructions to unpack and
// 8 vpdpbusd per token, against 16 x ~6 instructions for tiles of the file's layout.
//
// Q6_K joins the other K-quants in kquants.cpp, with integer activations.
//
// Float weights (F32, F16) keep fp32 activations and use fused multiply-adds, 16 (AVX-512)
// or 8 (AVX2) lanes wide; their sums associate differently from the scalar loops, so they agree
// with them to rounding, not bit for bit.
#include "simd.h"

#include "amx.h"

#if ENGINE_SIMD != ENGINE_SIMD_NONE

// GCC 12.2's AVX-512 headers trip its own -Wuninitialized on their _mm512_undefined_*()
// placeholders (GCC bug 105593, fixed in 12.3): silenced for these headers only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>

namespace simd {
namespace {

// ---- packed Q4_0 / Q8_0 groups x XBlock activations ----
//
// The vector instructions multiply unsigned bytes by signed bytes (u8 x s8), 4 adjacent products
// summed into each int32 lane. Q4_0 nibbles are 0..15 and stand for nibble - 8: the sum starts
// at -8 sum(x) (XBlock::sum), and the nibbles go in as they are. Q8_0 weights are signed: |w| x
// (x with w's sign) gives the same products with an unsigned left side. Nothing overflows:
// |x| <= 127, |w| <= 128, and AVX2's int16 pair sums stay <= 2 x 128 x 127 = 32512 < 32767.

constexpr int kNibbleMask = 0x0F;
constexpr int kNibbleBits = 4;
constexpr int kQ4Offset = 8;
constexpr int kQ4Slices = kQK4_0 / 2 / kBytesPerLane;  // 4 slices of 16 rows x 4 qs bytes
constexpr int kQ8Slices = kQK8_0 / kBytesPerLane;      // 8

/// 4 int8 activations as one int32, for broadcasting to every lane.
inline int32_t four(const int8_t* q) {
  int32_t v;
  std::memcpy(&v, q, sizeof v);
  return v;
}

#if ENGINE_SIMD == ENGINE_SIMD_AVX512_VNNI

// 16 rows = the 16 int32 or float lanes of one 512-bit register.
using IntRows = __m512i;
using FloatRows = __m512;
using Slice = __m512i;  // 16 rows x 4 bytes

inline IntRows splat(int32_t v) {
  return _mm512_set1_epi32(v);
}
inline FloatRows zero_rows() {
  return _mm512_setzero_ps();
}
inline Slice load_slice(const unsigned char* p) {
  return _mm512_load_si512(p);
}
inline Slice low_nibbles(Slice s) {
  return _mm512_and_si512(s, _mm512_set1_epi8(kNibbleMask));
}
inline Slice high_nibbles(Slice s) {
  return _mm512_and_si512(_mm512_srli_epi16(s, kNibbleBits), _mm512_set1_epi8(kNibbleMask));
}
/// lane r += 4 products of row r's unsigned bytes and the 4 activations x4.
inline IntRows dot4(IntRows acc, Slice w, int32_t x4) {
  return _mm512_dpbusd_epi32(acc, w, _mm512_set1_epi32(x4));
}
/// The same for signed weights: vpsignb has no 512-bit form, so x is negated where w < 0.
inline IntRows dot4_signed(IntRows acc, Slice w, int32_t x4) {
  const __m512i x = _mm512_set1_epi32(x4);
  const __m512i signed_x =
      _mm512_mask_sub_epi8(x, _mm512_movepi8_mask(w), _mm512_setzero_si512(), x);
  return _mm512_dpbusd_epi32(acc, _mm512_abs_epi8(w), signed_x);
}
/// Q4_0's block sum: vpdpbusd adds straight into the int32 lanes, which start at the offset.
using Q4Sum = IntRows;
inline Q4Sum q4_start(int32_t offset) {
  return splat(offset);
}
inline Q4Sum q4_dot4(Q4Sum acc, Slice w, int32_t x4) {
  return dot4(acc, w, x4);
}
inline IntRows q4_finish(Q4Sum acc, int32_t /*offset, added at the start*/) {
  return acc;
}
/// The 16 rows' fp16 scales of a group-block.
inline FloatRows load_scales(const unsigned char* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
/// acc + float(dot) x (d_w x d_x), one rounding.
inline FloatRows scale_add(FloatRows acc, IntRows dot, FloatRows d_w, float d_x) {
  return _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(d_w, _mm512_set1_ps(d_x)), acc);
}
/// The first n (<= 16) rows to y.
inline void store_rows(float* y, FloatRows v, int n) {
  _mm512_mask_storeu_ps(y, static_cast<__mmask16>((1u << n) - 1), v);
}

#else  // AVX2: 16 rows = two 256-bit halves of 8 lanes

struct IntRows {
  __m256i lo, hi;
};
struct FloatRows {
  __m256 lo, hi;
};
using Slice = IntRows;

inline IntRows splat(int32_t v) {
  return {_mm256_set1_epi32(v), _mm256_set1_epi32(v)};
}
inline FloatRows zero_rows() {
  return {_mm256_setzero_ps(), _mm256_setzero_ps()};
}
inline Slice load_slice(const unsigned char* p) {
  return {_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)),
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + sizeof(__m256i)))};
}
inline __m256i low_nibbles(__m256i s) {
  return _mm256_and_si256(s, _mm256_set1_epi8(kNibbleMask));
}
inline __m256i high_nibbles(__m256i s) {
  return low_nibbles(_mm256_srli_epi16(s, kNibbleBits));
}
inline Slice low_nibbles(Slice s) {
  return {low_nibbles(s.lo), low_nibbles(s.hi)};
}
inline Slice high_nibbles(Slice s) {
  return {high_nibbles(s.lo), high_nibbles(s.hi)};
}
// vpmaddubsw: int16 lane = 2 adjacent u8 x s8 products; vpmaddwd with ones: int32 lane = 4.
inline __m256i dot4(__m256i acc, __m256i w, __m256i x) {
  const __m256i pairs = _mm256_maddubs_epi16(w, x);
  return _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
}
inline IntRows dot4(IntRows acc, Slice w, int32_t x4) {
  const __m256i x = _mm256_set1_epi32(x4);
  return {dot4(acc.lo, w.lo, x), dot4(acc.hi, w.hi, x)};
}
inline IntRows dot4_signed(IntRows acc, Slice w, int32_t x4) {
  const __m256i x = _mm256_set1_epi32(x4);
  return {dot4(acc.lo, _mm256_abs_epi8(w.lo), _mm256_sign_epi8(x, w.lo)),
          dot4(acc.hi, _mm256_abs_epi8(w.hi), _mm256_sign_epi8(x, w.hi))};
}
// Q4_0's block sum in int16 lanes. Nibbles are 0..15 and |x| <= 127, so one vpmaddubsw lane is
// at most 2 x 15 x 127 = 3810, and a block's 8 (4 slices x 2 nibble halves: 16 products a lane)
// sum to at most 30480 < 32767 without saturating: one vpaddw each instead of vpmaddwd + vpaddd,
// then one vpmaddwd per block widens the pairs to int32. The same exact int32 sum, the same bits.
// (Q8_0's |w| <= 128 leaves no such room: 2 products can reach 32512.)
using Q4Sum = IntRows;  // 16 int16 lanes in each half
inline Q4Sum q4_start(int32_t /*offset, added at the finish*/) {
  return splat(0);
}
inline Q4Sum q4_dot4(Q4Sum acc, Slice w, int32_t x4) {
  const __m256i x = _mm256_set1_epi32(x4);
  return {_mm256_add_epi16(acc.lo, _mm256_maddubs_epi16(w.lo, x)),
          _mm256_add_epi16(acc.hi, _mm256_maddubs_epi16(w.hi, x))};
}
inline IntRows q4_finish(Q4Sum acc, int32_t offset) {
  const __m256i ones = _mm256_set1_epi16(1);
  const __m256i start = _mm256_set1_epi32(offset);
  return {_mm256_add_epi32(start, _mm256_madd_epi16(acc.lo, ones)),
          _mm256_add_epi32(start, _mm256_madd_epi16(acc.hi, ones))};
}
inline FloatRows load_scales(const unsigned char* p) {
  const auto* h = reinterpret_cast<const __m128i*>(p);
  return {_mm256_cvtph_ps(_mm_loadu_si128(h)), _mm256_cvtph_ps(_mm_loadu_si128(h + 1))};
}
inline __m256 scale_add(__m256 acc, __m256i dot, __m256 d_w, float d_x) {
  return _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(d_w, _mm256_set1_ps(d_x)), acc);
}
inline FloatRows scale_add(FloatRows acc, IntRows dot, FloatRows d_w, float d_x) {
  return {scale_add(acc.lo, dot.lo, d_w.lo, d_x), scale_add(acc.hi, dot.hi, d_w.hi, d_x)};
}
inline void store_rows(float* y, FloatRows v, int n) {
  alignas(32) float all[kGroupRows];
  _mm256_store_ps(all, v.lo);
  _mm256_store_ps(all + kGroupRows / 2, v.hi);
  std::memcpy(y, all, n * sizeof(float));
}

#endif

// The two formats: how a group-block's slices meet a token's 32 int8 activations. A block's sum
// is a Sum from start(x's sum) on, dot() over the slices, then finish(): the int32 block dot.
struct Q4Format {
  static constexpr int kSlices = kQ4Slices;
  using Sum = Q4Sum;
  static Sum start(int32_t x_sum) { return q4_start(-kQ4Offset * x_sum); }
  /// Slice s: low nibbles = weights 4s.., high nibbles = weights 16 + 4s.. of each row.
  static Sum dot(Sum acc, Slice w, const int8_t* x, int s) {
    acc = q4_dot4(acc, low_nibbles(w), four(x + kBytesPerLane * s));
    return q4_dot4(acc, high_nibbles(w), four(x + kQK4_0 / 2 + kBytesPerLane * s));
  }
  static IntRows finish(Sum acc, int32_t x_sum) { return q4_finish(acc, -kQ4Offset * x_sum); }
};
struct Q8Format {
  static constexpr int kSlices = kQ8Slices;
  using Sum = IntRows;
  static Sum start(int32_t /*x_sum*/) { return splat(0); }
  static Sum dot(Sum acc, Slice w, const int8_t* x, int s) {
    return dot4_signed(acc, w, four(x + kBytesPerLane * s));
  }
  static IntRows finish(Sum acc, int32_t /*x_sum*/) { return acc; }
};

/// One tile: G groups (from tile, group_bytes apart) x T tokens, all in registers; the first
/// n_rows rows are stored (the last tile may hold padding rows).
template <class Format, int T, int G = kGroupsPerTile>
void dot_tile(const unsigned char* tile, size_t group_bytes, int64_t n_blocks, const XBlock* x,
              float* y, int64_t y_stride, int64_t n_rows) {
  constexpr size_t kQuantBytes = Format::kSlices * kSliceBytes;  // of one block
  FloatRows acc[G][T];
  for (int g = 0; g < G; ++g) {
    for (int t = 0; t < T; ++t) acc[g][t] = zero_rows();
  }
  // No software prefetch: each group is read front to back, a sequential stream the hardware
  // prefetchers follow (on 2 MiB pages since stage 30). The 5 prefetches per group and block
  // (9 for Q8_0) that stages 13-30 issue made decode slower, not faster (page 31).
  for (int64_t b = 0; b < n_blocks; ++b) {
    const unsigned char* block[G];   // the block's slices
    const unsigned char* scales[G];  // its 16 scales
    typename Format::Sum dot[G][T];
    for (int g = 0; g < G; ++g) {
      block[g] = tile + g * group_bytes + b * kQuantBytes;
      scales[g] = tile + g * group_bytes + n_blocks * kQuantBytes + b * kScaleBytes;
      for (int t = 0; t < T; ++t) dot[g][t] = Format::start(x[t * n_blocks + b].sum);
    }
    for (int s = 0; s < Format::kSlices; ++s) {
      for (int g = 0; g < G; ++g) {
        const Slice w = load_slice(block[g] + s * kSliceBytes);
        for (int t = 0; t < T; ++t)
          dot[g][t] = Format::dot(dot[g][t], w, x[t * n_blocks + b].qs, s);
      }
    }
    for (int g = 0; g < G; ++g) {
      const FloatRows d_w = load_scales(scales[g]);
      for (int t = 0; t < T; ++t) {
        const XBlock& xb = x[t * n_blocks + b];
        acc[g][t] = scale_add(acc[g][t], Format::finish(dot[g][t], xb.sum), d_w, xb.d);
      }
    }
  }
  for (int g = 0; g < G; ++g) {
    const int64_t rows = std::min<int64_t>(kGroupRows, n_rows - g * kGroupRows);
    if (rows <= 0) break;
    for (int t = 0; t < T; ++t) store_rows(y + t * y_stride + g * kGroupRows, acc[g][t], rows);
  }
}

/// Token tiles outside, row tiles inside: a token tile's activations (kTileTokens x 5 KB for
/// n = 4096) stay in L1 while the rows stream past them.
template <class Format>
void dot_block_rows(const unsigned char* packed, size_t group_bytes, int64_t row0, int64_t n_rows,
                    const XBlock* x, int64_t n_blocks, int n_tokens, float* y, int64_t y_stride) {
  const unsigned char* first = packed + row0 / kGroupRows * group_bytes;
  const size_t tile_bytes = kGroupsPerTile * group_bytes;
  // One token (decode): a pair of tiles at a time, then a last single tile if one is left. The
  // sums are the same, row for row; only the number of streams read at once changes (page 33).
  if (n_tokens == 1) {
    constexpr int64_t kPairRows = kDecodeTiles * kTileRows;
    int64_t r = 0;
    for (; r + kPairRows <= n_rows; r += kPairRows) {
      dot_tile<Format, 1, kDecodeTiles * kGroupsPerTile>(first + r / kTileRows * tile_bytes,
                                                         group_bytes, n_blocks, x, y + r, y_stride,
                                                         n_rows - r);
    }
    for (; r < n_rows; r += kTileRows) {
      dot_tile<Format, 1>(first + r / kTileRows * tile_bytes, group_bytes, n_blocks, x, y + r,
                          y_stride, n_rows - r);
    }
    return;
  }
  int t = 0;
  for (; t + kTileTokens <= n_tokens; t += kTileTokens) {
    for (int64_t r = 0; r < n_rows; r += kTileRows) {
      dot_tile<Format, kTileTokens>(first + r / kTileRows * tile_bytes, group_bytes, n_blocks,
                                    x + t * n_blocks, y + t * y_stride + r, y_stride, n_rows - r);
    }
  }
  for (; t < n_tokens; ++t) {
    for (int64_t r = 0; r < n_rows; r += kTileRows) {
      dot_tile<Format, 1>(first + r / kTileRows * tile_bytes, group_bytes, n_blocks,
                          x + t * n_blocks, y + t * y_stride + r, y_stride, n_rows - r);
    }
  }
}

// ---- float dot products ----

constexpr int kExpBias = 127;      // an IEEE float's exponent field holds e + 127
constexpr int kMantissaBits = 23;  // and starts above the 23 mantissa bits
constexpr int kSwapPairs = 0xB1;   // vpermilps lane order 1, 0, 3, 2 in each group of four

#if ENGINE_SIMD == ENGINE_SIMD_AVX512_VNNI

constexpr int kLanes = 16;
using FloatVec = __m512;
inline FloatVec zero_vec() {
  return _mm512_setzero_ps();
}
inline FloatVec load_f32(const float* p) {
  return _mm512_loadu_ps(p);
}
inline FloatVec load_f16(const uint16_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
inline FloatVec fmadd(FloatVec a, FloatVec b, FloatVec c) {
  return _mm512_fmadd_ps(a, b, c);
}
inline FloatVec add(FloatVec a, FloatVec b) {
  return _mm512_add_ps(a, b);
}
inline FloatVec mul(FloatVec a, FloatVec b) {
  return _mm512_mul_ps(a, b);
}
inline FloatVec broadcast(float v) {
  return _mm512_set1_ps(v);
}
inline float sum_lanes(FloatVec v) {
  return _mm512_reduce_add_ps(v);
}
inline void store_f32(float* p, FloatVec v) {
  _mm512_storeu_ps(p, v);
}
inline FloatVec sub(FloatVec a, FloatVec b) {
  return _mm512_sub_ps(a, b);
}
inline FloatVec div(FloatVec a, FloatVec b) {
  return _mm512_div_ps(a, b);
}
/// Lane-wise max and min; where one operand is NaN they return b, so NaN in b goes through.
inline FloatVec max(FloatVec a, FloatVec b) {
  return _mm512_max_ps(a, b);
}
inline FloatVec min(FloatVec a, FloatVec b) {
  return _mm512_min_ps(a, b);
}
inline float max_lanes(FloatVec v) {
  return _mm512_reduce_max_ps(v);
}
inline FloatVec round_to_int(FloatVec v) {
  return _mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
/// 2^n for whole numbers n in [-126, 127], written straight into the exponent bits.
inline FloatVec pow2(FloatVec n) {
  const __m512i biased = _mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(kExpBias));
  return _mm512_castsi512_ps(_mm512_slli_epi32(biased, kMantissaBits));
}
/// (x0, x1, x2, x3, ..) -> (x1, x0, x3, x2, ..)
inline FloatVec swap_pairs(FloatVec v) {
  return _mm512_permute_ps(v, kSwapPairs);
}

#else  // AVX2

constexpr int kLanes = 8;
using FloatVec = __m256;
inline FloatVec zero_vec() {
  return _mm256_setzero_ps();
}
inline FloatVec load_f32(const float* p) {
  return _mm256_loadu_ps(p);
}
inline FloatVec load_f16(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
inline FloatVec fmadd(FloatVec a, FloatVec b, FloatVec c) {
  return _mm256_fmadd_ps(a, b, c);
}
inline FloatVec add(FloatVec a, FloatVec b) {
  return _mm256_add_ps(a, b);
}
inline FloatVec mul(FloatVec a, FloatVec b) {
  return _mm256_mul_ps(a, b);
}
inline FloatVec broadcast(float v) {
  return _mm256_set1_ps(v);
}
inline float sum_lanes(FloatVec v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
inline void store_f32(float* p, FloatVec v) {
  _mm256_storeu_ps(p, v);
}
inline FloatVec sub(FloatVec a, FloatVec b) {
  return _mm256_sub_ps(a, b);
}
inline FloatVec div(FloatVec a, FloatVec b) {
  return _mm256_div_ps(a, b);
}
inline FloatVec max(FloatVec a, FloatVec b) {
  return _mm256_max_ps(a, b);
}
inline FloatVec min(FloatVec a, FloatVec b) {
  return _mm256_min_ps(a, b);
}
inline float max_lanes(FloatVec v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}
inline FloatVec round_to_int(FloatVec v) {
  return _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
inline FloatVec pow2(FloatVec n) {
  const __m256i biased = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(kExpBias));
  return _mm256_castsi256_ps(_mm256_slli_epi32(biased, kMantissaBits));
}
inline FloatVec swap_pairs(FloatVec v) {
  return _mm256_permute_ps(v, kSwapPairs);
}

#endif

// ---- kKeyBlock registers summed lane by lane ----
//
// sum_each(v) has in lane j the sum of v[j]'s lanes. Round 1 adds pairs of registers interleaved
// (unpcklps, unpckhps), so that each 128-bit lane holds partial sums of two registers; round 2
// (shufps) finishes each lane's sums of four registers; the last rounds add the 128-bit lanes
// (vshuff32x4; AVX2: vperm2f128). 15 + 12 + 6 + 3 instructions for 16 registers (AVX2: 12 + 6 +
// 3 for 8), against 16 horizontal sums of ~8 each.

constexpr int kLowPairs = 0x44;   // shufps: elements 0, 1 of a, then 0, 1 of b, in each lane
constexpr int kHighPairs = 0xEE;  // elements 2, 3 of a, then of b
#if ENGINE_SIMD == ENGINE_SIMD_AVX512_VNNI
constexpr int kEvenLanes = 0x88;  // vshuff32x4: 128-bit lanes 0, 2 of a, then 0, 2 of b
constexpr int kOddLanes = 0xDD;   // lanes 1, 3 of a, then 1, 3 of b

FloatVec sum_each(const FloatVec (&v)[kLanes]) {
  FloatVec pairs[kLanes / 2], quads[kLanes / 4], halves[kLanes / 8];
  for (int i = 0; i < kLanes / 2; ++i) {
    pairs[i] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]),
                             _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]));
  }
  for (int i = 0; i < kLanes / 4; ++i) {
    quads[i] = _mm512_add_ps(_mm512_shuffle_ps(pairs[2 * i], pairs[2 * i + 1], kLowPairs),
                             _mm512_shuffle_ps(pairs[2 * i], pairs[2 * i + 1], kHighPairs));
  }
  for (int i = 0; i < kLanes / 8; ++i) {
    halves[i] = _mm512_add_ps(_mm512_shuffle_f32x4(quads[2 * i], quads[2 * i + 1], kEvenLanes),
                              _mm512_shuffle_f32x4(quads[2 * i], quads[2 * i + 1], kOddLanes));
  }
  return _mm512_add_ps(_mm512_shuffle_f32x4(halves[0], halves[1], kEvenLanes),
                       _mm512_shuffle_f32x4(halves[0], halves[1], kOddLanes));
}
#else
constexpr int kLowHalves = 0x20;   // vperm2f128: the low 128 bits of a, then of b
constexpr int kHighHalves = 0x31;  // the high 128 bits of a, then of b

FloatVec sum_each(const FloatVec (&v)[kLanes]) {
  FloatVec pairs[kLanes / 2], quads[kLanes / 4];
  for (int i = 0; i < kLanes / 2; ++i) {
    pairs[i] = _mm256_add_ps(_mm256_unpacklo_ps(v[2 * i], v[2 * i + 1]),
                             _mm256_unpackhi_ps(v[2 * i], v[2 * i + 1]));
  }
  for (int i = 0; i < kLanes / 4; ++i) {
    quads[i] = _mm256_add_ps(_mm256_shuffle_ps(pairs[2 * i], pairs[2 * i + 1], kLowPairs),
                             _mm256_shuffle_ps(pairs[2 * i], pairs[2 * i + 1], kHighPairs));
  }
  return _mm256_add_ps(_mm256_permute2f128_ps(quads[0], quads[1], kLowHalves),
                       _mm256_permute2f128_ps(quads[0], quads[1], kHighHalves));
}
#endif

// Four independent accumulators: a fused multiply-add takes 4 cycles, so a single running sum
// would allow one every 4 cycles; four chains overlap.
constexpr int kAccumulators = 4;

/// w (n,) . x (n,): Load(p) gives kLanes weights from p as floats, Scalar(w) one weight.
template <class T, FloatVec (*Load)(const T*), float (*Scalar)(T)>
float dot_float(const T* w, const float* x, int64_t n) {
  FloatVec acc[kAccumulators] = {zero_vec(), zero_vec(), zero_vec(), zero_vec()};
  constexpr int64_t kStep = kAccumulators * kLanes;
  int64_t k = 0;
  for (; k + kStep <= n; k += kStep) {
    for (int a = 0; a < kAccumulators; ++a) {
      acc[a] = fmadd(Load(w + k + a * kLanes), load_f32(x + k + a * kLanes), acc[a]);
    }
  }
  for (; k + kLanes <= n; k += kLanes) acc[0] = fmadd(Load(w + k), load_f32(x + k), acc[0]);
  float sum = sum_lanes(add(add(acc[0], acc[1]), add(acc[2], acc[3])));
  for (; k < n; ++k) sum += Scalar(w[k]) * x[k];  // fewer than kLanes left
  return sum;
}

inline float f32_value(float w) {
  return w;
}
inline float f16_value(uint16_t w) {
  return _cvtsh_ss(w);
}

// ---- e^x, kLanes at a time ----
//
// e^x = 2^n e^r with n = round(x / ln 2) and |r| <= ln 2 / 2. r = x - n ln 2 takes ln 2 in two
// parts: kLn2High has 9 significant bits, so n x kLn2High is exact for |n| <= 150. e^r is its
// Taylor series to r^6: the next term is below 0.347^7 / 7! = 1.2e-7, about one float ulp. 2^n
// is applied in two halves, so that each is a normal float for every n in [-150, 128]: results
// under 2^-126 come out subnormal, as std::exp's do, e^-104 rounds to 0, and e^89 to infinity.
constexpr float kLog2E = 1.44269504f;
constexpr float kLn2High = 0.693359375f;
constexpr float kLn2Low = -2.12194440e-4f;  // ln 2 - kLn2High
constexpr float kExpMin = -104.0f;
constexpr float kExpMax = 89.0f;
constexpr float kTaylor[] = {1.0f / 720, 1.0f / 120, 1.0f / 24, 1.0f / 6, 1.0f / 2, 1.0f, 1.0f};

FloatVec exp_vec(FloatVec x) {
  // The constant goes first: max and min return their second operand when one is NaN.
  x = min(broadcast(kExpMax), max(broadcast(kExpMin), x));
  const FloatVec n = round_to_int(mul(x, broadcast(kLog2E)));
  FloatVec r = fmadd(n, broadcast(-kLn2High), x);
  r = fmadd(n, broadcast(-kLn2Low), r);
  FloatVec p = broadcast(kTaylor[0]);
  for (size_t k = 1; k < std::size(kTaylor); ++k) p = fmadd(p, r, broadcast(kTaylor[k]));
  const FloatVec half_n = round_to_int(mul(n, broadcast(0.5f)));
  return mul(mul(p, pow2(half_n)), pow2(sub(n, half_n)));
}

}  // namespace

float dot_f32(const float* w, const float* x, int64_t n) {
  return dot_float<float, load_f32, f32_value>(w, x, n);
}

float dot_f16(const uint16_t* w, const float* x, int64_t n) {
  return dot_float<uint16_t, load_f16, f16_value>(w, x, n);
}

double sum_of_squares(const float* x, int64_t n) {
  return dot_f32(x, x, n);
}

// ---- the elementwise kernels of ops.cpp ----
//
// Each loop runs kLanes elements at a time, then the fewer than kLanes left at the end in scalar
// code (std::exp, simd.h's rotate_pair).

void softmax(float* x, int64_t n) {
  int64_t k = 0;
  FloatVec vmax = broadcast(x[0]);
  for (; k + kLanes <= n; k += kLanes) vmax = max(vmax, load_f32(x + k));
  float max_value = max_lanes(vmax);
  for (; k < n; ++k) max_value = std::fmax(max_value, x[k]);

  FloatVec vsum = zero_vec();
  for (k = 0; k + kLanes <= n; k += kLanes) {
    const FloatVec e = exp_vec(sub(load_f32(x + k), broadcast(max_value)));
    store_f32(x + k, e);
    vsum = add(vsum, e);
  }
  float sum = sum_lanes(vsum);
  for (; k < n; ++k) {
    x[k] = std::exp(x[k] - max_value);
    sum += x[k];
  }

  const float inv_sum = 1.0f / sum;
  for (k = 0; k + kLanes <= n; k += kLanes)
    store_f32(x + k, mul(load_f32(x + k), broadcast(inv_sum)));
  for (; k < n; ++k) x[k] *= inv_sum;
}

void swiglu(float* gate, const float* up, int64_t n) {
  const FloatVec one = broadcast(1.0f);
  int64_t k = 0;
  for (; k + kLanes <= n; k += kLanes) {
    const FloatVec g = load_f32(gate + k);
    const FloatVec silu = div(g, add(one, exp_vec(sub(zero_vec(), g))));
    store_f32(gate + k, mul(silu, load_f32(up + k)));
  }
  for (; k < n; ++k) gate[k] = gate[k] / (1.0f + std::exp(-gate[k])) * up[k];
}

void rotate_head(float* x, const float* c, const float* s, int64_t n, bool adjacent) {
  int64_t k = 0;
  if (adjacent) {  // partner(j) = j ^ 1: the pair's other element sits in the same register
    for (; k + kLanes <= n; k += kLanes) {
      const FloatVec v = load_f32(x + k);
      store_f32(x + k, fmadd(swap_pairs(v), load_f32(s + k), mul(v, load_f32(c + k))));
    }
    for (int64_t i = k / 2; i < n / 2; ++i) rotate_pair(x, c, s, 2 * i, 2 * i + 1);
    return;
  }
  const int64_t half = n / 2;  // partner(j) = j + n / 2 for the first half, j - n / 2 after
  for (; k + kLanes <= half; k += kLanes) {
    const FloatVec a = load_f32(x + k);
    const FloatVec b = load_f32(x + half + k);
    store_f32(x + k, fmadd(b, load_f32(s + k), mul(a, load_f32(c + k))));
    store_f32(x + half + k, fmadd(a, load_f32(s + half + k), mul(b, load_f32(c + half + k))));
  }
  for (; k < half; ++k) rotate_pair(x, c, s, k, k + half);
}

static_assert(kKeyBlock == kLanes, "simd.h's kKeyBlock is one key per float lane");

void dot_keys(const float* q, const float* keys, int64_t stride, int64_t n, float scale,
              float* out) {
  FloatVec acc[kLanes];
  for (int j = 0; j < kLanes; ++j) acc[j] = zero_vec();
  for (int64_t k = 0; k < n; k += kLanes) {
    const FloatVec qk = load_f32(q + k);
    for (int j = 0; j < kLanes; ++j) acc[j] = fmadd(qk, load_f32(keys + j * stride + k), acc[j]);
  }
  store_f32(out, mul(sum_each(acc), broadcast(scale)));
}

void add_weighted_rows(float* out, const float* w, const float* rows, int64_t stride, int n_rows,
                       int64_t n) {
  constexpr int kRegisters = 8;  // of out at a time, 128 floats (AVX2: 64)
  int64_t k0 = 0;
  for (; k0 + kRegisters * kLanes <= n; k0 += kRegisters * kLanes) {
    FloatVec acc[kRegisters];
    for (int r = 0; r < kRegisters; ++r) acc[r] = load_f32(out + k0 + r * kLanes);
    for (int j = 0; j < n_rows; ++j) {
      const FloatVec weight = broadcast(w[j]);
      const float* row = rows + j * stride + k0;
      for (int r = 0; r < kRegisters; ++r)
        acc[r] = fmadd(weight, load_f32(row + r * kLanes), acc[r]);
    }
    for (int r = 0; r < kRegisters; ++r) store_f32(out + k0 + r * kLanes, acc[r]);
  }
  for (; k0 < n; k0 += kLanes) {  // fewer than kRegisters registers left
    FloatVec acc = load_f32(out + k0);
    for (int j = 0; j < n_rows; ++j)
      acc = fmadd(broadcast(w[j]), load_f32(rows + j * stride + k0), acc);
    store_f32(out + k0, acc);
  }
}

void dot_packed(GGMLType type, const unsigned char* packed, size_t group_bytes, int64_t row0,
                int64_t n_rows, const XBlock* x, [[maybe_unused]] const TokenTileBlock* tiles,
                int64_t n_blocks, int n_tokens, float* y, int64_t y_stride) {
#if ENGINE_SIMD == ENGINE_SIMD_AVX512_VNNI
  // Whole tiles of 16 tokens on AMX where the CPU has it (amx.h); the rest below.
  if (tiles != nullptr) {
    const int n_tiles = n_tokens / kAmxTokens;
    dot_packed_amx(type, packed, group_bytes, row0, n_rows, tiles, n_blocks, n_tiles, y, y_stride);
    x += n_tiles * kAmxTokens * n_blocks;
    y += n_tiles * kAmxTokens * y_stride;
    n_tokens -= n_tiles * kAmxTokens;
  }
#endif
  if (type == GGMLType::Q4_0) {
    dot_block_rows<Q4Format>(packed, group_bytes, row0, n_rows, x, n_blocks, n_tokens, y, y_stride);
  } else {
    dot_block_rows<Q8Format>(packed, group_bytes, row0, n_rows, x, n_blocks, n_tokens, y, y_stride);
  }
}

}  // namespace simd

#endif
