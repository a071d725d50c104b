#include "cadre/engine/handle.h"

#include <sched.h>

namespace cadre::engine {

bool Handle::done() const { return done_.load(std::memory_order_acquire); }

bool PollFlag(const std::atomic<bool>& flag, std::chrono::microseconds budget) {
  const auto until = std::chrono::steady_clock::now() + budget;
  while (!flag.load(std::memory_order_acquire)) {
    if (std::chrono::steady_clock::now() >= until) return false;
    sched_yield();
  }
  return true;
}

bool Handle::Wait(Duration timeout) const {
  // Never poll longer than the caller would wait (the cap keeps Duration::max() in range).
  const auto limit =
      std::chrono::duration_cast<std::chrono::microseconds>(std::min(timeout, Duration(1000)));
  if (PollFlag(done_, std::min(spin_, limit))) return true;
  std::unique_lock<std::mutex> lock(mu_);
  if (timeout == Duration::max()) {
    cv_.wait(lock, [&] { return done(); });
    return true;
  }
  return cv_.wait_for(lock, timeout, [&] { return done(); });
}

Status Handle::status() const {
  std::lock_guard<std::mutex> lock(mu_);
  return status_;
}

void Handle::Complete(Status status) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (done()) return;
    status_ = std::move(status);
    done_.store(true, std::memory_order_release);
  }
  cv_.notify_all();
}

}  // namespace cadre::engine
