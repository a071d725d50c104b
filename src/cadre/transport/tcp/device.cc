#include "cadre/transport/tcp/device.h"

#include <poll.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <optional>
#include <thread>

#include "cadre/base/logging.h"
#include "cadre/base/printable.h"
#include "cadre/net/handshake.h"
#include "cadre/store/store_util.h"
#include "cadre/transport/receive_order.h"
#include "cadre/transport/tcp/acceptor.h"

namespace cadre::transport::tcp {
namespace {

std::string Identity(int rank, int size) {
  return "cadre rank " + std::to_string(rank) + " of " + std::to_string(size);
}

// Parses Identity(); -1 when `id` is not one for a group of `size`.
int RankOfIdentity(const std::string& id, int size) {
  const std::string prefix = "cadre rank ";
  const std::string suffix = " of " + std::to_string(size);
  if (id.size() <= prefix.size() + suffix.size() || id.rfind(prefix, 0) != 0 ||
      id.compare(id.size() - suffix.size(), suffix.size(), suffix) != 0) {
    return -1;
  }
  int rank = -1;
  const char* first = id.data() + prefix.size();
  const char* last = id.data() + id.size() - suffix.size();
  auto [ptr, ec] = std::from_chars(first, last, rank);
  if (ec != std::errc() || ptr != last || rank < 0 || rank >= size) return -1;
  return rank;
}

// Connects to every lower rank, one after the other (each accepts concurrently, so none waits
// for us).
// Whether `o` asks for a connection to `peer` (ConnectOptions::peers).
bool Wanted(const ConnectOptions& o, int peer) {
  return peer != o.rank &&
         (o.peers.empty() || std::find(o.peers.begin(), o.peers.end(), peer) != o.peers.end());
}

Status ConnectLowerRanks(store::Store& store, const ConnectOptions& o, const std::string& my_id,
                         Deadline deadline, std::vector<std::unique_ptr<TcpPair>>& pairs) {
  for (int peer = 0; peer < o.rank; ++peer) {
    if (!Wanted(o, peer)) continue;
    std::string key = "tcp-addr/" + std::to_string(peer);
    net::HostPort addr;
    try {
      store.wait({key}, deadline.remaining());
      CADRE_RETURN_IF_ERROR(net::ParseHostPort(store.get_string(key), key, &addr));
    } catch (const Error& e) {
      return store::StoreWaitError(e, o.names[peer] + " did not publish its address",
                                   o.names[peer] + " published its address");
    }
    net::Socket sock;
    Status s = net::Socket::Connect(addr.host, addr.port, deadline, &sock, o.hosts_file);
    if (!s.ok()) return s.WithContext("connecting to " + o.names[peer]);
    std::string peer_id;
    s = net::ClientHandshake(sock, o.token, my_id, deadline, &peer_id);
    if (!s.ok()) return s.WithContext("handshake with " + o.names[peer]);
    if (RankOfIdentity(peer_id, o.size) != peer) {
      return ProtocolError(o.names[peer] + " at " + addr.ToString() + " introduced itself as " +
                           Quoted(peer_id));
    }
    pairs[peer] = std::make_unique<TcpPair>(peer, o.names[peer], std::move(sock));
  }
  return Status::Ok();
}

// Accepts until every higher rank has connected and proved the job token.
Status AcceptHigherRanks(Acceptor& acceptor, const ConnectOptions& o, Deadline deadline,
                         const std::atomic<bool>& cancel,
                         std::vector<std::unique_ptr<TcpPair>>& pairs) {
  int missing = 0;
  for (int peer = o.rank + 1; peer < o.size; ++peer) missing += Wanted(o, peer) ? 1 : 0;
  while (missing > 0) {
    net::Socket sock;
    std::string peer_id;
    Status s = acceptor.Next(deadline, &cancel, &sock, &peer_id);
    if (!s.ok()) {
      std::string who;
      for (int peer = o.rank + 1; peer < o.size; ++peer) {
        if (Wanted(o, peer) && !pairs[peer]) who += (who.empty() ? "" : ", ") + o.names[peer];
      }
      std::string refused;
      if (acceptor.refused() > 0) {
        refused = " (" + std::to_string(acceptor.refused()) +
                  " other connection(s) to this rank's port were refused)";
      }
      return Status(s.code(), "waiting for " + who + " to connect: " + s.message() + refused);
    }
    // Authenticated: a process of this job. Only an identity out of place is refused here.
    const int peer = RankOfIdentity(peer_id, o.size);
    if (peer <= o.rank || !Wanted(o, peer) || pairs[peer]) {
      CADRE_LOG(WARNING) << o.names[o.rank] << ": refused a connection from " << sock.peer_address()
                         << ": unexpected identity " << Quoted(peer_id);
      continue;
    }
    pairs[peer] = std::make_unique<TcpPair>(peer, o.names[peer], std::move(sock));
    --missing;
  }
  return Status::Ok();
}

}  // namespace

Status TcpDevice::Connect(store::Store& store, const ConnectOptions& o, Deadline deadline,
                          std::unique_ptr<TcpDevice>* out) {
  std::unique_ptr<TcpDevice> dev(new TcpDevice());
  dev->rank_ = o.rank;
  dev->size_ = o.size;
  dev->pairs_.resize(o.size);
  bool any = false;
  for (int peer = 0; peer < o.size; ++peer) any = any || Wanted(o, peer);
  if (!any) {
    *out = std::move(dev);
    return Status::Ok();
  }
  CADRE_RETURN_IF_ERROR(net::ValidateJobToken(o.token));
  net::Socket listener;
  Status listening = net::Socket::Listen(o.bind_address, 0, o.size + 64, &listener, o.hosts_file);
  if (!listening.ok()) return listening.WithContext(o.names[o.rank] + " listening for its peers");
  std::string advertise = o.advertise_address.empty() ? "127.0.0.1" : o.advertise_address;
  net::HostPort me{advertise, listener.local_port()};
  store.set_string("tcp-addr/" + std::to_string(o.rank), me.ToString());
  const std::string my_id = Identity(o.rank, o.size);

  // Higher ranks connect to us while we connect to the lower ones, so the two run at once: the
  // acceptor on a thread of its own, authenticating every connection concurrently (a silent or
  // garbage connection to our port never holds up a genuine peer). Each thread fills only its
  // own entries of pairs_ (above or below our rank).
  std::atomic<bool> cancel{false};
  Status accepted;
  std::thread accept_thread;
  bool higher = false;
  for (int peer = o.rank + 1; peer < o.size; ++peer) higher = higher || Wanted(o, peer);
  if (higher) {
    AcceptorOptions ao;
    ao.token = o.token;
    ao.identity = my_id;
    ao.handshake_timeout = o.handshake_timeout;
    ao.max_pending = o.max_pending;
    ao.log_prefix = o.names[o.rank];
    accept_thread = std::thread([&, ao = std::move(ao)]() mutable {
      Acceptor acceptor(std::move(listener), std::move(ao));
      accepted = AcceptHigherRanks(acceptor, o, deadline, cancel, dev->pairs_);
    });
  }
  Status connected = ConnectLowerRanks(store, o, my_id, deadline, dev->pairs_);
  if (!connected.ok()) cancel = true;
  if (accept_thread.joinable()) accept_thread.join();
  CADRE_RETURN_IF_ERROR(connected);
  CADRE_RETURN_IF_ERROR(accepted);
  *out = std::move(dev);
  return Status::Ok();
}

void TcpDevice::BeginCollective(uint32_t digest, std::string description) {
  collective_ = std::move(description);
  for (auto& p : pairs_) {
    if (p) p->SetCollective(digest, &collective_);
  }
}

void TcpDevice::Shutdown(const Status& why, bool explained) {
  // Every notice first, then every close: a peer that reads one notice and looks at the other
  // connections finds the rest.
  Deadline notices(std::chrono::milliseconds(200));
  for (auto& p : pairs_) {
    if (!p) continue;
    p->Clear();
    if (!why.ok()) p->SendNotice(why, explained, notices);
  }
  for (auto& p : pairs_) {
    if (p) p->Shutdown();
  }
}

Status TcpDevice::Fail(Status status, TcpPair* failed) {
  for (auto& p : pairs_) {
    if (p) p->Clear();
  }
  if (broken_.ok()) {
    if (failed != nullptr && status.code() == Code::kIo) {
      std::vector<TcpPair*> others;
      for (auto& p : pairs_) others.push_back(p.get());
      status = ExplainBrokenConnection(*failed, others, status, &explained_);
    }
    broken_ = status;
  }
  return status;
}

Status TcpDevice::Run(std::span<const Transfer> transfers, Deadline deadline) {
  return RunStreaming(transfers, deadline, nullptr);
}

Status TcpDevice::RunStreaming(std::span<const Transfer> transfers, Deadline deadline,
                               const OnReceived& on_received) {
  if (!broken_.ok())
    return AbortedError("transport is broken by an earlier error: " + broken_.message());
  auto invalid = [&](const Transfer& t) {
    return t.peer < 0 || t.peer >= size_ || !pairs_[t.peer]
               ? InternalError("transfer to invalid peer " + std::to_string(t.peer))
               : Status::Ok();
  };
  for (const Transfer& t : transfers) CADRE_RETURN_IF_ERROR(invalid(t));
  std::vector<TcpPair*> active;
  std::optional<ReceiveOrder> order;  // with a callback only
  if (on_received) order.emplace(size_);
  auto queue = [&](const Transfer& t) {
    TcpPair* p = pairs_[t.peer].get();
    if (std::find(active.begin(), active.end(), p) == active.end()) {
      active.push_back(p);
      if (order) order->Joined(t.peer, p->recvs_done());
    }
    if (t.kind == Transfer::kSend) {
      p->QueueSend(t.data, t.bytes);
    } else {
      p->QueueRecv(t.data, t.bytes);
      if (order) order->Queued(t.peer);
    }
  };
  for (const Transfer& t : transfers) queue(t);
  std::vector<Transfer> more;
  std::vector<pollfd> fds;
  std::vector<TcpPair*> polled;
  while (true) {
    bool added = false;
    for (size_t a = 0; a < active.size(); ++a) {  // the callback may add pairs
      TcpPair* p = active[a];
      if (p->send_pending()) {
        if (Status s = p->ProgressSend(); !s.ok()) return Fail(s, p);
      }
      if (p->recv_pending()) {
        if (Status s = p->ProgressRecv(); !s.ok()) return Fail(s, p);
      }
      if (!order) continue;
      while (auto k = order->NextCompleted(p->peer(), p->recvs_done())) {
        more.clear();
        if (Status s = on_received(*k, &more); !s.ok()) return Fail(s);
        for (const Transfer& t : more) {
          if (Status s = invalid(t); !s.ok()) return Fail(s);
          queue(t);
          added = true;
        }
      }
    }
    if (added) continue;  // move the new transfers before sleeping
    fds.clear();
    polled.clear();
    for (TcpPair* p : active) {
      short events = (p->send_pending() ? POLLOUT : 0) | (p->recv_pending() ? POLLIN : 0);
      if (events != 0) {
        fds.push_back({p->fd(), events, 0});
        polled.push_back(p);
      }
    }
    if (fds.empty()) return Status::Ok();
    if (deadline.expired()) {
      std::string owed;
      for (TcpPair* p : polled) {
        owed += (owed.empty() ? "" : "; ") + p->peer_name() + " (" +
                std::to_string(p->recv_left()) + " bytes to receive, " +
                std::to_string(p->send_left()) + " to send)";
      }
      return Fail(TimeoutError("collective timed out waiting for " + owed));
    }
    int n = poll(fds.data(), fds.size(), std::min(deadline.poll_timeout_ms(), 1000));
    if (n < 0 && errno != EINTR)
      return Fail(IoError("poll failed: " + std::string(std::strerror(errno))));
    for (size_t i = 0; n > 0 && i < fds.size(); ++i) {
      // A hang-up with nothing left to read surfaces as an error from the next ProgressRecv;
      // make sure a pair that only sends sees it too.
      if ((fds[i].revents & (POLLERR | POLLHUP)) != 0 && !polled[i]->recv_pending()) {
        return Fail(polled[i]->Broken("connection to " + polled[i]->peer_name() + " was closed"),
                    polled[i]);
      }
    }
  }
}

}  // namespace cadre::transport::tcp
