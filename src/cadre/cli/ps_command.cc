// `cadre ps-server`: a parameter server as a process; `cadre bench ps`: the push+pull benchmark.
#include <cstdio>
#include <iostream>

#include "cadre/base/env.h"
#include "cadre/base/status.h"
#include "cadre/cli/commands.h"
#include "cadre/ps/bench.h"
#include "cadre/ps/learner.h"
#include "cadre/ps/server.h"

namespace cadre::cli {
namespace {

struct PsServerArgs {
  std::string address;  // empty: from the learner contract
  int workers = 0;      // 0: from the learner contract
  double timeout_s = 300;
};

int RunPsServer(const PsServerArgs& args) {
  ps::ServerOptions options;
  options.token = GetEnv("CADRE_JOB_TOKEN").value_or("");
  options.step_timeout = std::chrono::milliseconds(static_cast<int64_t>(args.timeout_s * 1000));
  if (args.address.empty() || args.workers == 0) {
    ps::LearnerRole role;
    ThrowIfError(ps::RoleFromEnvironment(&role).WithContext(
        "ps-server: --address and --workers not given, and the learner environment"));
    if (!role.is_server)
      throw Error(Code::kInvalidArgument,
                  "ps-server: learner " + std::to_string(role.learner_id) +
                      " is a worker (PS_HOSTS_COUNT=" + std::to_string(role.num_servers) + ")");
    options.address = role.listen_address;
    options.num_workers = role.num_workers;
  }
  if (!args.address.empty()) options.address = args.address;
  if (args.workers > 0) options.num_workers = args.workers;
  std::unique_ptr<ps::Server> server;
  ThrowIfError(ps::Server::Start(options, &server));
  std::cout << "ps server listening on " << options.address << " (port " << server->port()
            << "), waiting for " << options.num_workers << " workers" << std::endl;
  ThrowIfError(server->WaitAllDone(Deadline::Never()));
  server->Shutdown();
  std::cout << "ps server: every worker is done" << std::endl;
  return 0;
}

CLI::App* BenchCommand(CLI::App& app) {
  // `bench` is shared by several subcommands (allreduce, ps, train): whoever registers first
  // creates it.
  for (CLI::App* sub : app.get_subcommands([](CLI::App* a) { return a->get_name() == "bench"; }))
    return sub;
  CLI::App* bench = app.add_subcommand("bench", "Benchmarks, printed as tables");
  bench->require_subcommand(1);
  return bench;
}

std::vector<int64_t> ParseSizes(const std::vector<std::string>& sizes) {
  std::vector<int64_t> out;
  for (const std::string& s : sizes) {
    char* end = nullptr;
    double v = std::strtod(s.c_str(), &end);
    std::string unit = end;
    int64_t mult = unit.empty() || unit == "B"    ? 1
                   : unit == "K" || unit == "KiB" ? 1024
                   : unit == "M" || unit == "MiB" ? 1 << 20
                                                  : -1;
    if (end == s.c_str() || mult < 0 || v < 4)
      throw Error(Code::kInvalidArgument,
                  "bench ps: --sizes '" + s + "' is not a size like 4K, 256K, 64M");
    out.push_back(static_cast<int64_t>(v * static_cast<double>(mult)));
  }
  return out;
}

}  // namespace

void AddPsServerCommand(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<PsServerArgs>();
  CLI::App* cmd = app.add_subcommand(
      "ps-server",
      "Serve parameter-server variables on this learner's port 2222 until every worker is done");
  cmd->add_option("--address", args->address,
                  "host:port to serve on (default: this learner's address, port 2222)");
  cmd->add_option("--workers", args->workers,
                  "number of workers (default: NUM_LEARNERS - PS_HOSTS_COUNT)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--step-timeout", args->timeout_s,
                  "seconds a sync step waits for missing workers before failing")
      ->check(CLI::PositiveNumber);
  cmd->callback([args, exit_code] { *exit_code = RunPsServer(*args); });
}

void AddBenchPsCommand(CLI::App& app, int* exit_code) {
  struct Args {
    std::vector<int> servers{1, 2};
    std::vector<int> workers{1, 2, 4};
    std::vector<std::string> sizes{"4K", "256K", "4M", "64M"};
    int iterations = 5;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = BenchCommand(app)->add_subcommand(
      "ps", "Parameter-server push+pull throughput on loopback (servers x workers x sizes)");
  cmd->add_option("--servers", args->servers, "server counts")->check(CLI::PositiveNumber);
  cmd->add_option("--workers", args->workers, "worker counts")->check(CLI::PositiveNumber);
  cmd->add_option("--sizes", args->sizes, "tensor sizes (4K .. 64M)");
  cmd->add_option("--iterations", args->iterations, "timed steps per configuration")
      ->check(CLI::PositiveNumber);
  cmd->callback([args, exit_code] {
    std::vector<int64_t> sizes = ParseSizes(args->sizes);
    std::printf("%-8s %-8s %-10s %-12s %-14s %-14s\n", "servers", "workers", "size", "step (ms)",
                "agg (Gbit/s)", "per worker");
    for (int64_t size : sizes) {
      for (int s : args->servers) {
        for (int w : args->workers) {
          ps::BenchConfig config;
          config.servers = s;
          config.workers = w;
          config.bytes = size;
          config.iterations = args->iterations;
          ps::BenchResult r;
          ThrowIfError(ps::RunPsBench(config, &r));
          std::string label = size >= (1 << 20) ? std::to_string(size >> 20) + " MiB"
                                                : std::to_string(size >> 10) + " KiB";
          std::printf("%-8d %-8d %-10s %-12.3f %-14.3f %-14.3f\n", s, w, label.c_str(),
                      r.step_seconds * 1e3, r.aggregate_gbps, r.aggregate_gbps / w);
          std::fflush(stdout);
        }
      }
    }
    *exit_code = 0;
  });
}

}  // namespace cadre::cli
