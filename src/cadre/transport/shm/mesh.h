// ShmMesh: the shared memory through which the ranks of one host send each other point-to-point
// messages (ShmPair), when a group spans several hosts (transport/mixed/device.h).
//
// Layout: a header, one cache-line-aligned RankState per rank of the host (its pid, whether it is
// asleep, whether it has closed), then a Channel per ordered pair of those ranks. The host's
// lowest rank creates the segment (shm/segment.h) and publishes its name under
// "shm-mesh/<that rank>" in the store; the others map it, and once all have, the name is
// unlinked, so nothing stays in /dev/shm.
//
// Waking: a rank with nothing to do sleeps in poll(2), next to its TCP sockets, on its *doorbell*:
// a datagram socket in the abstract namespace named after the segment and the rank (so the
// ranks of one host must share a network namespace; Create checks that every peer's doorbell is
// reachable and names the peer when not). A rank that moved bytes through a channel rings the
// peer at its other end, which costs a system call only when that peer is asleep.
//
// Failure: a peer whose process has exited (pidfd, when ranks are processes) or that has
// closed its end (Close(), also on destruction, as a socket closes) is seen by Gone().
//
// Thread-safety: one thread per rank uses its ShmMesh; distinct objects (threads or processes)
// share the segment.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "cadre/base/deadline.h"
#include "cadre/base/status.h"
#include "cadre/store/store.h"
#include "cadre/transport/shm/channel.h"
#include "cadre/transport/shm/segment.h"

namespace cadre::transport::shm {

// Bytes of each direction's ring unless told otherwise: room for several 64 KiB pieces in
// flight, small enough that a host of 8 ranks (56 rings) needs 14 MiB of /dev/shm.
inline constexpr size_t kDefaultChannelBytes = 256 << 10;

struct MeshOptions {
  // The ranks (of the whole group) on this host, ascending; this rank among them.
  std::vector<int> ranks;
  int rank = 0;
  // names[r] describes group rank r in errors ("rank 3 (host a)").
  std::vector<std::string> names;
  // Bytes of each direction's ring, rounded up to a power of two. Every rank must pass the same.
  size_t channel_bytes = kDefaultChannelBytes;
};

class ShmMesh {
 public:
  // Collective over the host's ranks listed in `options.ranks`.
  static Status Create(store::Store& store, const MeshOptions& options, Deadline deadline,
                       std::unique_ptr<ShmMesh>* out);
  ~ShmMesh();  // closes (see Close)

  // The channels from this rank to group rank `peer` and back; `peer` must be on this host.
  Channel ToPeer(int peer) const;
  Channel FromPeer(int peer) const;
  bool on_host(int peer) const;

  // Wakes `peer` if it is asleep (after moving bytes to or from it).
  void Ring(int peer);
  // Before sleeping: announces it, so that peers ring. The caller then checks its channels once
  // more and polls doorbell_fd() (and pidfd() of the peers it waits for).
  void Sleep();
  // After waking: withdraws the announcement and empties the doorbell.
  void Wake();
  int doorbell_fd() const { return doorbell_; }
  // A descriptor that polls readable once `peer`'s process has exited; -1 when the peer is a
  // thread of this process (or the kernel has no pidfds).
  int pidfd(int peer) const;

  // Marks this rank's end closed and rings every peer: the ones waiting for it fail at once,
  // with `why` (when not ok: this rank's failure, cut at 1 KiB) as the reason. `explained`: `why`
  // names its cause (Device::failure_explained). Idempotent.
  void Close(const Status& why = Status::Ok(), bool explained = false);
  // Non-ok, naming the peer, when `peer` has closed its end (with its reason and code when it
  // gave one) or its process has exited without closing it (kIo: it died). *explained (when
  // given): the error names its cause (a death, or a reason given as explained).
  Status Gone(int peer, bool* explained = nullptr) const;

 private:
  struct Header;
  struct RankState;

  ShmMesh() = default;
  int index(int peer) const;  // position in ranks_
  Header* header() const;
  RankState* state(int index) const;
  Status AttachTimeout() const;
  Channel Between(int from, int to) const;  // by index
  void Notify(int index);                   // rings unconditionally

  SharedSegment segment_;
  std::vector<int> ranks_;
  std::vector<std::string> names_;  // by group rank
  int me_ = 0;                      // this rank's index in ranks_
  size_t channel_bytes_ = 0;
  size_t channels_offset_ = 0;
  int doorbell_ = -1;
  std::vector<int> pidfds_;  // by index; -1 for threads of this process
  bool closed_ = false;
};

}  // namespace cadre::transport::shm
