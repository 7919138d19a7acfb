// thread_chooser.cpp: the decode thread count (thread_chooser.h).
#include "thread_chooser.h"

#include <algorithm>

#include "error.h"

namespace {

/// Steps before the first probe, and after a probe that wins: a busy core shows within a few
/// steps (~0.1 s each for a 7B model).
constexpr int kFirstInterval = 8;
/// At most this many steps between probes on a machine whose load does not change: each probe
/// costs a step ~1.3x as long (one thread of two), so ~0.5% of quiet decode at 64.
constexpr int kMaxInterval = 64;
/// A probe must beat the current count's mean by this much to win: single steps vary by a few
/// percent on a quiet machine, and a switch costs a probe to undo.
constexpr double kMargin = 0.05;
/// Weight of the newest step in the running mean: follows a load that changes over ~4 steps
/// and the slow growth of attention's share with the context.
constexpr double kNewest = 0.25;

}  // namespace

ThreadChooser::ThreadChooser(int max_threads)
    : max_threads_(max_threads),
      current_(max_threads),
      running_(max_threads),
      interval_(kFirstInterval),
      until_probe_(kFirstInterval) {
  check(max_threads > 0, "ThreadChooser: ", max_threads, " threads, need at least 1");
}

int ThreadChooser::next() {
  running_ = current_;
  if (until_probe_ > 0 || max_threads_ == 1) return running_;
  // Half or twice the current count: down first, then alternating where both exist.
  const bool down = current_ == max_threads_ || (current_ > 1 && probe_down_);
  running_ = down ? std::max(1, current_ / 2) : std::min(max_threads_, current_ * 2);
  probe_down_ = !down;
  return running_;
}

void ThreadChooser::record(double ms) {
  if (running_ == current_) {
    mean_ms_ = mean_ms_ == 0 ? ms : (1 - kNewest) * mean_ms_ + kNewest * ms;
    --until_probe_;
    return;
  }
  // A probe: switch if it was clearly faster, else look again later.
  if (ms < (1 - kMargin) * mean_ms_) {
    current_ = running_;
    mean_ms_ = ms;
    interval_ = kFirstInterval;
  } else {
    interval_ = std::min(kMaxInterval, 2 * interval_);
  }
  until_probe_ = interval_;
}
