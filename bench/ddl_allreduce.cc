// Flat ring vs hierarchical allreduce on emulated nodes (DDL mode's benchmark).
//
// Run once per emulated host by `cadre netem exec` (docs/netem.md), which sets CADRE_NETEM_HOST,
// CADRE_NETEM_HOSTS, CADRE_NETEM_ADDRESS(ES) and CADRE_NETEM_LINK:
//   cadre netem exec --hosts 2 --link 1gbit -- build/bench/ddl_allreduce_bench --slots 2
// Each process holds `--slots` ranks as threads (one learner with several slots: the ranks of
// one host share memory, hosts talk TCP over the shaped links). Host 0 serves the rendezvous
// store. Host 0 prints, for every size, the time of each algorithm (slowest rank, median of the
// repetitions) against the link bound: each host's link must carry 2(N-1)/N x S per direction
// for N hosts, so an allreduce of S bytes takes at least 2(N-1)/N x S / rate.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cadre/base/env.h"
#include "cadre/base/status.h"
#include "cadre/comm/collectives.h"
#include "cadre/comm/hierarchical.h"
#include "cadre/config/from_env.h"
#include "cadre/netem/link_spec.h"
#include "cadre/store/prefix_store.h"
#include "cadre/store/tcp_store.h"

namespace {

using namespace cadre;
using Clock = std::chrono::steady_clock;

struct Args {
  int slots = 2;
  uint16_t port = 29611;
  size_t min_bytes = 4 << 10;
  size_t max_bytes = 64 << 20;
  double seconds_per_size = 1.0;  // repeat each measurement until this much time has passed
  int max_reps = 20;
  size_t pipeline_bytes = comm::kDefaultPipelineBytes;  // HierarchyOptions; 0 = no pipelining
  size_t pipeline_chunks = comm::kDefaultPipelineChunks;
  size_t streamed_bytes = comm::kDefaultStreamedPipelineBytes;  // between two hosts
  size_t streamed_chunks = comm::kDefaultStreamedPipelineChunks;
  std::vector<int> host_grid;  // HierarchyOptions; empty = chosen from the topology
};

[[noreturn]] void Usage(const std::string& why) {
  std::fprintf(
      stderr,
      "ddl_allreduce_bench: %s\nusage: ddl_allreduce_bench [--slots N] [--port P] "
      "[--min-bytes B] [--max-bytes B] [--seconds S] [--max-reps R] [--pipeline-bytes B] "
      "[--pipeline-chunks K] [--streamed-bytes B] [--streamed-chunks K] [--host-grid AxB]\n"
      "(run it under "
      "`cadre netem exec`)\n",
      why.c_str());
  std::exit(2);
}

Args ParseArgs(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    if (i + 1 >= argc) Usage(flag + " needs a value");
    const char* v = argv[++i];
    if (flag == "--host-grid") {
      if (Status st = comm::ParseGrid(v, &a.host_grid); !st.ok()) Usage(st.message());
      continue;
    }
    char* end = nullptr;
    const double x = std::strtod(v, &end);
    if (*v == '\0' || *end != '\0' || x < 0 ||
        (x == 0 && flag.rfind("--pipeline-", 0) != 0 && flag.rfind("--streamed-", 0) != 0)) {
      Usage(flag + " " + v + ": not a positive number");
    }
    if (flag == "--slots")
      a.slots = static_cast<int>(x);
    else if (flag == "--port")
      a.port = static_cast<uint16_t>(x);
    else if (flag == "--min-bytes")
      a.min_bytes = static_cast<size_t>(x);
    else if (flag == "--max-bytes")
      a.max_bytes = static_cast<size_t>(x);
    else if (flag == "--seconds")
      a.seconds_per_size = x;
    else if (flag == "--max-reps")
      a.max_reps = static_cast<int>(x);
    else if (flag == "--pipeline-bytes")
      a.pipeline_bytes = static_cast<size_t>(x);
    else if (flag == "--pipeline-chunks")
      a.pipeline_chunks = static_cast<size_t>(x);
    else if (flag == "--streamed-bytes")
      a.streamed_bytes = static_cast<size_t>(x);
    else if (flag == "--streamed-chunks")
      a.streamed_chunks = static_cast<size_t>(x);
    else
      Usage("unknown flag " + flag);
  }
  return a;
}

std::string Need(const char* name) {
  auto v = GetEnv(name);
  if (!v || v->empty()) Usage(std::string(name) + " is not set");
  return *v;
}

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t end; (end = s.find(sep, start)) != std::string::npos; start = end + 1) {
    out.push_back(s.substr(start, end - start));
  }
  out.push_back(s.substr(start));
  return out;
}

struct Algo {
  const char* name;
  std::function<void(const comm::AllreduceOptions&)> run;
};

// Runs `run` on every rank from one instant and returns the time until the last rank finished,
// agreed by every rank. The emulated hosts are namespaces of one machine, so they share
// CLOCK_MONOTONIC (steady_clock): rank 0 names a start a few milliseconds ahead and every rank
// waits for it. A barrier alone would not do: with link delay its ranks leave up to a one-way
// delay apart, and an exchange-based allreduce carries that skew from one call to the next.
double SynchronizedSeconds(comm::Communicator& comm, const std::function<void()>& run) {
  comm::Barrier(comm);
  int64_t start_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                         (Clock::now() + std::chrono::milliseconds(10)).time_since_epoch())
                         .count();
  comm::BroadcastOptions b;
  b.buffer = &start_ns;
  b.count = 1;
  b.dtype = comm::DataType::kInt64;
  comm::Broadcast(comm, b);
  const Clock::time_point start{std::chrono::nanoseconds(start_ns)};
  std::this_thread::sleep_until(start - std::chrono::microseconds(200));
  while (Clock::now() < start) {
  }
  run();
  double dt = std::chrono::duration<double>(Clock::now() - start).count();
  comm::AllreduceOptions m;
  m.input = m.output = &dt;
  m.count = 1;
  m.dtype = comm::DataType::kFloat64;
  m.op = comm::ReduceOp::kMax;
  m.algorithm = comm::AllreduceAlgorithm::kRing;
  comm::Allreduce(comm, m);
  return dt;
}

// Seconds per allreduce, as training sees it: allreduces back to back. A repetition starts
// every rank at one instant (SynchronizedSeconds) and runs a batch of allreduces (as many as
// take ~kBatchSeconds, from a timed warm-up, 1 to kMaxBatch) until the last rank is done,
// divided by the batch; the result is the median over repetitions.
constexpr double kBatchSeconds = 0.03;
constexpr int kMaxBatch = 64;
double Measure(comm::Communicator& comm, const Algo& algo, std::vector<float>& buf,
               const Args& args) {
  comm::AllreduceOptions o;
  o.input = o.output = buf.data();
  o.count = buf.size();
  algo.run(o);  // warm-up: connections, subgroups, page faults
  const double once = SynchronizedSeconds(comm, [&] { algo.run(o); });  // same on every rank
  const int batch = static_cast<int>(
      std::clamp(kBatchSeconds / std::max(once, 1e-9), 1.0, static_cast<double>(kMaxBatch)));
  std::vector<double> times;
  const auto until = Clock::now() + std::chrono::duration<double>(args.seconds_per_size);
  int reps = 0;
  // Every rank must run the same number of repetitions: rank 0 decides, by broadcast.
  for (int more = 1; more; ++reps) {
    auto run_batch = [&] {
      for (int i = 0; i < batch; ++i) algo.run(o);
    };
    times.push_back(SynchronizedSeconds(comm, run_batch) / batch);
    int32_t go = reps + 1 < 3 || (Clock::now() < until && reps + 1 < args.max_reps);
    comm::BroadcastOptions b;
    b.buffer = &go;
    b.count = 1;
    b.dtype = comm::DataType::kInt32;
    comm::Broadcast(comm, b);
    more = go;
  }
  std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
  return times[times.size() / 2];
}

void RunRank(const Args& args, int host, int hosts, int slot, const std::string& address,
             const std::string& store_address, const std::string& token, double rate_bps,
             const std::string& link, std::mutex* print_mu) {
  const int size = hosts * args.slots, rank = host * args.slots + slot;
  store::TcpStoreOptions so;
  so.host = store_address;
  so.port = args.port;
  so.token = token;
  so.identity = "bench rank " + std::to_string(rank);
  auto st = std::make_shared<store::TcpStore>(so);
  comm::CommunicatorOptions co;
  co.rank = rank;
  co.size = size;
  co.store = std::make_shared<store::PrefixStore>("ddl-bench", st);
  co.token = token;
  co.host = "bench-host-" + std::to_string(host);
  co.bind_address = address;
  co.timeout = std::chrono::seconds(120);
  co.hierarchy.pipeline_bytes = args.pipeline_bytes;
  co.hierarchy.pipeline_chunks = args.pipeline_chunks;
  co.hierarchy.streamed_pipeline_bytes = args.streamed_bytes;
  co.hierarchy.streamed_pipeline_chunks = args.streamed_chunks;
  co.hierarchy.host_grid = args.host_grid;
  config::ReadCommunicatorTunables(&co);  // CADRE_SHM_SLOT_BYTES, CADRE_SHM_SPIN_US, CADRE_HOSTS
  auto c = comm::Communicator::Create(co);
  // The hierarchy's levels, innermost first: the slots of a host, then the grid of hosts.
  std::vector<int> levels = {c->topology().local_size};
  for (int d :
       args.host_grid.empty() ? comm::ChooseHostGrid(c->topology().cross_size) : args.host_grid) {
    levels.push_back(d);
  }

  std::vector<Algo> algos = {
      {"flat ring",
       [&](const comm::AllreduceOptions& o) {
         comm::AllreduceOptions x = o;
         x.algorithm = comm::AllreduceAlgorithm::kRing;
         comm::Allreduce(*c, x);
       }},
      {"hierarchical",
       [&](const comm::AllreduceOptions& o) {
         comm::AllreduceOptions x = o;
         x.algorithm = comm::AllreduceAlgorithm::kHierarchical;
         comm::Allreduce(*c, x);
       }},
  };
  const bool lead = rank == 0;
  if (lead) {
    std::lock_guard lock(*print_mu);
    std::printf(
        "# %d hosts x %d slots, link %s; hierarchical levels %s, pipeline chunks >= %zu bytes x "
        "hosts, <= %zu (streamed between two hosts: >= %zu bytes, <= %zu)\n",
        hosts, args.slots, link.c_str(), comm::GridToString(levels).c_str(), args.pipeline_bytes,
        args.pipeline_chunks, args.streamed_bytes, args.streamed_chunks);
    std::printf("# bound = 2(N-1)/N x S / rate, N = hosts; busbw = 2(N-1)/N x S / time\n");
    std::printf("%10s  %-13s %10s %12s %10s %9s\n", "bytes", "algorithm", "time ms", "busbw Mbit/s",
                "bound ms", "of bound");
  }
  for (size_t bytes = args.min_bytes; bytes <= args.max_bytes; bytes *= 4) {
    std::vector<float> buf(bytes / sizeof(float), 1.0f);
    for (const Algo& a : algos) {
      const double t = Measure(*c, a, buf, args);
      const double cross = hosts > 1 ? 2.0 * (hosts - 1) / hosts * double(bytes) : 0.0;
      const double bound = cross * 8 / rate_bps;
      if (lead) {
        std::lock_guard lock(*print_mu);
        std::printf("%10zu  %-13s %10.3f %12.1f %10.3f %8.0f%%\n", bytes, a.name, t * 1e3,
                    cross * 8 / t / 1e6, bound * 1e3, t > 0 ? 100.0 * bound / t : 0.0);
        std::fflush(stdout);
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  const Args args = ParseArgs(argc, argv);
  try {
    const int host = std::stoi(Need("CADRE_NETEM_HOST"));
    const int hosts = std::stoi(Need("CADRE_NETEM_HOSTS"));
    const std::string address = Need("CADRE_NETEM_ADDRESS");
    const auto addresses = Split(Need("CADRE_NETEM_ADDRESSES"), ',');
    const std::string link = Need("CADRE_NETEM_LINK");
    const double rate = static_cast<double>(netem::ParseLinkSpecOrThrow(link).rate_bits_per_s);
    const std::string token = GetEnv("CADRE_JOB_TOKEN").value_or("ddl-bench");
    std::unique_ptr<store::TcpStoreServer> server;
    if (host == 0) {
      store::TcpStoreServerOptions so;
      so.host = address;
      so.port = args.port;
      so.token = token;
      server = std::make_unique<store::TcpStoreServer>(so);
    }
    std::mutex print_mu;
    std::vector<std::thread> threads;
    std::vector<std::string> errors(static_cast<size_t>(args.slots));
    for (int s = 0; s < args.slots; ++s) {
      threads.emplace_back([&, s] {
        try {
          RunRank(args, host, hosts, s, address, addresses.at(0), token, rate, link, &print_mu);
        } catch (const std::exception& e) {
          errors[static_cast<size_t>(s)] = e.what();
        }
      });
    }
    for (auto& t : threads) t.join();
    int rc = 0;
    for (int s = 0; s < args.slots; ++s) {
      if (errors[static_cast<size_t>(s)].empty()) continue;
      std::fprintf(stderr, "host %d slot %d: %s\n", host, s,
                   errors[static_cast<size_t>(s)].c_str());
      rc = 1;
    }
    // Host 0's store must outlive the other hosts' last rendezvous: they all finished the same
    // collectives, so one more short wait suffices.
    if (host == 0) std::this_thread::sleep_for(std::chrono::milliseconds(200));
    return rc;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ddl_allreduce_bench: %s\n", e.what());
    return 1;
  }
}
