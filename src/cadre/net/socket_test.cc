#include "cadre/net/socket.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace cadre::net {
namespace {

using namespace std::chrono_literals;

Socket ListenLocal() {
  Socket l;
  Status s = Socket::Listen("127.0.0.1", 0, 16, &l);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return l;
}

TEST(HostPortTest, Parses) {
  HostPort hp;
  ASSERT_TRUE(ParseHostPort("learner-1:2222", "X", &hp).ok());
  EXPECT_EQ(hp.host, "learner-1");
  EXPECT_EQ(hp.port, 2222);
  ASSERT_TRUE(ParseHostPort("[::1]:80", "X", &hp).ok());
  EXPECT_EQ(hp.host, "::1");
  EXPECT_EQ(hp.ToString(), "[::1]:80");
  EXPECT_TRUE(ParseHostPort("h:0", "X", &hp, /*allow_port_zero=*/true).ok());
}

TEST(HostPortTest, RejectsMalformedNamingTheValue) {
  HostPort hp;
  for (const char* bad :
       {"", "host", ":80", "h:", "h:x", "h:70000", "h:0", "::1:80", "[::1", "h:8 "}) {
    Status s = ParseHostPort(bad, "CADRE_STORE", &hp);
    EXPECT_EQ(s.code(), Code::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find("CADRE_STORE"), std::string::npos) << bad;
  }
}

TEST(SocketTest, SendRecvLargeBufferAcrossThreads) {
  Socket listener = ListenLocal();
  uint16_t port = listener.local_port();
  ASSERT_NE(port, 0);
  std::vector<uint8_t> data(8 << 20);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 31);
  std::thread client([&] {
    Socket c;
    ASSERT_TRUE(Socket::Connect("127.0.0.1", port, Deadline(10s), &c).ok());
    // A header and a body in one gather send.
    uint32_t header = 0xabcd;
    iovec parts[2] = {{&header, sizeof(header)}, {data.data(), data.size()}};
    EXPECT_TRUE(c.SendAll(std::span<const iovec>(parts, 2), Deadline(20s)).ok());
  });
  Socket server;
  ASSERT_TRUE(listener.Accept(Deadline(10s), &server).ok());
  uint32_t header = 0;
  ASSERT_TRUE(server.RecvAll(&header, sizeof(header), Deadline(20s)).ok());
  EXPECT_EQ(header, 0xabcdu);
  std::vector<uint8_t> got(data.size());
  ASSERT_TRUE(server.RecvAll(got.data(), got.size(), Deadline(20s)).ok());
  EXPECT_EQ(got, data);
  client.join();
}

TEST(SocketTest, ConnectRetriesUntilTheServerListens) {
  // Reserve a free port, release it, and start listening on it only after the client has begun.
  uint16_t port;
  {
    Socket probe = ListenLocal();
    port = probe.local_port();
  }
  std::thread late([&] {
    std::this_thread::sleep_for(200ms);
    Socket l;
    ASSERT_TRUE(Socket::Listen("127.0.0.1", port, 4, &l).ok());
    Socket a;
    EXPECT_TRUE(l.Accept(Deadline(10s), &a).ok());
  });
  Socket c;
  Status s = Socket::Connect("127.0.0.1", port, Deadline(10s), &c);
  EXPECT_TRUE(s.ok()) << s.ToString();
  late.join();
}

TEST(SocketTest, ConnectTimesOutNamingTheAddress) {
  uint16_t port;
  {
    Socket probe = ListenLocal();
    port = probe.local_port();
  }
  Socket c;
  Status s = Socket::Connect("127.0.0.1", port, Deadline(100ms), &c);
  EXPECT_EQ(s.code(), Code::kTimeout);
  EXPECT_NE(s.message().find("127.0.0.1:" + std::to_string(port)), std::string::npos);
}

TEST(SocketTest, RecvTimesOutAndReportsPeerClose) {
  Socket listener = ListenLocal();
  Socket c;
  ASSERT_TRUE(Socket::Connect("127.0.0.1", listener.local_port(), Deadline(10s), &c).ok());
  Socket s;
  ASSERT_TRUE(listener.Accept(Deadline(10s), &s).ok());
  uint8_t buf[8];
  Status t = s.RecvAll(buf, sizeof(buf), Deadline(50ms));
  EXPECT_EQ(t.code(), Code::kTimeout);
  ASSERT_TRUE(c.SendAll("abc", 3, Deadline(1s)).ok());
  c.Close();
  Status closed = s.RecvAll(buf, sizeof(buf), Deadline(10s));
  EXPECT_EQ(closed.code(), Code::kIo);
  EXPECT_NE(closed.message().find("3 of 8 bytes"), std::string::npos) << closed.message();
}

TEST(SocketTest, SendToClosedPeerIsAnErrorNotSigpipe) {
  Socket listener = ListenLocal();
  Socket c;
  ASSERT_TRUE(Socket::Connect("127.0.0.1", listener.local_port(), Deadline(10s), &c).ok());
  {
    Socket s;
    ASSERT_TRUE(listener.Accept(Deadline(10s), &s).ok());
  }
  std::vector<uint8_t> big(1 << 20);
  Status st;
  for (int i = 0; i < 50 && st.ok(); ++i) st = c.SendAll(big.data(), big.size(), Deadline(5s));
  EXPECT_EQ(st.code(), Code::kIo);
}

TEST(SocketTest, AcceptTimesOut) {
  Socket listener = ListenLocal();
  Socket s;
  EXPECT_EQ(listener.Accept(Deadline(30ms), &s).code(), Code::kTimeout);
}

TEST(SocketTest, ListenOnABusyPortNamesIt) {
  Socket a = ListenLocal();
  Socket b;
  // SO_REUSEADDR does not allow two listeners on one port.
  Status s = Socket::Listen("127.0.0.1", a.local_port(), 4, &b);
  EXPECT_EQ(s.code(), Code::kIo);
  EXPECT_NE(s.message().find(std::to_string(a.local_port())), std::string::npos);
}

}  // namespace
}  // namespace cadre::net
