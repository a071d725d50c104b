// TcpPair against a hand-driven peer: well-formed messages pass, and every kind of bad frame
// breaks the pair with an error naming the peer instead of crashing or hanging.
#include "cadre/transport/tcp/pair.h"

#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace cadre::transport::tcp {
namespace {

struct Ends {
  std::unique_ptr<TcpPair> pair;
  int raw = -1;  // the other end, written by the test
  ~Ends() { close(raw); }
};

void Connect(Ends* e) {
  int fds[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
  e->pair = std::make_unique<TcpPair>(3, "rank 3", net::Socket(fds[0]));
  e->raw = fds[1];
}

void WriteFrame(int fd, uint16_t version, uint8_t type, uint64_t tag, const std::string& body,
                uint64_t length_field) {
  net::FrameHeader h;
  h.version = version;
  h.type = type;
  h.tag = tag;
  h.length = length_field;
  uint8_t buf[net::kFrameHeaderSize];
  net::EncodeFrameHeader(h, buf);
  ASSERT_EQ(write(fd, buf, sizeof buf), ssize_t(sizeof buf));
  if (!body.empty()) {
    ASSERT_EQ(write(fd, body.data(), body.size()), ssize_t(body.size()));
  }
}

Status Receive(TcpPair& pair, void* out, size_t bytes) {
  pair.QueueRecv(out, bytes);
  return pair.ProgressRecv();
}

TEST(TcpPairTest, MessagesArriveInOrderWithTheirTags) {
  Ends e;
  Connect(&e);
  WriteFrame(e.raw, net::kProtocolVersion, frame_type::kData, 1, "abcd", 4);
  WriteFrame(e.raw, net::kProtocolVersion, frame_type::kData, 2, "", 0);
  char out[4];
  ASSERT_TRUE(Receive(*e.pair, out, 4).ok());
  EXPECT_EQ(std::memcmp(out, "abcd", 4), 0);
  ASSERT_TRUE(Receive(*e.pair, out, 0).ok());
  EXPECT_FALSE(e.pair->recv_pending());
}

TEST(TcpPairTest, SendsAFrameThePeerCanDecode) {
  Ends e;
  Connect(&e);
  const char msg[] = "hello";
  e.pair->QueueSend(msg, 5);
  ASSERT_TRUE(e.pair->ProgressSend().ok());
  uint8_t buf[net::kFrameHeaderSize + 5];
  ASSERT_EQ(read(e.raw, buf, sizeof buf), ssize_t(sizeof buf));
  net::FrameHeader h;
  ASSERT_TRUE(net::DecodeFrameHeader({buf, net::kFrameHeaderSize}, 100, &h).ok());
  EXPECT_EQ(h.type, frame_type::kData);
  EXPECT_EQ(h.tag, 1u);
  EXPECT_EQ(h.length, 5u);
  EXPECT_EQ(std::memcmp(buf + net::kFrameHeaderSize, "hello", 5), 0);
}

TEST(TcpPairTest, GarbageIsAProtocolErrorNamingThePeer) {
  Ends e;
  Connect(&e);
  std::string junk(64, '\x5a');
  ASSERT_EQ(write(e.raw, junk.data(), junk.size()), ssize_t(junk.size()));
  char out[8];
  Status s = Receive(*e.pair, out, 8);
  EXPECT_EQ(s.code(), Code::kProtocol);
  EXPECT_NE(s.message().find("rank 3"), std::string::npos) << s.ToString();
}

TEST(TcpPairTest, OtherProtocolVersionIsRefused) {
  Ends e;
  Connect(&e);
  WriteFrame(e.raw, net::kProtocolVersion + 1, frame_type::kData, 1, "abcd", 4);
  char out[4];
  EXPECT_EQ(Receive(*e.pair, out, 4).code(), Code::kProtocol);
}

TEST(TcpPairTest, WrongTypeOrOutOfOrderTagIsRefused) {
  {
    Ends e;
    Connect(&e);
    WriteFrame(e.raw, net::kProtocolVersion, net::frame_type::kStoreFirst, 1, "abcd", 4);
    char out[4];
    EXPECT_EQ(Receive(*e.pair, out, 4).code(), Code::kProtocol);
  }
  {
    Ends e;
    Connect(&e);
    WriteFrame(e.raw, net::kProtocolVersion, frame_type::kData, 7, "abcd", 4);
    char out[4];
    EXPECT_EQ(Receive(*e.pair, out, 4).code(), Code::kProtocol);
  }
}

TEST(TcpPairTest, UnexpectedLengthIsAMismatchAndNeverOverflows) {
  Ends e;
  Connect(&e);
  // Claims far more than the receiver's buffer: refused from the header alone.
  WriteFrame(e.raw, net::kProtocolVersion, frame_type::kData, 1, "", uint64_t{1} << 40);
  char out[4];
  Status s = Receive(*e.pair, out, 4);
  EXPECT_EQ(s.code(), Code::kMismatch);
  EXPECT_NE(s.message().find("rank 3"), std::string::npos);
}

TEST(TcpPairTest, TruncatedFrameThenCloseIsAnIoError) {
  Ends e;
  Connect(&e);
  WriteFrame(e.raw, net::kProtocolVersion, frame_type::kData, 1, "ab", 4);
  close(e.raw);
  e.raw = -1;
  char out[4];
  Status s = Receive(*e.pair, out, 4);
  EXPECT_EQ(s.code(), Code::kIo);
  EXPECT_NE(s.message().find("rank 3"), std::string::npos);
}

}  // namespace
}  // namespace cadre::transport::tcp
