#include "cadre/net/event_loop.h"

#include <errno.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cstring>

#include "cadre/base/logging.h"

namespace cadre::net {

EventLoop::EventLoop() {
  epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
  if (epoll_fd_ < 0) throw Error(IoError(std::string("epoll_create1: ") + std::strerror(errno)));
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0) {
    int err = errno;
    ::close(epoll_fd_);
    throw Error(IoError(std::string("eventfd: ") + std::strerror(err)));
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = 0;  // registration 0 is the wake-up eventfd
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev);
}

EventLoop::~EventLoop() {
  ::close(wake_fd_);
  ::close(epoll_fd_);
}

Status EventLoop::Add(int fd, uint32_t events, FdCallback callback) {
  if (registration_of_fd_.count(fd)) {
    return InternalError("fd " + std::to_string(fd) + " is already in the event loop");
  }
  uint64_t id = next_registration_++;
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = id;
  if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
    return IoError("epoll_ctl add fd " + std::to_string(fd) + ": " + std::strerror(errno));
  }
  registration_of_fd_[fd] = id;
  handlers_[id] = std::make_shared<Handler>(Handler{fd, std::move(callback)});
  return Status::Ok();
}

Status EventLoop::Modify(int fd, uint32_t events) {
  auto it = registration_of_fd_.find(fd);
  if (it == registration_of_fd_.end()) {
    return InternalError("fd " + std::to_string(fd) + " is not in the event loop");
  }
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = it->second;
  if (::epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, fd, &ev) != 0) {
    return IoError("epoll_ctl mod fd " + std::to_string(fd) + ": " + std::strerror(errno));
  }
  return Status::Ok();
}

void EventLoop::Remove(int fd) {
  auto it = registration_of_fd_.find(fd);
  if (it == registration_of_fd_.end()) return;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
  handlers_.erase(it->second);
  registration_of_fd_.erase(it);
}

EventLoop::TimerId EventLoop::RunAt(Clock::time_point at, Task task) {
  TimerId id = next_timer_++;
  timer_queue_.emplace(at, id);
  timers_.emplace(id, std::make_pair(at, std::move(task)));
  return id;
}

void EventLoop::Cancel(TimerId id) {
  auto it = timers_.find(id);
  if (it == timers_.end()) return;
  auto range = timer_queue_.equal_range(it->second.first);
  for (auto q = range.first; q != range.second; ++q) {
    if (q->second == id) {
      timer_queue_.erase(q);
      break;
    }
  }
  timers_.erase(it);
}

void EventLoop::Post(Task task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopped_) return;
    posted_.push_back(std::move(task));
  }
  Wake();
}

void EventLoop::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopped_ = true;
  }
  Wake();
}

void EventLoop::Wake() {
  uint64_t one = 1;
  // The counter saturating (EAGAIN) still leaves the loop woken, so the result is not needed.
  [[maybe_unused]] ssize_t n = ::write(wake_fd_, &one, sizeof(one));
}

void EventLoop::DrainWake() {
  uint64_t count = 0;
  [[maybe_unused]] ssize_t n = ::read(wake_fd_, &count, sizeof(count));
}

int EventLoop::NextTimeoutMs() const {
  if (timer_queue_.empty()) return -1;
  auto left = timer_queue_.begin()->first - Clock::now();
  if (left <= Clock::duration::zero()) return 0;
  // Round up so a timer is never run early and the loop does not spin on a 0 ms timeout.
  auto ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
  return static_cast<int>(std::min<long long>(ms, 1 << 30));
}

void EventLoop::RunDueTimers() {
  auto now = Clock::now();
  while (!timer_queue_.empty() && timer_queue_.begin()->first <= now) {
    TimerId id = timer_queue_.begin()->second;
    timer_queue_.erase(timer_queue_.begin());
    auto it = timers_.find(id);
    if (it == timers_.end()) continue;
    Task task = std::move(it->second.second);
    timers_.erase(it);
    task();
  }
}

void EventLoop::RunPostedTasks() {
  std::vector<Task> tasks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    tasks.swap(posted_);
  }
  for (auto& t : tasks) t();
}

void EventLoop::Run() {
  loop_thread_ = std::this_thread::get_id();
  constexpr int kMaxEvents = 64;
  epoll_event events[kMaxEvents];
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopped_) break;
    }
    int n = ::epoll_wait(epoll_fd_, events, kMaxEvents, NextTimeoutMs());
    if (n < 0 && errno != EINTR) {
      // Only EBADF/EINVAL/EFAULT, i.e. a bug: stop rather than spin.
      CADRE_LOG(ERROR) << "event loop stopped: epoll_wait: " << std::strerror(errno);
      break;
    }
    for (int i = 0; i < n; ++i) {
      uint64_t id = events[i].data.u64;
      if (id == 0) {
        DrainWake();
        continue;
      }
      auto it = handlers_.find(id);
      if (it == handlers_.end()) continue;  // removed by an earlier callback in this batch
      std::shared_ptr<Handler> handler = it->second;  // keeps the callback alive while it runs
      handler->callback(events[i].events);
    }
    RunPostedTasks();
    RunDueTimers();
  }
  loop_thread_ = std::thread::id();
}

}  // namespace cadre::net
