// Scheduler: shares this machine's slots among submitted jobs and follows them to their end.
//
// Admission is gang and first come first served: the oldest queued job starts when all of its
// slots, and all of its GPUs, fit beside the running jobs; nothing behind it may start first, so
// a large job is never starved by small ones. A queued job's status message says what it waits
// for. GPUs (SchedulerOptions::gpus, the machine's as `cadre run` counts them) are handed out
// whole: each started job's runner gets its own in CUDA_VISIBLE_DEVICES (a job without GPUs an
// empty one, so that it touches none), and a job holds them while pending or running, as the
// database records (gpu_ids), so a restarted server knows which are taken; they are free again
// whenever the job leaves those states, however it ended. A started job runs under its own runner
// (runner.h), which outlives the server. One background thread does all admission and follow-up,
// waking at every submission and cancellation and a few times a second otherwise: it reads each
// running job's status.json, notices a runner that is gone, and records outcomes. Since everything
// it acts on is in the database and the job directories, a restarted server simply carries on:
// running jobs are found again by pid, queued jobs stay queued, and a job whose runner died while
// the server was down is recorded as failed, saying so. A training that completes with a saved
// model passes through `storing` while the model is copied into the model store; a server stopped
// mid-copy stores it again when it starts.
//
// Thread-safe: Wake and Cancel may be called from any thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "cadre/launch/gpu_plan.h"
#include "cadre/service/model_store.h"
#include "cadre/service/training_store.h"

namespace cadre::service {

struct SchedulerOptions {
  int64_t slots = 1;                       // processes this machine runs at once
  std::filesystem::path cadre;             // the cadre program, started as each job's runner
  std::chrono::milliseconds grace{10000};  // SIGTERM to SIGKILL when stopping learners
  std::chrono::milliseconds poll{100};     // follow-up period while jobs are active
  // Where a completed training's saved model is stored (model_store.h); with `models` null,
  // trainings complete without storing anything.
  ModelStore* models = nullptr;
  std::filesystem::path models_dir;
  std::vector<std::string> run_args;  // more flags for every runner (the backend's)
  // The GPUs jobs share (count 0: none, and runners keep the server's CUDA_VISIBLE_DEVICES).
  launch::MachineGpus gpus;
};

// The manifest the runner runs, in the work folder's model/ (written at submission).
inline constexpr char kManifestName[] = "cadre-job.yaml";

class Scheduler {
 public:
  Scheduler(TrainingStore& store, SchedulerOptions options);
  ~Scheduler();  // stops the thread; runners keep running

  void Start();
  void Stop();
  // Something changed (a submission, a cancellation): look now.
  void Wake();
  // Cancels `record` (as it was before RequestCancel marked it): a queued job ends at once, a
  // running one's runner is asked to stop (SIGTERM) and ends `canceled` once it has.
  void Cancel(const TrainingRecord& record);

  int64_t slots() const { return options_.slots; }
  const launch::MachineGpus& gpus() const { return options_.gpus; }

 private:
  void Loop();
  // One pass; returns whether any job is still active.
  bool Pass();
  void Follow(const TrainingRecord& record);
  void Conclude(const TrainingRecord& record, const std::string& state, const std::string& message,
                const std::optional<std::string>& failure);
  // Starts the job's runner holding `gpus` (the machine's GPU names; empty: none).
  void Admit(const TrainingRecord& record, const std::vector<std::string>& gpus);
  // The training completed: store its saved model (if it left one), then conclude.
  void Complete(const TrainingRecord& record);
  void SignalRunner(const TrainingRecord& record);
  // Read again: a cancellation may have arrived after the record was read.
  bool CancelRequested(const std::string& id);

  TrainingStore& store_;
  SchedulerOptions options_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool woken_ = false;
  bool stopping_ = false;
  std::set<std::string> signalled_;  // runners already sent SIGTERM (loop thread only)
  std::thread thread_;
};

// Removes a job's directory and its database row.
void RemoveTraining(TrainingStore& store, const TrainingRecord& record);

}  // namespace cadre::service
