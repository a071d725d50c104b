// LinkModel: the timing and loss model of the user-space link emulator (LinkRelay), kept apart
// from sockets and threads so that it can be tested with a made-up clock.
//
// The emulated network is a star: N hosts and the switch, each host joined to the switch by its
// own full-duplex link. A packet from host A to host B
//   1. is serialized on A's uplink at A's rate (a FIFO with a departure clock),
//   2. travels half of A's delay to the switch and, from there, half of B's delay,
//   3. is serialized on B's downlink at B's rate (so two senders into one receiver share B's rate,
//      as on a real switch port),
//   4. is delivered to B.
// The switch forwards frame by frame: a packet larger than one frame (the relay's TUN devices
// hand over TCP segments of up to 64 KB, which a real NIC would cut into MTU-sized frames) starts
// on the downlink once its first frame has arrived, not after the whole packet has. Store and
// forward of whole 64 KB packets would add half a millisecond per hop at 1 Gbit/s that no real
// network has.
// Each of the two hops drops it with the per-hop probability 1 - sqrt(1 - loss) (the same split
// as the kernel path's two netem qdiscs, so the end-to-end loss is `loss`). Each port's queue is a
// drop-tail buffer of BufferBytes: a packet that would take the backlog past it is dropped, as a
// switch would, so nothing grows without limit however fast senders write. (The relay reads from
// a sender only while its uplink is nearly idle, so in practice uplinks queue in the sender's
// TUN device, like a NIC's queue, and this buffer matters where senders converge: downlinks.)
//
// The switch itself (198.18.0.1, where a runner serves the job's store) is an endpoint with an
// unshaped link: traffic to or from it crosses only the host's link.
//
// Rates count bytes as htb counts them on the kernel path: every IP packet is charged as the
// 1500-byte Ethernet frames it would have been split into on a real link, each with its 14-byte
// header (WireBytes). With 64 KB packets on the relay's TUN devices that keeps TCP throughput at
// about 95.5% of the rate on both paths, so benchmarks compare alike.
//
// Endpoints are numbered 0 (the switch) and 1 + i (host i). Times are nanoseconds on any
// monotonic clock the caller chooses. Not thread-safe: LinkRelay serializes access.
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

#include "cadre/netem/link_spec.h"

namespace cadre::netem {

// The size of a real link's frames that the model charges for (an Ethernet MTU), and the bytes
// htb counts per frame beyond the IP packet (the Ethernet header).
inline constexpr size_t kModelMtu = 1500;
inline constexpr size_t kFrameHeaderBytes = 14;

// Bytes charged for one IP packet of `len` bytes (starting at `packet`): as many MTU-sized frames
// as it would take, each repeating the IP and TCP/UDP headers and adding kFrameHeaderBytes. A
// packet that is not IPv4 or is too short is charged as one frame of its own length.
size_t WireBytes(const uint8_t* packet, size_t len);

// The endpoint an IPv4 packet is addressed to (0: the switch, 1 + i: host i), or -1 when its
// destination is not in the emulated network (or it is not IPv4).
int RouteEndpoint(const uint8_t* packet, size_t len, int hosts);

// A port's drop-tail buffer: two bandwidth-delay products of a round trip at the link's rate and
// delay, and never less than 4 MiB (64 of the relay's largest packets, so that a TCP window of
// such packets that meets a full buffer still has enough segments left for fast retransmit).
uint64_t BufferBytes(const LinkSpec& link);

// What became of a packet at a hop.
enum class Fate { kPassed, kLost, kQueueFull, kDisconnected };

class LinkModel {
 public:
  // `hosts` hosts, all with `link`; `seed` drives the loss decisions (same seed, same drops).
  LinkModel(int hosts, const LinkSpec& link, uint64_t seed);

  int hosts() const { return static_cast<int>(ports_.size()) - 1; }
  void SetLink(int host, const LinkSpec& link);
  // A host that is not connected neither sends nor receives: its packets are dropped.
  void SetConnected(int host, bool connected);

  // Step 1-2: endpoint `src` sends `wire` bytes to endpoint `dst` at time `now`. Unless it is
  // dropped (loss, a full uplink, a disconnected host), *at_switch is when it reaches the switch
  // on its way to `dst`.
  Fate Send(int src, int dst, size_t wire, int64_t now, int64_t* at_switch);
  // When endpoint `src`'s uplink will have sent everything queued on it (the relay reads more
  // from a sender only when this is near: see LinkRelay).
  int64_t UplinkFree(int src) const { return ports_.at(static_cast<size_t>(src)).uplink_free; }
  // Step 3-4: the packet from `src` has wholly reached the switch at `at_switch` (callers must
  // present packets in the order of that time). Unless it is dropped, *deliver is when `dst`
  // gets it: its first frame reached the switch one frame after it started on `src`'s uplink,
  // and its last frame leaves on the downlink no earlier than one frame after it arrived.
  Fate Forward(int src, int dst, size_t wire, int64_t at_switch, int64_t* deliver);

 private:
  struct Port {
    uint64_t rate_bits_per_s = 0;  // 0: unshaped (the switch)
    int64_t half_delay_ns = 0;
    double hop_loss = 0.0;
    uint64_t buffer_bytes = 0;
    bool connected = true;
    int64_t uplink_free = 0;    // when the uplink finishes what it has queued
    int64_t downlink_free = 0;  // the same for the downlink
  };
  static Port PortFor(const LinkSpec& link);
  // Queues `wire` bytes, available from `now`, on a direction whose queue empties at *free_at;
  // false when it would overflow the buffer. *done is when the packet has been serialized, and
  // not before `not_before` (the last frame cannot leave before it has arrived).
  static bool Serialize(const Port& port, int64_t* free_at, size_t wire, int64_t now,
                        int64_t not_before, int64_t* done);
  bool Lost(const Port& port);

  std::vector<Port> ports_;  // [0] the switch, [1 + i] host i
  std::mt19937_64 random_;
  std::uniform_real_distribution<double> uniform_{0.0, 1.0};
};

}  // namespace cadre::netem
