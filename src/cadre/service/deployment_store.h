// DeploymentStore: the `deployments` table, one row per online deployment of a stored model.
//
// States are WML's: initializing (its scoring process is starting, or starting again after it
// died), updating (a process for another model is starting while the current one answers),
// ready (answering predictions), failed (with the reason in `failure`). A deleted
// deployment's row is removed at once; its process is stopped by the Deployments supervisor
// (deployments.h). Every read by a route takes the owner's user id: another user's deployment
// is simply not found.
//
// Thread-safe: every call takes the Db's lock.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cadre/base/status.h"
#include "cadre/service/db.h"

namespace cadre::service {

inline constexpr char kInitializing[] = "initializing";
inline constexpr char kUpdating[] = "updating";
inline constexpr char kReady[] = "ready";
// kFailed ("failed") is shared with trainings (training_store.h).

struct DeploymentRecord {
  int64_t seq = 0;
  std::string id;
  int64_t user_id = 0;
  std::string name;
  std::string model_id;
  std::string state = kInitializing;
  std::optional<std::string> message, failure;
  int64_t restarts = 0;
  // The model of the update under way (state updating), and how the last update that did not
  // happen ended (failed, or abandoned when the server stopped): kept until one succeeds.
  std::optional<std::string> updating_to, update_note;
  std::string created_at, modified_at;
};

class DeploymentStore {
 public:
  explicit DeploymentStore(Db& db) : db_(db) {}

  Status Insert(DeploymentRecord* record);  // sets seq
  std::optional<DeploymentRecord> Get(const std::string& id, int64_t user_id);
  std::optional<DeploymentRecord> GetAny(const std::string& id);
  std::vector<DeploymentRecord> List(int64_t user_id);  // newest first
  std::vector<DeploymentRecord> InStates(const std::vector<std::string>& states);
  int64_t Count();
  // Sets state, message, failure (null clears it) and restarts; NotFound once deleted.
  Status Update(const std::string& id, const std::string& state, const std::string& message,
                const std::optional<std::string>& failure, int64_t restarts);
  // Sets the deployment's name, or the model it serves (which ends any update: updating_to and
  // update_note are cleared); NotFound once deleted.
  Status SetName(const std::string& id, const std::string& name);
  Status SetModel(const std::string& id, const std::string& model_id);
  // Sets updating_to and update_note (nullopt clears); NotFound once deleted.
  Status SetUpdate(const std::string& id, const std::optional<std::string>& updating_to,
                   const std::optional<std::string>& update_note);
  // Removes the user's deployment; false when there was none.
  bool Remove(const std::string& id, int64_t user_id);

 private:
  Db& db_;
};

}  // namespace cadre::service
