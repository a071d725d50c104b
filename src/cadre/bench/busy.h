// CPU accounting of the allreduce benchmarks, shared by `cadre bench allreduce` and
// bench/mpi_allreduce.cc (which includes only this header of the bench layer and links no more
// than cadre_base), so that both measure what a waiting rank burns the same way.
#pragma once

#include <time.h>

#include <chrono>

namespace cadre::bench {

// The calling thread's CPU time (user + system) in microseconds.
inline double ThreadCpuMicros() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) * 1e6 + static_cast<double>(t.tv_nsec) / 1e3;
}

// Busy work for `us` microseconds (a late rank's compute).
inline void Work(int us) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(us);
  while (std::chrono::steady_clock::now() < until) {
  }
}

}  // namespace cadre::bench
