#include "cadre/transport/shm/group.h"

#include <linux/futex.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <climits>
#include <cstring>
#include <thread>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CADRE_CPU_RELAX() _mm_pause()
#else
#define CADRE_CPU_RELAX() std::atomic_signal_fence(std::memory_order_seq_cst)
#endif

namespace cadre::transport::shm {
namespace {

constexpr uint32_t kMagic = 0x4d485343;  // "CSHM"
constexpr uint32_t kLayoutVersion = 4;
constexpr auto kSleepSlice = std::chrono::milliseconds(50);
// After spinning, a wait yields for up to kYieldFor; a yield that takes longer than kBusyCoreYield
// means another thread ran meanwhile, and the wait goes to sleep at once.
constexpr auto kYieldFor = std::chrono::microseconds(500);
constexpr auto kBusyCoreYield = std::chrono::microseconds(20);

struct alignas(64) Line {
  std::atomic<uint32_t> value{0};
};

long Futex(std::atomic<uint32_t>* word, int op, uint32_t val, const timespec* timeout) {
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, val, timeout, nullptr, 0);
}

// Wrap-safe "a has reached b" for step numbers.
bool Reached(uint32_t value, uint32_t step) { return static_cast<int32_t>(value - step) >= 0; }

constexpr int kCpuWords = CPU_SETSIZE / 64;

// The calling thread's CPUs as a bit mask; every CPU when the affinity cannot be read.
void ReadCpus(uint64_t (&words)[kCpuWords]) {
  cpu_set_t set;
  const bool known = sched_getaffinity(0, sizeof set, &set) == 0;
  for (int w = 0; w < kCpuWords; ++w) words[w] = 0;
  const int all = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (known ? CPU_ISSET(c, &set) : c < all) words[c / 64] |= uint64_t{1} << (c % 64);
  }
}

}  // namespace

struct ShmGroup::Header {
  SegmentStamp stamp;
  uint32_t size;
  uint32_t pad;
  uint64_t slot_bytes;
  Line attached;
  Line abort;     // 0, or code << 28 | (reporter + 1) << 14 | (culprit + 1): AbortWord
  Line sleepers;  // ranks inside a futex wait; publishers wake only when non-zero
  // The first aborting rank's own failure, as text for the ranks it wakes: claimed (0 -> 1, or
  // 2 when the reason is explained) by one rank, which writes `reason` (NUL-terminated) and then
  // sets reason_ready.
  Line reason_claim;
  Line reason_ready;
  char reason[kAbortReasonBytes];
};

struct ShmGroup::RankState {
  Line flags[kNumFlags];
  alignas(64) std::atomic<int32_t> pid{0};
  OpDescriptor desc[2];
  uint64_t cpus[kCpuWords] = {};  // the rank's CPU affinity at attach, written before `attached`
};

namespace {
size_t AlignUp(size_t v, size_t a) { return (v + a - 1) / a * a; }

// The abort word: who reported (a local rank), whom it blamed (-1: unknown) and why (the code of
// the reporter's failure), so the ranks it wakes can say what happened, not only that it did.
constexpr int kRankBits = 14;
constexpr uint32_t kRankMask = (uint32_t{1} << kRankBits) - 1;
uint32_t AbortWord(Code why, int reporter, int culprit) {
  return (static_cast<uint32_t>(why) & 0xf) << (2 * kRankBits) |
         static_cast<uint32_t>(reporter + 1) << kRankBits | static_cast<uint32_t>(culprit + 1);
}
int AbortReporter(uint32_t a) { return static_cast<int>((a >> kRankBits) & kRankMask) - 1; }
int AbortCulprit(uint32_t a) { return static_cast<int>(a & kRankMask) - 1; }
Code AbortCode(uint32_t a) { return static_cast<Code>(a >> (2 * kRankBits)); }
}  // namespace

ShmGroup::Header* ShmGroup::header() const { return static_cast<Header*>(segment_.data()); }

ShmGroup::RankState* ShmGroup::state(int rank) const {
  auto* base = static_cast<uint8_t*>(segment_.data()) + AlignUp(sizeof(Header), 64);
  return reinterpret_cast<RankState*>(base) + rank;
}

uint8_t* ShmGroup::slot(int rank, uint32_t step) const {
  auto* base = static_cast<uint8_t*>(segment_.data()) + slots_offset_;
  return base + (static_cast<size_t>(rank) * 2 + (step & 1)) * slot_bytes_;
}

Status ShmGroup::Create(store::Store& store, int rank, int size, std::vector<std::string> names,
                        const ShmOptions& options, Deadline deadline,
                        std::unique_ptr<ShmGroup>* out) {
  if (size < 1 || size > kMaxRanks || rank < 0 || rank >= size) {
    return InvalidArgument("shared memory group: rank " + std::to_string(rank) + " of " +
                           std::to_string(size) + " (at most " + std::to_string(kMaxRanks) +
                           " ranks share memory on one host)");
  }
  std::unique_ptr<ShmGroup> g(new ShmGroup());
  g->rank_ = rank;
  g->size_ = size;
  g->slot_bytes_ = AlignUp(options.slot_bytes, 4096);
  g->names_ = std::move(names);
  g->pidfds_.assign(size, -1);
  // Spinning waits only once every rank's CPUs are known (RanksHaveCpus).
  g->spin_limit_ns_ =
      std::chrono::duration_cast<std::chrono::nanoseconds>(options.spin_max).count();
  g->slots_offset_ =
      AlignUp(AlignUp(sizeof(Header), 64) + sizeof(RankState) * static_cast<size_t>(size), 4096);
  SegmentRendezvous r;
  r.key = "shm-segment";
  r.creator = g->names_[0];
  r.bytes = g->slots_offset_ + static_cast<size_t>(size) * 2 * g->slot_bytes_;
  r.stamp = {kMagic, kLayoutVersion};
  r.init = [&] {
    Header* h = g->header();
    h->size = static_cast<uint32_t>(size);
    h->slot_bytes = g->slot_bytes_;
    for (int i = 0; i < size; ++i) new (g->state(i)) RankState();
  };
  r.matches = [&] {
    const Header* h = g->header();
    return h->size == uint32_t(size) && h->slot_bytes == g->slot_bytes_;
  };
  CADRE_RETURN_IF_ERROR(RendezvousSegment(store, r, rank == 0, deadline, &g->segment_));
  ReadCpus(g->state(rank)->cpus);  // published by the release of `attached` below
  g->state(rank)->pid.store(static_cast<int32_t>(getpid()), std::memory_order_release);
  g->header()->attached.value.fetch_add(1, std::memory_order_acq_rel);
  if (rank == 0) {
    // Unlink once everyone mapped it, so a killed job leaves nothing in /dev/shm.
    while (g->header()->attached.value.load(std::memory_order_acquire) < uint32_t(size)) {
      if (deadline.expired()) return g->AttachTimeout();
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    g->segment_.Unlink();
  }
  *out = std::move(g);
  return Status::Ok();
}

ShmGroup::~ShmGroup() {
  for (int fd : pidfds_) {
    if (fd >= 0) close(fd);
  }
}

void ShmGroup::SetDescriptor(uint32_t step, const OpDescriptor& d) {
  state(rank_)->desc[step & 1] = d;
}

OpDescriptor ShmGroup::descriptor(int rank, uint32_t step) const {
  return state(rank)->desc[step & 1];
}

void ShmGroup::Publish(Flag flag, uint32_t step) {
  auto& word = state(rank_)->flags[flag].value;
  word.store(step, std::memory_order_seq_cst);
  if (header()->sleepers.value.load(std::memory_order_seq_cst) != 0) {
    Futex(&word, FUTEX_WAKE, INT_MAX, nullptr);
  }
}

Status ShmGroup::AbortedStatus() const {
  const uint32_t a = header()->abort.value.load(std::memory_order_acquire);
  const int reporter = AbortReporter(a);
  const int culprit = AbortCulprit(a);
  const std::string who = culprit >= 0 && culprit < size_ ? names_[culprit] : "a peer";
  const std::string by = reporter >= 0 && reporter < size_ ? names_[reporter] : "a peer";
  std::string what;
  switch (AbortCode(a)) {
    case Code::kTimeout:
      what = by + " timed out waiting for " + who +
             " (stalled: stopped, stuck outside the collective, or out of step)";
      break;
    case Code::kMismatch:
      what = by + " found that " + who + " called another collective";
      break;
    case Code::kIo:
      what = by + " lost " + who;
      break;
    default:
      what =
          by + " reported a failure of " + who + " (" + std::string(CodeName(AbortCode(a))) + ")";
  }
  std::string reason;
  if (header()->reason_ready.value.load(std::memory_order_acquire) != 0) {
    reason = header()->reason;  // written before reason_ready, never again
  }
  return AbortedError("the shared-memory group failed: " + what +
                      (reason.empty() ? "" : " (" + reason + ")"));
}

void ShmGroup::Abort(int culprit, Code why, const std::string& reason, bool explained) {
  Header* h = header();
  uint32_t unclaimed = 0;
  if (!reason.empty() &&
      h->reason_claim.value.compare_exchange_strong(unclaimed, explained ? 2 : 1)) {
    const size_t n = std::min(reason.size(), sizeof h->reason - 1);
    std::memcpy(h->reason, reason.data(), n);
    h->reason[n] = '\0';
    h->reason_ready.value.store(1, std::memory_order_release);
  }
  const uint32_t value = AbortWord(why, rank_, culprit);
  uint32_t expected = 0;
  header()->abort.value.compare_exchange_strong(expected, value);
  for (int r = 0; r < size_; ++r) {
    for (auto& line : state(r)->flags) Futex(&line.value, FUTEX_WAKE, INT_MAX, nullptr);
  }
}

bool ShmGroup::abort_explained() const {
  return header()->reason_ready.value.load(std::memory_order_acquire) != 0 &&
         header()->reason_claim.value.load(std::memory_order_relaxed) == 2;
}

bool ShmGroup::Exited(int peer, int* pid) {
  *pid = state(peer)->pid.load(std::memory_order_acquire);
  if (*pid == 0 || *pid == getpid()) return false;  // threads as ranks: no process to watch
  if (pidfds_[peer] < 0) {
    int fd = static_cast<int>(syscall(SYS_pidfd_open, *pid, 0));
    if (fd >= 0) {
      pidfds_[peer] = fd;
    } else if (errno == ESRCH || (kill(*pid, 0) != 0 && errno == ESRCH)) {
      return true;
    }
  }
  if (pidfds_[peer] >= 0) {
    pollfd p{pidfds_[peer], POLLIN, 0};
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLIN | POLLHUP | POLLERR)) != 0;
  }
  return false;
}

Status ShmGroup::PeerFailure(int peer) {
  int pid = 0;
  const uint32_t a = header()->abort.value.load(std::memory_order_acquire);
  if (a != 0) {
    // Another rank stopped the group. When it blamed a rank whose process is gone, say so: that
    // death is the cause, whoever saw it first.
    const int culprit = AbortCulprit(a);
    const int reporter = AbortReporter(a);
    if (culprit >= 0 && culprit < size_ && culprit != rank_ && Exited(culprit, &pid)) {
      return IoError(
          names_[culprit] + " (pid " + std::to_string(pid) + ") died during a collective" +
          (reporter >= 0 && reporter < size_ ? " (seen first by " + names_[reporter] + ")"
                                             : std::string()));
    }
    return AbortedStatus();
  }
  if (Exited(peer, &pid)) {
    return IoError(names_[peer] + " (pid " + std::to_string(pid) + ") died during a collective");
  }
  return Status::Ok();
}

bool ShmGroup::RanksHaveCpus() {
  if (cpus_decided_) return own_cpus_;
  if (header()->attached.value.load(std::memory_order_acquire) < uint32_t(size_)) return false;
  // Spinning only pays when every rank can hold a CPU; with more ranks than the CPUs they may use
  // it steals the CPU from the rank being waited for. Ranks pinned to one CPU each (as `cadre run`
  // binds slots) can each hold theirs, so they spin: a wait that ends within the budget then costs
  // no system call (a yield each turn took 0.2-0.3 us more per 4-byte allreduce, which put it
  // below half Open MPI's speed), and the adaptive budget keeps a wait for a late peer (another
  // thread of the rank may need its CPU) to about a microsecond of spinning before the yields.
  int cpus = 0;
  for (int w = 0; w < kCpuWords; ++w) {
    uint64_t any = 0;
    for (int r = 0; r < size_; ++r) any |= state(r)->cpus[w];
    cpus += std::popcount(any);
  }
  own_cpus_ = size_ <= cpus;
  spin_max_ns_ = own_cpus_ ? spin_limit_ns_ : 0;
  spin_ns_ = std::min<int64_t>(spin_max_ns_, 5000);
  cpus_decided_ = true;
  return own_cpus_;
}

Status ShmGroup::AttachTimeout() const {
  std::string missing;
  for (int r = 0; r < size_; ++r) {
    if (state(r)->pid.load() == 0) missing += (missing.empty() ? "" : ", ") + names_[r];
  }
  return TimeoutError("shared memory rendezvous: " + missing + " did not attach in time");
}

Status ShmGroup::RanksHaveOwnCpus(Deadline deadline, bool* out) {
  for (;;) {
    const bool own = RanksHaveCpus();
    if (cpus_decided_) {
      *out = own;
      return Status::Ok();
    }
    if (deadline.expired()) return AttachTimeout();
    if (header()->abort.value.load(std::memory_order_acquire) != 0) return AbortedStatus();
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

Status ShmGroup::WaitOne(int peer, Flag flag, uint32_t step, Deadline deadline) {
  auto& word = state(peer)->flags[flag].value;
  if (Reached(word.load(std::memory_order_acquire), step)) return Status::Ok();
  // Spin only when every rank has its own core, and adaptively: the budget doubles (up to
  // ShmOptions::spin_max) while spins succeed, and halves when the peer was not running (other
  // programs compete for the cores), so an idle machine gets microsecond latency and a loaded
  // one does not burn the time slice its peer needs. Then yield, which hands the core to the rank
  // we wait for; only then sleep.
  if (RanksHaveCpus() && spin_max_ns_ > 0) {
    auto start = Clock::now();
    auto until = start + std::chrono::nanoseconds(spin_ns_);
    for (int i = 0;; ++i) {
      CADRE_CPU_RELAX();
      if (Reached(word.load(std::memory_order_acquire), step)) {
        spin_ns_ = std::min(spin_max_ns_, spin_ns_ * 2 + 1000);
        return Status::Ok();
      }
      if ((i & 15) == 15 && Clock::now() > until) break;
    }
    spin_ns_ = std::max<int64_t>(1000, spin_ns_ / 2);
  }
  // Yield while yielding is cheap. A yield that comes back late handed the core to a thread that
  // wants it (this rank's own training thread, another program): polling on would take turns
  // with that thread, and each turn can cost a scheduler tick of latency, so sleep instead.
  const auto until = Clock::now() + kYieldFor;
  for (auto now = Clock::now(); now < until;) {
    sched_yield();
    if (Reached(word.load(std::memory_order_acquire), step)) return Status::Ok();
    const auto before = now;
    now = Clock::now();
    if (now - before > kBusyCoreYield) break;
  }
  auto& sleepers = header()->sleepers.value;
  while (true) {
    if (Status s = PeerFailure(peer); !s.ok()) return s;
    if (deadline.expired()) {
      return TimeoutError(names_[peer] + " did not reach step " + std::to_string(step) +
                          " of the collective in time (it is stalled or out of step)");
    }
    auto slice = std::min<Duration>(deadline.remaining(), kSleepSlice);
    timespec ts{static_cast<time_t>(slice.count() / 1000),
                static_cast<long>((slice.count() % 1000) * 1000000)};
    sleepers.fetch_add(1, std::memory_order_seq_cst);
    uint32_t v = word.load(std::memory_order_seq_cst);
    if (!Reached(v, step) && header()->abort.value.load() == 0) Futex(&word, FUTEX_WAIT, v, &ts);
    sleepers.fetch_sub(1, std::memory_order_seq_cst);
    if (Reached(word.load(std::memory_order_acquire), step)) return Status::Ok();
  }
}

Status ShmGroup::WaitAll(Flag flag, uint32_t step, Deadline deadline) {
  for (int i = 1; i < size_; ++i) {
    int peer = (rank_ + i) % size_;
    CADRE_RETURN_IF_ERROR(WaitOne(peer, flag, step, deadline));
  }
  return Status::Ok();
}

}  // namespace cadre::transport::shm
