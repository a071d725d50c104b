// ShmPair: the connection to a peer on this host, over two Channels of a ShmMesh (mesh.h), moved
// by MixedDevice's loop (transport/mixed/device.h).
//
// Each message is a 16-byte header (the tag: the sequence number of the message on this direction
// of the pair in the low 32 bits, wrapping, and the digest of its collective in the high 32, as
// TcpPair's frames; then the payload's length) followed by the payload, streamed through the ring
// as room allows, so a message may be larger than the ring. A message that is not the next
// expected one (kProtocol), belongs to another collective than the receiver's (kMismatch), or
// whose length is not what the receiver expects (kMismatch) breaks the pair with an error naming
// the peer, as over TCP.
// Not thread-safe: owned and driven by one device.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>

#include "cadre/base/status.h"
#include "cadre/transport/pair.h"
#include "cadre/transport/shm/channel.h"

namespace cadre::transport::shm {

class ShmPair final : public Pair {
 public:
  static constexpr size_t kHeaderBytes = 16;

  ShmPair(int peer, std::string name, Channel out, Channel in);

  int peer() const override { return peer_; }
  const std::string& peer_name() const override { return name_; }

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

  // Move as many bytes as the rings take; *moved becomes true when any did (the peer may be
  // waiting for them, or for the room they freed). Errors name the peer.
  Status ProgressSend(bool* moved);
  Status ProgressRecv(bool* moved);

  // Drops queued work (after a failure).
  void Clear();

 private:
  struct Op {
    uint8_t* data = nullptr;
    size_t bytes = 0;
    uint32_t digest = 0;  // receives: the collective the message must belong to
    size_t done = 0;      // bytes of header + payload moved
    uint8_t header[kHeaderBytes] = {};
  };

  Status HeaderReceived(Op& op);
  Status Corrupt() const;

  int peer_;
  std::string name_;
  Channel out_;
  Channel in_;
  std::deque<Op> sends_;
  std::deque<Op> recvs_;
  uint64_t send_seq_ = 0;
  uint64_t recv_seq_ = 0;
  uint64_t recvs_done_ = 0;
  uint32_t digest_ = 0;
  const std::string* collective_ = nullptr;
};

}  // namespace cadre::transport::shm
