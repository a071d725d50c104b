// The user-space relay on real namespaces and TUN devices (forced with LinkEmulation::kRelay, so
// these run on kernels with netem too). Root only; skipped otherwise. Timing checks are lower
// bounds: a loaded machine may be slower than the emulated link, never faster.
#include <poll.h>

#include <gtest/gtest.h>

#include "cadre/netem/emulator_test_fixture.h"

namespace cadre::netem {
namespace {

using RelayNetworkTest = EmulatorTest;
using std::chrono::seconds;

EmulatorOptions Relay(EmulatorOptions o) {
  o.emulation = LinkEmulation::kRelay;
  return o;
}

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

TEST_F(RelayNetworkTest, RoundTripsTakeTwiceTheDelay) {
  std::set<std::string> root_before = RootInterfaces();
  EmulatorOptions o = Relay(Options(2, "1gbit,20ms"));
  o.require_delay_loss = true;
  auto emu = Create(o);
  ASSERT_TRUE(emu);
  EXPECT_TRUE(emu->relay_mode());
  EXPECT_TRUE(emu->delay_loss_emulated());
  EXPECT_EQ(RootInterfaces(), root_before);  // the TUN devices live in the namespaces
  int listener = -1;
  ASSERT_TRUE(emu->RunInHost(1, [&] { listener = Listen(emu->hosts()[1].address); }).ok());
  ASSERT_GE(listener, 0);
  auto start = Clock::now();
  int client = -1;
  ASSERT_TRUE(emu->RunInHost(0, [&] { client = Connect(emu->hosts()[1].address); }).ok());
  ASSERT_GE(client, 0);
  EXPECT_GE(SecondsSince(start), 0.9 * 0.040) << "the handshake is one round trip";
  int server = accept(listener, nullptr, nullptr);
  ASSERT_GE(server, 0);
  // One exchange after the connection is up: another round trip.
  start = Clock::now();
  char byte = 'x';
  ASSERT_TRUE(WriteAll(client, &byte, 1));
  ASSERT_EQ(read(server, &byte, 1), 1);
  ASSERT_TRUE(WriteAll(server, &byte, 1));
  ASSERT_EQ(read(client, &byte, 1), 1);
  EXPECT_GE(SecondsSince(start), 0.9 * 0.040);
  // The switch answers after half the round trip (only host 0's link is crossed).
  int sw = -1;
  ASSERT_TRUE(emu->RunInSwitch([&] { sw = Listen(emu->switch_address()); }).ok());
  start = Clock::now();
  int to_switch = -1;
  ASSERT_TRUE(emu->RunInHost(0, [&] { to_switch = Connect(emu->switch_address()); }).ok());
  EXPECT_GE(to_switch, 0);
  EXPECT_GE(SecondsSince(start), 0.9 * 0.020);
  for (int fd : {client, server, listener, sw, to_switch}) close(fd);
  EXPECT_TRUE(emu->health().ok());
  EXPECT_GT(emu->relay_stats().delivered, 0u);
}

TEST_F(RelayNetworkTest, UdpLosesRoughlyTheAskedFraction) {
  auto emu = Create(Relay(Options(2, "1gbit,0ms,20%")));
  ASSERT_TRUE(emu);
  int rx = -1, tx = -1;
  sockaddr_in to = Address(emu->hosts()[1].address);
  ASSERT_TRUE(emu->RunInHost(1,
                             [&] {
                               rx = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
                               int big = 8
                                         << 20;  // holds every datagram even if this thread is slow
                               setsockopt(rx, SOL_SOCKET, SO_RCVBUFFORCE, &big, sizeof(big));
                               bind(rx, reinterpret_cast<sockaddr*>(&to), sizeof(to));
                             })
                  .ok());
  ASSERT_TRUE(emu->RunInHost(0, [&] { tx = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0); }).ok());
  constexpr int kSent = 2000;
  char payload[64] = {};
  for (int i = 0; i < kSent; ++i) {
    ASSERT_EQ(sendto(tx, payload, sizeof(payload), 0, reinterpret_cast<sockaddr*>(&to), sizeof(to)),
              static_cast<ssize_t>(sizeof(payload)));
    // Paced, so that the sender's TUN queue (like a NIC's) does not overflow while the relay
    // thread waits for a core: only the emulated loss should drop datagrams.
    if (i % 20 == 19) usleep(1000);
  }
  int received = 0;
  pollfd p{rx, POLLIN, 0};
  while (poll(&p, 1, 500) == 1) {  // until half a second passes with nothing more
    if (recv(rx, payload, sizeof(payload), 0) > 0) ++received;
  }
  close(rx);
  close(tx);
  // Of the datagrams the relay handled, 20% lost: generous bounds (the seeded draw is fixed,
  // and the bounds are many standard deviations wide). A starved relay may leave a few in the
  // sender's queue to overflow; most must still have been relayed.
  const uint64_t lost = emu->relay_stats().lost;
  const double relayed = static_cast<double>(lost) + received;
  EXPECT_GT(relayed, 0.75 * kSent);
  EXPECT_GT(static_cast<double>(lost) / relayed, 0.15) << lost << " of " << relayed;
  EXPECT_LT(static_cast<double>(lost) / relayed, 0.25) << lost << " of " << relayed;
}

TEST_F(RelayNetworkTest, RateIsLimitedAndHostsCanBeCutOff) {
  auto emu = Create(Relay(Options(2, "50mbit,1ms")));
  ASSERT_TRUE(emu);
  int listener = -1;
  ASSERT_TRUE(emu->RunInHost(1, [&] { listener = Listen(emu->hosts()[1].address); }).ok());
  ASSERT_GE(listener, 0);
  ASSERT_NO_FATAL_FAILURE(ExpectTransferRateLimited(*emu, listener, 50e6));

  // Cut off, host 1 is unreachable (its SYNs are dropped); connected again, it answers.
  ASSERT_TRUE(emu->SetHostConnected(1, false).ok());
  int blocked = -1;
  ASSERT_TRUE(emu->RunInHost(0,
                             [&] {
                               blocked =
                                   socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
                               sockaddr_in a = Address(emu->hosts()[1].address);
                               connect(blocked, reinterpret_cast<sockaddr*>(&a), sizeof(a));
                             })
                  .ok());
  pollfd p{blocked, POLLOUT, 0};
  EXPECT_EQ(poll(&p, 1, 300), 0) << "host 1 was cut off";
  close(blocked);
  EXPECT_GT(emu->relay_stats().disconnected, 0u);
  ASSERT_TRUE(emu->SetHostConnected(1, true).ok());
  // Re-shaped live: host 1's new delay counts at once. Host 0 (1 ms) to host 1 (30 ms) is
  // 0.5 + 15 ms each way, so the handshake takes at least 31 ms.
  ASSERT_TRUE(emu->SetHostLink(1, ParseLinkSpecOrThrow("100mbit,30ms")).ok());
  EXPECT_EQ(emu->host_link(1).delay, std::chrono::microseconds(30'000));
  int again = -1;
  const auto start = Clock::now();
  ASSERT_TRUE(emu->RunInHost(0, [&] { again = Connect(emu->hosts()[1].address); }).ok());
  EXPECT_GE(again, 0);
  EXPECT_GE(SecondsSince(start), 0.9 * 0.031);
  close(again);
  close(listener);
}

TEST_F(RelayNetworkTest, DestroyRemovesEverything) {
  std::set<std::string> root_before = RootInterfaces();
  auto emu = Create(Relay(Options(3, "1gbit,1ms")));
  ASSERT_TRUE(emu);
  std::vector<std::string> names = {emu->switch_netns()};
  for (const auto& h : emu->hosts()) names.push_back(h.netns);
  ASSERT_TRUE(emu->Destroy().ok());
  std::set<std::string> present = Namespaces();
  for (const auto& n : names) EXPECT_FALSE(present.count(n)) << n << " left behind";
  EXPECT_EQ(RootInterfaces(), root_before);
  EXPECT_TRUE(std::filesystem::is_empty(state_dir_));
  EXPECT_TRUE(emu->health().ok());
}

}  // namespace
}  // namespace cadre::netem
