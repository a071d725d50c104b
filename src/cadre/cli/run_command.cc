// `cadre run`: a training job on this machine, from a manifest or from flags.
//
//   cadre run job.yaml [flags]
//   cadre run -n 2 --compute k80x2 --framework pytorch-horovod -- python3 train.py
//
// Flags override the manifest's fields. Every problem with the job is printed at once and the
// exit code is 2 before anything starts; otherwise the exit code is the job's (0 completed,
// 1 failed, 128+signal when stopped by a signal).
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "cadre/backends/backend.h"
#include "cadre/backends/k8s_render.h"
#include "cadre/backends/slurm_backend.h"
#include "cadre/base/env.h"
#include "cadre/base/printable.h"
#include "cadre/cli/commands.h"
#include "cadre/cli/support.h"
#include "cadre/launch/cpu_binding.h"
#include "cadre/launch/hosts.h"
#include "cadre/launch/job_spec.h"
#include "cadre/launch/job_status.h"
#include "cadre/launch/local_backend.h"
#include "cadre/launch/manifest.h"
#include "cadre/launch/python_env.h"
#include "cadre/netem/link_spec.h"

namespace cadre::cli {
namespace {

struct RunFlags {
  std::vector<std::string> args;  // a manifest, or the command after `--`
  std::optional<int64_t> nodes, parameter_servers, max_restarts, min_nodes, rejoin_after;
  std::optional<std::string> compute, framework, framework_version, name, data_dir, results_dir;
  std::optional<std::string> output_dir;
  std::optional<std::string> training_id;
  double grace_seconds = 10;
  bool quiet = false;
  std::optional<std::string> emulate_network;  // a netem link spec
  bool require_delay = false;
  // Where the learners run (backends/backend.h).
  std::optional<std::string> backend;  // default: the manifest's execution.backend, else local
  std::optional<double> queue_timeout_seconds;  // given 0: wait as long as it takes
  std::optional<double> heartbeat_timeout_seconds;
  std::optional<std::string> time_limit;  // sbatch's --time forms (ParseTimeLimit)
  std::string partition, hostfile, store_host;
  std::optional<std::string> image;  // Kubernetes: the container image (the manifest's `image`)
  std::string name_space;            // Kubernetes: the namespace
};

// A manifest by its name: .yaml or .yml, or .json (WML's own format, which YAML reads), in any
// case. Anything else was run as the learners' command: `cadre run JOB.YAML` failed every
// learner with "exec: JOB.YAML: not found".
bool IsManifestPath(const std::string& arg) {
  std::string lower = arg;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return lower.ends_with(".yaml") || lower.ends_with(".yml") || lower.ends_with(".json");
}

// Words of a command line joined for /bin/sh -c, each quoted unless plainly safe.
std::string ShellJoin(const std::vector<std::string>& words) {
  std::string out;
  for (const auto& w : words) {
    if (!out.empty()) out += ' ';
    bool safe = !w.empty() && w.find_first_not_of(
                                  "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUV"
                                  "WXYZ0123456789_-./=:,+@%") == std::string::npos;
    if (safe) {
      out += w;
      continue;
    }
    out += '\'';
    for (char c : w) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    out += '\'';
  }
  return out;
}

// Says why the job did not run, on stderr and, for a runner given its job directory and
// training id (-o and --training-id, as the job service starts it), in that directory's
// status.json: the service cannot see this process's exit status, and would otherwise only know
// that the runner ended without a word.
int Refuse(const RunFlags& flags, const std::string& reason, int exit_code) {
  std::cerr << "cadre run: " << reason << "\n";
  if (flags.output_dir && !flags.output_dir->empty() && flags.training_id) {
    Status recorded = launch::RecordRefusal(std::filesystem::path(*flags.output_dir),
                                            *flags.training_id, reason, exit_code);
    if (!recorded.ok()) std::cerr << "cadre run: warning: " << recorded.message() << "\n";
  }
  return exit_code;
}

int Run(const RunFlags& flags) {
  launch::JobRequest request;
  launch::Problems problems;
  bool from_manifest = flags.args.size() == 1 && IsManifestPath(flags.args[0]);
  bool readable = true;
  if (from_manifest) {
    readable = launch::LoadManifestFile(flags.args[0], &request, &problems);
  } else {
    request.base_dir = std::filesystem::current_path();
    // A flags-only job: one CPU learner in parameter-server mode unless told otherwise.
    request.framework.Set("pytorch", "--framework");
    request.command.origin = "command (after --)";
    // A problem with the default count names the flag that changes it, not a manifest field.
    request.nodes.origin = "--nodes";
    if (!flags.args.empty() && IsManifestPath(flags.args[0])) {
      problems.Add("command (after --)", QuotedText(flags.args[0]) +
                                             " is a manifest; give either a manifest or a "
                                             "command after --, not both");
    } else if (!flags.args.empty()) {
      // sh would fail every learner with "exec: : Permission denied".
      if (flags.args[0].empty()) {
        problems.Add("command (after --)", "the program to run is an empty word");
      }
      request.command.Set(ShellJoin(flags.args), "command (after --)");
      request.command_argv = flags.args;
    }
  }
  if (flags.nodes) request.nodes.Set(*flags.nodes, "--nodes");
  if (flags.parameter_servers) {
    request.parameter_servers.Set(*flags.parameter_servers, "--parameter-servers");
  }
  if (flags.compute) {
    request.compute.Set(*flags.compute, "--compute");
    request.gpus = {};
  }
  if (flags.framework) request.framework.Set(*flags.framework, "--framework");
  if (flags.framework_version) {
    request.framework_version.Set(*flags.framework_version, "--framework-version");
  }
  if (flags.name) request.name.Set(*flags.name, "--name");
  if (flags.data_dir) request.data_path.Set(*flags.data_dir, "--data-dir");
  if (flags.results_dir) request.results_path.Set(*flags.results_dir, "--results-dir");
  if (flags.max_restarts) request.max_restarts.Set(*flags.max_restarts, "--max-restarts");
  if (flags.min_nodes) request.min_nodes.Set(*flags.min_nodes, "--min-nodes");
  if (flags.rejoin_after) request.rejoin_after.Set(*flags.rejoin_after, "--rejoin-after");
  if (flags.image) request.image.Set(*flags.image, "--image");
  // A day at most: beyond that the grace is a mistake (and past int64 milliseconds, undefined).
  if (!(flags.grace_seconds >= 0 && flags.grace_seconds <= 86400)) {
    problems.Add("--grace", "must be 0..86400 seconds, got " + std::to_string(flags.grace_seconds));
  }
  if (flags.training_id && (flags.training_id->empty() || flags.training_id->size() > 64 ||
                            flags.training_id->find_first_not_of(
                                "abcdefghijklmnopqrstuvwxyz0123456789-") != std::string::npos)) {
    problems.Add("--training-id", "must be 1-64 lower-case letters, digits or '-'");
  }
  std::optional<netem::LinkSpec> link;
  if (flags.emulate_network) {
    link.emplace();
    Status parsed = netem::ParseLinkSpec(*flags.emulate_network, &*link);
    if (!parsed.ok()) problems.Add("--emulate-network", parsed.message());
  }
  backends::BackendOptions backend;
  // --backend, else the manifest's execution.backend, else local.
  if (flags.backend) request.backend.Set(*flags.backend, "--backend");
  bool backend_known = true;
  if (request.backend.has_value()) {
    if (Status kind = backends::ParseBackendKind(*request.backend, &backend.kind); !kind.ok()) {
      problems.Add(request.backend.origin, kind.message());
      backend_known = false;
    }
  }
  // Bounded, as --grace is: "nan", "inf" or 1e300 would otherwise become an undefined
  // number of seconds (and a job cancelled at once, or never).
  constexpr double kMaxQueueTimeoutS = 365.0 * 86400;
  const double queue_timeout = flags.queue_timeout_seconds.value_or(0);
  if (!(queue_timeout >= 0 && queue_timeout <= kMaxQueueTimeoutS)) {
    problems.Add("--queue-timeout", "must be 0 (wait as long as it takes)..31536000 seconds, got " +
                                        std::to_string(queue_timeout));
  } else {
    backend.queue_timeout = std::chrono::seconds(static_cast<int64_t>(queue_timeout + 0.999));
  }
  if (flags.heartbeat_timeout_seconds) {
    Status st = backends::ParseHeartbeatTimeout(*flags.heartbeat_timeout_seconds,
                                                &backend.heartbeat_timeout);
    if (!st.ok()) problems.Add("--heartbeat-timeout", st.message());
  }
  if (flags.time_limit) {
    int minutes = 0;
    if (Status limit = backends::ParseTimeLimit(*flags.time_limit, &minutes); !limit.ok()) {
      problems.Add("--time-limit", limit.message());
    } else {
      backend.time_limit_minutes = minutes;
    }
  }
  // The partition is a line of the batch script: a newline would add a line of its own to it.
  if (std::any_of(flags.partition.begin(), flags.partition.end(),
                  [](unsigned char c) { return c <= ' ' || c == 0x7f; })) {
    problems.Add("--partition", QuotedText(flags.partition) +
                                    " is not a Slurm partition name (no spaces or control "
                                    "characters; several are separated by commas)");
  }
  backend.partition = flags.partition;
  backend.hostfile = flags.hostfile;
  backend.store_host = flags.store_host;
  backend.name_space = flags.name_space;
  if (backend.kind == backends::BackendKind::kKubernetes &&
      (!request.image.has_value() || request.image->empty())) {
    problems.Add("--image",
                 "the kubernetes backend needs the job's container image (here or the "
                 "manifest's `image`); it must hold cadre and the job's command");
  }
  if (backend.kind == backends::BackendKind::kKubernetes && !flags.name_space.empty()) {
    if (Status ns = backends::CheckKubernetesNamespace(flags.name_space); !ns.ok()) {
      problems.Add("--namespace", ns.message());
    }
  }
  if (backend_known) {
    if (backend.kind != backends::BackendKind::kKubernetes && flags.image) {
      problems.Add("--image", "is for --backend kubernetes");
    }
    backends::EngineFlagsGiven given;
    given.partition = !flags.partition.empty();
    given.time_limit = flags.time_limit.has_value();
    given.hostfile = !flags.hostfile.empty();
    given.store_host = !flags.store_host.empty();
    given.queue_timeout = flags.queue_timeout_seconds.has_value();
    given.heartbeat_timeout = flags.heartbeat_timeout_seconds.has_value();
    given.name_space = !flags.name_space.empty();
    for (const auto& m : backends::FlagsForOtherEngines(backend.kind, given)) {
      problems.Add(m.flag, m.message);
    }
  }
  if (backend.kind != backends::BackendKind::kLocal && flags.emulate_network) {
    problems.Add("--emulate-network", "emulates nodes for the local backend only");
  }
  if (flags.require_delay && !flags.emulate_network) {
    problems.Add("--require-delay", "only means something with --emulate-network");
  }

  // The runner's own variables: a bad value is the job's problem like a bad flag's (exit 2),
  // not a failure found once the job is under way.
  if (launch::CpuBind bind;
      !launch::ParseCpuBind(GetEnv("CADRE_CPU_BIND").value_or(""), &bind).ok()) {
    problems.Add("CADRE_CPU_BIND", QuotedText(GetEnv("CADRE_CPU_BIND").value_or("")) +
                                       " is not one of auto (the default) or none");
  }
  if (std::optional<launch::HostsMethod> forced; !launch::HostsMethodFromEnv(&forced).ok()) {
    problems.Add("CADRE_HOSTS_METHOD",
                 QuotedText(GetEnv("CADRE_HOSTS_METHOD").value_or("")) +
                     " is not one of auto (the default), mount-namespace, user-namespace or "
                     "cadre-hosts");
  }
  launch::PythonInfo python = launch::FindPython();
  if (std::getenv("CADRE_PYTHON") != nullptr && access(python.interpreter.c_str(), X_OK) != 0) {
    problems.Add("CADRE_PYTHON",
                 QuotedText(python.interpreter, 1024) + " is not an executable interpreter");
  }
  launch::Installed installed{python.torch_version, python.interpreter};
  std::optional<launch::JobSpec> spec;
  if (readable) {
    spec = launch::BuildJobSpec(request, installed, &problems);
  }
  // A cluster engine runs a job once: restarts and elastic learners are the local runner's.
  if (spec && backend_known && backend.kind != backends::BackendKind::kLocal) {
    const std::string once =
        " backend runs a job once (restarts and elastic jobs are the local "
        "backend's for now)";
    if (spec->max_restarts > 0) {
      problems.Add(request.max_restarts.origin,
                   "the " + std::string(backends::BackendName(backend.kind)) + once);
    }
    if (spec->elastic()) {
      problems.Add(request.min_nodes.origin,
                   "the " + std::string(backends::BackendName(backend.kind)) + once);
    }
  }
  // A cluster engine's nodes get the job's plan as JSON, which is UTF-8: the command's arguments
  // travel in it losslessly (backends/task.h), paths would not.
  if (spec && backend_known && backend.kind != backends::BackendKind::kLocal) {
    auto utf8 = [&](const std::string& field, const std::string& value) {
      if (!IsUtf8(value)) {
        problems.Add(field, QuotedText(value) + " is not UTF-8 text, which the " +
                                std::string(backends::BackendName(backend.kind)) +
                                " backend needs to pass it to the nodes; choose another");
      }
    };
    if (flags.output_dir) utf8("--output-dir", *flags.output_dir);
    utf8(request.results_path.origin.empty() ? "--results-dir" : request.results_path.origin,
         spec->results_dir.string());
    utf8(request.data_path.origin.empty() ? "--data-dir" : request.data_path.origin,
         spec->data_dir.string());
    utf8("the working directory (MODEL_DIR)", spec->work_dir.string());
    utf8("--store-host", flags.store_host);
  }
  if (!problems.empty()) {
    std::string text = "the job has " + std::to_string(problems.size()) +
                       (problems.size() == 1 ? " problem" : " problems") + "; nothing was started:";
    for (const auto& p : problems.list()) text += "\n  " + p.ToString();
    return Refuse(flags, text, 2);
  }

  launch::RunOptions options;
  options.quiet = flags.quiet;
  options.status_line = !flags.quiet && isatty(STDOUT_FILENO) == 1;
  options.grace = std::chrono::milliseconds(static_cast<int64_t>(flags.grace_seconds * 1000));
  if (flags.output_dir) options.output_dir = std::filesystem::path(*flags.output_dir);
  options.training_id = flags.training_id;
  options.python = python;
  options.emulate_network = link;
  options.require_delay_loss = flags.require_delay;
  if (python.interpreter.empty() || !python.torch_version) {
    std::cerr << "cadre run: warning: no python3 with torch found"
              << (python.interpreter.empty() ? "" : " (using " + python.interpreter + ")")
              << "; set CADRE_PYTHON to choose the learners' interpreter\n";
  }
  // A missing engine is one clear error before anything starts.
  std::unique_ptr<backends::Backend> runner = backends::MakeBackend(backend);
  if (Status engine = runner->CheckEngine(); !engine.ok()) {
    return Refuse(flags, engine.message() + "; nothing was started", 2);
  }
  if (Status job = runner->CheckJob(*spec); !job.ok()) {
    return Refuse(flags, job.message() + "; nothing was started", 2);
  }
  launch::JobOutcome outcome;
  Status st = runner->Run(*spec, options, &outcome);
  if (!st.ok()) return Refuse(flags, st.ToString(), 1);
  return outcome.exit_code;
}

}  // namespace

void AddRunCommand(CLI::App& app, int* exit_code) {
  auto flags = std::make_shared<RunFlags>();
  auto* cmd = app.add_subcommand(
      "run",
      "Run a training job on this machine: `cadre run job.yaml`, or "
      "`cadre run -n 2 --compute k80x2 --framework pytorch-horovod -- python3 train.py`");
  cmd->add_option("manifest_or_command", flags->args,
                  "A manifest (.yaml/.yml/.json), or after `--` the command every learner runs");
  cmd->add_option("-n,--nodes", flags->nodes, "Learners (execution.compute_configuration.nodes)");
  cmd->add_option("--compute", flags->compute,
                  "Compute configuration: GPUs per learner (k80, k80x2, k80x4, p100, p100x2, "
                  "v100, v100x2, cpu, cpux2, cpux4)");
  cmd->add_option("--framework", flags->framework,
                  "pytorch (parameter servers), pytorch-ddl, pytorch-horovod (or tensorflow*)");
  cmd->add_option("--framework-version", flags->framework_version,
                  "Must match the installed torch major.minor");
  cmd->add_option("--parameter-servers", flags->parameter_servers,
                  "Parameter-server mode: how many learners serve");
  cmd->add_option("--max-restarts", flags->max_restarts,
                  "Restart the job up to N times when a learner fails (max_restarts); scripts "
                  "resume from their checkpoints, CADRE_RESTART_COUNT says which attempt");
  cmd->add_option("--min-nodes", flags->min_nodes,
                  "Horovod elastic: after a learner is lost, go on with the others while at "
                  "least M remain (min_nodes)");
  cmd->add_option("--rejoin-after", flags->rejoin_after,
                  "Horovod elastic: take a lost learner back after S seconds, at the learners' "
                  "next commit (rejoin_after; default 30, -1 never)");
  cmd->add_option("--name", flags->name, "The job's name");
  cmd->add_option("--data-dir", flags->data_dir, "DATA_DIR for the learners")->type_name(kDirType);
  cmd->add_option("--results-dir", flags->results_dir,
                  "Folder for job directories (default ./runs)")
      ->type_name(kDirType);
  cmd->add_option("-o,--output-dir", flags->output_dir, "The job directory itself")
      ->type_name(kDirType);
  cmd->add_option("--training-id", flags->training_id,
                  "The job's TRAINING_ID (default: a new one); the job service sets it");
  cmd->add_option("--grace", flags->grace_seconds,
                  "Seconds between SIGTERM and SIGKILL when stopping slots (default 10)");
  cmd->add_flag("-q,--quiet", flags->quiet, "Do not show the learners' output (logs still kept)");
  cmd->add_option("--emulate-network", flags->emulate_network,
                  "Run each learner on an emulated node (root): its own network namespace and a "
                  "link RATE[,DELAY[,LOSS]] to a virtual switch, e.g. 1gbit,1ms (docs/netem.md)");
  cmd->add_flag("--require-delay", flags->require_delay,
                "With --emulate-network: fail instead of warning when this kernel cannot emulate "
                "delay/loss");
  cmd->add_option("--backend", flags->backend,
                  "Where the learners run: local (default), slurm (sbatch), mpi (mpirun "
                  "--hostfile), kubernetes (kubectl; --image) (docs/backends.md)");
  cmd->add_option("--queue-timeout", flags->queue_timeout_seconds,
                  "Slurm, Kubernetes: cancel (delete) the job if it is still pending after this "
                  "many seconds");
  cmd->add_option("--heartbeat-timeout", flags->heartbeat_timeout_seconds,
                  "Slurm, Open MPI: a learner's node not heard from for S seconds ends the job "
                  "naming it, and the job stops itself when this cadre run is not heard from "
                  "for S seconds (killed, its machine lost); default 60, 0 for no heartbeats");
  cmd->add_option("--time-limit", flags->time_limit,
                  "Slurm: the job's time limit, minutes or as sbatch --time takes it "
                  "(hours:minutes:seconds, days-hours, ...); 0 or UNLIMITED for none");
  cmd->add_option("--partition", flags->partition, "Slurm: the partition to submit to")
      ->type_name(kNameType);
  cmd->add_option("--hostfile", flags->hostfile, "Open MPI: the hosts, one learner each")
      ->type_name(kFileType);
  cmd->add_option("--image", flags->image,
                  "Kubernetes: the container image, holding cadre and the command (the "
                  "manifest's image)");
  cmd->add_option("--namespace", flags->name_space, "Kubernetes: the namespace (default: default)");
  cmd->add_option("--store-host", flags->store_host,
                  "Slurm/Open MPI: the address the nodes reach this machine at (default: this "
                  "host's name, resolved here)")
      ->type_name(kHostType);
  cmd->callback([flags, exit_code] { *exit_code = Run(*flags); });
}

}  // namespace cadre::cli
