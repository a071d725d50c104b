// Frame: the versioned header in front of every message cadre sends over a byte stream
// (handshake, store protocol, TCP transport).
//
// Wire layout, 24 bytes, little-endian:
//   offset 0  u32 magic    kFrameMagic ("CDRF" read as bytes)
//   offset 4  u16 version  kProtocolVersion of the sender
//   offset 6  u8  type     what the payload is; ranges are reserved per layer (see below)
//   offset 7  u8  flags    meaning defined by the frame type
//   offset 8  u64 tag      request id, collective tag, ...; opaque to net/
//   offset 16 u64 length   payload bytes that follow the header
//
// DecodeFrameHeader() never trusts the bytes: a short buffer, a wrong magic, another protocol
// version (the message names both versions) or a length above the caller's limit each give a
// kProtocol Status. The caller closes the stream after any of them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "cadre/base/deadline.h"
#include "cadre/base/status.h"

namespace cadre::net {

class Socket;

inline constexpr uint32_t kFrameMagic = 0x46524443;  // bytes 'C' 'D' 'R' 'F'
inline constexpr uint16_t kProtocolVersion = 1;
inline constexpr size_t kFrameHeaderSize = 24;

// Frame type ranges, one per layer, so a frame sent to the wrong kind of endpoint is recognised.
// Type 0 is never valid.
namespace frame_type {
inline constexpr uint8_t kHandshakeFirst = 1;   // 1..15: net/handshake
inline constexpr uint8_t kStoreFirst = 16;      // 16..31: store/tcp_store
inline constexpr uint8_t kTransportFirst = 32;  // 32..127: transport/
inline constexpr uint8_t kLast = 127;
}  // namespace frame_type

struct FrameHeader {
  uint16_t version = kProtocolVersion;
  uint8_t type = 0;
  uint8_t flags = 0;
  uint64_t tag = 0;
  uint64_t length = 0;
};

// Writes the 24 header bytes (with `header.version` as given, so tests can forge other versions).
void EncodeFrameHeader(const FrameHeader& header, uint8_t out[kFrameHeaderSize]);

// Parses and validates a header from the first kFrameHeaderSize bytes of `in`.
Status DecodeFrameHeader(std::span<const uint8_t> in, uint64_t max_payload, FrameHeader* out);

// Blocking helpers over a Socket. SendFrame writes header and payload together (gather send).
// RecvFrame reads one whole frame; on any failure the socket must be closed.
Status SendFrame(Socket& socket, uint8_t type, uint8_t flags, uint64_t tag,
                 std::span<const uint8_t> payload, Deadline deadline);
Status RecvFrame(Socket& socket, uint64_t max_payload, Deadline deadline, FrameHeader* header,
                 std::vector<uint8_t>* payload);

// Reassembles frames from a byte stream that arrives in arbitrary pieces (an event loop's reads).
// Feed bytes with Append(); call Next() until it returns false. After an error every later call
// returns the same error. Not thread-safe.
class FrameReader {
 public:
  explicit FrameReader(uint64_t max_payload) : max_payload_(max_payload) {}

  void Append(const uint8_t* data, size_t size);
  // True and fills header/payload when a whole frame is buffered; false when more bytes are
  // needed or on error (check status()).
  bool Next(FrameHeader* header, std::vector<uint8_t>* payload);
  const Status& status() const { return status_; }
  // Bytes buffered that do not yet form a frame.
  size_t pending() const { return buffer_.size() - consumed_; }
  void set_max_payload(uint64_t max_payload) { max_payload_ = max_payload; }

 private:
  uint64_t max_payload_;
  std::vector<uint8_t> buffer_;
  size_t consumed_ = 0;
  Status status_;
};

}  // namespace cadre::net
