// Tests on real network namespaces. They skip themselves unless the process may create
// namespaces (root, `ip netns` permitted). Every test uses its own job id and state directory, so
// test cases may run in parallel.
#include "cadre/netem/network_emulator.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "cadre/netem/command.h"
#include "cadre/netem/emulator_test_fixture.h"

namespace cadre::netem {
namespace {

namespace fs = std::filesystem;
using std::chrono::seconds;
using NetworkEmulatorTest = EmulatorTest;

int ConnectToHost1AndCheckName(const NetworkEmulator& emu, int i) {
  char name[65] = {};
  if (gethostname(name, sizeof(name) - 1) != 0 || emu.hosts()[i].host_name != name) return 2;
  int fd = Connect(emu.hosts()[1].address);
  if (fd < 0) return 3;
  char reply[4] = {};
  if (!WriteAll(fd, "ping", 4) || read(fd, reply, 4) != 4) return 4;
  return std::string(reply, 4) == "pong" ? 0 : 5;
}

int EchoOnce(const NetworkEmulator& emu, int i) {
  int listener = Listen(emu.hosts()[i].address);
  if (listener < 0) return 2;
  int fd = accept(listener, nullptr, nullptr);
  char buf[4];
  if (fd < 0 || read(fd, buf, 4) != 4) return 3;
  return WriteAll(fd, "pong", 4) ? 0 : 4;
}

TEST_F(NetworkEmulatorTest, HostsConnectOverTcpAndOnlyEmulatedAddressesExist) {
  std::set<std::string> root_before = RootInterfaces();
  EmulatorOptions o = Options(3, "1gbit");
  o.host_names = {"learner-1", "learner-2", "learner-3"};
  auto emu = Create(o);
  ASSERT_TRUE(emu);
  ASSERT_EQ(emu->size(), 3);
  EXPECT_EQ(emu->switch_address(), "198.18.0.1");
  EXPECT_EQ(emu->hosts()[0].address, "198.18.0.2");
  EXPECT_EQ(emu->hosts()[2].address, "198.18.0.4");
  EXPECT_EQ(emu->hosts()[1].host_name, "learner-2");
  std::set<std::string> present = Namespaces();
  for (const auto& h : emu->hosts()) EXPECT_TRUE(present.count(h.netns)) << h.netns;
  EXPECT_TRUE(present.count(emu->switch_netns()));
  // The caller's namespace is untouched: no veth or bridge appeared in it.
  EXPECT_EQ(RootInterfaces(), root_before);

  pid_t server = SpawnInHost(*emu, 1, EchoOnce);
  // The server may not listen yet: retry the client a few times rather than sleep.
  int client_rc = -1;
  for (int attempt = 0; attempt < 50 && client_rc != 0; ++attempt) {
    client_rc = WaitChild(SpawnInHost(*emu, 0, ConnectToHost1AndCheckName));
    if (client_rc == 2) break;  // wrong host name: retrying will not help
    if (client_rc != 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(client_rc, 0) << "2: wrong host name, 3: connect failed, 4/5: exchange failed";
  EXPECT_EQ(WaitChild(server), 0);

  // The switch namespace can serve too (where a runner would put the job's store).
  int listener = -1;
  ASSERT_TRUE(emu->RunInSwitch([&] { listener = Listen(emu->switch_address()); }).ok());
  ASSERT_GE(listener, 0);
  int client = -1;
  ASSERT_TRUE(emu->RunInHost(2, [&] { client = Connect(emu->switch_address()); }).ok());
  EXPECT_GE(client, 0);
  close(client);
  close(listener);
  EXPECT_EQ(emu->RunInHost(3, [] {}).code(), Code::kInvalidArgument);
  EXPECT_EQ(emu->EnterHost(7), EINVAL);
}

TEST_F(NetworkEmulatorTest, RateIsShapedInBothDirections) {
  auto emu = Create(Options(2, "50mbit"));
  ASSERT_TRUE(emu);
  // Both ends of each host's link carry the rate limit (upload and download).
  for (const auto& [ns, dev] : {std::pair{emu->hosts()[0].netns, std::string("eth0")},
                                std::pair{emu->switch_netns(), std::string("v0")}}) {
    std::string out;
    ASSERT_TRUE(
        RunChecked({"tc", "-n", ns, "class", "show", "dev", dev}, Deadline(seconds(30)), &out)
            .ok());
    EXPECT_NE(out.find("rate 50Mbit"), std::string::npos) << ns << " " << dev << ": " << out;
  }

  int listener = -1;
  ASSERT_TRUE(emu->RunInHost(1, [&] { listener = Listen(emu->hosts()[1].address); }).ok());
  ASSERT_GE(listener, 0);
  ASSERT_NO_FATAL_FAILURE(ExpectTransferRateLimited(*emu, listener, 50e6));
  close(listener);
}

TEST_F(NetworkEmulatorTest, DestroyRemovesEverything) {
  auto emu = Create(Options(2, "1gbit"));
  ASSERT_TRUE(emu);
  std::vector<std::string> names = {emu->switch_netns()};
  for (const auto& h : emu->hosts()) names.push_back(h.netns);
  std::string record = state_dir_ + "/cadre-" + Options(2, "1gbit").job_id + ".state";
  EXPECT_TRUE(fs::exists(record));
  emu.reset();
  std::set<std::string> present = Namespaces();
  for (const auto& n : names) EXPECT_FALSE(present.count(n)) << n << " left behind";
  EXPECT_FALSE(fs::exists(record));
}

TEST_F(NetworkEmulatorTest, LiveJobIsNeitherSweptNorDuplicated) {
  EmulatorOptions o = Options(1, "1gbit");
  auto emu = Create(o);
  ASSERT_TRUE(emu);
  ASSERT_TRUE(SweepStaleJobs(state_dir_, "cadre-", Deadline(seconds(30))).ok());
  EXPECT_TRUE(Namespaces().count(emu->hosts()[0].netns));
  std::unique_ptr<NetworkEmulator> second;
  Status s = NetworkEmulator::Create(o, &second);
  EXPECT_EQ(s.code(), Code::kAlreadyExists) << s.ToString();
  EXPECT_NE(s.message().find(std::to_string(getpid())), std::string::npos);
  EXPECT_TRUE(Namespaces().count(emu->hosts()[0].netns));  // the failed Create removed nothing
}

TEST_F(NetworkEmulatorTest, SweepRemovesLeftoversOfAKilledOwner) {
  EmulatorOptions o = Options(2, "1gbit");
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  pid_t owner = fork();
  if (owner == 0) {
    std::unique_ptr<NetworkEmulator> emu;
    char ok = NetworkEmulator::Create(o, &emu).ok() ? 'y' : 'n';
    (void)!write(ready[1], &ok, 1);
    pause();  // killed by the test
    _exit(0);
  }
  close(ready[1]);
  char ok = 0;
  ASSERT_EQ(read(ready[0], &ok, 1), 1);
  close(ready[0]);
  kill(owner, SIGKILL);
  WaitChild(owner);
  ASSERT_EQ(ok, 'y');
  const std::string host0 = "cadre-" + o.job_id + "-h0";
  ASSERT_TRUE(Namespaces().count(host0)) << "SIGKILL leaves the namespaces behind";

  std::vector<std::string> removed;
  Status s = SweepStaleJobs(state_dir_, "cadre-", Deadline(seconds(60)), &removed);
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(removed.size(), 3u);
  std::set<std::string> present = Namespaces();
  for (const auto& n : removed) EXPECT_FALSE(present.count(n)) << n;
  EXPECT_FALSE(present.count(host0));
  EXPECT_TRUE(fs::is_empty(state_dir_));
}

TEST_F(NetworkEmulatorTest, SweepRemovesProbesOfDeadProcessesOnly) {
  pid_t dead = fork();
  if (dead == 0) _exit(0);
  WaitChild(dead);
  const std::string stale = ProbeNamespaceName(dead);
  const std::string live = ProbeNamespaceName(getpid());
  ASSERT_TRUE(RunChecked({"ip", "netns", "add", stale}, Deadline(seconds(30))).ok());
  ASSERT_TRUE(RunChecked({"ip", "netns", "add", live}, Deadline(seconds(30))).ok());
  std::vector<std::string> removed;
  EXPECT_TRUE(SweepDeadProbes(Deadline(seconds(30)), &removed).ok());
  std::set<std::string> present = Namespaces();
  EXPECT_FALSE(present.count(stale));
  EXPECT_TRUE(present.count(live));
  // The live probe is never in the list. The stale one is, unless another test process's
  // CheckNetnsSupport (ctest runs tests in parallel) swept it first: then it is gone all the same.
  EXPECT_EQ(std::find(removed.begin(), removed.end(), live), removed.end());
  EXPECT_TRUE(DeleteNamespaces({live}, Deadline(seconds(30))).ok());
}

TEST_F(NetworkEmulatorTest, DelayAndLossAreEmulatedOrReportedNeverFaked) {
  EmulatorOptions o = Options(2, "1gbit,20ms");
  o.require_delay_loss = true;
  std::unique_ptr<NetworkEmulator> emu;
  Status s = NetworkEmulator::Create(o, &emu);
  if (!s.ok()) {
    // This kernel has no netem: a clear error, and nothing left behind.
    EXPECT_EQ(s.code(), Code::kUnavailable) << s.ToString();
    EXPECT_NE(s.message().find("netem"), std::string::npos);
    EXPECT_FALSE(Namespaces().count("cadre-" + o.job_id + "-sw"));
    o.require_delay_loss = false;
    emu = Create(o);
    ASSERT_TRUE(emu);
    EXPECT_FALSE(emu->delay_loss_emulated());
    return;
  }
  ASSERT_TRUE(emu->delay_loss_emulated());
  // With netem: a TCP handshake takes one round trip, at least 2 x 20 ms (a lower bound only).
  int listener = -1;
  ASSERT_TRUE(emu->RunInHost(1, [&] { listener = Listen(emu->hosts()[1].address); }).ok());
  auto start = Clock::now();
  int fd = -1;
  ASSERT_TRUE(emu->RunInHost(0, [&] { fd = Connect(emu->hosts()[1].address); }).ok());
  double rtt = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_GE(fd, 0);
  EXPECT_GE(rtt, 0.9 * 0.040);
  close(fd);
  close(listener);
}

TEST(NetworkEmulatorOptionsTest, BadOptionsAreRejectedBeforeAnythingIsCreated) {
  EmulatorOptions o;
  o.link = ParseLinkSpecOrThrow("1gbit");
  o.job_id = "bad/id";
  std::unique_ptr<NetworkEmulator> emu;
  Status s = NetworkEmulator::Create(o, &emu);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("job id 'bad/id'"), std::string::npos);
  o.job_id = "ok";
  o.hosts = 0;
  EXPECT_NE(NetworkEmulator::Create(o, &emu).message().find("hosts must be"), std::string::npos);
  o.hosts = 2;
  o.host_names = {"a"};
  EXPECT_NE(NetworkEmulator::Create(o, &emu).message().find("1 host names given for 2"),
            std::string::npos);
  o.host_names = {"a", "b_c"};
  EXPECT_NE(NetworkEmulator::Create(o, &emu).message().find("'b_c' of host 1"), std::string::npos);
  EXPECT_EQ(emu, nullptr);
}

TEST(BenchmarkAddressTest, StaysInTheBenchmarkingRange) {
  EXPECT_EQ(BenchmarkAddress(1), "198.18.0.1");
  EXPECT_EQ(BenchmarkAddress(256), "198.18.1.0");
  EXPECT_EQ(BenchmarkAddress(0x1ffff), "198.19.255.255");
  EXPECT_EQ(BenchmarkAddress(0x20000), "198.18.0.0");  // wraps inside the /15, never leaves it
}

}  // namespace
}  // namespace cadre::netem
