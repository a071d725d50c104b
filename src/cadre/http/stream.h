// ConnectionStream: one connection as cpp-httplib's request parser reads it, through the
// connection's buffer (what the lobby, or the worker waiting for the request, already read). Reads
// are buffered (the parser reads the request line and headers a byte at a time) except large ones
// (a body), which go straight to the caller; every read and write tries the socket first and waits
// (up to its timeout) only when it is not ready. Until HeadRead() at most `max_head` bytes are
// given out.
//
// Thread-safety: one thread at a time.
#pragma once

#include <httplib.h>

#include <cstddef>
#include <string>

#include "cadre/http/bytes.h"

namespace cadre::http {

// Waits until `fd` is ready for `events`, at most `timeout_ms` (-1: no limit); false on timeout
// or error.
bool WaitReady(int fd, short events, int timeout_ms);

class ConnectionStream final : public httplib::Stream {
 public:
  // `pending` (the connection's buffer) must outlive the stream; what this request does not use
  // stays in it.
  ConnectionStream(int fd, Bytes& pending, size_t max_head, int read_timeout_ms,
                   int write_timeout_ms);

  void HeadRead() { head_read_ = true; }

  bool is_readable() const override;
  // And the client is still there: a follower whose client has gone is told so here (as
  // cpp-httplib's own stream does), the next time it looks.
  bool is_writable() const override;
  ssize_t read(char* ptr, size_t size) override;
  ssize_t write(const char* ptr, size_t size) override;
  void get_remote_ip_and_port(std::string& ip, int& port) const override;
  void get_local_ip_and_port(std::string& ip, int& port) const override;
  socket_t socket() const override { return fd_; }

 private:
  ssize_t Receive(char* ptr, size_t size);

  const int fd_;
  Bytes& pending_;  // read from the socket, not yet given out
  size_t consumed_ = 0;
  const size_t max_head_;
  bool head_read_ = false;
  const int read_timeout_ms_;
  const int write_timeout_ms_;
};

}  // namespace cadre::http
