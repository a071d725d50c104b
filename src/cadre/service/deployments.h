// Deployments: the scoring processes of online deployments, one per deployment, and the
// supervisor thread that starts, watches and stops them.
//
// Isolation: each deployment is its own `cadre-serve` process (serving/serve_main.cc) on a free
// loopback port, serving the stored model under the deployment's id and answering only to a
// bearer token of its own (passed in its environment, never on its command line). A model that
// crashes or exhausts memory takes down its own process only. The supervisor notices a process
// that ended: one that never became ready because it could not load the model (exit code 2)
// fails at once, with its last output as the reason; otherwise it is started again, at most
// `max_restarts` times over the deployment's life, then the deployment fails saying how its
// process ended. A process that is not ready within `startup_timeout` is killed and fails.
// A ready process is asked `/v2/health/live` every `health_period`; one that leaves
// `health_misses` questions in a row unanswered within `health_timeout`, and no prediction
// either meanwhile (stopped, hung, its HTTP threads stuck), is killed with SIGKILL and ends as a
// crashed one does: started again, or failed past `max_restarts`, the message saying it stopped
// answering.
//
// The processes are children of the server, started by the supervisor thread with
// PR_SET_PDEATHSIG, so they die with the server even when it is killed with SIGKILL. On an
// orderly stop (StopAll) every process gets SIGTERM (cadre-serve answers what it has queued and
// exits), then SIGKILL after `grace`. Deployments recorded `initializing` or `ready` are
// started again when the server starts (Start): a restart of the service brings its deployments
// back; `failed` ones stay failed.
//
// A deleted deployment (Retire) is stopped the same way: requests already inside its process
// are answered; requests still on their way to it get 503 from the proxy.
//
// An update to another model (Update) starts the new model's process beside the current one,
// in a folder of its own; the current one answers every prediction until the new one is ready,
// then the new one takes them and the old one is stopped as a deleted one is. A new process
// that does not become ready leaves the current one answering, and the reason in the message.
// A deployment with no process (failed) simply starts afresh with the new model. The count of
// restarts starts again at 0 with each update.
//
// State changes are written to the DeploymentStore; the processes (pid, port, token) are only
// in memory. Thread-safe.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "cadre/service/deployment_store.h"
#include "cadre/service/model_store.h"

namespace cadre::service {

struct DeploymentOptions {
  std::filesystem::path serve_program;  // cadre-serve
  std::filesystem::path dir;            // one folder per deployment: port file, serve.log
  int64_t max_restarts = 3;
  std::chrono::milliseconds startup_timeout{120000};
  std::chrono::milliseconds grace{10000};  // SIGTERM to SIGKILL
  std::chrono::milliseconds poll{100};     // while a process is starting or stopping
  std::chrono::milliseconds health_period{5000};
  std::chrono::milliseconds health_timeout{10000};
  int health_misses = 3;
  uint64_t max_request_bytes = 32ull << 20;  // passed on to cadre-serve
  int http_threads = 16;                     // each process's connections at once
};

// Where a ready deployment's process listens, and the token it takes.
struct ScoringTarget {
  int port = 0;
  std::string token;
};

class Deployments {
 public:
  Deployments(DeploymentStore& store, ModelStore& models, DeploymentOptions options);
  ~Deployments();  // StopAll
  Deployments(const Deployments&) = delete;
  Deployments& operator=(const Deployments&) = delete;

  // Starts the supervisor, and the processes of deployments recorded initializing or ready.
  void Start();
  // `record` was just inserted (initializing): start its process.
  void Launch(const DeploymentRecord& record);
  // `record` is to serve `model` instead: start its process, swap once it is ready.
  void Update(const DeploymentRecord& record, const ModelRecord& model);
  // The deployment's row was removed: stop its process.
  void Retire(const std::string& id);
  // The ready deployment's process; nullopt when it is not ready.
  std::optional<ScoringTarget> Target(const std::string& id);
  // The process on `port` answered a proxied request: it is live, whatever its health
  // questions said (a slow model's busy HTTP threads may keep those waiting).
  void Answered(const std::string& id, int port);
  // Something may have happened to a process (a proxied request broke): look now.
  void Wake();
  // Stops every process (SIGTERM, then SIGKILL after grace) and the supervisor. Idempotent.
  void StopAll();

 private:
  // The read end of a process's error pipe (cadre-serve --error-fd): closed with its owner.
  class ErrorPipe {
   public:
    ErrorPipe() = default;
    explicit ErrorPipe(int fd) : fd_(fd) {}
    ErrorPipe(ErrorPipe&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
    ErrorPipe& operator=(ErrorPipe&& o) noexcept {
      if (this != &o) {
        Reset();
        fd_ = std::exchange(o.fd_, -1);
      }
      return *this;
    }
    ~ErrorPipe() { Reset(); }
    void Reset();
    // What the ended process wrote (at most 4 KiB); closes the pipe.
    std::string Drain();

   private:
    int fd_ = -1;
  };

  struct Process {
    std::string id;
    std::string model_id;
    std::filesystem::path model_dir, dir;
    pid_t pid = 0;  // 0: to be started
    int port = 0;
    std::string token;
    bool ready = false;
    bool was_ready = false;  // since its last start
    int64_t restarts = 0;
    std::string last_end;  // how its last process ended, when it was restarted
    std::chrono::steady_clock::time_point started, term_sent;
    std::string fail_reason;  // set when the supervisor killed it for good
    std::chrono::steady_clock::time_point health_asked;
    int health_missed = 0;
    std::string killed_for;   // set when the supervisor killed it for not answering
    std::string update_note;  // how the last update that did not happen ended (the record's)
    ErrorPipe errors;         // the error that ended it, heard even when its log cannot be written
  };

  void Loop();
  void Pass();
  void Spawn(Process& p);
  // The process ended with wait status `status`: restarts it (true), or records the failure
  // (false: the caller forgets it).
  bool Ended(Process& p, int status);
  // Asks each ready process of `ready` (id, port) whether it is live; kills the one that
  // missed too many questions in a row.
  void CheckLive(const std::vector<std::pair<std::string, int>>& ready);
  // Asks the processes that wrote their port whether they are ready; `updates`: those of
  // updates_, which take over from live_ when they are.
  void CheckReady(const std::vector<std::pair<std::string, int>>& starting, bool updates);
  // A process still starting: killed past startup_timeout (fail_reason set), else its port
  // added to `starting` once it wrote it.
  void WatchStart(Process& p, std::chrono::steady_clock::time_point now,
                  std::vector<std::pair<std::string, int>>* starting);
  // Starts, reaps and times out the processes of updates_; returns those that wrote their port.
  std::vector<std::pair<std::string, int>> PassUpdates();
  // The update's process did not become ready: the live process carries on.
  void UpdateFailed(const Process& next, const std::string& why);
  // Moves `p` to retiring_ (SIGTERM) when it runs, else removes its folder.
  void RetireProcess(Process p);
  void ShutDown();  // on the supervisor thread, so that PR_SET_PDEATHSIG holds until the end
  // SIGTERM to every process of `all`, SIGKILL to those left after grace; returns once all ended.
  void Reap(std::vector<Process>& all);
  void Record(const Process& p, const std::string& state, const std::string& message,
              const std::optional<std::string>& failure);
  // `message` and, when the last update did not happen, how it ended: a later "ready" does not
  // hide it.
  static std::string WithUpdateNote(const Process& p, std::string message);
  // The process of a recorded deployment, not started; nullopt (recorded failed) when its model
  // is gone.
  std::optional<Process> ProcessFor(const DeploymentRecord& record);

  DeploymentStore& store_;
  ModelStore& models_;
  DeploymentOptions options_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool woken_ = false;
  bool stopping_ = false;
  std::map<std::string, Process> live_;     // GUARDED_BY(mutex_)
  std::map<std::string, Process> updates_;  // GUARDED_BY(mutex_): the next model's process
  std::vector<Process> retiring_;           // GUARDED_BY(mutex_): SIGTERM sent
  std::thread thread_;
};

}  // namespace cadre::service
