// Server: cpp-httplib's routing and request parsing, with the listening socket and the
// connections served by cadre, so that idle or slow clients cannot hold the worker threads and
// a stop loses no request a client has already sent. `cadre server` and `cadre-serve` both
// serve HTTP with it.
//
// Debian's cpp-httplib 0.11 is a compiled library: its limits (CPPHTTPLIB_REQUEST_URI_MAX_LENGTH,
// CPPHTTPLIB_HEADER_MAX_LENGTH, CPPHTTPLIB_LISTEN_BACKLOG, ...) are fixed in it, and defining
// them before the include changes nothing. Left to itself it gives every connection a worker
// thread from the moment it is accepted (a connection that sends nothing, or a head a byte at a
// time, holds that thread for the keep-alive or read timeout), reads a request line or header
// line into memory until its newline, however long, listens with a backlog of 5, and its stop()
// closes accepted connections unread.
//
// Here a connection reaches a worker only with a whole request head in hand (and its body, when
// Content-Length announces at most 64 KiB and the client does not wait for 100 Continue). Until
// then it waits in the lobby (lobby.h), one thread with epoll over every such connection (new
// ones, and kept-alive ones between requests), which costs a socket and at most `max_head` bytes
// (and the small body) each:
//   - a head longer than `max_head` is answered 414 (no end to the request line) or 431, and the
//     connection closed (after reading and throwing away what the client still sends, for a
//     little while, so that it sees the answer);
//   - a request not complete within `head_timeout` of its first byte is answered 408, closed;
//   - a connection with no request for `idle_timeout` is closed, and past `max_idle` waiting
//     connections the one waiting longest is closed first.
// A worker serves the request (cpp-httplib's own parsing, routing, handlers and body reading),
// then gives the connection back to the lobby, or serves the next request at once when the
// client had already sent it. A body the worker reads (over 64 KiB, chunked, or after
// 100 Continue) has a deadline that grows with what arrives: `head_timeout` from the end of the
// head, plus one second for every `body_min_rate` bytes (stream.h). A client that sends it
// slower, or stops for the read timeout, is answered 408 and its connection closed (after the
// same draining as above), so that a few clients trickling large uploads cannot hold the
// workers for long. With `max_streamed`, at most that many such requests are read at once: one
// more is answered 503 `server_busy` (Retry-After: 5) before its body is read (a client that
// waits for 100 Continue never sends it), so that the other workers are left to the rest.
//
// A Stop():
//   - accepts what the kernel has already completed, then closes the listener (new connections
//     are refused);
//   - answers every request already sent on an accepted connection (in a handler, at a worker,
//     or waiting in the lobby), each answer with `Connection: close`, then closes the
//     connection; a request partly sent is awaited as long as `head_timeout`;
//   - closes at once a connection that is idle (nothing sent) when the stop comes.
// Serve() returns once every connection is closed.
//
// Thread-safety: configure (routes, handlers, timeouts) before Serve(); Bind() and Serve() are
// called once each, in that order; Stop() may be called from any thread, at any time (also
// before Serve()), and more than once.
#pragma once

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "cadre/http/lobby.h"

namespace cadre::http {

class ConnectionStream;

struct Limits {
  size_t threads = 64;         // worker threads: requests served at once
  size_t max_head = 32 << 10;  // request line and headers together
  std::chrono::seconds head_timeout{30};
  std::chrono::seconds idle_timeout{60};
  size_t max_idle = 4096;           // connections waiting in the lobby
  size_t max_requests = 10000;      // per connection
  size_t body_min_rate = 16 << 10;  // bytes a second a streamed body keeps up, after head_timeout
  // Requests whose body a worker reads (streamed), at once; one more is answered 503 with
  // Retry-After before any of its body is read. 0: no limit.
  size_t max_streamed = 0;
};

class Server final : public httplib::Server {
 public:
  // `refusal` writes the body of the lobby's own answers (408, 414, 431) in the program's error
  // shape; by default {"error": message}.
  explicit Server(Limits limits, RefusalBody refusal = nullptr);
  ~Server() override;
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds `host:port` (0: any free port) with a wide backlog; returns the port, or -1 with
  // *error set.
  int Bind(const std::string& host, int port, std::string* error);
  // Accepts and serves connections until Stop(); returns false if the listener failed.
  bool Serve();
  void Stop();
  bool stopping() const { return stopping_; }
  // Whether the chunked body of `req`, a request being served, passed the size limit
  // (set_payload_max_length): its reading stopped there and failed, which cpp-httplib answers
  // 400; the error handler or route makes it 413. The rest of the body is not read: the
  // connection is drained and closed after the answer.
  bool BodyCut(const httplib::Request& req) const;

 private:
  // Serves requests on `c` while they are at hand; then back to the lobby, or closed.
  void ServeConnection(std::unique_ptr<Connection> c);
  void Dispatch(std::unique_ptr<Connection> c);
  // Waits on the kept-alive `c` for its next request while no other connection waits for a
  // worker (one poll and one read a request, as a thread per connection costs): true when the
  // request is whole in c.buffer; false to give `c` to the lobby (idle past the timeout, a
  // request not yet whole, another connection needs the worker, stopping).
  bool Hold(Connection& c);

  const Limits limits_;
  const RefusalBody refusal_;
  std::atomic<bool> stopping_{false};
  int stop_fd_;    // an eventfd, readable from the stop on: wakes the accept loop and holders
  int demand_fd_;  // a semaphore eventfd: each count asks one holder to let go of its connection
  std::atomic<size_t> queued_{0};    // connections dispatched, not yet taken by a worker
  std::atomic<size_t> busy_{0};      // workers serving or holding a connection
  std::atomic<size_t> streamed_{0};  // requests whose body a worker reads
  Tally open_;
  mutable std::mutex streams_mutex_;
  // The stream of each request being served (its body read by a worker).
  std::unordered_map<const httplib::Request*, const ConnectionStream*> streams_;
  std::mutex workers_mutex_;
  std::unique_ptr<httplib::TaskQueue> workers_;  // guarded by workers_mutex_; set in Serve()
  std::unique_ptr<Lobby> lobby_;
};

}  // namespace cadre::http
