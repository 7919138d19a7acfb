// membench.cpp: the machine's read bandwidth, the ceiling of decode speed (a benchmark, not a
// test).
//
// A decode step reads every weight once, so tok/s <= bandwidth / bytes of weights per token: the
// "roofline" the later stages are measured against. Measured as llama.cpp's reference figures were:
// a read-and-sum over a 2 GiB float array, best of 10 passes, for 1 .. n threads.
//   membench [GIB] [PASSES]  -> one line per thread count: threads=T read_gb_s=X
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>

#include "timing.h"

int main(int argc, char** argv) {
  constexpr double kBytesPerGiB = 1024.0 * 1024.0 * 1024.0;
  const double gib = argc > 1 ? std::atof(argv[1]) : 2.0;
  const int passes = argc > 2 ? std::atoi(argv[2]) : 10;
  if (gib <= 0 || passes <= 0) {
    std::fprintf(stderr, "usage: membench [GIB > 0] [PASSES > 0]\n");
    return 1;
  }
  const size_t n = static_cast<size_t>(gib * kBytesPerGiB / sizeof(float));
  std::unique_ptr<float[]> data(new float[n]);
  const int max_threads = omp_get_max_threads();
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; ++i) data[i] = 1.0f;  // first touch: pages spread over the threads

  for (int threads = 1; threads <= max_threads; ++threads) {
    double best_ms = 1e30;
    float total = 0.0f;
    for (int pass = 0; pass < passes; ++pass) {
      const double start = now_ms();
      float sum = 0.0f;
#pragma omp parallel for schedule(static) reduction(+ : sum) num_threads(threads)
      for (size_t i = 0; i < n; ++i) sum += data[i];
      best_ms = std::min(best_ms, now_ms() - start);
      total += sum;  // keeps the sum alive
    }
    std::printf("threads=%d read_gb_s=%.2f check=%.0f\n", threads,
                n * sizeof(float) / best_ms / 1e6, total / passes);
  }
  return 0;
}
