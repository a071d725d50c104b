#include "cadre/http/stream.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace cadre::http {
namespace {

constexpr size_t kReadBuffer = 16384;

void Address(int fd, bool peer, std::string& ip, int& port) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  int rc = peer ? getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len)
                : getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  if (rc != 0) return;
  char host[NI_MAXHOST], service[NI_MAXSERV];
  if (getnameinfo(reinterpret_cast<sockaddr*>(&addr), len, host, sizeof(host), service,
                  sizeof(service), NI_NUMERICHOST | NI_NUMERICSERV) == 0) {
    ip = host;
    port = std::atoi(service);
  }
}

}  // namespace

void ChunkCount::Feed(const char* bytes, size_t size) {
  for (size_t i = 0; i < size && state_ != State::kDone; ++i) {
    const char ch = bytes[i];
    switch (state_) {
      case State::kSize:
        if (std::isxdigit(static_cast<unsigned char>(ch))) {
          const size_t digit = std::isdigit(static_cast<unsigned char>(ch))
                                   ? static_cast<size_t>(ch - '0')
                                   : static_cast<size_t>(std::tolower(ch) - 'a' + 10);
          // A size past any limit stays past it, without overflowing.
          size_ = std::min(size_ * 16 + digit, SIZE_MAX >> 8);
          break;
        }
        state_ = State::kExtension;
        [[fallthrough]];
      case State::kExtension:
        if (ch == '\n') state_ = size_ == 0 ? State::kDone : State::kData;
        break;
      case State::kData: {
        const size_t take = std::min(size_, size - i);
        data_ += take;
        size_ -= take;
        i += take - 1;
        if (size_ == 0) state_ = State::kDataEnd;
        break;
      }
      case State::kDataEnd:
        if (ch == '\n') state_ = State::kSize;
        break;
      case State::kDone:
        break;
    }
  }
}

bool WaitReady(int fd, short events, int timeout_ms) {
  pollfd p{fd, events, 0};
  int n;
  do {
    n = ::poll(&p, 1, timeout_ms);
  } while (n < 0 && errno == EINTR);
  return n > 0;
}

ConnectionStream::ConnectionStream(int fd, Bytes& pending, size_t max_head, int read_timeout_ms,
                                   int write_timeout_ms, BodyPace pace)
    : fd_(fd),
      pending_(pending),
      max_head_(max_head),
      pace_(pace),
      read_timeout_ms_(read_timeout_ms),
      write_timeout_ms_(write_timeout_ms) {}

void ConnectionStream::HeadRead() {
  head_read_ = true;
  head_size_ = consumed_;
  body_since_ = std::chrono::steady_clock::now();
}

int ConnectionStream::WaitMillis() const {
  if (!head_read_ || pace_.min_rate == 0) return read_timeout_ms_;
  using std::chrono::milliseconds;
  const size_t body = consumed_ - head_size_;
  const auto deadline = body_since_ + pace_.grace + milliseconds(body / pace_.min_rate * 1000) +
                        milliseconds(body % pace_.min_rate * 1000 / pace_.min_rate);
  const auto left =
      std::chrono::ceil<milliseconds>(deadline - std::chrono::steady_clock::now()).count();
  if (left <= 0) return 0;
  return read_timeout_ms_ < 0 ? static_cast<int>(std::min<int64_t>(left, INT32_MAX))
                              : static_cast<int>(std::min<int64_t>(left, read_timeout_ms_));
}

bool ConnectionStream::is_readable() const {
  return !pending_.empty() || WaitReady(fd_, POLLIN, read_timeout_ms_);
}

bool ConnectionStream::is_writable() const {
  if (!WaitReady(fd_, POLLOUT, write_timeout_ms_)) return false;
  if (!WaitReady(fd_, POLLIN, 0)) return true;
  char byte;
  ssize_t n = recv(fd_, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  return n > 0 || (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR));
}

ssize_t ConnectionStream::read(char* ptr, size_t size) {
  if (head_read_ && (body_refused_ || body_cut_)) {
    body_cut_ = true;
    return -1;
  }
  const ssize_t n = ReadSome(ptr, size);
  if (n > 0 && head_read_ && chunked_max_ != std::string::npos) {
    chunks_.Feed(ptr, static_cast<size_t>(n));
    if (chunks_.data() > chunked_max_) {
      body_cut_ = true;
      return -1;
    }
  }
  return n;
}

ssize_t ConnectionStream::ReadSome(char* ptr, size_t size) {
  if (!head_read_) {
    if (consumed_ >= max_head_) return -1;
    size = std::min(size, max_head_ - consumed_);
  }
  if (pending_.empty()) {
    // Large reads (a body) go straight to the caller; small ones fill the buffer.
    if (size >= kReadBuffer) {
      ssize_t n = Receive(ptr, size);
      if (n > 0) consumed_ += static_cast<size_t>(n);
      return n;
    }
    ssize_t n = Receive(pending_.Room(kReadBuffer), kReadBuffer);
    if (n <= 0) return n;
    pending_.Commit(static_cast<size_t>(n));
  }
  size_t n = std::min(size, pending_.size());
  pending_.Take(ptr, n);
  consumed_ += n;
  return static_cast<ssize_t>(n);
}

ssize_t ConnectionStream::write(const char* ptr, size_t size) {
  if (timed_out_) return -1;
  for (;;) {
    ssize_t n = ::send(fd_, ptr, size, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n >= 0) return n;
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return -1;
    if (!WaitReady(fd_, POLLOUT, write_timeout_ms_)) return -1;
  }
}

void ConnectionStream::get_remote_ip_and_port(std::string& ip, int& port) const {
  Address(fd_, true, ip, port);
}

void ConnectionStream::get_local_ip_and_port(std::string& ip, int& port) const {
  Address(fd_, false, ip, port);
}

ssize_t ConnectionStream::Receive(char* ptr, size_t size) {
  if (timed_out_) return -1;
  for (;;) {
    ssize_t n = ::recv(fd_, ptr, size, MSG_DONTWAIT);
    if (n >= 0) return n;
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return -1;
    const int wait = WaitMillis();
    if (wait != 0 && WaitReady(fd_, POLLIN, wait)) continue;
    // The body's deadline came before the read timeout: looked at again (it has passed now).
    if (wait != 0 && wait != read_timeout_ms_) continue;
    // Nothing came within the read timeout, or the body fell behind: for a body, the caller
    // answers 408.
    timed_out_ = head_read_;
    return -1;
  }
}

}  // namespace cadre::http
