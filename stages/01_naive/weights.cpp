// weights.cpp: dequantize a whole weight matrix into B = W^T (see weights.h).
//
// What this design costs: every linear() call turns its whole matrix into fp32, so every token
// re-dequantizes every weight of the model. For a 7B Q4_0 file that is ~3.6 GB read and ~27 GB of
// fp32 written per token (6.9e9 weights x 4 bytes), and the scratch must hold the largest matrix:
// the output projection, 102400 x 4096 floats = 1.6 GB. That traffic, not the arithmetic, is why
// stage 05 fuses the Q4_0 dequantization into the matmul and never materialises B.
#include "weights.h"

#include <algorithm>
#include <cstdint>

#include "quant.h"

namespace {

// Rows of W dequantized together before they are written out as columns of B. Writing one row of W
// alone would touch one float per row of B (one cache line each); 32 rows fill 32 consecutive
// floats of each row of B, i.e. two whole 64-byte cache lines per store run.
constexpr int64_t kTileRows = 32;

}  // namespace

size_t dequantize_transposed_floats(const Weight& w) {
  const int64_t tile_rows = std::min(kTileRows, w.rows);
  return static_cast<size_t>(w.rows * w.cols + tile_rows * w.cols);
}

const float* dequantize_transposed(const Weight& w, std::vector<float>& scratch) {
  check_weight(w);

  const size_t needed = dequantize_transposed_floats(w);
  if (scratch.size() < needed) scratch.resize(needed);

  const int64_t K = w.cols;  // "in": rows of B
  const int64_t N = w.rows;  // "out": columns of B
  float* B = scratch.data();
  float* tile = B + K * N;  // (kTileRows, K): rows j0 .. j0 + n_rows - 1 of W in fp32

  for (int64_t j0 = 0; j0 < N; j0 += kTileRows) {
    const int64_t n_rows = std::min(kTileRows, N - j0);
    for (int64_t r = 0; r < n_rows; ++r) dequantize_row(w.type, w.row(j0 + r), tile + r * K, K);
    // tile (n_rows, K) -> B[:, j0 : j0 + n_rows]
    for (int64_t k = 0; k < K; ++k) {
      float* b_row = B + k * N + j0;
      for (int64_t r = 0; r < n_rows; ++r) b_row[r] = tile[r * K + k];
    }
  }
  return B;
}
