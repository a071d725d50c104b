#include "cadre/launch/local_backend.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "cadre/base/printable.h"
#include "cadre/launch/cpu_binding.h"
#include "cadre/launch/gpu_plan.h"
#include "cadre/launch/local_job.h"

extern char** environ;

namespace cadre::launch {
namespace {

namespace fs = std::filesystem;

int UsableCores() {
  if (const size_t n = UsableCpus().size(); n > 0) return static_cast<int>(n);
  const long online = sysconf(_SC_NPROCESSORS_ONLN);
  return online > 0 ? static_cast<int>(online) : 1;
}

std::string ReadSmallFile(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The job's bin folder: python3 and python pointing at the interpreter with torch.
Status MakePythonBin(const fs::path& dir, const std::string& interpreter) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return IoError("cannot create " + dir.string() + ": " + ec.message());
  for (const char* name : {"python3", "python"}) {
    fs::path link = dir / name;
    fs::remove(link, ec);
    fs::create_symlink(interpreter, link, ec);
    if (ec) return IoError("cannot create " + link.string() + ": " + ec.message());
  }
  return Status::Ok();
}

// Blocks the job's signals in this thread and returns a signalfd for them; restores on scope end.
class SignalScope {
 public:
  SignalScope() {
    sigset_t set;
    sigemptyset(&set);
    // SIGQUIT (Ctrl-\) too: left to its default it dumped the runner's core, and the slots died
    // with their keepers while status.json still said running.
    for (int sig : {SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGQUIT}) sigaddset(&set, sig);
    pthread_sigmask(SIG_BLOCK, &set, &old_mask_);
    fd_ = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
    // A closed console must not kill the runner; slots get SIGPIPE's default back.
    old_pipe_ = signal(SIGPIPE, SIG_IGN);
    prctl(PR_SET_CHILD_SUBREAPER, 1);
  }
  ~SignalScope() {
    prctl(PR_SET_CHILD_SUBREAPER, 0);
    signal(SIGPIPE, old_pipe_);
    if (fd_ >= 0) close(fd_);
    pthread_sigmask(SIG_SETMASK, &old_mask_, nullptr);
  }
  int fd() const { return fd_; }

 private:
  sigset_t old_mask_;
  int fd_ = -1;
  sighandler_t old_pipe_ = SIG_DFL;
};

}  // namespace

Status CheckLocalGpus(const JobSpec& spec, MachineGpus* gpus) {
  CADRE_RETURN_IF_ERROR(DetectMachineGpus(gpus));
  return CheckMachineGpus(*gpus, spec.compute.gpus, spec.gpu_learners(), spec.compute.name,
                          spec.parameter_servers)
      .WithContext(spec.compute_origin);
}

LocalJob::LocalJob(const JobSpec& spec, const RunOptions& options)
    : spec_(spec),
      requested_nodes_(spec.nodes),
      options_(options),
      mux_(LogMuxOptions{options.console_fd, options.message_fd, options.quiet, options.status_line,
                         20}) {}

void LocalJob::Warn(const std::string& text) { mux_.Message("cadre: warning: " + text + "\n"); }

Status LocalJob::Prepare() {
  layout_.training_id = options_.training_id.value_or(NewTrainingId());
  layout_.job_dir = options_.output_dir ? fs::absolute(*options_.output_dir)
                                        : spec_.results_dir / layout_.training_id;
  layout_.data_dir = spec_.data_dir.empty() ? layout_.job_dir / "data" : spec_.data_dir;
  layout_.job_token = NewJobToken();
  layout_.machine_cores = UsableCores();
  CADRE_RETURN_IF_ERROR(
      PlanCpuBindingFromEnv(spec_.nodes * spec_.slots_per_learner, &layout_.slot_cpus));
  CADRE_RETURN_IF_ERROR(CheckLocalGpus(spec_, &layout_.gpus));
  layout_.python_path = CadrePythonPath();
  if (options_.emulate_network) {
    CADRE_RETURN_IF_ERROR(StartNetwork());
  } else {
    CADRE_RETURN_IF_ERROR(PickLearnerHosts(layout_.name_prefix, spec_.nodes, &layout_.hosts));
  }

  CADRE_RETURN_IF_ERROR(MakeJobDirectory(layout_.job_dir));
  Status prepared = PrepareJobDirectory();
  if (!prepared.ok()) {
    // The directory is the job's record: a follower (cadre server, a script) reads the reason
    // there instead of finding a folder without status.json.
    status_.state = JobState::kFailed;
    status_.exit_code = 1;
    status_.failure = "setting the job up: " + prepared.message();
    status_.end_time = WallClock::now();
    UpdateStatus();
  }
  return prepared;
}

Status LocalJob::PrepareJobDirectory() {
  layout_.hosts_file = layout_.job_dir / "hosts";
  CADRE_RETURN_IF_ERROR(WriteFileAtomically(
      layout_.hosts_file, HostsFileText(layout_.hosts, ReadSmallFile("/etc/hosts"))));
  CADRE_RETURN_IF_ERROR(ChooseHostsMethod(layout_.hosts_file, &layout_.hosts_method));
  if (layout_.hosts_method == HostsMethod::kCadreHosts) {
    Warn("no mount namespace is allowed here, so learner names (" + layout_.hosts.front().name +
         ", ...) resolve only for cadre itself, through CADRE_HOSTS=" +
         layout_.hosts_file.string() + "; other programs must use the addresses in that file");
  }
  if (spec_.compute.gpus > 0 && layout_.gpus.count == 0) {
    Warn(spec_.compute_origin + ": compute configuration '" + std::string(spec_.compute.name) +
         "' asks for " + std::to_string(spec_.compute.gpus) + " GPU(s) per learner but " +
         (layout_.gpus.hidden_by ? "the runner's CUDA_VISIBLE_DEVICES=" +
                                       QuotedText(*layout_.gpus.hidden_by) + " leaves no GPU"
                                 : "this machine has none") +
         "; its slots run as CPU processes (GPU_COUNT=0)");
  }
  if (!options_.python.interpreter.empty()) {
    layout_.python_bin_dir = layout_.job_dir / "bin";
    CADRE_RETURN_IF_ERROR(MakePythonBin(layout_.python_bin_dir, options_.python.interpreter));
  }
  CADRE_RETURN_IF_ERROR(CreateJobDirectory(spec_, layout_));
  if (spec_.elastic()) {
    layout_.elastic_updates_file = layout_.job_dir / "state" / "elastic-updates.json";
    CADRE_RETURN_IF_ERROR(
        WriteFileAtomically(layout_.elastic_updates_file, ElasticUpdateJson(std::nullopt)));
  }

  CADRE_RETURN_IF_ERROR(StartStore());
  MakeSlots();
  UpdateStatus();
  return Status::Ok();
}

Status LocalJob::StartStore() {
  store_.reset();
  try {
    store::TcpStoreServerOptions store_options;
    store_options.host = network_ ? network_->switch_address() : "127.0.0.1";
    store_options.token = layout_.job_token;
    auto start_store = [&] { store_ = std::make_unique<store::TcpStoreServer>(store_options); };
    // On emulated nodes the store listens on the switch, which every learner can reach.
    if (network_) {
      CADRE_RETURN_IF_ERROR(network_->RunInSwitch(start_store));
    } else {
      start_store();
    }
    layout_.store_address = store_->address();
  } catch (const Error& e) {
    return e.status().WithContext("starting the job's rendezvous store");
  }
  return Status::Ok();
}

void LocalJob::MakeSlots() {
  status_.slots.clear();
  for (int id = 1; id <= spec_.nodes; ++id) {
    for (int r = 0; r < spec_.slots_per_learner; ++r) {
      SlotStatus s;
      s.learner_id = id;
      s.local_rank = r;
      s.rank = (id - 1) * spec_.slots_per_learner + r;
      s.log = fs::relative(SlotLogPath(layout_, id, r), layout_.job_dir);
      status_.slots.push_back(s);
    }
  }
}

Status LocalJob::StartNetwork() {
  if (geteuid() != 0) {
    return Status(Code::kUnavailable,
                  "emulating a network needs root (it creates network namespaces)");
  }
  netem::EmulatorOptions o;
  o.hosts = spec_.nodes;
  o.link = *options_.emulate_network;
  o.job_id = layout_.training_id;
  o.require_delay_loss = options_.require_delay_loss;
  o.log_warnings = false;  // reported below, with the job's messages
  for (int id = 1; id <= spec_.nodes; ++id) {
    o.host_names.push_back(layout_.name_prefix + "-" + std::to_string(id));
  }
  CADRE_RETURN_IF_ERROR(
      netem::NetworkEmulator::Create(o, &network_).WithContext("emulating the network"));
  layout_.hosts.clear();
  for (int id = 1; id <= spec_.nodes; ++id) {
    layout_.hosts.push_back({id, o.host_names[id - 1], network_->hosts()[id - 1].address});
  }
  if (!network_->delay_loss_emulated()) {
    Warn(
        "this machine cannot emulate link delay/loss (no netem qdisc, no TUN devices): links are " +
        netem::FormatRate(o.link.rate_bits_per_s) + " with no added delay or loss");
  }
  return Status::Ok();
}

Status LocalJob::StartSlots() {
  std::vector<std::string> base;
  for (char** e = environ; *e != nullptr; ++e) base.emplace_back(*e);
  for (size_t i = 0; i < status_.slots.size(); ++i) {
    SlotStatus& slot = status_.slots[i];
    // Every error names the slot: "starting learner-8 slot 0: pipe: Too many open files".
    const std::string context = "starting learner-" + std::to_string(slot.learner_id) + " slot " +
                                std::to_string(slot.local_rank);
    int write_fd = -1;
    size_t index = i;
    // Slots are learner-major, so slot i keeps stream i (and its log) across restarts.
    Status output = i < mux_.streams()
                        ? mux_.ReopenStream(i, &write_fd)
                        : mux_.AddStream("learner-" + std::to_string(slot.learner_id) + "/" +
                                             std::to_string(slot.local_rank),
                                         layout_.job_dir / slot.log, &write_fd, &index);
    if (!output.ok()) return output.WithContext(context);
    SpawnOptions spawn;
    if (spec_.command_argv.empty()) {
      spawn.argv = {"/bin/sh", "-c", spec_.command};
    } else {
      // The shell only searches the slot's PATH (where the job's python3 is) and execs.
      spawn.argv = {"/bin/sh", "-c", "exec \"$@\"", "sh"};
      spawn.argv.insert(spawn.argv.end(), spec_.command_argv.begin(), spec_.command_argv.end());
    }
    spawn.env = SlotEnvironment(spec_, layout_, slot.learner_id, slot.local_rank, base);
    spawn.cwd = spec_.work_dir;
    spawn.output_fd = write_fd;
    spawn.hosts_method = layout_.hosts_method;
    spawn.hosts_file = layout_.hosts_file;
    spawn.network = network_.get();
    spawn.network_host = slot.learner_id - 1;
    if (i < layout_.slot_cpus.size()) spawn.cpus = layout_.slot_cpus[i];
    Status st = SpawnSlot(spawn, &slot.pid);
    close(write_fd);
    if (!st.ok()) return st.WithContext(context);
    slot.running = true;
  }
  UpdateStatus();
  return Status::Ok();
}

void LocalJob::UpdateStatus() {
  Status st = WriteStatusFile(spec_, layout_, status_);
  // Once per stretch of failures: status.json is rewritten at every slot's exit, and a full disk
  // or a deleted job directory would otherwise repeat the same warning for each of them.
  if (!st.ok() && !status_unwritable_) {
    Warn(st.message() + "; status.json is not kept up to date until it can be written again");
  }
  status_unwritable_ = !st.ok();
}

Status RunLocalJob(const JobSpec& spec, const RunOptions& options, JobOutcome* outcome) {
  SignalScope signals;
  if (signals.fd() < 0) return IoError(std::string("signalfd: ") + std::strerror(errno));
  LocalJob job(spec, options);
  CADRE_RETURN_IF_ERROR(job.Prepare());
  outcome->training_id = job.layout().training_id;
  outcome->job_dir = job.layout().job_dir;
  Status started = job.StartSlots();
  if (!started.ok()) {
    // Stop what did start; the failure is the set-up error.
    job.AbortStart(started.message());
    job.Supervise(signals.fd());
    return started;
  }
  outcome->exit_code = job.Supervise(signals.fd());
  outcome->state = outcome->exit_code == 0   ? JobState::kCompleted
                   : outcome->exit_code == 1 ? JobState::kFailed
                                             : JobState::kStopped;
  return Status::Ok();
}

}  // namespace cadre::launch
