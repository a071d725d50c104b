// Timeline: a Chrome-trace (chrome://tracing, Perfetto) record of what the engine did with each
// tensor — NEGOTIATE from submission until every rank agreed, then the operation itself —
// as Horovod's HOROVOD_TIMELINE. One trace row per tensor name. Thread-safe; a no-op while
// stopped. The file is valid JSON once stopped (the trace format also accepts an unterminated
// array, so a crashed job's timeline still loads).
#pragma once

#include <cstdio>
#include <mutex>
#include <string>
#include <unordered_map>

#include "cadre/base/deadline.h"

namespace cadre::engine {

class Timeline {
 public:
  ~Timeline() { Stop(); }
  // Throws Error(kIo) naming the path when it cannot be opened.
  void Start(const std::string& path, bool mark_cycles);
  void Stop();
  bool active() const;

  void Begin(const std::string& tensor, const std::string& activity);
  void End(const std::string& tensor);
  void MarkCycle();

 private:
  void WriteLocked(const std::string& json);
  int TidLocked(const std::string& tensor);

  mutable std::mutex mu_;
  std::FILE* file_ = nullptr;                  // GUARDED_BY(mu_)
  bool mark_cycles_ = false;                   // GUARDED_BY(mu_)
  bool first_ = true;                          // GUARDED_BY(mu_)
  Clock::time_point start_;                    // GUARDED_BY(mu_)
  std::unordered_map<std::string, int> tids_;  // GUARDED_BY(mu_)
};

}  // namespace cadre::engine
