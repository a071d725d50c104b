#include "cadre/backends/mpi_backend.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <charconv>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "cadre/backends/cluster_job.h"
#include "cadre/backends/engine_facts.h"
#include "cadre/backends/task.h"
#include "cadre/launch/job_status.h"
#include "cadre/launch/process.h"

extern char** environ;

namespace cadre::backends {
namespace {

namespace fs = std::filesystem;

class MpiEngine : public Engine {
 public:
  MpiEngine(ClusterJob& job, std::vector<std::string> hosts)
      : job_(job), hosts_(std::move(hosts)) {}

  Status Start() override {
    const fs::path dir = job_.layout().job_dir;
    std::string hostfile;
    for (const auto& h : hosts_) {
      hostfile += h + " slots=" + std::to_string(job_.spec().slots_per_learner) + "\n";
    }
    CADRE_RETURN_IF_ERROR(launch::WriteFileAtomically(dir / "hostfile", hostfile));
    launch::SpawnOptions spawn;
    spawn.argv = MpirunCommand(job_.spec(), dir, job_.cadre_program(), geteuid() == 0);
    // mpirun is searched on PATH by the shell, as a user would type it.
    spawn.argv.insert(spawn.argv.begin(), {"/bin/sh", "-c", "exec \"$@\"", "sh"});
    for (char** e = environ; *e != nullptr; ++e) spawn.env.emplace_back(*e);
    spawn.cwd = dir;
    fs::path log = dir / "mpirun.log";
    spawn.output_fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (spawn.output_fd < 0) return IoError("cannot write " + log.string());
    Status st = launch::SpawnSlot(spawn, &pid_);
    close(spawn.output_fd);
    CADRE_RETURN_IF_ERROR(st.WithContext("starting mpirun"));
    job_.Message("started mpirun for " + job_.layout().training_id + " on " +
                 std::to_string(hosts_.size()) + " hosts; its output is in " + log.string());
    return Status::Ok();
  }

  EngineState Poll() override {
    EngineState s;
    int status = 0;
    if (!ended_ && waitpid(pid_, &status, WNOHANG) == pid_) {
      ended_ = true;
      exit_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    // mpirun waits for the daemons of every host to end their slots; a host that does not
    // answer (hung, cut off) holds it for ever. Its slots stop by themselves once they no longer
    // hear from cadre run (heartbeat.h).
    if (!ended_ && !killed_ && stopped_at_ &&
        std::chrono::steady_clock::now() - *stopped_at_ > kEndAfterStop) {
      job_.Message("warning: mpirun did not end within " + std::to_string(kEndAfterStop.count()) +
                   " s of SIGTERM (a host does not answer): killing it");
      kill(-pid_, SIGKILL);
      killed_ = true;
    }
    s.finished = ended_;
    s.succeeded = ended_ && exit_ == 0;
    s.description = ended_ ? "mpirun exited with code " + std::to_string(exit_) : "mpirun running";
    s.engine_log = job_.layout().job_dir / "mpirun.log";
    if (ended_ && exit_ != 0) s.first_failed_rank = FirstFailedRank(ReadTextFile(s.engine_log));
    return s;
  }

  void Stop(bool now) override {
    // pid_ is mpirun's keeper (launch/process.h), which ignores signals sent to it alone: the
    // group's reach mpirun, which passes SIGTERM on to every process it started. A second stop
    // kills the group.
    if (!stopped_at_) stopped_at_ = std::chrono::steady_clock::now();
    if (!ended_) kill(-pid_, now ? SIGKILL : SIGTERM);
  }

 private:
  ClusterJob& job_;
  std::vector<std::string> hosts_;
  pid_t pid_ = 0;
  bool ended_ = false;
  int exit_ = 0;
  std::optional<std::chrono::steady_clock::time_point> stopped_at_;  // the first stop
  bool killed_ = false;
  static constexpr std::chrono::seconds kEndAfterStop{30};
};

class MpiBackend : public Backend {
 public:
  explicit MpiBackend(const BackendOptions& options) : options_(options) {}
  std::string_view name() const override { return "mpi"; }
  Status CheckEngine() const override { return RequirePrograms("mpi", {"mpirun"}); }
  Status CheckJob(const launch::JobSpec& spec) const override {
    std::vector<std::string> hosts;
    return ReadHosts(spec, &hosts);
  }
  Status Run(const launch::JobSpec& spec, const launch::RunOptions& options,
             launch::JobOutcome* outcome) override {
    std::vector<std::string> hosts;
    CADRE_RETURN_IF_ERROR(ReadHosts(spec, &hosts));
    BlockStopSignals blocked;
    ClusterJob job(spec, options, options_);
    CADRE_RETURN_IF_ERROR(job.Prepare("mpi"));
    MpiEngine engine(job, hosts);
    return job.Run(engine, outcome);
  }

 private:
  // The first spec.nodes hosts of --hostfile, one per learner.
  Status ReadHosts(const launch::JobSpec& spec, std::vector<std::string>* hosts) const {
    if (options_.hostfile.empty()) {
      return InvalidArgument("--backend mpi needs --hostfile FILE: the hosts, one per learner");
    }
    // A folder opens and reads as nothing: it "listed no hosts".
    std::error_code ec;
    if (std::filesystem::is_directory(options_.hostfile, ec)) {
      return InvalidArgument("--hostfile " + options_.hostfile.string() +
                             " is a folder; give the file that lists the hosts");
    }
    std::ifstream in(options_.hostfile);
    if (!in) return InvalidArgument("--hostfile " + options_.hostfile.string() + " cannot be read");
    std::stringstream text;
    text << in.rdbuf();
    CADRE_RETURN_IF_ERROR(
        ParseHostfile(text.str(), hosts).WithContext("--hostfile " + options_.hostfile.string()));
    if (static_cast<int>(hosts->size()) < spec.nodes) {
      return InvalidArgument("--hostfile " + options_.hostfile.string() + " lists " +
                             std::to_string(hosts->size()) + " hosts but the job has " +
                             std::to_string(spec.nodes) + " learners (one host each)");
    }
    hosts->resize(static_cast<size_t>(spec.nodes));
    return Status::Ok();
  }

  BackendOptions options_;
};

}  // namespace

std::optional<int> FirstFailedRank(const std::string& mpirun_output) {
  // Open MPI 4's mpirun and 5's prterun: "... noticed that process rank 3 with PID 8761 on node
  // 127.0.0.3 exited on signal 9 (Killed)."
  const std::string said = "noticed that process rank ";
  size_t at = mpirun_output.find(said);
  if (at == std::string::npos) return std::nullopt;
  int rank = -1;
  const char* begin = mpirun_output.data() + at + said.size();
  auto [end, ec] = std::from_chars(begin, mpirun_output.data() + mpirun_output.size(), rank);
  if (ec != std::errc() || end == begin) return std::nullopt;
  return rank;
}

std::vector<std::string> MpirunCommand(const launch::JobSpec& spec, const fs::path& job_dir,
                                       const fs::path& program, bool as_root) {
  std::vector<std::string> argv = {"mpirun"};
  if (as_root) argv.push_back("--allow-run-as-root");
  const std::string slots = std::to_string(spec.slots_per_learner);
  for (const std::string& a :
       {std::string("-np"), std::to_string(spec.total_slots()), std::string("--hostfile"),
        (job_dir / "hostfile").string(), std::string("--map-by"), "ppr:" + slots + ":node",
        std::string("--bind-to"), std::string("none"), program.string(), std::string("task"),
        std::string("--engine"), std::string("mpi"), std::string("--job-dir"), job_dir.string()}) {
    argv.push_back(a);
  }
  return argv;
}

std::unique_ptr<Backend> MakeMpiBackend(const BackendOptions& options) {
  return std::make_unique<MpiBackend>(options);
}

}  // namespace cadre::backends
