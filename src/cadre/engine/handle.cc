#include "cadre/engine/handle.h"

#include <sched.h>

namespace cadre::engine {

bool Handle::done() const {
  std::lock_guard<std::mutex> lock(mu_);
  return done_;
}

bool Handle::Wait(Duration timeout) const {
  if (spin_.count() > 0) {
    const auto start = std::chrono::steady_clock::now();
    const auto until = start + std::min<std::chrono::microseconds>(
                                   spin_, std::chrono::duration_cast<std::chrono::microseconds>(
                                              std::min(timeout, Duration(1000))));
    while (!done_flag_.load(std::memory_order_acquire)) {
      if (std::chrono::steady_clock::now() >= until) break;
      sched_yield();  // hands the core to a runnable thread (the engine's, say), if any
    }
  }
  std::unique_lock<std::mutex> lock(mu_);
  if (timeout == Duration::max()) {
    cv_.wait(lock, [&] { return done_; });
    return true;
  }
  return cv_.wait_for(lock, timeout, [&] { return done_; });
}

Status Handle::status() const {
  std::lock_guard<std::mutex> lock(mu_);
  return status_;
}

void Handle::Complete(Status status) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (done_) return;
    done_ = true;
    status_ = std::move(status);
    done_flag_.store(true, std::memory_order_release);
  }
  cv_.notify_all();
}

}  // namespace cadre::engine
