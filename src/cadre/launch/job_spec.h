// JobSpec: a validated job, everything a backend needs to start it. BuildJobSpec turns a
// JobRequest (manifest and/or flags) into one, or reports every problem it finds.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "cadre/launch/catalog.h"
#include "cadre/launch/manifest.h"
#include "cadre/launch/problems.h"

namespace cadre::launch {

// Largest job the local backend starts: learner addresses are 127.0.x.<learner> (x per job).
inline constexpr int kMaxLearners = 250;
inline constexpr int kMaxSlotsPerLearner = 64;
// Most restarts a job may ask for (a job failing this often has a problem restarts won't fix).
inline constexpr int kMaxRestarts = 1000;
// Elastic jobs: when a lost learner is offered back, and the longest wait that can be asked for.
inline constexpr int kDefaultRejoinAfterS = 30;
inline constexpr int kMaxRejoinAfterS = 7 * 24 * 3600;

struct JobSpec {
  std::string name;
  Framework framework;
  std::string framework_version;  // as requested; empty when not given
  std::string command;  // run with /bin/sh -c in every slot (unless command_argv is given)
  std::vector<std::string> command_argv;  // when given: exec'd directly, PATH searched
  ComputeConfig compute;
  // The field or flag that chose it ("--compute", "gpus", ...), for messages about the GPUs.
  std::string compute_origin = "execution.compute_configuration.name";
  int nodes = 1;              // learners
  int parameter_servers = 0;  // PS mode: learners 1..parameter_servers serve
  int slots_per_learner = 1;  // 1 in PS mode, compute.slots in the allreduce modes
  // Fault tolerance (docs/manifest.md, "Restarts"): after a learner fails the job is stopped and
  // started again, up to max_restarts times. With min_nodes < nodes (Horovod mode only) the
  // restarted job goes on without the failed learners while at least min_nodes remain.
  int max_restarts = 0;
  int min_nodes = 1;  // == nodes unless elastic
  // Elastic: a lost learner is taken back this long after it was lost (the learners stop at
  // their next hvd.elastic commit and the job starts again on every learner); -1: never.
  int rejoin_after_s = kDefaultRejoinAfterS;
  std::filesystem::path work_dir;     // where the command runs; MODEL_DIR
  std::filesystem::path data_dir;     // DATA_DIR; empty: the job directory's data/ folder
  std::filesystem::path results_dir;  // job directories are created under it
  std::string manifest_text;
  std::string backend;  // as the manifest names it (checked by the backends layer); "" if unset
  std::string image;    // the container image, for Kubernetes

  int total_slots() const { return nodes * slots_per_learner; }
  bool is_server(int learner_id) const { return learner_id <= parameter_servers; }
  // The learners given GPUs: all but the parameter servers, whose optimizer runs on CPUs
  // (gpu_plan.h).
  int gpu_learners() const { return nodes - parameter_servers; }
  bool elastic() const { return min_nodes < nodes; }
};

// What is installed here, as far as validation cares.
struct Installed {
  std::optional<std::string> torch_version;  // "1.13.0a0"; nullopt when no python has torch
  std::string python;                        // the interpreter it was found with
};

// Validates and resolves `request`. Relative paths resolve against request.base_dir. On any
// problem returns nullopt and `problems` holds all of them.
std::optional<JobSpec> BuildJobSpec(const JobRequest& request, const Installed& installed,
                                    Problems* problems);

}  // namespace cadre::launch
