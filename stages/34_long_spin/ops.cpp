// ops.cpp: the small kernels of a transformer layer, one vector at a time.
//
// rmsnorm, rope, softmax, swiglu and attention do O(d) or O(n_keys * d) work per token, against
// the O(d^2) of the matmuls, yet between the matmuls they add up. So they are SIMD too
// (simd.cpp): the attention scores' dot products (n_keys x n_head of them per token, growing
// with the context) 16 keys at a time, its weighted sum of values with the output head in
// registers, RMSNorm's sum of squares, the exponentials of softmax and SwiGLU (a vector e^x: the
// compiler does not vectorize std::exp), and RoPE's rotation, each head's cos and sin computed
// once for all heads. The loop the compiler already vectorizes (RMSNorm's scaling) stays as it is.
// YaRN in RoPE, and attention whose key and value heads differ in width (MLA: 192, 128).
#include "ops.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "engine.h"
#include "simd.h"

namespace {

/// YaRN's share of pair i's unscaled angle: 1 below yarn_low, 0 above yarn_high, a
/// linear ramp between (ggml's rope_yarn_ramp).
double yarn_ramp(const RopeParams& params, int i) {
  const double y =
      (i - params.yarn_low) / std::max(0.001, double(params.yarn_high - params.yarn_low));
  return 1.0 - std::clamp(y, 0.0, 1.0);
}

}  // namespace

void rmsnorm(float* out, const float* x, const float* weight, int n, float eps) {
  const double sum_squares = simd::sum_of_squares(x, n);
  const float scale = static_cast<float>(1.0 / std::sqrt(sum_squares / n + eps));
  for (int i = 0; i < n; ++i) out[i] = x[i] * scale * weight[i];
}

void rope(float* x, int n_heads, int head_dim, int pos, const RopeParams& params) {
  // Pair i (i < n_rot / 2) of every head turns by theta_i = pos * freq_scale * base^(-2i/n_rot)
  // / factor_i. The angle is computed in double: at pos ~4000 a float angle is off by up to ~1e-4
  // rad.
  const int n_pairs = params.n_rot / 2;
  // AdjacentPairs (llama): (2i, 2i + 1).  HalfSplit (qwen2, neox): (i, i + n_rot / 2).
  const bool adjacent = params.style == RopeStyle::AdjacentPairs;
  // Every element's cos and signed sin first, then each head in one pass (a' = a cos -
  // b sin, b' = b cos + a sin), instead of every head once per pair.
  std::vector<float> c(params.n_rot), s(params.n_rot);
  for (int i = 0; i < n_pairs; ++i) {
    const double exponent = -2.0 * i / params.n_rot;
    double theta = pos * static_cast<double>(params.freq_scale) *
                   std::pow(static_cast<double>(params.freq_base), exponent);
    if (params.freq_factors != nullptr) theta /= params.freq_factors[i];
    // YaRN gives the fast pairs, which turn many times within the original context,
    // their unscaled angle back (the slow ones keep the scaled one, as in linear scaling).
    if (params.yarn) {
      const double ramp = yarn_ramp(params, i);
      theta = theta * (1.0 - ramp) + theta / params.freq_scale * ramp;
    }
    const int first = adjacent ? 2 * i : i;
    const int second = adjacent ? 2 * i + 1 : i + n_pairs;
    c[first] = c[second] = static_cast<float>(std::cos(theta));
    s[second] = static_cast<float>(std::sin(theta));
    s[first] = -s[second];
  }
  for (int h = 0; h < n_heads; ++h) {
    simd::rotate_head(x + static_cast<size_t>(h) * head_dim, c.data(), s.data(), params.n_rot,
                      adjacent);
  }
}

void softmax(float* x, int n) {
  simd::softmax(x, n);
}

void swiglu(float* gate, const float* up, int n) {
  simd::swiglu(gate, up, n);
}

/// Keys x heads x head width below which attention stays on the calling thread: 2^19 takes ~0.25
/// ms on one core (7B: 128 keys), about twice what waking a sleeping thread cost here.
constexpr int64_t kParallelAttentionWork = int64_t{1} << 19;
/// Value rows a pass adds into every head of a group: 64 KB of absorbed MLA's 512-float rows,
/// which stay in L2 while the group's 16 heads read them.
constexpr int kValueKeys = 32;

AttentionShape plain_heads(int n_head, int n_head_kv, int head_dim) {
  return {n_head, n_head_kv, head_dim, head_dim, 1.0f / std::sqrt(static_cast<float>(head_dim))};
}

void attention(float* out, const float* q, const float* keys, const float* values, int n_keys,
               int n_head, int n_head_kv, int head_dim, float* scores) {
  attention(out, q, keys, values, n_keys, plain_heads(n_head, n_head_kv, head_dim), scores);
}

void attention(float* out, const float* q, const float* keys, const float* values, int n_keys,
               const AttentionShape& shape, float* scores) {
  attention(out, 0, q, 0, keys, values, &n_keys, 1, shape, scores);
}

void attention(float* out, int64_t out_stride, const float* q, int64_t q_stride, const float* keys,
               const float* values, const int* n_keys, int n_queries, const AttentionShape& shape,
               float* scores) {
  const int n_head = shape.n_head, head_dim = shape.k_head, v_head = shape.v_head;
  const int k_dim = shape.n_head_kv * head_dim;  // a key row, a value row
  const int v_dim = shape.v_row > 0 ? shape.v_row : shape.n_head_kv * v_head;
  const int group = n_head / shape.n_head_kv;  // query heads sharing one kv head (GQA)
  const float scale = shape.scale;
  const int max_keys = *std::max_element(n_keys, n_keys + n_queries);
  // Heads are independent (each has its own scores row and output slice): one per thread.
  // Only when there is enough of it: a short context's attention takes less time on one thread
  // than waking the others (7B decode, ~30 keys: 1.8 ms a token on one thread, 5.8 on two).
  // The query heads that share a key head, and the queries of the call, go over the keys
  // together, a block of keys at a time, so each key and value row is read once for all of
  // them, not once per head and query: absorbed MLA's 16 heads share one 576-float row, a 9 MB
  // layer at 4,096 keys, and a 7B layer's 512 keys are 16 MB of keys and values, read from
  // memory once per query when queries went one at a time. A task is a block of such heads;
  // with fewer key heads than threads, a group splits into one block per thread. Each head's
  // sums run in the same order as with one query: the same result.
  const int64_t work = static_cast<int64_t>(max_keys) * n_head * head_dim * n_queries;
  const int threads_per_kv = std::max(1, omp_get_max_threads() / shape.n_head_kv);
  const int block = (group + threads_per_kv - 1) / threads_per_kv;  // heads per task
  const int blocks_per_kv = (group + block - 1) / block;
#pragma omp parallel for schedule(static) if (work >= kParallelAttentionWork)
  for (int task = 0; task < shape.n_head_kv * blocks_per_kv; ++task) {
    const int kv_head = task / blocks_per_kv;
    const int h0 = kv_head * group + (task % blocks_per_kv) * block;
    const int h1 = std::min(h0 + block, (kv_head + 1) * group);
    // Query i's scores for head h: max_keys floats.
    auto scores_of = [&](int i, int h) {
      return scores + (static_cast<size_t>(i) * n_head + h) * max_keys;
    };
    auto q_of = [&](int i, int h) { return q + i * q_stride + static_cast<size_t>(h) * head_dim; };
    auto out_of = [&](int i, int h) {
      return out + i * out_stride + static_cast<size_t>(h) * v_head;
    };
    // scores_h (n_keys,) = K (n_keys, hd) @ q_h (hd,) * scale (1 / sqrt(hd) unless MLA's)
    const bool in_blocks = head_dim % simd::kKeyBlock == 0;  // whole blocks of keys below
    if (in_blocks) {  // kKeyBlock keys at a time (simd.h), for every query that sees all of them
      for (int t = 0; t + simd::kKeyBlock <= max_keys; t += simd::kKeyBlock) {
        const float* key_rows = keys + static_cast<size_t>(t) * k_dim + kv_head * head_dim;
        for (int i = 0; i < n_queries; ++i) {
          if (t + simd::kKeyBlock > n_keys[i]) continue;
          for (int h = h0; h < h1; ++h)
            simd::dot_keys(q_of(i, h), key_rows, k_dim, head_dim, scale, scores_of(i, h) + t);
        }
      }
    }
    for (int i = 0; i < n_queries; ++i) {
      const int first = in_blocks ? n_keys[i] / simd::kKeyBlock * simd::kKeyBlock : 0;
      for (int t = first; t < n_keys[i]; ++t) {  // the keys left
        const float* key = keys + static_cast<size_t>(t) * k_dim + kv_head * head_dim;
        for (int h = h0; h < h1; ++h)
          scores_of(i, h)[t] = simd::dot_f32(q_of(i, h), key, head_dim) * scale;
      }
      for (int h = h0; h < h1; ++h) {
        softmax(scores_of(i, h), n_keys[i]);
        float* out_head = out_of(i, h);
        for (int v = 0; v < v_head; ++v) out_head[v] = 0.0f;
      }
    }
    // out_h (v_head,) = scores_h (n_keys,) @ V (n_keys, v_head)
    if (v_head % simd::kKeyBlock == 0) {  // out_h in registers over kValueKeys rows (simd.h)
      for (int t = 0; t < max_keys; t += kValueKeys) {
        const float* value_rows = values + static_cast<size_t>(t) * v_dim + kv_head * v_head;
        for (int i = 0; i < n_queries; ++i) {
          const int rows = std::min(kValueKeys, n_keys[i] - t);
          if (rows <= 0) continue;
          for (int h = h0; h < h1; ++h)
            simd::add_weighted_rows(out_of(i, h), scores_of(i, h) + t, value_rows, v_dim, rows,
                                    v_head);
        }
      }
      continue;
    }
    for (int i = 0; i < n_queries; ++i) {  // heads of other widths
      for (int t = 0; t < n_keys[i]; ++t) {
        const float* value = values + static_cast<size_t>(t) * v_dim + kv_head * v_head;
        for (int h = h0; h < h1; ++h) {
          const float weight = scores_of(i, h)[t];
          float* out_head = out_of(i, h);
          for (int v = 0; v < v_head; ++v) out_head[v] += weight * value[v];
        }
      }
    }
  }
}
