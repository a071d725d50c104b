#include "cadre/netem/traffic_control.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "cadre/netem/command.h"

namespace cadre::netem {
namespace {

// Bytes the token bucket may send at once after an idle spell: one millisecond at the link rate,
// but never less than two full-size frames, or htb stalls on every GSO super-packet.
uint64_t BurstBytes(uint64_t rate_bits_per_s) {
  return std::max<uint64_t>(rate_bits_per_s / 8 / 1000, 2 * 1514);
}

// netem's queue, in packets: the default (1000) would drop at high bandwidth-delay products,
// which would look like loss nobody asked for. Sized for 4x the BDP in full-size frames.
uint64_t NetemLimit(const HopShape& hop) {
  double bdp_bytes =
      static_cast<double>(hop.rate_bits_per_s) / 8.0 * static_cast<double>(hop.delay.count()) / 1e6;
  return std::max<uint64_t>(1000, static_cast<uint64_t>(4.0 * bdp_bytes / 1514.0));
}

std::string Percent(double fraction) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.6f%%", fraction * 100.0);
  return buf;
}

}  // namespace

HopShape HopShapeFor(const LinkSpec& spec) {
  HopShape hop;
  hop.rate_bits_per_s = spec.rate_bits_per_s;
  hop.delay = spec.delay / 2;
  hop.loss = spec.loss > 0.0 ? 1.0 - std::sqrt(1.0 - spec.loss) : 0.0;
  return hop;
}

bool IsQdiscUnknown(const Status& status) {
  return !status.ok() && status.message().find("qdisc kind is unknown") != std::string::npos;
}

Status ShapeEgress(const std::string& netns, const std::string& device, const HopShape& hop,
                   bool with_netem, Deadline deadline) {
  const std::string rate = std::to_string(hop.rate_bits_per_s) + "bit";
  const std::string burst = std::to_string(BurstBytes(hop.rate_bits_per_s)) + "b";
  // Start from the device's default: the removal fails harmlessly when nothing was installed,
  // and any other problem shows in the commands that follow.
  CommandResult ignored;
  (void)RunCommand({"tc", "-n", netns, "qdisc", "del", "dev", device, "root"}, deadline, &ignored);
  CADRE_RETURN_IF_ERROR(RunChecked({"tc", "-n", netns, "qdisc", "add", "dev", device, "root",
                                    "handle", "1:", "htb", "default", "1"},
                                   deadline));
  // An explicit quantum: htb derives one from rate/r2q otherwise, which at gigabit rates is out
  // of range and fills the kernel log with warnings. With a single class it has no other effect.
  CADRE_RETURN_IF_ERROR(RunChecked(
      {"tc",  "-n",   netns, "class", "add", "dev",   device, "parent", "1:",  "classid", "1:1",
       "htb", "rate", rate,  "ceil",  rate,  "burst", burst,  "cburst", burst, "quantum", "60000"},
      deadline));
  if (!with_netem || !hop.wants_netem()) return Status::Ok();
  std::vector<std::string> argv = {
      "tc",     "-n",  netns,    "qdisc", "add",   "dev",   device,
      "parent", "1:1", "handle", "10:",   "netem", "limit", std::to_string(NetemLimit(hop))};
  if (hop.delay.count() > 0) {
    argv.insert(argv.end(), {"delay", std::to_string(hop.delay.count()) + "us"});
  }
  if (hop.loss > 0.0) argv.insert(argv.end(), {"loss", Percent(hop.loss)});
  Status s = RunChecked(argv, deadline);
  if (IsQdiscUnknown(s)) return Status(Code::kUnavailable, s.message());
  return s;
}

Status ProbeNetem(const std::string& netns, Deadline deadline) {
  Status s = RunChecked(
      {"tc", "-n", netns, "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms"}, deadline);
  if (IsQdiscUnknown(s)) return Status(Code::kUnavailable, s.message());
  CADRE_RETURN_IF_ERROR(s);
  return RunChecked({"tc", "-n", netns, "qdisc", "del", "dev", "lo", "root"}, deadline);
}

}  // namespace cadre::netem
