// `cadre bench ps`: parameter-server push+pull throughput over servers x workers x sizes (the
// workload is described in ps/bench.h).
//   default                    servers and workers are threads of this process on 127.0.0.1;
//   --emulate-network RATE     one process per server and per worker, each on its own emulated
//                              node behind a shaped full-duplex link (docs/netem.md, root only);
//                              each row also shows the link bound and the fraction reached.
// In the emulated mode this process only builds the network and starts, per configuration, one
// hidden `cadre bench ps-node` per emulated host: host i < S is server i, host S + w is worker
// w, the rest exit at once. Workers write their step times into a private temporary folder
// that this process reads back; every process and the whole configuration have a timeout.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>

#include "cadre/base/byte_size.h"
#include "cadre/base/env.h"
#include "cadre/base/status.h"
#include "cadre/cli/commands.h"
#include "cadre/cli/support.h"
#include "cadre/netem/host_exec.h"
#include "cadre/netem/network_emulator.h"
#include "cadre/ps/bench.h"

namespace cadre::cli {
namespace {

namespace fs = std::filesystem;

constexpr int kNodePort = 2222;  // every emulated node has its own port space

struct BenchPsArgs {
  std::vector<int> servers{1, 2};
  std::vector<int> workers{1, 2, 4};
  std::vector<std::string> sizes{"4K", "256K", "4M", "64M"};
  int iterations = 5;
  std::string emulate_network;  // empty: loopback
};

struct NodeArgs {
  int servers = 1;
  int workers = 1;
  int64_t bytes = 4096;
  int iterations = 5;
  std::string out_dir;
  std::string token;
  double timeout_s = 300;
};

std::vector<int64_t> ParseSizes(const std::vector<std::string>& sizes) {
  std::vector<int64_t> out;
  for (const std::string& s : sizes) {
    uint64_t bytes = 0;
    if (!ParseByteSize(s, &bytes).ok() || bytes < 4 || bytes > (uint64_t{1} << 30)) {
      throw Error(Code::kInvalidArgument,
                  "bench ps: --sizes '" + s + "' is not a size like 4K, 256K, 64M (4 B to 1 GiB)");
    }
    out.push_back(static_cast<int64_t>(bytes));
  }
  return out;
}

std::string SizeLabel(int64_t size) {
  return size >= (1 << 20) ? std::to_string(size >> 20) + " MiB"
                           : std::to_string(size >> 10) + " KiB";
}

// A private temporary folder, removed with its contents.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "cadre-bench-ps-XXXXXX").string();
    if (mkdtemp(tmpl.data()) == nullptr)
      throw Error(Code::kIo, "bench ps: cannot create a temporary folder in " +
                                 fs::temp_directory_path().string());
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string WorkerFile(const std::string& dir, int worker) {
  return dir + "/worker-" + std::to_string(worker) + ".txt";
}

std::string RandomToken() {
  std::random_device rd;
  std::ostringstream os;
  os << std::hex << rd() << rd() << rd() << rd();
  return os.str();
}

void PrintHeader(bool emulated) {
  std::printf("%-8s %-8s %-10s %-12s %-14s %-12s", "servers", "workers", "size", "step (ms)",
              "agg (Gbit/s)", "per worker");
  if (emulated) std::printf(" %-12s %-8s", "bound (ms)", "of bound");
  std::printf("\n");
}

void PrintRow(const ps::BenchResult& r, double bound_s) {
  const ps::BenchConfig& c = r.config;
  std::printf("%-8d %-8d %-10s %-12.3f %-14.3f %-12.3f", c.servers, c.workers,
              SizeLabel(c.bytes).c_str(), r.step_seconds * 1e3, r.aggregate_gbps,
              r.aggregate_gbps / c.workers);
  if (bound_s > 0) std::printf(" %-12.3f %.0f%%", bound_s * 1e3, 100 * bound_s / r.step_seconds);
  std::printf("\n");
  std::fflush(stdout);
}

// Every configuration of the run, in table order: by size, then servers, then workers.
std::vector<ps::BenchConfig> Matrix(const BenchPsArgs& args, const std::vector<int64_t>& sizes) {
  std::vector<ps::BenchConfig> out;
  for (int64_t size : sizes) {
    for (int s : args.servers) {
      for (int w : args.workers) {
        ps::BenchConfig config;
        config.servers = s;
        config.workers = w;
        config.bytes = size;
        config.iterations = args.iterations;
        out.push_back(config);
      }
    }
  }
  return out;
}

int RunLoopback(const BenchPsArgs& args, const std::vector<int64_t>& sizes) {
  PrintHeader(false);
  for (const ps::BenchConfig& config : Matrix(args, sizes)) {
    ps::BenchResult r;
    ThrowIfError(ps::RunPsBench(config, &r));
    PrintRow(r, 0);
  }
  return 0;
}

// One configuration on the emulated network: one process per host, then the workers' times.
ps::BenchResult RunEmulatedConfig(const netem::NetworkEmulator& emu, const ps::BenchConfig& config,
                                  double bound_s) {
  TempDir dir;
  // Generous: a run far slower than the link bound is still measured, a hang is not waited out.
  double timeout_s = 60 + 20.0 * (config.iterations + 1) * bound_s;
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (ec) throw Error(Code::kIo, "bench ps: cannot find this program (/proc/self/exe)");
  std::vector<std::string> argv = {self.string(),
                                   "bench",
                                   "ps-node",
                                   "--servers",
                                   std::to_string(config.servers),
                                   "--workers",
                                   std::to_string(config.workers),
                                   "--bytes",
                                   std::to_string(config.bytes),
                                   "--iterations",
                                   std::to_string(config.iterations),
                                   "--out",
                                   dir.path(),
                                   "--token",
                                   RandomToken(),
                                   "--timeout",
                                   std::to_string(timeout_s)};
  netem::HostExecOptions exec;
  exec.deadline = Deadline(std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000)) +
                           std::chrono::seconds(30));
  int code = 0;
  std::string what = "bench ps: " + std::to_string(config.servers) + " servers x " +
                     std::to_string(config.workers) + " workers, " + SizeLabel(config.bytes);
  ThrowIfError(netem::RunOnEveryHost(emu, argv, exec, &code).WithContext(what));
  if (code != 0)
    throw Error(Code::kInternal, what + ": a server or worker process failed (exit code " +
                                     std::to_string(code) + "); its error is printed above");
  std::vector<std::vector<double>> times(static_cast<size_t>(config.workers));
  for (int w = 0; w < config.workers; ++w) {
    std::ifstream in(WorkerFile(dir.path(), w));
    if (!in) throw Error(Code::kIo, what + ": worker " + std::to_string(w) + " left no results");
    for (double t; in >> t;) times[static_cast<size_t>(w)].push_back(t);
  }
  ps::BenchResult r;
  ThrowIfError(ps::SummarizePsBench(config, times, &r).WithContext(what));
  return r;
}

int RunEmulated(const BenchPsArgs& args, const std::vector<int64_t>& sizes) {
  SignalsDeferred deferred;
  netem::EmulatorOptions options;
  options.link = netem::ParseLinkSpecOrThrow(args.emulate_network);
  options.hosts = *std::max_element(args.servers.begin(), args.servers.end()) +
                  *std::max_element(args.workers.begin(), args.workers.end());
  options.job_id = "bench-ps-" + std::to_string(getpid());
  options.log_warnings = false;  // the header line says it
  auto emu = netem::NetworkEmulator::CreateOrThrow(options);
  const double rate = static_cast<double>(emu->link().rate_bits_per_s);
  std::printf(
      "# cadre bench ps on %d emulated nodes, link %s%s%s: one process per server and per "
      "worker; bound = the busiest link's bytes / rate (TCP payload tops out near 95%% of the "
      "rate)\n",
      emu->size(), emu->link().ToString().c_str(), emu->relay_mode() ? " (user-space relay)" : "",
      emu->link().wants_delay_or_loss() && !emu->delay_loss_emulated()
          ? " (rate only: this kernel cannot emulate delay/loss)"
          : "");
  PrintHeader(true);
  for (const ps::BenchConfig& config : Matrix(args, sizes)) {
    double bound = ps::PsBenchLinkBoundSeconds(config, rate);
    PrintRow(RunEmulatedConfig(*emu, config, bound), bound);
  }
  ThrowIfError(emu->Destroy());
  return 0;
}

// One emulated host's part of a configuration (see the file comment).
int RunNode(const NodeArgs& args) {
  const int64_t host = EnvInt("CADRE_NETEM_HOST", -1);
  if (host < 0)
    throw Error(Code::kInvalidArgument,
                "bench ps-node: CADRE_NETEM_HOST is not set (this "
                "command runs on emulated hosts, started by `cadre "
                "bench ps --emulate-network`)");
  std::vector<std::string> addresses;
  std::stringstream list(GetEnv("CADRE_NETEM_ADDRESSES").value_or(""));
  for (std::string a; std::getline(list, a, ',');) addresses.push_back(a);
  if (static_cast<int>(addresses.size()) < args.servers + args.workers)
    throw Error(Code::kInvalidArgument, "bench ps-node: CADRE_NETEM_ADDRESSES lists " +
                                            std::to_string(addresses.size()) +
                                            " hosts, the configuration needs " +
                                            std::to_string(args.servers + args.workers));
  ps::BenchConfig config;
  config.servers = args.servers;
  config.workers = args.workers;
  config.bytes = args.bytes;
  config.iterations = args.iterations;
  Duration timeout(static_cast<int64_t>(args.timeout_s * 1000));
  if (host < args.servers) {
    ThrowIfError(ps::RunPsBenchServer(
        config, addresses[static_cast<size_t>(host)] + ":" + std::to_string(kNodePort), args.token,
        timeout));
    return 0;
  }
  int worker = static_cast<int>(host) - args.servers;
  if (worker >= args.workers) return 0;  // a host this configuration does not use
  std::vector<std::string> servers;
  for (int s = 0; s < args.servers; ++s)
    servers.push_back(addresses[static_cast<size_t>(s)] + ":" + std::to_string(kNodePort));
  std::vector<double> times;
  ThrowIfError(ps::RunPsBenchWorker(config, servers, worker, args.token, timeout, &times));
  std::string path = WorkerFile(args.out_dir, worker);
  {
    std::ofstream out(path + ".tmp");
    out.precision(9);
    for (double t : times) out << t << "\n";
    if (!out.flush()) throw Error(Code::kIo, "bench ps-node: cannot write " + path + ".tmp");
  }
  fs::rename(path + ".tmp", path);  // the reader sees all of it or nothing
  return 0;
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
  cmd->callback([args, exit_code] {
    std::vector<int64_t> sizes = ParseSizes(args->sizes);
    *exit_code =
        args->emulate_network.empty() ? RunLoopback(*args, sizes) : RunEmulated(*args, sizes);
  });

  auto node = std::make_shared<NodeArgs>();
  CLI::App* n = BenchGroup(app)->add_subcommand(
      "ps-node", "One emulated host's process of `cadre bench ps --emulate-network` (internal)");
  n->group("");  // hidden from help: only RunEmulated starts it
  n->add_option("--servers", node->servers)->required()->check(CLI::Range(1, 64));
  n->add_option("--workers", node->workers)->required()->check(CLI::Range(1, 256));
  n->add_option("--bytes", node->bytes)
      ->required()
      ->check(CLI::Range(int64_t{4}, int64_t{1} << 30));
  n->add_option("--iterations", node->iterations)->required()->check(CLI::Range(1, 10000));
  n->add_option("--out", node->out_dir)->required();
  n->add_option("--token", node->token)->required();
  n->add_option("--timeout", node->timeout_s)->required()->check(CLI::PositiveNumber);
  n->callback([node, exit_code] { *exit_code = RunNode(*node); });
}

}  // namespace cadre::cli
