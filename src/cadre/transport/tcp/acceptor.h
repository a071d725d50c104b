// Acceptor: the accepting half of TcpDevice's rendezvous.
//
// It takes connections from a listening socket and runs the server side of the job-token
// handshake (net/handshake.h) on all of them at once, each under a deadline of its own
// (handshake_timeout, counted from its accept). A connection that says nothing, sends garbage or
// stops halfway costs only itself: it is dropped when it fails or its deadline passes, and a
// genuine peer that arrives after it is served at once, never queued behind it. At most
// max_pending connections may be mid-handshake; when another arrives the oldest is dropped (a
// genuine peer finishes in two round trips, so the oldest is the one that stalls). Bytes are read
// frame by frame and never past the handshake's last frame, so whatever a peer sends after it
// stays in the socket for the connection's next owner.
//
// Refused connections are logged with their address and the reason (identities quoted, see
// base/printable.h): the first kLoggedRefusals of them, then only counted, so a port scanner
// cannot flood the log.
//
// Thread-safety: one thread uses an Acceptor. Ownership: it owns the listening socket and every
// connection until Next() hands one over.
#pragma once

#include <atomic>
#include <cstddef>
#include <deque>
#include <memory>
#include <string>

#include "cadre/base/deadline.h"
#include "cadre/base/status.h"
#include "cadre/net/socket.h"

namespace cadre::transport::tcp {

struct AcceptorOptions {
  std::string token;     // the job token (must not be empty)
  std::string identity;  // ours, sent to each peer in the handshake
  Duration handshake_timeout = std::chrono::seconds(10);
  size_t max_pending = 64;
  std::string log_prefix;  // who is accepting, for log lines ("rank 3")
};

class Acceptor {
 public:
  static constexpr size_t kLoggedRefusals = 8;

  Acceptor(net::Socket listener, AcceptorOptions options);
  ~Acceptor();
  Acceptor(const Acceptor&) = delete;
  Acceptor& operator=(const Acceptor&) = delete;

  // Waits for the next connection that completed the handshake and hands it over with the
  // identity the peer proved (authenticated, not yet checked against what the caller expects).
  // kTimeout at the deadline; kAborted once *cancel (when given) is true, checked every 100 ms.
  Status Next(Deadline deadline, const std::atomic<bool>* cancel, net::Socket* socket,
              std::string* identity);

  // Connections refused so far: failed or timed-out handshakes, and connections dropped to make
  // room. For tests and diagnostics.
  size_t refused() const { return refused_; }

 private:
  struct Pending;
  void AcceptNew();
  // Moves a connection's handshake as far as its socket allows; a failed Status means drop it.
  static Status Progress(Pending& p);
  void Refuse(const Pending& p, const Status& why);

  net::Socket listener_;
  AcceptorOptions options_;
  std::deque<std::unique_ptr<Pending>> pending_;  // oldest first
  Clock::time_point accept_paused_until_{};       // after a failed accept (out of descriptors)
  size_t refused_ = 0;
};

}  // namespace cadre::transport::tcp
