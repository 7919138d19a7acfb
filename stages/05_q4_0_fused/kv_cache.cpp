// kv_cache.cpp: a flat, preallocated KV cache (see kv_cache.h).
#include "kv_cache.h"

#include <algorithm>
#include <cstdint>

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
      k_(new float[cache_floats(n_layer, n_ctx, kv_dim)]),
      v_(new float[cache_floats(n_layer, n_ctx, kv_dim)]) {}

void KVCache::claim(int pos, int n_tokens) {
  check(n_tokens >= 0, "KV cache: bad token count ", n_tokens);
  check(pos == length_ || pos == 0, "KV cache: position ", pos, " leaves a gap: ", length_,
        " positions are cached (continue at ", length_, ", or start again at 0)");
  check(static_cast<int64_t>(pos) + n_tokens <= n_ctx_, "context full: positions ", pos, "..",
        static_cast<int64_t>(pos) + n_tokens - 1, " do not fit a context of ", n_ctx_,
        " positions");
  length_ = pos + n_tokens;
}

void KVCache::store(int layer, int pos, const float* k, const float* v) {
  const size_t row = row_offset(layer, pos);
  std::copy(k, k + kv_dim_, k_.get() + row);
  std::copy(v, v + kv_dim_, v_.get() + row);
}
