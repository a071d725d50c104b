#include "cadre/net/socket.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <climits>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "cadre/net/resolver.h"

namespace cadre::net {
namespace {

std::string ErrnoText(int err) { return std::strerror(err); }

Status SysError(std::string_view what, int err) {
  return IoError(std::string(what) + ": " + ErrnoText(err));
}

void SetNonBlocking(int fd) {
  int flags = ::fcntl(fd, F_GETFL, 0);
  if (flags >= 0 && !(flags & O_NONBLOCK)) ::fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

std::string FormatSockaddr(const sockaddr* sa) {
  char ip[INET6_ADDRSTRLEN] = "?";
  uint16_t port = 0;
  if (sa->sa_family == AF_INET) {
    auto* in = reinterpret_cast<const sockaddr_in*>(sa);
    ::inet_ntop(AF_INET, &in->sin_addr, ip, sizeof(ip));
    port = ntohs(in->sin_port);
    return std::string(ip) + ":" + std::to_string(port);
  }
  if (sa->sa_family == AF_INET6) {
    auto* in6 = reinterpret_cast<const sockaddr_in6*>(sa);
    ::inet_ntop(AF_INET6, &in6->sin6_addr, ip, sizeof(ip));
    port = ntohs(in6->sin6_port);
    return "[" + std::string(ip) + "]:" + std::to_string(port);
  }
  return "?";
}

// Resolves host:port for a stream socket. `passive` resolves a listen address.
Status Resolve(const std::string& host, uint16_t port, bool passive, const std::string& hosts_file,
               addrinfo** out) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
  std::string service = std::to_string(port);
  std::string note;
  std::string resolved = ResolveWithHostsFile(hosts_file, host, &note);
  const char* node = resolved.empty() ? nullptr : resolved.c_str();
  if (passive && node == nullptr) hints.ai_family = AF_INET;
  int rc = ::getaddrinfo(node, service.c_str(), &hints, out);
  if (rc != 0) {
    std::string why = rc == EAI_SYSTEM ? ErrnoText(errno) : ::gai_strerror(rc);
    if (!note.empty()) why += " (" + note + ")";
    return InvalidArgument("cannot resolve host '" + host + "': " + why);
  }
  return Status::Ok();
}

// poll() one descriptor until `events` or the deadline; EINTR restarts with the time left.
Status PollFor(int fd, short events, Deadline deadline, std::string_view what) {
  for (;;) {
    pollfd p{fd, events, 0};
    int rc = ::poll(&p, 1, deadline.poll_timeout_ms());
    if (rc > 0) return Status::Ok();  // errors and hang-ups surface on the next syscall
    if (rc == 0) return TimeoutError(std::string(what) + " timed out");
    if (errno != EINTR) return SysError(std::string(what) + " poll", errno);
  }
}

// True when the socket is connected to itself (local and peer address equal).
bool IsSelfConnected(int fd) {
  sockaddr_storage local{}, peer{};
  socklen_t llen = sizeof(local), plen = sizeof(peer);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &llen) != 0) return false;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &plen) != 0) return false;
  return FormatSockaddr(reinterpret_cast<sockaddr*>(&local)) ==
         FormatSockaddr(reinterpret_cast<sockaddr*>(&peer));
}

bool RetryableConnectError(int err) {
  return err == ECONNREFUSED || err == ECONNRESET || err == ETIMEDOUT || err == EHOSTUNREACH ||
         err == ENETUNREACH || err == EAGAIN || err == ECONNABORTED;
}

// One non-blocking connect attempt to `ai`, waiting at most until `deadline`. On failure *err is
// the errno of the failure (0 for a timeout).
Status ConnectOnce(const addrinfo* ai, Deadline deadline, Socket* out, int* err) {
  *err = 0;
  int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
  if (fd < 0) {
    *err = errno;
    return SysError("socket", errno);
  }
  Socket s(fd);
  if (::connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
    if (errno != EINPROGRESS) {
      *err = errno;
      return SysError("connect", errno);
    }
    CADRE_RETURN_IF_ERROR(PollFor(fd, POLLOUT, deadline, "connect"));
    int so_error = 0;
    socklen_t len = sizeof(so_error);
    ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &so_error, &len);
    if (so_error != 0) {
      *err = so_error;
      return SysError("connect", so_error);
    }
  }
  // Connecting to a free port in the ephemeral range can "succeed" by TCP simultaneous open
  // onto itself; that is nobody listening, so report it as a refusal to be retried.
  if (IsSelfConnected(fd)) {
    *err = ECONNREFUSED;
    return IoError("connect: connected to itself (nobody listening)");
  }
  CADRE_RETURN_IF_ERROR(s.SetNoDelay(true));
  *out = std::move(s);
  return Status::Ok();
}

}  // namespace

std::string HostPort::ToString() const {
  if (host.find(':') != std::string::npos) return "[" + host + "]:" + std::to_string(port);
  return host + ":" + std::to_string(port);
}

Status ParseHostPort(std::string_view text, std::string_view what, HostPort* out,
                     bool allow_port_zero) {
  auto bad = [&](std::string_view why) {
    return InvalidArgument(std::string(what) + "='" + std::string(text) + "' is not host:port (" +
                           std::string(why) + ")");
  };
  std::string_view host, port;
  if (!text.empty() && text.front() == '[') {
    size_t close = text.find(']');
    if (close == std::string_view::npos) return bad("unclosed '['");
    host = text.substr(1, close - 1);
    if (close + 1 >= text.size() || text[close + 1] != ':') return bad("missing ':port'");
    port = text.substr(close + 2);
  } else {
    size_t colon = text.rfind(':');
    if (colon == std::string_view::npos) return bad("missing ':port'");
    host = text.substr(0, colon);
    if (host.find(':') != std::string_view::npos) return bad("IPv6 hosts need [brackets]");
    port = text.substr(colon + 1);
  }
  if (host.empty()) return bad("empty host");
  unsigned value = 0;
  auto [ptr, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (port.empty() || ec != std::errc() || ptr != port.data() + port.size() || value > 65535) {
    return bad("port must be a number from 1 to 65535");
  }
  if (value == 0 && !allow_port_zero) return bad("port 0");
  out->host = std::string(host);
  out->port = static_cast<uint16_t>(value);
  return Status::Ok();
}

Socket::Socket(int fd) : fd_(fd) {
  if (fd_ >= 0) SetNonBlocking(fd_);
}

Socket::~Socket() { Close(); }

Socket::Socket(Socket&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }

Socket& Socket::operator=(Socket&& other) noexcept {
  if (this != &other) {
    Close();
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

void Socket::Close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

int Socket::Release() {
  int fd = fd_;
  fd_ = -1;
  return fd;
}

void Socket::Shutdown() {
  if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
}

Status Socket::Listen(const std::string& host, uint16_t port, int backlog, Socket* out,
                      const std::string& hosts_file) {
  std::string bind_host = host == "0.0.0.0" ? std::string() : host;
  addrinfo* list = nullptr;
  CADRE_RETURN_IF_ERROR(Resolve(bind_host, port, /*passive=*/true, hosts_file, &list));
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> guard(list, &::freeaddrinfo);
  std::string where = HostPort{host.empty() ? "0.0.0.0" : host, port}.ToString();
  Status last = IoError("no address to listen on for " + where);
  for (addrinfo* ai = list; ai != nullptr; ai = ai->ai_next) {
    int fd =
        ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      last = SysError("socket for " + where, errno);
      continue;
    }
    Socket s(fd);
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
      last = SysError("cannot bind " + where, errno);
      continue;
    }
    if (::listen(fd, backlog) != 0) {
      last = SysError("cannot listen on " + where, errno);
      continue;
    }
    *out = std::move(s);
    return Status::Ok();
  }
  return last;
}

Status Socket::Connect(const std::string& host, uint16_t port, Deadline deadline, Socket* out,
                       const std::string& hosts_file, bool retry_refused) {
  std::string where = HostPort{host, port}.ToString();
  auto backoff = std::chrono::milliseconds(5);
  std::string last_error = "no attempt made";
  for (;;) {
    addrinfo* list = nullptr;
    Status resolved = Resolve(host, port, /*passive=*/false, hosts_file, &list);
    if (resolved.ok()) {
      std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> guard(list, &::freeaddrinfo);
      for (addrinfo* ai = list; ai != nullptr; ai = ai->ai_next) {
        int err = 0;
        Status s = ConnectOnce(ai, deadline, out, &err);
        if (s.ok()) return s;
        last_error = s.message();
        if (err != 0 && (!RetryableConnectError(err) || (err == ECONNREFUSED && !retry_refused))) {
          return IoError("cannot connect to " + where + ": " + s.message());
        }
      }
    } else {
      // A learner's name may not resolve until its peer is up; keep trying until the deadline.
      last_error = resolved.message();
    }
    if (deadline.expired()) {
      return TimeoutError("cannot connect to " + where +
                          " before the deadline (last error: " + last_error + ")");
    }
    auto sleep = std::min<Duration>(backoff, deadline.remaining());
    std::this_thread::sleep_for(sleep);
    backoff = std::min<Duration>(backoff * 2, std::chrono::milliseconds(200));
  }
}

Status Socket::Accept(Deadline deadline, Socket* out) const {
  for (;;) {
    int fd = ::accept4(fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) {
      Socket s(fd);
      CADRE_RETURN_IF_ERROR(s.SetNoDelay(true));
      *out = std::move(s);
      return Status::Ok();
    }
    if (errno == EINTR || errno == ECONNABORTED) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return SysError("accept", errno);
    CADRE_RETURN_IF_ERROR(PollFor(fd_, POLLIN, deadline, "accept"));
  }
}

Status Socket::SendSome(const void* data, size_t size, size_t* done) {
  *done = 0;
  for (;;) {
    ssize_t n = ::send(fd_, data, size, MSG_NOSIGNAL);
    if (n >= 0) {
      *done = static_cast<size_t>(n);
      return Status::Ok();
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return Status::Ok();
    return SysError("send to " + peer_address(), errno);
  }
}

Status Socket::RecvSome(void* data, size_t size, size_t* done) {
  *done = 0;
  for (;;) {
    ssize_t n = ::recv(fd_, data, size, 0);
    if (n > 0) {
      *done = static_cast<size_t>(n);
      return Status::Ok();
    }
    if (n == 0) return IoError("connection closed by peer");
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return Status::Ok();
    return SysError("recv", errno);
  }
}

Status Socket::SendAll(const void* data, size_t size, Deadline deadline) {
  iovec part{const_cast<void*>(data), size};
  return SendAll(std::span<const iovec>(&part, 1), deadline);
}

Status Socket::SendAll(std::span<const iovec> parts, Deadline deadline) {
  std::vector<iovec> iov(parts.begin(), parts.end());
  size_t total = 0;
  for (const auto& p : iov) total += p.iov_len;
  size_t sent = 0, first = 0;
  while (sent < total) {
    msghdr msg{};
    msg.msg_iov = iov.data() + first;
    msg.msg_iovlen = std::min<size_t>(iov.size() - first, IOV_MAX);
    ssize_t n = ::sendmsg(fd_, &msg, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        return SysError(
            "send (" + std::to_string(sent) + " of " + std::to_string(total) + " bytes sent)",
            errno);
      }
      Status ready = PollFor(fd_, POLLOUT, deadline, "send");
      if (!ready.ok()) {
        return ready.WithContext(std::to_string(sent) + " of " + std::to_string(total) +
                                 " bytes sent");
      }
      continue;
    }
    sent += static_cast<size_t>(n);
    size_t left = static_cast<size_t>(n);
    while (first < iov.size() && left >= iov[first].iov_len) {
      left -= iov[first].iov_len;
      ++first;
    }
    if (left > 0) {
      iov[first].iov_base = static_cast<char*>(iov[first].iov_base) + left;
      iov[first].iov_len -= left;
    }
  }
  return Status::Ok();
}

Status Socket::RecvAll(void* data, size_t size, Deadline deadline) {
  auto* p = static_cast<uint8_t*>(data);
  size_t got = 0;
  while (got < size) {
    ssize_t n = ::recv(fd_, p + got, size - got, 0);
    if (n > 0) {
      got += static_cast<size_t>(n);
      continue;
    }
    auto progress = std::to_string(got) + " of " + std::to_string(size) + " bytes";
    if (n == 0) return IoError("connection closed by peer after " + progress);
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      return SysError("recv (" + progress + " received)", errno);
    }
    Status ready = PollFor(fd_, POLLIN, deadline, "recv");
    if (!ready.ok()) return ready.WithContext(progress + " received");
  }
  return Status::Ok();
}

Status Socket::WaitReadable(Deadline deadline) const {
  return PollFor(fd_, POLLIN, deadline, "wait for data");
}

Status Socket::SetNoDelay(bool on) {
  int v = on ? 1 : 0;
  if (::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &v, sizeof(v)) != 0) {
    return SysError("setsockopt TCP_NODELAY", errno);
  }
  return Status::Ok();
}

Status Socket::SetBufferSizes(int send_bytes, int recv_bytes) {
  if (send_bytes > 0 &&
      ::setsockopt(fd_, SOL_SOCKET, SO_SNDBUF, &send_bytes, sizeof(send_bytes)) != 0) {
    return SysError("setsockopt SO_SNDBUF", errno);
  }
  if (recv_bytes > 0 &&
      ::setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &recv_bytes, sizeof(recv_bytes)) != 0) {
    return SysError("setsockopt SO_RCVBUF", errno);
  }
  return Status::Ok();
}

uint16_t Socket::local_port() const {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (fd_ < 0 || ::getsockname(fd_, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return 0;
  if (ss.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  if (ss.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
  return 0;
}

std::string Socket::peer_address() const {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (fd_ < 0 || ::getpeername(fd_, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "?";
  return FormatSockaddr(reinterpret_cast<sockaddr*>(&ss));
}

}  // namespace cadre::net
