// Point-to-point transport interfaces.
//
// A Pair is the connection between this rank and one peer. A Transfer is one message to or from
// one peer: the unit a Device moves. Messages between two ranks are delivered in order, and each
// carries its length, so a receive whose size differs from what the peer sent fails with
// kMismatch instead of corrupting the next message.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace cadre::transport {

struct Transfer {
  enum Kind : uint8_t { kSend, kRecv };
  int peer = -1;
  Kind kind = kSend;
  void* data = nullptr;  // const for sends
  size_t bytes = 0;

  static Transfer Send(int peer, const void* data, size_t bytes) {
    return {peer, kSend, const_cast<void*>(data), bytes};
  }
  static Transfer Recv(int peer, void* data, size_t bytes) { return {peer, kRecv, data, bytes}; }
};

class Pair {
 public:
  virtual ~Pair() = default;
  virtual int peer() const = 0;
  // "rank 3" — used in every error about this pair.
  virtual const std::string& peer_name() const = 0;
};

}  // namespace cadre::transport
