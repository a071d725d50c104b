// Acceptor over real loopback sockets, with the connections a port scanner or a stray process
// makes: silent ones, garbage, a handshake abandoned halfway. None of them may delay a genuine
// peer that arrives after them.
#include "cadre/transport/tcp/acceptor.h"

#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "cadre/net/frame.h"
#include "cadre/net/handshake.h"

namespace cadre::transport::tcp {
namespace {

using namespace std::chrono_literals;

constexpr char kToken[] = "acceptor-test";

struct Listening {
  uint16_t port = 0;
  std::unique_ptr<Acceptor> acceptor;
  explicit Listening(AcceptorOptions o = {}) {
    net::Socket l;
    EXPECT_TRUE(net::Socket::Listen("127.0.0.1", 0, 128, &l).ok());
    port = l.local_port();
    o.token = kToken;
    o.identity = "cadre rank 0 of 2";
    o.log_prefix = "acceptor test";
    acceptor = std::make_unique<Acceptor>(std::move(l), o);
  }
  net::Socket Dial() const {
    net::Socket s;
    EXPECT_TRUE(net::Socket::Connect("127.0.0.1", port, Deadline(10s), &s).ok());
    return s;
  }
};

// A genuine peer: connects, handshakes, then sends one data frame at once.
std::thread GenuinePeer(uint16_t port, Status* result) {
  return std::thread([port, result] {
    net::Socket s;
    *result = net::Socket::Connect("127.0.0.1", port, Deadline(10s), &s);
    std::string peer;
    if (result->ok())
      *result = net::ClientHandshake(s, kToken, "cadre rank 1 of 2", Deadline(30s), &peer);
    const uint8_t hello[] = {1, 2, 3};
    if (result->ok()) *result = net::SendFrame(s, 99, 0, 7, hello, Deadline(10s));
    // Keep the connection open until the other side has read the frame.
    if (result->ok()) (void)s.WaitReadable(Deadline(10s));
  });
}

TEST(AcceptorTest, SilentGarbageAndHalfDoneConnectionsDoNotDelayAGenuinePeer) {
  Listening l;
  net::Socket silent = l.Dial();
  net::Socket garbage = l.Dial();
  const std::string junk = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  ASSERT_TRUE(garbage.SendAll(junk.data(), junk.size(), Deadline(5s)).ok());
  net::Socket half = l.Dial();  // a HELLO, then nothing
  net::HandshakeClient stalls(kToken, "cadre rank 1 of 2");
  std::vector<uint8_t> hello;
  ASSERT_TRUE(stalls.Start(&hello).ok());
  ASSERT_TRUE(half.SendAll(hello.data(), hello.size(), Deadline(5s)).ok());

  Status peer_status;
  std::thread peer = GenuinePeer(l.port, &peer_status);
  net::Socket got;
  std::string identity;
  // The stalled connections keep their full handshake_timeout (10 s); the genuine peer must not
  // wait for it. (The deadline only bounds a broken acceptor; it is not a timing assertion.)
  Status s = l.acceptor->Next(Deadline(60s), nullptr, &got, &identity);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(identity, "cadre rank 1 of 2");
  // What the peer sent right after the handshake is still in the socket, whole.
  net::FrameHeader h;
  std::vector<uint8_t> payload;
  ASSERT_TRUE(net::RecvFrame(got, 16, Deadline(10s), &h, &payload).ok());
  EXPECT_EQ(h.type, 99);
  EXPECT_EQ(h.tag, 7u);
  EXPECT_EQ(payload, (std::vector<uint8_t>{1, 2, 3}));
  got.Close();
  peer.join();
  EXPECT_TRUE(peer_status.ok()) << peer_status.ToString();
  EXPECT_GE(l.acceptor->refused(), 1u);  // the garbage one, at least
}

TEST(AcceptorTest, AConnectionThatSaysNothingIsClosedAfterItsHandshakeTimeout) {
  AcceptorOptions o;
  o.handshake_timeout = 200ms;
  Listening l(o);
  net::Socket silent = l.Dial();
  net::Socket got;
  std::string identity;
  Status s = l.acceptor->Next(Deadline(1500ms), nullptr, &got, &identity);
  EXPECT_EQ(s.code(), Code::kTimeout) << s.ToString();
  EXPECT_EQ(l.acceptor->refused(), 1u);
  uint8_t byte;
  Status closed = silent.RecvAll(&byte, 1, Deadline(5s));
  EXPECT_EQ(closed.code(), Code::kIo) << closed.ToString();  // the acceptor hung up on it
}

TEST(AcceptorTest, PendingConnectionsAreCappedOldestFirst) {
  AcceptorOptions o;
  o.max_pending = 3;
  Listening l(o);
  std::vector<net::Socket> silent;
  for (int i = 0; i < 5; ++i) silent.push_back(l.Dial());
  net::Socket got;
  std::string identity;
  EXPECT_EQ(l.acceptor->Next(Deadline(500ms), nullptr, &got, &identity).code(), Code::kTimeout);
  EXPECT_EQ(l.acceptor->refused(), 2u);
  // The two oldest were dropped; a genuine peer still gets in past the three left.
  uint8_t byte;
  EXPECT_EQ(silent[0].RecvAll(&byte, 1, Deadline(5s)).code(), Code::kIo);
  Status peer_status;
  std::thread peer = GenuinePeer(l.port, &peer_status);
  Status s = l.acceptor->Next(Deadline(60s), nullptr, &got, &identity);
  ASSERT_TRUE(s.ok()) << s.ToString();
  got.Close();
  peer.join();
}

TEST(AcceptorTest, WrongTokenIsRefusedAndCancelStopsTheWait) {
  Listening l;
  std::thread intruder([port = l.port] {
    net::Socket s;
    ASSERT_TRUE(net::Socket::Connect("127.0.0.1", port, Deadline(10s), &s).ok());
    std::string peer;
    Status st = net::ClientHandshake(s, "not-the-token", "cadre rank 1 of 2", Deadline(30s), &peer);
    EXPECT_EQ(st.code(), Code::kAuth) << st.ToString();
  });
  std::atomic<bool> cancel{false};
  std::thread canceller([&] {
    intruder.join();
    cancel = true;
  });
  net::Socket got;
  std::string identity;
  Status s = l.acceptor->Next(Deadline(60s), &cancel, &got, &identity);
  EXPECT_EQ(s.code(), Code::kAborted) << s.ToString();
  EXPECT_EQ(l.acceptor->refused(), 1u);
  canceller.join();
}

}  // namespace
}  // namespace cadre::transport::tcp
