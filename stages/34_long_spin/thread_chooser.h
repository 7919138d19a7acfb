// thread_chooser.h: how many threads a decode step runs on, chosen by timing the steps themselves.
//
// On a quiet machine every core helps decode: two threads stream the weights ~1.3x faster than
// one (7B Q4_0, 2 cores). On a busy one, where another process keeps a core busy, the OS takes a
// thread off its core for milliseconds at a time, and every linear() call waits at its end for
// the chunk of rows that thread holds: two threads then decode ~10% slower than one (page 29).
// Which count wins depends on the machine's load, which changes while the engine runs, so the
// engine measures it: most steps run on the count that was faster, and now and then one step
// (a probe) runs on half or twice as many, to see whether that has changed.
#pragma once

/// Picks the thread count of each decode step, 1 .. max_threads, from the times of earlier steps.
/// Pure bookkeeping (no clock, no OpenMP): the engine times the step and reports it.
class ThreadChooser {
 public:
  explicit ThreadChooser(int max_threads);
  /// Threads for the next step: the current count, or a probe's.
  int next();
  /// The step run on next()'s count took ms.
  void record(double ms);
  /// The count most steps run on now.
  int current() const { return current_; }

 private:
  int max_threads_;
  int current_;             ///< the count most steps run on
  int running_;             ///< the count of the step in flight: current_ or a probe's
  bool probe_down_ = true;  ///< the next probe halves (else doubles) the count, where both exist
  double mean_ms_ = 0;      ///< running mean of current_'s recent step times; 0: none yet
  int interval_;            ///< steps between probes; doubles after each probe that loses
  int until_probe_;         ///< steps on current_ before the next probe
};
