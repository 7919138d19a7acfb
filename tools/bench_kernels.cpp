// bench_kernels.cpp: times one stage's linear() and sample_token() in isolation (a benchmark, not a
// test). Compiled and linked per stage, like the test suite: build/NN_name/bench_kernels.
//
//   bench_kernels matmul ROWS COLS TYPE TOKENS REPS   -> one line: ms, GFLOP/s, weight GB/s
//   bench_kernels sampling VOCAB TOP_K TOP_P REPS     -> one line: microseconds per token
//   bench_kernels tokenize VOCAB.gguf TEXT_FILE REPS  -> one line: MB/s and tokens/s of encode()
// Each result is the median of REPS timed runs after one warm-up run. The stage's output is first
// checked against a double-precision reference (a frozen reference before any timing).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "engine.h"
#include "error.h"
#include "matmul.h"  // the stage's own: from stage 13, PackedWeight
#include "quant.h"
#include "timing.h"
#include "tokenizer.h"

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::vector<float> random_floats(size_t n, uint64_t seed, float scale) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (float& x : v) x = (rng.next_float() * 2.0f - 1.0f) * scale;
  return v;
}

/// A rows x cols matrix of seeded random weights, stored as type in storage (which w points into).
Weight random_weight(int rows, int cols, GGMLType type, std::vector<unsigned char>& storage) {
  const std::vector<float> w_f32 = random_floats(static_cast<size_t>(rows) * cols, 1, 0.05f);
  Weight w;
  w.name = "bench";
  w.type = type;
  w.rows = rows;
  w.cols = cols;
  w.row_bytes = type_row_bytes(type, cols);
  storage.resize(w.row_bytes * rows);
  if (type != GGMLType::F32) {
    for (int r = 0; r < rows; ++r)
      quantize_row(type, w_f32.data() + static_cast<size_t>(r) * cols,
                   storage.data() + r * w.row_bytes, cols);
  } else {
    std::copy_n(reinterpret_cast<const unsigned char*>(w_f32.data()), storage.size(),
                storage.data());
  }
  w.data = storage.data();
  return w;
}

int bench_matmul(int rows, int cols, const std::string& type_name, int tokens, int reps) {
  const GGMLType type = type_from_name(type_name);
  check(cols % type_block_size(type) == 0, "cols must be a multiple of ", type_block_size(type));
  std::vector<unsigned char> storage;
  const Weight w = random_weight(rows, cols, type, storage);
  const std::vector<float> x = random_floats(static_cast<size_t>(tokens) * cols, 2, 1.0f);
  std::vector<float> y(static_cast<size_t>(tokens) * rows);
  MatmulScratch scratch;
#ifdef ENGINE_PACKS_WEIGHTS
  const PackedWeight packed = pack_weight(w);  // once, as the engine does at load
  const PackedWeight& weight = packed;
#else
  const Weight& weight = w;
#endif

  // Frozen reference first: the stage must agree with a double-precision product (row 0 .. 7).
  linear(weight, x.data(), y.data(), tokens, scratch);
  std::vector<float> row(cols);
  for (int r = 0; r < std::min(rows, 8); ++r) {
    dequantize_row(type, w.row(r), row.data(), cols);
    double ref = 0, mag = 0;
    for (int k = 0; k < cols; ++k) ref += double(row[k]) * x[k], mag += std::fabs(row[k] * x[k]);
    check(std::fabs(ref - y[r]) <= 1e-3 * mag + 1e-6, "linear() disagrees with the reference");
  }
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    const double start = now_ms();
    linear(weight, x.data(), y.data(), tokens, scratch);
    ms.push_back(now_ms() - start);
  }
  const double t = median(ms);
  const double flops = 2.0 * rows * cols * tokens;
  std::printf("matmul rows=%d cols=%d type=%s tokens=%d ms=%.3f gflops=%.2f weight_gbs=%.2f\n",
              rows, cols, type_name.c_str(), tokens, t, flops / t / 1e6,
              double(storage.size()) / t / 1e6);
  return 0;
}

int bench_sampling(int vocab, int top_k, float top_p, int reps) {
  constexpr float kLogitScale = 8.0f;  // logits spread like a real model's (a few units)
  const std::vector<float> logits = random_floats(vocab, 3, kLogitScale);
  SamplerParams params;
  params.top_k = top_k;
  params.top_p = top_p;
  Rng rng(4);
  std::vector<Candidate> scratch;
  std::vector<float> work(vocab);
  std::vector<double> us;
  for (int i = 0; i <= reps; ++i) {
    std::copy(logits.begin(), logits.end(), work.begin());
    const double start = now_ms();
    sample_token(work.data(), vocab, params, rng, scratch);
    if (i > 0) us.push_back((now_ms() - start) * 1000.0);  // run 0 warms up
  }
  std::printf("sampling vocab=%d top_k=%d top_p=%.2f us=%.1f\n", vocab, top_k, top_p, median(us));
  return 0;
}

int bench_tokenize(const std::string& vocab_path, const std::string& text_path, int reps) {
  constexpr size_t kTargetBytes = 1 << 20;  // repeat the sample to ~1 MiB: a long prompt
  std::ifstream in(text_path, std::ios::binary);
  check(in.good(), "cannot read ", text_path);
  std::ostringstream sample;
  sample << in.rdbuf();
  std::string text;
  while (text.size() < kTargetBytes) text += sample.str();
  const GGUFFile file(vocab_path);
  const Tokenizer tokenizer(file);
  std::vector<double> ms;
  size_t n_tokens = 0;
  for (int i = 0; i <= reps; ++i) {
    const double start = now_ms();
    n_tokens = tokenizer.encode(text, false).size();
    if (i > 0) ms.push_back(now_ms() - start);  // run 0 warms up
  }
  const double t = median(ms);
  std::printf("tokenize bytes=%zu tokens=%zu ms=%.1f mb_s=%.2f tok_s=%.0f\n", text.size(), n_tokens,
              t, text.size() / t / 1e3, n_tokens / t * 1e3);
  return 0;
}

/// Decode's memory traffic in isolation: linear() with one token over n_mats copies of a matrix
/// of type (Q4_0 by default; any quantized type, e.g. q4_K from stage 18 on), together far larger
/// than the caches, each rep next to a membench-style read-and-sum over as many bytes, so that
/// the ratio is measured under the same (drifting) bandwidth.
int bench_stream(int rows, int cols, int n_mats, int reps, const std::string& type_name) {
  const GGMLType type = type_from_name(type_name);
  check(type != GGMLType::F32, "stream needs a quantized type, not f32");
  check(cols % type_block_size(type) == 0, "cols must be a multiple of ", type_block_size(type));
  std::vector<unsigned char> storage;
  const Weight w = random_weight(rows, cols, type, storage);
#ifdef ENGINE_PACKS_WEIGHTS
  std::vector<PackedWeight> mats;
  for (int i = 0; i < n_mats; ++i) mats.push_back(pack_weight(w));
  const size_t bytes =
      mats[0].data.empty() ? storage.size() * n_mats : mats[0].data.size() * n_mats;
#else
  std::vector<std::vector<unsigned char> > copies(n_mats, storage);
  std::vector<Weight> mats(n_mats, w);
  for (int i = 0; i < n_mats; ++i) mats[i].data = copies[i].data();
  const size_t bytes = storage.size() * n_mats;
#endif
  const size_t n_floats = bytes / sizeof(float);
  std::vector<float> buffer(n_floats);
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n_floats; ++i) buffer[i] = 1.0f;
  const std::vector<float> x = random_floats(cols, 2, 1.0f);
  std::vector<float> y(rows);
  MatmulScratch scratch;
  std::vector<double> ratio;
  double sum = 0;
  for (int i = 0; i <= reps; ++i) {
    double start = now_ms();
    float s = 0.0f;
    constexpr size_t kLanes = 16;  // independent sums: vector adds without reordering any sum
#pragma omp parallel reduction(+ : s)
    {
      float acc[kLanes] = {};
#pragma omp for schedule(static)
      for (size_t k = 0; k < n_floats / kLanes; ++k) {
        for (size_t j = 0; j < kLanes; ++j) acc[j] += buffer[k * kLanes + j];
      }
      for (float a : acc) s += a;
    }
    const double read_ms = now_ms() - start;
    sum += s;
    start = now_ms();
    for (const auto& m : mats) linear(m, x.data(), y.data(), 1, scratch);
    const double linear_ms = now_ms() - start;
    if (i == 0) continue;  // warm-up
    ratio.push_back(read_ms / linear_ms);
    std::printf("stream read_gb_s=%.2f linear_gb_s=%.2f ratio=%.3f\n", bytes / read_ms / 1e6,
                bytes / linear_ms / 1e6, read_ms / linear_ms);
  }
  std::printf("stream bytes=%zu median_ratio=%.3f (check %.0f)\n", bytes, median(ratio), sum);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::string what = argc > 1 ? argv[1] : "";
    if (what == "matmul" && argc == 7)
      return bench_matmul(std::atoi(argv[2]), std::atoi(argv[3]), argv[4], std::atoi(argv[5]),
                          std::atoi(argv[6]));
    if (what == "sampling" && argc == 6)
      return bench_sampling(std::atoi(argv[2]), std::atoi(argv[3]), std::strtof(argv[4], nullptr),
                            std::atoi(argv[5]));
    if (what == "stream" && (argc == 6 || argc == 7))
      return bench_stream(std::atoi(argv[2]), std::atoi(argv[3]), std::atoi(argv[4]),
                          std::atoi(argv[5]), argc == 7 ? argv[6] : "q4_0");
    if (what == "tokenize" && argc == 5)
      return bench_tokenize(argv[2], argv[3], std::atoi(argv[4]));
    std::fprintf(
        stderr,
        "usage: bench_kernels matmul ROWS COLS TYPE TOKENS REPS   (TYPE: q4_0, f32, q6_K, ...)\n"
        "       bench_kernels sampling VOCAB TOP_K TOP_P REPS\n"
        "       bench_kernels stream ROWS COLS N_MATS REPS [TYPE]\n"
        "       bench_kernels tokenize VOCAB.gguf TEXT_FILE REPS\n");
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
  }
  return 1;
}
