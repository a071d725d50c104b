// MixedDevice with threads as ranks over loopback: five ranks on two pretend hosts (ranks 0-1 and
// 2-4), shared memory inside a host, TCP between them; rings of one page, so messages wrap and
// outgrow them. Every route delivers in order, streams, and fails naming the peer.
#include "cadre/transport/mixed/device.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <future>
#include <thread>
#include <vector>

#include "cadre/base/test_ranks.h"
#include "cadre/store/hash_store.h"

namespace cadre::transport::mixed {
namespace {

using namespace std::chrono_literals;

constexpr int kRanks = 5;

int HostOf(int rank) { return rank < 2 ? 0 : 1; }

ConnectOptions Options(int rank) {
  ConnectOptions o;
  o.tcp.rank = rank;
  o.tcp.size = kRanks;
  o.tcp.token = "device-test";
  o.tcp.bind_address = o.tcp.advertise_address = "127.0.0.1";
  for (int p = 0; p < kRanks; ++p) {
    o.tcp.names.push_back("rank " + std::to_string(p));
    if (HostOf(p) == HostOf(rank)) o.local_ranks.push_back(p);
  }
  o.channel_bytes = 4096;
  return o;
}

// Runs body(device) on kRanks threads (base/test_ranks.h), each with its own connected device.
void RunRanks(const std::function<void(MixedDevice&)>& body) {
  auto store = std::make_shared<store::HashStore>();
  cadre::testing::RunThreadsAsRanks(kRanks, [&](int rank) {
    std::unique_ptr<MixedDevice> d;
    ThrowIfError(MixedDevice::Connect(*store, Options(rank), Deadline(30s), &d));
    body(*d);
  });
}

uint8_t Byte(int from, int to, int message, size_t i) {
  return static_cast<uint8_t>(from * 31 + to * 7 + message * 3 + i * 13 + (i >> 8));
}

TEST(MixedDeviceTest, EveryPairExchangesMessagesInOrderOverItsRoute) {
  // Every rank sends every other three messages (empty, smaller and larger than a ring) and
  // receives theirs, all in one batch.
  const std::vector<size_t> sizes = {0, 1000, 20000};
  RunRanks([&](MixedDevice& d) {
    const int r = d.rank();
    std::vector<std::vector<uint8_t>> out, in;
    std::vector<Transfer> t;
    out.reserve(kRanks * sizes.size());
    in.reserve(kRanks * sizes.size());
    for (int p = 0; p < kRanks; ++p) {
      if (p == r) continue;
      EXPECT_EQ(d.on_host(p), HostOf(p) == HostOf(r)) << "rank " << r << " peer " << p;
      for (size_t m = 0; m < sizes.size(); ++m) {
        out.emplace_back(sizes[m]);
        for (size_t i = 0; i < sizes[m]; ++i) out.back()[i] = Byte(r, p, int(m), i);
        in.emplace_back(sizes[m], 0xee);
        t.push_back(Transfer::Send(p, out.back().data(), sizes[m]));
        t.push_back(Transfer::Recv(p, in.back().data(), sizes[m]));
      }
    }
    Status s = d.Run(t, Deadline(30s));
    ASSERT_TRUE(s.ok()) << "rank " << r << ": " << s.ToString();
    size_t k = 0;
    for (int p = 0; p < kRanks; ++p) {
      if (p == r) continue;
      for (size_t m = 0; m < sizes.size(); ++m, ++k) {
        for (size_t i = 0; i < sizes[m]; ++i) {
          ASSERT_EQ(in[k][i], Byte(p, r, int(m), i))
              << "rank " << r << " from " << p << " message " << m << " byte " << i;
        }
      }
    }
  });
}

TEST(MixedDeviceTest, RunStreamingForwardsEachPieceAcrossBothRoutes) {
  // A ring 0 -> 1 (shm) -> 2 (TCP) -> 3 (shm) -> 4 (shm) -> 0 (TCP): rank 0 sends pieces, each
  // rank adds its rank to each piece and forwards it the moment it arrives (a callback), and
  // rank 0 gets every piece back, the receives numbered in order.
  constexpr size_t kPieces = 16, kLen = 1500;  // pieces of 12000 bytes: three rings each
  RunRanks([&](MixedDevice& d) {
    const int r = d.rank(), next = (r + 1) % kRanks, prev = (r + kRanks - 1) % kRanks;
    std::vector<std::vector<int64_t>> in(kPieces, std::vector<int64_t>(kLen, -1)),
        out(kPieces, std::vector<int64_t>(kLen));
    std::vector<Transfer> initial;
    std::vector<size_t> numbers;
    for (size_t i = 0; i < kPieces; ++i) {
      initial.push_back(Transfer::Recv(prev, in[i].data(), kLen * 8));
      if (r != 0) continue;
      for (size_t j = 0; j < kLen; ++j) out[i][j] = static_cast<int64_t>(i * 10000 + j);
      initial.push_back(Transfer::Send(next, out[i].data(), kLen * 8));
    }
    auto forward = [&](size_t k, std::vector<Transfer>* more) {
      numbers.push_back(k);
      if (r == 0) return Status::Ok();
      for (size_t j = 0; j < kLen; ++j) out[k][j] = in[k][j] + r;
      more->push_back(Transfer::Send(next, out[k].data(), kLen * 8));
      return Status::Ok();
    };
    Status s = d.RunStreaming(initial, Deadline(30s), forward);
    ASSERT_TRUE(s.ok()) << "rank " << r << ": " << s.ToString();
    std::vector<size_t> expect;
    for (size_t k = 0; k < kPieces; ++k) expect.push_back(k);
    EXPECT_EQ(numbers, expect) << "rank " << r;
    if (r == 0) {
      for (size_t i = 0; i < kPieces; ++i) {
        for (size_t j = 0; j < kLen; ++j) {
          ASSERT_EQ(in[i][j], static_cast<int64_t>(i * 10000 + j) + 1 + 2 + 3 + 4)
              << "piece " << i << " element " << j;
        }
      }
    }
  });
}

TEST(MixedDeviceTest, ASizeOrCollectiveOtherThanTheReceiversFailsNamingTheSender) {
  // Rank 0 sends 8 bytes to rank 1 (same host) and to rank 2 (the other host), who expect 16;
  // rank 3 receives rank 4's message of another collective.
  RunRanks([&](MixedDevice& d) {
    const int r = d.rank();
    uint8_t buf[16] = {};
    d.BeginCollective(r == 4 ? 2 : 1, r == 4 ? "allreduce(count 2)" : "allreduce(count 1)");
    if (r == 0) {
      Transfer t[2] = {Transfer::Send(1, buf, 8), Transfer::Send(2, buf, 8)};
      EXPECT_TRUE(d.Run(t, Deadline(30s)).ok());
      return;
    }
    Transfer t[1] = {r == 4 ? Transfer::Send(3, buf, 16) : Transfer::Recv(r == 3 ? 4 : 0, buf, 16)};
    Status s = d.Run(t, Deadline(30s));
    if (r == 4) {
      EXPECT_TRUE(s.ok()) << s.ToString();
      return;
    }
    EXPECT_EQ(s.code(), Code::kMismatch) << "rank " << r << ": " << s.ToString();
    const std::string sender = r == 3 ? "rank 4" : "rank 0";
    EXPECT_NE(s.message().find(sender + " sent"), std::string::npos) << s.message();
    if (r == 3) {
      EXPECT_NE(s.message().find("allreduce(count 1)"), std::string::npos) << s.message();
    }
    // A broken device refuses further work at once.
    EXPECT_EQ(d.Run(t, Deadline(30s)).code(), Code::kAborted);
  });
}

TEST(MixedDeviceTest, ASameHostPeerThatClosesFailsItsWaitersNamingIt) {
  // Rank 1 leaves (its device is destroyed, as when its thread or process ends) while rank 0
  // waits for a message from it and rank 4 waits for rank 3, which shuts down after a first
  // message: both waiters fail with kIo naming their peer, long before the deadline.
  auto store = std::make_shared<store::HashStore>();
  cadre::testing::RunThreadsAsRanks(kRanks, [&](int r) {
    std::unique_ptr<MixedDevice> d;
    ThrowIfError(MixedDevice::Connect(*store, Options(r), Deadline(30s), &d));
    std::vector<uint8_t> buf(100000);
    if (r == 1 || r == 2) {
      std::this_thread::sleep_for(50ms);  // the waiters are asleep by now
      return;
    }
    if (r == 3) {
      Transfer t[1] = {Transfer::Send(4, buf.data(), 10)};
      ASSERT_TRUE(d->Run(t, Deadline(30s)).ok());
      std::this_thread::sleep_for(50ms);
      d->Shutdown();
      return;
    }
    const int peer = r == 0 ? 1 : 3;
    Transfer first[1] = {Transfer::Recv(peer, buf.data(), 10)};
    if (r == 4) {
      ASSERT_TRUE(d->Run(first, Deadline(30s)).ok());
    }
    Transfer t[1] = {Transfer::Recv(peer, buf.data(), buf.size())};
    Status s = d->Run(t, Deadline(60s));
    EXPECT_EQ(s.code(), Code::kIo) << "rank " << r << ": " << s.ToString();
    EXPECT_NE(s.message().find("rank " + std::to_string(peer) + " closed its end"),
              std::string::npos)
        << s.message();
  });
}

TEST(MixedDeviceTest, ATimeoutNamesThePeersStillOwedBytes) {
  // The others stay (a peer that left would be named as gone instead) until rank 0 is done.
  std::promise<void> done;
  std::shared_future<void> finished = done.get_future().share();
  RunRanks([&](MixedDevice& d) {
    const int r = d.rank();
    if (r != 0) {
      finished.wait();
      return;
    }
    uint8_t buf[32];
    Transfer t[2] = {Transfer::Recv(1, buf, 16), Transfer::Recv(2, buf + 16, 16)};
    Status s = d.Run(t, Deadline(300ms));
    EXPECT_EQ(s.code(), Code::kTimeout) << s.ToString();
    EXPECT_NE(s.message().find("rank 1 (32 bytes to receive, 0 to send)"), std::string::npos)
        << s.message();
    EXPECT_NE(s.message().find("rank 2 ("), std::string::npos) << s.message();
    done.set_value();
  });
}

TEST(MixedDeviceTest, HostRanksWithoutThisRankAreRefused) {
  store::HashStore store;
  ConnectOptions o = Options(0);
  o.local_ranks = {1, 2};
  std::unique_ptr<MixedDevice> d;
  Status s = MixedDevice::Connect(store, o, Deadline(1s), &d);
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.ToString();
}

}  // namespace
}  // namespace cadre::transport::mixed
