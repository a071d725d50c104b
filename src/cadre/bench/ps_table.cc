#include "cadre/bench/ps_table.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "cadre/base/byte_size.h"
#include "cadre/base/status.h"
#include "cadre/bench/ps_workload.h"
#include "cadre/netem/host_exec.h"
#include "cadre/netem/network_emulator.h"

namespace cadre::bench {

std::vector<int64_t> ParsePsSizes(const std::vector<std::string>& sizes) {
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

namespace {

namespace fs = std::filesystem;

constexpr int kNodePort = 2222;  // every emulated node has its own port space

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

void PrintRow(const PsBenchResult& r, double bound_s) {
  const PsBenchConfig& c = r.config;
  std::printf("%-8d %-8d %-10s %-12.3f %-14.3f %-12.3f", c.servers, c.workers,
              SizeLabel(c.bytes).c_str(), r.step_seconds * 1e3, r.aggregate_gbps,
              r.aggregate_gbps / c.workers);
  if (bound_s > 0) std::printf(" %-12.3f %.0f%%", bound_s * 1e3, 100 * bound_s / r.step_seconds);
  std::printf("\n");
  std::fflush(stdout);
}

// Every configuration of the run, in table order: by size, then servers, then workers.
std::vector<PsBenchConfig> Matrix(const PsTableOptions& args) {
  std::vector<PsBenchConfig> out;
  for (int64_t size : args.sizes) {
    for (int s : args.servers) {
      for (int w : args.workers) {
        PsBenchConfig config;
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

}  // namespace

int RunPsTableLoopback(const PsTableOptions& args) {
  PrintHeader(false);
  for (const PsBenchConfig& config : Matrix(args)) {
    PsBenchResult r;
    ThrowIfError(RunPsBench(config, &r));
    PrintRow(r, 0);
  }
  return 0;
}

namespace {

// One configuration on the emulated network: one process per host, then the workers' times.
PsBenchResult RunEmulatedConfig(const netem::NetworkEmulator& emu,
                                const std::vector<std::string>& node_command,
                                const PsBenchConfig& config, double bound_s) {
  TempDir dir;
  // Generous: a run far slower than the link bound is still measured, a hang is not waited out.
  double timeout_s = 60 + 20.0 * (config.iterations + 1) * bound_s;
  std::vector<std::string> argv = node_command;
  std::vector<std::string> flags = {"--servers",    std::to_string(config.servers),
                                    "--workers",    std::to_string(config.workers),
                                    "--bytes",      std::to_string(config.bytes),
                                    "--iterations", std::to_string(config.iterations),
                                    "--out",        dir.path(),
                                    "--token",      RandomToken(),
                                    "--timeout",    std::to_string(timeout_s)};
  argv.insert(argv.end(), flags.begin(), flags.end());
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
  PsBenchResult r;
  ThrowIfError(SummarizePsBench(config, times, &r).WithContext(what));
  return r;
}

}  // namespace

int RunPsTableEmulated(const PsTableOptions& args, const std::string& link,
                       const std::vector<std::string>& node_command) {
  netem::EmulatorOptions options;
  options.link = netem::ParseLinkSpecOrThrow(link);
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
  for (const PsBenchConfig& config : Matrix(args)) {
    double bound = PsBenchLinkBoundSeconds(config, rate);
    PrintRow(RunEmulatedConfig(*emu, node_command, config, bound), bound);
  }
  ThrowIfError(emu->Destroy());
  return 0;
}

int RunPsNode(const PsNodeOptions& args) {
  const int host = args.host;
  if (host < 0)
    throw Error(Code::kInvalidArgument,
                "bench ps-node: CADRE_NETEM_HOST is not set (this "
                "command runs on emulated hosts, started by `cadre "
                "bench ps --emulate-network`)");
  const std::vector<std::string>& addresses = args.addresses;
  if (static_cast<int>(addresses.size()) < args.servers + args.workers)
    throw Error(Code::kInvalidArgument, "bench ps-node: CADRE_NETEM_ADDRESSES lists " +
                                            std::to_string(addresses.size()) +
                                            " hosts, the configuration needs " +
                                            std::to_string(args.servers + args.workers));
  PsBenchConfig config;
  config.servers = args.servers;
  config.workers = args.workers;
  config.bytes = args.bytes;
  config.iterations = args.iterations;
  Duration timeout(static_cast<int64_t>(args.timeout_s * 1000));
  if (host < args.servers) {
    ThrowIfError(RunPsBenchServer(
        config, addresses[static_cast<size_t>(host)] + ":" + std::to_string(kNodePort), args.token,
        timeout));
    return 0;
  }
  int worker = host - args.servers;
  if (worker >= args.workers) return 0;  // a host this configuration does not use
  std::vector<std::string> servers;
  for (int s = 0; s < args.servers; ++s)
    servers.push_back(addresses[static_cast<size_t>(s)] + ":" + std::to_string(kNodePort));
  std::vector<double> times;
  ThrowIfError(RunPsBenchWorker(config, servers, worker, args.token, timeout, &times));
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

}  // namespace cadre::bench
