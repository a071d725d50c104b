// TcpDevice::RunStreaming with threads as ranks over loopback: a receive's completion starts the
// transfers that forward it, in order, with the receives numbered as documented.
#include "cadre/transport/tcp/device.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "cadre/base/test_ranks.h"
#include "cadre/net/socket.h"
#include "cadre/store/hash_store.h"

namespace cadre::transport::tcp {
namespace {

using namespace std::chrono_literals;

constexpr int kRanks = 3;
constexpr size_t kPieces = 8;

// Runs body(device) on kRanks threads (base/test_ranks.h), each with its own connected TcpDevice.
void RunRanks(const std::function<void(TcpDevice&)>& body) {
  auto store = std::make_shared<store::HashStore>();
  cadre::testing::RunThreadsAsRanks(kRanks, [&](int rank) {
    ConnectOptions o;
    o.rank = rank;
    o.size = kRanks;
    o.token = "device-test";
    o.bind_address = "127.0.0.1";
    for (int p = 0; p < kRanks; ++p) o.names.push_back("rank " + std::to_string(p));
    std::unique_ptr<TcpDevice> d;
    ThrowIfError(TcpDevice::Connect(*store, o, Deadline(30s), &d));
    body(*d);
  });
}

TEST(TcpDeviceTest, RunStreamingForwardsEachPieceAsItArrives) {
  // Rank 0 sends kPieces values to rank 1, which forwards each (doubled) to rank 2 the moment it
  // arrives, which returns each (plus one) to rank 0: every forward is started by a callback.
  RunRanks([](TcpDevice& d) {
    const int r = d.rank();
    std::vector<int64_t> in(kPieces, -1), out(kPieces);
    std::vector<Transfer> initial;
    std::vector<size_t> numbers;
    if (r == 0) {
      for (size_t i = 0; i < kPieces; ++i) out[i] = static_cast<int64_t>(100 + i);
      for (size_t i = 0; i < kPieces; ++i) initial.push_back(Transfer::Send(1, &out[i], 8));
      for (size_t i = 0; i < kPieces; ++i) initial.push_back(Transfer::Recv(2, &in[i], 8));
    } else {
      for (size_t i = 0; i < kPieces; ++i) initial.push_back(Transfer::Recv(r - 1, &in[i], 8));
    }
    auto forward = [&](size_t k, std::vector<Transfer>* more) {
      numbers.push_back(k);
      if (r == 0) return Status::Ok();
      out[k] = r == 1 ? 2 * in[k] : in[k] + 1;
      more->push_back(Transfer::Send(r == 1 ? 2 : 0, &out[k], 8));
      return Status::Ok();
    };
    ASSERT_TRUE(d.RunStreaming(initial, Deadline(30s), forward).ok());
    std::vector<size_t> expect_numbers;
    for (size_t k = 0; k < kPieces; ++k) expect_numbers.push_back(k);
    EXPECT_EQ(numbers, expect_numbers) << "rank " << r;  // in order, each once
    if (r == 0) {
      for (size_t i = 0; i < kPieces; ++i) EXPECT_EQ(in[i], 2 * (100 + int64_t(i)) + 1);
    }
  });
}

TEST(TcpDeviceTest, ReceivesAddedByTheCallbackAreNumberedAfterTheGivenOnes) {
  // Rank 0 sends three messages to rank 1; rank 1 posts one receive, and each completion posts
  // the next: they are receives 0, 1, 2, in order.
  RunRanks([](TcpDevice& d) {
    const int r = d.rank();
    int32_t msgs[3] = {7, 8, 9}, got[3] = {0, 0, 0};
    std::vector<size_t> numbers;
    if (r == 0) {
      Transfer t[3] = {Transfer::Send(1, &msgs[0], 4), Transfer::Send(1, &msgs[1], 4),
                       Transfer::Send(1, &msgs[2], 4)};
      ASSERT_TRUE(d.RunStreaming(t, Deadline(30s), nullptr).ok());
    } else if (r == 1) {
      Transfer first[1] = {Transfer::Recv(0, &got[0], 4)};
      auto next = [&](size_t k, std::vector<Transfer>* more) {
        numbers.push_back(k);
        if (k + 1 < 3) more->push_back(Transfer::Recv(0, &got[k + 1], 4));
        return Status::Ok();
      };
      ASSERT_TRUE(d.RunStreaming(first, Deadline(30s), next).ok());
      EXPECT_EQ(numbers, (std::vector<size_t>{0, 1, 2}));
      EXPECT_EQ(got[0] * 100 + got[1] * 10 + got[2], 789);
    }
  });
}

TEST(TcpDeviceTest, AnInvalidPeerFromTheCallbackBreaksTheDevice) {
  RunRanks([](TcpDevice& d) {
    const int r = d.rank();
    int32_t v = 1;
    if (r == 0) {
      Transfer t[1] = {Transfer::Send(1, &v, 4)};
      ASSERT_TRUE(d.Run(t, Deadline(30s)).ok());
    } else if (r == 1) {
      Transfer t[1] = {Transfer::Recv(0, &v, 4)};
      auto bad = [&](size_t, std::vector<Transfer>* more) {
        more->push_back(Transfer::Send(kRanks, &v, 4));
        return Status::Ok();
      };
      Status s = d.RunStreaming(t, Deadline(30s), bad);
      EXPECT_EQ(s.code(), Code::kInternal) << s.ToString();
      EXPECT_FALSE(d.Run(t, Deadline(1s)).ok());  // broken from now on
    }
  });
}

TEST(TcpDeviceTest, ACallbackErrorEndsTheRunAndBreaksTheDevice) {
  // Rank 1 gives up after the first of two messages: its run fails with the callback's error,
  // although the second receive is still queued, and the device stays broken.
  RunRanks([](TcpDevice& d) {
    const int r = d.rank();
    int32_t v[2] = {1, 2};
    if (r == 0) {
      Transfer t[2] = {Transfer::Send(1, &v[0], 4), Transfer::Send(1, &v[1], 4)};
      ASSERT_TRUE(d.Run(t, Deadline(30s)).ok());
    } else if (r == 1) {
      Transfer t[2] = {Transfer::Recv(0, &v[0], 4), Transfer::Recv(0, &v[1], 4)};
      auto give_up = [](size_t, std::vector<Transfer>*) {
        return AbortedError("producer stopped");
      };
      Status s = d.RunStreaming(t, Deadline(30s), give_up);
      EXPECT_EQ(s.code(), Code::kAborted) << s.ToString();
      EXPECT_NE(s.message().find("producer stopped"), std::string::npos) << s.ToString();
      EXPECT_FALSE(d.Run(t, Deadline(1s)).ok());
    }
  });
}

TEST(TcpDeviceTest, APeerThatFailsSaysWhyBeforeItsConnectionsClose) {
  // Rank 2 fails (its owner's reason: a mismatch it found) while ranks 0 and 1 wait for it: they
  // fail with its code and its words, not only "connection closed".
  RunRanks([](TcpDevice& d) {
    int32_t v = 0;
    if (d.rank() == 2) {
      d.Shutdown(MismatchError("rank 2: another collective"), /*explained=*/true);
      return;
    }
    Transfer t[1] = {Transfer::Recv(2, &v, 4)};
    Status s = d.Run(t, Deadline(30s));
    EXPECT_EQ(s.code(), Code::kMismatch) << s.ToString();
    EXPECT_NE(s.message().find("rank 2 failed: rank 2: another collective"), std::string::npos)
        << s.ToString();
    EXPECT_TRUE(d.failure_explained());
  });
}

TEST(TcpDeviceTest, AConnectionThatEndsWithoutANoticeNamesThePeerAsGone) {
  // Rank 2 closes with nothing to say (as a process that died: the kernel closes its sockets).
  // Rank 0 only sends to it and rank 1 waits for rank 0, which fails and tells rank 1 why: both
  // name rank 2.
  RunRanks([](TcpDevice& d) {
    std::vector<int32_t> v(1 << 22);  // more than the socket buffers take
    if (d.rank() == 2) {
      d.Shutdown();
      return;
    }
    Transfer t[1] = {d.rank() == 0 ? Transfer::Send(2, v.data(), v.size() * 4)
                                   : Transfer::Recv(0, v.data(), 4)};
    Status s = d.Run(t, Deadline(30s));
    EXPECT_EQ(s.code(), Code::kIo) << s.ToString();
    EXPECT_NE(s.message().find("rank 2 closed its connection without a failure notice: its "
                               "process exited or died"),
              std::string::npos)
        << s.ToString();
    if (d.rank() == 0) {
      EXPECT_TRUE(d.failure_explained());
      d.Shutdown(s, true);
    } else {
      EXPECT_NE(s.message().find("rank 0 failed: "), std::string::npos) << s.ToString();
    }
  });
}

// Rank `rank` of two, connecting with `token` through `store`.
Status ConnectRank(store::Store& store, int rank, const std::string& token,
                   std::unique_ptr<TcpDevice>* out) {
  ConnectOptions o;
  o.rank = rank;
  o.size = 2;
  o.token = token;
  o.bind_address = "127.0.0.1";
  o.names = {"rank 0", "rank 1"};
  // Longer than the rendezvous deadline: a genuine peer queued behind a stalled connection
  // would miss the deadline instead of merely arriving late.
  o.handshake_timeout = 60s;
  return TcpDevice::Connect(store, o, Deadline(30s), out);
}

TEST(TcpDeviceTest, IdleAndGarbageConnectionsToARankDoNotKeepItsPeerOut) {
  // A port scanner (or any stray process) connects to rank 0's port before rank 1 does: one
  // connection says nothing, one sends garbage. Rank 1 must still get in, well before either
  // the stalled connection's handshake timeout or the rendezvous deadline passes.
  store::HashStore store;
  std::unique_ptr<TcpDevice> d0, d1;
  Status s0, s1;
  std::thread rank0([&] { s0 = ConnectRank(store, 0, "device-test", &d0); });
  net::HostPort addr;
  store.wait({"tcp-addr/0"}, 30s);
  ASSERT_TRUE(net::ParseHostPort(store.get_string("tcp-addr/0"), "tcp-addr/0", &addr).ok());
  net::Socket idle, garbage;
  ASSERT_TRUE(net::Socket::Connect(addr.host, addr.port, Deadline(10s), &idle).ok());
  ASSERT_TRUE(net::Socket::Connect(addr.host, addr.port, Deadline(10s), &garbage).ok());
  const char tls_hello[] = "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03";
  ASSERT_TRUE(garbage.SendAll(tls_hello, sizeof tls_hello - 1, Deadline(5s)).ok());
  s1 = ConnectRank(store, 1, "device-test", &d1);
  rank0.join();
  ASSERT_TRUE(s1.ok()) << s1.ToString();
  ASSERT_TRUE(s0.ok()) << s0.ToString();
  int32_t v = 41, got = 0;
  std::thread sender([&] {
    Transfer t[1] = {Transfer::Send(1, &v, 4)};
    EXPECT_TRUE(d0->Run(t, Deadline(30s)).ok());
  });
  Transfer t[1] = {Transfer::Recv(0, &got, 4)};
  EXPECT_TRUE(d1->Run(t, Deadline(30s)).ok());
  sender.join();
  EXPECT_EQ(got, 41);
}

TEST(TcpDeviceTest, AnEmptyTokenIsRefused) {
  store::HashStore store;
  std::unique_ptr<TcpDevice> d;
  Status s = ConnectRank(store, 1, "", &d);
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("no job token"), std::string::npos) << s.ToString();
  EXPECT_FALSE(store.check({"tcp-addr/1"}));  // refused before it listened or published
}

}  // namespace
}  // namespace cadre::transport::tcp
