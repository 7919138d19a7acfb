// simd.h: which vector instruction set this build uses, and the dot products written in it.
//
// The compiler's target (-march=native) picks one path at compile time:
//   AVX-512 VNNI  vpdpbusd: 32 u8 x s8 products summed into 8 int32 lanes in one instruction
//   AVX2          vpmaddubsw + vpmaddwd: the same in two, through int16 pair sums
//   none          the scalar loops of matmul.cpp and simd_scalar.cpp (also chosen by
//                 -DENGINE_NO_SIMD, so that the fallback can be built and tested on a machine
//                 that has the instructions)
// Both vector paths use 256-bit registers for the integer dots (a block of 32 int8 is 256 bits).
#pragma once

#include <cstddef>
#include <cstdint>

#include "quant.h"

#define ENGINE_SIMD_NONE 0
#define ENGINE_SIMD_AVX2 1
#define ENGINE_SIMD_AVX512_VNNI 2

#if defined(ENGINE_NO_SIMD)
#define ENGINE_SIMD ENGINE_SIMD_NONE
#elif defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && \
    defined(__AVX512VNNI__) && defined(__F16C__) && defined(__FMA__)
#define ENGINE_SIMD ENGINE_SIMD_AVX512_VNNI
#elif defined(__AVX2__) && defined(__F16C__) && defined(__FMA__)
#define ENGINE_SIMD ENGINE_SIMD_AVX2
#else
#define ENGINE_SIMD ENGINE_SIMD_NONE
#endif

namespace simd {

/// The path this build uses, for messages and benchmarks.
constexpr const char* kPathName = ENGINE_SIMD == ENGINE_SIMD_AVX512_VNNI ? "avx512-vnni"
                                  : ENGINE_SIMD == ENGINE_SIMD_AVX2      ? "avx2"
                                                                         : "scalar";

/// Rows the quantized kernels compute together (linear() hands them rows in steps of this many).
constexpr int kRowsPerStep = 4;

// ---- in every build: simd.cpp's vector code, or simd_scalar.cpp's loops in the scalar build ----

/// w (n,) . x (n,), fp32 (a float sum does not vectorize by itself: the compiler may not reorder
/// its additions).
float dot_f32(const float* w, const float* x, int64_t n);

#if ENGINE_SIMD != ENGINE_SIMD_NONE

/// w (n,) . x (n,), fp16 weights.
float dot_f16(const uint16_t* w, const float* x, int64_t n);
/// w (n,) . x (n,), Q6_K weights (n a multiple of 256) and fp32 activations.
float dot_q6_k(const BlockQ6_K* w, const float* x, int64_t n);

/// y[i] = row i of W . x for n_rows consecutive rows starting at row0 (row_bytes apart), with
/// Q4_0 (or Q8_0) weights and x quantized to n_blocks Q8_0 blocks. Per row and block the integer
/// dot is exact, then sum = fma(d_w * d_x, isum, sum) in block order: bit for bit the scalar
/// kernel's result.
void dot_q4_0_q8_0(const void* row0, size_t row_bytes, int64_t n_rows, const BlockQ8_0* x,
                   int64_t n_blocks, float* y);
void dot_q8_0_q8_0(const void* row0, size_t row_bytes, int64_t n_rows, const BlockQ8_0* x,
                   int64_t n_blocks, float* y);

#endif

}  // namespace simd
