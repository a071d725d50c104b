#include "cadre/netem/link_relay.h"

#include <signal.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "cadre/base/logging.h"

namespace cadre::netem {
namespace {

constexpr uint32_t kStopToken = UINT32_MAX;
// An IPv4 packet is at most 65535 bytes; its device header (packet_prefix_) comes before it.
constexpr size_t kBufferBytes = 65536 + 64;
constexpr int kReadBatch = 64;
constexpr size_t kMaxSpareBuffers = 256;
// How much a sender's uplink may have queued in the relay before it stops reading from that
// sender: enough that a wake-up late by a few milliseconds on a loaded machine does not leave
// the link idle (5 ms is 625 KB at 1 Gbit/s, ten 64 KB packets).
constexpr int64_t kReadAheadNs = 5'000'000;

int64_t NowNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

Status Errno(const std::string& what, int err) {
  return IoError("netem relay: " + what + ": " + std::strerror(err));
}

}  // namespace

LinkRelay::LinkRelay(std::vector<int> fds, const LinkSpec& link, uint64_t seed,
                     size_t packet_prefix)
    : fds_(std::move(fds)),
      packet_prefix_(packet_prefix),
      model_(static_cast<int>(fds_.size()) - 1, link, seed),
      resume_at_(fds_.size(), 0) {}

Status LinkRelay::Start(std::vector<int> tun_fds, const LinkSpec& link, uint64_t seed,
                        size_t packet_prefix, std::unique_ptr<LinkRelay>* out) {
  if (tun_fds.size() < 2) {
    for (int fd : tun_fds) close(fd);
    return InvalidArgument("netem relay: needs the switch and at least one host");
  }
  std::unique_ptr<LinkRelay> relay(new LinkRelay(std::move(tun_fds), link, seed, packet_prefix));
  relay->epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  if (relay->epoll_fd_ < 0) return Errno("epoll_create1", errno);
  relay->stop_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (relay->stop_fd_ < 0) return Errno("eventfd", errno);
  epoll_event stop{};
  stop.events = EPOLLIN;
  stop.data.u32 = kStopToken;
  if (epoll_ctl(relay->epoll_fd_, EPOLL_CTL_ADD, relay->stop_fd_, &stop) != 0) {
    return Errno("epoll_ctl", errno);
  }
  for (size_t e = 0; e < relay->fds_.size(); ++e) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u32 = static_cast<uint32_t>(e);
    if (epoll_ctl(relay->epoll_fd_, EPOLL_CTL_ADD, relay->fds_[e], &ev) != 0) {
      return Errno("epoll_ctl on the TUN of endpoint " + std::to_string(e), errno);
    }
  }
  // The thread blocks every signal from its first instruction: signals meant for the process
  // (a runner's SIGINT, SIGCHLD) must reach the threads that handle them.
  sigset_t all, previous;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &previous);
  relay->thread_ = std::thread([r = relay.get()] { r->Run(); });
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  *out = std::move(relay);
  return Status::Ok();
}

LinkRelay::~LinkRelay() { Stop(); }

void LinkRelay::Stop() {
  if (thread_.joinable()) {
    uint64_t one = 1;
    (void)!write(stop_fd_, &one, sizeof(one));
    thread_.join();
  }
  for (int& fd : fds_) {
    if (fd >= 0) close(fd);
    fd = -1;
  }
  if (epoll_fd_ >= 0) close(epoll_fd_);
  if (stop_fd_ >= 0) close(stop_fd_);
  epoll_fd_ = stop_fd_ = -1;
}

void LinkRelay::SetHostLink(int host, const LinkSpec& link) {
  std::lock_guard<std::mutex> lock(model_mutex_);
  model_.SetLink(host, link);
}

void LinkRelay::SetHostConnected(int host, bool connected) {
  std::lock_guard<std::mutex> lock(model_mutex_);
  model_.SetConnected(host, connected);
}

Status LinkRelay::health() const {
  std::lock_guard<std::mutex> lock(failure_mutex_);
  return failure_;
}

RelayStats LinkRelay::stats() const {
  RelayStats s;
  s.delivered = delivered_.load();
  s.lost = lost_.load();
  s.queue_full = queue_full_.load();
  s.disconnected = disconnected_.load();
  s.unroutable = unroutable_.load();
  s.refused = refused_.load();
  return s;
}

void LinkRelay::Fail(Status status) {
  CADRE_LOG(ERROR) << status.message() << "; the emulated network stopped";
  std::lock_guard<std::mutex> lock(failure_mutex_);
  failure_ = std::move(status);
}

void LinkRelay::Count(Fate fate) {
  switch (fate) {
    case Fate::kLost:
      ++lost_;
      break;
    case Fate::kQueueFull:
      ++queue_full_;
      break;
    case Fate::kDisconnected:
      ++disconnected_;
      break;
    case Fate::kPassed:
      break;
  }
}

void LinkRelay::Recycle(std::vector<uint8_t> buffer) {
  if (spare_buffers_.size() < kMaxSpareBuffers) spare_buffers_.push_back(std::move(buffer));
}

void LinkRelay::Schedule(Packet packet) {
  packet.order = next_order_++;
  queue_.push_back(std::move(packet));
  std::push_heap(queue_.begin(), queue_.end(), Later{});
}

void LinkRelay::Run() {
  // Wake-ups are timed to the serialization of single packets (0.5 ms for 64 KB at 1 Gbit/s);
  // the default 50 us slack would add up to a visible rate error.
  prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
  epoll_event events[64];
  while (true) {
    int64_t now = NowNs();
    ReleaseDue(now);
    if (!ResumeDue(now)) return;
    timespec timeout{};
    timespec* wait = nullptr;  // nothing to time: sleep until a packet or Stop()
    if (int64_t wake = NextWake(); wake >= 0) {
      int64_t left = std::max<int64_t>(0, wake - NowNs());
      timeout.tv_sec = left / 1'000'000'000;
      timeout.tv_nsec = left % 1'000'000'000;
      wait = &timeout;
    }
    int n = epoll_pwait2(epoll_fd_, events, 64, wait, nullptr);
    if (n < 0) {
      if (errno == EINTR) continue;
      Fail(Errno("epoll_pwait2", errno));
      return;
    }
    for (int k = 0; k < n; ++k) {
      if (events[k].data.u32 == kStopToken) return;
      if (!ReadFrom(static_cast<int>(events[k].data.u32))) return;
    }
  }
}

int64_t LinkRelay::NextWake() const {
  int64_t wake = queue_.empty() ? -1 : queue_.front().at;
  if (paused_ > 0) {
    for (int64_t at : resume_at_) {
      if (at > 0 && (wake < 0 || at < wake)) wake = at;
    }
  }
  return wake;
}

bool LinkRelay::Pause(int src, int64_t until) {
  epoll_event ev{};
  ev.events = 0;  // still registered, reports nothing
  ev.data.u32 = static_cast<uint32_t>(src);
  if (epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, fds_[src], &ev) != 0) {
    Fail(Errno("epoll_ctl on the TUN of endpoint " + std::to_string(src), errno));
    return false;
  }
  resume_at_[src] = std::max<int64_t>(until, 1);
  ++paused_;
  return true;
}

bool LinkRelay::ResumeDue(int64_t now) {
  if (paused_ == 0) return true;
  for (size_t e = 0; e < resume_at_.size(); ++e) {
    if (resume_at_[e] == 0 || resume_at_[e] > now) continue;
    epoll_event ev{};
    ev.events = EPOLLIN;  // level-triggered: reports at once what waited meanwhile
    ev.data.u32 = static_cast<uint32_t>(e);
    if (epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, fds_[e], &ev) != 0) {
      Fail(Errno("epoll_ctl on the TUN of endpoint " + std::to_string(e), errno));
      return false;
    }
    resume_at_[e] = 0;
    --paused_;
  }
  return true;
}

bool LinkRelay::ReadFrom(int src) {
  const int hosts = static_cast<int>(fds_.size()) - 1;
  for (int k = 0; k < kReadBatch; ++k) {
    int64_t uplink_free;
    {
      std::lock_guard<std::mutex> lock(model_mutex_);
      uplink_free = model_.UplinkFree(src);
    }
    if (const int64_t now = NowNs(); uplink_free - now > kReadAheadNs) {
      return Pause(src, uplink_free - kReadAheadNs);
    }
    std::vector<uint8_t> buffer;
    if (spare_buffers_.empty()) {
      buffer.resize(kBufferBytes);
    } else {
      buffer = std::move(spare_buffers_.back());
      spare_buffers_.pop_back();
    }
    ssize_t got = read(fds_[src], buffer.data(), buffer.size());
    if (got <= 0) {
      const int err = got < 0 ? errno : EIO;
      Recycle(std::move(buffer));
      if (err == EAGAIN || err == EINTR) return true;
      Fail(Errno("reading the TUN of endpoint " + std::to_string(src), err));
      return false;
    }
    const size_t len = static_cast<size_t>(got);
    if (len < packet_prefix_) {
      ++unroutable_;
      Recycle(std::move(buffer));
      continue;
    }
    const uint8_t* ip = buffer.data() + packet_prefix_;
    const size_t ip_len = len - packet_prefix_;
    const int dst = RouteEndpoint(ip, ip_len, hosts);
    if (dst < 0 || dst == src) {
      ++unroutable_;
      Recycle(std::move(buffer));
      continue;
    }
    Packet p;
    p.src = src;
    p.dst = dst;
    p.len = len;
    p.wire = WireBytes(ip, ip_len);
    Fate fate;
    {
      std::lock_guard<std::mutex> lock(model_mutex_);
      fate = model_.Send(src, dst, p.wire, NowNs(), &p.at);
    }
    if (fate != Fate::kPassed) {
      Count(fate);
      Recycle(std::move(buffer));
      continue;
    }
    p.data = std::move(buffer);
    Schedule(std::move(p));
  }
  return true;
}

void LinkRelay::ReleaseDue(int64_t now) {
  while (!queue_.empty() && queue_.front().at <= now) {
    std::pop_heap(queue_.begin(), queue_.end(), Later{});
    Packet p = std::move(queue_.back());
    queue_.pop_back();
    if (p.at_switch) {
      Fate fate;
      {
        std::lock_guard<std::mutex> lock(model_mutex_);
        fate = model_.Forward(p.src, p.dst, p.wire, p.at, &p.at);
      }
      if (fate != Fate::kPassed) {
        Count(fate);
        Recycle(std::move(p.data));
        continue;
      }
      p.at_switch = false;
      Schedule(std::move(p));
      continue;
    }
    // A TUN write hands the packet to the destination's network stack; it does not block.
    if (write(fds_[p.dst], p.data.data(), p.len) == static_cast<ssize_t>(p.len)) {
      ++delivered_;
    } else {
      ++refused_;
    }
    Recycle(std::move(p.data));
  }
}

}  // namespace cadre::netem
