#include "cadre/service/http_server.h"

#include <netdb.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "cadre/service/accounts.h"

namespace cadre::service {
namespace {

using Clock = std::chrono::steady_clock;

// After a refusal the lobby reads and throws away what the client still sends, so that closing
// does not reset the connection under the answer; this much at most, for this long at most.
constexpr size_t kDrainBytes = 64 << 20;
constexpr auto kDrainFor = std::chrono::seconds(2);

// A body the lobby waits for along with its head, so that a client sending a small body slowly
// does not hold a worker either: API bodies are small; larger ones, chunked ones and those whose
// client waits for 100 Continue are read by the worker.
constexpr size_t kLobbyBody = 64 << 10;

// The body to wait for with the head `head` (lower case), when it is small.
size_t SmallBody(const std::string& head) {
  if (head.find("\nexpect:") != std::string::npos ||
      head.find("\ntransfer-encoding:") != std::string::npos) {
    return 0;
  }
  size_t at = head.find("\ncontent-length:");
  if (at == std::string::npos) return 0;
  at += std::strlen("\ncontent-length:");
  while (at < head.size() && (head[at] == ' ' || head[at] == '\t')) ++at;
  size_t length = 0;
  auto [end, ec] = std::from_chars(head.data() + at, head.data() + head.size(), length);
  (void)end;
  return ec == std::errc() && length <= kLobbyBody ? length : 0;
}

// How many bytes of `bytes` make the request a worker can serve without waiting: its head
// (cpp-httplib reads lines up to '\n' and ends the head at a line that is "\r\n" alone) and its
// small body. npos while the head has not ended within `max_head`.
size_t RequestSize(const std::string& bytes, size_t max_head) {
  size_t end = bytes.find("\n\r\n");
  if (end == std::string::npos || end + 3 > max_head) return std::string::npos;
  std::string head = bytes.substr(0, end + 3);
  std::transform(head.begin(), head.end(), head.begin(),
                 [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  return end + 3 + SmallBody(head);
}

bool Wait(int fd, short events, time_t sec, time_t usec) {
  pollfd p{fd, events, 0};
  const int ms = static_cast<int>(sec * 1000 + usec / 1000);
  int n;
  do {
    n = poll(&p, 1, ms);
  } while (n < 0 && errno == EINTR);
  return n > 0;
}

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

// A connection's socket for cpp-httplib's request parsing, starting with the bytes the lobby
// has already read. Until the head has been read (HeadRead) at most `max_head` bytes are given.
class BufferedStream : public httplib::Stream {
 public:
  BufferedStream(int fd, std::string pending, size_t max_head, time_t read_sec, time_t read_usec,
                 time_t write_sec, time_t write_usec)
      : fd_(fd),
        pending_(std::move(pending)),
        max_head_(max_head),
        read_sec_(read_sec),
        read_usec_(read_usec),
        write_sec_(write_sec),
        write_usec_(write_usec) {}

  void HeadRead() { head_read_ = true; }
  // What was read from the socket and not used by this request (the next one's head).
  std::string TakeUnread() { return pending_.substr(pos_); }

  bool is_readable() const override {
    return pos_ < pending_.size() || Wait(fd_, POLLIN, read_sec_, read_usec_);
  }
  // And the client is still there: a follower whose client has gone is told so here (as
  // cpp-httplib's own stream does), the next time it looks.
  bool is_writable() const override {
    if (!Wait(fd_, POLLOUT, write_sec_, write_usec_)) return false;
    if (!Wait(fd_, POLLIN, 0, 0)) return true;
    char byte;
    ssize_t n = recv(fd_, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    return n > 0 || (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR));
  }

  ssize_t read(char* ptr, size_t size) override {
    if (!head_read_) {
      if (consumed_ >= max_head_) return -1;
      size = std::min(size, max_head_ - consumed_);
    }
    if (pos_ == pending_.size()) {
      pending_.clear();
      pos_ = 0;
      if (!Wait(fd_, POLLIN, read_sec_, read_usec_)) return -1;
      char buffer[16384];
      ssize_t n;
      do {
        n = recv(fd_, buffer, sizeof(buffer), 0);
      } while (n < 0 && errno == EINTR);
      if (n <= 0) return n;
      pending_.assign(buffer, static_cast<size_t>(n));
    }
    size_t n = std::min(size, pending_.size() - pos_);
    std::memcpy(ptr, pending_.data() + pos_, n);
    pos_ += n;
    consumed_ += n;
    return static_cast<ssize_t>(n);
  }

  ssize_t write(const char* ptr, size_t size) override {
    if (!is_writable()) return -1;
    ssize_t n;
    do {
      n = send(fd_, ptr, size, MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    return n;
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    Address(fd_, true, ip, port);
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    Address(fd_, false, ip, port);
  }
  socket_t socket() const override { return fd_; }

 private:
  int fd_;
  std::string pending_;
  size_t pos_ = 0;
  size_t consumed_ = 0;
  size_t max_head_;
  bool head_read_ = false;
  time_t read_sec_, read_usec_, write_sec_, write_usec_;
};

void CloseSocket(int fd) {
  shutdown(fd, SHUT_RDWR);
  close(fd);
}

}  // namespace

struct HttpServer::Connection {
  explicit Connection(int socket) : fd(socket) {}
  ~Connection() {
    if (fd >= 0) CloseSocket(fd);
  }
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  int fd;
  std::string buffer;               // read and not yet served: the start of the next request
  size_t requests = 0;              // served on this connection
  Clock::time_point since;          // waiting since (idle), or its head's first byte came
  size_t want = std::string::npos;  // the request's size, once its head has ended
  bool draining = false;            // refused: what the client still sends is thrown away
  size_t drained = 0;
  Clock::time_point drain_until;
};

// The waiting connections and the one thread that watches them (see the header).
class HttpServer::Lobby {
 public:
  using Dispatch = std::function<void(std::unique_ptr<Connection>)>;

  Lobby(const HttpLimits& limits, Dispatch dispatch)
      : limits_(limits), dispatch_(std::move(dispatch)) {
    epoll_ = epoll_create1(EPOLL_CLOEXEC);
    wake_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    epoll_event e{};
    e.events = EPOLLIN;
    e.data.fd = wake_;
    epoll_ctl(epoll_, EPOLL_CTL_ADD, wake_, &e);
  }

  ~Lobby() {
    Stop();
    close(epoll_);
    close(wake_);
  }

  void Start(size_t max_idle) {
    std::lock_guard<std::mutex> lock(mutex_);
    limits_.max_idle = max_idle;
    if (!thread_.joinable() && !stopped_) thread_ = std::thread([this] { Run(); });
  }

  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopped_ = true;
      incoming_.clear();
    }
    Wake();
    if (thread_.joinable()) thread_.join();
  }

  // From any thread; a connection that comes after Stop() is closed.
  void Add(std::unique_ptr<Connection> c) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (stopped_) return;
      incoming_.push_back(std::move(c));
    }
    Wake();
  }

 private:
  void Wake() {
    uint64_t one = 1;
    ssize_t ignored = write(wake_, &one, sizeof(one));
    (void)ignored;
  }

  void Run() {
    std::vector<epoll_event> events(256);
    for (;;) {
      int n = epoll_wait(epoll_, events.data(), static_cast<int>(events.size()), 500);
      {
        std::lock_guard<std::mutex> lock(mutex_);
        if (stopped_) break;
        for (auto& c : incoming_) Admit(std::move(c));
        incoming_.clear();
      }
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
      Expire();
    }
    waiting_.clear();  // closes them
  }

  void Admit(std::unique_ptr<Connection> c) {
    c->since = Clock::now();
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

  using Waiting = std::unordered_map<int, std::unique_ptr<Connection>>;

  void Drop(Waiting::iterator it) {
    epoll_ctl(epoll_, EPOLL_CTL_DEL, it->first, nullptr);
    waiting_.erase(it);
  }

  void Readable(Waiting::iterator it) {
    Connection& c = *it->second;
    char buffer[16384];
    for (;;) {
      ssize_t n = recv(c.fd, buffer, sizeof(buffer), MSG_DONTWAIT);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      if (n <= 0) return Drop(it);  // the client closed, or the connection broke
      if (c.draining) {
        c.drained += static_cast<size_t>(n);
        if (c.drained > kDrainBytes) return Drop(it);
        continue;
      }
      if (c.buffer.empty()) c.since = Clock::now();  // the request's time starts
      c.buffer.append(buffer, static_cast<size_t>(n));
      if (c.want == std::string::npos) c.want = RequestSize(c.buffer, limits_.max_head);
      if (c.want != std::string::npos && c.buffer.size() >= c.want) {
        epoll_ctl(epoll_, EPOLL_CTL_DEL, c.fd, nullptr);
        std::unique_ptr<Connection> ready = std::move(it->second);
        waiting_.erase(it);
        ready->want = std::string::npos;
        dispatch_(std::move(ready));
        return;
      }
      if (c.want == std::string::npos && c.buffer.size() > limits_.max_head) {
        const bool line_ended = c.buffer.find('\n') < limits_.max_head;
        Refuse(c, line_ended ? 431 : 414,
               line_ended ? "request_header_fields_too_large" : "uri_too_long",
               line_ended ? "the request's headers are larger than this server reads (" +
                                std::to_string(limits_.max_head >> 10) + " KiB)"
                          : "the request line is longer than this server reads (" +
                                std::to_string(limits_.max_head >> 10) + " KiB)");
      }
    }
  }

  // Answers and starts closing: the client's further bytes are read and thrown away.
  void Refuse(Connection& c, int status, const std::string& code, const std::string& message) {
    nlohmann::json body = {
        {"trace", RandomHex(16)},
        {"errors", nlohmann::json::array({{{"code", code}, {"message", message}}})}};
    std::string text = body.dump();
    std::string reason = status == 408   ? "Request Timeout"
                         : status == 414 ? "URI Too Long"
                                         : "Request Header Fields Too Large";
    std::string answer = "HTTP/1.1 " + std::to_string(status) + " " + reason +
                         "\r\nContent-Type: application/json\r\nConnection: close\r\n"
                         "Content-Length: " +
                         std::to_string(text.size()) + "\r\n\r\n" + text;
    ssize_t ignored = send(c.fd, answer.data(), answer.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    (void)ignored;
    shutdown(c.fd, SHUT_WR);
    std::string().swap(c.buffer);
    c.draining = true;
    c.drain_until = Clock::now() + kDrainFor;
  }

  void Expire() {
    const auto now = Clock::now();
    for (auto it = waiting_.begin(); it != waiting_.end();) {
      Connection& c = *it->second;
      auto next = std::next(it);
      if (c.draining) {
        if (now > c.drain_until) Drop(it);
      } else if (c.buffer.empty()) {
        if (now - c.since > limits_.idle_timeout) Drop(it);
      } else if (now - c.since > limits_.head_timeout) {
        Refuse(c, 408, "request_timeout",
               "the request did not arrive whole within " +
                   std::to_string(limits_.head_timeout.count()) + " s");
      }
      it = next;
    }
  }

  HttpLimits limits_;  // set before the thread starts
  const Dispatch dispatch_;
  int epoll_ = -1;
  int wake_ = -1;
  std::thread thread_;
  std::mutex mutex_;
  bool stopped_ = false;                               // guarded by mutex_
  std::vector<std::unique_ptr<Connection>> incoming_;  // guarded by mutex_
  Waiting waiting_;                                    // the lobby thread's own
};

namespace {

// The task queue cpp-httplib takes from new_task_queue and shuts down when it stops listening:
// shutting it down stops the lobby first (no more requests are dispatched), then waits for the
// workers to finish the requests in flight.
class WorkerQueue : public httplib::TaskQueue {
 public:
  WorkerQueue(size_t threads, HttpServer::Lobby& lobby) : pool_(threads), lobby_(lobby) {}
  void enqueue(std::function<void()> fn) override { pool_.enqueue(std::move(fn)); }
  void shutdown() override {
    lobby_.Stop();
    pool_.shutdown();
  }

 private:
  httplib::ThreadPool pool_;
  HttpServer::Lobby& lobby_;
};

}  // namespace

HttpServer::HttpServer(HttpLimits limits) : limits_(limits) {
  // What cpp-httplib says in its Keep-Alive header; the lobby keeps to it.
  set_keep_alive_max_count(limits_.max_requests);
  set_keep_alive_timeout(limits_.idle_timeout.count());
  lobby_ = std::make_unique<Lobby>(limits_, [this](std::unique_ptr<Connection> c) {
    Connection* raw = c.release();
    std::lock_guard<std::mutex> lock(workers_mutex_);
    if (workers_) {
      workers_->enqueue([this, raw] { Serve(std::unique_ptr<Connection>(raw)); });
    } else {
      delete raw;
    }
  });
  new_task_queue = [this] {
    auto* queue = new WorkerQueue(limits_.threads, *lobby_);
    std::lock_guard<std::mutex> lock(workers_mutex_);
    workers_ = queue;
    return queue;
  };
}

HttpServer::~HttpServer() { lobby_->Stop(); }

void HttpServer::Start() {
  // Every waiting connection is a file descriptor: half of them are left to the rest of the
  // process (its database, the jobs' logs, the connections being served), so that accepting a
  // connection does not fail while the lobby is full.
  size_t max_idle = limits_.max_idle;
  rlimit files{};
  if (getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur != RLIM_INFINITY) {
    max_idle = std::min<size_t>(max_idle, std::max<size_t>(16, files.rlim_cur / 2));
  }
  lobby_->Start(max_idle);
}

void HttpServer::Stop() {
  stopping_ = true;
  lobby_->Stop();
  stop();
}

bool HttpServer::process_and_close_socket(socket_t sock) {
  lobby_->Add(std::make_unique<Connection>(sock));
  return true;
}

void HttpServer::Serve(std::unique_ptr<Connection> c) {
  for (;;) {
    BufferedStream stream(c->fd, std::move(c->buffer), limits_.max_head, read_timeout_sec_,
                          read_timeout_usec_, write_timeout_sec_, write_timeout_usec_);
    const bool last = ++c->requests >= limits_.max_requests || stopping_;
    bool closed = false;
    const bool ok =
        process_request(stream, last, closed, [&stream](httplib::Request&) { stream.HeadRead(); });
    c->buffer = stream.TakeUnread();
    if (!ok || closed || last) return;  // closes it
    const size_t size = RequestSize(c->buffer, limits_.max_head);
    if (size == std::string::npos || c->buffer.size() < size) break;
    // The client sent its next request already: served at once.
  }
  c->since = Clock::now();
  lobby_->Add(std::move(c));
}

}  // namespace cadre::service
