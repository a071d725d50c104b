// TcpPair: an authenticated TCP connection to one peer, moved by TcpDevice's poll loop.
//
// Each message is one frame (net/frame.h) of type kData whose tag carries the message's sequence
// number on this direction of the pair (low 32 bits, wrapping) and the digest of the collective
// it belongs to (high 32 bits, see Device::BeginCollective): a frame that is not the next
// expected one (kProtocol), belongs to another collective than the receiver's (kMismatch, naming
// the receiver's), or whose length is not what the receiver expects (kMismatch) breaks the pair
// with an error naming the peer.
// Not thread-safe: owned and driven by one TcpDevice.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>

#include "cadre/base/status.h"
#include "cadre/net/frame.h"
#include "cadre/net/socket.h"
#include "cadre/transport/pair.h"

namespace cadre::transport::tcp {

namespace frame_type {
inline constexpr uint8_t kData = net::frame_type::kTransportFirst;
}

class TcpPair final : public Pair {
 public:
  TcpPair(int peer, std::string name, net::Socket socket);

  int peer() const override { return peer_; }
  const std::string& peer_name() const override { return name_; }
  int fd() const { return socket_.fd(); }

  // The collective of the messages queued from now on; `description` must outlive them.
  void SetCollective(uint32_t digest, const std::string* description);
  void QueueSend(const void* data, size_t bytes);
  void QueueRecv(void* data, size_t bytes);
  bool send_pending() const { return !sends_.empty(); }
  bool recv_pending() const { return !recvs_.empty(); }
  // Receives completed since the pair was made (they complete in queue order).
  uint64_t recvs_done() const { return recvs_done_; }
  // Bytes still owed in each direction, for timeout messages.
  size_t send_left() const;
  size_t recv_left() const;

  // Move as many bytes as the socket takes without blocking. Errors name the peer.
  Status ProgressSend();
  Status ProgressRecv();

  // Drops queued work (after a failure).
  void Clear();
  void Shutdown() { socket_.Shutdown(); }
  // The kIo error for a connection that broke mid-transfer, saying what that means: the peer's
  // process exited or died, the link to it broke, or it failed and closed its connections.
  Status Broken(const std::string& what) const;

 private:
  struct Op {
    uint8_t* data = nullptr;
    size_t bytes = 0;
    uint32_t digest = 0;  // receives: the collective the frame must belong to
    size_t done = 0;      // bytes of header + payload moved
    uint8_t header[net::kFrameHeaderSize] = {};
  };

  Status HeaderReceived(Op& op);

  int peer_;
  std::string name_;
  net::Socket socket_;
  std::deque<Op> sends_;
  std::deque<Op> recvs_;
  uint64_t send_seq_ = 0;
  uint64_t recv_seq_ = 0;
  uint64_t recvs_done_ = 0;
  uint32_t digest_ = 0;
  const std::string* collective_ = nullptr;
};

}  // namespace cadre::transport::tcp
