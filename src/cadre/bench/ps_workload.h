// The parameter-server workload of `cadre bench ps` (ps_table.h runs it as a table): each
// worker push-pulls one float32 variable of `bytes` per step in sync mode with the "sum"
// optimizer (one add per element on the server): one warm-up step, then `iterations` timed steps.
// Reported per configuration: the median over steps of the slowest worker's step time, and the
// aggregate throughput W * bytes / step time (each byte is pushed once and pulled once).
//
// Two ways to run it:
// - RunPsBench: S servers and W workers in this process (threads, each worker with its own
//   Client and connections) on loopback.
// - One process per server and per worker (on emulated nodes, see `cadre bench ps
//   --emulate-network`): RunPsBenchServer in each server process, RunPsBenchWorker in each
//   worker process, and SummarizePsBench over the workers' step times.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "cadre/base/deadline.h"
#include "cadre/base/status.h"

namespace cadre::bench {

struct PsBenchConfig {
  int servers = 1;
  int workers = 1;
  int64_t bytes = 4096;
  int iterations = 10;  // timed steps after one warm-up step
  std::string host = "127.0.0.1";
};

struct PsBenchResult {
  PsBenchConfig config;
  double step_seconds = 0;    // median over the timed steps (max over workers per step)
  double aggregate_gbps = 0;  // gigabits per second of gradients pushed (= values pulled)
};

Status RunPsBench(const PsBenchConfig& config, PsBenchResult* out);

// One server of a multi-process run: serves on `address` (host:port) until all
// `config.workers` workers said done; kTimeout (naming the step) when `timeout` passes first.
Status RunPsBenchServer(const PsBenchConfig& config, const std::string& address,
                        const std::string& token, Duration timeout);

// Worker `worker` of a multi-process run against `servers` (host:port, in server order): waits
// up to `timeout` for the servers to come up, runs the steps and tells the servers it is done.
// *step_seconds gets the timed steps' durations, in order.
Status RunPsBenchWorker(const PsBenchConfig& config, const std::vector<std::string>& servers,
                        int worker, const std::string& token, Duration timeout,
                        std::vector<double>* step_seconds);

// Combines the workers' step times (each `config.iterations` long) into the result.
Status SummarizePsBench(const PsBenchConfig& config,
                        const std::vector<std::vector<double>>& step_seconds, PsBenchResult* out);

// The bandwidth bound of one step on full-duplex links of `rate_bits_per_s` each: every worker
// link carries `bytes` each way, and server s's link carries W x (bytes placed on s) each way;
// the busiest link decides. Partitioned as the client does by default (ClientOptions).
double PsBenchLinkBoundSeconds(const PsBenchConfig& config, double rate_bits_per_s);

}  // namespace cadre::bench
