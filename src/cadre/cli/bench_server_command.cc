// `cadre bench server`: flags (and CADRE_TOKEN for --server), handed to bench/server.h, which
// starts this program's `cadre server` unless --server names one.
#include <filesystem>
#include <memory>
#include <string>

#include "cadre/base/env.h"
#include "cadre/base/status.h"
#include "cadre/bench/server.h"
#include "cadre/cli/commands.h"
#include "cadre/cli/support.h"

namespace cadre::cli {
namespace {

int RunBenchServer(bench::ServerBenchOptions options) {
  if (options.server.empty()) {
    options.server_command = {std::filesystem::read_symlink("/proc/self/exe").string(), "server"};
  } else if (options.token.empty()) {
    options.token = GetEnv("CADRE_TOKEN").value_or("");
  }
  return bench::RunServerBench(options);
}

}  // namespace

void AddBenchServerCommand(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<bench::ServerBenchOptions>();
  CLI::App* cmd = BenchGroup(app)->add_subcommand(
      "server",
      "The job service against its targets: GET requests/s and latency, submit-to-running, "
      "cancel-to-gone, training throughput under load (docs/benchmarks.md)");
  cmd->add_option("--server", args->server,
                  "Measure this server (URL) instead of starting one; needs --token or "
                  "CADRE_TOKEN of a user who may run 2-learner jobs")
      ->type_name(kUrlType);
  cmd->add_option("--token", args->token, "Bearer token for --server")->type_name(kTokenType);
  cmd->add_option("-c,--clients", args->clients, "Concurrent keep-alive clients (default 32)");
  cmd->add_option("--duration", args->duration_s, "Seconds of GET load (default 10)");
  cmd->add_option("--warmup", args->warmup_s, "Seconds of load before measuring (default 1)");
  cmd->add_option("--repeats", args->repeats,
                  "Jobs for submit-to-running and for cancel-to-gone (default 5)");
  cmd->add_option("--grace", args->grace_s,
                  "The started server's --grace, SIGTERM to SIGKILL (default 10)");
  cmd->add_option("--server-threads", args->server_threads,
                  "The started server's --threads (default 64)");
  cmd->add_flag("--training", args->training,
                "Also measure a 2-learner job's throughput with and without service load "
                "(minutes)");
  cmd->add_option("--rounds", args->rounds, "--training: rounds of (alone, loaded) (default 3)");
  cmd->add_option("--steps", args->steps, "--training: steps per job (default 300)");
  cmd->add_option("--status-rate", args->status_rate,
                  "--training: status GETs per second during the loaded run (default 50)");
  cmd->add_option("--followers", args->followers,
                  "--training: clients following the log during the loaded run (default 10)");
  cmd->add_option("--train-worker", args->train_worker,
                  "--training: bench/train_worker.py (default: found beside the build)");
  cmd->add_flag("--json", args->json, "One JSON object instead of lines");
  cmd->callback([args, exit_code] { *exit_code = RunBenchServer(*args); });
}

}  // namespace cadre::cli
