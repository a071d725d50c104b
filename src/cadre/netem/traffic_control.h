// Shaping one direction of an emulated link with tc: the egress of one network device inside one
// network namespace. A host's link is shaped on both veth ends, so each direction has its own
// token bucket (full duplex).
//
// The qdisc tree on a shaped device is
//     root htb (handle 1:, default class 1:1)
//       class 1:1  rate R ceil R          -- the link rate
//         qdisc netem (handle 10:)        -- per-hop delay/loss, only when asked and available
// htb is always available; netem is a kernel module that many kernels (this project's CI
// machines among them) do not have, so its absence is detected and reported, never hidden.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "cadre/base/deadline.h"
#include "cadre/base/status.h"
#include "cadre/netem/link_spec.h"

namespace cadre::netem {

// The shaping of a single hop. A packet between two hosts crosses two hops (the sender's veth,
// then the switch's veth to the receiver), so a host-to-host LinkSpec becomes two HopShapes.
struct HopShape {
  uint64_t rate_bits_per_s = 0;
  std::chrono::microseconds delay{0};
  double loss = 0.0;  // a fraction in [0, 1)

  bool wants_netem() const { return delay.count() > 0 || loss > 0.0; }
};

// Half the delay on each hop; per-hop loss p with 1 - (1 - p)^2 == spec.loss.
HopShape HopShapeFor(const LinkSpec& spec);

// Installs the rate limit on the egress of `device` in namespace `netns`, replacing whatever
// shaping the device had (so it also re-shapes a live link). When `with_netem` and the hop wants
// delay or loss, adds the netem qdisc too; if the kernel has no netem the result is kUnavailable
// (see IsQdiscUnknown) and the rate limit stays.
Status ShapeEgress(const std::string& netns, const std::string& device, const HopShape& hop,
                   bool with_netem, Deadline deadline);

// Whether the kernel has the netem qdisc: adds one to `lo` in `netns` and removes it again. Ok
// when it has, kUnavailable when it has not, kIo when tc fails for another reason.
Status ProbeNetem(const std::string& netns, Deadline deadline);

// True when `status` is tc's answer for a qdisc the kernel does not know ("Specified qdisc kind
// is unknown"), i.e. the module is missing rather than the command being wrong.
bool IsQdiscUnknown(const Status& status);

}  // namespace cadre::netem
