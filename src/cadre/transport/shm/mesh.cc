#include "cadre/transport/shm/mesh.h"

#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cstring>
#include <thread>

namespace cadre::transport::shm {
namespace {

constexpr uint32_t kMagic = 0x48534d43;  // "CMSH"
constexpr uint32_t kLayoutVersion = 2;

size_t AlignUp(size_t v, size_t a) { return (v + a - 1) / a * a; }

// The doorbell of the rank at `index` of the mesh whose segment is `segment`.
sockaddr_un DoorbellAddress(const std::string& segment, int index, socklen_t* len) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  const std::string name = "cadre-mesh" + segment + "-" + std::to_string(index);
  const size_t n = std::min(name.size(), sizeof(a.sun_path) - 1);
  std::memcpy(a.sun_path + 1, name.data(), n);  // sun_path[0] == 0: the abstract namespace
  *len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n);
  return a;
}

}  // namespace

struct ShmMesh::Header {
  SegmentStamp stamp;
  uint32_t ranks;
  uint32_t pad;
  uint64_t channel_bytes;
  alignas(64) std::atomic<uint32_t> attached{0};
  std::atomic<uint32_t> probed{0};  // ranks done checking that they reach every doorbell
};

// `closed`: 0 open; else kClosed, with kClosedWithReason when `reason` (NUL-terminated, written
// before) says why, kClosedExplained when that reason names its cause, and the failure's code
// in bits 8 and up.
constexpr uint32_t kClosed = 1;
constexpr uint32_t kClosedWithReason = 2;
constexpr uint32_t kClosedExplained = 4;
constexpr size_t kCloseReasonBytes = 1024;

struct ShmMesh::RankState {
  alignas(64) std::atomic<uint32_t> asleep{0};
  std::atomic<uint32_t> closed{0};
  std::atomic<int32_t> pid{0};
  char reason[kCloseReasonBytes];
};

ShmMesh::Header* ShmMesh::header() const { return static_cast<Header*>(segment_.data()); }

ShmMesh::RankState* ShmMesh::state(int index) const {
  auto* base = static_cast<uint8_t*>(segment_.data()) + AlignUp(sizeof(Header), 64);
  return reinterpret_cast<RankState*>(base) + index;
}

int ShmMesh::index(int peer) const {
  auto it = std::lower_bound(ranks_.begin(), ranks_.end(), peer);
  return it != ranks_.end() && *it == peer ? static_cast<int>(it - ranks_.begin()) : -1;
}

bool ShmMesh::on_host(int peer) const { return index(peer) >= 0; }

Status ShmMesh::Create(store::Store& store, const MeshOptions& o, Deadline deadline,
                       std::unique_ptr<ShmMesh>* out) {
  std::unique_ptr<ShmMesh> m(new ShmMesh());
  m->ranks_ = o.ranks;
  m->names_ = o.names;
  m->me_ = m->index(o.rank);
  if (m->me_ < 0 || !std::is_sorted(o.ranks.begin(), o.ranks.end())) {
    return InvalidArgument("shared-memory mesh: the host's ranks must be ascending and hold rank " +
                           std::to_string(o.rank));
  }
  const int n = static_cast<int>(o.ranks.size());
  m->channel_bytes_ = std::bit_ceil(std::max<size_t>(o.channel_bytes, 4096));
  m->channels_offset_ =
      AlignUp(AlignUp(sizeof(Header), 64) + sizeof(RankState) * static_cast<size_t>(n), 4096);
  const size_t channel = AlignUp(Channel::Footprint(m->channel_bytes_), 4096);
  m->pidfds_.assign(n, -1);

  SegmentRendezvous r;
  r.key = "shm-mesh/" + std::to_string(o.ranks[0]);
  r.creator = o.names[o.ranks[0]];
  r.bytes = m->channels_offset_ + channel * static_cast<size_t>(n) * (n - 1);
  r.stamp = {kMagic, kLayoutVersion};
  r.init = [&] {
    Header* h = new (m->header()) Header();
    h->ranks = static_cast<uint32_t>(n);
    h->channel_bytes = m->channel_bytes_;
    for (int i = 0; i < n; ++i) new (m->state(i)) RankState();
    for (int i = 0; i < n * (n - 1); ++i) {
      new (static_cast<uint8_t*>(m->segment_.data()) + m->channels_offset_ + channel * i)
          ChannelCounters();
    }
  };
  r.matches = [&] {
    const Header* h = m->header();
    return h->ranks == uint32_t(n) && h->channel_bytes == m->channel_bytes_;
  };
  CADRE_RETURN_IF_ERROR(RendezvousSegment(store, r, m->me_ == 0, deadline, &m->segment_));

  // The doorbell exists before this rank says it attached, so a peer can always ring it.
  m->doorbell_ = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (m->doorbell_ < 0) return IoError("doorbell socket: " + std::string(std::strerror(errno)));
  socklen_t len = 0;
  sockaddr_un addr = DoorbellAddress(m->segment_.name(), m->me_, &len);
  if (bind(m->doorbell_, reinterpret_cast<sockaddr*>(&addr), len) != 0) {
    return IoError("binding this rank's doorbell: " + std::string(std::strerror(errno)));
  }
  m->state(m->me_)->pid.store(static_cast<int32_t>(getpid()), std::memory_order_release);
  m->header()->attached.fetch_add(1, std::memory_order_acq_rel);
  while (m->header()->attached.load(std::memory_order_acquire) < uint32_t(n)) {
    if (deadline.expired()) return m->AttachTimeout();
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  if (m->me_ == 0) m->segment_.Unlink();

  for (int i = 0; i < n; ++i) {
    if (i == m->me_) continue;
    const std::string& peer = o.names[o.ranks[i]];
    // A peer in another network namespace maps the same memory but cannot be woken: refuse.
    int probe = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un a = DoorbellAddress(m->segment_.name(), i, &len);
    const bool reachable = probe >= 0 && connect(probe, reinterpret_cast<sockaddr*>(&a), len) == 0;
    const int err = errno;
    if (probe >= 0) close(probe);
    if (!reachable) {
      return IoError(peer + " shares this rank's host name but its doorbell cannot be reached (" +
                     std::strerror(err) +
                     "): ranks with one host name must share a network namespace");
    }
    const int pid = m->state(i)->pid.load(std::memory_order_acquire);
    if (pid != getpid()) m->pidfds_[i] = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  }
  // No rank leaves (and closes its doorbell) while another still checks it.
  m->header()->probed.fetch_add(1, std::memory_order_acq_rel);
  while (m->header()->probed.load(std::memory_order_acquire) < uint32_t(n)) {
    if (deadline.expired()) {
      return TimeoutError("shared memory rendezvous: the ranks of this host did not all finish");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  *out = std::move(m);
  return Status::Ok();
}

ShmMesh::~ShmMesh() {
  if (segment_.data() != nullptr) Close();
  for (int fd : pidfds_) {
    if (fd >= 0) close(fd);
  }
  if (doorbell_ >= 0) close(doorbell_);
}

Status ShmMesh::AttachTimeout() const {
  std::string missing;
  for (size_t i = 0; i < ranks_.size(); ++i) {
    if (state(static_cast<int>(i))->pid.load() == 0) {
      missing += (missing.empty() ? "" : ", ") + names_[ranks_[i]];
    }
  }
  return TimeoutError("shared memory rendezvous: " + missing + " did not attach in time");
}

Channel ShmMesh::Between(int from, int to) const {
  // The channel from index i to index j (i != j) is number i * (n - 1) + (j < i ? j : j - 1).
  const int n = static_cast<int>(ranks_.size());
  const size_t number = static_cast<size_t>(from * (n - 1) + (to < from ? to : to - 1));
  const size_t channel = AlignUp(Channel::Footprint(channel_bytes_), 4096);
  return Channel(static_cast<uint8_t*>(segment_.data()) + channels_offset_ + channel * number,
                 channel_bytes_);
}

Channel ShmMesh::ToPeer(int peer) const { return Between(me_, index(peer)); }

Channel ShmMesh::FromPeer(int peer) const { return Between(index(peer), me_); }

void ShmMesh::Notify(int i) {
  socklen_t len = 0;
  sockaddr_un a = DoorbellAddress(segment_.name(), i, &len);
  const char byte = 0;
  // A full doorbell (EAGAIN) already wakes the peer; a gone one is Gone()'s business.
  (void)sendto(doorbell_, &byte, 1, MSG_DONTWAIT, reinterpret_cast<sockaddr*>(&a), len);
}

void ShmMesh::Ring(int peer) {
  const int i = index(peer);
  // Pairs with Sleep(): either this load sees the peer asleep, or the peer's last look at its
  // channels, after it announced sleeping, sees what this rank just moved.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (state(i)->asleep.load(std::memory_order_relaxed) != 0) Notify(i);
}

void ShmMesh::Sleep() {
  state(me_)->asleep.store(1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_seq_cst);
}

void ShmMesh::Wake() {
  state(me_)->asleep.store(0, std::memory_order_relaxed);
  char buf[64];
  while (recv(doorbell_, buf, sizeof buf, MSG_DONTWAIT) > 0) {
  }
}

int ShmMesh::pidfd(int peer) const { return pidfds_[index(peer)]; }

void ShmMesh::Close(const Status& why, bool explained) {
  if (closed_) return;
  closed_ = true;
  uint32_t closed = kClosed;
  if (!why.ok()) {
    RankState* me = state(me_);
    const size_t n = std::min(why.message().size(), sizeof me->reason - 1);
    std::memcpy(me->reason, why.message().data(), n);
    me->reason[n] = '\0';
    closed |= kClosedWithReason | (explained ? kClosedExplained : 0) |
              (static_cast<uint32_t>(why.code()) << 8);
  }
  state(me_)->closed.store(closed, std::memory_order_release);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  for (int i = 0; i < static_cast<int>(ranks_.size()); ++i) {
    if (i != me_) Notify(i);  // asleep or not: it may be about to sleep waiting for this rank
  }
}

Status ShmMesh::Gone(int peer, bool* explained) const {
  const int i = index(peer);
  if (explained != nullptr) *explained = false;
  // Closed first: a rank that failed closes its end, then its process may well exit.
  const uint32_t closed = state(i)->closed.load(std::memory_order_acquire);
  if ((closed & kClosedWithReason) != 0) {
    if (explained != nullptr) *explained = (closed & kClosedExplained) != 0;
    const uint32_t code = closed >> 8;
    const bool known = code > 0 && code <= static_cast<uint32_t>(Code::kInternal);
    return Status(known ? static_cast<Code>(code) : Code::kIo,
                  names_[peer] + " failed: " + std::string(state(i)->reason));
  }
  if (closed != 0) {
    return IoError(names_[peer] +
                   " closed its end of the shared memory (it failed, or left the group)");
  }
  const int pid = state(i)->pid.load(std::memory_order_acquire);
  bool exited = false;
  if (pidfds_[i] >= 0) {
    pollfd p{pidfds_[i], POLLIN, 0};
    exited = poll(&p, 1, 0) > 0;
  } else {
    exited = pid != getpid() && kill(pid, 0) != 0 && errno == ESRCH;
  }
  if (exited) {
    if (explained != nullptr) *explained = true;
    return IoError(names_[peer] + " (pid " + std::to_string(pid) + ") died during a collective");
  }
  return Status::Ok();
}

}  // namespace cadre::transport::shm
