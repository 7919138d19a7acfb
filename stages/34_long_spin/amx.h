// amx.h: batched Q4_0 and Q8_0 products on AMX tiles, where the CPU has them.
//
// AMX (Advanced Matrix Extensions, Intel Sapphire Rapids on) adds 8 tile registers of up to
// 16 rows x 64 bytes and one instruction, tdpbssd, that multiplies a 16 x 64 int8 tile by a
// 64 x 16 one into a 16 x 16 int32 tile: 16,384 products, where vpdpbusd does 64. The engine
// asks at run time (cpuid, then Linux's permission), so one build runs everywhere: without
// AMX, or under -DENGINE_NO_AMX, simd.cpp's vpdpbusd kernels do the work.
//
// The products are exact int32 sums of one block, scaled as every other path scales them
// (simd.h), so the tiles give the scalar kernels' bits too.
#pragma once

#include <cstddef>
#include <cstdint>

#include "simd.h"

namespace simd {

/// Tokens of one tile product: the 16 rows of an activation tile.
constexpr int kAmxTokens = 16;
/// Batches from 2 tiles on use them: with one, unpacking each Q4_0 group for 16 tokens only made
/// linear() 7% slower than simd.cpp's kernels (4096 x 4096, one thread; 32 tokens: 15% faster).
constexpr int kAmxMinTokens = 2 * kAmxTokens;

/// Block b of 16 tokens side by side, as a tile loads them: the A tile (16 rows of 32 int8, 512
/// contiguous bytes) and the tokens' scales. Read from the XBlocks, 16 cache lines apart
/// (n_blocks x 40 bytes), the scales alone cost more than the tile products (measured: 26 ns
/// a block of 16 x 16 rows and tokens, against 10).
struct TokenTileBlock {
  int8_t qs[kAmxTokens][kQK8_0];
  float d[kAmxTokens];
};

/// True when this build has the AVX-512 path (it scales the tiles' sums), the CPU reports
/// AMX-TILE and AMX-INT8, and Linux granted this process the tile registers. Asked once.
bool amx_usable();

/// The first tokens of a batch of n_tokens that go to the tiles: its whole tiles when
/// amx_usable() and n_tokens >= kAmxMinTokens, else none (0).
int amx_tokens(int n_tokens);

/// Copies XBlocks [begin, end) of x (tokens of n_blocks blocks each) into tiles, for the first
/// n_tiled tokens (amx_tokens()): tile T's block b is tiles[T * n_blocks + b]. linear() calls it
/// with the quantization, a share per thread.
void tile_tokens(const XBlock* x, int64_t begin, int64_t end, int64_t n_blocks, int n_tiled,
                 TokenTileBlock* tiles);

#if ENGINE_SIMD == ENGINE_SIMD_AVX512_VNNI

/// simd.h's dot_packed on tiles, for the n_tiles x kAmxTokens tokens of tiles; only when
/// amx_usable().
void dot_packed_amx(GGMLType type, const unsigned char* packed, size_t group_bytes, int64_t row0,
                    int64_t n_rows, const TokenTileBlock* tiles, int64_t n_blocks, int n_tiles,
                    float* y, int64_t y_stride);

#endif

}  // namespace simd
