#include "cadre/netem/link_model.h"

#include <algorithm>
#include <cmath>

namespace cadre::netem {
namespace {

constexpr uint32_t kNetwork = (198u << 24) | (18u << 16);  // 198.18.0.0/15
constexpr uint32_t kNetmask = 0xfffe0000u;
constexpr uint8_t kTcp = 6;

int64_t SerializationNs(uint64_t rate_bits_per_s, size_t wire) {
  if (rate_bits_per_s == 0) return 0;
  // wire * 8e9 stays far below 2^63 for any packet (at most 2^17 bytes charged).
  return static_cast<int64_t>(
      (static_cast<uint64_t>(wire) * 8'000'000'000ull + rate_bits_per_s - 1) / rate_bits_per_s);
}

// The serialization time of the first frame of a packet of `wire` charged bytes.
int64_t FirstFrameNs(uint64_t rate_bits_per_s, size_t wire) {
  return SerializationNs(rate_bits_per_s, std::min(wire, kModelMtu + kFrameHeaderBytes));
}

}  // namespace

size_t WireBytes(const uint8_t* packet, size_t len) {
  if (len < 20 || (packet[0] >> 4) != 4) return len + kFrameHeaderBytes;
  size_t headers = static_cast<size_t>(packet[0] & 0x0f) * 4;
  const bool first_fragment = ((packet[6] & 0x1f) | packet[7]) == 0;
  // A TCP segment larger than the MTU would have been cut by TSO, every piece repeating the TCP
  // header; anything else by IP fragmentation, repeating only the IP header.
  if (packet[9] == kTcp && first_fragment && len >= headers + 20) {
    headers += static_cast<size_t>(packet[headers + 12] >> 4) * 4;
  }
  if (headers >= len || headers + 8 > kModelMtu) return len + kFrameHeaderBytes;
  const size_t payload = len - headers;
  const size_t per_frame = kModelMtu - headers;
  const size_t frames = std::max<size_t>(1, (payload + per_frame - 1) / per_frame);
  return payload + frames * (headers + kFrameHeaderBytes);
}

int RouteEndpoint(const uint8_t* packet, size_t len, int hosts) {
  if (len < 20 || (packet[0] >> 4) != 4) return -1;
  uint32_t dst = (uint32_t{packet[16]} << 24) | (uint32_t{packet[17]} << 16) |
                 (uint32_t{packet[18]} << 8) | uint32_t{packet[19]};
  if ((dst & kNetmask) != kNetwork) return -1;
  uint32_t offset = dst - kNetwork;  // the switch is .0.1, host i is 2 + i
  if (offset < 1 || offset > static_cast<uint32_t>(hosts) + 1) return -1;
  return static_cast<int>(offset - 1);
}

uint64_t BufferBytes(const LinkSpec& link) {
  const double round_trip_s = 2.0 * static_cast<double>(link.delay.count()) / 1e6;
  const double bdp = static_cast<double>(link.rate_bits_per_s) / 8.0 * round_trip_s;
  return std::max<uint64_t>(4 << 20, static_cast<uint64_t>(2.0 * bdp));
}

LinkModel::LinkModel(int hosts, const LinkSpec& link, uint64_t seed)
    : ports_(static_cast<size_t>(hosts) + 1, PortFor(link)), random_(seed) {
  ports_[0] = Port{};  // the switch: unshaped, no delay, no loss
}

LinkModel::Port LinkModel::PortFor(const LinkSpec& link) {
  Port p;
  p.rate_bits_per_s = link.rate_bits_per_s;
  p.half_delay_ns = static_cast<int64_t>(link.delay.count()) * 1000 / 2;
  p.hop_loss = link.loss > 0.0 ? 1.0 - std::sqrt(1.0 - link.loss) : 0.0;
  p.buffer_bytes = BufferBytes(link);
  return p;
}

void LinkModel::SetLink(int host, const LinkSpec& link) {
  Port& p = ports_.at(static_cast<size_t>(host) + 1);
  Port shaped = PortFor(link);
  // Packets already queued keep the times they were given.
  shaped.connected = p.connected;
  shaped.uplink_free = p.uplink_free;
  shaped.downlink_free = p.downlink_free;
  p = shaped;
}

void LinkModel::SetConnected(int host, bool connected) {
  ports_.at(static_cast<size_t>(host) + 1).connected = connected;
}

bool LinkModel::Serialize(const Port& port, int64_t* free_at, size_t wire, int64_t now,
                          int64_t not_before, int64_t* done) {
  const int64_t start = std::max(now, *free_at);
  if (port.rate_bits_per_s > 0) {
    // The backlog ahead of this packet, in bytes, from the time the queue needs to drain.
    const double backlog =
        static_cast<double>(start - now) * static_cast<double>(port.rate_bits_per_s) / 8e9;
    if (backlog + static_cast<double>(wire) > static_cast<double>(port.buffer_bytes)) return false;
  }
  *free_at = std::max(start + SerializationNs(port.rate_bits_per_s, wire), not_before);
  *done = *free_at;
  return true;
}

bool LinkModel::Lost(const Port& port) {
  return port.hop_loss > 0.0 && uniform_(random_) < port.hop_loss;
}

Fate LinkModel::Send(int src, int dst, size_t wire, int64_t now, int64_t* at_switch) {
  Port& from = ports_.at(static_cast<size_t>(src));
  const Port& to = ports_.at(static_cast<size_t>(dst));
  if (!from.connected || !to.connected) return Fate::kDisconnected;
  if (Lost(from)) return Fate::kLost;
  int64_t sent = 0;
  if (!Serialize(from, &from.uplink_free, wire, now, now, &sent)) return Fate::kQueueFull;
  *at_switch = sent + from.half_delay_ns;
  return Fate::kPassed;
}

Fate LinkModel::Forward(int src, int dst, size_t wire, int64_t at_switch, int64_t* deliver) {
  const Port& from = ports_.at(static_cast<size_t>(src));
  Port& to = ports_.at(static_cast<size_t>(dst));
  if (!to.connected) return Fate::kDisconnected;
  if (Lost(to)) return Fate::kLost;
  const int64_t first_frame = at_switch - SerializationNs(from.rate_bits_per_s, wire) +
                              FirstFrameNs(from.rate_bits_per_s, wire);
  const int64_t last_frame_out = at_switch + FirstFrameNs(to.rate_bits_per_s, wire);
  int64_t sent = 0;
  if (!Serialize(to, &to.downlink_free, wire, first_frame, last_frame_out, &sent)) {
    return Fate::kQueueFull;
  }
  *deliver = sent + to.half_delay_ns;
  return Fate::kPassed;
}

}  // namespace cadre::netem
