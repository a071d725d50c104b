#include "cadre/bench/ddl_allreduce.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cadre/base/status.h"
#include "cadre/comm/collectives.h"
#include "cadre/comm/hierarchical.h"
#include "cadre/netem/link_spec.h"
#include "cadre/store/prefix_store.h"
#include "cadre/store/tcp_store.h"

namespace cadre::bench {
namespace {

using Clock = std::chrono::steady_clock;

const char* AlgorithmName(comm::AllreduceAlgorithm a) {
  switch (a) {
    case comm::AllreduceAlgorithm::kRing:
      return "ring";
    case comm::AllreduceAlgorithm::kHalvingDoubling:
      return "hd";
    case comm::AllreduceAlgorithm::kRecursiveDoubling:
      return "rd";
    case comm::AllreduceAlgorithm::kHierarchical:
      return "hier.";
    case comm::AllreduceAlgorithm::kAuto:
      break;
  }
  return "auto";
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
               const DdlAllreduceOptions& args) {
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

void RunRank(const DdlAllreduceOptions& args, const DdlHost& h, int slot, double rate_bps,
             std::mutex* print_mu) {
  const int host = h.host, hosts = h.hosts;
  const int size = hosts * args.slots, rank = host * args.slots + slot;
  store::TcpStoreOptions so;
  so.host = h.addresses.at(0);
  so.port = args.port;
  so.token = h.token;
  so.identity = "bench rank " + std::to_string(rank);
  auto st = std::make_shared<store::TcpStore>(so);
  comm::CommunicatorOptions co = args.communicator;
  co.rank = rank;
  co.size = size;
  co.store = std::make_shared<store::PrefixStore>("ddl-bench", st);
  co.token = h.token;
  co.host = "bench-host-" + std::to_string(host);
  co.bind_address = h.address;
  co.timeout = std::chrono::seconds(120);
  const comm::HierarchyOptions& hier = co.hierarchy;
  auto c = comm::Communicator::Create(co);    // the hierarchical allreduce's, and flat-tcp's
  std::unique_ptr<comm::Communicator> pairs;  // flat's: shared memory inside the host
  if (args.flat_shm) {
    comm::CommunicatorOptions po = co;
    po.shm_pairs = true;
    pairs = comm::Communicator::Create(po);
  }
  // The hierarchy's levels, innermost first: the slots of a host, then the grid of hosts.
  std::vector<int> levels = {c->topology().local_size};
  for (int d :
       hier.host_grid.empty() ? comm::ChooseHostGrid(c->topology().cross_size) : hier.host_grid) {
    levels.push_back(d);
  }

  // The flat baseline is what cadre itself runs on a group without hierarchy: the algorithm
  // kAuto chooses by size (recursive doubling, halving-doubling, the ring), not the ring at every
  // size, which would handicap it at small sizes.
  auto flat_choice = [&](size_t bytes) {
    comm::AllreduceShape shape = comm::ShapeOf(*c, bytes);
    shape.hierarchical_possible = false;
    return comm::ChooseAllreduceAlgorithm(comm::AllreduceAlgorithm::kAuto, shape);
  };
  auto flat_on = [&flat_choice](comm::Communicator* on) {
    return [&flat_choice, on](const comm::AllreduceOptions& o) {
      comm::AllreduceOptions x = o;
      x.algorithm = flat_choice(o.count * sizeof(float));
      comm::Allreduce(*on, x);
    };
  };
  std::vector<Algo> algos;
  if (pairs) algos.push_back({"flat", flat_on(pairs.get())});
  if (args.flat_tcp) algos.push_back({"flat-tcp", flat_on(c.get())});
  algos.push_back({"hierarchical", [&](const comm::AllreduceOptions& o) {
                     comm::AllreduceOptions x = o;
                     x.algorithm = comm::AllreduceAlgorithm::kHierarchical;
                     comm::Allreduce(*c, x);
                   }});
  const bool lead = rank == 0;
  if (lead) {
    std::lock_guard lock(*print_mu);
    std::printf(
        "# %d hosts x %d slots, link %s; hierarchical levels %s, pipeline chunks >= %zu bytes x "
        "hosts, <= %zu (streamed between two hosts: >= %zu bytes, <= %zu)\n",
        hosts, args.slots, h.link.c_str(), comm::GridToString(levels).c_str(), hier.pipeline_bytes,
        hier.pipeline_chunks, hier.streamed_pipeline_bytes, hier.streamed_pipeline_chunks);
    std::printf("# bound = 2(N-1)/N x S / rate, N = hosts; busbw = 2(N-1)/N x S / time\n");
    std::printf(
        "# flat = what cadre chooses without hierarchy (rd recursive doubling, hd "
        "halving-doubling, ring), same-host messages over shared memory; flat-tcp = the same "
        "over TCP inside the host\n");
    std::printf("%10s  %-17s %10s %12s %10s %9s\n", "bytes", "algorithm", "time ms", "busbw Mbit/s",
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
        const std::string name =
            a.name == std::string("hierarchical")
                ? a.name
                : std::string(a.name) + " " + AlgorithmName(flat_choice(bytes));
        std::printf("%10zu  %-17s %10.3f %12.1f %10.3f %8.0f%%\n", bytes, name.c_str(), t * 1e3,
                    cross * 8 / t / 1e6, bound * 1e3, t > 0 ? 100.0 * bound / t : 0.0);
        std::fflush(stdout);
      }
    }
  }
}

}  // namespace

int RunDdlAllreduceHost(const DdlAllreduceOptions& args, const DdlHost& h) {
  const double rate = static_cast<double>(netem::ParseLinkSpecOrThrow(h.link).rate_bits_per_s);
  std::unique_ptr<store::TcpStoreServer> server;
  if (h.host == 0) {
    store::TcpStoreServerOptions so;
    so.host = h.address;
    so.port = args.port;
    so.token = h.token;
    server = std::make_unique<store::TcpStoreServer>(so);
  }
  std::mutex print_mu;
  std::vector<std::thread> threads;
  std::vector<std::string> errors(static_cast<size_t>(args.slots));
  for (int s = 0; s < args.slots; ++s) {
    threads.emplace_back([&, s] {
      try {
        RunRank(args, h, s, rate, &print_mu);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(s)] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  int rc = 0;
  for (int s = 0; s < args.slots; ++s) {
    if (errors[static_cast<size_t>(s)].empty()) continue;
    std::fprintf(stderr, "host %d slot %d: %s\n", h.host, s,
                 errors[static_cast<size_t>(s)].c_str());
    rc = 1;
  }
  // Host 0's store must outlive the other hosts' last rendezvous: they all finished the same
  // collectives, so one more short wait suffices.
  if (h.host == 0) std::this_thread::sleep_for(std::chrono::milliseconds(200));
  return rc;
}

}  // namespace cadre::bench
