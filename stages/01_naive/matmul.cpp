// matmul.cpp: linear() as the seed article's textbook matmul, C (M, N) = A (M, K) @ B (K, N).
//
// The weight is first dequantized into B = W^T (weights.cpp), then multiplied by the naive triple
// loop. Its inner loop walks down a column of B: consecutive k are N floats apart, so every
// multiply-add touches a new cache line. Stage 02 reorders the loops to read B row by row.
#include "matmul.h"

#include <cstdint>

#include "weights.h"

namespace {

/// C (M, N) = A (M, K) @ B (K, N), all row-major fp32. The textbook i, j, k order.
void matmul(const float* A, const float* B, float* C, int64_t M, int64_t N, int64_t K) {
  for (int64_t i = 0; i < M; ++i) {
    for (int64_t j = 0; j < N; ++j) {
      float sum = 0.0f;
      for (int64_t k = 0; k < K; ++k) sum += A[i * K + k] * B[k * N + j];  // B: stride N
      C[i * N + j] = sum;
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
