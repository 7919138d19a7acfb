// timing.cpp: clocks, peak memory, physical cores.
#include "timing.h"

#include <sched.h>
#include <sys/resource.h>

#include <chrono>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <utility>

double now_ms() {
  using Clock = std::chrono::steady_clock;
  return std::chrono::duration<double, std::milli>(Clock::now().time_since_epoch()).count();
}

double peak_rss_mb() {
  constexpr double kKibPerMib = 1024.0;
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / kKibPerMib;  // Linux reports KiB
}

// Reads one integer from a sysfs file; false when unreadable.
static bool read_int(const std::string& path, int& value) {
  std::ifstream in(path);
  return static_cast<bool>(in >> value);
}

int usable_cpus() {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  const int logical = sched_getaffinity(0, sizeof(allowed), &allowed) == 0
                          ? CPU_COUNT(&allowed)
                          : static_cast<int>(std::thread::hardware_concurrency());
  return logical > 0 ? logical : 1;
}

// Counts distinct (package, core) pairs among the CPUs this process may run on, so hyper-threads
// sharing a core count once (the seed article measured +15% with threads = physical cores).
int physical_cores() {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  const bool have_mask = sched_getaffinity(0, sizeof(allowed), &allowed) == 0;
  std::set<std::pair<int, int>> cores;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (have_mask && !CPU_ISSET(cpu, &allowed)) continue;
    const std::string topology = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/";
    int package = 0, core = 0;
    if (!read_int(topology + "core_id", core)) continue;
    read_int(topology + "physical_package_id", package);
    cores.insert({package, core});
  }
  if (!cores.empty()) return static_cast<int>(cores.size());
  // No topology in /sys (some containers): every allowed logical CPU counts as a core.
  const int logical =
      have_mask ? CPU_COUNT(&allowed) : static_cast<int>(std::thread::hardware_concurrency());
  return logical > 0 ? logical : 1;
}
