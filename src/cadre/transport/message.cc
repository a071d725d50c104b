#include "cadre/transport/message.h"

namespace cadre::transport {

Status CheckMessage(const std::string& peer, uint64_t tag, uint64_t length, uint32_t digest,
                    size_t bytes, const std::string* collective, uint64_t* recv_seq) {
  const uint64_t expected = (*recv_seq + 1) & kMessageSeqMask;
  if ((tag & kMessageSeqMask) != expected) {
    return ProtocolError(peer + " sent message #" + std::to_string(tag & kMessageSeqMask) +
                         ", expected #" + std::to_string(expected));
  }
  if (static_cast<uint32_t>(tag >> 32) != digest) {
    const std::string mine = collective != nullptr ? *collective : "collective";
    return MismatchError(peer + " sent data of another collective than this rank's " + mine +
                         " (every rank must call the same collectives in the same order, with "
                         "the same counts, types, ops and roots)");
  }
  if (length != bytes) {
    return MismatchError(peer + " sent " + std::to_string(length) +
                         " bytes where this rank expects " + std::to_string(bytes) +
                         " (do all ranks call the same collective with the same sizes?)");
  }
  ++*recv_seq;
  return Status::Ok();
}

}  // namespace cadre::transport
