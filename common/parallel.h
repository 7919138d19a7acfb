// parallel.h: errors inside OpenMP loops.
//
// An exception must not leave an OpenMP parallel region: the runtime then calls std::terminate,
// and the user sees "terminate called after throwing an instance of 'Error'" instead of the
// error line. So the body of a parallel loop runs inside ParallelError::guard, which keeps the
// first exception any thread throws (the thread goes on with its next iteration, so no thread is
// left waiting at the loop's barrier), and the caller rethrows it once the loop is over:
//
//   ParallelError error;
//   #pragma omp parallel for
//   for (int64_t r = 0; r < rows; ++r) error.guard([&] { y[r] = dot_row(w, r, x); });
//   error.rethrow();
#pragma once

#include <exception>
#include <mutex>

class ParallelError {
 public:
  /// Runs body(); an exception it throws is kept (the first one of all threads), not propagated.
  template <class Body>
  void guard(const Body& body) noexcept {
    try {
      body();
    } catch (...) {
      const std::lock_guard<std::mutex> lock(mutex_);
      if (!first_) first_ = std::current_exception();
    }
  }

  /// After the parallel loop: throws the kept exception, if any.
  void rethrow() const {
    if (first_) std::rethrow_exception(first_);
  }

 private:
  std::mutex mutex_;
  std::exception_ptr first_;
};
