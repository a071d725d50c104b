// Backends: the engines that start a job's learners. The local backend runs them as processes on
// this machine (launch/local_backend.h); Slurm, Open MPI and Kubernetes start them on a cluster's
// nodes (pods), where `cadre task` turns the engine's facts about each process (its rank, its node,
// the node list) into the same learner contract (launch/contract.h) before running the job's
// command. So a training script never notices which engine ran it.
#pragma once

#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cadre/base/status.h"
#include "cadre/launch/job_spec.h"
#include "cadre/launch/local_backend.h"

namespace cadre::backends {

enum class BackendKind { kLocal, kSlurm, kMpi, kKubernetes };

// "local", "slurm", "mpi", "kubernetes" (or "k8s"); InvalidArgument listing the names otherwise.
Status ParseBackendKind(std::string_view name, BackendKind* kind);
std::string_view BackendName(BackendKind kind);

struct BackendOptions {
  BackendKind kind = BackendKind::kLocal;
  // Slurm, Kubernetes: a job still pending (queued; pods unschedulable or not started) after this
  // long is cancelled (deleted) and reported; zero waits for ever.
  std::chrono::seconds queue_timeout{0};
  std::optional<int> time_limit_minutes;  // sbatch --time
  std::string partition;                  // sbatch --partition; empty: the cluster's default
  std::filesystem::path hostfile;         // Open MPI: the hosts, one learner each
  std::string name_space;                 // Kubernetes: the namespace; empty: "default"
  // The address learners reach this machine's rendezvous store at; empty: this host's name,
  // resolved here.
  std::string store_host;
  // The cadre program the nodes run (`cadre task`); empty: this one (/proc/self/exe). It must be
  // at the same path on every node, as must the job directory.
  std::filesystem::path cadre_program;
  std::chrono::milliseconds poll_interval{500};
  // Slurm, Open MPI: the slots and cadre run beat through the rendezvous store (heartbeat.h); a
  // slot not heard from for this long is lost (its node), and a slot that has not heard from
  // cadre run for this long stops. Zero: no heartbeats.
  std::chrono::milliseconds heartbeat_timeout{std::chrono::seconds(60)};
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;
  // Whether the engine's commands are here: one clear error (kUnavailable) before anything starts.
  virtual Status CheckEngine() const = 0;
  // Whether this job can run on the engine as configured (an Open MPI hostfile with a host for
  // every learner, say): kInvalidArgument naming the flag at fault, before anything starts.
  virtual Status CheckJob(const launch::JobSpec& spec) const {
    (void)spec;
    return Status::Ok();
  }
  // Runs the job to its end, as RunLocalJob: a failed Status when it could not be set up or
  // submitted, the job's own outcome in *outcome.
  virtual Status Run(const launch::JobSpec& spec, const launch::RunOptions& options,
                     launch::JobOutcome* outcome) = 0;
};

std::unique_ptr<Backend> MakeBackend(const BackendOptions& options);

// The engine-specific flags of `cadre run` and `cadre server` that were given.
struct EngineFlagsGiven {
  bool partition = false;          // --partition
  bool time_limit = false;         // --time-limit
  bool hostfile = false;           // --hostfile
  bool store_host = false;         // --store-host
  bool queue_timeout = false;      // --queue-timeout
  bool name_space = false;         // --namespace
  bool heartbeat_timeout = false;  // --heartbeat-timeout
};
struct MisplacedFlag {
  std::string flag;     // "--partition"
  std::string message;  // "is for --backend slurm"
};
// Each given flag that `kind` would ignore, with the engines it is for: a flag that is silently
// ignored is a job that does not run where or as its user meant.
std::vector<MisplacedFlag> FlagsForOtherEngines(BackendKind kind, const EngineFlagsGiven& given);

// --heartbeat-timeout S of `cadre run` and `cadre server`: 0 (no heartbeats) or 1..86400
// seconds; *timeout is set when it is one of those.
Status ParseHeartbeatTimeout(double seconds, std::chrono::milliseconds* timeout);

// kUnavailable naming the first of `programs` that is not on PATH, and what needs it.
Status RequirePrograms(std::string_view engine, std::initializer_list<const char*> programs);

}  // namespace cadre::backends
