// `cadre task --engine kubernetes`: one learner's pod of a job rendered by `cadre k8s render`.
// The pod's name (<prefix>-<N>, a StatefulSet with ordinals.start 1) is its LEARNER_ID; the other
// learners' names resolve through the headless Service. Learner 1 also serves the job's
// rendezvous store. The learner's slots run here, each with its contract, their output on the
// container's a whole line at a time (two slots' long lines never mix in the pod's log), and kept
// in the pod's volume as learner-K/slot-R.log; when one fails the others are stopped. A learner
// that succeeded stays up until its pod is deleted, since a StatefulSet restarts pods whose
// containers exit.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <iostream>
#include <memory>

#include "cadre/backends/k8s_render.h"
#include "cadre/backends/task.h"
#include "cadre/base/deadline.h"
#include "cadre/launch/job_status.h"
#include "cadre/launch/learner_env.h"
#include "cadre/launch/log_mux.h"
#include "cadre/launch/process.h"
#include "cadre/store/tcp_store.h"

namespace cadre::backends {
namespace {

namespace fs = std::filesystem;

// The learners' addresses, waiting (bounded) for pods that are still being scheduled. A stop
// signal in `stop` (blocked) ends the wait at once: the pod is being deleted.
Status ResolveLearners(const std::vector<std::string>& names, Duration wait, const sigset_t& stop,
                       std::vector<std::string>* out) {
  Deadline deadline(wait);
  std::vector<std::string> addresses(names.size());
  for (size_t i = 0; i < names.size(); ++i) {
    while ((addresses[i] = ResolveIPv4(names[i])).empty()) {
      if (deadline.expired()) {
        return TimeoutError(
            names[i] + " (learner-" + std::to_string(i + 1) + ") did not resolve within " +
            std::to_string(std::chrono::duration_cast<std::chrono::seconds>(wait).count()) +
            " s: is its pod scheduled, and the headless Service there?");
      }
      timespec tick{1, 0};
      siginfo_t info;
      int sig = sigtimedwait(&stop, &info, &tick);
      if (sig > 0 && sig != SIGCHLD) {
        return Status(Code::kAborted, "stopped by " + launch::SignalName(sig) + " while " +
                                          names[i] + " (learner-" + std::to_string(i + 1) +
                                          ") did not resolve yet");
      }
    }
  }
  *out = std::move(addresses);
  return Status::Ok();
}

}  // namespace

Status KubernetesSlotFromEnv(const EnvMap& env, const launch::JobContract& job, EngineSlot* out) {
  auto it = env.find("CADRE_POD_NAME");
  if (it == env.end() || it->second.empty()) it = env.find("HOSTNAME");
  if (it == env.end() || it->second.empty()) {
    return InvalidArgument("CADRE_POD_NAME is not set: was this pod rendered by cadre k8s render?");
  }
  const std::string& pod = it->second;
  const std::string prefix = job.name_prefix + "-";
  int ordinal = 0;
  bool ok = pod.size() > prefix.size() && pod.compare(0, prefix.size(), prefix) == 0 &&
            pod.find_first_not_of("0123456789", prefix.size()) == std::string::npos &&
            pod.size() - prefix.size() <= 6;
  if (ok) ordinal = std::stoi(pod.substr(prefix.size()));
  if (!ok || ordinal < 1 || ordinal > job.learners) {
    return InvalidArgument("pod '" + pod + "' is not " + prefix + "1.." + prefix +
                           std::to_string(job.learners) +
                           " (the StatefulSet needs ordinals.start: 1, Kubernetes 1.27 or later)");
  }
  EngineSlot slot;
  slot.learner_index = ordinal - 1;
  slot.tasks_per_node = job.slots_per_learner;
  for (int id = 1; id <= job.learners; ++id) slot.nodes.push_back(prefix + std::to_string(id));
  // The device plugin gives the container exactly the GPUs it asked for, as devices 0..G-1.
  for (int g = 0; g < job.gpus_per_learner; ++g) slot.gpu_ids.push_back(std::to_string(g));
  *out = std::move(slot);
  return Status::Ok();
}

std::string KubernetesFinishedLine(int learner_id) {
  return "cadre task: learner-" + std::to_string(learner_id) +
         " finished; holding until its pod is deleted (kubectl delete -f ...)";
}

int RunKubernetesLearner(TaskPlan plan, const fs::path& job_dir) {
  auto fail = [](const Status& st) {
    std::cerr << "cadre task: " << st.ToString() << "\n";
    return 1;
  };
  if (!job_dir.empty() && job_dir != plan.job.job_dir) {
    // DATA_DIR under the job directory moves with it.
    fs::path data = plan.job.data_dir.lexically_relative(plan.job.job_dir);
    if (!data.empty() && *data.begin() != "..") plan.job.data_dir = job_dir / data;
    plan.job.job_dir = job_dir;
  }
  sigset_t set, old;
  sigemptyset(&set);
  for (int sig : {SIGCHLD, SIGINT, SIGTERM, SIGHUP}) sigaddset(&set, sig);
  sigprocmask(SIG_BLOCK, &set, &old);  // before the store's threads start

  EngineSlot slot;
  Status st = KubernetesSlotFromEnv(ProcessEnv(), plan.job, &slot);
  if (!st.ok()) return fail(st);
  const int learner = slot.learner_index + 1;
  std::unique_ptr<store::TcpStoreServer> store;
  if (learner == 1) {
    try {
      store::TcpStoreServerOptions o;
      o.host = "0.0.0.0";
      o.port = kKubernetesStorePort;
      o.token = plan.job.job_token;
      store = std::make_unique<store::TcpStoreServer>(o);
    } catch (const Error& e) {
      return fail(e.status().WithContext("starting the job's rendezvous store"));
    }
  }
  std::vector<std::string> addresses;
  st = ResolveLearners(slot.nodes, std::chrono::minutes(10), set, &addresses);
  if (!st.ok()) return fail(st);
  // The pod's volume starts empty: the folders the contract names (as CreateJobDirectory makes).
  std::error_code ec;
  for (const char* dir : {"checkpoints", "state", "data"}) {
    fs::create_directories(plan.job.job_dir / dir, ec);
  }
  fs::create_directories(plan.job.job_dir / ("learner-" + std::to_string(learner)), ec);

  // Each slot writes into its own pipe; the mux copies whole lines to the container's output.
  // Sharing the container's descriptor instead, lines longer than a pipe's atomic write (4 KiB)
  // from two slots interleaved in the pod's log.
  launch::LogMux mux{launch::LogMuxOptions{}};
  const fs::path learner_dir = plan.job.job_dir / ("learner-" + std::to_string(learner));
  std::vector<pid_t> pids;
  std::vector<bool> running;
  for (int r = 0; r < plan.job.slots_per_learner; ++r) {
    slot.local_rank = r;
    launch::LearnerContract contract;
    st = TaskContract(plan, slot, addresses, &contract);
    if (!st.ok()) return fail(st);
    launch::SpawnOptions spawn = SlotSpawn(plan, contract, launch::HostsMethod::kCadreHosts, "");
    size_t stream = 0;
    st = mux.AddStream("", learner_dir / ("slot-" + std::to_string(r) + ".log"), &spawn.output_fd,
                       &stream);
    pid_t pid = 0;
    if (st.ok()) {
      st = launch::SpawnSlot(spawn, &pid);
      close(spawn.output_fd);
    }
    if (!st.ok()) {
      for (pid_t p : pids) kill(-p, SIGKILL);
      return fail(
          st.WithContext("learner-" + std::to_string(learner) + " slot " + std::to_string(r)));
    }
    pids.push_back(pid);
    running.push_back(true);
  }
  int code = 0;
  bool stopping = false;
  size_t left = pids.size();
  while (left > 0) {
    bool unused = false;
    mux.Poll(200, -1, &unused);
    timespec now{0, 0};
    siginfo_t info;
    int sig = sigtimedwait(&set, &info, &now);
    if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP) {
      stopping = true;
      for (size_t i = 0; i < pids.size(); ++i) {
        if (running[i]) kill(-pids[i], sig);
      }
      if (code == 0) code = 128 + sig;
    }
    for (size_t i = 0; i < pids.size(); ++i) {
      int ws = 0;
      if (!running[i] || waitpid(pids[i], &ws, WNOHANG) != pids[i]) continue;
      running[i] = false;
      --left;
      kill(-pids[i], SIGKILL);
      int slot_code = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
      if (slot_code != 0 && !stopping) {
        std::cerr << "cadre task: learner-" << learner << " slot " << i << " failed (code "
                  << slot_code << "); stopping the learner's other slots\n";
        code = slot_code;
        stopping = true;
        for (size_t j = 0; j < pids.size(); ++j) {
          if (running[j]) kill(-pids[j], SIGTERM);
        }
      }
    }
  }
  // What the slots wrote last (a background process of theirs may hold a pipe: not for long).
  mux.Drain(2000);
  mux.FlushConsole(2000);
  if (code == 0 && !stopping) {
    std::cerr << KubernetesFinishedLine(learner) << "\n" << std::flush;
    siginfo_t info;
    sigdelset(&set, SIGCHLD);
    sigwaitinfo(&set, &info);
  }
  sigprocmask(SIG_SETMASK, &old, nullptr);
  return code;
}

}  // namespace cadre::backends
