#include "cadre/service/runner.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <deque>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string_view>
#include <vector>

#include "cadre/launch/process.h"

extern char** environ;

namespace cadre::service {
namespace fs = std::filesystem;

namespace {

// Async-signal-safe decimal formatting for the child.
size_t FormatPid(pid_t pid, char* buf) {
  char tmp[16];
  size_t n = 0;
  do {
    tmp[n++] = static_cast<char>('0' + pid % 10);
    pid /= 10;
  } while (pid > 0 && n < sizeof(tmp));
  for (size_t i = 0; i < n; ++i) buf[i] = tmp[n - 1 - i];
  buf[n] = '\n';
  return n + 1;
}

// The /proc/PID/stat fields after the command name: state is the first, starttime the 20th.
bool ReadStat(pid_t pid, char* state, int64_t* start) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t close = text.rfind(')');
  if (close == std::string::npos) return false;
  std::istringstream rest(text.substr(close + 2));
  std::string field;
  std::vector<std::string> fields;
  while (rest >> field && fields.size() < 20) fields.push_back(field);
  if (fields.size() < 20) return false;
  *state = fields[0].empty() ? '?' : fields[0][0];
  *start = std::stoll(fields[19]);
  return true;
}

}  // namespace

Status SpawnRunner(const RunnerLaunch& launch, RunnerProcess* runner) {
  // Everything the children need, prepared before fork: the server has threads.
  std::vector<std::string> args = {launch.cadre.string(),
                                   "run",
                                   launch.manifest.string(),
                                   "--output-dir",
                                   launch.job_dir.string(),
                                   "--training-id",
                                   launch.training_id,
                                   "--grace",
                                   std::to_string(launch.grace.count() / 1000.0)};
  args.insert(args.end(), launch.extra_args.begin(), launch.extra_args.end());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  // The server's environment, with the job's own CUDA_VISIBLE_DEVICES when it has one.
  std::vector<std::string> env_entries;
  for (char** e = environ; *e != nullptr; ++e) {
    if (launch.cuda_visible_devices && std::string_view(*e).starts_with("CUDA_VISIBLE_DEVICES=")) {
      continue;
    }
    env_entries.emplace_back(*e);
  }
  if (launch.cuda_visible_devices) {
    env_entries.push_back("CUDA_VISIBLE_DEVICES=" + *launch.cuda_visible_devices);
  }
  std::vector<char*> envp;
  for (auto& e : env_entries) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::string log = (launch.work_dir / "training.log").string();
  std::string pid_file = (launch.work_dir / "runner.pid").string();
  std::string cwd = launch.work_dir.string();

  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) return IoError(std::string("pipe: ") + strerror(errno));
  pid_t middle = fork();
  if (middle < 0) {
    close(pipe_fds[0]);
    close(pipe_fds[1]);
    return IoError(std::string("fork: ") + strerror(errno));
  }
  if (middle == 0) {
    // The middle process: a new session, the runner as its child, then gone, so the runner is
    // nobody's child here and no terminal signal of the server's reaches it.
    setsid();
    // The runner starts with its stop signals blocked: a cancel that comes before it is ready
    // for signals stays pending until `cadre run` takes it (every backend reads them while
    // blocked), instead of killing it before it has recorded anything.
    sigset_t stop;
    sigemptyset(&stop);
    for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&stop, sig);
    sigprocmask(SIG_SETMASK, &stop, nullptr);
    for (int sig : {SIGPIPE, SIGINT, SIGTERM, SIGHUP, SIGCHLD}) signal(sig, SIG_DFL);
    pid_t pid = fork();
    if (pid == 0) {
      int in = open("/dev/null", O_RDONLY);
      int out = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      if (in < 0 || out < 0 || chdir(cwd.c_str()) != 0) _exit(127);
      dup2(in, 0);
      dup2(out, 1);
      dup2(out, 2);
      close_range(3, ~0U, 0);  // the server's sockets and database stay with the server
      execve(argv[0], argv.data(), envp.data());
      _exit(127);
    }
    if (pid > 0) {
      char buf[24];
      size_t n = FormatPid(pid, buf);
      int fd = open(pid_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      if (fd >= 0) {
        if (write(fd, buf, n) < 0) _exit(1);
        close(fd);
      }
    }
    if (write(pipe_fds[1], &pid, sizeof(pid)) < 0) _exit(1);
    _exit(pid > 0 ? 0 : 1);
  }
  close(pipe_fds[1]);
  pid_t pid = -1;
  ssize_t n = read(pipe_fds[0], &pid, sizeof(pid));
  close(pipe_fds[0]);
  int status = 0;
  while (waitpid(middle, &status, 0) < 0 && errno == EINTR) {
  }
  if (n != sizeof(pid) || pid <= 0) return IoError("could not start the job's runner");
  runner->pid = pid;
  runner->start = ProcessStartTime(pid);
  return Status::Ok();
}

int64_t ProcessStartTime(pid_t pid) {
  char state = '?';
  int64_t start = 0;
  return ReadStat(pid, &state, &start) ? start : 0;
}

bool RunnerAlive(const RunnerProcess& runner) {
  if (runner.pid <= 0) return false;
  char state = '?';
  int64_t start = 0;
  if (!ReadStat(runner.pid, &state, &start)) return false;
  if (state == 'Z' || state == 'X') return false;
  return runner.start == 0 || start == runner.start;
}

std::optional<pid_t> ReadRunnerPid(const fs::path& work_dir) {
  std::ifstream in(work_dir / "runner.pid");
  long pid = 0;
  if (!(in >> pid) || pid <= 0) return std::nullopt;
  return static_cast<pid_t>(pid);
}

RunnerOutcome ReadOutcome(const fs::path& job_dir) {
  RunnerOutcome out;
  std::ifstream in(job_dir / "status.json");
  if (!in) return out;
  nlohmann::json status = nlohmann::json::parse(in, nullptr, false);
  if (status.is_discarded() || !status.is_object()) return out;
  out.state = status.value("state", "");
  if (status.contains("failure") && status["failure"].is_string()) {
    out.failure = status["failure"].get<std::string>();
  }
  out.finished = out.state == "completed" || out.state == "failed" || out.state == "stopped";
  return out;
}

std::string RemoveRunnerLeftovers(const fs::path& job_dir,
                                  const std::vector<std::string>& runner_args) {
  fs::path objects = job_dir / "kubernetes" / "objects.yaml";
  std::error_code ec;
  if (!fs::exists(objects, ec)) return "";
  std::string name_space = "default";
  for (size_t i = 0; i + 1 < runner_args.size(); ++i) {
    if (runner_args[i] == "--namespace") name_space = runner_args[i + 1];
  }
  launch::CaptureResult result;
  Status st = launch::RunAndCapture({"kubectl", "delete", "-n", name_space, "--ignore-not-found",
                                     "--wait=false", "-f", objects.string()},
                                    std::chrono::seconds(60), &result);
  if (st.ok() && result.exit_code == 0) {
    return "its Kubernetes objects (" + objects.string() + ") were deleted from namespace " +
           name_space;
  }
  return "its Kubernetes objects could not be deleted (" +
         (st.ok() ? "kubectl exited with code " + std::to_string(result.exit_code) : st.message()) +
         "); delete them with `kubectl delete -n " + name_space + " -f " + objects.string() + "`";
}

std::string TailOfFile(const fs::path& file, size_t lines) {
  std::ifstream in(file);
  std::deque<std::string> tail;
  for (std::string line; std::getline(in, line);) {
    tail.push_back(line);
    if (tail.size() > lines) tail.pop_front();
  }
  std::string out;
  for (const auto& l : tail) out += (out.empty() ? "" : "\n") + l;
  return out;
}

}  // namespace cadre::service
