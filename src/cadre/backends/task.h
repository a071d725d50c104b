// `cadre task`: one slot of a job started by a cluster engine (srun, mpirun).
//
// The runner writes the job's plan to <job dir>/task.json (the job-wide contract, the command,
// the interpreter) and the job token to <job dir>/token (owner-only); both must be where the
// nodes see them, at the same path. Each slot the engine starts runs `cadre task --engine E
// --job-dir DIR`, which reads its place from the engine's variables (engine_facts.h), resolves the
// nodes' addresses, writes the learners' hosts file, makes the learner contract and runs the
// command with it, its output in <job dir>/learner-<id>/slot-<k>.log as under the local backend.
// When the command ends, the slot's record <job dir>/learner-<id>/slot-<k>.exit says how, so the
// runner can name the learner that failed a job. A parameter server's slot stops its command once
// every worker's record says it succeeded. SIGTERM/SIGINT/SIGHUP are passed to the command.
#pragma once

#include <chrono>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "cadre/backends/engine_facts.h"
#include "cadre/base/status.h"
#include "cadre/launch/contract.h"
#include "cadre/launch/process.h"

namespace cadre::backends {

struct TaskPlan {
  launch::JobContract job;  // hosts empty: the engine places the learners
  std::string command;      // run with /bin/sh -c unless command_argv is given
  std::vector<std::string> command_argv;
  std::filesystem::path python_bin_dir;
  std::string python_path;
  // Each slot beats through the runner's store and stops when the runner has answered no beat
  // for this long (heartbeat.h); zero: no heartbeats.
  std::chrono::milliseconds heartbeat_timeout{0};
};

std::string TaskPlanJson(const TaskPlan& plan);
Status ParseTaskPlanJson(const std::string& text, TaskPlan* plan);
std::filesystem::path TaskPlanPath(const std::filesystem::path& job_dir);
std::filesystem::path TokenPath(const std::filesystem::path& job_dir);

// Writes task.json and the token file (mode 0600) into plan.job.job_dir.
Status WriteTaskPlan(const TaskPlan& plan);

// How a slot ended, from its record.
struct SlotExit {
  int learner_id = 0;
  int local_rank = 0;
  std::optional<int> exit_code;
  std::optional<int> signal;
  bool stop_requested = false;  // the engine or the runner stopped it (not a failure of its own)
  double end_time = 0;          // seconds since the epoch
  std::string error;            // the task's own failure (bad plan, contract), if any
  std::string runner_lost;      // why the task stopped its slot: cadre run was gone

  bool succeeded() const { return exit_code && *exit_code == 0; }
  std::string Describe() const;  // "exited with code 3", "was killed by SIGKILL"
};
std::filesystem::path SlotExitPath(const std::filesystem::path& job_dir, int learner_id,
                                   int local_rank);
// The records written so far (missing ones are skipped).
std::vector<SlotExit> ReadSlotExits(const std::filesystem::path& job_dir, int learners, int slots);

// The slot's contract from the plan and the engine's facts; `addresses` are the nodes' addresses
// in learner order.
Status TaskContract(const TaskPlan& plan, const EngineSlot& slot,
                    const std::vector<std::string>& addresses, launch::LearnerContract* out);

// Runs one slot (slurm, mpi) or one learner's slots (kubernetes); returns the process's exit code
// (the command's, 128+signal, or 1 when the slot could not start; the reason goes to stderr and
// the slot's record). The plan and token files default to task.json and token in job_dir.
int RunTask(const std::string& engine, const std::filesystem::path& job_dir,
            const std::filesystem::path& plan_file = {},
            const std::filesystem::path& token_file = {});

// Kubernetes (k8s_task.cc): the slot's place from the pod's name (CADRE_POD_NAME or HOSTNAME,
// "<prefix>-<N>"); and the learner's whole pod. `job_dir` (--job-dir, the pod's own volume) is
// the job directory there, whatever the plan says (the same path on a cluster).
Status KubernetesSlotFromEnv(const EnvMap& env, const launch::JobContract& job, EngineSlot* out);
int RunKubernetesLearner(TaskPlan plan, const std::filesystem::path& job_dir);
// The line a learner's pod writes once every slot succeeded, before it holds (a StatefulSet
// would restart an exited container): how `cadre run --backend kubernetes` knows it finished.
std::string KubernetesFinishedLine(int learner_id);

// Shared by the engines' tasks.
std::string ReadTextFile(const std::filesystem::path& path, bool* ok = nullptr);
EnvMap ProcessEnv();
// The name's IPv4 address as this machine resolves it; "" when it does not.
std::string ResolveIPv4(const std::string& name);
// The slot's command, environment (the contract over this process's), folder and hosts method.
launch::SpawnOptions SlotSpawn(const TaskPlan& plan, const launch::LearnerContract& contract,
                               launch::HostsMethod method, const std::filesystem::path& hosts_file);

}  // namespace cadre::backends
