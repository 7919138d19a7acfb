// absorb.h: wkv_b, split per head so that attention runs in the latent space.
//
// The architecture as written decompresses each token's latent c (kv_lora_rank) into n_head
// keys and values with wkv_b and caches those. Per head h, wkv_b's rows are W_uk_h (qk_nope x kv_lora_rank), then
// W_uv_h (v_head x kv_lora_rank), and for every cached position t
//   q_nope_h . (W_uk_h c_t) = (W_uk_h^T q_nope_h) . c_t
//   sum_t a_t (W_uv_h c_t)  = W_uv_h (sum_t a_t c_t)
// so attention scores the cached latents themselves, with the query folded through W_uk_h^T
// ("absorbed"), and applies W_uv_h once to its output. The cache holds c and the RoPE key:
// 512 + 64 floats per token per layer for V2-Lite, instead of 16 x (192 + 128).
#pragma once

#include <vector>

#include "matmul.h"
#include "model.h"

/// One layer's wkv_b for the latent space. Move only: uk_t's sources point into uk_t_bytes.
struct AbsorbedKvB {
  AbsorbedKvB() = default;
  AbsorbedKvB(AbsorbedKvB&&) = default;
  AbsorbedKvB& operator=(AbsorbedKvB&&) = default;
  AbsorbedKvB(const AbsorbedKvB&) = delete;

  std::vector<PackedWeight> uk_t;  ///< per head: W_uk_h^T (kv_lora_rank, qk_nope)
  std::vector<PackedWeight> uv;    ///< per head: W_uv_h (v_head, kv_lora_rank), wkv_b's own rows
  std::vector<unsigned char> uk_t_bytes;  ///< uk_t's rows: F32, or F16 for a quantized wkv_b
};

/// wkv_b (n_head * (qk_nope + v_head), kv_lora_rank) of model, split and transposed as above.
/// The file's pages of the rows copied are given back to the system.
AbsorbedKvB absorb_kv_b(const Model& model, const Weight& wkv_b);
