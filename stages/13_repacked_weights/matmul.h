// matmul.h: packed weights, next to engine.h's linear().
//
// linear(const Weight&) takes a matrix as the file stores it. The engine instead packs each matrix
// once, at load, into the layout the SIMD kernels read (simd.h) and calls the PackedWeight form.
#pragma once

#include <vector>

#include "aligned.h"
#include "engine.h"

/// For tools that time linear() as the engine calls it (tools/bench_kernels.cpp).
#define ENGINE_PACKS_WEIGHTS 1

/// A weight matrix ready for linear(): source describes it (and is what float types, and builds
/// without SIMD, compute from); data holds Q4_0 and Q8_0 matrices in simd.h's packed layout.
struct PackedWeight {
  Weight source;
  std::vector<unsigned char, CacheLineAllocator<unsigned char>> data;  ///< empty: use source
  size_t group_bytes = 0;  ///< bytes of one group of simd::kGroupRows rows in data
};

/// w in the kernels' layout (a copy of its bytes, reordered), or w alone when they read it as is.
PackedWeight pack_weight(const Weight& w);

/// y (n_tokens, rows) = x (n_tokens, cols) @ W^T.
void linear(const PackedWeight& w, const float* x, float* y, int n_tokens, MatmulScratch& scratch);
