// A point in time after which a blocking operation gives up. Every wait in cadre takes one, so
// nothing blocks forever.
#pragma once

#include <algorithm>
#include <chrono>

namespace cadre {

using Clock = std::chrono::steady_clock;
using Duration = std::chrono::milliseconds;

class Deadline {
 public:
  explicit Deadline(Duration timeout) : at_(Clock::now() + timeout) {}
  static Deadline At(Clock::time_point at) { return Deadline(at); }
  static Deadline Never() { return Deadline(Clock::time_point::max()); }

  bool expired() const { return Clock::now() >= at_; }
  Clock::time_point at() const { return at_; }

  // Time left, clamped at zero.
  Duration remaining() const {
    if (at_ == Clock::time_point::max()) return Duration::max();
    auto left = std::chrono::duration_cast<Duration>(at_ - Clock::now());
    return std::max(left, Duration::zero());
  }

  // Milliseconds left for poll(2)/epoll_wait(2): -1 for never, otherwise >= 0, capped.
  int poll_timeout_ms() const {
    if (at_ == Clock::time_point::max()) return -1;
    auto ms = remaining().count();
    return static_cast<int>(std::min<long long>(ms, 1 << 30));
  }

 private:
  explicit Deadline(Clock::time_point at) : at_(at) {}
  Clock::time_point at_;
};

}  // namespace cadre
