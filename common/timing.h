// timing.h: wall-clock time, peak memory and the machine's physical core count.
#pragma once

/// Milliseconds from an arbitrary fixed point (steady clock).
double now_ms();
/// Peak resident set size of this process in MiB (getrusage).
double peak_rss_mb();
/// Physical cores (not hyper-threads), read from /sys; at least 1.
int physical_cores();
/// Logical CPUs this process may run on (its affinity mask), at least 1.
int usable_cpus();
