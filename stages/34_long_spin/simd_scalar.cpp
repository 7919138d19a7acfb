// simd_scalar.cpp: simd.h's functions that every build has, for the scalar build (a CPU without
// AVX2, or -DENGINE_NO_SIMD): the same arithmetic one element at a time. So ops.cpp calls one
// interface, and the vector code and its fallback sit side by side under simd.
#include <cmath>

#include "simd.h"

#if ENGINE_SIMD == ENGINE_SIMD_NONE

namespace simd {

float dot_f32(const float* w, const float* x, int64_t n) {
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum += w[i] * x[i];
  return sum;
}

double sum_of_squares(const float* x, int64_t n) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]) * x[i];
  return sum;
}

void softmax(float* x, int64_t n) {
  // exp(x - max) <= 1, so nothing overflows, and the largest term is exactly 1, so the sum >= 1.
  float max_value = x[0];
  for (int64_t i = 1; i < n; ++i) max_value = std::fmax(max_value, x[i]);
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - max_value);
    sum += x[i];
  }
  const float inv_sum = 1.0f / sum;
  for (int64_t i = 0; i < n; ++i) x[i] *= inv_sum;
}

void swiglu(float* gate, const float* up, int64_t n) {
  // silu(g) = g * sigmoid(g) = g / (1 + exp(-g)); for g << 0, exp(-g) = inf gives -0, not NaN.
  for (int64_t i = 0; i < n; ++i) gate[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

void rotate_head(float* x, const float* c, const float* s, int64_t n, bool adjacent) {
  const int64_t half = n / 2;
  for (int64_t i = 0; i < half; ++i) {
    if (adjacent) {
      rotate_pair(x, c, s, 2 * i, 2 * i + 1);
    } else {
      rotate_pair(x, c, s, i, i + half);
    }
  }
}

void dot_keys(const float* q, const float* keys, int64_t stride, int64_t n, float scale,
              float* out) {
  for (int j = 0; j < kKeyBlock; ++j) out[j] = dot_f32(q, keys + j * stride, n) * scale;
}

void add_weighted_rows(float* out, const float* w, const float* rows, int64_t stride, int n_rows,
                       int64_t n) {
  for (int j = 0; j < n_rows; ++j) {
    for (int64_t k = 0; k < n; ++k) out[k] += w[j] * rows[j * stride + k];
  }
}

}  // namespace simd

#endif
