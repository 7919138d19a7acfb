// weights.h: a stored weight matrix -> the fp32 "B" operand of the textbook matmul.
//
// Stages 01-04 follow the seed article's layout: C (M, N) = A (M, K) @ B (K, N), all fp32,
// row-major. A GGUF weight W is stored the other way round, (rows = d "out", cols = n "in"), with
// its quantization blocks along a row, so each call first writes out B = W^T, shape (K = n, N = d).
// Stage 03 stores B in column panels (blocking); stage 05 fuses the dequantization into the matmul.
#pragma once

#include <cstddef>
#include <vector>

#include "model.h"

/// Dequantizes W (rows, cols), any supported type, into B = W^T (K = cols, N = rows), row-major:
/// B[k * N + j] = W[j][k]. B lives in scratch, which grows only when too small. Returns B.
const float* dequantize_transposed(const Weight& w, std::vector<float>& scratch);

/// Floats of scratch that dequantize_transposed(w, scratch) uses: B plus a tile of rows.
size_t dequantize_transposed_floats(const Weight& w);
