// TrainingStore: the `trainings` table, one row per submitted job.
//
// A record's job_dir is the job's RESULT_DIR (<data>/jobs/<id>): the runner (`cadre run -o
// JOB_DIR`) writes status.json, manifest.yaml, the learners' learner-N/ folders and checkpoints
// there, and cadre.log_metrics writes metrics.jsonl. Its work_dir (<data>/trainings/<id>) is the
// service's own: model/ (the uploaded code and the manifest, MODEL_DIR, where the command runs),
// training.log (the runner's output: every learner's prefixed lines) and runner.pid. Layers
// above (deployments of a finished training) find a job's results through Get(id, user).
//
// States are WML's strings: queued (waiting for slots), pending (its runner is being started),
// running, storing (the training completed and its saved model is being copied into the
// model store, model_store.h), completed, failed, canceled. Every read takes the owner's user id:
// another user's job is simply not found. Rows with hard_delete set are invisible (their files are
// removed once the runner has ended).
//
// Thread-safe: every call takes the Db's lock.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "cadre/base/status.h"
#include "cadre/service/db.h"

namespace cadre::service {

inline constexpr char kQueued[] = "queued";
inline constexpr char kPending[] = "pending";
inline constexpr char kRunning[] = "running";
inline constexpr char kStoring[] = "storing";  // completed; its saved model is being stored
inline constexpr char kCompleted[] = "completed";
inline constexpr char kFailed[] = "failed";
inline constexpr char kCanceled[] = "canceled";

bool IsFinalState(const std::string& state);
bool IsKnownState(const std::string& state);

struct TrainingRecord {
  int64_t seq = 0;
  std::string id;
  int64_t user_id = 0;
  std::string name;
  std::string framework;
  int64_t nodes = 1;
  int64_t slots = 1;
  int64_t gpus = 0;  // GPUs it asks for: GPUs per learner x learners (0: a cpu configuration)
  // The machine's GPUs it holds while pending or running (its runner's CUDA_VISIBLE_DEVICES);
  // nullopt when it holds none.
  std::optional<std::string> gpu_ids;
  std::string state = kQueued;
  std::filesystem::path job_dir;   // RESULT_DIR
  std::filesystem::path work_dir;  // model/, training.log, runner.pid
  std::string created_at;
  std::optional<std::string> running_at, completed_at, message, failure;
  std::optional<int64_t> runner_pid, runner_start;
  bool cancel_requested = false;
  bool hard_delete = false;
  std::string entity;  // JSON: the submission as the API echoes it
};

struct TrainingPage {
  std::vector<TrainingRecord> records;
  int64_t total = 0;  // matching records in all pages
};

class TrainingStore {
 public:
  explicit TrainingStore(Db& db) : db_(db) {}

  Status Insert(TrainingRecord* record);  // sets record->seq
  std::optional<TrainingRecord> Get(const std::string& id, int64_t user_id);
  // Newest first. `state` empty: every state.
  TrainingPage List(int64_t user_id, const std::string& state, int64_t limit, int64_t start);
  // Learners of the user's queued, pending and running jobs.
  int64_t ActiveLearners(int64_t user_id);

  // For the scheduler (any user's jobs).
  std::vector<TrainingRecord> InStates(const std::vector<std::string>& states);
  std::optional<TrainingRecord> GetAny(const std::string& id);
  // Admitted, holding `gpu_ids` (nullopt: none); clears the queued job's message.
  Status SetPending(const std::string& id, const std::optional<std::string>& gpu_ids);
  // Why a queued job waits (its status message); only a queued job's is changed.
  Status SetQueuedReason(const std::string& id, const std::string& reason);
  Status SetRunning(const std::string& id, int64_t pid, int64_t start, const std::string& at);
  // Back in the queue (its runner never started): it holds no GPUs.
  Status SetQueued(const std::string& id);
  Status SetStoring(const std::string& id);  // from running
  Status Finish(const std::string& id, const std::string& state, const std::string& message,
                const std::optional<std::string>& failure);
  // Marks the job for cancellation (and deletion). Returns the record as it was; nullopt when
  // the user has no such job.
  std::optional<TrainingRecord> RequestCancel(const std::string& id, int64_t user_id, bool hard);
  Status Remove(const std::string& id);

 private:
  Db& db_;
};

}  // namespace cadre::service
