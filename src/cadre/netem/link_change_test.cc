// Changing a live emulated network: re-shaping a host's link and cutting a host off, the tools
// fault tests and what-if benchmarks use.
#include <fcntl.h>
#include <poll.h>

#include <gtest/gtest.h>

#include "cadre/netem/emulator_test_fixture.h"

namespace cadre::netem {
namespace {

using LinkChangeTest = EmulatorTest;
using std::chrono::seconds;

std::string ClassShow(const std::string& ns, const std::string& dev) {
  std::string out;
  EXPECT_TRUE(
      RunChecked({"tc", "-n", ns, "class", "show", "dev", dev}, Deadline(seconds(30)), &out).ok());
  return out;
}

// Whether a TCP connection from the calling thread's namespace to ip:kPort completes within
// `wait_ms`. Not connecting in time is the expected outcome for a host that was cut off.
bool ConnectsWithin(const std::string& ip, int wait_ms) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  sockaddr_in a = Address(ip);
  bool ok = connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  if (!ok && errno == EINPROGRESS) {
    pollfd p{fd, POLLOUT, 0};
    int err = 0;
    socklen_t len = sizeof(err);
    ok = poll(&p, 1, wait_ms) == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 &&
         err == 0;
  }
  close(fd);
  return ok;
}

TEST_F(LinkChangeTest, SetHostLinkReshapesBothDirections) {
  auto emu = Create(Options(2, "1gbit"));
  ASSERT_TRUE(emu);
  EXPECT_NE(ClassShow(emu->hosts()[1].netns, "eth0").find("rate 1Gbit"), std::string::npos);
  ASSERT_TRUE(emu->SetHostLink(1, ParseLinkSpecOrThrow("20mbit")).ok());
  EXPECT_EQ(emu->host_link(1).rate_bits_per_s, 20'000'000u);
  EXPECT_EQ(emu->host_link(0).rate_bits_per_s, 1'000'000'000u);
  EXPECT_NE(ClassShow(emu->hosts()[1].netns, "eth0").find("rate 20Mbit"), std::string::npos);
  EXPECT_NE(ClassShow(emu->switch_netns(), "v1").find("rate 20Mbit"), std::string::npos);
  EXPECT_NE(ClassShow(emu->switch_netns(), "v0").find("rate 1Gbit"), std::string::npos);
  EXPECT_EQ(emu->SetHostLink(2, ParseLinkSpecOrThrow("1gbit")).code(), Code::kInvalidArgument);
  EXPECT_EQ(emu->SetHostLink(0, LinkSpec{}).code(), Code::kInvalidArgument);
}

TEST_F(LinkChangeTest, DisconnectedHostIsUnreachableUntilReconnected) {
  auto emu = Create(Options(2, "1gbit"));
  ASSERT_TRUE(emu);
  int listener = -1;
  ASSERT_TRUE(emu->RunInHost(1, [&] { listener = Listen(emu->hosts()[1].address); }).ok());
  ASSERT_GE(listener, 0);
  const std::string target = emu->hosts()[1].address;
  bool connected = false;
  ASSERT_TRUE(emu->RunInHost(0, [&] { connected = ConnectsWithin(target, 30'000); }).ok());
  EXPECT_TRUE(connected);

  ASSERT_TRUE(emu->SetHostConnected(1, false).ok());
  ASSERT_TRUE(emu->RunInHost(0, [&] { connected = ConnectsWithin(target, 300); }).ok());
  EXPECT_FALSE(connected) << "host 1 was cut off";

  ASSERT_TRUE(emu->SetHostConnected(1, true).ok());
  ASSERT_TRUE(emu->RunInHost(0, [&] { connected = ConnectsWithin(target, 30'000); }).ok());
  EXPECT_TRUE(connected);
  close(listener);
  EXPECT_EQ(emu->SetHostConnected(-1, true).code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace cadre::netem
