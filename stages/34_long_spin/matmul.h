// matmul.h: packed weights, next to engine.h's linear().
//
// linear(const Weight&) takes a matrix as the file stores it. The engine instead packs each matrix
// once, at load, into the layout the SIMD kernels read (simd.h) and calls the PackedWeight form,
// or the form that takes several matrices with the same input.
#pragma once

#include <initializer_list>
#include <vector>

#include "engine.h"
#include "huge_pages.h"

/// For tools that time linear() as the engine calls it (tools/bench_kernels.cpp).
#define ENGINE_PACKS_WEIGHTS 1

/// A weight matrix ready for linear(): source describes it (and is what float types, and builds
/// without SIMD, compute from); bytes() holds Q4_0 and Q8_0 matrices in simd.h's packed layout,
/// and Q4_K, Q5_K and Q6_K ones in kquants.h's where kquant::packs() says so.
struct PackedWeight {
  Weight source;
  /// Its own packed bytes, on 2 MiB pages where they fill one (huge_pages.h); or empty.
  std::vector<unsigned char, HugePageAllocator<unsigned char>> data;
  size_t group_bytes = 0;  ///< bytes of one group of 16 rows in data
  /// The packed bytes inside a PackedBlock (data stays empty), or nullptr.
  const unsigned char* in_block = nullptr;

  /// The packed bytes (nullptr: the kernels read source).
  const unsigned char* bytes() const { return in_block != nullptr ? in_block : data.data(); }
  bool packed() const { return in_block != nullptr || !data.empty(); }
};

/// w in the kernels' layout (a copy of its bytes, reordered), or w alone when they read it as is.
PackedWeight pack_weight(const Weight& w);

/// Several matrices packed one after another into one allocation: a layer's routed experts of
/// one kind (V2-Lite: 64 of 1.6 MB, each below a 2 MiB page on its own, 104 MB together), so
/// that they too sit on huge pages. Move only: the weights point into bytes.
struct PackedBlock {
  PackedBlock() = default;
  PackedBlock(PackedBlock&&) = default;
  PackedBlock& operator=(PackedBlock&&) = default;
  PackedBlock(const PackedBlock&) = delete;

  std::vector<unsigned char, HugePageAllocator<unsigned char>> bytes;
  std::vector<PackedWeight> weights;  ///< one per matrix, in the order given

  const PackedWeight& operator[](size_t i) const { return weights[i]; }
};

/// ws packed as pack_weight() packs each, into one PackedBlock.
PackedBlock pack_weights(const std::vector<Weight>& ws);

/// y (n_tokens, rows) = x (n_tokens, cols) @ W^T.
void linear(const PackedWeight& w, const float* x, float* y, int n_tokens, MatmulScratch& scratch);

/// One matrix of a fused call, and its output y (n_tokens, w.rows).
struct LinearPart {
  const PackedWeight& w;
  float* y;
};

/// Every part's y = x (n_tokens, cols) @ W^T in one call, for matrices that read the
/// same x (wq, wk, wv; w_gate, w_up): x is quantized once, and the threads take chunks of rows
/// of all the matrices from one queue, so they wait for each other once, not once per matrix.
void linear(std::initializer_list<LinearPart> parts, const float* x, int n_tokens,
            MatmulScratch& scratch);
/// The same for n_parts matrices in an array (a token's experts, known at run time).
void linear(const LinearPart* parts, size_t n_parts, const float* x, int n_tokens,
            MatmulScratch& scratch);
/// n_parts matrices with the same number of columns that each read their own input, stacked in
/// x: part j's y = x_j (n_tokens, cols) @ W_j^T, x_j = x + j * n_tokens * cols (wkv_b's heads,
/// a token's experts' down matrices). One call, so the threads meet once, not n_parts times.
void linear_stacked(const LinearPart* parts, size_t n_parts, const float* x, int n_tokens,
                    MatmulScratch& scratch);
