#include "cadre/net/handshake.h"

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <thread>

namespace cadre::net {
namespace {

using namespace std::chrono_literals;

// A connected loopback pair: `client` and `server`.
struct Pair {
  Socket client, server;
  Pair() {
    Socket l;
    EXPECT_TRUE(Socket::Listen("127.0.0.1", 0, 4, &l).ok());
    EXPECT_TRUE(Socket::Connect("127.0.0.1", l.local_port(), Deadline(10s), &client).ok());
    EXPECT_TRUE(l.Accept(Deadline(10s), &server).ok());
  }
};

struct Outcome {
  Status client, server;
  std::string client_saw, server_saw;
};

Outcome RunBoth(const std::string& client_token, const std::string& server_token) {
  Pair p;
  Outcome o;
  std::thread t([&] {
    o.server = ServerHandshake(p.server, server_token, "store", Deadline(10s), &o.server_saw);
  });
  o.client = ClientHandshake(p.client, client_token, "rank 3", Deadline(10s), &o.client_saw);
  t.join();
  return o;
}

TEST(HandshakeTest, SameTokenAuthenticatesBothSides) {
  Outcome o = RunBoth("secret", "secret");
  ASSERT_TRUE(o.client.ok()) << o.client.ToString();
  ASSERT_TRUE(o.server.ok()) << o.server.ToString();
  EXPECT_EQ(o.client_saw, "store");
  EXPECT_EQ(o.server_saw, "rank 3");
}

TEST(HandshakeTest, WrongTokenIsRefusedOnBothSides) {
  Outcome o = RunBoth("guess", "secret");
  // The client learns first that the server's proof does not match its token.
  EXPECT_EQ(o.client.code(), Code::kAuth) << o.client.ToString();
  EXPECT_NE(o.client.message().find("'store'"), std::string::npos) << o.client.message();
  EXPECT_EQ(o.server.code(), Code::kAuth) << o.server.ToString();
  EXPECT_NE(o.server.message().find("'rank 3'"), std::string::npos) << o.server.message();
}

TEST(HandshakeTest, EmptyTokenIsRefusedNotTakenAsNoAuthentication) {
  // Two processes that both lack the token must not authenticate each other.
  Outcome o = RunBoth("", "");
  EXPECT_EQ(o.client.code(), Code::kInvalidArgument) << o.client.ToString();
  EXPECT_NE(o.client.message().find("no job token"), std::string::npos) << o.client.message();
  EXPECT_EQ(o.server.code(), Code::kInvalidArgument) << o.server.ToString();
  // A server without a token refuses a client that has one, and says why.
  o = RunBoth("secret", "");
  EXPECT_EQ(o.server.code(), Code::kInvalidArgument) << o.server.ToString();
  EXPECT_EQ(o.client.code(), Code::kAuth) << o.client.ToString();
  EXPECT_NE(o.client.message().find("no job token"), std::string::npos) << o.client.message();
  // The event-loop form too.
  HandshakeServer server("", "store");
  HandshakeClient client("secret", "rank 1");
  std::vector<uint8_t> hello, out;
  ASSERT_TRUE(client.Start(&hello).ok());
  FrameHeader h;
  ASSERT_TRUE(DecodeFrameHeader(hello, kHandshakeMaxPayload, &h).ok());
  Status s = server.OnFrame(h, std::span(hello).subspan(kFrameHeaderSize), &out);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_FALSE(server.done());
  EXPECT_EQ(HandshakeClient("", "rank 1").Start(&out).code(), Code::kInvalidArgument);
}

TEST(HandshakeTest, APeersIdentityIsEscapedInMessages) {
  // The identity arrives before the client proved anything: it must not be able to forge a log
  // line or send terminal escapes through the server's error message.
  Pair p;
  Outcome o;
  std::thread t([&] {
    o.server = ServerHandshake(p.server, "secret", "store", Deadline(10s), &o.server_saw);
  });
  o.client = ClientHandshake(p.client, "guess", "x\nW 12:00 rank 0: all good\x1b[2J", Deadline(10s),
                             &o.client_saw);
  t.join();
  ASSERT_EQ(o.server.code(), Code::kAuth) << o.server.ToString();
  const std::string& m = o.server.message();
  EXPECT_NE(m.find("'x\\x0aW 12:00 rank 0: all good\\x1b[2J'"), std::string::npos) << m;
  for (char c : m) EXPECT_TRUE(c >= 0x20 && c < 0x7f) << "byte " << static_cast<int>(c);
}

TEST(HandshakeTest, ServerRefusesAClientWhoseProofIsWrong) {
  // A client that skips verifying the server and sends a forged proof.
  Pair p;
  Status server;
  std::string saw;
  std::thread t(
      [&] { server = ServerHandshake(p.server, "secret", "store", Deadline(10s), &saw); });
  HandshakeClient client("secret", "forger");
  std::vector<uint8_t> out;
  ASSERT_TRUE(client.Start(&out).ok());
  ASSERT_TRUE(p.client.SendAll(out.data(), out.size(), Deadline(5s)).ok());
  FrameHeader h;
  std::vector<uint8_t> payload;
  ASSERT_TRUE(RecvFrame(p.client, kHandshakeMaxPayload, Deadline(5s), &h, &payload).ok());
  ASSERT_EQ(h.type, frame_type::kChallenge);
  std::vector<uint8_t> forged(kMacSize, 0x5a);
  ASSERT_TRUE(SendFrame(p.client, frame_type::kProof, 0, 0, forged, Deadline(5s)).ok());
  // The server answers with REJECT, which the client state machine reports as kAuth.
  ASSERT_TRUE(RecvFrame(p.client, kHandshakeMaxPayload, Deadline(5s), &h, &payload).ok());
  EXPECT_EQ(h.type, frame_type::kReject);
  t.join();
  EXPECT_EQ(server.code(), Code::kAuth);
  EXPECT_NE(server.message().find("'forger'"), std::string::npos);
}

// Sends raw bytes to a server handshake and returns its Status.
Status ServerGets(const std::function<void(Socket&)>& send, Duration timeout = 5s) {
  Pair p;
  Status server;
  std::string saw;
  std::thread t(
      [&] { server = ServerHandshake(p.server, "secret", "store", Deadline(timeout), &saw); });
  send(p.client);
  t.join();
  return server;
}

TEST(HandshakeTest, GarbageBytesAreAProtocolError) {
  Status s = ServerGets([](Socket& c) {
    std::string junk = "SSH-2.0-OpenSSH_9.2p1 Debian-2\r\nxxxxxxxxxxxxxxxxxxxxxxx";
    ASSERT_TRUE(c.SendAll(junk.data(), junk.size(), Deadline(5s)).ok());
  });
  EXPECT_EQ(s.code(), Code::kProtocol);
  EXPECT_NE(s.message().find("magic"), std::string::npos) << s.message();
}

TEST(HandshakeTest, TruncatedHelloThenCloseIsAnIoError) {
  Status s = ServerGets([](Socket& c) {
    uint8_t header[kFrameHeaderSize];
    EncodeFrameHeader({kProtocolVersion, frame_type::kHello, 0, 0, 100}, header);
    ASSERT_TRUE(c.SendAll(header, sizeof(header), Deadline(5s)).ok());
    ASSERT_TRUE(c.SendAll("short", 5, Deadline(5s)).ok());
    c.Close();
  });
  EXPECT_EQ(s.code(), Code::kIo);
  EXPECT_NE(s.message().find("truncated"), std::string::npos) << s.message();
}

TEST(HandshakeTest, MalformedHelloPayloadNamesTheField) {
  Status s = ServerGets([](Socket& c) {
    std::vector<uint8_t> payload(kNonceSize + 2, 1);  // nonce, then half a length prefix
    ASSERT_TRUE(SendFrame(c, frame_type::kHello, 0, 0, payload, Deadline(5s)).ok());
    FrameHeader h;
    std::vector<uint8_t> reply;
    ASSERT_TRUE(RecvFrame(c, kHandshakeMaxPayload, Deadline(5s), &h, &reply).ok());
    EXPECT_EQ(h.type, frame_type::kReject);
  });
  EXPECT_EQ(s.code(), Code::kProtocol);
  EXPECT_NE(s.message().find("client identity"), std::string::npos) << s.message();
}

TEST(HandshakeTest, OversizedHelloIsRefusedWithoutReadingIt) {
  Status s = ServerGets([](Socket& c) {
    uint8_t header[kFrameHeaderSize];
    EncodeFrameHeader({kProtocolVersion, frame_type::kHello, 0, 0, uint64_t{1} << 33}, header);
    ASSERT_TRUE(c.SendAll(header, sizeof(header), Deadline(5s)).ok());
  });
  EXPECT_EQ(s.code(), Code::kProtocol);
  EXPECT_NE(s.message().find("exceeds"), std::string::npos) << s.message();
}

TEST(HandshakeTest, VersionMismatchIsReportedOnBothSides) {
  Pair p;
  Status server;
  std::string saw;
  std::thread t([&] { server = ServerHandshake(p.server, "secret", "store", Deadline(5s), &saw); });
  // A client from a future release: a HELLO with version+1.
  uint8_t header[kFrameHeaderSize];
  EncodeFrameHeader({kProtocolVersion + 1, frame_type::kHello, 0, 0, 0}, header);
  ASSERT_TRUE(p.client.SendAll(header, sizeof(header), Deadline(5s)).ok());
  t.join();
  EXPECT_EQ(server.code(), Code::kProtocol);
  EXPECT_NE(server.message().find("version " + std::to_string(kProtocolVersion + 1)),
            std::string::npos);
  // The server still answered with a REJECT in its own version before closing.
  FrameHeader h;
  std::vector<uint8_t> payload;
  ASSERT_TRUE(RecvFrame(p.client, kHandshakeMaxPayload, Deadline(5s), &h, &payload).ok());
  EXPECT_EQ(h.type, frame_type::kReject);

  // And a client facing a server of another version reports it too.
  Pair q;
  std::thread old_server([&] {
    uint8_t hdr[kFrameHeaderSize];
    EncodeFrameHeader({kProtocolVersion + 1, frame_type::kChallenge, 0, 0, 0}, hdr);
    EXPECT_TRUE(q.server.SendAll(hdr, sizeof(hdr), Deadline(5s)).ok());
  });
  std::string peer;
  Status client = ClientHandshake(q.client, "secret", "rank 0", Deadline(5s), &peer);
  old_server.join();
  EXPECT_EQ(client.code(), Code::kProtocol);
  EXPECT_NE(client.message().find("mismatch"), std::string::npos) << client.message();
}

TEST(HandshakeTest, SilentPeerTimesOut) {
  Status s = ServerGets([](Socket&) {}, 100ms);
  EXPECT_EQ(s.code(), Code::kTimeout);
  Pair p;
  std::string peer;
  Status c = ClientHandshake(p.client, "secret", "rank 0", Deadline(100ms), &peer);
  EXPECT_EQ(c.code(), Code::kTimeout);
}

TEST(HandshakeTest, OversizedIdentityIsRejectedLocally) {
  Pair p;
  std::string peer;
  Status s =
      ClientHandshake(p.client, "t", std::string(kMaxIdentitySize + 1, 'x'), Deadline(1s), &peer);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace cadre::net
