// Probes and slot processes: capture, timeouts, process groups, the private /etc/hosts.
#include "cadre/launch/process.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace cadre::launch {
namespace {

TEST(RunAndCapture, CollectsOutputAndExitCode) {
  CaptureResult result;
  ASSERT_TRUE(
      RunAndCapture({"sh", "-c", "echo hello; exit 3"}, std::chrono::seconds(10), &result).ok());
  EXPECT_EQ(result.output, "hello\n");
  EXPECT_EQ(result.exit_code, 3);
}

TEST(RunAndCapture, KillsWhatOutlivesItsTimeout) {
  CaptureResult result;
  auto start = Clock::now();
  Status st = RunAndCapture({"sleep", "30"}, std::chrono::milliseconds(100), &result);
  EXPECT_EQ(st.code(), Code::kTimeout);
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(20));  // generous: it must not wait 30 s
}

TEST(RunAndCapture, MissingProgramIsNotFound) {
  CaptureResult result;
  EXPECT_EQ(RunAndCapture({"/nonexistent/program"}, std::chrono::seconds(10), &result).code(),
            Code::kNotFound);
}

// A slot leads its own process group, runs in cwd with exactly the given environment, and sees
// the job's hosts file as /etc/hosts when a namespace method works here.
TEST(SpawnSlot, OwnGroupEnvironmentAndHosts) {
  auto dir = std::filesystem::temp_directory_path() / ("spawn_test." + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "hosts") << "127.0.3.4\tspawn-test-host\n";
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  SpawnOptions o;
  o.argv = {"/bin/sh", "-c", "echo $FOO; pwd; ps -o pgid= -p $$; grep spawn-test /etc/hosts"};
  o.env = {"FOO=bar", "PATH=/usr/bin:/bin"};
  o.cwd = dir;
  o.output_fd = fds[1];
  o.hosts_file = dir / "hosts";
  o.hosts_method = HostsMethodWorks(HostsMethod::kMountNamespace, o.hosts_file)
                       ? HostsMethod::kMountNamespace
                       : HostsMethod::kCadreHosts;
  pid_t pid = 0;
  ASSERT_TRUE(SpawnSlot(o, &pid).ok());
  close(fds[1]);
  std::string out;
  char buf[1024];
  for (ssize_t n; (n = read(fds[0], buf, sizeof(buf))) > 0;) out.append(buf, n);
  close(fds[0]);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  std::string expected = "bar\n" + dir.string() + "\n";
  EXPECT_EQ(out.substr(0, expected.size()), expected);
  EXPECT_NE(out.find(std::to_string(pid)), std::string::npos) << out;  // pgid == pid
  if (o.hosts_method == HostsMethod::kMountNamespace) {
    EXPECT_NE(out.find("127.0.3.4\tspawn-test-host"), std::string::npos) << out;
    // The host's own /etc/hosts is untouched.
    std::ifstream real("/etc/hosts");
    std::string text((std::istreambuf_iterator<char>(real)), std::istreambuf_iterator<char>());
    EXPECT_EQ(text.find("spawn-test-host"), std::string::npos);
  }
  std::filesystem::remove_all(dir);
}

// A stop sent to the slot's group right after it was spawned, most likely before its keeper has
// started the command, still stops the command: it must not wait for a SIGKILL that a runner
// sends only after its grace period. Several rounds, to land on both sides of the keeper's fork.
TEST(SpawnSlot, StopSignalBeforeTheCommandStartsStopsIt) {
  for (int round = 0; round < 20; ++round) {
    SpawnOptions o;
    o.argv = {"/bin/sleep", "600"};
    o.env = {"PATH=/usr/bin:/bin"};
    int null_fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
    ASSERT_GE(null_fd, 0);
    o.output_fd = null_fd;
    pid_t pid = 0;
    ASSERT_TRUE(SpawnSlot(o, &pid).ok());
    close(null_fd);
    if (round % 2 == 1) usleep(static_cast<useconds_t>(round * 100));
    ASSERT_EQ(kill(-pid, SIGTERM), 0);
    // Generous: the slot ends within milliseconds; without the hand-on it sleeps 600 s.
    int status = 0;
    pid_t done = 0;
    for (int i = 0; i < 3000 && done == 0; ++i) {
      done = waitpid(pid, &status, WNOHANG);
      if (done == 0) usleep(10000);
    }
    if (done == 0) {
      kill(-pid, SIGKILL);
      waitpid(pid, &status, 0);
      FAIL() << "round " << round << ": the slot ignored a SIGTERM sent right after its start";
    }
    ASSERT_EQ(done, pid);
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) << "round " << round;
    // Nothing of the slot is left in its group.
    EXPECT_EQ(kill(-pid, 0), -1) << "round " << round;
  }
}

TEST(SpawnSlot, ExecFailureIsReportedOnTheOutput) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  SpawnOptions o;
  o.argv = {"/nonexistent/program"};
  o.output_fd = fds[1];
  pid_t pid = 0;
  ASSERT_TRUE(SpawnSlot(o, &pid).ok());
  close(fds[1]);
  std::string out;
  char buf[1024];
  for (ssize_t n; (n = read(fds[0], buf, sizeof(buf))) > 0;) out.append(buf, n);
  close(fds[0]);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 127);
  EXPECT_NE(out.find("cannot start learner process: exec"), std::string::npos) << out;
}

}  // namespace
}  // namespace cadre::launch
