// ops.cpp: the small kernels of a transformer layer, one vector at a time.
//
// rmsnorm, rope, softmax, swiglu and attention do O(d) or O(n_keys * d) work per token, against
// the O(d^2) of the matmuls, so they stay plain loops, except the attention scores' dot
// products (n_keys x n_head of them per token, growing with the context): SIMD dot products.
#include <cmath>

#include "engine.h"
#include "simd.h"

void rmsnorm(float* out, const float* x, const float* weight, int n, float eps) {
  // Sum of squares in double, as ggml does: a float sum of d = 4096 squares can be off by ~1e-4.
  double sum_squares = 0.0;
  for (int i = 0; i < n; ++i) sum_squares += static_cast<double>(x[i]) * x[i];
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
  for (int i = 0; i < n_pairs; ++i) {
    const double exponent = -2.0 * i / params.n_rot;
    double theta = pos * static_cast<double>(params.freq_scale) *
                   std::pow(static_cast<double>(params.freq_base), exponent);
    if (params.freq_factors != nullptr) theta /= params.freq_factors[i];
    const float cos_theta = static_cast<float>(std::cos(theta));
    const float sin_theta = static_cast<float>(std::sin(theta));
    const int first = adjacent ? 2 * i : i;
    const int second = adjacent ? 2 * i + 1 : i + n_pairs;
    for (int h = 0; h < n_heads; ++h) {
      float* head = x + static_cast<size_t>(h) * head_dim;
      const float a = head[first];
      const float b = head[second];
      head[first] = a * cos_theta - b * sin_theta;
      head[second] = a * sin_theta + b * cos_theta;
    }
  }
}

void softmax(float* x, int n) {
  // exp(x - max) <= 1, so nothing overflows, and the largest term is exactly 1, so the sum >= 1.
  float max_value = x[0];
  for (int i = 1; i < n; ++i) max_value = std::fmax(max_value, x[i]);
  float sum = 0.0f;
  for (int i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - max_value);
    sum += x[i];
  }
  const float inv_sum = 1.0f / sum;
  for (int i = 0; i < n; ++i) x[i] *= inv_sum;
}

void swiglu(float* gate, const float* up, int n) {
  // silu(g) = g * sigmoid(g) = g / (1 + exp(-g)); for g << 0, exp(-g) = inf gives -0, not NaN.
  for (int i = 0; i < n; ++i) gate[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

void attention(float* out, const float* q, const float* keys, const float* values, int n_keys,
               int n_head, int n_head_kv, int head_dim, float* scores) {
  const int kv_dim = n_head_kv * head_dim;
  const int group = n_head / n_head_kv;  // query heads sharing one kv head (GQA)
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  // Heads are independent (each has its own scores row and output slice): one per thread.
#pragma omp parallel for schedule(static)
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
