// ModelStore: the `models` table, the models that completed trainings saved with
// cadre.save_model, and StoreTrainingModel, which copies one into the service's model store.
//
// A training's model folder is `<job_dir>/model` (cadre.save_model's default: $RESULT_DIR/model).
// When a training completes with a `model.json` there, the scheduler moves it to state `storing`
// and StoreTrainingModel copies model.json and the model file it names (regular files only,
// never a link) into `<data>/models/<model id>/` through a temporary folder renamed into place,
// then registers the model. A training has at most one model (training_id is unique), so
// storing again after a crash of the server mid-copy registers nothing twice.
//
// Every read takes the owner's user id: another user's model is simply not found.
// Thread-safe: every call takes the Db's lock.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "cadre/base/status.h"
#include "cadre/service/db.h"
#include "cadre/service/training_store.h"

namespace cadre::service {

struct ModelRecord {
  int64_t seq = 0;
  std::string id;
  int64_t user_id = 0;
  std::string training_id;
  std::string name;
  std::filesystem::path dir;  // model.json and the model file
  std::string signature;      // model.json's text
  int64_t size_bytes = 0;
  std::string created_at;
};

class ModelStore {
 public:
  explicit ModelStore(Db& db) : db_(db) {}

  Status Insert(const ModelRecord& record);
  std::optional<ModelRecord> Get(const std::string& id, int64_t user_id);
  std::optional<ModelRecord> GetAny(const std::string& id);
  std::optional<ModelRecord> OfTraining(const std::string& training_id);
  // Newest first; `training_id` empty: all of the user's models.
  std::vector<ModelRecord> List(int64_t user_id, const std::string& training_id);

 private:
  Db& db_;
};

// The folder a training's script saves its model into.
std::filesystem::path TrainingModelDir(const TrainingRecord& training);
// Whether the training left a saved model (its model.json exists).
bool TrainingSavedModel(const TrainingRecord& training);

// Copies the training's saved model into `models_dir` and registers it (see above). Errors name
// the file at fault; the training then fails with that reason.
Status StoreTrainingModel(ModelStore& models, const std::filesystem::path& models_dir,
                          const TrainingRecord& training, ModelRecord* stored);

}  // namespace cadre::service
