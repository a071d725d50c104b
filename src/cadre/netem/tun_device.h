// TUN devices for the user-space link emulator: a network interface whose IP packets go to, and
// come from, a file descriptor instead of a wire.
#pragma once

#include <cstddef>
#include <string>

#include "cadre/base/status.h"

namespace cadre::netem {

// The emulator's TUN devices have an Ethernet MTU, so TCP uses the segment size, windows and
// acknowledgements of a real 1500-byte link (with a 64 KB MTU, a 43 KB message was one segment
// and small receive windows stalled transfers for whole round trips), and offloads, so the
// kernel still hands the relay GSO super-packets of up to 64 KB, as htb sees on veth: 1 Gbit/s
// stays a few thousand packets a second for the relay rather than ~80000.
inline constexpr int kTunMtu = 1500;
// Each read or write of such a device starts with a struct virtio_net_hdr (IFF_VNET_HDR: how to
// segment and checksum the packet that follows); the relay passes it on unchanged.
inline constexpr size_t kTunPacketPrefix = 10;

// Creates a TUN device named `name` (IFF_TUN | IFF_NO_PI | IFF_VNET_HDR, checksum and TSO
// offloads: each read or write is kTunPacketPrefix bytes of header and one whole IP packet of
// up to 64 KB) in the network namespace of the calling thread. *fd is O_NONBLOCK | O_CLOEXEC,
// usable from any thread afterwards; the device exists until the last descriptor to it is closed
// (or its namespace is deleted). Errors: kUnavailable when this kernel or process cannot make TUN
// devices (no /dev/net/tun, no CAP_NET_ADMIN), kIo otherwise.
Status OpenTunDevice(const std::string& name, int* fd);

// Whether /dev/net/tun can be opened: Ok, or kUnavailable saying why.
Status CheckTunSupport();

}  // namespace cadre::netem
