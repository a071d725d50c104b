// TUN devices for the user-space link emulator: a network interface whose IP packets go to, and
// come from, a file descriptor instead of a wire.
#pragma once

#include <string>

#include "cadre/base/status.h"

namespace cadre::netem {

// The MTU the emulator gives its TUN devices: large, like the GSO super-packets htb sees on veth,
// so that 1 Gbit/s is a few thousand packets a second for the relay rather than ~80000.
inline constexpr int kTunMtu = 65000;

// Creates a TUN device named `name` (IFF_TUN | IFF_NO_PI: each read or write is one whole IP
// packet) in the network namespace of the calling thread. *fd is O_NONBLOCK | O_CLOEXEC, usable
// from any thread afterwards; the device exists until the last descriptor to it is closed (or
// its namespace is deleted). Errors: kUnavailable when this kernel or process cannot make TUN
// devices (no /dev/net/tun, no CAP_NET_ADMIN), kIo otherwise.
Status OpenTunDevice(const std::string& name, int* fd);

// Whether /dev/net/tun can be opened: Ok, or kUnavailable saying why.
Status CheckTunSupport();

}  // namespace cadre::netem
