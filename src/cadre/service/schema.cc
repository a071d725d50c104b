#include "cadre/service/schema.h"

#include <iterator>
#include <string>

#include "cadre/service/db.h"

namespace cadre::service {
namespace {

// Append only: a released step is never edited, a change is a new step.
constexpr const char* kSteps[] = {
    // 1: plans, users, tokens, trainings.
    R"sql(
CREATE TABLE plans (
  name TEXT PRIMARY KEY,
  description TEXT NOT NULL,
  max_nodes INTEGER NOT NULL,            -- learners per job
  max_active_learners INTEGER NOT NULL,  -- learners of the user's queued and running jobs together
  distributed INTEGER NOT NULL           -- 0: no job with nodes > 1 or a distributed framework
);
INSERT INTO plans VALUES
  ('lite', 'Single-learner jobs, one at a time or two', 1, 2, 0),
  ('standard', 'Distributed jobs up to 8 learners', 8, 32, 1),
  ('premium', 'Distributed jobs up to 64 learners', 64, 1024, 1);
CREATE TABLE users (
  id INTEGER PRIMARY KEY,
  name TEXT NOT NULL UNIQUE,
  plan TEXT NOT NULL REFERENCES plans(name),
  created_at TEXT NOT NULL
);
CREATE TABLE tokens (
  id TEXT PRIMARY KEY,                   -- the public half of a token
  user_id INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
  salt TEXT NOT NULL,
  hash TEXT NOT NULL,                    -- hex SHA-256 of salt and the secret half
  created_at TEXT NOT NULL
);
CREATE TABLE trainings (
  seq INTEGER PRIMARY KEY AUTOINCREMENT, -- submission order: the queue's order
  id TEXT NOT NULL UNIQUE,
  user_id INTEGER NOT NULL REFERENCES users(id),
  name TEXT NOT NULL,
  framework TEXT NOT NULL,
  nodes INTEGER NOT NULL,
  slots INTEGER NOT NULL,                -- processes the job runs: what the scheduler admits
  state TEXT NOT NULL,                   -- WML state strings
  job_dir TEXT NOT NULL,                 -- the runner's job directory: RESULT_DIR
  work_dir TEXT NOT NULL,                -- the service's: model/ (code), training.log, runner.pid
  created_at TEXT NOT NULL,
  running_at TEXT,
  completed_at TEXT,
  message TEXT,
  failure TEXT,
  runner_pid INTEGER,
  runner_start INTEGER,                  -- the runner's start time (/proc stat), against pid reuse
  cancel_requested INTEGER NOT NULL DEFAULT 0,
  hard_delete INTEGER NOT NULL DEFAULT 0,
  entity TEXT NOT NULL                   -- the submission as the API echoes it (JSON)
);
CREATE INDEX trainings_by_user ON trainings(user_id, seq);
CREATE INDEX trainings_by_state ON trainings(state, seq);
)sql",
    // 2: models stored from completed trainings, and their online deployments.
    R"sql(
CREATE TABLE models (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  id TEXT NOT NULL UNIQUE,
  user_id INTEGER NOT NULL REFERENCES users(id),
  training_id TEXT NOT NULL UNIQUE,      -- one model per training: storing is idempotent
  name TEXT NOT NULL,
  dir TEXT NOT NULL,                     -- the service's copy: <data>/models/<id>
  signature TEXT NOT NULL,               -- model.json as cadre.save_model wrote it
  size_bytes INTEGER NOT NULL,
  created_at TEXT NOT NULL
);
CREATE INDEX models_by_user ON models(user_id, seq);
CREATE TABLE deployments (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  id TEXT NOT NULL UNIQUE,
  user_id INTEGER NOT NULL REFERENCES users(id),
  name TEXT NOT NULL,
  model_id TEXT NOT NULL,
  state TEXT NOT NULL,                   -- initializing, ready, failed
  message TEXT,
  failure TEXT,
  restarts INTEGER NOT NULL DEFAULT 0,   -- times its process was started again after dying
  created_at TEXT NOT NULL,
  modified_at TEXT NOT NULL
);
CREATE INDEX deployments_by_user ON deployments(user_id, seq);
)sql",
    // 3: the GPUs a training needs (GPUs per learner x learners) and those it was given.
    R"sql(
ALTER TABLE trainings ADD COLUMN gpus INTEGER NOT NULL DEFAULT 0;
ALTER TABLE trainings ADD COLUMN gpu_ids TEXT;  -- CUDA_VISIBLE_DEVICES of its runner, once admitted
)sql",
    // 4: a deployment's update under way (the model it goes to), and how the last update that
    // did not happen ended, told until an update succeeds.
    R"sql(
ALTER TABLE deployments ADD COLUMN updating_to TEXT;
ALTER TABLE deployments ADD COLUMN update_note TEXT;
)sql",
};

constexpr int kStepCount = static_cast<int>(std::size(kSteps));

}  // namespace

int SchemaVersion() { return kStepCount; }

Status Migrate(Db& db) {
  int version = 0;
  {
    Statement read(db, "PRAGMA user_version");
    if (read.Step()) version = static_cast<int>(read.Int(0));
    CADRE_RETURN_IF_ERROR(read.status());
  }
  if (version > kStepCount) {
    return InvalidArgument("the database has schema version " + std::to_string(version) +
                           ", newer than this cadre knows (" + std::to_string(kStepCount) +
                           "); use the cadre that wrote it");
  }
  for (int step = version; step < kStepCount; ++step) {
    Transaction tx(db);
    CADRE_RETURN_IF_ERROR(tx.status());
    // Another process may have migrated between our read and BEGIN IMMEDIATE.
    Statement again(db, "PRAGMA user_version");
    if (again.Step() && again.Int(0) > step) continue;
    CADRE_RETURN_IF_ERROR(
        db.Exec(kSteps[step]).WithContext("schema step " + std::to_string(step + 1)));
    CADRE_RETURN_IF_ERROR(db.Exec("PRAGMA user_version = " + std::to_string(step + 1)));
    CADRE_RETURN_IF_ERROR(tx.Commit());
  }
  return Status::Ok();
}

}  // namespace cadre::service
