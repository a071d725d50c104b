#include "cadre/launch/process.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "cadre/launch/cpu_binding.h"

namespace cadre::launch {
namespace {

// Everything the child needs, laid out before fork so the child only copies pointers.
struct ChildPlan {
  std::vector<std::string> argv_storage, env_storage;
  std::vector<char*> argv, envp;
  std::string cwd, hosts_file;
  std::string uid_map, gid_map;  // for kUserNamespace: map our ids onto themselves
  HostsMethod method = HostsMethod::kCadreHosts;
  const netem::NetworkEmulator* network = nullptr;
  int network_host = -1;
  std::vector<int> cpus;
  int output_fd = -1;
  pid_t parent = 0;

  explicit ChildPlan(const SpawnOptions& o)
      : argv_storage(o.argv),
        env_storage(o.env),
        cwd(o.cwd.string()),
        hosts_file(o.hosts_file.string()),
        method(o.hosts_method),
        network(o.network),
        network_host(o.network_host),
        cpus(o.cpus),
        output_fd(o.output_fd),
        parent(getpid()) {
    for (auto& s : argv_storage) argv.push_back(s.data());
    argv.push_back(nullptr);
    for (auto& s : env_storage) envp.push_back(s.data());
    envp.push_back(nullptr);
    uid_map = std::to_string(getuid()) + " " + std::to_string(getuid()) + " 1\n";
    gid_map = std::to_string(getgid()) + " " + std::to_string(getgid()) + " 1\n";
  }
};

// Async-signal-safe error report from the child: "cadre: <what>: errno <n>\n".
[[noreturn]] void ChildFail(int fd, const char* what) {
  int err = errno;
  char buf[256];
  size_t n = 0;
  auto put = [&](const char* s) {
    while (*s && n < sizeof(buf) - 1) buf[n++] = *s++;
  };
  put("cadre: cannot start learner process: ");
  put(what);
  put(": ");
  put(strerrordesc_np(err) ? strerrordesc_np(err) : "error");
  put("\n");
  if (fd >= 0 && write(fd, buf, n) < 0) _exit(127);
  _exit(127);
}

bool WriteFile(const char* path, const std::string& text) {
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  bool ok = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  close(fd);
  return ok;
}

// Runs in the child: a private mount namespace with the job's hosts file over /etc/hosts.
// Returns false (errno set) and the step's name in *step on failure.
bool InstallHosts(const ChildPlan& plan, const char** step) {
  if (plan.method == HostsMethod::kCadreHosts) return true;
  if (plan.method == HostsMethod::kUserNamespace) {
    *step = "unshare(user+mount namespace)";
    if (unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) return false;
    WriteFile("/proc/self/setgroups", "deny");  // required before gid_map when unprivileged
    *step = "write uid_map/gid_map";
    if (!WriteFile("/proc/self/uid_map", plan.uid_map)) return false;
    if (!WriteFile("/proc/self/gid_map", plan.gid_map)) return false;
  } else {
    *step = "unshare(mount namespace)";
    if (unshare(CLONE_NEWNS) != 0) return false;
  }
  // Our bind mount must not propagate back to the host's mount namespace.
  *step = "make / a slave mount";
  if (mount(nullptr, "/", nullptr, MS_REC | MS_SLAVE, nullptr) != 0) return false;
  *step = "bind-mount the job's hosts file over /etc/hosts";
  if (mount(plan.hosts_file.c_str(), "/etc/hosts", nullptr, MS_BIND, nullptr) != 0) return false;
  return true;
}

void ResetSignals() {
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGCHLD, SIGPIPE, SIGQUIT}) signal(sig, SIG_DFL);
}

// The signals the slot's keeper waits for (blocked, taken with sigwaitinfo).
sigset_t KeeperSignals() {
  sigset_t set;
  sigemptyset(&set);
  for (int sig : {SIGCHLD, SIGUSR1, SIGTERM, SIGINT, SIGHUP}) sigaddset(&set, sig);
  return set;
}

// Ends the keeper the way the command ended: the same exit code, or the same signal.
[[noreturn]] void ExitLike(int wait_status) {
  if (WIFEXITED(wait_status)) _exit(WEXITSTATUS(wait_status));
  int sig = WTERMSIG(wait_status);
  rlimit no_core{0, 0};
  setrlimit(RLIMIT_CORE, &no_core);  // the command may have dumped core; the keeper must not
  signal(sig, SIG_DFL);
  sigset_t just;
  sigemptyset(&just);
  sigaddset(&just, sig);
  sigprocmask(SIG_UNBLOCK, &just, nullptr);
  kill(getpid(), sig);
  _exit(128 + sig);
}

// The slot's first process, its keeper: it leads the slot's process group, sets up the
// namespaces, starts the command as its child and waits. It exists because the command is
// usually not our direct child (sh -c forks), and PR_SET_PDEATHSIG covers only direct children:
// when the runner dies, even by SIGKILL, the keeper gets SIGUSR1 and kills the whole group.
// Signals the runner sends to the group reach the command directly; the keeper ignores them and
// leaves with the command's exit status.
[[noreturn]] void RunChild(const ChildPlan& plan) {
  ResetSignals();
  sigset_t waited = KeeperSignals();
  sigprocmask(SIG_BLOCK, &waited, nullptr);
  setpgid(0, 0);
  prctl(PR_SET_PDEATHSIG, SIGUSR1);
  if (getppid() != plan.parent) _exit(127);  // the runner died before prctl took effect
  int null_fd = open("/dev/null", O_RDONLY);
  if (null_fd < 0 || dup2(null_fd, STDIN_FILENO) < 0) ChildFail(plan.output_fd, "open /dev/null");
  if (dup2(plan.output_fd, STDOUT_FILENO) < 0 || dup2(plan.output_fd, STDERR_FILENO) < 0) {
    ChildFail(plan.output_fd, "redirect output");
  }
  if (plan.network != nullptr) {
    errno = plan.network->EnterHost(plan.network_host);
    if (errno != 0) ChildFail(STDERR_FILENO, "enter the emulated host (setns, UTS namespace)");
  }
  const char* step = "";
  if (!InstallHosts(plan, &step)) ChildFail(STDERR_FILENO, step);
  if (!plan.cwd.empty() && chdir(plan.cwd.c_str()) != 0) ChildFail(STDERR_FILENO, "chdir");
  if (!plan.cpus.empty()) {
    errno = BindToCpus(plan.cpus);
    if (errno != 0) ChildFail(STDERR_FILENO, "bind to its CPUs (sched_setaffinity)");
  }

  // A stop signal the runner sent to the slot's group before the command existed reached only
  // the keeper, which ignores it: the command would run on until SIGKILL, a whole grace period
  // later. So the command waits at `gate`, its signals still blocked, until the keeper has
  // handed on the stop signals pending here. One sent after the fork reached the command too and
  // is pending there as well; the copy merges with it (standard signals do not queue), so none
  // arrives twice.
  int gate[2];
  if (pipe2(gate, O_CLOEXEC) != 0) ChildFail(STDERR_FILENO, "pipe");
  pid_t command = fork();
  if (command < 0) ChildFail(STDERR_FILENO, "fork");
  if (command == 0) {
    close(gate[1]);
    char byte = 0;
    while (read(gate[0], &byte, 1) < 0 && errno == EINTR) {
    }
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);  // a handed-on stop signal ends it here
    execve(plan.argv[0], plan.argv.data(), plan.envp.data());
    ChildFail(STDERR_FILENO, "exec");
  }
  close(gate[0]);
  sigset_t pending;
  sigpending(&pending);
  for (int sig : {SIGTERM, SIGINT, SIGHUP}) {
    if (sigismember(&pending, sig)) kill(command, sig);
  }
  close(gate[1]);
  for (;;) {
    siginfo_t info;
    int sig = sigwaitinfo(&waited, &info);
    if (sig == SIGUSR1) kill(0, SIGKILL);  // the runner is gone: take the whole slot down
    if (sig != SIGCHLD) continue;
    int wait_status = 0;
    pid_t done = waitpid(command, &wait_status, WNOHANG);
    if (done == command) ExitLike(wait_status);
  }
}

}  // namespace

const char* HostsMethodName(HostsMethod method) {
  switch (method) {
    case HostsMethod::kMountNamespace:
      return "mount-namespace";
    case HostsMethod::kUserNamespace:
      return "user-namespace";
    case HostsMethod::kCadreHosts:
      return "cadre-hosts";
  }
  return "unknown";
}

Status SpawnSlot(const SpawnOptions& options, pid_t* pid) {
  if (options.argv.empty()) return InvalidArgument("SpawnSlot: empty argv");
  ChildPlan plan(options);
  pid_t child = fork();
  if (child < 0) return IoError(std::string("fork: ") + std::strerror(errno));
  if (child == 0) RunChild(plan);
  // Also set the group from this side, so a signal sent right after fork reaches the group.
  setpgid(child, child);
  *pid = child;
  return Status::Ok();
}

bool HostsMethodWorks(HostsMethod method, const std::filesystem::path& hosts_file) {
  if (method == HostsMethod::kCadreHosts) return true;
  SpawnOptions options;
  options.argv = {"/bin/true"};
  options.hosts_method = method;
  options.hosts_file = hosts_file;
  ChildPlan plan(options);
  pid_t child = fork();
  if (child < 0) return false;
  if (child == 0) {
    ResetSignals();
    const char* step = "";
    _exit(InstallHosts(plan, &step) ? 0 : 1);
  }
  int status = 0;
  while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

Status RunAndCapture(const std::vector<std::string>& argv, Duration timeout, CaptureResult* out) {
  if (argv.empty()) return InvalidArgument("RunAndCapture: empty argv");
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return IoError(std::string("pipe: ") + std::strerror(errno));
  std::vector<std::string> storage(argv);
  std::vector<char*> args;
  for (auto& s : storage) args.push_back(s.data());
  args.push_back(nullptr);
  pid_t child = fork();
  if (child < 0) {
    close(fds[0]);
    close(fds[1]);
    return IoError(std::string("fork: ") + std::strerror(errno));
  }
  if (child == 0) {
    ResetSignals();
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    int null_fd = open("/dev/null", O_RDWR);
    dup2(null_fd, STDIN_FILENO);
    dup2(null_fd, STDERR_FILENO);
    dup2(fds[1], STDOUT_FILENO);
    execvp(args[0], args.data());
    _exit(127);
  }
  close(fds[1]);
  Deadline deadline(timeout);
  out->output.clear();
  bool timed_out = false;
  char buf[4096];
  for (;;) {
    pollfd p{fds[0], POLLIN, 0};
    int r = poll(&p, 1, deadline.poll_timeout_ms());
    if (r < 0 && errno == EINTR) continue;
    if (r == 0) {
      timed_out = true;
      break;
    }
    ssize_t n = read(fds[0], buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out->output.append(buf, static_cast<size_t>(n));
  }
  close(fds[0]);
  if (timed_out) kill(child, SIGKILL);
  int status = 0;
  while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out) {
    return TimeoutError(argv[0] + " did not finish within " + std::to_string(timeout.count()) +
                        " ms");
  }
  out->exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if (out->exit_code == 127) return NotFound("cannot execute " + argv[0]);
  return Status::Ok();
}

}  // namespace cadre::launch
