// What every transport's pair checks about a message before it takes the payload: it is the next
// one on this direction of the pair, of the collective the receiver is in, of the length the
// receiver expects (pair.h's guarantees). The tag carries the sequence number (low 32 bits,
// wrapping) and the collective's digest (high 32, Device::BeginCollective).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "cadre/base/status.h"

namespace cadre::transport {

inline constexpr uint64_t kMessageSeqMask = 0xffffffffu;

inline uint64_t MessageTag(uint32_t digest, uint64_t seq) {
  return (uint64_t{digest} << 32) | (seq & kMessageSeqMask);
}

// Checks a message from `peer` (its name) with `tag` and `length` against what the receiver
// expects: message number *recv_seq + 1 (advanced when the message passes), collective
// `digest` (described by `collective`, may be null), `bytes` of payload. kProtocol for a message
// out of sequence, kMismatch for another collective or length, each naming the peer.
Status CheckMessage(const std::string& peer, uint64_t tag, uint64_t length, uint32_t digest,
                    size_t bytes, const std::string* collective, uint64_t* recv_seq);

}  // namespace cadre::transport
