#include "cadre/engine/handle.h"

namespace cadre::engine {

bool Handle::done() const {
  std::lock_guard<std::mutex> lock(mu_);
  return done_;
}

bool Handle::Wait(Duration timeout) const {
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
  }
  cv_.notify_all();
}

}  // namespace cadre::engine
