// TcpStore server against clients that misbehave: silence, garbage, oversized or malformed
// frames, before and after authentication, and from another process. In every case the server
// closes only that client and keeps serving the others.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <thread>
#include <vector>

#include "cadre/base/status.h"
#include "cadre/net/frame.h"
#include "cadre/net/handshake.h"
#include "cadre/net/wire.h"
#include "cadre/store/tcp_store.h"
#include "cadre/store/tcp_store_protocol.h"

namespace cadre::store {
namespace {

using namespace std::chrono_literals;

constexpr char kToken[] = "hostile-test-token";

net::Socket RawConnect(uint16_t port) {
  net::Socket s;
  Status st = net::Socket::Connect("127.0.0.1", port, Deadline(10s), &s);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return s;
}

// Reads until the server closes the connection; returns the Status that ended the read.
Status DrainUntilClosed(net::Socket& s, Duration within) {
  Deadline deadline(within);
  uint8_t buf[4096];
  for (;;) {
    Status st = s.RecvAll(buf, 1, deadline);
    if (!st.ok()) return st;
  }
}

void ExpectServes(const TcpStoreServer& server, const std::string& key) {
  TcpStoreOptions o;
  o.port = server.port();
  o.token = kToken;
  o.connect_timeout = 10s;
  o.timeout = 10s;
  TcpStore s(o);
  s.set_string(key, "alive");
  EXPECT_EQ(s.get_string(key), "alive");
}

TEST(TcpStoreHostileTest, SilentClientIsClosedAfterTheHandshakeTimeout) {
  TcpStoreServerOptions o;
  o.token = kToken;
  o.handshake_timeout = 200ms;
  TcpStoreServer server(o);
  net::Socket silent = RawConnect(server.port());
  ExpectServes(server, "while-silent");  // a silent peer does not block others
  Status closed = DrainUntilClosed(silent, 10s);
  EXPECT_EQ(closed.code(), Code::kIo) << closed.ToString();  // closed, not our timeout
  ExpectServes(server, "after-silent");
}

TEST(TcpStoreHostileTest, GarbageBeforeTheHandshakeClosesOnlyThatClient) {
  TcpStoreServerOptions o;
  o.token = kToken;
  TcpStoreServer server(o);
  const std::string payloads[] = {
      "GET / HTTP/1.1\r\nHost: localhost\r\n\r\n", std::string(100000, '\xff'),
      std::string(3, 'C'),  // then close: a truncated header
  };
  for (const auto& junk : payloads) {
    net::Socket s = RawConnect(server.port());
    ASSERT_TRUE(s.SendAll(junk.data(), junk.size(), Deadline(5s)).ok() || junk.size() > 1000);
    if (junk.size() == 3) {
      s.Close();
    } else {
      EXPECT_EQ(DrainUntilClosed(s, 10s).code(), Code::kIo);
    }
  }
  // A header claiming a terabyte payload before authenticating.
  net::Socket s = RawConnect(server.port());
  uint8_t header[net::kFrameHeaderSize];
  net::EncodeFrameHeader({net::kProtocolVersion, net::frame_type::kHello, 0, 0, uint64_t{1} << 40},
                         header);
  ASSERT_TRUE(s.SendAll(header, sizeof(header), Deadline(5s)).ok());
  EXPECT_EQ(DrainUntilClosed(s, 10s).code(), Code::kIo);
  ExpectServes(server, "after-garbage");
}

TEST(TcpStoreHostileTest, ConnectionsWaitingToAuthenticateAreCappedOldestFirst) {
  // Strangers hold connections open without a word. However many they open, the server keeps at
  // most max_unauthenticated of them (the oldest go first), long before their handshake timeout,
  // and a genuine client still gets in.
  TcpStoreServerOptions o;
  o.token = kToken;
  o.handshake_timeout = 120s;  // longer than this test: only the cap can close them
  o.max_unauthenticated = 8;
  TcpStoreServer server(o);
  std::vector<net::Socket> idle;
  for (int i = 0; i < 40; ++i) idle.push_back(RawConnect(server.port()));
  ExpectServes(server, "past-the-idle");
  // The genuine client needed a slot too: all but the newest max_unauthenticated - 1 idle ones
  // were closed, oldest first.
  for (size_t i = 0; i + o.max_unauthenticated <= idle.size(); ++i) {
    EXPECT_EQ(DrainUntilClosed(idle[i], 30s).code(), Code::kIo) << "idle connection " << i;
  }
  ExpectServes(server, "still-serving");
}

TEST(TcpStoreHostileTest, AnEmptyTokenIsRefusedByServerAndClient) {
  TcpStoreServerOptions so;
  try {
    TcpStoreServer server(so);
    ADD_FAILURE() << "a store server without a token started";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::kInvalidArgument) << e.what();
  }
  so.token = kToken;
  TcpStoreServer server(so);
  TcpStoreOptions co;
  co.port = server.port();
  co.connect_timeout = 5s;
  try {
    TcpStore client(co);
    ADD_FAILURE() << "a store client without a token connected";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::kInvalidArgument) << e.what();
  }
}

// An authenticated raw connection, for sending frames a real client never would.
net::Socket Authenticated(uint16_t port) {
  net::Socket s = RawConnect(port);
  std::string peer;
  Status st = net::ClientHandshake(s, kToken, "raw", Deadline(10s), &peer);
  EXPECT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(peer, "store");
  return s;
}

TEST(TcpStoreHostileTest, BadFramesAfterTheHandshakeCloseOnlyThatClient) {
  TcpStoreServerOptions o;
  o.token = kToken;
  TcpStoreServer server(o);
  std::vector<std::pair<uint8_t, std::vector<uint8_t>>> bad = {
      {wire::kOk, {}},                           // a reply type sent as a request
      {net::frame_type::kTransportFirst, {}},    // another layer's frame
      {wire::kSet, {1, 2, 3}},                   // truncated key length
      {wire::kCheck, {0xff, 0xff, 0xff, 0x7f}},  // absurd key count
  };
  net::WireWriter extra;
  extra.PutString("k");
  extra.PutI64(1);
  extra.PutU8(9);  // trailing byte after a valid ADD
  bad.emplace_back(wire::kAdd, extra.Take());
  for (auto& [type, payload] : bad) {
    net::Socket s = Authenticated(server.port());
    ASSERT_TRUE(net::SendFrame(s, type, 0, 7, payload, Deadline(5s)).ok());
    // The client is told what was wrong with its request (kProtocol), then closed.
    net::FrameHeader h;
    std::vector<uint8_t> reply;
    ASSERT_TRUE(net::RecvFrame(s, wire::kMaxPayload, Deadline(10s), &h, &reply).ok()) << int(type);
    EXPECT_EQ(h.type, wire::kError) << int(type);
    EXPECT_EQ(h.tag, 7u) << int(type);
    net::WireReader r(reply);
    uint8_t code = 0;
    std::string message;
    ASSERT_TRUE(r.GetU8("code", &code).ok());
    ASSERT_TRUE(r.GetString("message", 4096, &message).ok());
    EXPECT_EQ(static_cast<Code>(code), Code::kProtocol) << message;
    EXPECT_FALSE(message.empty());
    EXPECT_EQ(DrainUntilClosed(s, 10s).code(), Code::kIo) << int(type);
  }
  // A frame the server cannot read at all (another protocol version): an ERROR about the
  // connection (tag 0) naming both versions.
  {
    net::Socket s = Authenticated(server.port());
    uint8_t header[net::kFrameHeaderSize];
    net::EncodeFrameHeader({net::kProtocolVersion + 1, wire::kSet, 0, 9, 0}, header);
    ASSERT_TRUE(s.SendAll(header, sizeof(header), Deadline(5s)).ok());
    net::FrameHeader h;
    std::vector<uint8_t> reply;
    ASSERT_TRUE(net::RecvFrame(s, wire::kMaxPayload, Deadline(10s), &h, &reply).ok());
    EXPECT_EQ(h.type, wire::kError);
    EXPECT_EQ(h.tag, 0u);
    const std::string text(reply.begin(), reply.end());
    EXPECT_NE(text.find("version"), std::string::npos) << text;
    EXPECT_EQ(DrainUntilClosed(s, 10s).code(), Code::kIo);
  }
  ExpectServes(server, "after-bad-frames");
  // Nothing was applied by the rejected ADD.
  TcpStoreOptions co;
  co.port = server.port();
  co.token = kToken;
  TcpStore s(co);
  EXPECT_FALSE(s.check({"k"}));
}

TEST(TcpStoreHostileTest, PipelinedRequestsOnOneConnectionAreAnsweredInOrder) {
  // A GET parked, then a SET on the same connection that wakes it.
  TcpStoreServerOptions o;
  o.token = kToken;
  TcpStoreServer server(o);
  net::Socket s = Authenticated(server.port());
  net::WireWriter get;
  get.PutU64(10000);
  get.PutString("key");
  net::WireWriter set;
  set.PutString("key");
  set.PutString("value");
  ASSERT_TRUE(net::SendFrame(s, wire::kGet, 0, 1, get.data(), Deadline(5s)).ok());
  ASSERT_TRUE(net::SendFrame(s, wire::kSet, 0, 2, set.data(), Deadline(5s)).ok());
  net::FrameHeader h;
  std::vector<uint8_t> payload;
  ASSERT_TRUE(net::RecvFrame(s, wire::kMaxPayload, Deadline(10s), &h, &payload).ok());
  EXPECT_EQ(h.tag, 2u);
  EXPECT_EQ(h.type, wire::kOk);
  ASSERT_TRUE(net::RecvFrame(s, wire::kMaxPayload, Deadline(10s), &h, &payload).ok());
  EXPECT_EQ(h.tag, 1u);
  EXPECT_EQ(h.type, wire::kValue);
  EXPECT_EQ(std::string(payload.begin(), payload.end()), "value");
}

TEST(TcpStoreHostileTest, ClientLeavingWhileParkedDoesNotDisturbTheServer) {
  TcpStoreServerOptions o;
  o.token = kToken;
  TcpStoreServer server(o);
  {
    net::Socket s = Authenticated(server.port());
    net::WireWriter wait;
    wait.PutU64(10000);
    wait.PutU32(2);
    wait.PutString("later");
    wait.PutString("never");
    ASSERT_TRUE(net::SendFrame(s, wire::kWait, 0, 1, wait.data(), Deadline(5s)).ok());
    ASSERT_TRUE(
        net::SendFrame(s, wire::kCheck, 0, 2, std::vector<uint8_t>{0, 0, 0, 0}, Deadline(5s)).ok());
    net::FrameHeader h;
    std::vector<uint8_t> payload;
    // The CHECK behind the parked WAIT is answered: the WAIT is parked, not blocking the stream.
    ASSERT_TRUE(net::RecvFrame(s, wire::kMaxPayload, Deadline(10s), &h, &payload).ok());
    EXPECT_EQ(h.tag, 2u);
  }                               // closes with the WAIT still parked
  ExpectServes(server, "later");  // setting a key the departed client waited on
  // Both clients are gone; the server notices each close on its own thread.
  Deadline deadline(10s);
  while (server.num_clients() != 0 && !deadline.expired()) std::this_thread::sleep_for(1ms);
  EXPECT_EQ(server.num_clients(), 0u);
  EXPECT_EQ(server.num_parked(), 0u) << "the departed client's WAIT on 'never' is still indexed";
}

// Requests for keys nobody sets, again and again, each expiring: nothing of them stays behind on
// the server (a long job polling for a key would otherwise grow it without bound).
TEST(TcpStoreHostileTest, ExpiredRequestsLeaveNothingBehind) {
  TcpStoreServerOptions o;
  o.token = kToken;
  TcpStoreServer server(o);
  TcpStoreOptions co;
  co.port = server.port();
  co.token = kToken;
  TcpStore client(co);
  client.set_timeout(1ms);
  for (int i = 0; i < 50; ++i) {
    EXPECT_THROW(client.wait({"never-" + std::to_string(i), "nor-this"}, 1ms), Error);
    EXPECT_THROW(client.get("never-get-" + std::to_string(i)), Error);
  }
  // The client may give up a moment before the server expires its last request.
  Deadline expired(10s);
  while (server.num_parked() != 0 && !expired.expired()) std::this_thread::sleep_for(1ms);
  EXPECT_EQ(server.num_parked(), 0u);
  // Parked requests are counted while they wait.
  std::thread waiter([&] {
    TcpStore other(co);
    other.wait({"soon"}, 30s);
  });
  Deadline deadline(10s);
  while (server.num_parked() == 0 && !deadline.expired()) std::this_thread::sleep_for(1ms);
  EXPECT_EQ(server.num_parked(), 2u);  // one request, one key
  client.set_timeout(10s);
  client.set_string("soon", "now");
  waiter.join();
  EXPECT_EQ(server.num_parked(), 0u);
}

// The server runs in a child process; the parent attacks its port with garbage and a wrong
// token, then uses it properly.
TEST(TcpStoreHostileTest, ServerInAnotherProcessSurvivesGarbageAndRefusesWrongToken) {
  int to_parent[2], to_child[2];
  ASSERT_EQ(::pipe(to_parent), 0);
  ASSERT_EQ(::pipe(to_child), 0);
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // Child: only async-signal-safe exits; a watchdog ends it if the parent never does.
    ::alarm(30);
    ::close(to_parent[0]);
    ::close(to_child[1]);
    int code = 0;
    try {
      TcpStoreServerOptions o;
      o.token = kToken;
      TcpStoreServer server(o);
      uint16_t port = server.port();
      if (::write(to_parent[1], &port, sizeof(port)) != sizeof(port)) ::_exit(3);
      char c;
      while (::read(to_child[0], &c, 1) > 0) {
      }  // serve until the parent closes the pipe
    } catch (...) {
      code = 2;
    }
    ::_exit(code);
  }
  ::close(to_parent[1]);
  ::close(to_child[0]);
  uint16_t port = 0;
  ASSERT_EQ(::read(to_parent[0], &port, sizeof(port)), static_cast<ssize_t>(sizeof(port)));
  for (int i = 0; i < 20; ++i) {
    net::Socket s = RawConnect(port);
    std::string junk(static_cast<size_t>(1 + i * 997), static_cast<char>(i * 37));
    (void)s.SendAll(junk.data(), junk.size(), Deadline(5s));
    // A whole bad header gets the connection closed at once; wait for that on some of them.
    if (i % 2 == 0 && junk.size() >= net::kFrameHeaderSize) {
      EXPECT_EQ(DrainUntilClosed(s, 10s).code(), Code::kIo);
    }
  }
  TcpStoreOptions o;
  o.port = port;
  o.connect_timeout = 10s;
  o.token = "a token from another job";
  try {
    TcpStore stranger(o);
    ADD_FAILURE() << "a client with the wrong token was served";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::kAuth) << e.what();
  }
  o.token = kToken;
  TcpStore store(o);
  store.set_string("survived", "yes");
  EXPECT_EQ(store.get_string("survived"), "yes");
  int status = 0;
  EXPECT_EQ(::waitpid(pid, &status, WNOHANG), 0) << "the server process died";
  ::close(to_child[1]);
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status)) << "signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  EXPECT_EQ(WEXITSTATUS(status), 0);
  ::close(to_parent[0]);
}

}  // namespace
}  // namespace cadre::store
