// quant.h: ggml's block formats and their reference (scalar) dequantizers.
//
// Quantized tensors are stored in blocks along ne[0] (the "in" dimension of a weight matrix):
//   Q4_0: 32 weights in 18 bytes  {fp16 d; u8 qs[16]}  w[j] = (lo4(qs[j]) - 8) * d,
//                                                    w[j+16] = (hi4(qs[j]) - 8) * d   (j < 16)
//   Q8_0: 32 weights in 34 bytes  {fp16 d; i8 qs[32]}  w[j] = qs[j] * d
//   Q6_K: 256 weights in 210 bytes {u8 ql[128]; u8 qh[64]; i8 scales[16]; fp16 d}
//   F16: 1 weight in 2 bytes; F32: 1 weight in 4 bytes.
// These are ggml's exact layouts (not the interleaved nibble order of the seed article's §2.1).
#pragma once

#include <cstddef>
#include <cstdint>

#include "gguf.h"

constexpr int kQK4_0 = 32;  ///< weights per Q4_0 block
constexpr int kQK8_0 = 32;  ///< weights per Q8_0 block
constexpr int kQK_K = 256;  ///< weights per K-quant super-block

struct BlockQ4_0 {
  uint16_t d;              ///< scale, IEEE fp16
  uint8_t qs[kQK4_0 / 2];  ///< low nibbles: weights 0..15, high nibbles: weights 16..31
};
static_assert(sizeof(BlockQ4_0) == 18, "Q4_0 block is 18 bytes");

struct BlockQ8_0 {
  uint16_t d;         ///< scale, IEEE fp16
  int8_t qs[kQK8_0];  ///< signed 8-bit weights
};
static_assert(sizeof(BlockQ8_0) == 34, "Q8_0 block is 34 bytes");

struct BlockQ6_K {
  uint8_t ql[kQK_K / 2];      ///< lower 4 bits of each 6-bit weight
  uint8_t qh[kQK_K / 4];      ///< upper 2 bits
  int8_t scales[kQK_K / 16];  ///< 8-bit scale per 16 weights
  uint16_t d;                 ///< super-block scale, IEEE fp16
};
static_assert(sizeof(BlockQ6_K) == 210, "Q6_K block is 210 bytes");

/// IEEE half <-> float, exact for every half (subnormals, inf, nan included).
float fp16_to_fp32(uint16_t h);
uint16_t fp32_to_fp16(float f);  ///< round to nearest even

/// True for the types this engine can compute with: F32, F16, Q4_0, Q8_0, Q6_K.
bool type_supported(GGMLType type);
/// Weights per block (1 for F32/F16). Only for supported types.
int type_block_size(GGMLType type);
/// Bytes per block. Only for supported types.
size_t type_block_bytes(GGMLType type);
/// Bytes of a row of n weights; n must be a multiple of the block size.
size_t type_row_bytes(GGMLType type, int64_t n);

/// Reference dequantizer: n weights of type from src (row_bytes(type, n) bytes) into dst.
void dequantize_row(GGMLType type, const void* src, float* dst, int64_t n);

/// Reference quantizers (ggml's rounding), for tests and tools. n is a multiple of 32.
void quantize_row_q4_0(const float* src, BlockQ4_0* dst, int64_t n);
void quantize_row_q8_0(const float* src, BlockQ8_0* dst, int64_t n);
