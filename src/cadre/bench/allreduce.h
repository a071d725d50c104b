// `cadre bench allreduce`: cadre's allreduce timed across `ranks` local processes.
//
// This process starts a TcpStore server and forks one process per rank; every rank builds a
// Communicator (shared memory, or TCP with transport "tcp") and times float32 sum allreduces at
// each size: warm-up, a barrier, `iters` back-to-back calls, and the slowest rank's mean is the
// result (so the table is what a training step would wait for). Rank 0 prints to stdout one
// row, or one JSON object, per size: bytes, time_us, busbw_gbps = bytes / time * 2(n-1)/n in
// GB/s (1e9 B/s), and cpu_us: rank 0's CPU time (its calling thread's, user + system) per
// call, what waiting costs a core. With late_us > 0 the last rank computes (busy) that long
// before each call, as a rank whose backward pass ends later: rank 0 then waits about late_us
// per call, and cpu_us shows how much of that wait it burns.
//
// Forks: call it from a process with no other threads (the cadre program's command), and one
// run at a time. Errors in the arguments are thrown as cadre::Error (kInvalidArgument); a rank
// that fails prints its error to stderr and the run returns 1.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "cadre/comm/communicator.h"

namespace cadre::bench {

struct AllreduceBenchOptions {
  int ranks = 2;                  // 1..256
  std::vector<size_t> sizes;      // bytes, each a positive multiple of 4; empty: the defaults
  bool json = false;              // one JSON object per size instead of a table
  std::string transport = "shm";  // "shm" or "tcp"
  int iters = 0;                  // timed calls per size; 0: by size (about 128 MiB reduced)
  double timeout_s = 120;         // what any collective may wait on a peer
  int late_us = 0;                // the last rank's busy work before each call; 0: none
  // Every rank's communicator starts from this one (its tunables, e.g. read by
  // config::ReadCommunicatorTunables); rank, size, store, token, use_shm and timeout are set
  // by the run.
  comm::CommunicatorOptions communicator;
  // CPUs of each rank (launch::PlanCpuBindingFromEnv, as `cadre run` binds slots); empty: no
  // binding.
  std::vector<std::vector<int>> cpus;
};

// 4 B, 16 B, ... 256 MiB (powers of 4).
std::vector<size_t> DefaultAllreduceSizes();

// "4096,16M,1K" (base/byte_size.h units) -> bytes, each a positive multiple of 4 (float32
// elements) up to kMaxAllreduceBytes (4 GiB); "" -> DefaultAllreduceSizes(). kInvalidArgument
// quoting the item at fault.
inline constexpr size_t kMaxAllreduceBytes = size_t{4} << 30;
std::vector<size_t> ParseAllreduceSizes(const std::string& text);

// Runs the benchmark; returns the exit code (0, or 1 when a rank failed).
int RunAllreduceBench(const AllreduceBenchOptions& options);

}  // namespace cadre::bench
