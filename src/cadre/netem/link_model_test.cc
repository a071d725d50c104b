// The relay's timing/loss model with a made-up clock, and the relay itself over socket pairs
// (SOCK_SEQPACKET keeps packet boundaries as a TUN does), so neither needs root.
#include "cadre/netem/link_model.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <vector>

#include <gtest/gtest.h>

#include "cadre/netem/link_relay.h"

namespace cadre::netem {
namespace {

constexpr int64_t kMs = 1'000'000;

// An IPv4 packet of `len` bytes to 198.18.x.y (`dst_offset` from 198.18.0.0); TCP with a 32-byte
// header (timestamps) unless `udp`.
std::vector<uint8_t> Ipv4(size_t len, uint32_t dst_offset, bool udp = false) {
  std::vector<uint8_t> p(len, 0);
  p[0] = 0x45;  // version 4, 20-byte header
  p[2] = static_cast<uint8_t>(len >> 8);
  p[3] = static_cast<uint8_t>(len);
  p[9] = udp ? 17 : 6;
  p[16] = 198;
  p[17] = static_cast<uint8_t>(18 + (dst_offset >> 16));
  p[18] = static_cast<uint8_t>(dst_offset >> 8);
  p[19] = static_cast<uint8_t>(dst_offset);
  if (!udp && len >= 40) p[20 + 12] = 8 << 4;  // data offset: 8 words
  return p;
}

TEST(WireBytesTest, ChargesTheFramesOfARealLink) {
  // 65000 bytes of TCP = 64948 payload bytes = 45 segments of at most 1448, each with its
  // 52 bytes of IP+TCP headers and 14 of Ethernet header: what htb counts on the kernel path.
  auto big = Ipv4(65000, 3);
  EXPECT_EQ(WireBytes(big.data(), big.size()), 64948u + 45u * 66u);
  auto ack = Ipv4(52, 3);
  EXPECT_EQ(WireBytes(ack.data(), ack.size()), 66u);
  auto full = Ipv4(1500, 3);
  EXPECT_EQ(WireBytes(full.data(), full.size()), 1514u);
  // UDP is cut by IP fragmentation: only the 20-byte IP header repeats (1480 bytes per frame).
  auto udp = Ipv4(2980, 3, /*udp=*/true);
  EXPECT_EQ(WireBytes(udp.data(), udp.size()), 2960u + 2u * 34u);
  std::vector<uint8_t> ipv6(80, 0);
  ipv6[0] = 0x60;
  EXPECT_EQ(WireBytes(ipv6.data(), ipv6.size()), 94u);
  EXPECT_EQ(WireBytes(ipv6.data(), 3), 17u);  // too short to parse: charged as it is
}

TEST(RouteEndpointTest, OnlyTheEmulatedAddressesAreRouted) {
  auto to = [](uint32_t offset) {
    auto p = Ipv4(40, offset);
    return RouteEndpoint(p.data(), p.size(), 3);
  };
  EXPECT_EQ(to(1), 0);   // the switch
  EXPECT_EQ(to(2), 1);   // host 0
  EXPECT_EQ(to(4), 3);   // host 2
  EXPECT_EQ(to(5), -1);  // no host 3
  EXPECT_EQ(to(0), -1);
  EXPECT_EQ(to(0x1ffff), -1);  // the /15's broadcast address
  auto outside = Ipv4(40, 2);
  outside[16] = 10;
  EXPECT_EQ(RouteEndpoint(outside.data(), outside.size(), 3), -1);
  EXPECT_EQ(RouteEndpoint(outside.data(), 19, 3), -1);
}

TEST(LinkModelTest, UplinkSerializesAtTheRateThenAddsHalfTheDelay) {
  LinkModel model(2, ParseLinkSpecOrThrow("1mbit,4ms"), 1);
  int64_t t1 = 0, t2 = 0;
  // 1250 bytes take 10 ms at 1 Mbit/s; the second packet waits for the first.
  ASSERT_EQ(model.Send(1, 2, 1250, 0, &t1), Fate::kPassed);
  ASSERT_EQ(model.Send(1, 2, 1250, 0, &t2), Fate::kPassed);
  EXPECT_EQ(t1, 10 * kMs + 2 * kMs);
  EXPECT_EQ(t2, 20 * kMs + 2 * kMs);
  int64_t d1 = 0, d2 = 0;
  ASSERT_EQ(model.Forward(1, 2, 1250, t1, &d1), Fate::kPassed);
  ASSERT_EQ(model.Forward(1, 2, 1250, t2, &d2), Fate::kPassed);
  // Downlink: another 10 ms of serialization and the other half of the delay.
  EXPECT_EQ(d1, t1 + 10 * kMs + 2 * kMs);
  EXPECT_EQ(d2, t2 + 10 * kMs + 2 * kMs);
  // An idle link starts from `now`, not from where it last stopped.
  int64_t t3 = 0;
  ASSERT_EQ(model.Send(1, 2, 1250, 100 * kMs, &t3), Fate::kPassed);
  EXPECT_EQ(t3, 112 * kMs);
}

TEST(LinkModelTest, TwoSendersShareTheReceiversDownlink) {
  LinkModel model(3, ParseLinkSpecOrThrow("1mbit"), 1);
  int64_t a = 0, b = 0, da = 0, db = 0;
  ASSERT_EQ(model.Send(1, 3, 1250, 0, &a), Fate::kPassed);
  ASSERT_EQ(model.Send(2, 3, 1250, 0, &b), Fate::kPassed);
  EXPECT_EQ(a, b);  // separate uplinks: both reach the switch after 10 ms
  ASSERT_EQ(model.Forward(1, 3, 1250, a, &da), Fate::kPassed);
  ASSERT_EQ(model.Forward(2, 3, 1250, b, &db), Fate::kPassed);
  EXPECT_EQ(da, 20 * kMs);
  EXPECT_EQ(db, 30 * kMs);  // one downlink: the second waits for the first
}

TEST(LinkModelTest, TheSwitchForwardsLargePacketsFrameByFrame) {
  // 1 Gbit/s: a byte is 8 ns. A packet of 10 full frames (15140 bytes charged, 121.12 us) is on
  // the downlink once its first frame (1514 bytes, 12.112 us) has reached the switch: it is
  // delivered one frame after it has wholly crossed the uplink, plus the delay.
  LinkModel model(2, ParseLinkSpecOrThrow("1gbit,2ms"), 1);
  constexpr int64_t kFrame = 12'112, kPacket = 121'120;
  int64_t at = 0, deliver = 0;
  ASSERT_EQ(model.Send(1, 2, 15140, 0, &at), Fate::kPassed);
  EXPECT_EQ(at, kPacket + 1 * kMs);
  ASSERT_EQ(model.Forward(1, 2, 15140, at, &deliver), Fate::kPassed);
  EXPECT_EQ(deliver, kPacket + kFrame + 2 * kMs);
  // A second packet right behind it queues behind the first on both links.
  ASSERT_EQ(model.Send(1, 2, 15140, 0, &at), Fate::kPassed);
  ASSERT_EQ(model.Forward(1, 2, 15140, at, &deliver), Fate::kPassed);
  EXPECT_EQ(deliver, 2 * kPacket + kFrame + 2 * kMs);

  // A downlink ten times slower: the packet leaves it at its own rate, from its first frame.
  LinkModel slow(2, ParseLinkSpecOrThrow("1gbit"), 1);
  slow.SetLink(1, ParseLinkSpecOrThrow("100mbit"));  // endpoint 2
  ASSERT_EQ(slow.Send(1, 2, 15140, 0, &at), Fate::kPassed);
  ASSERT_EQ(slow.Forward(1, 2, 15140, at, &deliver), Fate::kPassed);
  EXPECT_EQ(deliver, kFrame + 10 * kPacket);
}

TEST(LinkModelTest, TheSwitchIsUnshapedAndFullBuffersDropTheTail) {
  LinkModel model(1, ParseLinkSpecOrThrow("1mbit"), 1);
  int64_t t = -1;
  ASSERT_EQ(model.Send(0, 1, 1250, 5, &t), Fate::kPassed);  // from the switch: no uplink
  EXPECT_EQ(t, 5);
  // 4 MiB of buffer holds 3355 packets of 1250 bytes; the uplink drops the rest.
  int passed = 0, dropped = 0;
  for (int i = 0; i < 4000; ++i) {
    Fate f = model.Send(1, 0, 1250, 0, &t);
    (f == Fate::kPassed ? passed : dropped) += 1;
    if (f != Fate::kPassed) {
      EXPECT_EQ(f, Fate::kQueueFull);
    }
  }
  EXPECT_EQ(passed, static_cast<int>(BufferBytes(ParseLinkSpecOrThrow("1mbit")) / 1250));
  EXPECT_EQ(passed, 3355);
  EXPECT_EQ(dropped, 4000 - passed);
  // Once the queue has drained, packets pass again.
  EXPECT_EQ(model.Send(1, 0, 1250, 10'000 * kMs, &t), Fate::kPassed);
}

TEST(LinkModelTest, BufferIsTwoRoundTripBdpsAndAtLeastFourMebibytes) {
  EXPECT_EQ(BufferBytes(ParseLinkSpecOrThrow("1gbit,1ms")), 4u << 20);
  EXPECT_EQ(BufferBytes(ParseLinkSpecOrThrow("1gbit,20ms")), 10'000'000u);
}

TEST(LinkModelTest, LossMatchesTheSpecAndFollowsTheSeed) {
  auto run = [](uint64_t seed, std::vector<bool>* fates) {
    LinkModel model(2, ParseLinkSpecOrThrow("10gbit,0ms,10%"), seed);
    int delivered = 0;
    int64_t now = 0;
    for (int i = 0; i < 20000; ++i, now += kMs) {
      int64_t at = 0, deliver = 0;
      bool ok = model.Send(1, 2, 100, now, &at) == Fate::kPassed &&
                model.Forward(1, 2, 100, at, &deliver) == Fate::kPassed;
      fates->push_back(ok);
      delivered += ok;
    }
    return delivered;
  };
  std::vector<bool> a, b, c;
  int delivered = run(7, &a);
  EXPECT_GT(delivered, 17400);  // 18000 expected; the bounds are over 6 standard deviations
  EXPECT_LT(delivered, 18600);
  run(7, &b);
  run(8, &c);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
}

TEST(LinkModelTest, DisconnectedHostNeitherSendsNorReceives) {
  LinkModel model(2, ParseLinkSpecOrThrow("1gbit"), 1);
  int64_t t = 0;
  // SetConnected/SetLink take host indices; Send/Forward endpoints (host h is endpoint 1 + h).
  model.SetConnected(0, false);
  EXPECT_EQ(model.Send(2, 0, 100, 0, &t), Fate::kPassed);
  EXPECT_EQ(model.Send(1, 0, 100, 0, &t), Fate::kDisconnected);
  EXPECT_EQ(model.Send(2, 1, 100, 0, &t), Fate::kDisconnected);
  EXPECT_EQ(model.Forward(2, 1, 100, 0, &t), Fate::kDisconnected);
  model.SetConnected(0, true);
  EXPECT_EQ(model.Send(1, 2, 100, 0, &t), Fate::kPassed);
  model.SetLink(0, ParseLinkSpecOrThrow("1mbit,0ms,99%"));
  int lost = 0;
  for (int i = 0; i < 100; ++i) lost += model.Send(1, 0, 1, 0, &t) == Fate::kLost;
  EXPECT_GT(lost, 50);                                   // 90% per hop
  EXPECT_EQ(model.Send(2, 0, 1, 0, &t), Fate::kPassed);  // host 1 keeps its link
}

// The relay over SOCK_SEQPACKET pairs standing in for TUN devices: ends_[e] is what endpoint e's
// network stack would hold.
class LinkRelayTest : public ::testing::Test {
 protected:
  void Start(int endpoints, const std::string& link) {
    std::vector<int> relay_fds;
    for (int e = 0; e < endpoints; ++e) {
      int sv[2];
      ASSERT_EQ(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv), 0);
      relay_fds.push_back(sv[0]);
      ends_.push_back(sv[1]);
    }
    ASSERT_TRUE(
        LinkRelay::Start(relay_fds, ParseLinkSpecOrThrow(link), 1, /*packet_prefix=*/0, &relay_)
            .ok());
  }
  void TearDown() override {
    relay_.reset();
    for (int fd : ends_) close(fd);
  }
  // One packet read at endpoint e within 30 s, or an empty vector.
  std::vector<uint8_t> Receive(int e) {
    pollfd p{ends_[e], POLLIN, 0};
    std::vector<uint8_t> buf(70000);
    if (poll(&p, 1, 30'000) != 1) return {};
    ssize_t n = read(ends_[e], buf.data(), buf.size());
    buf.resize(n > 0 ? static_cast<size_t>(n) : 0);
    return buf;
  }
  std::unique_ptr<LinkRelay> relay_;
  std::vector<int> ends_;
};

TEST_F(LinkRelayTest, DeliversByAddressAfterTheDelay) {
  Start(3, "1gbit,30ms");       // the switch and hosts 0 and 1
  auto packet = Ipv4(1000, 3);  // to host 1 (198.18.0.3)
  packet[100] = 42;
  auto start = std::chrono::steady_clock::now();
  ASSERT_EQ(write(ends_[1], packet.data(), packet.size()), 1000);
  std::vector<uint8_t> got = Receive(2);
  double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(got, packet);
  EXPECT_GE(elapsed, 0.030);  // a lower bound only
  // To the switch: half the delay (only the sender's link is crossed).
  auto to_switch = Ipv4(60, 1);
  ASSERT_EQ(write(ends_[2], to_switch.data(), to_switch.size()), 60);
  EXPECT_EQ(Receive(0), to_switch);
  // Unroutable packets are counted, not delivered.
  auto stray = Ipv4(60, 9);
  ASSERT_EQ(write(ends_[1], stray.data(), stray.size()), 60);
  ASSERT_EQ(write(ends_[1], packet.data(), packet.size()), 1000);
  EXPECT_EQ(Receive(2), packet);  // in order, so the stray one was handled before
  // The relay counts a delivery after its write returns, which may be after the read above.
  RelayStats s = relay_->stats();
  for (int i = 0; i < 3000 && s.delivered < 3; ++i) {
    usleep(10'000);
    s = relay_->stats();
  }
  EXPECT_EQ(s.delivered, 3u);
  EXPECT_EQ(s.unroutable, 1u);
  EXPECT_TRUE(relay_->health().ok());
}

TEST_F(LinkRelayTest, ADeadEndpointStopsTheRelayWithAnError) {
  Start(2, "1gbit");
  close(ends_[1]);  // the "device" went away: the relay reads end-of-file
  ends_[1] = -1;
  Status health;
  for (int i = 0; i < 3000 && health.ok(); ++i) {
    usleep(10'000);
    health = relay_->health();
  }
  EXPECT_EQ(health.code(), Code::kIo);
  EXPECT_NE(health.message().find("endpoint 1"), std::string::npos) << health.message();
}

}  // namespace
}  // namespace cadre::netem
