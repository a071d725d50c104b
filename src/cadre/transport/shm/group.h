// ShmGroup: the ranks of one host sharing one memory segment, with per-rank step flags.
//
// Layout: a header, one cache-line-aligned RankState per rank (step flags, pid, the descriptor of
// the collective it is in), then per rank a slot of two halves of slot_bytes() each. Collectives
// (comm/shm_collectives.cc) run in *steps*: in step s a rank writes into half (s & 1) of its own
// slot, Publish(kArrived, s), WaitAll(kArrived, s), then reads its peers' halves. Because a rank
// can only reach step s+1 after every peer arrived at step s, and peers only write half (s & 1)
// again at step s+2, two halves make reuse safe without an extra "done" flag.
//
// Waiting: spin briefly (only when the ranks together may run on at least as many CPUs as there
// are ranks: the union of their affinity masks, each published in its RankState, so ranks pinned
// one CPU each, as `cadre run` binds them, spin, and ranks sharing too few CPUs do not; an
// adaptive budget up to ShmOptions::spin_max, default 50 us), then yield for up to 500 us (cut
// short as soon as one yield comes back late: another thread wanted the core), then sleep on a
// futex on the peer's flag word, waking every 50 ms to check that the peer process is
// alive (pidfd) and that no rank aborted the group. Nothing waits past the Deadline.
// Failures name the peer with the name given at creation ("rank 3").
//
// Thread-safety: one thread per rank uses its ShmGroup object; distinct objects (threads or
// processes) share the segment.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cadre/base/deadline.h"
#include "cadre/base/status.h"
#include "cadre/store/store.h"
#include "cadre/transport/shm/segment.h"

namespace cadre::transport::shm {

// What a rank is doing in its current collective, compared across ranks to catch mismatches.
// The longest reason an abort carries (ShmGroup::Abort), its terminating NUL included.
inline constexpr size_t kAbortReasonBytes = 1024;

struct OpDescriptor {
  uint32_t kind = 0;
  uint32_t detail = 0;  // dtype, op, root: packed by the caller
  uint64_t count = 0;
  bool operator==(const OpDescriptor&) const = default;
};

// A group's tunables. Every rank of a group must pass the same slot_bytes.
struct ShmOptions {
  // Bytes of each half of a rank's slot: the largest piece one step moves (rounded up to pages).
  size_t slot_bytes = size_t{1} << 20;
  // The longest busy-wait of one wait before it yields (CADRE_SHM_SPIN_US at the edges); spinning
  // happens only when the ranks do not outnumber the CPUs they may run on together.
  std::chrono::microseconds spin_max{50};
};

class ShmGroup {
 public:
  enum Flag { kArrived = 0, kReduced = 1, kNumFlags = 2 };
  // Most ranks one group holds (the abort word names ranks in 14 bits).
  static constexpr int kMaxRanks = (1 << 14) - 2;

  // Collective over the `size` ranks of one host. Local rank 0 creates the segment and publishes
  // its name under "shm-segment" in `store` (already prefixed per communicator); the others map
  // it. `names[r]` describes rank r in error messages.
  static Status Create(store::Store& store, int rank, int size, std::vector<std::string> names,
                       const ShmOptions& options, Deadline deadline,
                       std::unique_ptr<ShmGroup>* out);
  ~ShmGroup();

  int rank() const { return rank_; }
  int size() const { return size_; }
  size_t slot_bytes() const { return slot_bytes_; }

  // Starts the next step; returns its number (shared by every rank, since all run the same steps).
  uint32_t NextStep() { return ++step_; }
  // Half (step & 1) of `rank`'s slot.
  uint8_t* slot(int rank, uint32_t step) const;

  // The descriptor of the collective that starts at `step` (kept per half, like the data: a
  // peer may already describe its next collective while this rank still reads this one).
  void SetDescriptor(uint32_t step, const OpDescriptor& d);
  OpDescriptor descriptor(int rank, uint32_t step) const;

  void Publish(Flag flag, uint32_t step);
  Status WaitOne(int peer, Flag flag, uint32_t step, Deadline deadline);
  Status WaitAll(Flag flag, uint32_t step, Deadline deadline);

  // Marks the group failed because of `culprit` (a local rank, or -1 when unknown) and wakes every
  // waiter: they return kAborted naming the culprit and saying what `why` (the code of this
  // rank's failure) means of it (timed out waiting for it: stalled) instead of waiting for their
  // timeout. The first abort's reason stays; later ones only wake the waiters. `reason`: the
  // aborting rank's failure in words (cut at kAbortReasonBytes), added to what the waiters say
  // by the first rank that gives one; `explained`: the reason names its cause (see
  // Device::failure_explained).
  void Abort(int culprit, Code why, const std::string& reason = {}, bool explained = false);
  // Whether the group was aborted with a reason given as explained.
  bool abort_explained() const;

  const std::string& name(int rank) const { return names_[rank]; }

  // Whether every rank can run on a CPU of its own: the union of the ranks' CPUs (their
  // affinity when they attached) holds one per rank. The same answer on every rank; waits until
  // every rank attached (kTimeout naming those missing, kAborted once the group is).
  Status RanksHaveOwnCpus(Deadline deadline, bool* out);

 private:
  struct Header;
  struct RankState;

  ShmGroup() = default;
  Header* header() const;
  RankState* state(int rank) const;
  Status PeerFailure(int peer);     // non-ok if the peer died or the group was aborted
  bool Exited(int peer, int* pid);  // the peer's process has exited (*pid: its pid)
  Status AbortedStatus() const;
  Status AttachTimeout() const;  // kTimeout naming every rank that has not attached
  // Once every rank attached: whether the union of the ranks' CPUs holds a CPU per rank; until
  // then false (no spinning), and decided once.
  bool RanksHaveCpus();

  SharedSegment segment_;
  int rank_ = 0;
  int size_ = 1;
  size_t slot_bytes_ = 0;
  size_t slots_offset_ = 0;
  uint32_t step_ = 0;
  int64_t spin_limit_ns_ = 0;  // ShmOptions::spin_max
  int64_t spin_max_ns_ = 0;    // busy-wait cap per wait; 0 when ranks outnumber their CPUs
  int64_t spin_ns_ = 0;        // current adaptive busy-wait budget
  bool own_cpus_ = false;      // RanksHaveCpus' answer, once cpus_decided_
  bool cpus_decided_ = false;  // own_cpus_ and spin_max_ns_ are final (every rank attached)
  std::vector<std::string> names_;
  std::vector<int> pidfds_;  // per peer, -1 until opened
};

}  // namespace cadre::transport::shm
