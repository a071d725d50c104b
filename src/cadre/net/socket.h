// Socket: an owned TCP socket file descriptor, and the address helpers around it.
//
// Every Socket is non-blocking from creation. The *All() calls and Connect/Accept block the
// calling thread with poll(2) until they finish or the Deadline passes, so they are safe to use
// from plain threads; an event loop uses SendSome()/RecvSome() instead. Nothing here raises
// SIGPIPE (MSG_NOSIGNAL) and nothing waits without a deadline.
//
// Errors are returned as Status: kTimeout when the deadline passes, kIo for system errors and for
// a peer that closed the connection ("connection closed by peer after 12 of 24 bytes"),
// kInvalidArgument for an address that does not parse or resolve.
//
// Thread-safety: a Socket is not synchronised. One thread may send while another receives on the
// same Socket (the kernel allows it), but two concurrent senders or receivers interleave bytes.
// Ownership: the Socket closes its descriptor on destruction; it is move-only.
#pragma once

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "cadre/base/deadline.h"
#include "cadre/base/status.h"

namespace cadre::net {

// A host (name, IPv4 or IPv6 literal) and a TCP port.
struct HostPort {
  std::string host;
  uint16_t port = 0;

  // "host:port", with IPv6 literals in brackets ("[::1]:4000").
  std::string ToString() const;
};

// Parses "host:port", "[v6-literal]:port". `what` names the value in errors
// ("CADRE_STORE='abc' is not host:port"). Port 0 is accepted only when `allow_port_zero`.
Status ParseHostPort(std::string_view text, std::string_view what, HostPort* out,
                     bool allow_port_zero = false);

class Socket {
 public:
  Socket() = default;
  // Takes ownership of `fd` (made non-blocking).
  explicit Socket(int fd);
  ~Socket();
  Socket(Socket&& other) noexcept;
  Socket& operator=(Socket&& other) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  // Binds and listens on host:port. An empty host or "0.0.0.0" listens on every IPv4 address,
  // "::" on every IPv6 address. Port 0 picks an ephemeral port (see local_port()). SO_REUSEADDR
  // is set so a restarted server can take its port back at once. `hosts_file`: see Connect.
  static Status Listen(const std::string& host, uint16_t port, int backlog, Socket* out,
                       const std::string& hosts_file = {});

  // Connects to host:port. A refused or unreachable connection, or a name that does not resolve
  // yet, is retried with a short back-off until the deadline, because peers start at different
  // times. The connected socket has TCP_NODELAY set. The timeout message names host:port and the
  // last error seen. A non-empty `hosts_file` (the learner contract's CADRE_HOSTS file,
  // net/resolver.h) is consulted for `host` before getaddrinfo. `retry_refused` false: a refused
  // connection (nobody listens there any more) fails at once with kIo, for a reconnection to a
  // server that was up.
  static Status Connect(const std::string& host, uint16_t port, Deadline deadline, Socket* out,
                        const std::string& hosts_file = {}, bool retry_refused = true);

  // Accepts one connection on a listening socket, waiting until the deadline. The accepted socket
  // is non-blocking with TCP_NODELAY set.
  Status Accept(Deadline deadline, Socket* out) const;

  // Sends or receives exactly `size` bytes, or fails. On failure the stream position is
  // unknown: callers must close the socket.
  Status SendAll(const void* data, size_t size, Deadline deadline);
  // Gather send: all bytes of every part, in order (one syscall when the kernel takes them).
  Status SendAll(std::span<const iovec> parts, Deadline deadline);
  Status RecvAll(void* data, size_t size, Deadline deadline);

  // Non-blocking partial I/O for event loops. Set *done to the bytes moved (0 when the call
  // would block). RecvSome returns kIo "connection closed by peer" at end of stream.
  Status SendSome(const void* data, size_t size, size_t* done);
  Status RecvSome(void* data, size_t size, size_t* done);

  // Waits until the socket is readable (or closed/errored) or the deadline passes.
  Status WaitReadable(Deadline deadline) const;

  Status SetNoDelay(bool on);
  // Kernel buffer sizes in bytes; 0 leaves a size unchanged.
  Status SetBufferSizes(int send_bytes, int recv_bytes);

  // Shuts down both directions: a peer blocked in recv sees end of stream. The fd stays owned.
  void Shutdown();
  void Close();
  // Gives up ownership of the descriptor without closing it.
  int Release();

  bool valid() const { return fd_ >= 0; }
  int fd() const { return fd_; }
  // The bound port (useful after Listen with port 0); 0 when unknown.
  uint16_t local_port() const;
  // "ip:port" of the other end, or "?" when it is not connected.
  std::string peer_address() const;

 private:
  int fd_ = -1;
};

}  // namespace cadre::net
