// test_thread_chooser.cpp: the decode thread chooser (thread_chooser.h, stage 29 on), fed made-up
// step times. Compiled for every stage with the stage's own headers; stages without
// thread_chooser.h have no cases.
#if __has_include("thread_chooser.h")
#include <catch2/catch.hpp>
#include <functional>

#include "error.h"
#include "thread_chooser.h"

namespace {

/// Runs n steps with step_ms(threads) as each step's time; returns how many ran on a count other
/// than the one most steps ran on at the time (the probes).
int run_steps(ThreadChooser& chooser, int n, const std::function<double(int)>& step_ms) {
  int probes = 0;
  for (int i = 0; i < n; ++i) {
    const int current = chooser.current();
    const int threads = chooser.next();
    if (threads != current) ++probes;
    chooser.record(step_ms(threads));
  }
  return probes;
}

}  // namespace

TEST_CASE("threads: a quiet machine keeps every thread and probes less and less", "[threads]") {
  ThreadChooser chooser(2);
  // Two threads 100 ms a step, one 130 ms (7B Q4_0 on 2 cores, quiet).
  const int probes = run_steps(chooser, 256, [](int t) { return t == 2 ? 100.0 : 130.0; });
  CHECK(chooser.current() == 2);
  // Probes after 8, 16, 32, 64, 64, 64 steps: 6 in 256, each a step 1.3x as long (~0.7%).
  CHECK(probes == 6);
}

TEST_CASE("threads: a busy core moves decode to one thread, and back when it is free",
          "[threads]") {
  ThreadChooser chooser(2);
  // Busy: two threads 150 ms (a thread off its core holds the others up), one 130 ms.
  run_steps(chooser, 9, [](int t) { return t == 2 ? 150.0 : 130.0; });
  CHECK(chooser.current() == 1);
  run_steps(chooser, 200, [](int t) { return t == 2 ? 150.0 : 130.0; });
  CHECK(chooser.current() == 1);
  // The core is free again: the next probe of two threads wins (at most 64 steps away).
  run_steps(chooser, 65, [](int t) { return t == 2 ? 100.0 : 130.0; });
  CHECK(chooser.current() == 2);
}

TEST_CASE("threads: a probe must win by more than the noise of a step", "[threads]") {
  ThreadChooser chooser(2);
  // One thread 3% faster: within kMargin (5%), not worth the switch.
  run_steps(chooser, 128, [](int t) { return t == 2 ? 100.0 : 97.0; });
  CHECK(chooser.current() == 2);
}

TEST_CASE("threads: more cores walk by halves and doubles to the fastest count", "[threads]") {
  ThreadChooser chooser(8);
  // Fastest at 4 (say 4 cores busy elsewhere): 8 -> 4 on the first probe; 2 and 8 lose after.
  auto ms = [](int t) { return t == 8 ? 100.0 : t == 4 ? 80.0 : t == 2 ? 120.0 : 200.0; };
  run_steps(chooser, 9, ms);
  CHECK(chooser.current() == 4);
  run_steps(chooser, 300, ms);
  CHECK(chooser.current() == 4);
}

TEST_CASE("threads: one thread never probes; none is an error", "[threads]") {
  ThreadChooser one(1);
  CHECK(run_steps(one, 100, [](int) { return 10.0; }) == 0);
  CHECK(one.current() == 1);
  CHECK_THROWS_AS(ThreadChooser(0), Error);
}
#endif
