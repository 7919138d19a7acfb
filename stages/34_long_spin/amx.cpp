// amx.cpp: packed Q4_0 / Q8_0 groups x whole tiles of 16 tokens on AMX (see amx.h).
//
// One tile product per block of 32 weights, 16 rows x 16 tokens:
//   A = the activations: 16 tokens x the block's 32 int8 (a TokenTileBlock, 512 bytes)
//   B = the weights: 8 rows x 64 bytes, row k = weights 4k .. 4k + 3 of each of the 16 rows.
//       That is simd.h's packed layout as it is: a Q8_0 block's 8 slices are its B tile, and a
//       Q4_0 block's 4 slices give it once their nibbles (minus 8) are unpacked into 8.
//   C = A B (tdpbssd, int8 x int8), 16 tokens x 16 int32: the exact sums of the block's products.
// C goes to memory, and each token's 16 sums join its float sums as in simd.cpp (fma with
// d_w x d_x, block by block), so the result keeps the scalar kernels' bits.
//
// Measured here (Xeon with AMX-INT8, one core, a loop over one chunk of 96 rows x 64 tokens): a
// block of 16 x 16 costs about 46 ns with simd.cpp's vpdpbusd, 22 ns on tiles for Q8_0 and 25
// for Q4_0 (its unpacking). The tile product itself takes 5 ns (16 cycles); the rest is moving
// C out and scaling it, 16 conversions, multiplies and fused multiply-adds a block, which the
// tiles cannot do. On this CPU the tile instructions and the vector ones do not overlap (alone 9
// and 7 ns a block, together 20), so a software pipeline between the two (unpacking and scaling
// one batch while the tiles compute the next) measured no faster, and is not here.
#include "amx.h"

#include <asm/prctl.h>
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "aligned.h"

#if ENGINE_SIMD == ENGINE_SIMD_AVX512_VNNI

// GCC 12.2's AVX-512 headers trip its own -Wuninitialized (see simd.cpp).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#endif

namespace simd {

int amx_tokens(int n_tokens) {
  return n_tokens >= kAmxMinTokens && amx_usable() ? n_tokens / kAmxTokens * kAmxTokens : 0;
}

void tile_tokens(const XBlock* x, int64_t begin, int64_t end, int64_t n_blocks, int n_tiled,
                 TokenTileBlock* tiles) {
  for (int64_t j = begin; j < std::min(end, n_tiled * n_blocks); ++j) {
    const int64_t t = j / n_blocks, b = j % n_blocks;
    TokenTileBlock& tile = tiles[t / kAmxTokens * n_blocks + b];
    std::memcpy(tile.qs[t % kAmxTokens], x[j].qs, kQK8_0);
    tile.d[t % kAmxTokens] = x[j].d;
  }
}

bool amx_usable() {
#if ENGINE_SIMD != ENGINE_SIMD_AVX512_VNNI || defined(ENGINE_NO_AMX)
  return false;
#else
  // cpuid leaf 7, subleaf 0: EDX bit 24 is AMX-TILE, bit 25 AMX-INT8 (Intel SDM, vol. 2A).
  constexpr unsigned kFeatureLeaf = 7;
  constexpr unsigned kAmxTileBit = 1u << 24;
  constexpr unsigned kAmxInt8Bit = 1u << 25;
  // Linux (5.16 on) hands out the 8 KB of tile state per process on request; before that, the
  // first tile instruction faults. XFEATURE_XTILEDATA is state component 18.
  constexpr unsigned long kXtileData = 18;
  static const bool usable = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (__get_cpuid_count(kFeatureLeaf, 0, &eax, &ebx, &ecx, &edx) == 0) return false;
    if ((edx & kAmxTileBit) == 0 || (edx & kAmxInt8Bit) == 0) return false;
    return syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, kXtileData) == 0;
  }();
  return usable;
#endif
}

#if ENGINE_SIMD == ENGINE_SIMD_AVX512_VNNI

namespace {

// Four blocks go to the tiles at a time, each into its own C tile, before they are scaled (two at
// a time measured 6% slower for Q8_0). A and B alternate between two registers each. The
// registers are macros: GCC's tile intrinsics paste the number into the instruction's text.
constexpr int kBlocksInFlight = 4;  // C tiles tmm0 .. tmm3
#define TILE_A0 4
#define TILE_A1 5
#define TILE_B0 6
#define TILE_B1 7
constexpr int kFirstA = TILE_A0, kFirstB = TILE_B0;   // the first of each pair
constexpr int kBRows = kQK8_0 / kBytesPerLane;        // 8 rows of 4 weights x 16 rows
constexpr size_t kBTileBytes = kBRows * kSliceBytes;  // 512
constexpr int kTilesPerPass = 4;                      // token tiles per unpacked group
constexpr int kQ4Slices = kQK4_0 / 2 / kBytesPerLane;
constexpr int kQ4Offset = 8;
constexpr int kNibbleBits = 4;

/// ldtilecfg's 64-byte operand, palette 1: each tile's rows and bytes per row.
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t bytes_per_row[16] = {};
  uint8_t rows[16] = {};
};

__attribute__((target("amx-tile"))) void configure_tiles() {
  TileConfig config;
  for (int c = 0; c < kBlocksInFlight; ++c) {
    config.rows[c] = kAmxTokens;
    config.bytes_per_row[c] = kGroupRows * sizeof(int32_t);
  }
  for (int i = 0; i < 2; ++i) {
    config.rows[kFirstA + i] = kAmxTokens;
    config.bytes_per_row[kFirstA + i] = kQK8_0;
    config.rows[kFirstB + i] = kBRows;
    config.bytes_per_row[kFirstB + i] = kSliceBytes;
  }
  _tile_loadconfig(&config);
}

/// A Q4_0 block's 4 slices -> its B tile: low nibbles are weights 4s.., high ones 16 + 4s..
inline void unpack_q4(const unsigned char* block, unsigned char* tile) {
  const __m512i mask = _mm512_set1_epi8(0x0F);
  const __m512i offset = _mm512_set1_epi8(kQ4Offset);
  for (int s = 0; s < kQ4Slices; ++s) {
    const __m512i v = _mm512_load_si512(block + s * kSliceBytes);
    const __m512i low = _mm512_sub_epi8(_mm512_and_si512(v, mask), offset);
    const __m512i high =
        _mm512_sub_epi8(_mm512_and_si512(_mm512_srli_epi16(v, kNibbleBits), mask), offset);
    _mm512_store_si512(tile + s * kSliceBytes, low);
    _mm512_store_si512(tile + (kQ4Slices + s) * kSliceBytes, high);
  }
}

/// Block i of the batch into C tile c: B (the weights) from b_tiles, A from the token tile a,
/// C out to c[i].
#define TILE_PRODUCT(i, tile_c, tile_a, tile_b)                         \
  if (i < n) {                                                          \
    _tile_loadd(tile_b, b_tiles + (b0 + i) * kBTileBytes, kSliceBytes); \
    _tile_loadd(tile_a, a[b0 + i].qs, kQK8_0);                          \
    _tile_zero(tile_c);                                                 \
    _tile_dpbssd(tile_c, tile_a, tile_b);                               \
    _tile_stored(tile_c, c[i], kGroupRows * sizeof(int32_t));           \
  }

using CTiles = int32_t[kBlocksInFlight][kAmxTokens][kGroupRows];

/// acc[t] += C of block b0 + i for token t, x d_w x d_x, block by block (simd.h's order).
inline void scale_batch(const CTiles& c, const unsigned char* scales, int64_t b0, int n,
                        const TokenTileBlock* a, __m512 (&acc)[kAmxTokens]) {
  for (int i = 0; i < n; ++i) {
    const __m512 d_w = _mm512_cvtph_ps(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(scales + (b0 + i) * kScaleBytes)));
    for (int t = 0; t < kAmxTokens; ++t) {
      const __m512 dot = _mm512_cvtepi32_ps(_mm512_load_si512(c[i][t]));
      const __m512 d = _mm512_mul_ps(d_w, _mm512_set1_ps(a[b0 + i].d[t]));
      acc[t] = _mm512_fmadd_ps(dot, d, acc[t]);
    }
  }
}

/// One group (16 rows) x one token tile: y[t * y_stride + r] for r < n_rows. b_tiles: the
/// group's blocks as B tiles (Q8_0's slices, or Q4_0's unpacked), kBTileBytes each; scales: their
/// 16 fp16 scales each.
__attribute__((target("amx-tile,amx-int8"))) void dot_group(const unsigned char* b_tiles,
                                                            const unsigned char* scales,
                                                            int64_t n_blocks,
                                                            const TokenTileBlock* a, float* y,
                                                            int64_t y_stride, int64_t n_rows) {
  alignas(64) CTiles c;
  __m512 acc[kAmxTokens];
  for (int t = 0; t < kAmxTokens; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b0 = 0; b0 < n_blocks; b0 += kBlocksInFlight) {
    const int n = static_cast<int>(std::min<int64_t>(kBlocksInFlight, n_blocks - b0));
    TILE_PRODUCT(0, 0, TILE_A0, TILE_B0)
    TILE_PRODUCT(1, 1, TILE_A1, TILE_B1)
    TILE_PRODUCT(2, 2, TILE_A0, TILE_B0)
    TILE_PRODUCT(3, 3, TILE_A1, TILE_B1)
    scale_batch(c, scales, b0, n, a, acc);
  }
  const auto rows = static_cast<__mmask16>((1u << std::min<int64_t>(n_rows, kGroupRows)) - 1);
  for (int t = 0; t < kAmxTokens; ++t) _mm512_mask_storeu_ps(y + t * y_stride, rows, acc[t]);
}

#undef TILE_PRODUCT

}  // namespace

__attribute__((target("amx-tile"))) void dot_packed_amx(GGMLType type, const unsigned char* packed,
                                                        size_t group_bytes, int64_t row0,
                                                        int64_t n_rows, const TokenTileBlock* tiles,
                                                        int64_t n_blocks, int n_tiles, float* y,
                                                        int64_t y_stride) {
  configure_tiles();  // per thread: the configuration is part of a thread's state
  const bool q4 = type == GGMLType::Q4_0;
  const size_t quant_bytes = (q4 ? kQ4Slices : kBRows) * kSliceBytes;  // a block's, packed
  std::vector<unsigned char, CacheLineAllocator<unsigned char>> unpacked(q4 ? n_blocks * kBTileBytes
                                                                            : 0);
  const unsigned char* first = packed + row0 / kGroupRows * group_bytes;
  // kTilesPerPass token tiles (64 tokens, 288 KB of activations for n = 4096) go over each group
  // of a chunk of rows (linear()'s ~256 KB), all of it in L2; a Q4_0 group is unpacked once a
  // pass (unpacked for every token tile, it cost 5 of 30 ns a block of 16 x 16).
  for (int tile0 = 0; tile0 < n_tiles; tile0 += kTilesPerPass) {
    const int tile1 = std::min(n_tiles, tile0 + kTilesPerPass);
    for (int64_t r = 0; r < n_rows; r += kGroupRows) {
      const unsigned char* group = first + r / kGroupRows * group_bytes;
      const unsigned char* scales = group + n_blocks * quant_bytes;
      if (q4) {
        for (int64_t b = 0; b < n_blocks; ++b)
          unpack_q4(group + b * quant_bytes, unpacked.data() + b * kBTileBytes);
      }
      const unsigned char* b_tiles = q4 ? unpacked.data() : group;
      for (int tile = tile0; tile < tile1; ++tile) {
        dot_group(b_tiles, scales, n_blocks, tiles + tile * n_blocks,
                  y + tile * kAmxTokens * y_stride + r, y_stride, n_rows - r);
      }
    }
  }
  _tile_release();  // back to the initial state: the kernel saves no tile data on a switch
}

#endif

}  // namespace simd
