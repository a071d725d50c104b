#include "cadre/service/scheduler.h"

#include <signal.h>

#include <algorithm>

#include "cadre/service/clock.h"
#include "cadre/service/runner.h"

namespace cadre::service {

void RemoveTraining(TrainingStore& store, const TrainingRecord& record) {
  std::error_code ec;
  std::filesystem::remove_all(record.job_dir, ec);
  std::filesystem::remove_all(record.work_dir, ec);
  (void)store.Remove(record.id);
}

Scheduler::Scheduler(TrainingStore& store, SchedulerOptions options)
    : store_(store), options_(std::move(options)) {}

Scheduler::~Scheduler() { Stop(); }

void Scheduler::Start() {
  thread_ = std::thread([this] { Loop(); });
}

void Scheduler::Stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Scheduler::Wake() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    woken_ = true;
  }
  wake_.notify_all();
}

void Scheduler::Cancel(const TrainingRecord& record) {
  // Stopping the learners is not left for the next pass: cancel should act at once.
  if (record.state == kRunning && record.runner_pid) {
    RunnerProcess runner{static_cast<pid_t>(*record.runner_pid), record.runner_start.value_or(0)};
    if (RunnerAlive(runner)) kill(runner.pid, SIGTERM);
  }
  Wake();
}

void Scheduler::Loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    woken_ = false;
    lock.unlock();
    bool active = Pass();
    lock.lock();
    auto period = active ? options_.poll : std::chrono::milliseconds(1000);
    wake_.wait_for(lock, period, [this] { return stopping_ || woken_; });
  }
}

bool Scheduler::CancelRequested(const std::string& id) {
  std::optional<TrainingRecord> now = store_.GetAny(id);
  return now && now->cancel_requested;
}

namespace {

std::vector<std::string> SplitIds(const std::string& list) {
  std::vector<std::string> ids;
  size_t start = 0;
  while (start < list.size()) {
    size_t comma = std::min(list.find(',', start), list.size());
    if (comma > start) ids.push_back(list.substr(start, comma - start));
    start = comma + 1;
  }
  return ids;
}

std::string JoinIds(const std::vector<std::string>& ids) {
  std::string list;
  for (const auto& id : ids) list += (list.empty() ? "" : ",") + id;
  return list;
}

// The machine's GPUs by the names a runner's CUDA_VISIBLE_DEVICES takes.
std::vector<std::string> MachineGpuIds(const launch::MachineGpus& gpus) {
  if (!gpus.ids.empty()) return gpus.ids;
  std::vector<std::string> ids;
  for (int i = 0; i < gpus.count; ++i) ids.push_back(std::to_string(i));
  return ids;
}

}  // namespace

bool Scheduler::Pass() {
  for (const auto& record : store_.InStates({kPending, kRunning, kStoring})) Follow(record);

  int64_t used = 0;
  std::set<std::string> held;  // GPUs of pending and running jobs
  std::vector<TrainingRecord> active = store_.InStates({kPending, kRunning});
  for (const auto& record : active) {
    used += record.slots;
    for (auto& id : SplitIds(record.gpu_ids.value_or(""))) held.insert(std::move(id));
  }
  const std::vector<std::string> machine_gpus = MachineGpuIds(options_.gpus);
  std::vector<std::string> free_gpus;
  for (const auto& id : machine_gpus) {
    if (held.count(id) == 0) free_gpus.push_back(id);
  }
  std::vector<TrainingRecord> queued = store_.InStates({kQueued});
  std::string first_waiting;  // the oldest queued job that does not fit
  for (const auto& record : queued) {
    // Every canceled job ends now, also those waiting behind one that does not fit.
    if (record.cancel_requested) {
      Conclude(record, kCanceled, "canceled before it started", std::nullopt);
      continue;
    }
    // On a machine without GPUs a GPU configuration runs on CPUs (the runner warns).
    const int64_t gpus = machine_gpus.empty() ? 0 : record.gpus;
    if (gpus > static_cast<int64_t>(machine_gpus.size())) {
      // Submitted before a restart that left the server fewer GPUs: it would wait forever.
      Conclude(record, kFailed, "the job needs more GPUs than the machine has",
               "the job needs " + std::to_string(gpus) + " GPUs, but the server now has " +
                   std::to_string(machine_gpus.size()) + " (" + options_.gpus.source +
                   "); submit it again with fewer learners or GPUs per learner");
      continue;
    }
    if (record.slots > options_.slots) {
      // Submitted before a restart with fewer --slots: it would wait forever, and every job
      // behind it with it.
      Conclude(record, kFailed, "the job needs more slots than the server has",
               "the job runs " + std::to_string(record.slots) +
                   " processes (slots) at once, but the server now has " +
                   std::to_string(options_.slots) +
                   " (--slots); submit it again with fewer learners or slots per learner, or "
                   "restart the server with more slots");
      continue;
    }
    std::string reason;
    if (!first_waiting.empty()) {
      // Strictly in order: a job that does not fit holds back the ones behind it.
      reason = "waiting behind training " + first_waiting +
               ", submitted earlier (jobs start in the order they were submitted)";
    } else if (used + record.slots > options_.slots) {
      reason = "waiting for slots: it runs " + std::to_string(record.slots) +
               " processes at once and " + std::to_string(options_.slots - used) + " of " +
               std::to_string(options_.slots) + " are free";
    } else if (gpus > static_cast<int64_t>(free_gpus.size())) {
      reason = "waiting for GPUs: it needs " + std::to_string(gpus) + " and " +
               std::to_string(free_gpus.size()) + " of the machine's " +
               std::to_string(machine_gpus.size()) + " are free";
    }
    if (!reason.empty()) {
      if (first_waiting.empty()) first_waiting = record.id;
      if (record.message != reason) (void)store_.SetQueuedReason(record.id, reason);
      continue;
    }
    std::vector<std::string> given(free_gpus.begin(), free_gpus.begin() + gpus);
    free_gpus.erase(free_gpus.begin(), free_gpus.begin() + gpus);
    Admit(record, given);
    used += record.slots;
  }
  return !active.empty() || !queued.empty();
}

void Scheduler::Admit(const TrainingRecord& record, const std::vector<std::string>& gpus) {
  if (!store_
           .SetPending(record.id,
                       gpus.empty() ? std::nullopt : std::optional<std::string>(JoinIds(gpus)))
           .ok()) {
    return;
  }
  // On a machine with GPUs every runner is told which are its own; one that needs none gets an
  // empty list, so that its learners cannot reach GPUs other jobs hold.
  std::optional<std::string> visible;
  if (options_.gpus.count > 0) visible = JoinIds(gpus);
  RunnerLaunch launch{options_.cadre,    record.work_dir / "model" / kManifestName,
                      record.job_dir,    record.work_dir,
                      record.id,         options_.grace,
                      options_.run_args, visible};
  RunnerProcess runner;
  Status st = SpawnRunner(launch, &runner);
  if (!st.ok()) {
    Conclude(record, kFailed, "could not start the job", st.message());
    return;
  }
  if (!store_.SetRunning(record.id, runner.pid, runner.start, NowIso()).ok()) {
    kill(runner.pid, SIGTERM);
  }
}

void Scheduler::SignalRunner(const TrainingRecord& record) {
  if (!record.runner_pid || signalled_.count(record.id) > 0) return;
  RunnerProcess runner{static_cast<pid_t>(*record.runner_pid), record.runner_start.value_or(0)};
  if (RunnerAlive(runner)) kill(runner.pid, SIGTERM);
  signalled_.insert(record.id);
}

void Scheduler::Follow(const TrainingRecord& record) {
  TrainingRecord r = record;
  if (r.state == kStoring) {
    Complete(r);
    return;
  }
  if (r.state == kPending) {
    // The server stopped while starting this job: did the runner get going?
    std::optional<pid_t> pid = ReadRunnerPid(r.work_dir);
    if (!pid) {
      (void)store_.SetQueued(r.id);
      return;
    }
    r.runner_pid = *pid;
    r.runner_start = ProcessStartTime(*pid);
    (void)store_.SetRunning(r.id, *r.runner_pid, *r.runner_start, NowIso());
  }
  if (!r.runner_pid) return;
  if (r.cancel_requested) SignalRunner(r);
  RunnerProcess runner{static_cast<pid_t>(*r.runner_pid), r.runner_start.value_or(0)};
  RunnerOutcome outcome = ReadOutcome(r.job_dir);
  if (!outcome.finished) {
    if (RunnerAlive(runner)) return;
    outcome = ReadOutcome(r.job_dir);  // it may have finished between the two looks
  }
  if (!outcome.finished && (r.cancel_requested || CancelRequested(r.id))) {
    // Stopped as asked before it recorded anything (its slots go with it: slot keepers).
    Conclude(r, kCanceled, "canceled", std::nullopt);
    return;
  }
  if (!outcome.finished) {
    std::string tail = TailOfFile(r.work_dir / "training.log", 5);
    // A cluster engine's objects outlive a killed runner: nobody else would delete them.
    std::string leftovers = RemoveRunnerLeftovers(r.job_dir, options_.run_args);
    Conclude(r, kFailed, "the job's runner ended without recording an outcome",
             "the job's runner (cadre run, pid " + std::to_string(runner.pid) +
                 ") ended without recording an outcome; it was killed or the machine restarted" +
                 (leftovers.empty() ? "" : "; " + leftovers) +
                 (tail.empty() ? "" : "; its last output:\n" + tail));
    return;
  }
  if (outcome.state == "completed") {
    Complete(r);
  } else if (outcome.state == "stopped" && (r.cancel_requested || CancelRequested(r.id))) {
    Conclude(r, kCanceled, "canceled", std::nullopt);
  } else {
    Conclude(r, kFailed, "training failed", outcome.failure);
  }
}

void Scheduler::Complete(const TrainingRecord& record) {
  if (!options_.models || !TrainingSavedModel(record)) {
    Conclude(record, kCompleted, "training completed", std::nullopt);
    return;
  }
  if (record.state != kStoring && !store_.SetStoring(record.id).ok()) return;
  ModelRecord model;
  Status st = StoreTrainingModel(*options_.models, options_.models_dir, record, &model);
  if (st.ok()) {
    Conclude(record, kCompleted, "training completed; model " + model.id + " stored", std::nullopt);
  } else {
    Conclude(record, kFailed, "the training completed but its model could not be stored",
             st.message());
  }
}

void Scheduler::Conclude(const TrainingRecord& record, const std::string& state,
                         const std::string& message, const std::optional<std::string>& failure) {
  signalled_.erase(record.id);
  (void)store_.Finish(record.id, state, message, failure);
  std::optional<TrainingRecord> now = store_.GetAny(record.id);
  if (now && now->hard_delete) RemoveTraining(store_, *now);
}

}  // namespace cadre::service
