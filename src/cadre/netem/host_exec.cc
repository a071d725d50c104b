#include "cadre/netem/host_exec.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>

extern char** environ;

namespace cadre::netem {
namespace {

// Every string a child needs, prepared before fork so that the child only makes system calls.
struct ChildImage {
  std::vector<std::string> env_storage;
  std::vector<char*> envp;
  std::vector<char*> argv;
  std::string exec_failed;  // the child's message when exec fails
};

ChildImage PrepareImage(const NetworkEmulator& emu, int i, const std::vector<std::string>& argv) {
  ChildImage image;
  auto extra = HostEnvironment(emu, i);
  for (char** e = environ; *e != nullptr; ++e) {
    std::string entry = *e;
    std::string key = entry.substr(0, entry.find('='));
    bool replaced = false;
    for (const auto& [k, v] : extra) replaced = replaced || k == key;
    if (!replaced) image.env_storage.push_back(std::move(entry));
  }
  for (const auto& [k, v] : extra) image.env_storage.push_back(k + "=" + v);
  for (auto& s : image.env_storage) image.envp.push_back(s.data());
  image.envp.push_back(nullptr);
  for (const auto& a : argv) image.argv.push_back(const_cast<char*>(a.c_str()));
  image.argv.push_back(nullptr);
  image.exec_failed = "cadre netem exec: cannot execute " + argv[0] + " on host " +
                      std::to_string(i) + " (not found or not executable)\n";
  return image;
}

int ExitCode(int status) {
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace

std::vector<std::pair<std::string, std::string>> HostEnvironment(const NetworkEmulator& emu,
                                                                 int i) {
  std::string all;
  for (const auto& h : emu.hosts()) {
    if (!all.empty()) all += ',';
    all += h.address;
  }
  return {{"CADRE_NETEM_HOST", std::to_string(i)},
          {"CADRE_NETEM_HOSTS", std::to_string(emu.size())},
          {"CADRE_NETEM_ADDRESS", emu.hosts()[i].address},
          {"CADRE_NETEM_ADDRESSES", all},
          {"CADRE_NETEM_SWITCH", emu.switch_address()},
          {"CADRE_NETEM_LINK", emu.link().ToString()}};
}

Status RunOnEveryHost(const NetworkEmulator& emu, const std::vector<std::string>& argv,
                      const HostExecOptions& options, int* exit_code) {
  if (argv.empty()) return InvalidArgument("netem exec: no command given");
  std::vector<ChildImage> images;
  for (int i = 0; i < emu.size(); ++i) images.push_back(PrepareImage(emu, i, argv));

  // Held blocked for the whole run and collected with sigtimedwait, so a signal can never be lost
  // between two checks. Restored on return.
  sigset_t forwarded, previous;
  sigemptyset(&forwarded);
  sigaddset(&forwarded, SIGINT);
  sigaddset(&forwarded, SIGTERM);
  sigaddset(&forwarded, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &forwarded, &previous);
  const pid_t parent = getpid();

  std::vector<pid_t> pids(emu.size(), -1);
  std::vector<int> codes(emu.size(), -1);
  Status result = Status::Ok();
  auto signal_all = [&](int sig) {
    for (int i = 0; i < emu.size(); ++i) {
      if (pids[i] > 0 && codes[i] < 0) kill(-pids[i], sig);
    }
  };
  for (int i = 0; i < emu.size(); ++i) {
    pid_t pid = fork();
    if (pid == 0) {
      // Child: async-signal-safe calls only.
      setpgid(0, 0);
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(127);  // the parent died before prctl took effect
      sigprocmask(SIG_SETMASK, &previous, nullptr);
      sigprocmask(SIG_UNBLOCK, &forwarded, nullptr);
      int err = emu.EnterHost(i);
      if (err != 0) {
        const char msg[] = "cadre netem exec: cannot enter the emulated host\n";
        (void)!write(2, msg, sizeof(msg) - 1);
        _exit(126);
      }
      execvpe(images[i].argv[0], images[i].argv.data(), images[i].envp.data());
      const std::string& msg = images[i].exec_failed;  // one write: lines do not interleave
      (void)!write(2, msg.data(), msg.size());
      _exit(127);
    }
    if (pid < 0) {
      result = IoError(std::string("netem exec: fork failed: ") + std::strerror(errno));
      signal_all(SIGKILL);
      break;
    }
    setpgid(pid, pid);  // also here, so that kill(-pid) works before the child runs
    pids[i] = pid;
  }

  int running = 0;
  for (pid_t p : pids) running += p > 0 ? 1 : 0;
  std::optional<Deadline> kill_at;  // set once the processes were told to stop
  while (running > 0) {
    for (int i = 0; i < emu.size(); ++i) {
      if (pids[i] <= 0 || codes[i] >= 0) continue;
      int status = 0;
      if (waitpid(pids[i], &status, WNOHANG) == pids[i]) {
        codes[i] = ExitCode(status);
        --running;
      }
    }
    if (running == 0) break;
    if (kill_at && kill_at->expired()) {
      signal_all(SIGKILL);
    } else if (!kill_at && options.deadline.expired()) {
      result = TimeoutError("netem exec: `" + argv[0] + "` did not finish before the deadline");
      signal_all(SIGKILL);
      kill_at = Deadline(Duration(0));
    } else if (Status health = emu.health(); !kill_at && !health.ok()) {
      // The relay died: no packet moves any more, so the processes would only wait for peers.
      result = health.WithContext("netem exec: the emulated network failed");
      signal_all(SIGTERM);
      kill_at = Deadline(options.grace);
    }
    timespec wait{0, 20'000'000};  // polls children every 20 ms
    siginfo_t info;
    int sig = sigtimedwait(&forwarded, &info, &wait);
    if (sig > 0 && !kill_at) {
      result = AbortedError(std::string("netem exec: stopped by signal ") + strsignal(sig));
      signal_all(sig);
      kill_at = Deadline(options.grace);
    }
  }
  // A signal that arrived after the last process ended still means "stop"; taking it here keeps
  // it from killing the caller before the caller has cleaned up.
  timespec no_wait{0, 0};
  siginfo_t info;
  if (int sig = sigtimedwait(&forwarded, &info, &no_wait); sig > 0 && result.ok()) {
    result = AbortedError(std::string("netem exec: stopped by signal ") + strsignal(sig));
  }
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  *exit_code = 0;
  for (int code : codes) {
    if (code != 0) {
      *exit_code = code < 0 ? 127 : code;  // < 0: never started
      break;
    }
  }
  return result;
}

}  // namespace cadre::netem
