// The push+pull benchmark behind `cadre bench ps`: S servers and W workers (threads, each with
// its own Client and connections) in this process on loopback; each worker push-pulls one
// variable of `bytes` per step in sync mode. Reported per configuration: the median step time,
// and the aggregate throughput W * bytes / step time (each byte is pushed and pulled once).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "cadre/base/status.h"

namespace cadre::ps {

struct BenchConfig {
  int servers = 1;
  int workers = 1;
  int64_t bytes = 4096;
  int iterations = 10;  // timed steps after one warm-up step
  std::string host = "127.0.0.1";
};

struct BenchResult {
  BenchConfig config;
  double step_seconds = 0;    // median over the timed steps (max over workers per step)
  double aggregate_gbps = 0;  // gigabits per second of gradients pushed (= values pulled)
};

Status RunPsBench(const BenchConfig& config, BenchResult* out);

}  // namespace cadre::ps
