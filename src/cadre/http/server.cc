#include "cadre/http/server.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <strings.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <utility>

#include "cadre/http/request_size.h"
#include "cadre/http/stream.h"

namespace cadre::http {
namespace {

// What a worker holding a kept-alive connection reads at once: a whole small request.
constexpr size_t kHoldRead = 16384;

int Millis(time_t sec, time_t usec) { return static_cast<int>(sec * 1000 + usec / 1000); }

std::string DefaultRefusal(int, const std::string&, const std::string& message) {
  // The lobby's messages are its own: no character needs escaping.
  return "{\"error\":\"" + message + "\"}";
}

std::string SlowBodyMessage(const BodyPace& pace, int read_timeout_ms) {
  if (pace.min_rate == 0) {
    return "the request body stopped arriving: nothing came for " +
           std::to_string(read_timeout_ms / 1000) + " s";
  }
  return "the request body arrived too slowly: this server waits " +
         std::to_string(pace.grace.count() / 1000) + " s for a body, and one more second for " +
         "every " + std::to_string(pace.min_rate >> 10) + " KiB of it that arrives";
}

// One of the places of the requests whose body a worker reads, given back at the end of the
// request.
class StreamedPlace {
 public:
  explicit StreamedPlace(std::atomic<size_t>& count) : count_(count) {}
  ~StreamedPlace() { Release(); }
  StreamedPlace(const StreamedPlace&) = delete;
  StreamedPlace& operator=(const StreamedPlace&) = delete;

  bool Take(size_t max) {
    if (++count_ > max) {
      --count_;
      return false;
    }
    taken_ = true;
    return true;
  }
  void Release() {
    if (taken_) --count_;
    taken_ = false;
  }

 private:
  std::atomic<size_t>& count_;
  bool taken_ = false;
};

LobbyLimits LobbyLimitsOf(const Limits& limits) {
  LobbyLimits lobby;
  lobby.max_head = limits.max_head;
  lobby.head_timeout = limits.head_timeout;
  lobby.idle_timeout = limits.idle_timeout;
  // Every waiting connection is a file descriptor: half of them are left to the rest of the
  // process (its files, the connections being served), so that accepting a connection does not
  // fail while the lobby is full.
  lobby.max_idle = limits.max_idle;
  rlimit files{};
  if (getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur != RLIM_INFINITY) {
    lobby.max_idle = std::min<size_t>(lobby.max_idle, std::max<size_t>(16, files.rlim_cur / 2));
  }
  return lobby;
}

}  // namespace

Server::Server(Limits limits, RefusalBody refusal)
    : limits_(limits),
      refusal_(refusal ? std::move(refusal) : RefusalBody(DefaultRefusal)),
      stop_fd_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)),
      demand_fd_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK | EFD_SEMAPHORE)) {
  // What cpp-httplib says in its Keep-Alive header; the lobby keeps to it.
  set_keep_alive_max_count(limits_.max_requests);
  set_keep_alive_timeout(limits_.idle_timeout.count());
  // An answer given while stopping tells the client not to send another on its connection.
  set_post_routing_handler([this](const httplib::Request&, httplib::Response& res) {
    if (stopping_ && !res.has_header("Connection")) res.set_header("Connection", "close");
  });
  lobby_ =
      std::make_unique<Lobby>(LobbyLimitsOf(limits_), refusal_,
                              [this](std::unique_ptr<Connection> c) { Dispatch(std::move(c)); });
}

Server::~Server() {
  Stop();
  lobby_->Stop();
  socket_t sock = svr_sock_.exchange(INVALID_SOCKET);
  if (sock != INVALID_SOCKET) ::close(sock);
  if (stop_fd_ >= 0) ::close(stop_fd_);
  if (demand_fd_ >= 0) ::close(demand_fd_);
}

int Server::Bind(const std::string& host, int port, std::string* error) {
  if (stop_fd_ < 0 || demand_fd_ < 0) {
    *error = std::string("cannot create an eventfd: ") + std::strerror(errno);
    return -1;
  }
  int bound = port == 0 ? bind_to_any_port(host) : (bind_to_port(host, port) ? port : -1);
  if (bound < 0) {
    *error = "cannot listen on " + host + ":" + std::to_string(port) +
             " (in use, or not an address of this machine)";
    return -1;
  }
  // cpp-httplib listens with a backlog of 5: connections beyond it while the accept thread is
  // busy would be reset. The listener is non-blocking: Serve() accepts until none is left.
  socket_t sock = svr_sock_;
  if (::listen(sock, SOMAXCONN) != 0 ||
      ::fcntl(sock, F_SETFL, ::fcntl(sock, F_GETFL) | O_NONBLOCK) != 0) {
    *error = std::string("cannot set up the listening socket: ") + std::strerror(errno);
    return -1;
  }
  return bound;
}

bool Server::Serve() {
  const socket_t listener = svr_sock_;
  if (listener == INVALID_SOCKET) return false;
  {
    std::lock_guard<std::mutex> lock(workers_mutex_);
    workers_ = std::make_unique<httplib::ThreadPool>(std::max<size_t>(1, limits_.threads));
  }
  lobby_->Start();
  bool ok = true;
  std::array<pollfd, 2> fds = {pollfd{listener, POLLIN, 0}, pollfd{stop_fd_, POLLIN, 0}};
  for (bool stop = false; !stop && ok;) {
    if (::poll(fds.data(), fds.size(), -1) < 0 && errno != EINTR) ok = false;
    // Connections the kernel completed before the stop are accepted and served too.
    stop = fds[1].revents != 0 || stopping_;
    for (;;) {
      socket_t sock = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
      if (sock == INVALID_SOCKET) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        if (errno == EMFILE || errno == ENFILE) {
          // Out of descriptors: those in use are released as connections end.
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        } else if (errno != EAGAIN && errno != EWOULDBLOCK) {
          ok = false;
        }
        break;
      }
      // cpp-httplib writes a response's headers and body separately: with Nagle's algorithm on,
      // the body would wait for the client's delayed ACK on every kept-alive request.
      int yes = 1;
      ::setsockopt(sock, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof(yes));
      lobby_->Add(std::make_unique<Connection>(sock, open_));
    }
  }
  socket_t sock = svr_sock_.exchange(INVALID_SOCKET);
  if (sock != INVALID_SOCKET) ::close(sock);
  lobby_->Close();
  open_.WaitForNone();
  lobby_->Stop();
  std::unique_ptr<httplib::TaskQueue> workers;
  {
    std::lock_guard<std::mutex> lock(workers_mutex_);
    workers = std::move(workers_);
  }
  workers->shutdown();  // joins
  return ok;
}

void Server::Stop() {
  stopping_ = true;
  const uint64_t one = 1;
  if (stop_fd_ >= 0 && ::write(stop_fd_, &one, sizeof(one)) < 0) {
    // EAGAIN only: the counter is already non-zero, every waiter already woken.
  }
}

void Server::Dispatch(std::unique_ptr<Connection> c) {
  Connection* raw = c.release();
  std::lock_guard<std::mutex> lock(workers_mutex_);
  if (!workers_) {
    delete raw;
    return;
  }
  ++queued_;
  workers_->enqueue([this, raw] {
    --queued_;
    ++busy_;
    ServeConnection(std::unique_ptr<Connection>(raw));
    --busy_;
  });
  // Every worker taken (serving, or holding a kept-alive connection): one holder lets go.
  if (busy_ >= limits_.threads) {
    const uint64_t one = 1;
    if (::write(demand_fd_, &one, sizeof(one)) < 0) {
      // Only when the counter is full, far beyond the number of workers.
    }
  }
}

void Server::ServeConnection(std::unique_ptr<Connection> c) {
  for (;;) {
    StreamedPlace place(streamed_);
    if (limits_.max_streamed > 0 && BodyStreamed(c->buffer.view(), limits_.max_head) &&
        !place.Take(limits_.max_streamed)) {
      Refuse(*c, refusal_, 503, "server_busy",
             "the server already reads " + std::to_string(limits_.max_streamed) +
                 " large request bodies (over 64 KiB, chunked, or after 100 Continue), the most "
                 "it reads at once; try again in a few seconds");
      break;
    }
    const BodyPace pace{limits_.head_timeout, limits_.body_min_rate};
    ConnectionStream stream(c->fd, c->buffer, limits_.max_head,
                            Millis(read_timeout_sec_, read_timeout_usec_),
                            Millis(write_timeout_sec_, write_timeout_usec_), pace);
    const bool last = ++c->requests >= limits_.max_requests || stopping_;
    bool closed = false;
    const httplib::Request* served = nullptr;
    const bool ok = process_request(stream, last, closed, [&](httplib::Request& req) {
      stream.HeadRead();
      // Refused from its announced length alone: cpp-httplib would read it all (or wait out
      // the read timeout) before its 413.
      if (std::strtoull(req.get_header_value("Content-Length").c_str(), nullptr, 10) >
          payload_max_length_) {
        stream.RefuseBody();
      }
      // cpp-httplib reads a chunked body to its end, however long, into memory.
      if (strcasecmp(req.get_header_value("Transfer-Encoding").c_str(), "chunked") == 0) {
        stream.LimitChunkedBody(payload_max_length_);
        std::lock_guard<std::mutex> lock(streams_mutex_);
        streams_[&req] = &stream;
        served = &req;
      }
    });
    if (served != nullptr) {
      std::lock_guard<std::mutex> lock(streams_mutex_);
      streams_.erase(served);
    }
    if (stream.body_cut()) {
      // The 413 went out; what the client still sends of the body is thrown away by
      // the lobby, without this worker, until it closes the connection.
      place.Release();
      Drain(*c);
      break;
    }
    if (stream.timed_out()) {
      // Free before the answer: a client that tries again at once finds its place.
      place.Release();
      // cpp-httplib's answer (400) was not sent: the lobby drains the connection under this one.
      Refuse(*c, refusal_, 408, "request_timeout",
             SlowBodyMessage(pace, Millis(read_timeout_sec_, read_timeout_usec_)));
      break;
    }
    if (!ok || closed || last) return;  // closes it
    c->since = Clock::now();
    const size_t size = RequestSize(c->buffer.view(), limits_.max_head);
    // The client sent its next request already: served at once.
    if (size != std::string::npos && c->buffer.size() >= size) continue;
    if (!Hold(*c)) break;
  }
  // Stopping, the lobby answers a request already sent and closes an idle connection.
  lobby_->Add(std::move(c));
}

bool Server::BodyCut(const httplib::Request& req) const {
  std::lock_guard<std::mutex> lock(streams_mutex_);
  auto it = streams_.find(&req);
  return it != streams_.end() && it->second->body_cut();
}

bool Server::Hold(Connection& c) {
  const auto until = c.since + limits_.idle_timeout;
  for (;;) {
    if (stopping_ || queued_ > 0 || !c.buffer.empty()) return false;
    std::array<pollfd, 3> fds = {pollfd{c.fd, POLLIN, 0}, pollfd{stop_fd_, POLLIN, 0},
                                 pollfd{demand_fd_, POLLIN, 0}};
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(until - Clock::now());
    if (left.count() <= 0) return false;  // the lobby closes it
    int n = ::poll(fds.data(), fds.size(), static_cast<int>(left.count()));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0 || fds[1].revents != 0) return false;
    if (fds[2].revents != 0) {
      uint64_t count;
      // A stale call (the worker it was for came free by itself) is dropped.
      if (::read(demand_fd_, &count, sizeof(count)) == sizeof(count) && queued_ > 0) return false;
    }
    if (fds[0].revents == 0) continue;
    ssize_t got;
    do {
      got = ::recv(c.fd, c.buffer.Room(kHoldRead), kHoldRead, MSG_DONTWAIT);
    } while (got < 0 && errno == EINTR);
    if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) continue;
    if (got <= 0) return false;  // the client closed: the lobby sees it and closes too
    c.buffer.Commit(static_cast<size_t>(got));
    c.since = Clock::now();
    const size_t size = RequestSize(c.buffer.view(), limits_.max_head);
    // A request that is not whole yet waits in the lobby, without this worker.
    return size != std::string::npos && c.buffer.size() >= size;
  }
}

}  // namespace cadre::http
