// dequantized.h: the dot product for the weight types a stage has no kernel of its own for.
//
// common/ dequantizes every type llama-quantize writes (quant.h). From stage 05 on, a stage
// computes the types it was written for with its own kernels (F32, F16, Q4_0, Q8_0 and Q6_K from
// stage 05; Q4_K and Q5_K from stage 18, the other K-quants from stage 19) and every other one
// through this function: any file runs, correctly, but each row is decoded into floats again for
// every token, several times the cost of a fused kernel. It is the same in every stage, so it
// lives here, not in a stage.
#pragma once

#include <cstdint>

#include "model.h"

/// Row r of W . x (w.cols,), in fp32, for any type common/ dequantizes.
float dot_dequantized(const Weight& w, int64_t r, const float* x);
