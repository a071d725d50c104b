#include "cadre/http/lobby.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <iterator>
#include <utility>

#include "cadre/http/request_size.h"

namespace cadre::http {
namespace {

// After a refusal the lobby reads and throws away what the client still sends, so that closing
// does not reset the connection under the answer; this much at most, for this long at most.
constexpr size_t kDrainBytes = 64 << 20;
constexpr auto kDrainFor = std::chrono::seconds(2);
constexpr size_t kReadChunk = 16384;

}  // namespace

void Refuse(Connection& c, const RefusalBody& body, int status, const std::string& code,
            const std::string& message) {
  const std::string text = body(status, code, message);
  const std::string reason = status == 408   ? "Request Timeout"
                             : status == 413 ? "Payload Too Large"
                             : status == 414 ? "URI Too Long"
                             : status == 503 ? "Service Unavailable"
                                             : "Request Header Fields Too Large";
  const std::string answer = "HTTP/1.1 " + std::to_string(status) + " " + reason +
                             "\r\nContent-Type: application/json\r\nConnection: close\r\n" +
                             (status == 503 ? "Retry-After: 5\r\n" : "") +
                             "Content-Length: " + std::to_string(text.size()) + "\r\n\r\n" + text;
  ssize_t ignored = send(c.fd, answer.data(), answer.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
  (void)ignored;
  Drain(c);
}

void Drain(Connection& c) {
  shutdown(c.fd, SHUT_WR);
  c.buffer.Release();
  c.draining = true;
  c.drain_until = Clock::now() + kDrainFor;
}

void Tally::Add() {
  std::lock_guard<std::mutex> lock(mutex_);
  ++open_;
}

void Tally::Remove() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (--open_ == 0) none_.notify_all();
}

void Tally::WaitForNone() {
  std::unique_lock<std::mutex> lock(mutex_);
  none_.wait(lock, [this] { return open_ == 0; });
}

Connection::Connection(int socket, Tally& t) : fd(socket), tally(t) { tally.Add(); }

Connection::~Connection() {
  shutdown(fd, SHUT_RDWR);
  close(fd);
  tally.Remove();
}

Lobby::Lobby(LobbyLimits limits, RefusalBody refusal, Dispatch dispatch)
    : limits_(limits), refusal_(std::move(refusal)), dispatch_(std::move(dispatch)) {
  epoll_ = epoll_create1(EPOLL_CLOEXEC);
  wake_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  epoll_event e{};
  e.events = EPOLLIN;
  e.data.fd = wake_;
  epoll_ctl(epoll_, EPOLL_CTL_ADD, wake_, &e);
}

Lobby::~Lobby() {
  Stop();
  close(epoll_);
  close(wake_);
}

void Lobby::Start() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!thread_.joinable() && !stopped_) thread_ = std::thread([this] { Run(); });
}

void Lobby::Stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopped_ = true;
    incoming_.clear();
  }
  Wake();
  if (thread_.joinable()) thread_.join();
  waiting_.clear();  // closes them
}

void Lobby::Close() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    closing_ = true;
  }
  Wake();
}

void Lobby::Add(std::unique_ptr<Connection> c) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopped_) return;
    incoming_.push_back(std::move(c));
  }
  Wake();
}

void Lobby::Wake() {
  uint64_t one = 1;
  ssize_t ignored = write(wake_, &one, sizeof(one));
  (void)ignored;
}

void Lobby::Run() {
  std::vector<epoll_event> events(256);
  for (;;) {
    int n = epoll_wait(epoll_, events.data(), static_cast<int>(events.size()), 500);
    std::vector<std::unique_ptr<Connection>> incoming;
    bool closing;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (stopped_) break;
      incoming.swap(incoming_);
      closing = closing_;
    }
    for (auto& c : incoming) Admit(std::move(c));
    for (int i = 0; i < n; ++i) {
      int fd = events[i].data.fd;
      if (fd == wake_) {
        uint64_t count;
        ssize_t ignored = read(wake_, &count, sizeof(count));
        (void)ignored;
        continue;
      }
      auto it = waiting_.find(fd);
      if (it != waiting_.end()) Readable(it);
    }
    if (closing) CloseIdle();
    Expire();
  }
}

void Lobby::Admit(std::unique_ptr<Connection> c) {
  // An idle connection waits without a buffer.
  if (c->buffer.empty()) c->buffer.Release();
  epoll_event e{};
  e.events = EPOLLIN | EPOLLRDHUP;
  e.data.fd = c->fd;
  if (epoll_ctl(epoll_, EPOLL_CTL_ADD, c->fd, &e) != 0) return;  // closed with c
  const int fd = c->fd;
  waiting_[fd] = std::move(c);
  // Too many waiting: the one waiting longest for a request goes first.
  while (waiting_.size() > limits_.max_idle) {
    auto oldest = std::min_element(waiting_.begin(), waiting_.end(), [](auto& a, auto& b) {
      return a.second->since < b.second->since;
    });
    Drop(oldest);
  }
}

void Lobby::Drop(Waiting::iterator it) {
  epoll_ctl(epoll_, EPOLL_CTL_DEL, it->first, nullptr);
  waiting_.erase(it);
}

void Lobby::CloseIdle() {
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    auto next = std::next(it);
    // A request sent before the stop is in the socket: read it first.
    if (Readable(it)) {
      const Connection& c = *it->second;
      if (c.buffer.empty() && !c.draining) Drop(it);
    }
    it = next;
  }
}

bool Lobby::Readable(Waiting::iterator it) {
  Connection& c = *it->second;
  char drained[kReadChunk];
  for (;;) {
    // Read into the connection's own buffer, which the worker's stream takes over as it is.
    ssize_t n =
        recv(c.fd, c.draining ? drained : c.buffer.Room(kReadChunk), kReadChunk, MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    if (n <= 0) {  // the client closed, or the connection broke
      Drop(it);
      return false;
    }
    if (c.draining) {
      c.drained += static_cast<size_t>(n);
      if (c.drained > kDrainBytes) {
        Drop(it);
        return false;
      }
      continue;
    }
    if (c.buffer.empty()) c.since = Clock::now();  // the request's time starts
    c.buffer.Commit(static_cast<size_t>(n));
    if (c.want == std::string::npos) c.want = RequestSize(c.buffer.view(), limits_.max_head);
    if (c.want != std::string::npos && c.buffer.size() >= c.want) {
      epoll_ctl(epoll_, EPOLL_CTL_DEL, c.fd, nullptr);
      std::unique_ptr<Connection> ready = std::move(it->second);
      waiting_.erase(it);
      ready->want = std::string::npos;
      dispatch_(std::move(ready));
      return false;
    }
    if (c.want == std::string::npos && c.buffer.size() > limits_.max_head) {
      const bool line_ended = c.buffer.view().find('\n') < limits_.max_head;
      const std::string kib = std::to_string(limits_.max_head >> 10);
      Refuse(c, refusal_, line_ended ? 431 : 414,
             line_ended ? "request_header_fields_too_large" : "uri_too_long",
             line_ended
                 ? "the request's headers are larger than this server reads (" + kib + " KiB)"
                 : "the request line is longer than this server reads (" + kib + " KiB)");
    }
  }
}

void Lobby::Expire() {
  const auto now = Clock::now();
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    Connection& c = *it->second;
    auto next = std::next(it);
    if (c.draining) {
      if (now > c.drain_until) Drop(it);
    } else if (c.buffer.empty()) {
      if (now - c.since > limits_.idle_timeout) Drop(it);
    } else if (now - c.since > limits_.head_timeout) {
      Refuse(c, refusal_, 408, "request_timeout",
             "the request did not arrive whole within " +
                 std::to_string(limits_.head_timeout.count()) + " s");
    }
    it = next;
  }
}

}  // namespace cadre::http
