// DDL mode's benchmark: flat (the algorithm cadre chooses by size without hierarchy) vs
// hierarchical allreduce, one emulated host's part (the program bench/ddl_allreduce_bench runs it
// once per host under `cadre netem exec`). The flat baseline carries its same-host messages over
// shared memory (CommunicatorOptions::shm_pairs), as the hierarchical allreduce does inside a
// host; the old flat baseline, whose same-host messages went over TCP inside the host, can be
// shown beside it (`flat_tcp`). The hierarchical allreduce runs on a communicator without
// shm_pairs, as before (its levels are the same either way).
//
// The host holds `slots` ranks as threads (one learner with several slots: the ranks of one
// host share memory, hosts talk TCP over the shaped links). Host 0 serves the rendezvous store
// on its address and `port`. Rank 0 prints to stdout, for every size from min_bytes to
// max_bytes (x4 each), the time of each algorithm (slowest rank, median of the repetitions)
// against the link bound: each host's link must carry 2(N-1)/N x S per direction for N hosts,
// so an allreduce of S bytes takes at least 2(N-1)/N x S / rate.
//
// Errors are thrown as cadre::Error (bad link spec, store); a failing rank is reported on
// stderr as "host H slot S: ..." and the run returns 1.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "cadre/comm/communicator.h"

namespace cadre::bench {

struct DdlAllreduceOptions {
  int slots = 2;          // ranks (threads) of this host
  uint16_t port = 29611;  // the store's port on host 0
  size_t min_bytes = 4 << 10;
  size_t max_bytes = 64 << 20;
  double seconds_per_size = 1.0;  // repeat each measurement until this much time has passed
  int max_reps = 20;
  // Which flat baselines to run: same-host messages over shared memory ("flat" rows), over TCP
  // inside the host ("flat-tcp" rows). At least one.
  bool flat_shm = true;
  bool flat_tcp = false;
  // Every rank's communicator starts from this one: its tunables and `hierarchy` (host grid,
  // pipelining); rank, size, store, token, host, bind_address and timeout are set by the run.
  comm::CommunicatorOptions communicator;
};

// This emulated host, as `cadre netem exec` describes it (CADRE_NETEM_*).
struct DdlHost {
  int host = 0;
  int hosts = 1;
  std::string address;                 // this host's
  std::vector<std::string> addresses;  // every host's, host 0's first
  std::string link;                    // the link spec, e.g. "1gbit,1ms"
  std::string token;                   // the store's and the ranks' job token
};

// Runs this host's ranks to the end; returns the exit code (0, or 1 when a rank failed).
int RunDdlAllreduceHost(const DdlAllreduceOptions& options, const DdlHost& host);

}  // namespace cadre::bench
