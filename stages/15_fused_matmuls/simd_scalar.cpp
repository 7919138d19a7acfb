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

}  // namespace simd

#endif
