// GracefulServer: cpp-httplib's routing and request parsing, with the listening socket and the
// connections served here, so that a stop loses no request a client has already sent.
//
// cpp-httplib 0.11's own stop() closes the listener and then each connection at its next look:
// a connection accepted but still waiting for a thread was closed unread, a request sent on a
// keep-alive connection right after an answer was closed unread, connections completed by the
// kernel but not yet accepted were reset, and an idle keep-alive connection held the exit up to
// its timeout. Here a Stop():
//   - accepts what the kernel has already completed, then closes the listener (new connections
//     are refused);
//   - answers every request already sent on an accepted connection (in the model, queued, or
//     not yet read), each answer with `Connection: close`, then closes the connection;
//   - closes at once a keep-alive connection that is idle (nothing sent) when the stop comes.
// Serve() returns once every connection is closed.
//
// Thread-safety: Stop() may be called from any thread, at any time (also before Serve()), and
// more than once. Bind() and Serve() are called once each, in that order.
#pragma once

#include <httplib.h>

#include <atomic>
#include <string>

namespace cadre::serving {

class GracefulServer final : public httplib::Server {
 public:
  GracefulServer();
  ~GracefulServer() override;

  // Binds `host:port` (0: any free port) with a wide backlog; returns the port, or -1 with
  // *error set.
  int Bind(const std::string& host, int port, std::string* error);
  // Accepts and serves connections, `threads` at once (a keep-alive connection holds one),
  // until Stop(); returns false if the listener failed.
  bool Serve(int threads);
  void Stop();
  bool stopping() const { return stopping_; }

 private:
  bool process_and_close_socket(socket_t sock) override;
  // Waits for the next request on an accepted connection: false when it stays idle past the
  // keep-alive timeout, or is idle when the stop comes.
  bool WaitForRequest(socket_t sock, bool buffered);

  std::atomic<bool> stopping_{false};
  int stop_fd_;  // an eventfd, readable from the stop on: wakes the listener and idle connections
};

}  // namespace cadre::serving
