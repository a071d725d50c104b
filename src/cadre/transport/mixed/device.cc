#include "cadre/transport/mixed/device.h"

#include <poll.h>
#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>

#include "cadre/transport/receive_order.h"

namespace cadre::transport::mixed {
namespace {

// With only same-host peers owed bytes and nothing moving, yield for up to kYieldFor before
// sleeping; a yield that comes back later than kBusyCoreYield means another thread wanted the core
// (the peer itself, when ranks outnumber cores), and the wait goes to sleep at once.
constexpr auto kYieldFor = std::chrono::microseconds(200);
constexpr auto kBusyCoreYield = std::chrono::microseconds(20);

}  // namespace

Status MixedDevice::Connect(store::Store& store, const ConnectOptions& o, Deadline deadline,
                            std::unique_ptr<MixedDevice>* out) {
  const int rank = o.tcp.rank, size = o.tcp.size;
  std::vector<int> local = o.local_ranks;
  std::sort(local.begin(), local.end());
  local.erase(std::unique(local.begin(), local.end()), local.end());
  if (!std::binary_search(local.begin(), local.end(), rank) ||
      std::any_of(local.begin(), local.end(), [&](int r) { return r < 0 || r >= size; })) {
    return InvalidArgument("the ranks on this host must be ranks of the group and include rank " +
                           std::to_string(rank));
  }
  std::unique_ptr<MixedDevice> dev(new MixedDevice());
  dev->rank_ = rank;
  dev->size_ = size;
  tcp::ConnectOptions to = o.tcp;
  to.peers.clear();
  for (int r = 0; r < size; ++r) {
    if (!std::binary_search(local.begin(), local.end(), r)) to.peers.push_back(r);
  }
  if (!to.peers.empty()) {  // (empty peers would mean every rank)
    CADRE_RETURN_IF_ERROR(tcp::TcpDevice::Connect(store, to, deadline, &dev->tcp_));
  }
  dev->shm_pairs_.resize(size);
  if (local.size() > 1) {
    shm::MeshOptions mo;
    mo.ranks = local;
    mo.rank = rank;
    mo.names = o.tcp.names;
    mo.channel_bytes = o.channel_bytes;
    CADRE_RETURN_IF_ERROR(shm::ShmMesh::Create(store, mo, deadline, &dev->mesh_));
    for (int peer : local) {
      if (peer == rank) continue;
      dev->shm_pairs_[peer] = std::make_unique<shm::ShmPair>(
          peer, o.tcp.names[peer], dev->mesh_->ToPeer(peer), dev->mesh_->FromPeer(peer));
    }
  }
  *out = std::move(dev);
  return Status::Ok();
}

MixedDevice::~MixedDevice() = default;

Pair& MixedDevice::pair(int peer) {
  if (shm_pairs_[peer]) return *shm_pairs_[peer];
  return *TcpPairOf(peer);
}

void MixedDevice::BeginCollective(uint32_t digest, std::string description) {
  collective_ = description;
  for (auto& p : shm_pairs_) {
    if (p) p->SetCollective(digest, &collective_);
  }
  if (tcp_) tcp_->BeginCollective(digest, std::move(description));
}

void MixedDevice::ClearPairs() {
  for (int peer = 0; peer < size_; ++peer) {
    if (shm_pairs_[peer]) shm_pairs_[peer]->Clear();
    if (tcp::TcpPair* p = TcpPairOf(peer)) p->Clear();
  }
}

void MixedDevice::Shutdown(const Status& why, bool explained) {
  ClearPairs();
  if (tcp_) tcp_->Shutdown(why, explained);  // the notices first (tcp/pair.h)
  if (mesh_) mesh_->Close(why, explained);
}

Status MixedDevice::Fail(Status status, tcp::TcpPair* failed) {
  ClearPairs();
  if (broken_.ok()) {
    if (failed != nullptr && status.code() == Code::kIo) {
      std::vector<tcp::TcpPair*> others;
      for (int peer = 0; peer < size_; ++peer) others.push_back(TcpPairOf(peer));
      status = tcp::ExplainBrokenConnection(*failed, others, status, &explained_);
    }
    broken_ = status;
  }
  return status;
}

Status MixedDevice::GonePeer(const std::vector<int>& active) {
  for (int peer : active) {
    const shm::ShmPair* p = shm_pairs_[peer].get();
    if (p == nullptr || (!p->send_pending() && !p->recv_pending())) continue;
    bool explained = false;
    if (Status s = mesh_->Gone(peer, &explained); !s.ok()) {
      gone_explained_ = explained;
      return s;
    }
  }
  return Status::Ok();
}

Status MixedDevice::Timeout(const std::vector<int>& active) {
  std::string owed;
  for (int peer : active) {
    size_t recv = 0, send = 0;
    if (const shm::ShmPair* p = shm_pairs_[peer].get()) {
      recv = p->recv_left();
      send = p->send_left();
    } else {
      const tcp::TcpPair* t = TcpPairOf(peer);
      recv = t->recv_left();
      send = t->send_left();
    }
    if (recv + send == 0) continue;
    owed += (owed.empty() ? "" : "; ") + pair(peer).peer_name() + " (" + std::to_string(recv) +
            " bytes to receive, " + std::to_string(send) + " to send)";
  }
  return TimeoutError("collective timed out waiting for " + owed);
}

Status MixedDevice::Run(std::span<const Transfer> transfers, Deadline deadline) {
  return RunStreaming(transfers, deadline, nullptr);
}

Status MixedDevice::RunStreaming(std::span<const Transfer> transfers, Deadline deadline,
                                 const OnReceived& on_received) {
  if (!broken_.ok())
    return AbortedError("transport is broken by an earlier error: " + broken_.message());
  auto invalid = [&](const Transfer& t) {
    return t.peer < 0 || t.peer >= size_ || (!shm_pairs_[t.peer] && !TcpPairOf(t.peer))
               ? InternalError("transfer to invalid peer " + std::to_string(t.peer))
               : Status::Ok();
  };
  for (const Transfer& t : transfers) CADRE_RETURN_IF_ERROR(invalid(t));
  std::vector<int> active;            // peers with transfers in this batch
  std::optional<ReceiveOrder> order;  // with a callback only
  if (on_received) order.emplace(size_);
  auto recvs_done = [&](int peer) {
    return shm_pairs_[peer] ? shm_pairs_[peer]->recvs_done() : TcpPairOf(peer)->recvs_done();
  };
  auto queue = [&](const Transfer& t) {
    if (std::find(active.begin(), active.end(), t.peer) == active.end()) {
      active.push_back(t.peer);
      if (order) order->Joined(t.peer, recvs_done(t.peer));
    }
    shm::ShmPair* s = shm_pairs_[t.peer].get();
    tcp::TcpPair* p = s ? nullptr : TcpPairOf(t.peer);
    if (t.kind == Transfer::kSend) {
      s ? s->QueueSend(t.data, t.bytes) : p->QueueSend(t.data, t.bytes);
    } else {
      s ? s->QueueRecv(t.data, t.bytes) : p->QueueRecv(t.data, t.bytes);
      if (order) order->Queued(t.peer);
    }
  };
  for (const Transfer& t : transfers) queue(t);

  std::vector<Transfer> more;
  std::vector<pollfd> fds;
  std::vector<tcp::TcpPair*> polled;  // of the first polled.size() entries of fds
  bool asleep = false;                // announced to the same-host peers (ShmMesh::Sleep)
  bool suspect = false;  // a same-host peer was seen gone: confirmed by one more idle pass
  Clock::time_point yield_until{};
  bool yielding = false;
  while (true) {
    bool added = false, moved = false;
    for (size_t a = 0; a < active.size(); ++a) {  // the callback may add peers
      const int peer = active[a];
      if (shm::ShmPair* s = shm_pairs_[peer].get()) {
        bool m = false;
        if (s->send_pending()) {
          if (Status st = s->ProgressSend(&m); !st.ok()) return Fail(st);
        }
        if (s->recv_pending()) {
          if (Status st = s->ProgressRecv(&m); !st.ok()) return Fail(st);
        }
        if (m) {
          moved = true;
          mesh_->Ring(peer);
        }
      } else {
        tcp::TcpPair* p = TcpPairOf(peer);
        if (p->send_pending()) {
          if (Status st = p->ProgressSend(); !st.ok()) return Fail(st, p);
        }
        if (p->recv_pending()) {
          if (Status st = p->ProgressRecv(); !st.ok()) return Fail(st, p);
        }
      }
      if (!order) continue;
      while (auto k = order->NextCompleted(peer, recvs_done(peer))) {
        more.clear();
        if (Status st = on_received(*k, &more); !st.ok()) return Fail(st);
        for (const Transfer& t : more) {
          if (Status st = invalid(t); !st.ok()) return Fail(st);
          queue(t);
          added = true;
        }
      }
    }
    if (moved || added) {
      if (asleep) mesh_->Wake();
      asleep = suspect = yielding = false;
      continue;  // move what just became possible before waiting
    }
    fds.clear();
    polled.clear();
    bool shm_waiting = false;
    for (int peer : active) {
      if (const shm::ShmPair* s = shm_pairs_[peer].get()) {
        shm_waiting = shm_waiting || s->send_pending() || s->recv_pending();
        continue;
      }
      tcp::TcpPair* p = TcpPairOf(peer);
      short events = (p->send_pending() ? POLLOUT : 0) | (p->recv_pending() ? POLLIN : 0);
      if (events != 0) {
        fds.push_back({p->fd(), events, 0});
        polled.push_back(p);
      }
    }
    if (fds.empty() && !shm_waiting) {
      if (asleep) mesh_->Wake();
      return Status::Ok();
    }
    if (deadline.expired()) {
      if (asleep) mesh_->Wake();
      return Fail(Timeout(active));
    }
    if (shm_waiting) {
      // A peer may have written its last bytes and then closed: fail only when a pass that
      // started after seeing it gone moved nothing either.
      if (Status st = GonePeer(active); !st.ok()) {
        if (suspect) {
          if (asleep) mesh_->Wake();
          if (broken_.ok()) explained_ = gone_explained_;
          return Fail(st);
        }
        suspect = true;
        continue;
      }
      if (!asleep) {
        // Yield only when nothing waits on TCP: a pass also tries every TCP pair (a system call
        // each), and with TCP pending the wait is as long as TCP's anyway.
        const auto now = Clock::now();
        if (!yielding) {
          yielding = true;
          yield_until = fds.empty() ? now + kYieldFor : now;
        }
        if (now < yield_until) {
          sched_yield();
          if (Clock::now() - now > kBusyCoreYield) yield_until = now;  // the core is wanted
          continue;
        }
        // Announce the sleep, then look at the channels once more (the next pass) before polling.
        mesh_->Sleep();
        asleep = true;
        continue;
      }
    }
    const size_t tcp_fds = fds.size();
    if (mesh_) {
      fds.push_back({mesh_->doorbell_fd(), POLLIN, 0});
      for (int peer : active) {
        const shm::ShmPair* s = shm_pairs_[peer].get();
        if (s == nullptr || (!s->send_pending() && !s->recv_pending())) continue;
        if (int fd = mesh_->pidfd(peer); fd >= 0) fds.push_back({fd, POLLIN, 0});
      }
    }
    // At most a second, even without a deadline: a same-host peer without a pidfd (an old
    // kernel) is only seen gone by looking.
    const int ms = deadline.poll_timeout_ms();
    int n = poll(fds.data(), fds.size(), ms < 0 ? 1000 : std::min(ms, 1000));
    if (asleep) mesh_->Wake();
    asleep = yielding = false;
    if (n < 0 && errno != EINTR)
      return Fail(IoError("poll failed: " + std::string(std::strerror(errno))));
    for (size_t i = 0; n > 0 && i < tcp_fds; ++i) {
      // A hang-up with nothing left to read surfaces as an error from the next ProgressRecv;
      // make sure a pair that only sends sees it too.
      if ((fds[i].revents & (POLLERR | POLLHUP)) != 0 && !polled[i]->recv_pending()) {
        return Fail(polled[i]->Broken("connection to " + polled[i]->peer_name() + " was closed"),
                    polled[i]);
      }
    }
  }
}

}  // namespace cadre::transport::mixed
