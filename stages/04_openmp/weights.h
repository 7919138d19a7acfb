// weights.h: a stored weight matrix -> the fp32 "B" operand of the textbook matmul.
//
// Stages 01-04 follow the seed article's layout: C (M, N) = A (M, K) @ B (K, N), all fp32,
// row-major. A GGUF weight W is stored the other way round, (rows = d "out", cols = n "in"), with
// its quantization blocks along a row, so each call first writes out B = W^T, shape (K = n, N = d).
// This file stays the same through stage 04; stage 05 fuses the dequantization into the matmul.
#pragma once

#include <cstddef>
#include <vector>

#include "model.h"

/// Columns of B per panel. 64 floats = 256 bytes = 4 AVX-512 registers of accumulators,
/// the seed article's choice; `make tune-panel` measures 16..256 (docs/stages/03_blocking.md).
constexpr int64_t kPanelWidth = 64;

/// Dequantizes W (rows, cols), any supported type, into B = W^T (K = cols, N = rows), stored in
/// column panels (stage 03): panel p holds columns p*W .. p*W + W - 1 of B (W = kPanelWidth) as K
/// contiguous rows of W floats, B[k][j] at p*K*W + k*W + (j - p*W); the last panel is padded with
/// zero columns. B lives in scratch, which grows only when too small. Returns B.
const float* dequantize_transposed(const Weight& w, std::vector<float>& scratch);

/// Floats of scratch that dequantize_transposed(w, scratch) uses: B plus a tile of rows.
size_t dequantize_transposed_floats(const Weight& w);
