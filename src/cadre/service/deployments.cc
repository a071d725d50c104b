#include "cadre/service/deployments.h"

#include <fcntl.h>
#include <httplib.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>

#include "cadre/service/accounts.h"
#include "cadre/service/runner.h"

extern char** environ;

namespace cadre::service {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

std::string DescribeWait(int status) {
  if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    const char* abbrev = sigabbrev_np(sig);
    const char* descr = sigdescr_np(sig);
    return "was killed by signal " + std::to_string(sig) +
           (abbrev ? std::string(" (SIG") + abbrev + ": " + (descr ? descr : "") + ")" : "");
  }
  return "ended (wait status " + std::to_string(status) + ")";
}

// The tail of its log; when the log is empty (a full disk), what it wrote to its error pipe.
std::string LastOutput(const fs::path& dir, const std::string& said) {
  std::string tail = TailOfFile(dir / "serve.log", 4);
  if (tail.empty()) tail = said;
  return tail.empty() ? "" : "; its last output:\n" + tail;
}

int ReadPort(const fs::path& file) {
  std::ifstream in(file);
  int port = 0;
  return (in >> port) && port > 0 && port < 65536 ? port : 0;
}

}  // namespace

void Deployments::ErrorPipe::Reset() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

std::string Deployments::ErrorPipe::Drain() {
  std::string said;
  char buf[4096];
  while (fd_ >= 0 && said.size() < sizeof(buf)) {
    ssize_t n = read(fd_, buf, sizeof(buf) - said.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // EOF: the process is gone; EAGAIN: a child of it holds the pipe
    said.append(buf, static_cast<size_t>(n));
  }
  Reset();
  while (!said.empty() && said.back() == '\n') said.pop_back();
  return said;
}

Deployments::Deployments(DeploymentStore& store, ModelStore& models, DeploymentOptions options)
    : store_(store), models_(models), options_(std::move(options)) {}

Deployments::~Deployments() { StopAll(); }

void Deployments::Record(const Process& p, const std::string& state, const std::string& message,
                         const std::optional<std::string>& failure) {
  // NotFound: deleted meanwhile; nothing to record.
  (void)store_.Update(p.id, state, message, failure, p.restarts);
}

std::string Deployments::WithUpdateNote(const Process& p, std::string message) {
  if (!p.update_note.empty()) message += "; " + p.update_note;
  return message;
}

std::optional<Deployments::Process> Deployments::ProcessFor(const DeploymentRecord& record) {
  Process p;
  p.id = record.id;
  p.dir = options_.dir / record.id;
  p.restarts = record.restarts;
  p.model_id = record.model_id;
  p.update_note = record.update_note.value_or("");
  std::optional<ModelRecord> model = models_.GetAny(record.model_id);
  if (!model) {
    Record(p, kFailed, "deployment failed", "its model " + record.model_id + " is gone");
    return std::nullopt;
  }
  p.model_dir = model->dir;
  return p;
}

void Deployments::Start() {
  // The folders of updates that were under way, or had taken over, when the server last
  // stopped: their processes ended with it, and each deployment starts in its own folder.
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(options_.dir, ec)) {
    if (entry.path().filename().string().find(".update-") != std::string::npos) {
      fs::remove_all(entry.path(), ec);
    }
  }
  for (const auto& record : store_.InStates({kInitializing, kUpdating, kReady})) {
    std::optional<Process> p = ProcessFor(record);
    if (!p) continue;
    if (record.state == kUpdating) {
      // The update's process ended with the server: the deployment keeps its model, and says
      // so until an update succeeds.
      p->update_note = "the update to model " + record.updating_to.value_or("(unrecorded)") +
                       " was abandoned: the server stopped before its scoring process was ready; " +
                       "model " + p->model_id + " answers; send the update again";
      (void)store_.SetUpdate(p->id, std::nullopt, p->update_note);
    }
    Record(*p, kInitializing,
           WithUpdateNote(*p, "starting its scoring process again: the server started"),
           std::nullopt);
    std::string id = p->id;
    live_.emplace(std::move(id), std::move(*p));
  }
  thread_ = std::thread([this] { Loop(); });
}

void Deployments::Launch(const DeploymentRecord& record) {
  std::optional<Process> p = ProcessFor(record);
  if (!p) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) return;
    std::string id = p->id;
    live_.emplace(std::move(id), std::move(*p));
    woken_ = true;
  }
  wake_.notify_all();
}

void Deployments::Update(const DeploymentRecord& record, const ModelRecord& model) {
  Process next;
  next.id = record.id;
  next.model_id = model.id;
  next.model_dir = model.dir;
  // A folder of its own: the current process keeps its port file and log until it is stopped.
  next.dir = options_.dir / (record.id + ".update-" + RandomHex(4));
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) return;
    if (auto pending = updates_.find(record.id); pending != updates_.end()) {
      RetireProcess(std::move(pending->second));  // superseded by this update
      updates_.erase(pending);
    }
    auto live = live_.find(record.id);
    if (live == live_.end() || !live->second.ready) {
      // Nothing answers for it (failed, or still starting): the new model's process is the
      // deployment's process from now on.
      if (live != live_.end()) {
        RetireProcess(std::move(live->second));
        live_.erase(live);
      }
      (void)store_.SetModel(record.id, model.id);
      Record(next, kInitializing, "starting its scoring process for model " + model.id,
             std::nullopt);
      live_.emplace(record.id, std::move(next));
    } else {
      (void)store_.SetUpdate(record.id, model.id, record.update_note);
      Record(next, kUpdating,
             "starting a scoring process for model " + model.id + "; model " +
                 live->second.model_id + " answers until it is ready",
             std::nullopt);
      updates_.emplace(record.id, std::move(next));
    }
    woken_ = true;
  }
  wake_.notify_all();
}

void Deployments::RetireProcess(Process p) {
  if (p.pid > 0) {
    kill(p.pid, SIGTERM);
    p.term_sent = Clock::now();
    retiring_.push_back(std::move(p));
  } else {
    std::error_code ec;
    fs::remove_all(p.dir, ec);
  }
}

void Deployments::Retire(const std::string& id) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto* processes : {&live_, &updates_}) {
      auto it = processes->find(id);
      if (it == processes->end()) continue;
      RetireProcess(std::move(it->second));
      processes->erase(it);
    }
    woken_ = true;
  }
  wake_.notify_all();
}

std::optional<ScoringTarget> Deployments::Target(const std::string& id) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = live_.find(id);
  if (it == live_.end() || !it->second.ready) return std::nullopt;
  return ScoringTarget{it->second.port, it->second.token};
}

void Deployments::Answered(const std::string& id, int port) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = live_.find(id);
  if (it != live_.end() && it->second.port == port) it->second.health_missed = 0;
}

void Deployments::Wake() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    woken_ = true;
  }
  wake_.notify_all();
}

void Deployments::StopAll() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Deployments::Loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    woken_ = false;
    lock.unlock();
    Pass();
    lock.lock();
    bool busy = !retiring_.empty() || !updates_.empty();
    for (const auto& [id, p] : live_) busy = busy || !p.ready;
    auto period = busy ? options_.poll : std::chrono::milliseconds(250);
    wake_.wait_for(lock, period, [this] { return stopping_ || woken_; });
  }
  lock.unlock();
  ShutDown();
}

void Deployments::Spawn(Process& p) {
  std::error_code ec;
  // The folder and the log are made here, where a failure (a full disk, a file in the way) can
  // be told; in the child it could only be an exit code.
  fs::create_directories(p.dir, ec);
  if (ec) {
    p.fail_reason = "cannot create its folder " + p.dir.string() + ": " + ec.message();
    return;
  }
  fs::path port_file = p.dir / "port";
  fs::remove(port_file, ec);
  p.token = RandomHex(16);
  p.port = 0;
  p.ready = false;
  p.was_ready = false;
  p.health_missed = 0;
  // Everything the child needs, prepared before fork: the server has threads.
  std::vector<std::string> args = {options_.serve_program.string(),
                                   p.model_dir.string(),
                                   "--host",
                                   "127.0.0.1",
                                   "--port",
                                   "0",
                                   "--port-file",
                                   port_file.string(),
                                   "--name",
                                   p.id,
                                   "--max-request-bytes",
                                   std::to_string(options_.max_request_bytes),
                                   "--http-threads",
                                   std::to_string(options_.http_threads),
                                   "--error-fd",
                                   "3"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    if (std::strncmp(*e, "CADRE_SERVE_TOKEN=", 18) != 0) env.emplace_back(*e);
  }
  env.push_back("CADRE_SERVE_TOKEN=" + p.token);
  std::vector<char*> envp;
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  const fs::path log = p.dir / "serve.log";
  int out = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (out < 0) {
    p.fail_reason = "cannot open its log " + log.string() + ": " + strerror(errno);
    return;
  }
  // Its fatal error also comes through a pipe (fd 3 in the child): on a full disk its log stays
  // empty, and the reason would be lost.
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) {
    p.fail_reason = std::string("cannot make a pipe: ") + strerror(errno);
    close(out);
    return;
  }
  fcntl(pipe_fds[0], F_SETFL, O_NONBLOCK);
  p.errors = ErrorPipe(pipe_fds[0]);
  static constexpr char kExecFailed[] = "cadre server: could not execute the scorer program\n";

  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid == 0) {
    // Dies with the supervisor thread, which outlives the process unless the server dies.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    setpgid(0, 0);  // the terminal's Ctrl-C goes to the server, which stops us in order
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    int in = open("/dev/null", O_RDONLY);
    if (in < 0) _exit(127);
    dup2(in, 0);
    dup2(out, 1);
    dup2(out, 2);
    if (pipe_fds[1] != 3) {
      dup2(pipe_fds[1], 3);  // without O_CLOEXEC: it crosses exec
    } else {
      fcntl(3, F_SETFD, 0);
    }
    close_range(4, ~0U, 0);  // the server's sockets and database stay with the server
    execve(argv[0], argv.data(), envp.data());
    if (write(2, kExecFailed, sizeof(kExecFailed) - 1) < 0) _exit(127);
    _exit(127);
  }
  close(out);
  close(pipe_fds[1]);
  if (pid < 0) {
    p.errors.Reset();
    p.fail_reason = std::string("fork: ") + strerror(errno);
    return;
  }
  p.pid = pid;
  p.started = Clock::now();
}

bool Deployments::Ended(Process& p, int status) {
  std::string how =
      p.killed_for.empty() ? DescribeWait(status) : p.killed_for + " and was killed by the server";
  p.killed_for.clear();
  std::string output = LastOutput(p.dir, p.errors.Drain());
  bool was_ready = p.was_ready;
  p.pid = 0;
  p.port = 0;
  p.ready = false;
  if (!p.fail_reason.empty()) {
    Record(p, kFailed, "deployment failed", p.fail_reason + output);
    return false;
  }
  if (!was_ready && WIFEXITED(status)) {
    // It refused to start (the model does not load, the program is missing): starting it
    // again would only refuse again.
    Record(p, kFailed, "deployment failed",
           "its scoring process (" + options_.serve_program.string() + ") " + how +
               " before it was ready" + output);
    return false;
  }
  if (p.restarts >= options_.max_restarts) {
    Record(p, kFailed, "deployment failed",
           "its scoring process " + how + "; it was started again " + std::to_string(p.restarts) +
               " time(s) already, the most allowed" + output);
    return false;
  }
  ++p.restarts;
  p.last_end = how;
  Record(p, kInitializing,
         WithUpdateNote(p, "its scoring process " + how + "; starting it again (restart " +
                               std::to_string(p.restarts) + " of at most " +
                               std::to_string(options_.max_restarts) + ")"),
         std::nullopt);
  Spawn(p);
  if (p.pid == 0) {
    Record(p, kFailed, "deployment failed",
           "its scoring process could not be started again: " + p.fail_reason);
    return false;
  }
  return true;
}

void Deployments::WatchStart(Process& p, Clock::time_point now,
                             std::vector<std::pair<std::string, int>>* starting) {
  if (now - p.started > options_.startup_timeout) {
    p.fail_reason = "its scoring process was not ready within " +
                    std::to_string(options_.startup_timeout.count() / 1000) + " s";
    kill(p.pid, SIGKILL);
  } else if (int port = ReadPort(p.dir / "port"); port > 0) {
    starting->emplace_back(p.id, port);
  }
}

std::vector<std::pair<std::string, int>> Deployments::PassUpdates() {
  std::vector<std::pair<std::string, int>> starting;
  auto now = Clock::now();
  for (auto it = updates_.begin(); it != updates_.end();) {
    Process& p = it->second;
    if (p.pid == 0) Spawn(p);
    if (p.pid == 0) {
      UpdateFailed(p, "its scoring process could not be started: " + p.fail_reason);
      it = updates_.erase(it);
      continue;
    }
    int status = 0;
    if (waitpid(p.pid, &status, WNOHANG) == p.pid) {
      std::string why = p.fail_reason.empty()
                            ? "its scoring process " + DescribeWait(status) + " before it was ready"
                            : p.fail_reason;
      UpdateFailed(p, why + LastOutput(p.dir, p.errors.Drain()));
      std::error_code ec;
      fs::remove_all(p.dir, ec);
      it = updates_.erase(it);
      continue;
    }
    if (p.fail_reason.empty()) WatchStart(p, now, &starting);
    ++it;
  }
  return starting;
}

void Deployments::UpdateFailed(const Process& next, const std::string& why) {
  auto live = live_.find(next.id);
  if (live == live_.end()) return;
  Process& current = live->second;
  current.update_note = "the update to model " + next.model_id + " failed: " + why;
  (void)store_.SetUpdate(current.id, std::nullopt, current.update_note);
  Record(current, current.ready ? kReady : kInitializing,
         "the update to model " + next.model_id + " failed, model " + current.model_id +
             " still answers: " + why,
         std::nullopt);
}

void Deployments::Pass() {
  std::vector<std::pair<std::string, int>> starting, updates, ready;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto now = Clock::now();
    for (auto it = live_.begin(); it != live_.end();) {
      Process& p = it->second;
      if (p.pid == 0) {
        Spawn(p);
        if (p.pid == 0) {
          Record(p, kFailed, "deployment failed",
                 "its scoring process could not be started: " + p.fail_reason);
          it = live_.erase(it);
          continue;
        }
      }
      int status = 0;
      if (waitpid(p.pid, &status, WNOHANG) == p.pid) {
        if (Ended(p, status)) {
          ++it;
        } else {
          it = live_.erase(it);
        }
        continue;
      }
      if (!p.ready && p.fail_reason.empty()) WatchStart(p, now, &starting);
      if (p.ready && now - p.health_asked >= options_.health_period) {
        p.health_asked = now;
        ready.emplace_back(p.id, p.port);
      }
      ++it;
    }
    for (auto it = retiring_.begin(); it != retiring_.end();) {
      int status = 0;
      if (waitpid(it->pid, &status, WNOHANG) == it->pid) {
        std::error_code ec;
        fs::remove_all(it->dir, ec);
        it = retiring_.erase(it);
        continue;
      }
      if (now - it->term_sent > options_.grace) kill(it->pid, SIGKILL);
      ++it;
    }
    updates = PassUpdates();
  }
  CheckReady(starting, false);
  CheckReady(updates, true);
  CheckLive(ready);
}

void Deployments::CheckLive(const std::vector<std::pair<std::string, int>>& ready) {
  const auto timeout = std::chrono::duration_cast<std::chrono::seconds>(options_.health_timeout);
  for (const auto& [id, port] : ready) {
    httplib::Client client("127.0.0.1", port);
    client.set_connection_timeout(1);
    client.set_read_timeout(std::max<int64_t>(1, timeout.count()));
    auto r = client.Get("/v2/health/live");
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = live_.find(id);
    if (it == live_.end() || !it->second.ready || it->second.port != port) continue;
    Process& p = it->second;
    if (r && r->status == 200) {
      p.health_missed = 0;
      continue;
    }
    if (++p.health_missed < options_.health_misses) continue;
    // Stopped or hung: no prediction would be answered either. It ends as a crash does.
    p.killed_for =
        "did not answer /v2/health/live " + std::to_string(p.health_missed) + " times in a row (" +
        (r ? "status " + std::to_string(r->status) : httplib::to_string(r.error())) + ")";
    p.ready = false;
    kill(p.pid, SIGKILL);
    woken_ = true;
  }
}

void Deployments::CheckReady(const std::vector<std::pair<std::string, int>>& starting,
                             bool updates) {
  for (const auto& [id, port] : starting) {
    httplib::Client client("127.0.0.1", port);
    client.set_connection_timeout(1);
    client.set_read_timeout(5);
    auto r = client.Get("/v2/health/ready");
    if (!r || r->status != 200) continue;
    std::lock_guard<std::mutex> lock(mutex_);
    if (updates) {
      // The new model answers from here on; the old process finishes what it was sent.
      auto next = updates_.find(id);
      if (next == updates_.end() || next->second.pid == 0) continue;
      Process p = std::move(next->second);
      updates_.erase(next);
      p.port = port;
      p.ready = p.was_ready = true;
      if (auto live = live_.find(id); live != live_.end()) {
        RetireProcess(std::move(live->second));
        live_.erase(live);
      }
      if (!store_.SetModel(id, p.model_id).ok()) {  // deleted meanwhile
        RetireProcess(std::move(p));
        continue;
      }
      Record(p, kReady, "ready; updated to model " + p.model_id, std::nullopt);
      live_.emplace(id, std::move(p));
      continue;
    }
    auto it = live_.find(id);
    if (it == live_.end() || it->second.ready || it->second.pid == 0) continue;
    Process& p = it->second;
    p.port = port;
    p.ready = true;
    p.was_ready = true;
    // How the last process ended is known only when this server restarted it.
    std::string message = "ready";
    if (p.restarts > 0) {
      message += "; its process was started again " + std::to_string(p.restarts) + " time(s)";
      if (!p.last_end.empty()) message += ", last after it " + p.last_end;
    }
    Record(p, kReady, WithUpdateNote(p, message), std::nullopt);
  }
}

void Deployments::ShutDown() {
  std::vector<Process> all;
  std::vector<fs::path> deleted;  // the folders of deleted deployments, once their process is gone
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& [id, p] : live_) all.push_back(std::move(p));
    for (auto& [id, p] : updates_) {  // abandoned: the deployment keeps its recorded model
      deleted.push_back(p.dir);
      all.push_back(std::move(p));
    }
    for (auto& p : retiring_) {
      deleted.push_back(p.dir);
      all.push_back(std::move(p));
    }
    live_.clear();
    updates_.clear();
    retiring_.clear();
  }
  Reap(all);
  for (const auto& dir : deleted) {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
}

void Deployments::Reap(std::vector<Process>& all) {
  for (const auto& p : all) {
    if (p.pid > 0) kill(p.pid, SIGTERM);
  }
  auto deadline = Clock::now() + options_.grace;
  for (;;) {
    bool left = false;
    for (auto& p : all) {
      if (p.pid <= 0) continue;
      int status = 0;
      pid_t r = waitpid(p.pid, &status, WNOHANG);
      if (r == p.pid || (r < 0 && errno == ECHILD)) {
        p.pid = 0;
      } else {
        left = true;
      }
    }
    if (!left) return;
    if (Clock::now() > deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (auto& p : all) {
    if (p.pid <= 0) continue;
    kill(p.pid, SIGKILL);
    int status = 0;
    while (waitpid(p.pid, &status, 0) < 0 && errno == EINTR) {
    }
  }
}

}  // namespace cadre::service
