// kv_cache.h: the keys and values of every position run so far, per layer.
//
// Layout: K and V each [layer][pos][kv_dim] floats, allocated once for n_ctx positions. Position
// pos lives in row pos, so the cache is full after n_ctx tokens and forward() refuses more.
// Stage 06 turns it into a ring that overwrites the oldest rows instead.
#pragma once

#include <cstddef>
#include <memory>

class KVCache {
 public:
  KVCache(int n_layer, int n_ctx, int kv_dim);

  int capacity() const { return n_ctx_; }
  /// False: positions past capacity() are refused, never wrapped.
  bool slides() const { return false; }
  /// Positions cached so far: forward() continues at length(), or starts again at 0.
  int length() const { return length_; }
  /// Counts positions pos .. pos + n_tokens - 1 as cached. Throws Error for a gap (pos other
  /// than length() or 0: the rows in between would hold nothing) or ("context full ...") unless
  /// they fit.
  void claim(int pos, int n_tokens);

  /// Copies k and v (kv_dim floats each) into the rows of position pos in layer.
  void store(int layer, int pos, const float* k, const float* v);
  /// Keys a query at position pos attends to: the rows of positions 0 .. pos.
  int n_keys(int pos) const { return pos + 1; }
  /// The first of n_keys(pos) consecutive rows of kv_dim floats in layer.
  const float* keys(int layer) const { return k_.get() + layer_offset(layer); }
  const float* values(int layer) const { return v_.get() + layer_offset(layer); }

 private:
  size_t layer_offset(int layer) const { return static_cast<size_t>(layer) * n_ctx_ * kv_dim_; }
  size_t row_offset(int layer, int pos) const {
    return layer_offset(layer) + static_cast<size_t>(pos) * kv_dim_;
  }

  int n_ctx_;
  int kv_dim_;
  int length_ = 0;
  std::unique_ptr<float[]> k_;  ///< (n_layer, n_ctx, kv_dim)
  std::unique_ptr<float[]> v_;  ///< (n_layer, n_ctx, kv_dim)
};
