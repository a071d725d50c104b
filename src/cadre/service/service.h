// Service: `cadre server` as an object. One process serves the WML v4 trainings API and the
// dashboard over HTTP (cpp-httplib), keeps its state in SQLite under the data directory, and
// runs jobs through the scheduler.
//
// Data directory layout:
//   cadre.db          users, plans, tokens, trainings (WAL mode)
//   jobs/<id>/        one job directory per training (its RESULT_DIR; see training_store.h)
//   trainings/<id>/   the service's folder per training: model/ (code), training.log, runner.pid
//   models/<id>/      stored models (model.json, model.pt), copied from completed trainings
//   deployments/<id>/ each deployment's scoring process: its port file and serve.log
//   server.lock       held (flock) by the one server that uses this directory
//
// Routes are registered per resource (routes.h); request helpers are in api.h.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "cadre/base/status.h"
#include "cadre/launch/gpu_plan.h"

namespace cadre::service {

// The port `cadre server` listens on unless told otherwise.
inline constexpr int kDefaultPort = 8900;

struct ServiceOptions {
  std::filesystem::path data_dir = "cadre-data";
  std::string host = "127.0.0.1";
  int port = kDefaultPort;      // 0: any free port (see Service::port)
  int64_t slots = 0;            // 0: this machine's cores, at least 4
  std::filesystem::path cadre;  // the cadre program that runs each job
  // The engine jobs run on ("local", "slurm", "mpi"), and the `cadre run` flags that choose it
  // and configure it (`--backend slurm --store-host ...`), given to every job's runner. A job
  // whose manifest names another execution.backend is refused.
  std::string backend = "local";
  std::vector<std::string> run_args;
  std::chrono::milliseconds grace{10000};
  int threads = 64;  // HTTP worker threads (log followers hold one each)
  // A request's head must arrive within `request_timeout` of its first byte; a large body (read
  // by a worker thread) within `request_timeout` of its head, plus a second for every
  // `min_upload_rate` bytes (408 otherwise).
  std::chrono::seconds request_timeout{30};
  uint64_t min_upload_rate = 16 << 10;
  uint64_t max_body = 256ull << 20;    // larger requests are refused (413, from Content-Length)
  uint64_t max_unzipped = 1ull << 30;  // a job's code, expanded
  std::filesystem::path web_dir;       // the dashboard's files
  // Deployments (deployments.h): the scorer program (default: cadre-serve beside `cadre`), how
  // often a deployment's dead process is started again, how many deployments at most, and the
  // largest prediction request (larger: 413 before it is read).
  std::filesystem::path serve_program;
  int64_t max_deployment_restarts = 3;
  int64_t max_deployments = 16;
  uint64_t max_prediction_bytes = 16ull << 20;
};

// The folder of the dashboard's files beside the source tree or the installed program.
std::filesystem::path DefaultWebDir();

class Service {
 public:
  explicit Service(ServiceOptions options);
  ~Service();
  Service(const Service&) = delete;
  Service& operator=(const Service&) = delete;

  // Opens the database (migrating it), starts the scheduler and binds the listening socket.
  Status Start();
  int port() const { return port_; }
  const ServiceOptions& options() const { return options_; }
  // The GPUs its jobs share (none on a cluster backend); after Start.
  const launch::MachineGpus& gpus() const;
  // Serves until Stop(); returns when the listener has closed and every deployment's process
  // has been stopped.
  void Run();
  // Safe from any thread.
  void Stop();

 private:
  struct Parts;
  ServiceOptions options_;
  std::unique_ptr<Parts> parts_;
  std::atomic<bool> stopping_{false};
  int port_ = 0;
};

// Adds a user to the server whose data directory is `data_dir` (creating the database when it
// does not exist yet; the server may be running). *token is the new bearer token.
Status AddUser(const std::filesystem::path& data_dir, const std::string& name,
               const std::string& plan, std::string* token);

// What `cadre users token|revoke|plan` do, on the same terms as AddUser (accounts.h).
enum class UserChange { kNewToken, kRevokeTokens, kSetPlan };
// `value` is the plan for kSetPlan; *out is the new token, or the count of revoked tokens.
Status ChangeUser(const std::filesystem::path& data_dir, UserChange change, const std::string& name,
                  const std::string& value, std::string* out);

}  // namespace cadre::service
