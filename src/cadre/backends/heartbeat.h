// Heartbeats between `cadre run` and the `cadre task`s of a job on a cluster (Slurm, Open MPI),
// through the job's rendezvous store, which the runner serves from its own threads.
//
// Each task adds 1 to its counter in the store every `period` (HeartbeatPeriod). Both ends judge
// on their own clocks only (no clock is compared across machines):
//  - the task: a store that has not answered any beat for `timeout` means cadre run is gone
//    (killed by SIGKILL, its machine or network lost): the task stops its slot, as srun's own
//    tasks end with a foreground srun, so the cluster's allocation is not held for nothing.
//  - the runner (HeartbeatWatch): a slot whose counter has not moved for `timeout` while the job
//    runs and the slot left no exit record means its node is lost (or cut off): cadre run ends
//    the job at once, naming the learner and its node, rather than when the engine notices
//    (Slurm: SlurmdTimeout, minutes).
// A runner or task that is merely slow keeps answering: the store and the beats run on threads of
// their own, not on the runner's poll loop or the training command.
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cadre/base/status.h"

namespace cadre::backends {

// The store keys of one slot (by its global rank): its beat counter, and the node it runs on.
std::string HeartbeatKey(int rank);
std::string HeartbeatNodeKey(int rank);

// How often a task beats for a given timeout: a sixth of it, between 0.2 s and 10 s, so that a
// few beats may be lost before the other end gives up.
std::chrono::milliseconds HeartbeatPeriod(std::chrono::milliseconds timeout);

// The task's side: a thread that beats until destroyed, and says when the runner is gone.
class TaskHeartbeat {
 public:
  struct Options {
    std::string store_address;  // host:port
    std::string token;
    int rank = 0;
    std::string identity;  // "cadre task learner-2 slot 0"
    std::string node;      // this node's name, for the runner's messages
    std::chrono::milliseconds timeout{0};
  };
  explicit TaskHeartbeat(Options options);
  ~TaskHeartbeat();
  TaskHeartbeat(const TaskHeartbeat&) = delete;
  TaskHeartbeat& operator=(const TaskHeartbeat&) = delete;

  // Set once the store has answered no beat for `timeout`: why, naming the store and the time.
  std::optional<std::string> runner_lost();

 private:
  void Run();

  Options options_;
  std::mutex mu_;
  std::condition_variable wake_;
  bool stop_ = false;                // GUARDED_BY(mu_)
  std::optional<std::string> lost_;  // GUARDED_BY(mu_)
  std::thread thread_;
};

// The runner's side: fed each slot's counter as read from the store, says which slots have not
// beaten for `timeout`. Only slots that beat at least once are judged (a slot not started yet
// has nothing to say); the times are the runner's own.
class HeartbeatWatch {
 public:
  explicit HeartbeatWatch(std::chrono::milliseconds timeout) : timeout_(timeout) {}
  using Clock = std::chrono::steady_clock;
  void Observe(int rank, int64_t count, Clock::time_point now);
  // The ranks whose counter last moved more than `timeout` before `now`, in order.
  std::vector<int> Silent(Clock::time_point now) const;
  // The runner's verdict after a read of every counter, given the ranks found silent at it (less
  // any it knows ended): those ranks once no rank has joined them since the previous read, else
  // none yet. The slots of one lost node stop at one moment, but the runner reads the counters
  // now and then (a second apart), and the last beats of two such slots may fall either side of
  // a read: one is then judged silent a read before the other. Waiting until the set stops
  // growing names every slot of the node, at the cost of one read; a slot that beats again in
  // between leaves it.
  std::vector<int> Settled(std::vector<int> silent);
  std::chrono::milliseconds timeout() const { return timeout_; }

 private:
  struct Seen {
    int64_t count = 0;
    Clock::time_point changed;
  };
  std::chrono::milliseconds timeout_;
  std::map<int, Seen> seen_;
  std::vector<int> last_silent_;  // Settled's argument at the previous read
};

}  // namespace cadre::backends
