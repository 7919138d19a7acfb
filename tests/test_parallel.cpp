// test_parallel.cpp: an Error thrown by one thread of a parallel loop reaches the caller.
#include <catch2/catch.hpp>
#include <string>
#include <thread>
#include <vector>

#include "error.h"
#include "parallel.h"

TEST_CASE("parallel: the first error of any thread is rethrown after the loop", "[parallel]") {
  constexpr int kThreads = 4;
  constexpr int kIterations = 100;
  ParallelError error;
  std::vector<int> done(kThreads, 0);
  std::vector<std::thread> threads;
  for (int id = 0; id < kThreads; ++id) {
    threads.emplace_back([&, id] {
      for (int i = 0; i < kIterations; ++i) {
        error.guard([&] {
          if (id == 2 && i == 7) fail("row ", i, " of thread ", id, " failed");
          ++done[id];
        });
      }
    });
  }
  for (std::thread& t : threads) t.join();
  // Every thread went on after the failing iteration (none is left behind at a barrier).
  CHECK(done[0] == kIterations);
  CHECK(done[2] == kIterations - 1);
  try {
    error.rethrow();
    FAIL("no error rethrown");
  } catch (const Error& e) {
    CHECK(std::string(e.what()) == "row 7 of thread 2 failed");
  }
  ParallelError clean;
  clean.guard([] {});
  CHECK_NOTHROW(clean.rethrow());
}
