// `cadre bench allreduce`: flags and the environment (the communicator's tunables, the CPU
// binding of `cadre run`), handed to bench/allreduce.h.
#include <memory>
#include <optional>
#include <string>

#include "cadre/base/status.h"
#include "cadre/bench/allreduce.h"
#include "cadre/cli/commands.h"
#include "cadre/cli/support.h"
#include "cadre/config/from_env.h"
#include "cadre/launch/cpu_binding.h"

namespace cadre::cli {
namespace {

struct AllreduceBenchArgs {
  int ranks = 2;
  std::string sizes;
  bool json = false;
  std::string transport = "shm";
  std::optional<int> iters;  // not given: by size
  double timeout_s = 120;
  int late_us = 0;
};

int RunBenchAllreduce(const AllreduceBenchArgs& args) {
  if (args.ranks < 1 || args.ranks > 256) {
    throw Error(Code::kInvalidArgument, "bench allreduce: -n must be between 1 and 256");
  }
  bench::AllreduceBenchOptions options;
  options.ranks = args.ranks;
  options.sizes = bench::ParseAllreduceSizes(args.sizes);
  options.json = args.json;
  options.transport = args.transport;
  // 0 is the library's "by size"; given, it must be a count.
  if (args.iters && *args.iters < 1) {
    throw Error(Code::kInvalidArgument,
                "bench allreduce: --iters must be at least 1 (leave it out: chosen by size), got " +
                    std::to_string(*args.iters));
  }
  options.iters = args.iters.value_or(0);
  options.timeout_s = args.timeout_s;
  options.late_us = args.late_us;
  config::ReadCommunicatorTunables(&options.communicator);  // CADRE_SHM_SLOT_BYTES, ..._SPIN_US
  // The ranks are bound to CPUs as `cadre run` binds slots (CADRE_CPU_BIND), so that the raw
  // collective and jobs are timed alike.
  ThrowIfError(launch::PlanCpuBindingFromEnv(args.ranks, &options.cpus));
  return bench::RunAllreduceBench(options);
}

}  // namespace

void AddBenchAllreduceCommand(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<AllreduceBenchArgs>();
  CLI::App* cmd = BenchGroup(app)->add_subcommand(
      "allreduce", "Time cadre's allreduce across local processes (bytes, time_us, busbw_gbps)");
  cmd->add_option("-n,--ranks", args->ranks, "Number of ranks (processes)")->required();
  cmd->add_option("--sizes", args->sizes,
                  "Comma-separated byte counts, 4 B to 4 GiB (default 4 B..256 MiB)");
  cmd->add_flag("--json", args->json, "One JSON object per size instead of a table");
  cmd->add_option("--transport", args->transport, "shm (default) or tcp")
      ->check(CLI::IsMember({"shm", "tcp"}));
  cmd->add_option("--iters", args->iters, "Timed iterations per size (default: by size)");
  cmd->add_option("--timeout", args->timeout_s, "Seconds any collective may wait on a peer");
  cmd->add_option("--late-us", args->late_us,
                  "The last rank computes this long before each call (rank 0 waits; cpu_us "
                  "shows what waiting burns)");
  cmd->callback([args, exit_code] { *exit_code = RunBenchAllreduce(*args); });
}

}  // namespace cadre::cli
