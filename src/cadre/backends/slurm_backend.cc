#include "cadre/backends/slurm_backend.h"

#include <signal.h>

#include <algorithm>
#include <charconv>
#include <sstream>

#include "cadre/backends/cluster_job.h"
#include "cadre/backends/hostlist.h"
#include "cadre/backends/task.h"
#include "cadre/launch/job_status.h"
#include "cadre/launch/process.h"

namespace cadre::backends {
namespace {

namespace fs = std::filesystem;

// Single-quoted for /bin/sh.
std::string Quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// A Slurm job name: the job's name with anything but [A-Za-z0-9._-] as '_'.
std::string JobName(const launch::JobSpec& spec) {
  std::string name = spec.name.empty() ? "cadre" : spec.name;
  for (char& c : name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-';
    if (!ok) c = '_';
  }
  return name;
}

// Runs a Slurm command, stdout and stderr together (the reasons Slurm gives are on stderr).
Status Slurm(const std::vector<std::string>& command, launch::CaptureResult* result) {
  std::vector<std::string> argv = {"/bin/sh", "-c", "exec \"$@\" 2>&1", "sh"};
  argv.insert(argv.end(), command.begin(), command.end());
  return launch::RunAndCapture(argv, std::chrono::seconds(60), result);
}

// "1 node", "2 nodes".
std::string Count(int n, const std::string& noun) {
  return std::to_string(n) + " " + noun + (n == 1 ? "" : "s");
}

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

// Which part of Slurm is out of reach, by sbatch's own words; "" when it answered.
std::string SlurmDown(const std::string& said) {
  if (said.find("Munge encode failed") != std::string::npos ||
      said.find("authentication error") != std::string::npos) {
    return "Slurm's authentication (munge: munged on this machine) failed";
  }
  if (said.find("Unable to contact slurm controller") != std::string::npos) {
    return "Slurm's controller (slurmctld) could not be reached";
  }
  return "";
}

class SlurmEngine : public Engine {
 public:
  explicit SlurmEngine(ClusterJob& job) : job_(job) {}

  Status Start() override {
    const fs::path dir = job_.layout().job_dir / "slurm";
    std::error_code ec;
    fs::create_directories(dir, ec);
    fs::path script = dir / "job.sh";
    CADRE_RETURN_IF_ERROR(launch::WriteFileAtomically(
        script, SlurmBatchScript(job_.spec(), job_.backend(), job_.layout().job_dir,
                                 job_.cadre_program())));
    launch::CaptureResult r;
    CADRE_RETURN_IF_ERROR(Slurm({"sbatch", "--parsable", script.string()}, &r));
    std::string out = Trim(r.output);
    if (r.exit_code != 0) {
      // Slurm itself out of reach is no fault of the job's request: say which part is down.
      if (std::string down = SlurmDown(out); !down.empty()) {
        return Status(Code::kUnavailable,
                      "sbatch could not submit the job: " + down + "; sbatch said: " + out);
      }
      return InvalidArgument("sbatch refused the job (exit code " + std::to_string(r.exit_code) +
                             "), which asks for " + Request() + ": " + out);
    }
    // --parsable prints "<id>" or "<id>;<cluster>", after any warnings on earlier lines.
    std::string last = out.substr(out.rfind('\n') == std::string::npos ? 0 : out.rfind('\n') + 1);
    id_ = last.substr(0, last.find(';'));
    if (id_.empty() || id_.find_first_not_of("0123456789") != std::string::npos) {
      return ProtocolError("sbatch printed no job id: " + out);
    }
    job_.Message("submitted Slurm job " + id_ + " for " + job_.layout().training_id + " (" +
                 Count(job_.spec().nodes, "node") + " x " +
                 Count(job_.spec().slots_per_learner, "task") + ")");
    return launch::WriteFileAtomically(dir / "job_id", id_ + "\n");
  }

  EngineState Poll() override {
    EngineState s;
    launch::CaptureResult r;
    Status st = Slurm({"scontrol", "show", "job", "-o", id_}, &r);
    std::string state = ScontrolField(r.output, "JobState");
    if (!st.ok() || r.exit_code != 0 || state.empty()) {
      // Slurm forgets a job MinJobAge after it ends; a few misses in a row mean it has ended.
      // A controller that does not answer (restarting, unreachable) forgets nothing: the job may
      // run on. It is asked again at every poll, and meanwhile the runner follows the job by its
      // slots' exit records and heartbeats (EngineState::unreachable).
      s.description = "Slurm job " + id_ + " is unknown to scontrol: " + Trim(r.output);
      if (r.output.find("Invalid job id") != std::string::npos) {
        s.finished = ++misses_ >= 5;
        return s;
      }
      if (st.ok() && r.exit_code == -1) {
        return s;  // killed by a signal: a Ctrl-C at the terminal reaches scontrol too
      }
      s.unreachable = true;
      s.description =
          "Slurm job " + id_ + ": scontrol show job failed: " + st.message() + Trim(r.output);
      s.engine_log = BatchOutput();
      const auto now = std::chrono::steady_clock::now();
      if (!unreachable_since_) {
        unreachable_since_ = warned_at_ = now;
        job_.Message("warning: scontrol show job " + id_ + " failed: " + st.message() +
                     Trim(r.output) +
                     "; still trying, and following the job by its slots' exit records and "
                     "heartbeats meanwhile");
      } else if (now - warned_at_ >= kWarnUnreachableEvery) {
        warned_at_ = now;
        const auto waited =
            std::chrono::duration_cast<std::chrono::seconds>(now - *unreachable_since_);
        job_.Message("warning: Slurm's controller has not answered for " +
                     std::to_string(waited.count()) + " s (scontrol show job " + id_ + ": " +
                     st.message() + Trim(r.output) +
                     "); still trying, the job ends when its slots have");
      }
      return s;
    }
    misses_ = 0;
    if (unreachable_since_) job_.Message("Slurm's controller answers again");
    unreachable_since_.reset();
    std::string reason = ScontrolField(r.output, "Reason");
    s.description = "Slurm job " + id_ + " " + state +
                    (reason.empty() || reason == "None" ? "" : " (Reason=" + reason + ")");
    s.pending = state == "PENDING" || state == "REQUEUED" || state == "SUSPENDED";
    if (s.pending && !reason.empty() && reason != "None" && s.description != shown_pending_) {
      // Why it waits, once for each reason: some reasons never clear by themselves.
      job_.Message("waiting: " + s.description + PendingHint(reason) +
                   (job_.backend().queue_timeout.count() > 0
                        ? ""
                        : "; --queue-timeout S gives up after S seconds, Ctrl-C cancels"));
      shown_pending_ = s.description;
    }
    s.finished = !s.pending && state != "RUNNING" && state != "CONFIGURING" &&
                 state != "COMPLETING" && state != "RESIZING" && state != "SIGNALING" &&
                 state != "STAGE_OUT";
    // A job Slurm was asked to end whose node does not answer stays COMPLETING until Slurm
    // declares that node down (SlurmdTimeout, minutes): its tasks elsewhere have ended, and what
    // is left of it is Slurm's to clean up, so it is followed no longer.
    if (state == "COMPLETING" && stopped_at_ &&
        std::chrono::steady_clock::now() - *stopped_at_ > kCompletingAfterStop) {
      s.finished = true;
      s.description += " " + std::to_string(kCompletingAfterStop.count()) +
                       " s after scancel: a node of it does not answer (Slurm ends the job once "
                       "it declares that node down)";
      job_.Message("warning: " + s.description);
    }
    s.succeeded = state == "COMPLETED";
    if (s.finished) {
      s.description += " ExitCode=" + ScontrolField(r.output, "ExitCode") + EndHint(state);
    }
    if (state == "NODE_FAIL") {
      s.description += "; " + LostLearners(ScontrolField(r.output, "NodeList"));
    }
    s.engine_log = BatchOutput();
    return s;
  }

  fs::path BatchOutput() const {
    return job_.layout().job_dir / "slurm" / ("batch-" + id_ + ".out");
  }

  // The job's nodes that failed, named with their learners.
  std::string LostLearners(const std::string& node_list) {
    std::vector<std::string> nodes;
    launch::CaptureResult r;
    if (!ExpandHostlist(node_list, &nodes).ok() ||
        !Slurm({"scontrol", "show", "node", "-o", node_list}, &r).ok()) {
      return "a node of " + node_list + " failed";
    }
    return LostNodes(r.output, ReadTextFile(BatchOutput()), nodes);
  }

  void Stop(bool now) override {
    if (!stopped_at_) stopped_at_ = std::chrono::steady_clock::now();
    launch::CaptureResult r;
    std::vector<std::string> cmd = {"scancel"};
    if (now) cmd.insert(cmd.end(), {"--signal=KILL", "--full"});
    cmd.push_back(id_);
    Status st = Slurm(cmd, &r);
    if (!st.ok() || r.exit_code != 0) {
      job_.Message("warning: scancel " + id_ + " failed: " + st.message() + Trim(r.output));
    }
  }

 private:
  // What the batch script asks of Slurm, and where each ask comes from.
  std::string Request() const {
    const auto& spec = job_.spec();
    const auto& o = job_.backend();
    std::string text = Count(spec.nodes, "node") + " (one per learner) x " +
                       Count(spec.slots_per_learner, "task") + " (slots)";
    if (spec.compute.gpus > 0) {
      text += " with --gres=gpu:" + std::to_string(spec.compute.gpus) + " (compute configuration " +
              std::string(spec.compute.name) +
              "; a cluster without GPUs runs a cpu, cpux2 or cpux4 one)";
    }
    if (!o.partition.empty()) text += ", --partition " + o.partition;
    if (o.time_limit_minutes) text += ", --time-limit " + std::to_string(*o.time_limit_minutes);
    return text;
  }

  // What a job's end means for a cadre user, where Slurm's state word alone does not say.
  std::string EndHint(const std::string& state) const {
    if (state == "CANCELLED" && !stopped_at_) {
      return " (cancelled by someone other than this cadre run: scancel, an administrator)";
    }
    if (state == "TIMEOUT") {
      const auto& limit = job_.backend().time_limit_minutes;
      return limit ? " (it ran into its time limit, --time-limit " + std::to_string(*limit) + ")"
                   : " (it ran into its partition's default time limit; --time-limit sets one)";
    }
    if (state == "PREEMPTED") return " (Slurm preempted it for another job)";
    if (state == "OUT_OF_MEMORY") return " (a task used more memory than the job was given)";
    if (state == "BOOT_FAIL") return " (a node of it failed to boot)";
    if (state == "DEADLINE") return " (it reached its deadline)";
    return "";
  }

  // What cadre asked for that a reason is about.
  std::string PendingHint(const std::string& reason) const {
    if (reason == "PartitionNodeLimit") {
      return ": the job asks for " + std::to_string(job_.spec().nodes) +
             " nodes (one per learner), more than its partition allows or has up";
    }
    if (reason == "PartitionTimeLimit" && job_.backend().time_limit_minutes) {
      return ": --time-limit " + std::to_string(*job_.backend().time_limit_minutes) +
             " is more than its partition allows";
    }
    return "";
  }

  ClusterJob& job_;
  std::string id_;
  int misses_ = 0;
  // Since when scontrol could not reach the controller, and when that was last said.
  std::optional<std::chrono::steady_clock::time_point> unreachable_since_;
  std::chrono::steady_clock::time_point warned_at_;
  static constexpr std::chrono::seconds kWarnUnreachableEvery{30};
  std::string shown_pending_;
  std::optional<std::chrono::steady_clock::time_point> stopped_at_;  // the first scancel
  static constexpr std::chrono::seconds kCompletingAfterStop{30};
};

class SlurmBackend : public Backend {
 public:
  explicit SlurmBackend(const BackendOptions& options) : options_(options) {}
  std::string_view name() const override { return "slurm"; }
  Status CheckEngine() const override {
    return RequirePrograms("slurm", {"sbatch", "scontrol", "scancel"});
  }
  Status Run(const launch::JobSpec& spec, const launch::RunOptions& options,
             launch::JobOutcome* outcome) override {
    BlockStopSignals blocked;
    ClusterJob job(spec, options, options_);
    CADRE_RETURN_IF_ERROR(job.Prepare("slurm"));
    SlurmEngine engine(job);
    return job.Run(engine, outcome);
  }

 private:
  BackendOptions options_;
};

}  // namespace

Status ParseTimeLimit(std::string_view text, int* minutes) {
  auto bad = [&](const std::string& why) {
    return InvalidArgument("'" + std::string(text) + "' is not a time limit (" + why +
                           "): minutes, or Slurm's minutes:seconds, hours:minutes:seconds, "
                           "days-hours[:minutes[:seconds]]; 0 or UNLIMITED for none");
  };
  if (text.starts_with('-')) {
    return InvalidArgument("must be 0 (no limit) or more, got '" + std::string(text) + "'");
  }
  if (text == "UNLIMITED" || text == "INFINITE") {
    *minutes = 0;
    return Status::Ok();
  }
  std::vector<int64_t> parts;  // the numbers, in order; `days` when a '-' follows the first
  bool days = false;
  size_t start = 0;
  for (size_t i = 0; i <= text.size(); ++i) {
    const bool end = i == text.size();
    if (!end && text[i] >= '0' && text[i] <= '9') continue;
    if (!end && text[i] != ':' && !(text[i] == '-' && parts.empty() && !days)) {
      return bad("'" + std::string(1, text[i]) + "' is not a digit, ':' or '-'");
    }
    std::string_view digits = text.substr(start, i - start);
    if (digits.empty() || digits.size() > 9) return bad("a part is empty or too long");
    int64_t value = 0;
    std::from_chars(digits.data(), digits.data() + digits.size(), value);
    parts.push_back(value);
    if (!end && text[i] == '-') days = true;
    start = i + 1;
  }
  int64_t seconds = 0;
  if (days) {
    if (parts.size() > 4) return bad("too many parts");
    const int64_t scale[] = {86400, 3600, 60, 1};
    for (size_t i = 0; i < parts.size(); ++i) seconds += parts[i] * scale[i];
  } else if (parts.size() == 1) {
    seconds = parts[0] * 60;
  } else if (parts.size() == 2) {
    seconds = parts[0] * 60 + parts[1];
  } else if (parts.size() == 3) {
    seconds = parts[0] * 3600 + parts[1] * 60 + parts[2];
  } else {
    return bad("too many parts");
  }
  constexpr int64_t kYear = 365LL * 86400;
  if (seconds > kYear) return bad("more than a year");
  *minutes = static_cast<int>((seconds + 59) / 60);
  return Status::Ok();
}

std::string ScontrolField(const std::string& line, const std::string& key) {
  std::stringstream words(line);
  for (std::string w; words >> w;) {
    if (w.size() > key.size() && w.compare(0, key.size(), key) == 0 && w[key.size()] == '=') {
      return w.substr(key.size() + 1);
    }
  }
  return "";
}

std::string LostNodes(const std::string& scontrol_nodes, const std::string& batch_output,
                      const std::vector<std::string>& job_nodes) {
  std::vector<std::string> lost(job_nodes.size());
  std::stringstream lines(scontrol_nodes);
  for (std::string line; std::getline(lines, line);) {
    const std::string state = ScontrolField(line, "State");
    auto at = std::find(job_nodes.begin(), job_nodes.end(), ScontrolField(line, "NodeName"));
    const bool down = state.find("DOWN") != std::string::npos ||
                      state.find("FAIL") != std::string::npos ||
                      state.find("NOT_RESPONDING") != std::string::npos || state.ends_with('*');
    if (at == job_nodes.end() || !down) continue;
    // The reason has spaces ("Not responding [slurm@...]"): the rest of the line.
    size_t reason = line.find(" Reason=");
    lost[at - job_nodes.begin()] =
        "is " + state +
        (reason == std::string::npos ? "" : " (" + Trim(line.substr(reason + 1)) + ")");
  }
  // srun's word for a node that failed and has come back since: "srun: error: Node failure on X".
  std::stringstream output(batch_output);
  const std::string said = "Node failure on ";
  for (std::string line; std::getline(output, line);) {
    size_t where = line.find(said);
    if (where == std::string::npos) continue;
    auto at = std::find(job_nodes.begin(), job_nodes.end(), Trim(line.substr(where + said.size())));
    if (at != job_nodes.end() && lost[at - job_nodes.begin()].empty()) {
      lost[at - job_nodes.begin()] = "failed (srun: \"" + Trim(line) + "\")";
    }
  }
  std::string text;
  for (size_t i = 0; i < lost.size(); ++i) {
    if (lost[i].empty()) continue;
    text += std::string(text.empty() ? "" : "; ") + "node " + job_nodes[i] + " (learner-" +
            std::to_string(i + 1) + ") " + lost[i];
  }
  return text.empty() ? "Slurm names no failed node of the job" : text;
}

std::string SlurmBatchScript(const launch::JobSpec& spec, const BackendOptions& options,
                             const fs::path& job_dir, const fs::path& program) {
  std::string s = "#!/bin/sh\n";
  s += "#SBATCH --job-name=" + JobName(spec) + "\n";
  s += "#SBATCH --nodes=" + std::to_string(spec.nodes) + "\n";
  s += "#SBATCH --ntasks-per-node=" + std::to_string(spec.slots_per_learner) + "\n";
  s += "#SBATCH --output=" + (job_dir / "slurm" / "batch-%j.out").string() + "\n";
  if (spec.compute.gpus > 0) s += "#SBATCH --gres=gpu:" + std::to_string(spec.compute.gpus) + "\n";
  if (options.time_limit_minutes) {
    s += "#SBATCH --time=" + std::to_string(*options.time_limit_minutes) + "\n";
  }
  if (!options.partition.empty()) s += "#SBATCH --partition=" + options.partition + "\n";
  // A job runs once: Slurm's default requeues a batch job whose node fails and runs it again
  // later, unseen, against a rendezvous store that already holds the first run's keys.
  s += "#SBATCH --no-requeue\n";
  s += "# One step, one task per slot; a slot that fails ends the others (cadre run's rule).\n";
  s += "exec srun --kill-on-bad-exit=1 " + Quote(program.string()) +
       " task --engine slurm --job-dir " + Quote(job_dir.string()) + "\n";
  return s;
}

Status ParseSinfoCpus(const std::string& line, int64_t* total) {
  std::string text = Trim(line);
  size_t last = text.rfind('/');
  int slashes = static_cast<int>(std::count(text.begin(), text.end(), '/'));
  if (slashes != 3 || last + 1 >= text.size()) {
    return InvalidArgument("sinfo -o %C: expected allocated/idle/other/total CPUs, got '" + text +
                           "'");
  }
  try {
    size_t used = 0;
    int64_t n = std::stoll(text.substr(last + 1), &used);
    if (used != text.size() - last - 1 || n < 0) throw std::invalid_argument("not a count");
    *total = n;
  } catch (const std::exception&) {
    return InvalidArgument("sinfo -o %C: the total CPUs in '" + text + "' are not a count");
  }
  return Status::Ok();
}

Status SlurmClusterCpus(int64_t* cpus) {
  launch::CaptureResult r;
  CADRE_RETURN_IF_ERROR(Slurm({"sinfo", "-h", "-o", "%C"}, &r));
  if (r.exit_code != 0) {
    return Status(Code::kUnavailable, "sinfo failed (exit code " + std::to_string(r.exit_code) +
                                          "): " + Trim(r.output));
  }
  return ParseSinfoCpus(r.output, cpus);
}

std::unique_ptr<Backend> MakeSlurmBackend(const BackendOptions& options) {
  return std::make_unique<SlurmBackend>(options);
}

}  // namespace cadre::backends
