#include "cadre/net/frame.h"

#include <cstdio>
#include <cstring>

#include "cadre/net/socket.h"

namespace cadre::net {
namespace {

void Put16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
}
void Put32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
void Put64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint16_t Get16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
uint32_t Get32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
uint64_t Get64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

std::string Hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "0x%08x", v);
  return buf;
}

}  // namespace

void EncodeFrameHeader(const FrameHeader& header, uint8_t out[kFrameHeaderSize]) {
  Put32(out, kFrameMagic);
  Put16(out + 4, header.version);
  out[6] = header.type;
  out[7] = header.flags;
  Put64(out + 8, header.tag);
  Put64(out + 16, header.length);
}

Status DecodeFrameHeader(std::span<const uint8_t> in, uint64_t max_payload, FrameHeader* out) {
  if (in.size() < kFrameHeaderSize) {
    return ProtocolError("truncated frame header: " + std::to_string(in.size()) + " of " +
                         std::to_string(kFrameHeaderSize) + " bytes");
  }
  const uint8_t* p = in.data();
  uint32_t magic = Get32(p);
  if (magic != kFrameMagic) {
    return ProtocolError("bad frame magic " + Hex32(magic) + " (expected " + Hex32(kFrameMagic) +
                         "): the peer is not a cadre process or the stream is corrupt");
  }
  FrameHeader h;
  h.version = Get16(p + 4);
  if (h.version != kProtocolVersion) {
    return ProtocolError("protocol version mismatch: the peer speaks version " +
                         std::to_string(h.version) + ", this process speaks version " +
                         std::to_string(kProtocolVersion) +
                         " (run the same cadre release on every host)");
  }
  h.type = p[6];
  h.flags = p[7];
  h.tag = Get64(p + 8);
  h.length = Get64(p + 16);
  if (h.type == 0 || h.type > frame_type::kLast) {
    return ProtocolError("invalid frame type " + std::to_string(h.type));
  }
  if (h.length > max_payload) {
    return ProtocolError("frame payload of " + std::to_string(h.length) +
                         " bytes exceeds the limit of " + std::to_string(max_payload) + " bytes");
  }
  *out = h;
  return Status::Ok();
}

Status SendFrame(Socket& socket, uint8_t type, uint8_t flags, uint64_t tag,
                 std::span<const uint8_t> payload, Deadline deadline) {
  uint8_t header[kFrameHeaderSize];
  EncodeFrameHeader(FrameHeader{kProtocolVersion, type, flags, tag, payload.size()}, header);
  iovec parts[2] = {{header, sizeof(header)},
                    {const_cast<uint8_t*>(payload.data()), payload.size()}};
  return socket.SendAll(std::span<const iovec>(parts, payload.empty() ? 1 : 2), deadline);
}

Status RecvFrame(Socket& socket, uint64_t max_payload, Deadline deadline, FrameHeader* header,
                 std::vector<uint8_t>* payload) {
  uint8_t raw[kFrameHeaderSize];
  CADRE_RETURN_IF_ERROR(socket.RecvAll(raw, sizeof(raw), deadline));
  CADRE_RETURN_IF_ERROR(DecodeFrameHeader(raw, max_payload, header));
  payload->resize(header->length);
  Status s = socket.RecvAll(payload->data(), payload->size(), deadline);
  if (!s.ok()) return s.WithContext("truncated frame payload");
  return Status::Ok();
}

void FrameReader::Append(const uint8_t* data, size_t size) {
  if (!status_.ok()) return;
  // Compact once the consumed prefix dominates, so the buffer does not grow without bound.
  if (consumed_ > 0 && consumed_ >= buffer_.size() / 2) {
    buffer_.erase(buffer_.begin(), buffer_.begin() + static_cast<ptrdiff_t>(consumed_));
    consumed_ = 0;
  }
  buffer_.insert(buffer_.end(), data, data + size);
}

bool FrameReader::Next(FrameHeader* header, std::vector<uint8_t>* payload) {
  if (!status_.ok() || pending() < kFrameHeaderSize) return false;
  std::span<const uint8_t> rest(buffer_.data() + consumed_, pending());
  FrameHeader h;
  status_ = DecodeFrameHeader(rest, max_payload_, &h);
  if (!status_.ok()) return false;
  if (rest.size() - kFrameHeaderSize < h.length) return false;
  const uint8_t* body = rest.data() + kFrameHeaderSize;
  payload->assign(body, body + h.length);
  consumed_ += kFrameHeaderSize + h.length;
  if (consumed_ == buffer_.size()) {
    buffer_.clear();
    consumed_ = 0;
  }
  *header = h;
  return true;
}

}  // namespace cadre::net
