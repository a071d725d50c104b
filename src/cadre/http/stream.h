// ConnectionStream: one connection as cpp-httplib's request parser reads it, through the
// connection's buffer (what the lobby, or the worker waiting for the request, already read). Reads
// are buffered (the parser reads the request line and headers a byte at a time) except large ones
// (a body), which go straight to the caller; every read and write tries the socket first and waits
// (up to its timeout) only when it is not ready. Until HeadRead() at most `max_head` bytes are
// given out.
//
// From HeadRead() on, the body has a deadline that grows with what arrives: `grace` from the end
// of the head, plus one second for every `min_rate` bytes read since. A client that sends its
// body slower (a byte at a time, each well within the read timeout) is cut off once it falls
// behind: reads fail, timed_out() says so, and writes send nothing (cpp-httplib's own answer
// to a failed read, 400, would be a lie), so that the caller answers 408 itself.
//
// Thread-safety: one thread at a time.
#pragma once

#include <httplib.h>

#include <chrono>
#include <cstddef>
#include <string>

#include "cadre/http/bytes.h"

namespace cadre::http {

// Waits until `fd` is ready for `events`, at most `timeout_ms` (-1: no limit); false on timeout
// or error.
bool WaitReady(int fd, short events, int timeout_ms);

// How slowly a body may arrive (see ConnectionStream).
struct BodyPace {
  std::chrono::milliseconds grace{30000};
  size_t min_rate = 16 << 10;  // bytes a second; 0: no deadline
};

// Counts the data of a chunked body (RFC 9112 7.1) as its bytes go by, framing left out.
class ChunkCount {
 public:
  void Feed(const char* bytes, size_t size);
  size_t data() const { return data_; }

 private:
  enum class State { kSize, kExtension, kData, kDataEnd, kDone };
  State state_ = State::kSize;
  size_t size_ = 0;  // of the chunk whose size line is being read; then what is left of it
  size_t data_ = 0;
};

class ConnectionStream final : public httplib::Stream {
 public:
  // `pending` (the connection's buffer) must outlive the stream; what this request does not use
  // stays in it.
  ConnectionStream(int fd, Bytes& pending, size_t max_head, int read_timeout_ms,
                   int write_timeout_ms, BodyPace pace = {});

  // The head has been parsed: the body's clock starts.
  void HeadRead();
  // The body fell behind its deadline; nothing was written since.
  bool timed_out() const { return timed_out_; }
  // The body is not to be read (its announced length is over the limit): every read of it fails
  // at once, so that cpp-httplib answers 413 without waiting for it.
  void RefuseBody() { body_refused_ = true; }
  // The chunked body is not to pass `max_bytes` (chunk framing not counted): the read that
  // takes it past fails, and every one after, so that no more of it is read or kept.
  void LimitChunkedBody(size_t max_bytes) { chunked_max_ = max_bytes; }
  // A read of the refused body was tried, or the chunked body passed its limit: the connection
  // cannot carry another request.
  bool body_cut() const { return body_cut_; }

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
  // read() without the chunked body's limit.
  ssize_t ReadSome(char* ptr, size_t size);
  ssize_t Receive(char* ptr, size_t size);
  // How long a read may wait for the socket: the read timeout, or less as the body's deadline
  // nears; 0 once it has passed.
  int WaitMillis() const;

  const int fd_;
  Bytes& pending_;  // read from the socket, not yet given out
  size_t consumed_ = 0;
  const size_t max_head_;
  bool head_read_ = false;
  const BodyPace pace_;
  std::chrono::steady_clock::time_point body_since_;
  size_t head_size_ = 0;  // consumed_ when the head was read: the body is what follows
  bool timed_out_ = false;
  bool body_refused_ = false;
  bool body_cut_ = false;
  // Of a chunked body: its limit (npos: none), and where the reads given out stand in its framing.
  size_t chunked_max_ = std::string::npos;
  ChunkCount chunks_;
  const int read_timeout_ms_;
  const int write_timeout_ms_;
};

}  // namespace cadre::http
