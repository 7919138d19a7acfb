// matmul.cpp: linear() as the seed article's matmul, C (M, N) = A (M, K) @ B (K, N).
//
// The weight is first dequantized into B = W^T (weights.cpp), then multiplied. Stage 01's i, j, k
// order walked down a column of B (stride N floats: a new cache line per multiply-add). Stage 02
// swaps the two inner loops to i, k, j: the inner loop now reads a row of B and updates a row of C,
// both contiguous, so every cache line is used whole and the compiler can vectorize it.
#include "matmul.h"

#include <cstdint>

#include "weights.h"

namespace {

/// C (M, N) = A (M, K) @ B (K, N), all row-major fp32, in i, k, j order.
void matmul(const float* A, const float* B, float* C, int64_t M, int64_t N, int64_t K) {
  for (int64_t i = 0; i < M; ++i) {
    float* c = C + i * N;
    for (int64_t j = 0; j < N; ++j) c[j] = 0.0f;
    // k before j, so the inner loop streams row k of B (contiguous) instead of a column.
    // Each C[i][j] still sums over k in increasing order: the same numbers as stage 01.
    for (int64_t k = 0; k < K; ++k) {
      const float a = A[i * K + k];
      const float* b = B + k * N;
      for (int64_t j = 0; j < N; ++j) c[j] += a * b[j];
    }
  }
}

}  // namespace

void reserve_linear_scratch(const Weight& w, MatmulScratch& scratch) {
  scratch.weights_f32.reserve(dequantize_transposed_floats(w));
}

void linear(const Weight& w, const float* x, float* y, int n_tokens, MatmulScratch& scratch) {
  // W (d, n) -> B (K = n, N = d), fp32
  const float* B = dequantize_transposed(w, scratch.weights_f32);
  // x (n_tokens, n) @ B (n, d) -> y (n_tokens, d)
  matmul(x, B, y, n_tokens, w.rows, w.cols);
}

// Every product and sum here is fp32, so the logits stay within ~1e-6 of their scale of the
// fp64 reference; the shared suite allows 1e-4.
double logit_tolerance(const Model& /*model*/) {
  return 1e-4;
}
