// matmul.cpp: linear() as the seed article's matmul, C (M, N) = A (M, K) @ B (K, N).
//
// The weight is first dequantized into B = W^T (weights.cpp), then multiplied. Stage 02's i, k, j
// order streams rows of B but re-reads and re-writes the whole row of C (N floats) for every k:
// 2 * N * K floats of C traffic, from L2 once C's row outgrows L1 (N = 11008 floats = 43 KiB).
// Stage 03 blocks the columns: a tile of kPanelWidth columns of C is summed in registers over all
// of K and written once. B is stored in matching column panels, so a tile reads one contiguous
// K x 64 block (a strided panel would touch a new 4 KiB page per k), which every row of A reuses
// from cache. Stage 04 gives each thread a share of the column tiles (see matmul()).
#include "matmul.h"

#include <algorithm>
#include <cstdint>

#include "weights.h"

namespace {

/// C (M, N) = A (M, K) @ B (K, N); B in column panels of kPanelWidth (weights.h), A and C
/// row-major.
void matmul(const float* A, const float* B, float* C, int64_t M, int64_t N, int64_t K) {
  // One column tile at a time; its accumulators stay in registers for all of K.
  // The tiles (output columns) are split among threads, statically: every tile costs the
  // same. The seed article split the i loop (tokens) instead, which at decode time (M = 1) gives
  // one thread all the work. Tiles are 256 bytes, so with C 64-byte aligned no two threads ever
  // write the same cache line (no false sharing).
  const int64_t n_panels = (N + kPanelWidth - 1) / kPanelWidth;
#pragma omp parallel for schedule(static)
  for (int64_t p = 0; p < n_panels; ++p) {
    const int64_t j0 = p * kPanelWidth;
    const float* panel = B + j0 * K;  // (K, kPanelWidth), contiguous
    const int64_t width = std::min(kPanelWidth, N - j0);
    for (int64_t i = 0; i < M; ++i) {  // every row of A reuses the panel from cache
      float acc[kPanelWidth] = {};
      for (int64_t k = 0; k < K; ++k) {  // each C[i][j] sums over k in increasing order, as before
        const float a = A[i * K + k];
        const float* b = panel + k * kPanelWidth;
        for (int64_t j = 0; j < kPanelWidth; ++j) acc[j] += a * b[j];
      }
      std::copy(acc, acc + width, C + i * N + j0);
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
