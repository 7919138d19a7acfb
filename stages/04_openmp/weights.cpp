// weights.cpp: dequantize a whole weight matrix into B = W^T (see weights.h).
//
// What this design costs: every linear() call turns its whole matrix into fp32, so every token
// re-dequantizes every weight of the model. For a 7B Q4_0 file that is ~3.6 GB read and ~27 GB of
// fp32 written per token (6.9e9 weights x 4 bytes), and the scratch must hold the largest matrix:
// the output projection, 102400 x 4096 floats = 1.6 GB. That traffic, not the arithmetic, is why
// stage 05 fuses the Q4_0 dequantization into the matmul and never materialises B.
#include "weights.h"

#include <omp.h>

#include <algorithm>
#include <cstdint>

#include "quant.h"

size_t dequantize_transposed_floats(const Weight& w) {
  const int64_t n_panels = (w.rows + kPanelWidth - 1) / kPanelWidth;
  const int64_t n_tiles = omp_get_max_threads();  // One row tile per thread
  return static_cast<size_t>((n_panels + n_tiles) * kPanelWidth * w.cols);
}

const float* dequantize_transposed(const Weight& w, std::vector<float>& scratch) {
  check_weight(w);

  const size_t needed = dequantize_transposed_floats(w);
  if (scratch.size() < needed) scratch.resize(needed);

  const int64_t K = w.cols;  // "in": rows of B
  const int64_t N = w.rows;  // "out": columns of B
  const int64_t n_panels = (N + kPanelWidth - 1) / kPanelWidth;
  float* B = scratch.data();
  float* tiles = B + n_panels * kPanelWidth * K;  // per thread (kPanelWidth, K): a panel's rows

  // Panels are independent; each thread dequantizes its share into its own tile.
#pragma omp parallel for schedule(static)
  for (int64_t p = 0; p < n_panels; ++p) {
    float* tile = tiles + omp_get_thread_num() * kPanelWidth * K;
    const int64_t j0 = p * kPanelWidth;
    const int64_t n_rows = std::min(kPanelWidth, N - j0);
    for (int64_t r = 0; r < n_rows; ++r) dequantize_row(w.type, w.row(j0 + r), tile + r * K, K);
    // tile (n_rows, K) -> panel (K, kPanelWidth): each k writes one contiguous run of 64 floats.
    float* panel = B + p * kPanelWidth * K;
    for (int64_t k = 0; k < K; ++k) {
      float* b_row = panel + k * kPanelWidth;
      for (int64_t r = 0; r < n_rows; ++r) b_row[r] = tile[r * K + k];
      for (int64_t r = n_rows; r < kPanelWidth; ++r) b_row[r] = 0.0f;  // padding columns
    }
  }
  return B;
}
