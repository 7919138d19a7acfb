// ops.h: engine.h's small kernels in the forms MLA needs, for attention heads of two widths.
//
// MLA's heads: a query and key head is qk_nope + qk_rope wide (V2-Lite: 128 + 64), a value head
// v_head (128), and the scores are scaled by YaRN's mscale^2 / sqrt(192), not 1 / sqrt(192).
// Absorbed MLA: one key head of 576 for all 16 query heads, whose values (512) are the
// last 512 floats of each key row: v_row says how far apart value rows are.
#pragma once

#include <cstdint>

/// The heads attention() works on.
struct AttentionShape {
  int n_head;     ///< query heads
  int n_head_kv;  ///< key/value heads (n_head / n_head_kv query heads share one)
  int k_head;     ///< width of a query and a key head
  int v_head;     ///< width of a value head (and of an output head)
  float scale;    ///< scores = q . k * scale
  int v_row = 0;  ///< floats from one value row to the next (0: n_head_kv * v_head)
};

/// A llama or qwen2 model's heads: keys and values head_dim wide, scores scaled by
/// 1 / sqrt(head_dim).
AttentionShape plain_heads(int n_head, int n_head_kv, int head_dim);

/// Causal attention of one query token: q (n_head, k_head) over n_keys cached rows of keys
/// (n_head_kv * k_head floats each) and values (n_head_kv * v_head) -> out (n_head * v_head).
/// scores: scratch for n_head * n_keys floats.
void attention(float* out, const float* q, const float* keys, const float* values, int n_keys,
               const AttentionShape& shape, float* scores);
/// The same for n_queries query tokens of one sequence at once: query i (q + i x q_stride ->
/// out + i x out_stride) over the first n_keys[i] rows. Each block of key and value rows is read
/// once for all of them. scores: scratch for n_queries x n_head x max(n_keys) floats.
void attention(float* out, int64_t out_stride, const float* q, int64_t q_stride, const float* keys,
               const float* values, const int* n_keys, int n_queries, const AttentionShape& shape,
               float* scores);
