// HttpServer: cpp-httplib's Server with the connections it hands its worker threads bounded.
//
// Debian's cpp-httplib 0.11 is a compiled library: its limits (CPPHTTPLIB_REQUEST_URI_MAX_LENGTH,
// CPPHTTPLIB_HEADER_MAX_LENGTH, CPPHTTPLIB_LISTEN_BACKLOG, ...) are fixed in it, and defining
// them before the include changes nothing. Left to itself it gives every connection a worker
// thread from the moment it is accepted: a connection that sends nothing, or a head a byte at a
// time, holds that thread for the keep-alive or read timeout, and a few dozen of them stall the
// server; and it reads a request line or header line into memory until its newline, however
// long.
//
// Here a connection reaches a worker only with a whole request head in hand (and its body, when
// Content-Length announces at most 64 KiB and the client does not wait for 100 Continue). Until
// then it waits in the lobby, one thread with epoll over every such connection (new ones, and
// kept-alive ones between requests), which costs a socket and at most `max_head` bytes (and the
// small body) each:
//   - a head longer than `max_head` is answered 414 (no end to the request line) or 431, and the
//     connection closed (after reading and throwing away what the client still sends, for a
//     little while, so that it sees the answer);
//   - a request not complete within `head_timeout` of its first byte is answered 408, closed;
//   - a connection with no request for `idle_timeout` is closed, and past `max_idle` waiting
//     connections the one waiting longest is closed first.
// A worker serves the request (cpp-httplib's own parsing, routing, handlers and body reading,
// whose reads still wait up to the read timeout each), then gives the connection back to the
// lobby, or serves the next request at once when the client had already sent its head.
//
// Thread-safety: configure before Start(); Stop() is safe from any thread.
#pragma once

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <memory>
#include <mutex>

namespace cadre::service {

struct HttpLimits {
  size_t threads = 64;         // worker threads
  size_t max_head = 32 << 10;  // request line and headers together
  std::chrono::seconds head_timeout{30};
  std::chrono::seconds idle_timeout{60};
  size_t max_idle = 4096;       // connections waiting in the lobby
  size_t max_requests = 10000;  // per connection
};

class HttpServer : public httplib::Server {
 public:
  explicit HttpServer(HttpLimits limits);
  ~HttpServer() override;
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Starts the lobby; call once, before listen_after_bind().
  void Start();
  // Closes the connections waiting in the lobby and stops the listener; requests in flight are
  // answered (listen_after_bind() returns once they are).
  void Stop();

  class Lobby;
  struct Connection;

 private:
  // cpp-httplib calls this on a worker for every accepted connection: it goes to the lobby.
  bool process_and_close_socket(socket_t sock) override;
  // Serves requests on `c` while their heads are at hand; then back to the lobby, or closed.
  void Serve(std::unique_ptr<Connection> c);

  HttpLimits limits_;
  std::atomic<bool> stopping_{false};
  std::mutex workers_mutex_;
  httplib::TaskQueue* workers_ = nullptr;  // guarded by workers_mutex_; httplib owns it
  std::unique_ptr<Lobby> lobby_;
};

}  // namespace cadre::service
