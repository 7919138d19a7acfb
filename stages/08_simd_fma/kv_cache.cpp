// kv_cache.cpp: a preallocated ring of KV slots with attention sinks (see kv_cache.h).
#include "kv_cache.h"

#include <algorithm>
#include <cstdint>
#include <limits>

#include "engine.h"
#include "error.h"

namespace {

/// Floats in one of K or V, after checking the shape.
size_t cache_floats(int n_layer, int n_ctx, int kv_dim) {
  check(n_layer > 0 && n_ctx > 0 && kv_dim > 0, "KV cache: bad shape (", n_layer, ", ", n_ctx, ", ",
        kv_dim, ")");
  return static_cast<size_t>(n_layer) * n_ctx * kv_dim;
}

}  // namespace

KVCache::KVCache(int n_layer, int n_ctx, int kv_dim)
    : n_ctx_(n_ctx),
      kv_dim_(kv_dim),
      // new float[] leaves the floats uninitialised, so the OS commits pages only as rows are
      // written: a 4096-position cache of a 7B model (2 x 4096 x 30 x 4096 floats = 4 GB) costs
      // nothing until it is used.
      // Sinks only when at least as many ring slots remain (a 4-token window is useless).
      n_sinks_(n_ctx >= 2 * kSinkTokens ? kSinkTokens : 0),
      k_(new float[cache_floats(n_layer, n_ctx, kv_dim)]),
      v_(new float[cache_floats(n_layer, n_ctx, kv_dim)]),
      sink_keys_(new float[static_cast<size_t>(n_layer) * n_sinks_ * kv_dim]) {}

void KVCache::claim(int pos, int n_tokens) {
  check(n_tokens >= 0, "KV cache: bad token count ", n_tokens);
  check(pos == length_ || pos == 0, "KV cache: position ", pos, " leaves a gap: ", length_,
        " positions are cached (continue at ", length_, ", or start again at 0)");
  check(int64_t(pos) + n_tokens <= std::numeric_limits<int>::max(), "KV cache: positions past ",
        std::numeric_limits<int>::max());
  length_ = pos + n_tokens;
}

void KVCache::store(int layer, int pos, const float* k, const float* v) {
  const size_t row = layer_offset(layer) + static_cast<size_t>(slot(pos)) * kv_dim_;
  std::copy(k, k + kv_dim_, k_.get() + row);
  std::copy(v, v + kv_dim_, v_.get() + row);
}

void KVCache::keep_sink_key(int layer, int pos, const float* k) {
  if (pos >= n_sinks_) return;
  std::copy(k, k + kv_dim_,
            sink_keys_.get() + (static_cast<size_t>(layer) * n_sinks_ + pos) * kv_dim_);
}

void KVCache::place_sinks(int layer, int pos, int n_head_kv, int head_dim,
                          const RopeParams& rope_params) {
  if (pos < n_ctx_ || n_sinks_ == 0) return;
  const int oldest = pos - (n_ctx_ - n_sinks_) + 1;  // oldest position left in the ring
  for (int i = 0; i < n_sinks_; ++i) {
    const float* raw = sink_keys_.get() + (static_cast<size_t>(layer) * n_sinks_ + i) * kv_dim_;
    float* key = k_.get() + layer_offset(layer) + static_cast<size_t>(i) * kv_dim_;  // slot i
    std::copy(raw, raw + kv_dim_, key);
    rope(key, n_head_kv, head_dim, oldest - n_sinks_ + i, rope_params);  // just before the oldest
  }
}
