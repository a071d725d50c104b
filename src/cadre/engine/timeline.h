// Timeline: Horovod's HOROVOD_TIMELINE file, in Horovod's own Chrome-trace layout, so that the
// tools that read Horovod timelines (chrome://tracing, Perfetto, scripts written for Horovod's
// files) read cadre's.
//
// Layout (as horovod/common/timeline.cc writes it): a JSON array; a first "process_name"
// metadata record for pid 0 carrying args.start_time_since_epoch_in_micros; each tensor is a
// "process" (pid 1, 2, ... in order of first use) named by a "process_name" record and ordered
// by a "process_sort_index" record. A tensor's life is
//   B NEGOTIATE_<OP>  ...  X "<rank>" (dur 0) as each rank's request arrives  ...  E
//   B <OP>  [B <activity> ... E]  E {args: dtype "HOROVOD_FLOAT32", shape "[4, 3]"}
// and with mark_cycles every cycle adds an instant event {"ph": "i", "name": "CYCLE_START",
// "s": "g"}. Timestamps are microseconds since Start(). Tensor names are shown as Horovod's
// frameworks name them: "<op>.<name>" ("allreduce.fc1.weight"), unless the name already starts
// with its operation's prefix. The file is valid JSON after every record (each ends with "]",
// which the next record overwrites), so a crashed job's timeline still loads.
//
// Thread-safe; every call is a no-op while stopped. Written by rank 0 only (the engine's
// choice, as Horovod's coordinator).
#pragma once

#include <atomic>
#include <cstdio>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "cadre/base/deadline.h"
#include "cadre/engine/request.h"

namespace cadre::engine {

class Timeline {
 public:
  ~Timeline() { Stop(); }
  // Throws Error(kIo) naming the path when it cannot be opened.
  void Start(const std::string& path, bool mark_cycles);
  void Stop();
  bool active() const;

  void NegotiateStart(const std::string& tensor, OpType op);
  void NegotiateRankReady(const std::string& tensor, int rank);
  void NegotiateEnd(const std::string& tensor);
  // The operation itself (`name` as Horovod's response types: "ALLREDUCE", "ERROR", ...).
  void Start(const std::string& tensor, const std::string& name);
  void ActivityStart(const std::string& tensor, const std::string& activity);
  void ActivityEnd(const std::string& tensor);
  // Closes whatever is open for `tensor`; the last end carries its dtype and shape.
  void End(const std::string& tensor, const Request* request);
  void MarkCycle();

  // What Horovod calls `dtype` ("HOROVOD_FLOAT32") and how it prints a shape ("[4, 3]").
  static std::string HorovodDataTypeName(comm::DataType dtype);
  static std::string ShapeString(const std::vector<int64_t>& shape);
  static std::string Upper(std::string_view s);  // "allreduce" -> "ALLREDUCE"

 private:
  enum class State { kNone, kNegotiating, kTopLevel, kActivity };
  struct Tensor {
    int pid = 0;
    std::string display;  // "<op>.<name>"
    State state = State::kNone;
  };
  // The tensor's entry; registers its pid (writing its metadata) on first use.
  Tensor& TensorLocked(const std::string& tensor, OpType op);
  void EventLocked(const Tensor& t, char phase, const std::string& name,
                   const std::string& args = "");
  void WriteLocked(const std::string& record);
  long long NowLocked() const;

  // Whether a file is open: read without the lock so that a stopped timeline costs the
  // engine's hot path one load per call; set and cleared under mu_.
  std::atomic<bool> active_{false};
  mutable std::mutex mu_;
  std::FILE* file_ = nullptr;                        // GUARDED_BY(mu_)
  bool mark_cycles_ = false;                         // GUARDED_BY(mu_)
  bool first_ = true;                                // GUARDED_BY(mu_)
  Clock::time_point start_;                          // GUARDED_BY(mu_)
  std::unordered_map<std::string, Tensor> tensors_;  // GUARDED_BY(mu_)
};

}  // namespace cadre::engine
