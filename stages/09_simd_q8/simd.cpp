// simd.cpp: the dot products of matmul.cpp in AVX-512 or AVX2 (see simd.h for which).
//
// Quantized weights (Q4_0, Q8_0) meet activations quantized to Q8_0: 32 int8 x 32 int8 products
// per block, summed exactly in int32 by the vector unit, then scaled once. A Q4_0 block is 18
// bytes and costs here ~11 instructions for its 32 weights (unpack 4, multiply-add 1, a quarter
// of the 4-row reduction and scaling ~5, of loading x ~1), against ~17 when each weight is
// widened to fp32 for a float multiply-add, and ~160 in the scalar loop.
//
// Float weights (F32, F16, Q6_K) keep fp32 activations and use fused multiply-adds, 16 (AVX-512)
// or 8 (AVX2) lanes wide; their sums associate differently from the scalar loops, so they agree
// with them to rounding, not bit for bit.
#include "simd.h"

#if ENGINE_SIMD != ENGINE_SIMD_NONE

// GCC 12.2's AVX-512 headers trip its own -Wuninitialized on their _mm512_undefined_*()
// placeholders (GCC bug 105593, fixed in 12.3): silenced for these headers only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include <cmath>

namespace simd {
namespace {

// ---- integer dot of one block: 8 int32 lanes whose sum is the exact block dot ----
//
// The vector instructions multiply unsigned bytes by signed bytes (u8 x s8). Q4_0 nibbles are
// 0..15 (unsigned) and stand for nibble - 8, so sum((n - 8) x) = sum(n x) - 8 sum(x): the second
// term depends on x alone and is computed once per block for all the rows that use it. Q8_0
// weights are signed: |w| x (x with w's sign) gives the same products with an unsigned left side.
// No product or pair sum can overflow: |x| <= 127 (quantize_row_q8_0), |w| <= 128, and a pair of
// products is at most 2 x 128 x 127 = 32512 < 32767 (AVX2's int16 pair sums).

constexpr int kNibbleMask = 0x0F;
constexpr int kQ4Offset = 8;
constexpr int kNibbleBits = 4;

/// One block of Q8_0 activations: its 32 int8, and the Q4_0 offset term for them.
struct XBlock {
  __m256i q;
  __m256i offset_term;  ///< lanes summing to -8 sum(q) (AVX-512); int16 pairs of 8 q (AVX2)
};

/// The 32 nibbles of a Q4_0 block as bytes 0..15: low nibbles (weights 0..15) in the lower 128
/// bits, high nibbles (weights 16..31) in the upper, the order of the activations.
inline __m256i q4_0_nibbles(const BlockQ4_0& w) {
  const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w.qs));
  const __m256i both = _mm256_set_m128i(_mm_srli_epi16(packed, kNibbleBits), packed);
  return _mm256_and_si256(both, _mm256_set1_epi8(kNibbleMask));
}

inline __m256i load_q8(const int8_t* qs) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs));
}

#if ENGINE_SIMD == ENGINE_SIMD_AVX512_VNNI

inline XBlock load_x(const BlockQ8_0& x) {
  const __m256i q = load_q8(x.qs);
  const __m256i eight_q =
      _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8(kQ4Offset), q);
  return {q, _mm256_sub_epi32(_mm256_setzero_si256(), eight_q)};
}

// vpdpbusd: each int32 lane += 4 adjacent u8 x s8 products. Starting from -8 sum(x) leaves
// sum((n - 8) x) in the lanes.
inline __m256i lanes_q4_0(const BlockQ4_0& w, const XBlock& x) {
  return _mm256_dpbusd_epi32(x.offset_term, q4_0_nibbles(w), x.q);
}

inline __m256i lanes_q8_0(const BlockQ8_0& w, const XBlock& x) {
  const __m256i qw = load_q8(w.qs);
  return _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_abs_epi8(qw),
                             _mm256_sign_epi8(x.q, qw));
}

#else  // AVX2

inline XBlock load_x(const BlockQ8_0& x) {
  const __m256i q = load_q8(x.qs);
  return {q, _mm256_maddubs_epi16(_mm256_set1_epi8(kQ4Offset), q)};
}

// vpmaddubsw: int16 lane = sum of 2 adjacent u8 x s8 products; vpmaddwd with ones: int32 lane =
// sum of 2 int16 lanes.
inline __m256i lanes_q4_0(const BlockQ4_0& w, const XBlock& x) {
  const __m256i pairs = _mm256_sub_epi16(_mm256_maddubs_epi16(q4_0_nibbles(w), x.q), x.offset_term);
  return _mm256_madd_epi16(pairs, _mm256_set1_epi16(1));
}

inline __m256i lanes_q8_0(const BlockQ8_0& w, const XBlock& x) {
  const __m256i qw = load_q8(w.qs);
  const __m256i pairs = _mm256_maddubs_epi16(_mm256_abs_epi8(qw), _mm256_sign_epi8(x.q, qw));
  return _mm256_madd_epi16(pairs, _mm256_set1_epi16(1));
}

#endif

/// The sum of 8 int32 lanes.
inline int32_t sum_lanes(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 1));
  return _mm_cvtsi128_si32(s);
}

/// The lane sums of 4 vectors at once, (sum a, sum b, sum c, sum d): three horizontal adds
/// instead of four separate reductions.
inline __m128i sum_lanes_4(__m256i a, __m256i b, __m256i c, __m256i d) {
  const __m256i abcd = _mm256_hadd_epi32(_mm256_hadd_epi32(a, b), _mm256_hadd_epi32(c, d));
  return _mm_add_epi32(_mm256_castsi256_si128(abcd), _mm256_extracti128_si256(abcd, 1));
}

// ---- rows of quantized weights . Q8_0 activations ----
//
// Four rows at a time: each activation block is loaded once for four rows, and the four integer
// sums are reduced together and scaled in one 4-lane fused multiply-add. Lane r accumulates row r
// in block order, exactly as the one-row loop (and the scalar kernel) does.
static_assert(kRowsPerStep == 4, "dot_four_rows computes four rows");

template <class Block, __m256i (*Lanes)(const Block&, const XBlock&)>
float dot_one_row(const Block* w, const BlockQ8_0* x, int64_t n_blocks) {
  float sum = 0.0f;
  for (int64_t b = 0; b < n_blocks; ++b) {
    const float scale = _cvtsh_ss(w[b].d) * _cvtsh_ss(x[b].d);  // exact: 11 x 11 bits
    const auto isum = static_cast<float>(sum_lanes(Lanes(w[b], load_x(x[b]))));  // exact: < 2^24
    sum = std::fma(scale, isum, sum);
  }
  return sum;
}

template <class Block, __m256i (*Lanes)(const Block&, const XBlock&)>
void dot_four_rows(const unsigned char* row0, size_t row_bytes, const BlockQ8_0* x,
                   int64_t n_blocks, float* y) {
  const Block* w0 = reinterpret_cast<const Block*>(row0);
  const Block* w1 = reinterpret_cast<const Block*>(row0 + row_bytes);
  const Block* w2 = reinterpret_cast<const Block*>(row0 + 2 * row_bytes);
  const Block* w3 = reinterpret_cast<const Block*>(row0 + 3 * row_bytes);
  __m128 sum = _mm_setzero_ps();
  for (int64_t b = 0; b < n_blocks; ++b) {
    const XBlock xb = load_x(x[b]);
    const __m128i isum =
        sum_lanes_4(Lanes(w0[b], xb), Lanes(w1[b], xb), Lanes(w2[b], xb), Lanes(w3[b], xb));
    const __m128 d_w = _mm_cvtph_ps(
        _mm_setr_epi16(static_cast<int16_t>(w0[b].d), static_cast<int16_t>(w1[b].d),
                       static_cast<int16_t>(w2[b].d), static_cast<int16_t>(w3[b].d), 0, 0, 0, 0));
    const __m128 scale = _mm_mul_ps(d_w, _mm_set1_ps(_cvtsh_ss(x[b].d)));
    sum = _mm_fmadd_ps(scale, _mm_cvtepi32_ps(isum), sum);
  }
  _mm_storeu_ps(y, sum);
}

template <class Block, __m256i (*Lanes)(const Block&, const XBlock&)>
void dot_block_rows(const void* row0, size_t row_bytes, int64_t n_rows, const BlockQ8_0* x,
                    int64_t n_blocks, float* y) {
  const auto* row = static_cast<const unsigned char*>(row0);
  int64_t r = 0;
  for (; r + kRowsPerStep <= n_rows; r += kRowsPerStep) {
    dot_four_rows<Block, Lanes>(row + r * row_bytes, row_bytes, x, n_blocks, y + r);
  }
  for (; r < n_rows; ++r) {
    y[r] =
        dot_one_row<Block, Lanes>(reinterpret_cast<const Block*>(row + r * row_bytes), x, n_blocks);
  }
}

// ---- float dot products ----

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
/// 16 int8 as floats.
inline FloatVec int8_to_float(__m128i q) {
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q));
}
/// Products of 16 int8 weights (as floats) with x (16,).
inline FloatVec int8_times_x(__m128i w, const float* x) {
  return mul(int8_to_float(w), load_f32(x));
}
/// out[i] = d * q[i] for 16 int8 q.
inline void store_scaled(__m128i q, float d, float* out) {
  _mm512_storeu_ps(out, mul(int8_to_float(q), broadcast(d)));
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
/// The low 8 of 16 int8 as floats; the high 8.
inline FloatVec low_int8_to_float(__m128i q) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q));
}
inline FloatVec high_int8_to_float(__m128i q) {
  return low_int8_to_float(_mm_srli_si128(q, 8));
}
/// Products of 16 int8 weights (as floats) with x (16,), summed pairwise into 8 lanes.
inline FloatVec int8_times_x(__m128i w, const float* x) {
  return fmadd(high_int8_to_float(w), load_f32(x + kLanes), mul(low_int8_to_float(w), load_f32(x)));
}
/// out[i] = d * q[i] for 16 int8 q.
inline void store_scaled(__m128i q, float d, float* out) {
  _mm256_storeu_ps(out, mul(low_int8_to_float(q), broadcast(d)));
  _mm256_storeu_ps(out + kLanes, mul(high_int8_to_float(q), broadcast(d)));
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

}  // namespace

float dot_f32(const float* w, const float* x, int64_t n) {
  return dot_float<float, load_f32, f32_value>(w, x, n);
}

float dot_f16(const uint16_t* w, const float* x, int64_t n) {
  return dot_float<uint16_t, load_f16, f16_value>(w, x, n);
}

// Q6_K: one half (128 weights) at a time. Its 64 ql bytes and 32 qh bytes hold four quarters of
// 32 weights: quarter q takes the low (q < 2) or high nibble of ql[32 (q & 1) + l] and bits
// 2q..2q+1 of qh[l]. Each quarter becomes 32 int8 (6-bit value - 32) in one register, then two
// groups of 16 are widened to floats and multiplied by x and the group's scale d * scales[g].
float dot_q6_k(const BlockQ6_K* w, const float* x, int64_t n) {
  constexpr int kHalfBlock = 128;
  constexpr int kQuarter = 32;
  constexpr int kGroup = 16;
  constexpr int kGroupsPerQuarter = kQuarter / kGroup;
  constexpr int kOffset = 32;
  constexpr int kHighBitsMask = 0x03;
  const __m256i nibble_mask = _mm256_set1_epi8(kNibbleMask);
  const __m256i high_mask = _mm256_set1_epi8(kHighBitsMask);
  FloatVec acc[kGroupsPerQuarter] = {zero_vec(), zero_vec()};
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    // The 16 group scales d * scales[g], converted together; then each is one broadcast load.
    float group_scale[kQK_K / kGroup];
    store_scaled(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w[b].scales)), _cvtsh_ss(w[b].d),
                 group_scale);
    for (int half = 0; half < kQK_K / kHalfBlock; ++half, x += kHalfBlock) {
      const uint8_t* ql = w[b].ql + half * (kHalfBlock / 2);
      const __m256i ql_first = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql));
      const __m256i ql_second = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql + kQuarter));
      const __m256i qh =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b].qh + half * (kHalfBlock / 4)));
      const float* scales = group_scale + half * (kHalfBlock / kGroup);
      for (int q = 0; q < kHalfBlock / kQuarter; ++q) {
        const __m256i ql_bytes = (q & 1) ? ql_second : ql_first;
        const __m256i low =
            q < 2 ? _mm256_and_si256(ql_bytes, nibble_mask)
                  : _mm256_and_si256(_mm256_srli_epi16(ql_bytes, kNibbleBits), nibble_mask);
        const __m256i high = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * q), high_mask);
        const __m256i value = _mm256_sub_epi8(
            _mm256_or_si256(low, _mm256_slli_epi16(high, kNibbleBits)), _mm256_set1_epi8(kOffset));
        const __m128i halves[kGroupsPerQuarter] = {_mm256_castsi256_si128(value),
                                                   _mm256_extracti128_si256(value, 1)};
        for (int g = 0; g < kGroupsPerQuarter; ++g) {
          const float* xg = x + q * kQuarter + g * kGroup;
          const FloatVec scale = broadcast(scales[q * kGroupsPerQuarter + g]);
          const FloatVec wx = int8_times_x(halves[g], xg);
          acc[g] = fmadd(wx, scale, acc[g]);
        }
      }
    }
  }
  return sum_lanes(add(acc[0], acc[1]));
}

void dot_q4_0_q8_0(const void* row0, size_t row_bytes, int64_t n_rows, const BlockQ8_0* x,
                   int64_t n_blocks, float* y) {
  dot_block_rows<BlockQ4_0, lanes_q4_0>(row0, row_bytes, n_rows, x, n_blocks, y);
}

void dot_q8_0_q8_0(const void* row0, size_t row_bytes, int64_t n_rows, const BlockQ8_0* x,
                   int64_t n_blocks, float* y) {
  dot_block_rows<BlockQ8_0, lanes_q8_0>(row0, row_bytes, n_rows, x, n_blocks, y);
}

}  // namespace simd

#endif
