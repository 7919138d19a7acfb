// ops.cpp: the small kernels of a transformer layer, one vector at a time.
//
// rmsnorm, rope, softmax, swiglu and attention do O(d) or O(n_keys * d) work per token, against
// the O(d^2) of the matmuls, yet between the matmuls they add up. So they are SIMD too
// (simd.cpp): the attention scores' dot products (n_keys x n_head of them per token, growing
// with the context), RMSNorm's sum of squares, the exponentials of
// softmax and SwiGLU (a vector e^x: the compiler does not vectorize std::exp), and RoPE's
// rotation, each head's cos and sin computed once for all heads. The loops the compiler already
// vectorizes (RMSNorm's scaling, attention's weighted sum of values) stay as they are.
#include <cmath>
#include <vector>

#include "engine.h"
#include "simd.h"

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

void attention(float* out, const float* q, const float* keys, const float* values, int n_keys,
               int n_head, int n_head_kv, int head_dim, float* scores) {
  const int kv_dim = n_head_kv * head_dim;
  const int group = n_head / n_head_kv;  // query heads sharing one kv head (GQA)
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  // Heads are independent (each has its own scores row and output slice): one per thread.
  // Only when there is enough of it: a short context's attention takes less time on one thread
  // than waking the others (7B decode, ~30 keys: 1.8 ms a token on one thread, 5.8 on two).
  const int64_t work = static_cast<int64_t>(n_keys) * n_head * head_dim;
#pragma omp parallel for schedule(static) if (work >= kParallelAttentionWork)
  for (int h = 0; h < n_head; ++h) {
    const float* q_head = q + static_cast<size_t>(h) * head_dim;  // (hd,)
    const int kv_offset = (h / group) * head_dim;
    float* head_scores = scores + static_cast<size_t>(h) * n_keys;  // (n_keys,)
    // scores (n_keys,) = K_h (n_keys, hd) @ q_h (hd,) / sqrt(hd)
    for (int t = 0; t < n_keys; ++t) {
      const float* key = keys + static_cast<size_t>(t) * kv_dim + kv_offset;
      head_scores[t] = simd::dot_f32(q_head, key, head_dim) * scale;
    }
    softmax(head_scores, n_keys);
    // out_h (hd,) = scores (n_keys,) @ V_h (n_keys, hd)
    float* out_head = out + static_cast<size_t>(h) * head_dim;
    for (int i = 0; i < head_dim; ++i) out_head[i] = 0.0f;
    for (int t = 0; t < n_keys; ++t) {
      const float* value = values + static_cast<size_t>(t) * kv_dim + kv_offset;
      const float weight = head_scores[t];
      for (int i = 0; i < head_dim; ++i) out_head[i] += weight * value[i];
    }
  }
}
