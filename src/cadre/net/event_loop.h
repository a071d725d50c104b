// EventLoop: one thread multiplexing many file descriptors with epoll, plus timers and tasks
// posted from other threads (woken through an eventfd). Servers (the TcpStore server) run one.
//
// Threading contract: Run() is called by exactly one thread, "the loop thread". Every callback
// runs on it. Add/Modify/Remove/RunAt/Cancel must be called on the loop thread (from a callback
// or a posted task) or before Run() starts. Post() and Stop() may be called from any thread.
// Removing a descriptor (or cancelling a timer) inside a callback is safe, including the
// callback's own; no callback for it runs afterwards, even for events already collected.
// The loop does not own descriptors: callers close them after Remove().
// Construction failure (no epoll/eventfd) throws cadre::Error(kIo).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "cadre/base/deadline.h"
#include "cadre/base/status.h"

namespace cadre::net {

class EventLoop {
 public:
  // `events` is the epoll event mask seen (EPOLLIN, EPOLLOUT, EPOLLHUP, EPOLLERR, ...).
  using FdCallback = std::function<void(uint32_t events)>;
  using Task = std::function<void()>;
  using TimerId = uint64_t;

  EventLoop();
  ~EventLoop();
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;

  // Watches `fd` for `events` (level-triggered). Fails if fd is already registered.
  Status Add(int fd, uint32_t events, FdCallback callback);
  Status Modify(int fd, uint32_t events);
  // Stops watching `fd`; unknown descriptors are ignored.
  void Remove(int fd);

  // Runs `task` once on the loop thread at `at` (or soon after). Returns an id for Cancel().
  TimerId RunAt(Clock::time_point at, Task task);
  void Cancel(TimerId id);

  // Queues `task` to run on the loop thread and wakes the loop. Tasks posted after Stop() are
  // dropped.
  void Post(Task task);

  // Dispatches events until Stop(). Returns at once if Stop() was already called.
  void Run();
  void Stop();

  bool InLoopThread() const { return std::this_thread::get_id() == loop_thread_.load(); }

 private:
  struct Handler {
    int fd;
    FdCallback callback;
  };

  void Wake();
  void DrainWake();
  void RunDueTimers();
  void RunPostedTasks();
  int NextTimeoutMs() const;

  int epoll_fd_ = -1;
  int wake_fd_ = -1;
  std::atomic<std::thread::id> loop_thread_{};

  // Loop-thread state. Registrations are keyed by a fresh id (stored in epoll_event.data), so an
  // event collected for a descriptor that was removed and reused is never misdelivered.
  uint64_t next_registration_ = 1;
  std::unordered_map<int, uint64_t> registration_of_fd_;
  std::unordered_map<uint64_t, std::shared_ptr<Handler>> handlers_;
  TimerId next_timer_ = 1;
  std::multimap<Clock::time_point, TimerId> timer_queue_;
  std::unordered_map<TimerId, std::pair<Clock::time_point, Task>> timers_;

  std::mutex mu_;
  std::vector<Task> posted_;  // GUARDED_BY(mu_)
  bool stopped_ = false;      // GUARDED_BY(mu_)
};

}  // namespace cadre::net
