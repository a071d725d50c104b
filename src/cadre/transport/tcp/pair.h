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
#include <vector>

#include "cadre/base/status.h"
#include "cadre/net/frame.h"
#include "cadre/net/socket.h"
#include "cadre/transport/pair.h"

namespace cadre::transport::tcp {

namespace frame_type {
inline constexpr uint8_t kData = net::frame_type::kTransportFirst;
inline constexpr uint8_t kFailure = net::frame_type::kTransportFirst + 1;
}  // namespace frame_type

// The longest failure notice sent; a longer message is cut.
inline constexpr size_t kMaxNoticeBytes = 1024;
// kFailure's flags: the sender's failure names its cause (it is not a guess).
inline constexpr uint8_t kNoticeExplained = 1;

class TcpPair;

// For a device whose transfer with `failed` broke with the kIo `error` (every pair cleared):
// what the ends of the connections say (TcpPair::ReadEnd). The peer's notice, when it sent one,
// becomes the error (its code, "rank 3 failed: ..."); an end with no notice names the peer as
// exited or died; otherwise the other pairs are read for a moment, and any peer whose connection
// ended with no notice, or else the first notice, is added. *explained: the result names the
// cause that way rather than only the neighbour that hung up.
Status ExplainBrokenConnection(TcpPair& failed, const std::vector<TcpPair*>& others,
                               const Status& error, bool* explained);

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

  // Drops queued work (after a failure); a frame left half moved leaves its direction torn: no
  // notice can follow it (send), or be read after it (receive).
  void Clear();
  // Tells the peer why this rank failed (a kFailure frame), unless the sending direction is torn
  // or a notice went already; waits for room until `deadline` at most. Best effort. `explained`:
  // `why` names its cause from what a peer said or did (see ExplainBrokenConnection).
  void SendNotice(const Status& why, bool explained, Deadline deadline);
  void Shutdown() { socket_.Shutdown(); }

  // What the peer's end of the connection says after a failure (see the header comment), reading
  // what it sent past the expected messages (data frames are dropped) until a conclusion or
  // `deadline`. kOpen: nothing conclusive yet (the connection is open); call again to go on.
  enum class End { kOpen, kNotice, kClosed, kUnknown };
  End ReadEnd(Deadline deadline);
  // After ReadEnd() == kNotice: the peer's failure, its code and message, and whether the peer
  // knew its cause.
  const Status& notice() const { return notice_; }
  bool notice_explained() const { return notice_explained_; }

  // The kIo error for a connection that broke mid-transfer, before ReadEnd says more: the peer's
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
  // After a failure (SendNotice, ReadEnd).
  bool send_torn_ = false;
  bool recv_torn_ = false;
  bool notice_sent_ = false;
  End end_ = End::kOpen;
  Status notice_;
  bool notice_explained_ = false;
  uint8_t end_header_[net::kFrameHeaderSize] = {};
  size_t end_header_done_ = 0;
  uint64_t end_skip_ = 0;       // payload bytes of a data frame still to drop
  bool end_in_notice_ = false;  // reading a notice's text into end_text_
  Code end_code_ = Code::kIo;
  std::string end_text_;
  size_t end_text_done_ = 0;
};

}  // namespace cadre::transport::tcp
