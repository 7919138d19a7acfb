// kv_cache.h: the keys and values of the positions the model attends to, per layer.
//
// Layout: K [layer][slot][k_dim] and V [layer][slot][v_dim] floats, allocated once for n_ctx
// slots, before generation; nothing is allocated per token. Keys and values may differ
// in width (MLA: a key head is qk_nope + qk_rope = 192 wide, a value head 128); or no
// values of their own (v_dim 0), absorbed MLA reading its values out of the key rows (the latent).
// It is a ring (seed article §4.2): positions 0 .. n_sinks-1 keep their slots for ever
// (attention sinks, as StreamingLLM keeps the first tokens that every later token attends to), and
// later positions cycle through the other n_ctx - n_sinks slots, overwriting the oldest. Generation
// never has to stop at n_ctx.
#pragma once

#include <algorithm>
#include <cstddef>
#include <memory>

#include "huge_pages.h"
#include "model.h"

/// Positions kept as attention sinks once the ring wraps (StreamingLLM uses 4).
constexpr int kSinkTokens = 4;

class KVCache {
 public:
  /// The cache of n_layer layers from first_layer on (a pipeline rank's; pipeline.h).
  KVCache(int n_layer, int n_ctx, int k_dim, int v_dim, int first_layer = 0);

  int capacity() const { return n_ctx_; }
  /// True: positions past capacity() overwrite the oldest non-sink slot.
  bool slides() const { return true; }
  /// Positions cached so far: forward() continues at length(), or starts again at 0.
  int length() const { return length_; }
  /// Counts positions pos .. pos + n_tokens - 1 as cached. Throws Error for a gap (pos other
  /// than length() or 0: the slots in between would hold nothing); any length fits a ring.
  void claim(int pos, int n_tokens);

  /// Copies k (k_dim floats) and v (v_dim; none when v_dim is 0) into the slot of position pos.
  void store(int layer, int pos, const float* k, const float* v);
  /// Slots a query at position pos attends to: slots 0 .. n_keys(pos) - 1 are exactly the ones
  /// written so far, so attention never reads a slot that holds nothing (seed article §7.3).
  int n_keys(int pos) const { return std::min(pos + 1, n_ctx_); }
  /// The first of n_keys(pos) consecutive slots of k_dim (v_dim) floats in layer.
  const float* keys(int layer) const { return k_.get() + layer_offset(layer, k_dim_); }
  const float* values(int layer) const {
    return v_dim_ > 0 ? v_.get() + layer_offset(layer, v_dim_) : nullptr;
  }

  /// Keeps the key of a sink position (pos < n_sinks) before RoPE; other positions are ignored.
  void keep_sink_key(int layer, int pos, const float* k);
  /// Once the ring has wrapped (pos >= n_ctx), rotates the kept sink keys to the positions just
  /// before the oldest key still in the ring, so that no query-key distance exceeds n_ctx - 1: RoPE
  /// scores depend only on that distance, and the model never saw longer ones. No-op before.
  /// RoPE turns the first rope_params.n_rot dims of each of the n_head_kv heads of head_dim.
  void place_sinks(int layer, int pos, int n_head_kv, int head_dim, const RopeParams& rope_params);

 private:
  int slot(int pos) const {
    return pos < n_ctx_ ? pos : n_sinks_ + (pos - n_sinks_) % (n_ctx_ - n_sinks_);
  }
  size_t layer_offset(int layer, int dim) const {
    return static_cast<size_t>(layer - first_layer_) * n_ctx_ * dim;
  }

  int n_ctx_;
  int k_dim_;
  int v_dim_;
  int n_sinks_;  ///< kSinkTokens, or 0 when the context is too short to spare them
  int first_layer_;
  int length_ = 0;
  HugePageArray<float> k_;              ///< (n_layer, n_ctx, k_dim)
  HugePageArray<float> v_;              ///< (n_layer, n_ctx, v_dim), or none
  std::unique_ptr<float[]> sink_keys_;  ///< (n_layer, n_sinks, k_dim), before RoPE
};
