// LinkSpec: how one emulated host's link to the switch is shaped, parsed from the command-line
// form "RATE[,DELAY[,LOSS]]", e.g. "1gbit", "1gbit,1ms", "100mbit,500us,0.1%".
//
// Semantics (what a test or benchmark can rely on):
// - rate: bits per second in each direction of a host's link (full duplex). Traffic from host A
//   to host B is limited by A's upload and B's download, both `rate`.
// - delay: one-way latency between two hosts (half is added on each of the two hops a packet
//   crosses), so a host-to-host round trip takes 2 x delay more than without emulation.
// - loss: end-to-end probability that a packet between two hosts is dropped (split over the two
//   hops so that the combined drop probability is `loss`).
// Delay and loss need the kernel's netem qdisc or the user-space relay; see NetworkEmulator.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "cadre/base/status.h"

namespace cadre::netem {

struct LinkSpec {
  uint64_t rate_bits_per_s = 0;
  std::chrono::microseconds delay{0};
  double loss = 0.0;  // a fraction in [0, 1)

  bool wants_delay_or_loss() const { return delay.count() > 0 || loss > 0.0; }

  // The canonical text form, which ParseLinkSpec accepts: "1gbit,1ms,0.1%".
  std::string ToString() const;
};

// Parses "RATE[,DELAY[,LOSS]]":
//   RATE  = number + bit|kbit|mbit|gbit|tbit (decimal multiples, as tc), e.g. "2.5gbit"
//   DELAY = number + us|ms|s, e.g. "1ms", "0.5ms"
//   LOSS  = number + "%", in [0, 100), e.g. "0.1%"
// Whitespace around parts is ignored. A failure is kInvalidArgument naming the bad part.
Status ParseLinkSpec(std::string_view text, LinkSpec* out);

// Throwing form for callers at an API boundary.
LinkSpec ParseLinkSpecOrThrow(std::string_view text);

// "1gbit", "250mbit", "1500kbit", "64bit": the largest unit that divides the rate exactly.
std::string FormatRate(uint64_t bits_per_s);

// "1ms", "250us", "2s": the largest unit that divides the duration exactly.
std::string FormatDelay(std::chrono::microseconds delay);

}  // namespace cadre::netem
