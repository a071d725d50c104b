// `cadre bench ps` and its hidden per-host part `cadre bench ps-node`: flags and the
// environment of an emulated host, handed to bench/ps_table.h.
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "cadre/base/env.h"
#include "cadre/base/status.h"
#include "cadre/bench/ps_table.h"
#include "cadre/cli/commands.h"
#include "cadre/cli/support.h"

namespace cadre::cli {
namespace {

struct BenchPsArgs {
  std::vector<int> servers{1, 2};
  std::vector<int> workers{1, 2, 4};
  std::vector<std::string> sizes{"4K", "256K", "4M", "64M"};
  int iterations = 5;
  std::string emulate_network;  // empty: loopback
};

// What starts one emulated host's part: this program's hidden subcommand below.
std::vector<std::string> NodeCommand() {
  std::error_code ec;
  std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) throw Error(Code::kIo, "bench ps: cannot find this program (/proc/self/exe)");
  return {self.string(), "bench", "ps-node"};
}

int RunBenchPs(const BenchPsArgs& args) {
  bench::PsTableOptions options;
  options.servers = args.servers;
  options.workers = args.workers;
  options.sizes = bench::ParsePsSizes(args.sizes);
  options.iterations = args.iterations;
  if (args.emulate_network.empty()) return bench::RunPsTableLoopback(options);
  SignalsDeferred deferred;
  return bench::RunPsTableEmulated(options, args.emulate_network, NodeCommand());
}

}  // namespace

void AddBenchPsCommand(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<BenchPsArgs>();
  CLI::App* cmd = BenchGroup(app)->add_subcommand(
      "ps",
      "Parameter-server push+pull throughput (servers x workers x sizes), on loopback or on "
      "emulated nodes");
  cmd->add_option("--servers", args->servers, "server counts")->check(CLI::Range(1, 64));
  cmd->add_option("--workers", args->workers, "worker counts")->check(CLI::Range(1, 256));
  cmd->add_option("--sizes", args->sizes, "tensor sizes (4K .. 64M)");
  cmd->add_option("--iterations", args->iterations, "timed steps per configuration")
      ->check(CLI::Range(1, 10000));
  cmd->add_option("--emulate-network", args->emulate_network,
                  "run each server and worker as a process on its own emulated node with this "
                  "link (RATE[,DELAY[,LOSS]], e.g. 1gbit; root only, see docs/netem.md)");
  cmd->callback([args, exit_code] { *exit_code = RunBenchPs(*args); });

  auto node = std::make_shared<bench::PsNodeOptions>();
  CLI::App* n = BenchGroup(app)->add_subcommand(
      "ps-node", "One emulated host's process of `cadre bench ps --emulate-network` (internal)");
  n->group("");  // hidden from help: only `cadre bench ps --emulate-network` starts it
  n->add_option("--servers", node->servers)->required()->check(CLI::Range(1, 64));
  n->add_option("--workers", node->workers)->required()->check(CLI::Range(1, 256));
  n->add_option("--bytes", node->bytes)
      ->required()
      ->check(CLI::Range(int64_t{4}, int64_t{1} << 30));
  n->add_option("--iterations", node->iterations)->required()->check(CLI::Range(1, 10000));
  n->add_option("--out", node->out_dir)->required();
  n->add_option("--token", node->token)->required();
  n->add_option("--timeout", node->timeout_s)->required()->check(NumberIn(0.001, 3.0e7));
  n->callback([node, exit_code] {
    // The emulated host's facts, set by netem::RunOnEveryHost.
    node->host = static_cast<int>(EnvInt("CADRE_NETEM_HOST", -1));
    node->addresses.clear();
    std::stringstream list(GetEnv("CADRE_NETEM_ADDRESSES").value_or(""));
    for (std::string a; std::getline(list, a, ',');) node->addresses.push_back(a);
    *exit_code = bench::RunPsNode(*node);
  });
}

}  // namespace cadre::cli
