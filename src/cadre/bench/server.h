// `cadre bench server`: the job service measured against its targets (docs/benchmarks.md).
//
// It starts a real `cadre server` (a child process from `server_command`, loopback, a temporary
// data directory that is removed afterwards) and a user of it, or targets `server` with `token`.
// Then:
//  1. submit -> running, and -> completed, of an empty job (`true`): the client's view, polling
//     the training every 2 ms; the median of `repeats`;
//  2. GET /ml/v4/trainings/{id} from `clients` keep-alive clients for `duration_s`:
//     requests/s, p50 and p99 latency, and the CPU the server and this process (the load
//     generator, server_load.h) spent meanwhile;
//  3. cancel -> every process of the job gone (runner, slot keepers, learners: whatever names
//     the training in its command line or environment), for a 2-learner job that sleeps; the
//     median of `repeats`;
//  4. with `training`: a 2-learner Horovod-mode job's throughput (bench/train_worker.py) alone
//     and under a service's everyday load (`status_rate` GETs per second and `followers`
//     clients following its log), interleaved over `rounds`.
// The report goes to stdout, as lines or one JSON object. Errors are thrown as cadre::Error
// (kInvalidArgument for bad options); nothing the run started outlives it.
#pragma once

#include <string>
#include <vector>

namespace cadre::bench {

struct ServerBenchOptions {
  std::string server, token;  // a running server (URL) and a user's token; empty: start one
  // Starts `cadre server` (the flags --data-dir, --listen, --grace, --threads are appended);
  // its program's folder also locates bench/train_worker.py when train_worker is empty.
  std::vector<std::string> server_command;
  int clients = 32;
  double duration_s = 10;
  double warmup_s = 1;
  int repeats = 5;
  double grace_s = 10;      // the started server's --grace
  int server_threads = 64;  // the started server's --threads
  bool training = false;
  int rounds = 3;
  int steps = 300;
  double status_rate = 50;
  int followers = 10;
  std::string train_worker;  // bench/train_worker.py; empty: found beside the build
  bool json = false;
};

// Runs the phases above and prints the report; returns the exit code (0).
int RunServerBench(const ServerBenchOptions& options);

}  // namespace cadre::bench
