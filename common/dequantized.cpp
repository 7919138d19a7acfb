// dequantized.cpp: decode a chunk of a row with common/'s reference dequantizer, then multiply.
#include "dequantized.h"

#include <algorithm>

#include "quant.h"

namespace {

// Weights decoded at a time: one K-quant super-block, so a whole number of blocks of every type
// (blocks hold 1, 32 or 256 weights), and 1 KiB of floats on the stack.
constexpr int64_t kChunk = kQK_K;

// Independent partial sums. One running float sum waits for each add (~4 cycles); the compiler
// may not reorder it by itself, but eight separate sums it can keep in one vector register.
constexpr int kLanes = 8;

}  // namespace

float dot_dequantized(const Weight& w, int64_t r, const float* x) {
  const auto* row = static_cast<const unsigned char*>(w.row(r));
  const size_t chunk_bytes = type_row_bytes(w.type, std::min(kChunk, w.cols));
  float chunk[kChunk];
  float lanes[kLanes] = {};
  for (int64_t k0 = 0; k0 < w.cols; k0 += kChunk, row += chunk_bytes) {
    const int64_t n = std::min(kChunk, w.cols - k0);  // a whole number of blocks (w.cols is)
    dequantize_row(w.type, row, chunk, n);
    int64_t k = 0;
    for (; k + kLanes <= n; k += kLanes) {
      for (int l = 0; l < kLanes; ++l) lanes[l] += chunk[k + l] * x[k0 + k + l];
    }
    for (; k < n; ++k) lanes[0] += chunk[k] * x[k0 + k];
  }
  float sum = 0.0f;
  for (float lane : lanes) sum += lane;
  return sum;
}
