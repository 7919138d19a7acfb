// simd.cpp: the dot products of matmul.cpp in AVX-512 or AVX2 (see simd.h for which).
//
// Every weight type is widened to fp32 in registers and multiplied with fp32 activations by fused
// multiply-adds, 16 (AVX-512) or 8 (AVX2) lanes per instruction. A Q4_0 block is 18 bytes and
// costs here ~17 instructions for its 32 weights (unpack 5: load, shift, combine, mask, subtract
// 8; per half of 16: widen to int32, convert to float, load x, multiply, fused multiply-add with
// the scale; the scale 2), against ~160 in the scalar loop (per weight: a nibble, a
// subtraction, an int -> float conversion, a multiply-add, a load).
//
// The sums associate differently from the scalar loops (per lane, then across lanes), so they
// agree with them to rounding, not bit for bit.
#include "simd.h"

#if ENGINE_SIMD != ENGINE_SIMD_NONE

// GCC 12.2's AVX-512 headers trip its own -Wuninitialized on their _mm512_undefined_*()
// placeholders (GCC bug 105593, fixed in 12.3): silenced for these headers only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

namespace simd {
namespace {

// ---- quantized weights as bytes ----

constexpr int kNibbleMask = 0x0F;
constexpr int kQ4Offset = 8;
constexpr int kNibbleBits = 4;

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

// ---- float dot products ----

#if ENGINE_SIMD == ENGINE_SIMD_AVX512

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

// ---- Q4_0 and Q8_0: 32 int8 weights per block, widened to floats ----

/// The 32 weights of a Q4_0 block as int8, nibble - 8, in the order of the activations.
inline __m256i q4_0_values(const BlockQ4_0& w) {
  return _mm256_sub_epi8(q4_0_nibbles(w), _mm256_set1_epi8(kQ4Offset));
}

inline __m256i q8_0_values(const BlockQ8_0& w) {
  return load_q8(w.qs);
}

/// w (n_blocks blocks) . x (32 n_blocks,): per block, its 32 weights as int8 (Values), each half
/// of 16 widened to floats and multiplied by x, then by the block's scale with a fused
/// multiply-add. Two accumulators, one per half, so that consecutive multiply-adds do not wait
/// for each other.
template <class Block, __m256i (*Values)(const Block&)>
float dot_blocks(const Block* w, const float* x, int64_t n_blocks) {
  constexpr int kHalf = 16;
  FloatVec acc[2] = {zero_vec(), zero_vec()};
  for (int64_t b = 0; b < n_blocks; ++b, x += 2 * kHalf) {
    const __m256i values = Values(w[b]);
    const FloatVec d = broadcast(_cvtsh_ss(w[b].d));
    acc[0] = fmadd(int8_times_x(_mm256_castsi256_si128(values), x), d, acc[0]);
    acc[1] = fmadd(int8_times_x(_mm256_extracti128_si256(values, 1), x + kHalf), d, acc[1]);
  }
  return sum_lanes(add(acc[0], acc[1]));
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

float dot_q4_0(const BlockQ4_0* w, const float* x, int64_t n) {
  return dot_blocks<BlockQ4_0, q4_0_values>(w, x, n / kQK4_0);
}

float dot_q8_0(const BlockQ8_0* w, const float* x, int64_t n) {
  return dot_blocks<BlockQ8_0, q8_0_values>(w, x, n / kQK8_0);
}

}  // namespace simd

#endif
