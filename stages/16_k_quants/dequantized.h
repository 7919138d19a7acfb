// dequantized.h: the dot product for the weight types a stage has no kernel of its own for.
//
// common/ dequantizes every type llama-quantize writes (quant.h). From stage 05 on, a stage
// computes the types it was written for (F32, F16, Q4_0, Q8_0, Q6_K) with its own kernels, and
// every other one (Q4_1, Q5_0, Q5_1, Q2_K to Q5_K, BF16) through this function: any file runs,
// correctly, but each row is decoded into floats again for every token, several times the cost
// of a fused kernel. A later stage gives the K-quants kernels of their own.
#pragma once

#include <cstdint>

#include "model.h"

/// Row r of W . x (w.cols,), in fp32, for any type common/ dequantizes.
float dot_dequantized(const Weight& w, int64_t r, const float* x);
