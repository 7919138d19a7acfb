// simd.h: which vector instruction set this build uses, and the dot products written in it.
//
// The compiler's target (-march=native) picks one path at compile time:
//   AVX-512       16 fp32 fused multiply-adds in one instruction (512-bit registers)
//   AVX2          8 of them (256-bit registers; with FMA, and F16C for fp16 -> fp32)
//   none          the scalar loops of matmul.cpp and simd_scalar.cpp (also chosen by
//                 -DENGINE_NO_SIMD, so that the fallback can be built and tested on a machine
//                 that has the instructions)
// Both vector paths unpack quantized weights as bytes in 256-bit registers (a block of 32 int8 is
// 256 bits) and widen them to fp32 for the multiply-adds.
#pragma once

#include <cstdint>

#include "quant.h"

#define ENGINE_SIMD_NONE 0
#define ENGINE_SIMD_AVX2 1
#define ENGINE_SIMD_AVX512 2

#if defined(ENGINE_NO_SIMD)
#define ENGINE_SIMD ENGINE_SIMD_NONE
#elif defined(__AVX512F__) && defined(__AVX2__) && defined(__F16C__) && defined(__FMA__)
#define ENGINE_SIMD ENGINE_SIMD_AVX512
#elif defined(__AVX2__) && defined(__F16C__) && defined(__FMA__)
#define ENGINE_SIMD ENGINE_SIMD_AVX2
#else
#define ENGINE_SIMD ENGINE_SIMD_NONE
#endif

namespace simd {

/// The path this build uses, for messages and benchmarks.
constexpr const char* kPathName = ENGINE_SIMD == ENGINE_SIMD_AVX512 ? "avx512"
                                  : ENGINE_SIMD == ENGINE_SIMD_AVX2 ? "avx2"
                                                                    : "scalar";

// ---- in every build: simd.cpp's vector code, or simd_scalar.cpp's loops in the scalar build ----

/// w (n,) . x (n,), fp32 (a float sum does not vectorize by itself: the compiler may not reorder
/// its additions).
float dot_f32(const float* w, const float* x, int64_t n);

#if ENGINE_SIMD != ENGINE_SIMD_NONE

/// w (n,) . x (n,), fp16 weights.
float dot_f16(const uint16_t* w, const float* x, int64_t n);
/// w (n,) . x (n,), Q6_K weights (n a multiple of 256) and fp32 activations.
float dot_q6_k(const BlockQ6_K* w, const float* x, int64_t n);
/// w (n,) . x (n,), Q4_0 weights (n a multiple of 32) and fp32 activations.
float dot_q4_0(const BlockQ4_0* w, const float* x, int64_t n);
/// w (n,) . x (n,), Q8_0 weights (n a multiple of 32) and fp32 activations.
float dot_q8_0(const BlockQ8_0* w, const float* x, int64_t n);

#endif

}  // namespace simd
