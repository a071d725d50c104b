#include "cadre/netem/command.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string_view>
#include <thread>

extern char** environ;

namespace cadre::netem {
namespace {

constexpr size_t kMaxCapture = 1 << 20;

// Finds an executable the way a root shell would, adding the sbin folders that a non-login PATH
// often lacks (ip and tc live there).
std::string FindProgram(const std::string& name) {
  if (name.find('/') != std::string::npos) return name;
  std::string path;
  if (const char* p = std::getenv("PATH"); p != nullptr) path = p;
  path += ":/usr/sbin:/sbin:/usr/bin:/bin";
  size_t start = 0;
  while (start <= path.size()) {
    size_t colon = path.find(':', start);
    if (colon == std::string::npos) colon = path.size();
    std::string dir = path.substr(start, colon - start);
    if (!dir.empty()) {
      std::string candidate = dir + "/" + name;
      if (access(candidate.c_str(), X_OK) == 0) return candidate;
    }
    start = colon + 1;
  }
  return {};
}

class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  void reset() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

Status Errno(std::string_view what, int err) {
  return IoError(std::string(what) + ": " + std::strerror(err));
}

// Spawn attributes: default signal dispositions and an empty mask, whatever the calling thread
// has blocked or ignored, so the helper behaves as it would from a shell.
struct SpawnAttr {
  posix_spawnattr_t attr;
  SpawnAttr() {
    posix_spawnattr_init(&attr);
    sigset_t all, none;
    sigfillset(&all);
    sigemptyset(&none);
    posix_spawnattr_setsigdefault(&attr, &all);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
  }
  ~SpawnAttr() { posix_spawnattr_destroy(&attr); }
};

// Waits for the child; kills it when the deadline passes first.
Status Reap(pid_t pid, const std::string& command, Deadline deadline, int* exit_code) {
  int status = 0;
  auto pause = std::chrono::microseconds(200);
  while (true) {
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) break;
    if (r < 0 && errno != EINTR) return Errno("waitpid for `" + command + "`", errno);
    if (deadline.expired()) {
      kill(pid, SIGKILL);
      while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      return TimeoutError("`" + command + "` did not finish in time and was killed");
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(20'000));
  }
  *exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return Status::Ok();
}

}  // namespace

std::string FormatCommand(const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& a : argv) {
    if (!out.empty()) out += ' ';
    out += a;
  }
  return out;
}

Status RunCommand(const std::vector<std::string>& argv, Deadline deadline, CommandResult* result) {
  if (argv.empty()) return InvalidArgument("RunCommand: empty argument vector");
  const std::string command = FormatCommand(argv);
  std::string program = FindProgram(argv[0]);
  if (program.empty()) {
    return NotFound("`" + argv[0] + "` is not installed (not found on PATH, /usr/sbin or /sbin)");
  }

  int out_pipe[2], err_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0) return Errno("pipe", errno);
  Fd out_read(out_pipe[0]), out_write(out_pipe[1]);
  if (pipe2(err_pipe, O_CLOEXEC) != 0) return Errno("pipe", errno);
  Fd err_read(err_pipe[0]), err_write(err_pipe[1]);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, out_write.get(), 1);
  posix_spawn_file_actions_adddup2(&actions, err_write.get(), 2);
  SpawnAttr attr;

  std::vector<char*> args;
  args.reserve(argv.size() + 1);
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);

  pid_t pid = -1;
  int rc = posix_spawn(&pid, program.c_str(), &actions, &attr.attr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) return Errno("cannot start `" + command + "`", rc);
  out_write.reset();
  err_write.reset();

  *result = CommandResult{};
  std::string* sinks[2] = {&result->stdout_text, &result->stderr_text};
  pollfd fds[2] = {{out_read.get(), POLLIN, 0}, {err_read.get(), POLLIN, 0}};
  int open_streams = 2;
  char buf[4096];
  while (open_streams > 0) {
    int n = poll(fds, 2, deadline.poll_timeout_ms());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      kill(pid, SIGKILL);
      int ignored = 0;
      (void)Reap(pid, command, Deadline(Duration(0)), &ignored);
      return Errno("poll on `" + command + "`", errno);
    }
    if (n == 0) break;  // deadline: Reap below kills the child
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      ssize_t got = read(fds[i].fd, buf, sizeof(buf));
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) {
        fds[i].fd = -1;
        --open_streams;
        continue;
      }
      std::string* sink = sinks[i];
      sink->append(buf, std::min(static_cast<size_t>(got), kMaxCapture - sink->size()));
    }
  }
  return Reap(pid, command, deadline, &result->exit_code);
}

Status RunChecked(const std::vector<std::string>& argv, Deadline deadline,
                  std::string* stdout_text) {
  CommandResult result;
  CADRE_RETURN_IF_ERROR(RunCommand(argv, deadline, &result));
  if (result.exit_code != 0) {
    std::string err = result.stderr_text;
    while (!err.empty() && (err.back() == '\n' || err.back() == ' ')) err.pop_back();
    if (err.empty()) err = "(no error output)";
    return IoError("`" + FormatCommand(argv) + "` failed (exit " +
                   std::to_string(result.exit_code) + "): " + err);
  }
  if (stdout_text != nullptr) *stdout_text = std::move(result.stdout_text);
  return Status::Ok();
}

}  // namespace cadre::netem
