#include "cadre/transport/tcp/acceptor.h"

#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "cadre/base/logging.h"
#include "cadre/net/frame.h"
#include "cadre/net/handshake.h"

namespace cadre::transport::tcp {
namespace {

// How long accepting pauses after accept(2) itself failed (e.g. out of descriptors): the
// listener stays readable, and polling it at once again would spin.
constexpr Duration kAcceptPause{100};
constexpr Duration kCancelCheck{100};

std::string Seconds(Duration d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", static_cast<double>(d.count()) / 1000.0);
  return buf;
}

}  // namespace

struct Acceptor::Pending {
  Pending(net::Socket s, const AcceptorOptions& o)
      : socket(std::move(s)),
        address(socket.peer_address()),
        deadline(Clock::now() + o.handshake_timeout),
        machine(o.token, o.identity) {}

  net::Socket socket;
  std::string address;
  Clock::time_point deadline;
  net::HandshakeServer machine;
  // The frame being read: its header, then its payload.
  uint8_t header[net::kFrameHeaderSize] = {};
  size_t header_got = 0;
  net::FrameHeader frame;
  std::vector<uint8_t> payload;
  size_t payload_got = 0;
  // Handshake bytes not yet written.
  std::vector<uint8_t> out;
  size_t out_sent = 0;

  bool ready() const { return machine.done() && out_sent == out.size(); }
  bool writing() const { return out_sent < out.size(); }
};

Acceptor::Acceptor(net::Socket listener, AcceptorOptions options)
    : listener_(std::move(listener)), options_(std::move(options)) {}

Acceptor::~Acceptor() = default;

void Acceptor::Refuse(const Pending& p, const Status& why) {
  ++refused_;
  if (refused_ <= kLoggedRefusals) {
    CADRE_LOG(WARNING) << options_.log_prefix << ": refused a connection from " << p.address << ": "
                       << why.ToString()
                       << (refused_ == kLoggedRefusals ? " (further refusals are not logged)" : "");
  }
}

void Acceptor::AcceptNew() {
  for (;;) {
    net::Socket s;
    Status st = listener_.Accept(Deadline(Duration(0)), &s);
    if (st.code() == Code::kTimeout) return;
    if (!st.ok()) {
      CADRE_LOG(WARNING) << options_.log_prefix << ": " << st.ToString() << "; pausing accepts";
      accept_paused_until_ = Clock::now() + kAcceptPause;
      return;
    }
    if (pending_.size() >= options_.max_pending) {
      Refuse(*pending_.front(),
             TimeoutError("dropped to make room: " + std::to_string(options_.max_pending) +
                          " connections were mid-handshake"));
      pending_.pop_front();
    }
    pending_.push_back(std::make_unique<Pending>(std::move(s), options_));
  }
}

Status Acceptor::Progress(Pending& p) {
  for (;;) {
    while (p.writing()) {
      size_t sent = 0;
      CADRE_RETURN_IF_ERROR(
          p.socket.SendSome(p.out.data() + p.out_sent, p.out.size() - p.out_sent, &sent));
      if (sent == 0) return Status::Ok();  // the socket is full: wait until it is writable
      p.out_sent += sent;
    }
    p.out.clear();
    p.out_sent = 0;
    if (p.machine.done()) return Status::Ok();  // read nothing past the last handshake frame
    size_t got = 0;
    if (p.header_got < net::kFrameHeaderSize) {
      CADRE_RETURN_IF_ERROR(
          p.socket.RecvSome(p.header + p.header_got, net::kFrameHeaderSize - p.header_got, &got));
      if (got == 0) return Status::Ok();
      p.header_got += got;
      if (p.header_got < net::kFrameHeaderSize) continue;
      Status bad = net::DecodeFrameHeader(p.header, net::kHandshakeMaxPayload, &p.frame);
      if (!bad.ok()) {
        // Tell a cadre peer of another version why; anything else just gets closed.
        std::vector<uint8_t> reject = net::EncodeRejectFrame(bad.message());
        size_t ignored = 0;
        (void)p.socket.SendSome(reject.data(), reject.size(), &ignored);
        return bad;
      }
      p.payload.assign(static_cast<size_t>(p.frame.length), 0);
      p.payload_got = 0;
    } else {
      CADRE_RETURN_IF_ERROR(p.socket.RecvSome(p.payload.data() + p.payload_got,
                                              p.payload.size() - p.payload_got, &got));
      if (got == 0) return Status::Ok();
      p.payload_got += got;
    }
    if (p.payload_got < p.payload.size()) continue;
    p.header_got = 0;  // the next read starts a new frame
    Status s = p.machine.OnFrame(p.frame, p.payload, &p.out);
    if (!s.ok()) {
      size_t ignored = 0;  // the REJECT, if the socket takes it; the peer's loss otherwise
      if (!p.out.empty()) (void)p.socket.SendSome(p.out.data(), p.out.size(), &ignored);
      return s;
    }
  }
}

Status Acceptor::Next(Deadline deadline, const std::atomic<bool>* cancel, net::Socket* socket,
                      std::string* identity) {
  std::vector<pollfd> fds;
  for (;;) {
    for (auto it = pending_.begin(); it != pending_.end(); ++it) {
      if ((*it)->ready()) {
        *identity = (*it)->machine.peer_identity();
        *socket = std::move((*it)->socket);
        pending_.erase(it);
        return Status::Ok();
      }
    }
    const auto now = Clock::now();
    for (auto it = pending_.begin(); it != pending_.end();) {
      if ((*it)->deadline <= now) {
        Refuse(**it, TimeoutError("no handshake within " + Seconds(options_.handshake_timeout)));
        it = pending_.erase(it);
      } else {
        ++it;
      }
    }
    if (cancel != nullptr && cancel->load()) return AbortedError("accepting was cancelled");
    if (deadline.expired()) return TimeoutError("no peer finished the handshake in time");

    fds.clear();
    const bool accepting = now >= accept_paused_until_;
    fds.push_back({listener_.fd(), static_cast<short>(accepting ? POLLIN : 0), 0});
    auto wake = std::min(deadline.at(), accepting ? deadline.at() : accept_paused_until_);
    if (cancel != nullptr) wake = std::min(wake, now + kCancelCheck);
    for (const auto& p : pending_) {
      fds.push_back({p->socket.fd(), static_cast<short>(p->writing() ? POLLOUT : POLLIN), 0});
      wake = std::min(wake, p->deadline);
    }
    const auto wait = std::chrono::ceil<Duration>(std::max(wake - now, Clock::duration::zero()));
    const int n =
        poll(fds.data(), fds.size(), static_cast<int>(std::min<int64_t>(wait.count(), 1 << 30)));
    if (n < 0) {
      if (errno == EINTR) continue;
      return IoError(std::string("poll while accepting: ") + std::strerror(errno));
    }
    // Progress the connections first (indices into fds are the deque's, plus the listener),
    // then accept: a new connection is only polled from the next round on.
    size_t i = 1;
    for (auto it = pending_.begin(); it != pending_.end(); ++i) {
      if (fds[i].revents == 0) {
        ++it;
        continue;
      }
      Status s = Progress(**it);
      if (!s.ok()) {
        Refuse(**it, s);
        it = pending_.erase(it);
      } else {
        ++it;
      }
    }
    if ((fds[0].revents & POLLIN) != 0) AcceptNew();
  }
}

}  // namespace cadre::transport::tcp
