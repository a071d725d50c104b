#include "cadre/bench/allreduce.h"

#include <signal.h>
#include <sys/wait.h>

#include <unistd.h>
#include <new>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cadre/base/byte_size.h"
#include "cadre/base/status.h"
#include "cadre/bench/busy.h"
#include "cadre/comm/collectives.h"
#include "cadre/launch/cpu_binding.h"
#include "cadre/store/tcp_store.h"

namespace cadre::bench {

std::vector<size_t> DefaultAllreduceSizes() {
  std::vector<size_t> s;
  for (size_t b = 4; b <= (size_t{256} << 20); b *= 4) s.push_back(b);
  return s;
}

std::vector<size_t> ParseAllreduceSizes(const std::string& text) {
  if (text.empty()) return DefaultAllreduceSizes();
  std::vector<size_t> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    std::string item =
        text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    uint64_t bytes = 0;
    if (!ParseByteSize(item, &bytes).ok() || bytes < 4 || bytes % 4 != 0) {
      throw Error(Code::kInvalidArgument, "bench allreduce: --sizes item '" + item +
                                              "' is not a byte count (a multiple of 4, like "
                                              "4096 or 16M)");
    }
    // Every rank holds the message and the transport's copies: beyond this the run would only
    // end in an allocation failure.
    if (bytes > kMaxAllreduceBytes) {
      throw Error(Code::kInvalidArgument, "bench allreduce: --sizes item '" + item + "' is " +
                                              std::to_string(bytes) +
                                              " bytes, more than the 4G (4294967296) allowed");
    }
    out.push_back(bytes);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

namespace {

int ItersFor(size_t bytes, int override_iters) {
  if (override_iters > 0) return override_iters;
  size_t iters = (size_t{128} << 20) / bytes;  // about 128 MiB reduced per size
  return static_cast<int>(std::clamp<size_t>(iters, 5, 2000));
}

// One rank's whole benchmark. Returns the process exit code.
int RunRank(int rank, const AllreduceBenchOptions& args, const std::vector<size_t>& sizes,
            uint16_t store_port, const std::string& token) {
  store::TcpStoreOptions so;
  so.port = store_port;
  so.token = token;
  so.identity = "bench rank " + std::to_string(rank);
  comm::CommunicatorOptions co = args.communicator;
  co.rank = rank;
  co.size = args.ranks;
  co.store = std::make_shared<store::TcpStore>(so);
  co.token = token;
  co.use_shm = args.transport == "shm";
  co.timeout = std::chrono::milliseconds(static_cast<int64_t>(args.timeout_s * 1000));
  auto comm = comm::Communicator::Create(co);

  size_t largest = *std::max_element(sizes.begin(), sizes.end());
  std::vector<float> buf(largest / 4, 1.0f);
  if (rank == 0 && !args.json) {
    std::printf("# cadre allreduce, %d ranks (processes), %s, float32 sum", args.ranks,
                args.transport.c_str());
    if (args.late_us > 0) std::printf(", the last rank %d us late per call", args.late_us);
    std::printf("; cpu_us: rank 0's CPU per call\n");
    std::printf("%12s %12s %12s %8s %10s\n", "bytes", "time_us", "busbw_gbps", "iters", "cpu_us");
  }
  for (size_t bytes : sizes) {
    comm::AllreduceOptions o;
    o.input = o.output = buf.data();
    o.count = bytes / 4;
    int iters = ItersFor(bytes, args.iters);
    for (int i = 0; i < std::max(2, iters / 10); ++i) comm::Allreduce(*comm, o);
    comm::Barrier(*comm);
    const bool late = args.late_us > 0 && rank == args.ranks - 1;
    const double cpu_start = ThreadCpuMicros();
    auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) {
      if (late) Work(args.late_us);
      comm::Allreduce(*comm, o);
    }
    double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
                    .count() /
                iters;
    const double cpu_us = (ThreadCpuMicros() - cpu_start) / iters;
    comm::AllreduceOptions mx;  // the slowest rank decides
    mx.input = mx.output = &us;
    mx.count = 1;
    mx.dtype = comm::DataType::kFloat64;
    mx.op = comm::ReduceOp::kMax;
    comm::Allreduce(*comm, mx);
    if (rank == 0) {
      double n = args.ranks;
      double busbw = double(bytes) / (us * 1e-6) * (n > 1 ? 2 * (n - 1) / n : 1) / 1e9;
      if (args.json) {
        std::printf(
            "{\"bytes\": %zu, \"time_us\": %.3f, \"busbw_gbps\": %.4f, \"ranks\": %d, "
            "\"iters\": %d, \"transport\": \"%s\", \"cpu_us\": %.3f, \"late_us\": %d}\n",
            bytes, us, busbw, args.ranks, iters, args.transport.c_str(), cpu_us, args.late_us);
      } else {
        std::printf("%12zu %12.2f %12.3f %8d %10.2f\n", bytes, us, busbw, iters, cpu_us);
      }
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace

int RunAllreduceBench(const AllreduceBenchOptions& args) {
  if (args.ranks < 1 || args.ranks > 256) {
    throw Error(Code::kInvalidArgument, "bench allreduce: -n must be between 1 and 256");
  }
  if (args.late_us < 0 || args.late_us > 1'000'000) {
    throw Error(Code::kInvalidArgument, "bench allreduce: --late-us must be 0 to 1000000");
  }
  if (args.iters < 0) {
    throw Error(Code::kInvalidArgument,
                "bench allreduce: --iters must be at least 1 (or 0: chosen by size), got " +
                    std::to_string(args.iters));
  }
  // A day at most: beyond that (or NaN) the deadline is not a number of milliseconds.
  if (!(args.timeout_s > 0 && args.timeout_s <= 86400)) {
    throw Error(Code::kInvalidArgument,
                "bench allreduce: --timeout must be above 0 and at most 86400 seconds, got " +
                    std::to_string(args.timeout_s));
  }
  if (args.transport != "shm" && args.transport != "tcp") {
    throw Error(Code::kInvalidArgument, "bench allreduce: --transport must be shm or tcp");
  }
  const std::vector<size_t> sizes = args.sizes.empty() ? DefaultAllreduceSizes() : args.sizes;
  for (size_t bytes : sizes) {
    if (bytes < 4 || bytes % 4 != 0) {
      throw Error(Code::kInvalidArgument, "bench allreduce: size " + std::to_string(bytes) +
                                              " is not a positive multiple of 4 bytes");
    }
  }
  std::string token = "bench-" + std::to_string(getpid());
  std::fflush(stdout);

  // The ranks are forked before the store server starts its thread: a child of a process with
  // other threads inherits whatever locks they held at that instant (OpenSSL's RNG lock, taken
  // by the server's handshakes, hung one run in four here). So the ranks wait for the server's
  // port on a pipe.
  int port_pipe[2];
  if (pipe(port_pipe) != 0) {
    throw Error(Code::kIo, std::string("pipe failed: ") + std::strerror(errno));
  }
  const std::vector<std::vector<int>>& cpus = args.cpus;
  if (!cpus.empty() && cpus.size() != static_cast<size_t>(args.ranks)) {
    throw Error(Code::kInvalidArgument, "bench allreduce: a CPU plan for " +
                                            std::to_string(cpus.size()) + " ranks, not " +
                                            std::to_string(args.ranks));
  }
  std::vector<pid_t> children;
  for (int rank = 0; rank < args.ranks; ++rank) {
    pid_t pid = fork();
    if (pid < 0) throw Error(Code::kIo, std::string("fork failed: ") + std::strerror(errno));
    if (pid == 0) {
      close(port_pipe[1]);
      if (!cpus.empty()) launch::BindToCpus(cpus[static_cast<size_t>(rank)]);
      uint16_t port = 0;  // one write per rank, each smaller than PIPE_BUF: read whole
      if (read(port_pipe[0], &port, sizeof(port)) != sizeof(port)) _exit(1);  // no server
      close(port_pipe[0]);
      int code = 1;
      try {
        code = RunRank(rank, args, sizes, port, token);
      } catch (const std::bad_alloc&) {
        std::fprintf(stderr,
                     "cadre bench allreduce: rank %d: out of memory for the buffers of a size in "
                     "--sizes: choose smaller sizes or fewer ranks\n",
                     rank);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "cadre bench allreduce: rank %d: %s\n", rank, e.what());
      }
      std::fflush(stdout);
      _exit(code);
    }
    children.push_back(pid);
  }
  close(port_pipe[0]);
  store::TcpStoreServerOptions server_options;
  server_options.token = token;
  store::TcpStoreServer server(server_options);  // on failure, the ranks read end of file
  const uint16_t port = server.port();
  for (int rank = 0; rank < args.ranks; ++rank) {
    if (write(port_pipe[1], &port, sizeof(port)) != sizeof(port)) break;
  }
  close(port_pipe[1]);
  // Wait for every rank; once one fails, the others fail within their timeout (or are killed
  // here when they outlive it).
  int failures = 0;
  auto give_up = std::chrono::steady_clock::now() +
                 std::chrono::milliseconds(static_cast<int64_t>(args.timeout_s * 1000)) * 4;
  size_t left = children.size();
  while (left > 0) {
    int status = 0;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      --left;
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failures;
      continue;
    }
    if (pid < 0 && errno != EINTR) break;
    if (std::chrono::steady_clock::now() > give_up) {
      for (pid_t c : children) kill(c, SIGKILL);  // reaped by the next waitpid calls
      give_up = std::chrono::steady_clock::time_point::max();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return failures == 0 ? 0 : 1;
}

}  // namespace cadre::bench
