#include "cadre/backends/k8s_backend.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <ctime>

#include "cadre/backends/cluster_job.h"
#include "cadre/backends/k8s_render.h"
#include "cadre/backends/task.h"
#include "cadre/launch/job_status.h"
#include "cadre/launch/process.h"

extern char** environ;

namespace cadre::backends {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\r')) s.pop_back();
  return s;
}

// Kubernetes' RFC 3339 times ("2026-12-02T13:45:01Z") as seconds since the epoch; 0 if not one.
double ParseTime(const json& v) {
  if (!v.is_string()) return 0;
  std::tm tm{};
  const std::string text = v.get<std::string>();
  if (strptime(text.c_str(), "%Y-%m-%dT%H:%M:%S", &tm) == nullptr) return 0;
  return static_cast<double>(timegm(&tm));
}

std::string Rfc3339(time_t t) {
  std::tm tm{};
  gmtime_r(&t, &tm);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

std::string Text(const json& object, const char* key) {
  auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : "";
}

// "exited with code 3", with the kubelet's reason when it says more than "Error".
std::string TerminatedHow(const json& terminated) {
  std::string how = "exited with code " + std::to_string(terminated.value("exitCode", -1));
  std::string reason = Text(terminated, "reason");
  if (!reason.empty() && reason != "Error") how += " (" + reason + ")";
  return how;
}

bool CannotStart(const std::string& reason) {
  for (const char* r :
       {"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull",
        "CreateContainerConfigError", "CreateContainerError", "RunContainerError"}) {
    if (reason == r) return true;
  }
  return false;
}

PodView ViewPod(const json& pod, int learner_id) {
  PodView v;
  v.learner_id = learner_id;
  const json& meta = pod.at("metadata");
  v.name = Text(meta, "name");
  v.uid = Text(meta, "uid");
  v.deleting = meta.contains("deletionTimestamp");
  const json status = pod.value("status", json::object());
  v.phase = Text(status, "phase");
  for (const auto& c : status.value("conditions", json::array())) {
    if (Text(c, "type") == "PodScheduled" && Text(c, "status") == "False") {
      v.pending = Text(c, "reason") + ": " + Text(c, "message");
    }
  }
  if (v.phase == "Failed") {
    v.failure = "its pod failed: " + Text(status, "reason") + ": " + Text(status, "message");
  }
  const json containers = status.value("containerStatuses", json::array());
  if (containers.empty()) {
    if (v.pending.empty()) v.pending = "pod " + v.phase;
    return v;
  }
  const json& c = containers.at(0);
  v.container_id = Text(c, "containerID");
  const json state = c.value("state", json::object());
  const json last = c.value("lastState", json::object());
  v.running = state.contains("running");
  const std::string waiting =
      state.contains("waiting") ? Text(state["waiting"], "reason") : std::string();
  v.log_previous = state.contains("waiting") && last.contains("terminated");
  if (state.contains("terminated") && state["terminated"].value("exitCode", -1) != 0) {
    v.failure = TerminatedHow(state["terminated"]);
    v.failed_at = ParseTime(state["terminated"].value("finishedAt", json()));
  } else if (last.contains("terminated") && last["terminated"].value("exitCode", -1) != 0) {
    v.failure = TerminatedHow(last["terminated"]) + "; Kubernetes restarted it (restart " +
                std::to_string(c.value("restartCount", 0)) + ")";
    v.failed_at = ParseTime(last["terminated"].value("finishedAt", json()));
  } else if (CannotStart(waiting)) {
    v.failure = "cannot start its container: " + waiting + ": " + Text(state["waiting"], "message");
  } else if (state.contains("waiting") && !v.log_previous) {
    v.pending = "container " + (waiting.empty() ? std::string("waiting") : waiting);
  }
  return v;
}

}  // namespace

Status ParsePods(const std::string& text, const std::string& name, int learners,
                 std::vector<PodView>* pods, std::string* stray) {
  std::vector<PodView> out;
  std::string first_stray;
  try {
    const json list = json::parse(text);
    const std::string prefix = name + "-";
    for (const auto& pod : list.at("items")) {
      const std::string pod_name = Text(pod.at("metadata"), "name");
      if (!pod_name.starts_with(prefix) || pod_name.size() > prefix.size() + 6 ||
          pod_name.find_first_not_of("0123456789", prefix.size()) != std::string::npos ||
          pod_name.size() == prefix.size()) {
        if (first_stray.empty()) first_stray = pod_name;
        continue;
      }
      const int id = std::stoi(pod_name.substr(prefix.size()));
      if (id >= 1 && id <= learners) {
        out.push_back(ViewPod(pod, id));
      } else if (first_stray.empty()) {
        first_stray = pod_name;
      }
    }
  } catch (const json::exception& e) {
    return InvalidArgument(std::string("kubectl get pods -o json printed no pod list: ") +
                           e.what());
  }
  std::sort(out.begin(), out.end(),
            [](const PodView& a, const PodView& b) { return a.learner_id < b.learner_id; });
  *pods = std::move(out);
  if (stray != nullptr) *stray = first_stray;
  return Status::Ok();
}

namespace {

class KubernetesEngine : public Engine {
 public:
  KubernetesEngine(ClusterJob& job, std::string name_space, std::string name)
      : job_(job),
        ns_(std::move(name_space)),
        name_(std::move(name)),
        dir_(job.layout().job_dir / "kubernetes"),
        learners_(static_cast<size_t>(job.spec().nodes)) {
    job_.logs().Watch([this](size_t stream, const std::string& line) {
      if (stream < learners_.size() &&
          line == KubernetesFinishedLine(static_cast<int>(stream) + 1)) {
        learners_[stream].finished = true;
      }
    });
  }

  ~KubernetesEngine() override {
    job_.logs().Watch(nullptr);
    if (created_ && !deleting_) Delete(false);  // an error path: the job must not linger
    for (auto& l : learners_) {
      if (l.follower > 0) {
        kill(-l.follower, SIGKILL);
        waitpid(l.follower, nullptr, 0);
      }
    }
  }

  Status Start() override {
    std::error_code ec;
    fs::create_directories(dir_, ec);
    K8sRenderOptions o;
    o.image = job_.spec().image;
    o.name = name_;
    o.name_space = ns_;
    o.job_token = job_.layout().job_token;
    o.training_id = job_.layout().training_id;
    std::string yaml;
    CADRE_RETURN_IF_ERROR(RenderKubernetes(job_.spec(), o, &yaml));
    objects_ = dir_ / "objects.yaml";
    CADRE_RETURN_IF_ERROR(launch::WriteFileAtomically(objects_, yaml));
    fs::permissions(objects_, fs::perms::owner_read | fs::perms::owner_write, ec);  // the token
    // create, not apply: objects of that name already there are refused, never taken over.
    Status st = Kubectl({"create", "-f", objects_.string()});
    if (!st.ok()) {
      (void)Kubectl({"delete", "--ignore-not-found", "--wait=false", "-f", objects_.string()});
      return st.WithContext("creating the job's objects in namespace " + ns_);
    }
    created_ = true;
    job_.Message("created StatefulSet " + name_ + " in namespace " + ns_ + " for " +
                 job_.layout().training_id + " (pods " + name_ + "-1.." + name_ + "-" +
                 std::to_string(job_.spec().nodes) + ", " +
                 std::to_string(job_.spec().slots_per_learner) +
                 (job_.spec().slots_per_learner == 1 ? " slot" : " slots") + " each; objects in " +
                 objects_.string() + ")");
    return Status::Ok();
  }

  EngineState Poll() override {
    EngineState s;
    ReapFollowers();
    std::string out;
    std::vector<PodView> pods;
    Status st = Kubectl({"get", "pods", "-l", "cadre.io/job=" + name_, "-o", "json"}, &out);
    std::string stray;
    if (st.ok()) st = ParsePods(out, name_, job_.spec().nodes, &pods, &stray);
    if (!st.ok()) {
      // The API may be away for a moment; while deleting, a few misses in a row end the wait.
      s.description = st.message();
      if (deleting_ && ++misses_ >= 5) return Finished(s);
      if (!deleting_ && ++misses_ % 20 == 0) {  // every 10 s at the default poll
        job_.Message("warning: " + st.message() + "; still trying (Ctrl-C deletes the job)");
      }
      return s;
    }
    misses_ = 0;
    for (const PodView& pod : pods) Observe(pod);
    if (!deleting_ && !stray.empty()) {
      description_ = "pod " + stray + " is not one of " + name_ + "-1.." + name_ + "-" +
                     std::to_string(job_.spec().nodes) +
                     ": the cluster did not honour the StatefulSet's ordinals.start (Kubernetes "
                     "1.27 or later is needed)";
      Delete(false);
    }
    if (!deleting_) Decide(pods, &s);
    if (deleting_) {
      bool following = false;
      for (const auto& l : learners_) following |= l.follower > 0;
      if (pods.empty() && !following) return Finished(s);
      if (Clock::now() > delete_deadline_) {
        job_.Message("warning: " + std::to_string(pods.size()) + " pods of " + name_ +
                     " are still terminating; see kubectl get pods -n " + ns_ +
                     " -l cadre.io/job=" + name_);
        return Finished(s);
      }
    }
    return s;
  }

  void Stop(bool now) override {
    if (!deleting_ || now) Delete(now);
  }

 private:
  struct Learner {
    pid_t follower = 0;                         // `kubectl logs` while it runs
    std::string followed;                       // the container it follows or followed
    std::string uid;                            // the pod's, once seen
    time_t stream_alive = 0, stream_ended = 0;  // the follower was last seen running; ended
    bool finished = false;                      // the pod said KubernetesFinishedLine
    std::string failure;
    double failed_at = 0;
  };

  // kubectl in the job's namespace; stdout into *out; kubectl's own message in the error.
  Status Kubectl(std::vector<std::string> args, std::string* out = nullptr) {
    const fs::path err = dir_ / "kubectl.err";
    std::vector<std::string> argv = {
        "/bin/sh", "-c", "exec \"$@\" 2>\"$0\"", err.string(), "kubectl", "--namespace", ns_};
    argv.insert(argv.end(), args.begin(), args.end());
    launch::CaptureResult r;
    CADRE_RETURN_IF_ERROR(launch::RunAndCapture(argv, std::chrono::seconds(60), &r));
    if (out != nullptr) *out = r.output;
    if (r.exit_code == 0) return Status::Ok();
    std::string message = Trim(ReadTextFile(err));
    if (message.empty()) message = Trim(r.output);
    return {Code::kUnavailable, "kubectl " + args[0] + " failed (exit code " +
                                    std::to_string(r.exit_code) + "): " + message};
  }

  void Delete(bool now) {
    Status st = Kubectl({"delete", "--ignore-not-found", "--wait=false", "-f", objects_.string()});
    if (!st.ok()) {
      job_.Message("warning: " + st.message() +
                   "; delete the job's objects with kubectl delete -n " + ns_ + " -f " +
                   objects_.string());
    }
    if (now) {
      // The set is gone already after a first stop: its terminating pods, without grace.
      st = Kubectl({"delete", "pods", "-l", "cadre.io/job=" + name_, "--ignore-not-found",
                    "--wait=false", "--grace-period=0", "--force"});
      if (!st.ok()) job_.Message("warning: " + st.message());
    }
    if (!deleting_) delete_deadline_ = Clock::now() + std::chrono::seconds(120);
    deleting_ = true;
  }

  // A learner's pod: its log followed, a failure noted (unless the runner is deleting it).
  void Observe(const PodView& pod) {
    Learner& l = learners_[static_cast<size_t>(pod.learner_id - 1)];
    if (!deleting_ && l.failure.empty()) {
      if (!l.uid.empty() && pod.uid != l.uid) {
        l.failure =
            "lost its pod " + pod.name + " (deleted or evicted; the StatefulSet made a new one)";
        l.failed_at = static_cast<double>(time(nullptr));
      } else if (!pod.failure.empty()) {
        l.failure = pod.failure;
        l.failed_at = pod.failed_at > 0 ? pod.failed_at : static_cast<double>(time(nullptr));
      }
    }
    l.uid = pod.uid;
    // A stream can end while its container runs (the API server, log rotation): followed again
    // from shortly before it ended (a few lines may show twice), once the pod's state had time
    // to say whether the container ended instead.
    const bool again = l.follower == 0 && pod.running && pod.container_id == l.followed &&
                       time(nullptr) - l.stream_ended > 3;
    if (l.follower > 0 || pod.container_id.empty() || (pod.container_id == l.followed && !again)) {
      return;
    }
    // The container's whole log, followed while it runs; a restarted one's, from before.
    const std::string err = (dir_ / ("logs-" + pod.name + ".err")).string();
    std::vector<std::string> argv = {"/bin/sh", "-c",      "exec \"$@\" 2>>\"$0\"",
                                     err,       "kubectl", "--namespace",
                                     ns_,       "logs",    pod.name,
                                     "-c",      "learner"};
    argv.push_back(pod.log_previous ? "--previous" : "--follow");
    if (again) argv.push_back("--since-time=" + Rfc3339(l.stream_alive - 1));
    launch::SpawnOptions spawn;
    spawn.argv = argv;
    for (char** e = environ; *e != nullptr; ++e) spawn.env.emplace_back(*e);
    fs::path log =
        job_.layout().job_dir / ("learner-" + std::to_string(pod.learner_id)) / "pod.log";
    spawn.output_fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (spawn.output_fd < 0) return;
    if (launch::SpawnSlot(spawn, &l.follower).ok()) {
      l.followed = pod.container_id;
      l.stream_alive = time(nullptr);
    }
    close(spawn.output_fd);
  }

  void ReapFollowers() {
    for (auto& l : learners_) {
      if (l.follower <= 0) continue;
      if (waitpid(l.follower, nullptr, WNOHANG) == l.follower) {
        l.follower = 0;
        l.stream_ended = time(nullptr);
      } else {
        l.stream_alive = time(nullptr);
      }
    }
  }

  // While the job runs: its end (a failure, or every worker finished), else whether it waits.
  void Decide(const std::vector<PodView>& pods, EngineState* s) {
    const Learner* first = nullptr;
    int id = 0, first_id = 0;
    bool workers_finished = true;
    for (const auto& l : learners_) {
      ++id;
      if (!l.failure.empty() && (first == nullptr || l.failed_at < first->failed_at)) {
        first = &l;
        first_id = id;
      }
      if (!job_.spec().is_server(id)) workers_finished &= l.finished;
    }
    if (first != nullptr) {
      description_ = "learner-" + std::to_string(first_id) + " " + first->failure;
      Delete(false);
    } else if (workers_finished) {
      succeeded_ = true;
      description_ = "every learner finished";
      Delete(false);
    } else {
      std::string pending;
      if (static_cast<int>(pods.size()) < job_.spec().nodes) {
        pending = std::to_string(job_.spec().nodes - static_cast<int>(pods.size())) + " of " +
                  std::to_string(job_.spec().nodes) + " pods not created yet";
      }
      for (const auto& pod : pods) {
        if (pending.empty() && !pod.pending.empty()) pending = pod.name + ": " + pod.pending;
      }
      s->pending = !pending.empty();
      s->description = pending.empty() ? "StatefulSet " + name_ + " running" : pending;
      if (s->pending && pending != shown_pending_ &&
          pending.find("Unschedulable") != std::string::npos) {
        job_.Message("waiting for " + pending);
        shown_pending_ = pending;
      }
    }
  }

  EngineState& Finished(EngineState& s) {
    s.finished = true;
    s.succeeded = succeeded_;
    s.pending = false;
    if (!description_.empty()) s.description = description_;
    int id = 0;
    for (const auto& l : learners_) {
      ++id;
      LearnerEnd end;
      end.learner_id = id;
      end.succeeded = succeeded_;  // a server's work ends with the workers'
      end.failure = l.failure;
      end.end_time = l.failed_at;
      if (end.succeeded || !end.failure.empty()) s.learners.push_back(end);
    }
    for (auto& l : learners_) {
      if (l.follower > 0) kill(-l.follower, SIGTERM);
    }
    return s;
  }

  ClusterJob& job_;
  const std::string ns_, name_;
  const fs::path dir_;
  fs::path objects_;
  std::vector<Learner> learners_;
  bool created_ = false;
  bool deleting_ = false;
  bool succeeded_ = false;
  std::string description_;  // how the job ended, once it did
  std::string shown_pending_;
  Clock::time_point delete_deadline_;
  int misses_ = 0;
};

class KubernetesBackend : public Backend {
 public:
  explicit KubernetesBackend(const BackendOptions& options) : options_(options) {}
  std::string_view name() const override { return "kubernetes"; }
  Status CheckEngine() const override { return RequirePrograms("kubernetes", {"kubectl"}); }
  Status Run(const launch::JobSpec& spec, const launch::RunOptions& options,
             launch::JobOutcome* outcome) override {
    if (spec.image.empty()) {
      return InvalidArgument(
          "image: the kubernetes backend needs the job's container image (the manifest's "
          "`image` field or --image); it must hold cadre and the command");
    }
    launch::RunOptions run = options;
    run.training_id = options.training_id.value_or(launch::NewTrainingId());
    ClusterJobOptions shape;
    shape.runner_store_and_plan = false;
    shape.log_per_learner = true;
    shape.name_prefix = KubernetesRunName(spec.name, *run.training_id);
    BlockStopSignals blocked;
    ClusterJob job(spec, run, options_);
    CADRE_RETURN_IF_ERROR(job.Prepare("kubernetes", shape));
    KubernetesEngine engine(job, options_.name_space.empty() ? "default" : options_.name_space,
                            shape.name_prefix);
    return job.Run(engine, outcome);
  }

 private:
  BackendOptions options_;
};

}  // namespace

std::unique_ptr<Backend> MakeKubernetesBackend(const BackendOptions& options) {
  return std::make_unique<KubernetesBackend>(options);
}

}  // namespace cadre::backends
