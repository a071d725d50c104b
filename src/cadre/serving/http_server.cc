#include "cadre/serving/http_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <memory>
#include <thread>

namespace cadre::serving {
namespace {

// Waits until `fd` is ready for `events`, at most `timeout_ms` (-1: no limit); false on timeout
// or error.
bool WaitReady(int fd, short events, int timeout_ms) {
  pollfd p{fd, events, 0};
  int n;
  do {
    n = ::poll(&p, 1, timeout_ms);
  } while (n < 0 && errno == EINTR);
  return n > 0;
}

int Millis(time_t sec, time_t usec) { return static_cast<int>(sec * 1000 + usec / 1000); }

void IpAndPort(const sockaddr_storage& addr, std::string& ip, int& port) {
  char text[INET6_ADDRSTRLEN] = "";
  if (addr.ss_family == AF_INET) {
    const auto& a = reinterpret_cast<const sockaddr_in&>(addr);
    inet_ntop(AF_INET, &a.sin_addr, text, sizeof(text));
    port = ntohs(a.sin_port);
  } else if (addr.ss_family == AF_INET6) {
    const auto& a = reinterpret_cast<const sockaddr_in6&>(addr);
    inet_ntop(AF_INET6, &a.sin6_addr, text, sizeof(text));
    port = ntohs(a.sin6_port);
  }
  ip = text;
}

// One accepted connection as cpp-httplib's request parser reads it: reads are buffered (the
// parser reads the request line and headers a byte at a time), and every read or write tries
// the socket first and waits (up to the timeout) only when it is not ready.
class ConnectionStream final : public httplib::Stream {
 public:
  ConnectionStream(int sock, int read_timeout_ms, int write_timeout_ms)
      : sock_(sock), read_timeout_ms_(read_timeout_ms), write_timeout_ms_(write_timeout_ms) {}

  bool buffered() const { return off_ < len_; }

  bool is_readable() const override {
    return buffered() || WaitReady(sock_, POLLIN, read_timeout_ms_);
  }
  bool is_writable() const override { return WaitReady(sock_, POLLOUT, write_timeout_ms_); }

  ssize_t read(char* ptr, size_t size) override {
    if (buffered()) {
      size_t n = std::min(size, len_ - off_);
      std::memcpy(ptr, buf_.data() + off_, n);
      off_ += n;
      return static_cast<ssize_t>(n);
    }
    // Large reads (a body) go straight to the caller; small ones fill the buffer.
    const bool direct = size >= buf_.size();
    ssize_t n = Receive(direct ? ptr : buf_.data(), direct ? size : buf_.size());
    if (direct || n <= 0) return n;
    off_ = 0;
    len_ = static_cast<size_t>(n);
    return read(ptr, size);
  }

  ssize_t write(const char* ptr, size_t size) override {
    for (;;) {
      ssize_t n = ::send(sock_, ptr, size, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n >= 0) return n;
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) return -1;
      if (!WaitReady(sock_, POLLOUT, write_timeout_ms_)) return -1;
    }
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    if (::getpeername(sock_, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
      IpAndPort(addr, ip, port);
    }
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    if (::getsockname(sock_, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
      IpAndPort(addr, ip, port);
    }
  }
  socket_t socket() const override { return sock_; }

 private:
  ssize_t Receive(char* ptr, size_t size) {
    for (;;) {
      ssize_t n = ::recv(sock_, ptr, size, MSG_DONTWAIT);
      if (n >= 0) return n;
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) return -1;
      if (!WaitReady(sock_, POLLIN, read_timeout_ms_)) return -1;
    }
  }

  const int sock_;
  const int read_timeout_ms_;
  const int write_timeout_ms_;
  std::array<char, 16384> buf_;
  size_t off_ = 0;
  size_t len_ = 0;
};

}  // namespace

GracefulServer::GracefulServer() : stop_fd_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
  // An answer given while stopping tells the client not to send another on its connection.
  set_post_routing_handler([this](const httplib::Request&, httplib::Response& res) {
    if (stopping_ && !res.has_header("Connection")) res.set_header("Connection", "close");
  });
}

GracefulServer::~GracefulServer() {
  Stop();
  socket_t sock = svr_sock_.exchange(INVALID_SOCKET);
  if (sock != INVALID_SOCKET) ::close(sock);
  if (stop_fd_ >= 0) ::close(stop_fd_);
}

int GracefulServer::Bind(const std::string& host, int port, std::string* error) {
  if (stop_fd_ < 0) {
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

bool GracefulServer::Serve(int threads) {
  const socket_t listener = svr_sock_;
  if (listener == INVALID_SOCKET) return false;
  std::unique_ptr<httplib::TaskQueue> pool(new httplib::ThreadPool(std::max(1, threads)));
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
      int yes = 1;
      ::setsockopt(sock, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof(yes));
      pool->enqueue([this, sock] { process_and_close_socket(sock); });
    }
  }
  socket_t sock = svr_sock_.exchange(INVALID_SOCKET);
  if (sock != INVALID_SOCKET) ::close(sock);
  pool->shutdown();  // serves what was accepted, then joins
  return ok;
}

void GracefulServer::Stop() {
  stopping_ = true;
  const uint64_t one = 1;
  if (stop_fd_ >= 0 && ::write(stop_fd_, &one, sizeof(one)) < 0) {
    // EAGAIN only: the counter is already non-zero, every waiter already woken.
  }
}

bool GracefulServer::WaitForRequest(socket_t sock, bool buffered) {
  if (buffered) return true;  // the client sent it with the previous one
  if (!stopping_) {
    std::array<pollfd, 2> fds = {pollfd{sock, POLLIN, 0}, pollfd{stop_fd_, POLLIN, 0}};
    int n;
    do {
      n = ::poll(fds.data(), fds.size(), static_cast<int>(keep_alive_timeout_sec_ * 1000));
    } while (n < 0 && errno == EINTR);
    if (n <= 0) return false;  // idle past the keep-alive timeout
    if (fds[0].revents != 0) return true;
  }
  // Stopping: a request already sent is answered; an idle connection is closed.
  return WaitReady(sock, POLLIN, 0);
}

bool GracefulServer::process_and_close_socket(socket_t sock) {
  ConnectionStream stream(sock, Millis(read_timeout_sec_, read_timeout_usec_),
                          Millis(write_timeout_sec_, write_timeout_usec_));
  bool ok = true;
  for (size_t served = 0; WaitForRequest(sock, stream.buffered());) {
    const bool last = stopping_ || ++served >= keep_alive_max_count_;
    bool closed = false;
    ok = process_request(stream, last, closed, nullptr);
    if (!ok || closed || last || stopping_) break;
  }
  ::shutdown(sock, SHUT_RDWR);
  ::close(sock);
  return ok;
}

}  // namespace cadre::serving
