// quant.h: ggml's block formats, one table of them, and their reference (scalar) dequantizers and
// quantizers.
//
// Quantized tensors are stored in blocks along ne[0] (the "in" dimension of a weight matrix). Every
// layout below is ggml's, byte for byte (not the interleaved nibble order of the seed article's
// §2.1); each block struct says what its bytes hold, and quant.cpp / quant_k.cpp say in which
// order the weights come out. "fp16" is an IEEE half, "bf16" the top half of an IEEE float.
//
//   type  weights  bytes  bits/weight      type  weights  bytes  bits/weight
//   F32   1        4      32               Q2_K  256      84     2.625
//   F16   1        2      16               Q3_K  256      110    3.4375
//   BF16  1        2      16               Q4_K  256      144    4.5
//   Q4_0  32       18     4.5              Q5_K  256      176    5.5
//   Q4_1  32       20     5                Q6_K  256      210    6.5625
//   Q5_0  32       22     5.5
//   Q5_1  32       24     6                (Q8_K  256     292    activations only, not a table
//   Q8_0  32       34     8.5               entry: never a tensor type in a file)
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>

#include "gguf.h"

constexpr int kQK4_0 = 32;        ///< weights per Q4_0 block
constexpr int kQK4_1 = 32;        ///< weights per Q4_1 block
constexpr int kQK5_0 = 32;        ///< weights per Q5_0 block
constexpr int kQK5_1 = 32;        ///< weights per Q5_1 block
constexpr int kQK8_0 = 32;        ///< weights per Q8_0 block
constexpr int kQK_K = 256;        ///< weights per K-quant super-block
constexpr int kKScaleBytes = 12;  ///< Q3_K/Q4_K/Q5_K: 6-bit scales (and mins) packed in 12 bytes

constexpr uint16_t kF16QuietNaN = 0x7e00;  ///< the scale of a block quantized from NaN or inf

// ---- 32-weight blocks: w = q * d (symmetric) or w = q * d + m (with a minimum) ----

struct BlockQ4_0 {
  uint16_t d;              ///< scale, fp16; w = (q - 8) * d
  uint8_t qs[kQK4_0 / 2];  ///< low nibbles: weights 0..15, high nibbles: weights 16..31
};
static_assert(sizeof(BlockQ4_0) == 18, "Q4_0 block is 18 bytes");

struct BlockQ4_1 {
  uint16_t d;              ///< scale, fp16; w = q * d + m
  uint16_t m;              ///< minimum, fp16
  uint8_t qs[kQK4_1 / 2];  ///< as Q4_0: low nibbles weights 0..15, high nibbles 16..31
};
static_assert(sizeof(BlockQ4_1) == 20, "Q4_1 block is 20 bytes");

struct BlockQ5_0 {
  uint16_t d;              ///< scale, fp16; w = (q - 16) * d
  uint8_t qh[4];           ///< fifth bits: bit j of this little-endian u32 belongs to weight j
  uint8_t qs[kQK5_0 / 2];  ///< low 4 bits, as Q4_0
};
static_assert(sizeof(BlockQ5_0) == 22, "Q5_0 block is 22 bytes");

struct BlockQ5_1 {
  uint16_t d;              ///< scale, fp16; w = q * d + m
  uint16_t m;              ///< minimum, fp16
  uint8_t qh[4];           ///< fifth bits, as Q5_0
  uint8_t qs[kQK5_1 / 2];  ///< low 4 bits, as Q4_0
};
static_assert(sizeof(BlockQ5_1) == 24, "Q5_1 block is 24 bytes");

struct BlockQ8_0 {
  uint16_t d;         ///< scale, fp16; w = q * d
  int8_t qs[kQK8_0];  ///< signed 8-bit weights
};
static_assert(sizeof(BlockQ8_0) == 34, "Q8_0 block is 34 bytes");

// ---- 256-weight super-blocks: sub-blocks of 16 or 32 weights with their own integer scale
// (and min), which are themselves scaled by the super-block's fp16 d (and dmin) ----

struct BlockQ2_K {
  uint8_t scales[kQK_K / 16];  ///< per 16 weights: scale in the low nibble, min in the high one
  uint8_t qs[kQK_K / 4];       ///< 2-bit weights, four per byte
  uint16_t d;                  ///< fp16 scale of the scales; w = d * scale * q - dmin * min
  uint16_t dmin;               ///< fp16 scale of the mins
};
static_assert(sizeof(BlockQ2_K) == 84, "Q2_K block is 84 bytes");

struct BlockQ3_K {
  uint8_t hmask[kQK_K / 8];      ///< third (high) bit of each weight
  uint8_t qs[kQK_K / 4];         ///< low 2 bits, four per byte
  uint8_t scales[kKScaleBytes];  ///< 16 6-bit scales, stored + 32
  uint16_t d;                    ///< fp16; w = d * scale * (q - 4)
};
static_assert(sizeof(BlockQ3_K) == 110, "Q3_K block is 110 bytes");

struct BlockQ4_K {
  uint16_t d;                    ///< fp16 scale of the scales; w = d * scale * q - dmin * min
  uint16_t dmin;                 ///< fp16 scale of the mins
  uint8_t scales[kKScaleBytes];  ///< 8 6-bit scales and 8 6-bit mins, one per 32 weights
  uint8_t qs[kQK_K / 2];         ///< 4-bit weights
};
static_assert(sizeof(BlockQ4_K) == 144, "Q4_K block is 144 bytes");

struct BlockQ5_K {
  uint16_t d;                    ///< as Q4_K
  uint16_t dmin;                 ///< as Q4_K
  uint8_t scales[kKScaleBytes];  ///< as Q4_K
  uint8_t qh[kQK_K / 8];         ///< fifth bit of each weight
  uint8_t qs[kQK_K / 2];         ///< low 4 bits
};
static_assert(sizeof(BlockQ5_K) == 176, "Q5_K block is 176 bytes");

struct BlockQ6_K {
  uint8_t ql[kQK_K / 2];      ///< lower 4 bits of each 6-bit weight
  uint8_t qh[kQK_K / 4];      ///< upper 2 bits
  int8_t scales[kQK_K / 16];  ///< 8-bit scale per 16 weights
  uint16_t d;                 ///< super-block scale, fp16; w = d * scale * (q - 32)
};
static_assert(sizeof(BlockQ6_K) == 210, "Q6_K block is 210 bytes");

/// ggml's Q8_K: 256 activations as int8 with one float scale, w = q * d, and the sum of the q in
/// each group of 16. Only an intermediate (the activations of K-quant dot products), never a
/// tensor type in a file, so it is not in the type table.
struct BlockQ8_K {
  float d;                    ///< scale, a plain float
  int8_t qs[kQK_K];           ///< signed 8-bit values, |q| <= 127
  int16_t bsums[kQK_K / 16];  ///< sum of qs[16g .. 16g + 15]
};
static_assert(sizeof(BlockQ8_K) == 292, "Q8_K block is 292 bytes");

/// IEEE half <-> float, exact for every half (subnormals, inf, nan included).
float fp16_to_fp32(uint16_t h);
uint16_t fp32_to_fp16(float f);  ///< round to nearest even

/// bfloat16 <-> float. bf16 -> f32 is exact; f32 -> bf16 rounds to nearest even (as ggml), and a
/// NaN stays a NaN, made quiet.
float bf16_to_fp32(uint16_t h);
uint16_t fp32_to_bf16(float f);

/// One ggml type this engine can decode and encode. Both functions take n weights, a multiple of
/// block_size (refused with Error otherwise); dst / src hold n / block_size blocks.
struct TypeTraits {
  GGMLType type;
  int block_size;      ///< weights per block (1 for F32/F16/BF16)
  size_t block_bytes;  ///< bytes per block
  float bits_per_weight() const { return float(8 * block_bytes) / float(block_size); }
  /// Reference dequantizer, weights in ggml's dequantize_row_* order.
  void (*dequantize)(const void* src, float* dst, int64_t n);
  /// Reference quantizer: ggml's quantize_row_*_ref, byte for byte. A block holding a NaN or an
  /// infinity gets a NaN scale and zero quants instead (F32/F16/BF16 convert each value).
  void (*quantize)(const float* src, void* dst, int64_t n);
};

/// The table entry of type, or nullptr for a type without one (Q8_1, Q8_K, unknown numbers).
const TypeTraits* type_traits(GGMLType type);
/// "f32, f16, bf16, q4_0, ...": the types in the table, for error messages.
std::string supported_type_names();
/// The type in the table whose ggml name is name ("q4_0", "q6_K", "f32"); throws Error naming
/// the supported types otherwise.
GGMLType type_from_name(const std::string& name);

/// True for the types in the table (this engine can compute with all of them).
bool type_supported(GGMLType type);
/// Weights per block (1 for F32/F16/BF16). Only for supported types.
int type_block_size(GGMLType type);
/// Bytes per block. Only for supported types.
size_t type_block_bytes(GGMLType type);
/// Bytes of a row of n weights; n must be a multiple of the block size.
size_t type_row_bytes(GGMLType type, int64_t n);

/// Reference dequantizer: n weights of type from src (row_bytes(type, n) bytes) into dst.
void dequantize_row(GGMLType type, const void* src, float* dst, int64_t n);
/// Reference quantizer: n weights from src into row_bytes(type, n) bytes at dst.
void quantize_row(GGMLType type, const float* src, void* dst, int64_t n);

/// The Q4_0 and Q8_0 quantizers with typed blocks (activations, tests, tools). n % 32 == 0.
void quantize_row_q4_0(const float* src, BlockQ4_0* dst, int64_t n);
void quantize_row_q8_0(const float* src, BlockQ8_0* dst, int64_t n);
/// ggml's quantize_row_q8_K_ref (n % 256 == 0). A block with a NaN or an infinity gets d = NaN.
void quantize_row_q8_k(const float* src, BlockQ8_K* dst, int64_t n);

// ---- shared by quant.cpp and quant_k.cpp only ----
namespace quant_detail {

/// n / block_size, after checking that n is a whole number of blocks (what names the caller).
int64_t whole_blocks(int64_t n, int block_size, const char* what);
/// True when x[0..n) holds a NaN or an infinity.
inline bool has_non_finite(const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(x[i])) return true;
  }
  return false;
}

/// A block holding a NaN or an infinity cannot be scaled to integers (converting NaN to an
/// integer is undefined behaviour, and max() skips NaN when finding the scale). Such a block is
/// stored with scale NaN and everything else zero, so every product with it is NaN and the run
/// stops at the sampler ("logit ... is NaN") instead of printing text made from garbage.
/// poison_if_non_finite returns true when it did that.
template <class Block>
void poison(Block& y) {
  y = Block{};
  y.d = kF16QuietNaN;
}
template <class Block>
bool poison_if_non_finite(const float* x, int64_t n, Block& y) {
  if (!has_non_finite(x, n)) return false;
  poison(y);
  return true;
}

void dequantize_q2_k(const void* src, float* dst, int64_t n);
void dequantize_q3_k(const void* src, float* dst, int64_t n);
void dequantize_q4_k(const void* src, float* dst, int64_t n);
void dequantize_q5_k(const void* src, float* dst, int64_t n);
void dequantize_q6_k(const void* src, float* dst, int64_t n);
void quantize_q2_k(const float* src, void* dst, int64_t n);
void quantize_q3_k(const float* src, void* dst, int64_t n);
void quantize_q4_k(const float* src, void* dst, int64_t n);
void quantize_q5_k(const float* src, void* dst, int64_t n);
void quantize_q6_k(const float* src, void* dst, int64_t n);

}  // namespace quant_detail
