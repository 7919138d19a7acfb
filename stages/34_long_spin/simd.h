// simd.h: which vector instruction set this build uses, and the dot products written in it.
//
// The compiler's target (-march=native) picks one path at compile time:
//   AVX-512 VNNI  vpdpbusd: 32 u8 x s8 products summed into 8 int32 lanes in one instruction
//   AVX2          vpmaddubsw + vpmaddwd: the same in two, through int16 pair sums (Q4_0's
//                 int16 sums add up over a whole block first: one vpmaddwd a block)
//   none          the scalar loops of matmul.cpp and simd_scalar.cpp (also chosen by
//                 -DENGINE_NO_SIMD, so that the fallback can be built and tested on a machine
//                 that has the instructions)
// Both vector paths use 256-bit registers for the integer dots (a block of 32 int8 is 256 bits).
//
// The quantized kernels keep float lanes per (row, token) in registers and compute
// tiles of rows x tokens together.
//
// Q4_0 and Q8_0 matrices are repacked at load (matmul.cpp's pack_weight) so that one
// int32 lane of a 512-bit register is one row: 16 rows per register, no horizontal sums at all.
//
// The elementwise kernels (softmax, SwiGLU, RoPE's rotation) get vector paths too.
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

// ---- the packed layout of Q4_0 and Q8_0 matrices ----
//
// Rows go in groups of kGroupRows = 16 (one int32 lane each of a 512-bit register). A group
// holds, for its blocks b = 0, 1, .. along the rows, first every block's slices, then every
// block's scales:
//   slices of block b: 64 bytes each; slice s = bytes 4s .. 4s+3 of the qs of row 0, then of
//     row 1, .. row 15. Q4_0 has 4 (16 qs bytes: low nibbles are weights 4s..4s+3, high ones
//     16+4s..), Q8_0 has 8 (32 qs bytes: weights 4s..4s+3).
//   scales of block b: 16 fp16, row 0 .. 15 (kScaleBytes = 32).
// So a group is the 16 rows' bytes in the file, reordered (padded to a cache line), and every
// slice starts on a cache line. One vpdpbusd of a slice with 4 activations broadcast to every
// lane adds 4 products to each of the 16 rows' sums. Matrices are padded with zero rows to
// whole tiles of kTileRows.
constexpr int kGroupRows = 16;
constexpr int kGroupsPerTile = 2;  ///< measured: 2 groups share each activation broadcast
constexpr int kTileRows = kGroupRows * kGroupsPerTile;
constexpr int kScaleBytes = kGroupRows * 2;
constexpr int kSliceBytes = 64;
constexpr int kBytesPerLane = 4;  ///< products one vpdpbusd lane adds

/// Tokens a tile computes together: 2 groups x T tokens x (int sums + float sums) registers,
/// 16 of AVX-512's 32 zmm for T = 4; AVX2's 16 ymm registers hold half a group each, so one token.
constexpr int kTileTokens = ENGINE_SIMD == ENGINE_SIMD_AVX512_VNNI ? 4 : 1;
/// Tiles one token reads at once: a pair of adjacent tiles is 2 x kGroupsPerTile groups,
/// group_bytes apart as one tile's are, so decode keeps 4 streams of weights in flight, not 2.
constexpr int kDecodeTiles = 2;

/// One block of 32 activations quantized to Q8_0 (ggml's rounding), with its scale as a float
/// and the sum of its int8 values (for the Q4_0 offset: sum((n - 8) x) = sum(n x) - 8 sum(x)).
struct XBlock {
  float d;
  int32_t sum;
  int8_t qs[kQK8_0];
};

// Every build computes one (row, token) output the same way, so all give the same bits:
//   acc = 0; per block b: acc = fma(float(exact int32 dot of block b), d_w * d_x, acc)
// (d_w * d_x is exact: two 11-bit significands; the int32 dot is < 2^24, exact as a float).

// ---- in every build: simd.cpp's vector code, or simd_scalar.cpp's loops in the scalar build ----

/// w (n,) . x (n,), fp32 (a float sum does not vectorize by itself: the compiler may not reorder
/// its additions).
float dot_f32(const float* w, const float* x, int64_t n);
/// sum of x[i]^2. The scalar build sums in double, as ggml does: one float sum of d = 4096
/// squares can be off by ~1e-4. The SIMD dot keeps 64 float partial sums (AVX2: 32), of
/// 64 squares each for d = 4096, off by ~4e-6 at worst (AVX2: ~8e-6).
double sum_of_squares(const float* x, int64_t n);
/// The elementwise kernels: in SIMD builds kLanes (16 or 8) floats at a time, with a vector e^x,
/// and the elements left after the last whole register in scalar code.
/// x (n,) = exp(x - max) / sum, in place.
void softmax(float* x, int64_t n);
/// gate (n,) = silu(gate) * up, in place.
void swiglu(float* gate, const float* up, int64_t n);
/// RoPE's rotation of one head x (n,), in place: x[j] = x[j] c[j] + x[partner(j)] s[j], where
/// partner(j) = j ^ 1 (adjacent pairs) or j +- n / 2 (halves); c, s (n,) hold each pair's cos, and
/// its sin with the sign of the element's place in the pair (-sin first, +sin second).
void rotate_head(float* x, const float* c, const float* s, int64_t n, bool adjacent);
/// One pair (first, second) of rotate_head in scalar code.
inline void rotate_pair(float* x, const float* c, const float* s, int64_t first, int64_t second) {
  const float a = x[first];
  const float b = x[second];
  x[first] = a * c[first] + b * s[first];
  x[second] = b * c[second] + a * s[second];
}

/// Keys dot_keys() takes at a time: one per float lane (one in the scalar build).
constexpr int kKeyBlock = ENGINE_SIMD == ENGINE_SIMD_AVX512_VNNI ? 16
                          : ENGINE_SIMD == ENGINE_SIMD_AVX2      ? 8
                                                                 : 1;
/// Attention's scores of kKeyBlock keys: out[j] = (q . key j) x scale, key j at keys + j x stride,
/// for heads n floats wide, n a multiple of kKeyBlock. Each key's sum stays in one register, and
/// the kKeyBlock registers are summed in one transpose (log2 kKeyBlock rounds of shuffles and
/// adds), instead of one horizontal sum per key.
void dot_keys(const float* q, const float* keys, int64_t stride, int64_t n, float scale,
              float* out);
/// Attention's weighted sum of values: out (n,) += sum over j < n_rows of w[j] x row j, row j at
/// rows + j x stride, n a multiple of kKeyBlock: out stays in registers while the rows go by.
void add_weighted_rows(float* out, const float* w, const float* rows, int64_t stride, int n_rows,
                       int64_t n);

#if ENGINE_SIMD != ENGINE_SIMD_NONE

/// w (n,) . x (n,), fp16 weights.
float dot_f16(const uint16_t* w, const float* x, int64_t n);

struct TokenTileBlock;  // amx.h

/// y[t * y_stride + i] = row row0 + i of the packed matrix . token t's x, for i < n_rows
/// (row0 a multiple of kTileRows) and t < n_tokens. packed: Q4_0 or Q8_0 groups of group_bytes;
/// x: n_tokens x n_blocks blocks; tiles: the same tokens' whole tiles for AMX (amx.h), or
/// nullptr.
void dot_packed(GGMLType type, const unsigned char* packed, size_t group_bytes, int64_t row0,
                int64_t n_rows, const XBlock* x, const TokenTileBlock* tiles, int64_t n_blocks,
                int n_tokens, float* y, int64_t y_stride);

#endif

}  // namespace simd
