// kv_cache.cpp: a preallocated ring of KV slots with attention sinks (see kv_cache.h).
#include "kv_cache.h"

#include <algorithm>
#include <cstdint>
#include <limits>

#include "engine.h"
#include "error.h"

namespace {

/// Floats in one of K or V, after checking the shape.
size_t cache_floats(int n_layer, int n_ctx, int dim) {
  check(n_layer > 0 && n_ctx > 0 && dim > 0, "KV cache: bad shape (", n_layer, ", ", n_ctx, ", ",
        dim, ")");
  return static_cast<size_t>(n_layer) * n_ctx * dim;
}

}  // namespace

KVCache::KVCache(int n_layer, int n_ctx, int k_dim, int v_dim, int first_layer)
    : n_ctx_(n_ctx),
      k_dim_(k_dim),
      v_dim_(v_dim),
      // Uninitialised, so the OS commits pages only as rows are written: a 4096-position cache
      // of a 7B model (2 x 4096 x 30 x 4096 floats = 4 GB) costs nothing until it is used. On
      // 2 MiB pages (huge_pages.h): a 7B token's rows of K and V (16 KiB each, in 30 layers)
      // took 240 first-touch page faults on 4 KiB pages, one a layer every 128 positions here;
      // 2-thread decode measured 1.02x-1.07x faster (docs/stages/30_huge_pages.md).
      // Sinks only when at least as many ring slots remain (a 4-token window is useless).
      n_sinks_(n_ctx >= 2 * kSinkTokens ? kSinkTokens : 0),
      first_layer_(first_layer),
      k_(huge_page_array<float>(cache_floats(n_layer, n_ctx, k_dim))),
      v_(v_dim > 0 ? huge_page_array<float>(cache_floats(n_layer, n_ctx, v_dim)) : nullptr),
      sink_keys_(new float[static_cast<size_t>(n_layer) * n_sinks_ * k_dim]) {}

void KVCache::claim(int pos, int n_tokens) {
  check(n_tokens >= 0, "KV cache: bad token count ", n_tokens);
  check(pos == length_ || pos == 0, "KV cache: position ", pos, " leaves a gap: ", length_,
        " positions are cached (continue at ", length_, ", or start again at 0)");
  check(int64_t(pos) + n_tokens <= std::numeric_limits<int>::max(), "KV cache: positions past ",
        std::numeric_limits<int>::max());
  length_ = pos + n_tokens;
}

void KVCache::store(int layer, int pos, const float* k, const float* v) {
  const size_t s = static_cast<size_t>(slot(pos));
  std::copy(k, k + k_dim_, k_.get() + layer_offset(layer, k_dim_) + s * k_dim_);
  if (v_dim_ > 0) std::copy(v, v + v_dim_, v_.get() + layer_offset(layer, v_dim_) + s * v_dim_);
}

void KVCache::keep_sink_key(int layer, int pos, const float* k) {
  if (pos >= n_sinks_) return;
  std::copy(
      k, k + k_dim_,
      sink_keys_.get() + (static_cast<size_t>(layer - first_layer_) * n_sinks_ + pos) * k_dim_);
}

void KVCache::place_sinks(int layer, int pos, int n_head_kv, int head_dim,
                          const RopeParams& rope_params) {
  if (pos < n_ctx_ || n_sinks_ == 0) return;
  const int oldest = pos - (n_ctx_ - n_sinks_) + 1;  // oldest position left in the ring
  for (int i = 0; i < n_sinks_; ++i) {
    const float* raw =
        sink_keys_.get() + (static_cast<size_t>(layer - first_layer_) * n_sinks_ + i) * k_dim_;
    float* key =
        k_.get() + layer_offset(layer, k_dim_) + static_cast<size_t>(i) * k_dim_;  // slot i
    std::copy(raw, raw + k_dim_, key);
    rope(key, n_head_kv, head_dim, oldest - n_sinks_ + i, rope_params);  // just before the oldest
  }
}
