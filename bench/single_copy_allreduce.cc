// Would a single-copy allreduce beat the shared-memory path on this machine? (issue 18)
//
// Forks N ranks (rank r pinned to CPU r modulo the CPUs) that run, interleaved
// round after round, in-place float32 sum allreduces in three ways:
// - bounce: what comm/shm_collectives.cc does above 32 KiB. Per chunk of a shared slot (1 MiB),
//   each rank copies its input into its slot, reduces a 1/N slice from every slot, and copies
//   every reduced slice out (two synchronisations per chunk).
// - process_vm_readv (Linux cross-memory attach), on private buffers as users hand them over:
//   each rank reads its 1/N slice of every peer's buffer, straight from the peer's memory, through
//   a 256 KiB scratch and reduces it into its own buffer; then it reads every peer's reduced slice
//   straight into its own buffer (three synchronisations per call, none per chunk).
// - shared mapping: the same single-copy algorithm with plain loads, because every rank's buffer
//   lies in one shared mapping (what buffers registered with the communicator would allow).
// All reduce with comm::ReduceMany in the same order; results are checked.
// It also prints what process_vm_readv costs per 4 KiB page beyond a memcpy of the same bytes.
//
//   single_copy_allreduce [-n 2] [--sizes 16M,64M,256M] [--rounds 3] [--iters 10] [--hugepages]
//
// Sizes in the units of `cadre bench allreduce` (base/byte_size.h), multiples of 4.
// --hugepages asks for transparent huge pages on the private buffers (madvise), which makes the
// kernel's per-page work of process_vm_readv per 2 MiB instead of per 4 KiB.
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "cadre/base/byte_size.h"
#include "cadre/comm/reduce.h"

namespace {

using cadre::comm::DataType;
using cadre::comm::ReduceMany;
using cadre::comm::ReduceOp;
using Clock = std::chrono::steady_clock;

constexpr size_t kSlotBytes = size_t{1} << 20;
constexpr size_t kScratchBytes = size_t{256} << 10;
constexpr int kMaxRanks = 16;
constexpr int kSchemes = 3;  // bounce, process_vm_readv, shared mapping

struct alignas(64) Flag {
  std::atomic<uint32_t> value{0};
};

struct RankState {
  Flag arrived, reduced;
  alignas(64) std::atomic<uint64_t> buffer{0};
  std::atomic<int32_t> pid{0};
};

// The mapping every rank shares (made before the fork): flags, then two slot halves per rank.
struct Shared {
  int n = 2;
  RankState* states = nullptr;
  uint8_t* slots = nullptr;
  uint8_t* slot(int r, uint32_t step) const {
    return slots + (static_cast<size_t>(r) * 2 + (step & 1)) * kSlotBytes;
  }
};

void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

bool Reached(uint32_t v, uint32_t step) { return static_cast<int32_t>(v - step) >= 0; }

void Publish(Flag& f, uint32_t step) { f.value.store(step, std::memory_order_seq_cst); }

void WaitAll(const Shared& s, Flag RankState::*flag, uint32_t step) {
  for (int r = 0; r < s.n; ++r) {
    for (int i = 0; !Reached((s.states[r].*flag).value.load(std::memory_order_acquire), step);) {
      if (++i > 2000) sched_yield();  // the peer may not be running: hand it the core
      CpuRelax();
    }
  }
}

size_t SliceStart(size_t count, int r, int n) {
  return r == n ? count : (count * static_cast<size_t>(r) / static_cast<size_t>(n)) & ~size_t{63};
}

class Rank {
 public:
  Rank(const Shared& s, int me) : s_(s), me_(me), scratch_(kScratchBytes * kMaxRanks) {}

  void Bounce(float* buf, size_t count) {
    const int n = s_.n;
    const size_t chunk = kSlotBytes / 4;
    std::vector<const void*> srcs(n);
    for (size_t base = 0; base < count; base += chunk) {
      const size_t cc = std::min(chunk, count - base);
      auto lo = [&](int r) { return SliceStart(cc, r, n); };
      auto* in = reinterpret_cast<uint8_t*>(buf + base);
      const uint32_t step = ++step_;
      uint8_t* mine = s_.slot(me_, step);
      if (lo(me_) > 0) std::memcpy(mine, in, lo(me_) * 4);
      if (lo(me_ + 1) < cc) {
        std::memcpy(mine + lo(me_ + 1) * 4, in + lo(me_ + 1) * 4, (cc - lo(me_ + 1)) * 4);
      }
      Publish(s_.states[me_].arrived, step);
      WaitAll(s_, &RankState::arrived, step);
      const size_t off = lo(me_) * 4;
      srcs[0] = in + off;
      for (int i = 1, r = 0; r < n; ++r) {
        if (r != me_) srcs[i++] = s_.slot(r, step) + off;
      }
      ReduceMany(mine + off, srcs.data(), n, lo(me_ + 1) - lo(me_), DataType::kFloat32,
                 ReduceOp::kSum);
      Publish(s_.states[me_].reduced, step);
      WaitAll(s_, &RankState::reduced, step);
      for (int i = 0; i < n; ++i) {
        const int r = (me_ + i) % n;
        std::memcpy(in + lo(r) * 4, s_.slot(r, step) + lo(r) * 4, (lo(r + 1) - lo(r)) * 4);
      }
    }
  }

  // As SingleCopy, but every rank's buffer lies in one shared mapping, so peers read it with plain
  // loads: what registered shared buffers (the engine's fusion buffer, say) would allow.
  void InSharedMemory(float* buf, size_t count) {
    const int n = s_.n;
    uint32_t step = ++step_;
    s_.states[me_].buffer.store(reinterpret_cast<uint64_t>(buf), std::memory_order_relaxed);
    Publish(s_.states[me_].arrived, step);
    WaitAll(s_, &RankState::arrived, step);
    auto lo = [&](int r) { return SliceStart(count, r, n); };
    auto peer = [&](int r) { return reinterpret_cast<float*>(s_.states[r].buffer.load()); };
    std::vector<const void*> srcs(n);
    srcs[0] = buf + lo(me_);
    for (int i = 1, r = 0; r < n; ++r) {
      if (r != me_) srcs[i++] = peer(r) + lo(me_);
    }
    ReduceMany(buf + lo(me_), srcs.data(), n, lo(me_ + 1) - lo(me_), DataType::kFloat32,
               ReduceOp::kSum);
    Publish(s_.states[me_].reduced, step);
    WaitAll(s_, &RankState::reduced, step);
    for (int i = 1; i < n; ++i) {
      const int r = (me_ + i) % n;
      std::memcpy(buf + lo(r), peer(r) + lo(r), (lo(r + 1) - lo(r)) * 4);
    }
    step = ++step_;
    Publish(s_.states[me_].arrived, step);
    WaitAll(s_, &RankState::arrived, step);
  }

  void SingleCopy(float* buf, size_t count) {
    const int n = s_.n;
    uint32_t step = ++step_;
    s_.states[me_].buffer.store(reinterpret_cast<uint64_t>(buf), std::memory_order_relaxed);
    Publish(s_.states[me_].arrived, step);
    WaitAll(s_, &RankState::arrived, step);
    auto lo = [&](int r) { return SliceStart(count, r, n); };
    // Reduce-scatter: our slice of every peer's buffer, a scratch-full at a time.
    const size_t block = kScratchBytes / 4;
    std::vector<const void*> srcs(n);
    for (size_t at = lo(me_); at < lo(me_ + 1); at += block) {
      const size_t len = std::min(block, lo(me_ + 1) - at);
      srcs[0] = buf + at;
      for (int i = 1, r = 0; r < n; ++r) {
        if (r == me_) continue;
        float* scratch = reinterpret_cast<float*>(scratch_.data()) + (i - 1) * block;
        Read(r, scratch, at * 4, len * 4);
        srcs[i++] = scratch;
      }
      ReduceMany(buf + at, srcs.data(), n, len, DataType::kFloat32, ReduceOp::kSum);
    }
    Publish(s_.states[me_].reduced, step);
    WaitAll(s_, &RankState::reduced, step);
    // Allgather: every peer's reduced slice straight into our buffer.
    for (int i = 1; i < n; ++i) {
      const int r = (me_ + i) % n;
      Read(r, buf + lo(r), lo(r) * 4, (lo(r + 1) - lo(r)) * 4);
    }
    // Nobody returns (and lets its caller write the buffer) while a peer still reads it.
    step = ++step_;
    Publish(s_.states[me_].arrived, step);
    WaitAll(s_, &RankState::arrived, step);
  }

 private:
  void Read(int peer, void* local, size_t offset, size_t bytes) {
    const RankState& p = s_.states[peer];
    auto* remote = reinterpret_cast<uint8_t*>(p.buffer.load(std::memory_order_relaxed)) + offset;
    auto* dst = static_cast<uint8_t*>(local);
    while (bytes > 0) {
      iovec l{dst, bytes}, r{remote, bytes};
      ssize_t got = process_vm_readv(p.pid.load(), &l, 1, &r, 1, 0);
      if (got <= 0) {
        std::perror("process_vm_readv");
        std::_Exit(3);
      }
      dst += got;
      remote += got;
      bytes -= static_cast<size_t>(got);
    }
  }

  const Shared& s_;
  const int me_;
  uint32_t step_ = 0;
  std::vector<uint8_t> scratch_;
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// What process_vm_readv costs per page beyond memcpy, both from a cache-resident 256 KiB source.
void PerPageCost(bool huge) {
  const size_t bytes = kScratchBytes;
  void* src = std::aligned_alloc(size_t{2} << 20, size_t{2} << 20);
  if (huge) madvise(src, size_t{2} << 20, MADV_HUGEPAGE);
  std::memset(src, 1, size_t{2} << 20);
  std::vector<uint8_t> dst(bytes);
  const int reps = 2000;
  auto t0 = Clock::now();
  for (int i = 0; i < reps; ++i) {
    iovec l{dst.data(), bytes}, r{src, bytes};
    if (process_vm_readv(getpid(), &l, 1, &r, 1, 0) != static_cast<ssize_t>(bytes)) {
      std::perror("process_vm_readv");
      std::exit(3);
    }
  }
  auto t1 = Clock::now();
  for (int i = 0; i < reps; ++i) {
    std::memcpy(dst.data(), src, bytes);
    asm volatile("" : : "r"(dst.data()) : "memory");
  }
  auto t2 = Clock::now();
  const double pages = double(bytes) / 4096 * reps;
  const double cma = std::chrono::duration<double, std::nano>(t1 - t0).count();
  const double cpy = std::chrono::duration<double, std::nano>(t2 - t1).count();
  std::printf(
      "process_vm_readv, 256 KiB from cache: %.1f GB/s; memcpy %.1f GB/s; %.0f ns per 4 KiB "
      "page beyond memcpy\n",
      bytes * reps / cma, bytes * reps / cpy, (cma - cpy) / pages);
  std::free(src);
}

}  // namespace

int main(int argc, char** argv) {
  int n = 2, rounds = 3, iters = 10;
  bool huge = false;
  std::vector<size_t> sizes = {size_t{16} << 20, size_t{64} << 20, size_t{256} << 20};
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "-n") {
      n = std::stoi(next());
    } else if (a == "--rounds") {
      rounds = std::stoi(next());
    } else if (a == "--iters") {
      iters = std::stoi(next());
    } else if (a == "--hugepages") {
      huge = true;
    } else if (a == "--sizes") {
      sizes.clear();
      const std::string list = next();
      for (size_t at = 0; at <= list.size();) {
        const size_t comma = std::min(list.find(',', at), list.size());
        const std::string item = list.substr(at, comma - at);
        uint64_t bytes = 0;
        if (!cadre::ParseByteSize(item, &bytes).ok() || bytes < 4 || bytes % 4 != 0) {
          std::fprintf(stderr,
                       "single_copy_allreduce: --sizes: '%s' is not a byte count, a multiple of 4 "
                       "(4096, 16M)\n",
                       item.c_str());
          return 2;
        }
        sizes.push_back(bytes);
        at = comma + 1;
      }
    } else {
      std::fprintf(stderr,
                   "usage: %s [-n RANKS] [--sizes 16M,64M] [--rounds R] [--iters I] "
                   "[--hugepages]\n",
                   argv[0]);
      return 2;
    }
  }
  if (n < 2 || n > kMaxRanks || rounds < 1 || iters < 1 || rounds > 100 || sizes.size() > 20) {
    std::fprintf(stderr, "need 2 <= RANKS <= %d, 1 <= ROUNDS <= 100, ITERS >= 1, <= 20 sizes\n",
                 kMaxRanks);
    return 2;
  }
  PerPageCost(false);
  PerPageCost(true);

  const size_t states_bytes = (sizeof(RankState) * kMaxRanks + 4095) / 4096 * 4096;
  void* mem = mmap(nullptr, states_bytes + size_t(n) * 2 * kSlotBytes, PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) {
    std::perror("mmap");
    return 1;
  }
  Shared s;
  s.n = n;
  s.states = static_cast<RankState*>(mem);
  for (int r = 0; r < n; ++r) new (&s.states[r]) RankState();
  s.slots = static_cast<uint8_t*>(mem) + states_bytes;
  // Every rank's buffer for the shared-mapping scheme, mapped before the fork so the addresses
  // are the same in every rank.
  const size_t largest = *std::max_element(sizes.begin(), sizes.end());
  const size_t per_rank = (largest + (size_t{2} << 20)) / 4096 * 4096;
  auto* shared_buffers = static_cast<uint8_t*>(mmap(
      nullptr, per_rank * size_t(n), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  if (shared_buffers == MAP_FAILED) {
    std::perror("mmap");
    return 1;
  }
  // results[size][round][scheme] of rank 0, written by rank 0 into a shared table.
  void* table_mem =
      mmap(nullptr, 4096 * 16, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (table_mem == MAP_FAILED) {
    std::perror("mmap");
    return 1;
  }
  auto* table = static_cast<double*>(table_mem);
  std::printf("%d ranks, in-place float32 sum, %d rounds x %d calls per scheme, hugepages %s\n", n,
              rounds, iters, huge ? "asked" : "no");
  std::fflush(stdout);

  std::vector<pid_t> kids;
  for (int me = 0; me < n; ++me) {
    pid_t pid = fork();
    if (pid != 0) {
      kids.push_back(pid);
      continue;
    }
    const int cpus = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(me % std::max(1, cpus), &set);
    sched_setaffinity(0, sizeof set, &set);
    s.states[me].pid.store(getpid());
    Rank rank(s, me);
    int code = 0;
    for (size_t si = 0; si < sizes.size(); ++si) {
      const size_t count = sizes[si] / 4;
      float* buf = static_cast<float*>(std::aligned_alloc(size_t{2} << 20, count * 4 + (2 << 20)));
      if (huge) madvise(buf, count * 4, MADV_HUGEPAGE);
      for (int round = 0; round < rounds; ++round) {
        for (int scheme = 0; scheme < kSchemes; ++scheme) {
          float* b =
              scheme == 2 ? reinterpret_cast<float*>(shared_buffers + per_rank * size_t(me)) : buf;
          for (size_t i = 0; i < count; ++i) b[i] = float((i + size_t(me)) % 7);
          auto run = [&] {
            if (scheme == 0) {
              rank.Bounce(b, count);
            } else if (scheme == 1) {
              rank.SingleCopy(b, count);
            } else {
              rank.InSharedMemory(b, count);
            }
          };
          run();  // warm-up, checked
          for (size_t i = 0; i < count; i += 4099) {
            float want = 0;
            for (int r = 0; r < n; ++r) want += float((i + size_t(r)) % 7);
            if (b[i] != want) code = 4;
          }
          std::vector<double> ms;
          for (int k = 0; k < iters; ++k) {
            auto t0 = Clock::now();
            run();
            ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
          }
          if (me == 0) table[(si * rounds + round) * kSchemes + scheme] = Median(ms);
        }
      }
      std::free(buf);
    }
    std::fflush(stdout);
    std::_Exit(code);
  }
  // A rank that fails leaves its peers waiting for it: stop them.
  int failed = 0;
  std::vector<pid_t> running = kids;
  while (!running.empty()) {
    int status = 0;
    const pid_t done = wait(&status);
    if (done < 0) break;
    running.erase(std::remove(running.begin(), running.end(), done), running.end());
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      if (!failed) {
        for (pid_t k : running) kill(k, SIGKILL);
      }
      failed = 1;
    }
  }
  if (failed) {
    std::fprintf(stderr, "a rank failed (wrong result or process_vm_readv refused)\n");
    return 1;
  }
  std::printf("%11s %28s %28s %28s\n", "bytes", "bounce ms: median (rounds)", "process_vm_readv ms",
              "shared mapping ms");
  for (size_t si = 0; si < sizes.size(); ++si) {
    std::string cell[kSchemes];
    std::vector<double> med[kSchemes];
    for (int scheme = 0; scheme < kSchemes; ++scheme) {
      std::string rs;
      for (int round = 0; round < rounds; ++round) {
        double v = table[(si * rounds + round) * kSchemes + scheme];
        med[scheme].push_back(v);
        char b[32];
        std::snprintf(b, sizeof b, "%s%.2f", round ? ", " : "", v);
        rs += b;
      }
      char b[96];
      std::snprintf(b, sizeof b, "%.2f (%s)", Median(med[scheme]), rs.c_str());
      cell[scheme] = b;
    }
    std::printf("%11zu %28s %28s %28s\n", sizes[si], cell[0].c_str(), cell[1].c_str(),
                cell[2].c_str());
  }
  return 0;
}
