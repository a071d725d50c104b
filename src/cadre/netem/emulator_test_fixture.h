// The fixture shared by the tests that build real emulated networks: skips (with the reason)
// where namespaces cannot be created, and gives each test its own job id and state directory so
// that test cases may run in parallel.
#pragma once

#include <stdlib.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "cadre/netem/command.h"
#include "cadre/netem/network_emulator.h"

namespace cadre::netem {

// Helpers for the namespace tests: sockets with 30 s timeouts (a broken test fails, never hangs),
// and children that run a body inside an emulated host.
inline constexpr int kPort = 5000;

inline std::set<std::string> Namespaces() {
  std::string out;
  EXPECT_TRUE(RunChecked({"ip", "netns", "list"}, Deadline(std::chrono::seconds(30)), &out).ok());
  std::set<std::string> names;
  std::istringstream lines(out);
  std::string line;
  while (std::getline(lines, line)) names.insert(line.substr(0, line.find(' ')));
  return names;
}

inline std::set<std::string> RootInterfaces() {
  std::set<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator("/sys/class/net")) {
    names.insert(entry.path().filename());
  }
  return names;
}

inline sockaddr_in Address(const std::string& ip) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(kPort);
  inet_pton(AF_INET, ip.c_str(), &a.sin_addr);
  return a;
}

inline int Listen(const std::string& ip) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in a = Address(ip);
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || listen(fd, 4) != 0) {
    close(fd);
    return -1;
  }
  timeval tv{30, 0};  // accept gives up rather than hang the test
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  return fd;
}

inline int Connect(const std::string& ip) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  timeval tv{30, 0};
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  sockaddr_in a = Address(ip);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

inline bool WriteAll(int fd, const char* data, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, data, n);
    if (w <= 0) return false;
    data += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

// Forks a child that enters host `i` and runs `body` there; the child exits with body's result,
// or 100 + errno when it could not enter the host. alarm() bounds it if the test goes wrong.
inline pid_t SpawnInHost(const NetworkEmulator& emu, int i,
                         int (*body)(const NetworkEmulator&, int)) {
  pid_t pid = fork();
  if (pid == 0) {
    alarm(60);
    int err = emu.EnterHost(i);
    _exit(err != 0 ? 100 + err : body(emu, i));
  }
  return pid;
}

// The child's exit code, waiting at most `timeout` (then it is killed and -1 returned).
inline int WaitChild(pid_t pid, std::chrono::seconds timeout = std::chrono::seconds(60)) {
  Deadline deadline(timeout);
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (deadline.expired()) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Child body for SpawnInHost: connects to host 1 (retrying while its listener starts), sends
// 4 MiB, and waits for the receiver to have everything.
inline int Send4MiBToHost1(const NetworkEmulator& emu, int) {
  int fd = -1;
  for (int attempt = 0; attempt < 100 && fd < 0; ++attempt) {
    fd = Connect(emu.hosts()[1].address);
    if (fd < 0) usleep(50'000);
  }
  if (fd < 0) return 3;
  std::string chunk(64 * 1024, 'x');
  for (int i = 0; i < 64; ++i) {
    if (!WriteAll(fd, chunk.data(), chunk.size())) return 4;
  }
  shutdown(fd, SHUT_WR);
  char c;
  return read(fd, &c, 1) == 0 ? 0 : 5;
}

// Host 0 sends 4 MiB to `listener` (in host 1); the transfer must take at least 70% of the time
// `rate_bps` allows. A lower bound only: a loaded machine may be slower, never faster than the
// link.
inline void ExpectTransferRateLimited(const NetworkEmulator& emu, int listener, double rate_bps) {
  pid_t sender = SpawnInHost(emu, 0, Send4MiBToHost1);
  int fd = accept(listener, nullptr, nullptr);
  ASSERT_GE(fd, 0) << "sender did not connect";
  timeval tv{30, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  const auto start = std::chrono::steady_clock::now();
  size_t total = 0;
  std::vector<char> buf(1 << 16);
  for (ssize_t n; (n = read(fd, buf.data(), buf.size())) > 0;) total += static_cast<size_t>(n);
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  close(fd);
  EXPECT_EQ(WaitChild(sender), 0);
  ASSERT_EQ(total, 4u << 20);
  const double ideal = static_cast<double>(total) * 8.0 / rate_bps;
  EXPECT_GE(elapsed, 0.7 * ideal) << "4 MiB took " << elapsed << " s; the link needs " << ideal;
}

class EmulatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    static const Status support = CheckNetnsSupport();
    if (!support.ok()) GTEST_SKIP() << "needs network namespaces: " << support.message();
    char tmpl[] = "/tmp/cadre-netem-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    state_dir_ = tmpl;
  }
  void TearDown() override {
    if (!state_dir_.empty()) std::filesystem::remove_all(state_dir_);
  }

  EmulatorOptions Options(int hosts, const std::string& link) {
    EmulatorOptions o;
    o.hosts = hosts;
    o.link = ParseLinkSpecOrThrow(link);
    // Unique per process and test (ids are at most 40 characters).
    std::string test = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    o.job_id = "t" + std::to_string(getpid()) + "-" + test.substr(0, 24);
    o.state_dir = state_dir_;
    return o;
  }

  std::unique_ptr<NetworkEmulator> Create(const EmulatorOptions& o) {
    std::unique_ptr<NetworkEmulator> emu;
    Status s = NetworkEmulator::Create(o, &emu);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return emu;
  }

  std::string state_dir_;
};

}  // namespace cadre::netem
