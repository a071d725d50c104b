#include "cadre/netem/network_emulator.h"

#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <thread>

#include "cadre/base/logging.h"
#include "cadre/base/printable.h"
#include "cadre/netem/command.h"
#include "cadre/netem/traffic_control.h"
#include "cadre/netem/tun_device.h"

namespace cadre::netem {
namespace {

constexpr int kMaxHosts = 1000;
constexpr size_t kMaxJobId = 40;
constexpr const char* kBridge = "br0";
constexpr const char* kSwitchDevice = "sw0";  // the switch's TUN in relay mode
constexpr const char* kHostDevice = "eth0";
constexpr const char* kPrefixLength = "/15";

bool ValidJobId(const std::string& id) {
  if (id.empty() || id.size() > kMaxJobId || id == "." || id == "..") return false;
  for (char c : id) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '_' || c == '.';
    if (!ok) return false;
  }
  return true;
}

}  // namespace

Status CheckJobId(const std::string& id) {
  if (ValidJobId(id)) return Status::Ok();
  return InvalidArgument("job id " + QuotedText(id) + " must be 1.." + std::to_string(kMaxJobId) +
                         " characters of [A-Za-z0-9_.-]");
}

namespace {

// RFC 1123 host name labels joined by dots, at most 64 bytes (what sethostname accepts).
bool ValidHostName(const std::string& name) {
  if (name.empty() || name.size() > 64 || name.front() == '-' || name.front() == '.') return false;
  for (char c : name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '.';
    if (!ok) return false;
  }
  return true;
}

Status ValidateOptions(const EmulatorOptions& o) {
  if (o.hosts < 1 || o.hosts > kMaxHosts) {
    return InvalidArgument("netem: hosts must be 1.." + std::to_string(kMaxHosts) + ", got " +
                           std::to_string(o.hosts));
  }
  if (o.link.rate_bits_per_s == 0) return InvalidArgument("netem: the link has no rate");
  if (o.link.loss < 0.0 || o.link.loss >= 1.0) {
    return InvalidArgument("netem: link loss must be in [0, 1)");
  }
  if (Status id = CheckJobId(o.job_id); !id.ok()) return id.WithContext("netem");
  if (!o.host_names.empty() && static_cast<int>(o.host_names.size()) != o.hosts) {
    return InvalidArgument("netem: " + std::to_string(o.host_names.size()) +
                           " host names given for " + std::to_string(o.hosts) + " hosts");
  }
  for (size_t i = 0; i < o.host_names.size(); ++i) {
    if (!ValidHostName(o.host_names[i])) {
      return InvalidArgument("netem: host name '" + o.host_names[i] + "' of host " +
                             std::to_string(i) + " is not a valid host name");
    }
  }
  if (o.state_dir.empty()) return InvalidArgument("netem: empty state directory");
  return Status::Ok();
}

Status OpenNetns(const std::string& name, int* fd) {
  std::string path = std::string(kNetnsRunDir) + "/" + name;
  *fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (*fd < 0) return IoError("cannot open " + path + ": " + std::strerror(errno));
  return Status::Ok();
}

}  // namespace

std::string BenchmarkAddress(uint32_t offset) {
  uint32_t a = (198u << 24) | (18u << 16) | (offset & 0x1ffff);
  char buf[16];
  std::snprintf(buf, sizeof(buf), "%u.%u.%u.%u", a >> 24, (a >> 16) & 255, (a >> 8) & 255, a & 255);
  return buf;
}

Status NetworkEmulator::Create(const EmulatorOptions& options,
                               std::unique_ptr<NetworkEmulator>* out) {
  CADRE_RETURN_IF_ERROR(ValidateOptions(options));
  Deadline sweep_deadline(options.command_timeout * 4);
  Status swept = SweepStaleJobs(options.state_dir, "cadre-", sweep_deadline);
  if (!swept.ok()) {
    CADRE_LOG(WARNING) << swept.message();
  }

  std::unique_ptr<NetworkEmulator> emu(new NetworkEmulator());
  emu->link_ = options.link;
  emu->command_timeout_ = options.command_timeout;
  emu->log_warnings_ = options.log_warnings;
  const std::string prefix = "cadre-" + options.job_id;
  emu->state_path_ = options.state_dir + "/" + prefix + ".state";
  emu->switch_netns_ = prefix + "-sw";
  emu->switch_address_ = BenchmarkAddress(1);
  std::vector<std::string> names = {emu->switch_netns_};
  for (int i = 0; i < options.hosts; ++i) {
    EmulatedHost host;
    host.netns = prefix + "-h" + std::to_string(i);
    host.netns_path = std::string(kNetnsRunDir) + "/" + host.netns;
    host.address = BenchmarkAddress(static_cast<uint32_t>(2 + i));
    host.host_name = options.host_names.empty() ? host.netns : options.host_names[i];
    host.device = kHostDevice;
    names.push_back(host.netns);
    emu->hosts_.push_back(std::move(host));
    emu->host_links_.push_back(options.link);
  }

  // The sweep above removed the records of dead owners, so a record still here is a live job.
  JobState existing;
  if (ReadJobState(emu->state_path_, &existing).ok()) {
    emu->destroyed_ = true;  // nothing of ours to remove
    return Status(Code::kAlreadyExists, "netem: job '" + options.job_id +
                                            "' already has an emulated network, owned by "
                                            "running pid " +
                                            std::to_string(existing.owner_pid));
  }
  for (const auto& name : names) {
    if (NetnsExists(name)) {
      emu->destroyed_ = true;
      return Status(Code::kAlreadyExists, "netem: network namespace " + name +
                                              " already exists and no cadre job "
                                              "owns it; remove it with `ip netns delete " +
                                              name + "`");
    }
  }
  // Recorded before anything exists, so that no kill can leave an unrecorded namespace.
  CADRE_RETURN_IF_ERROR(WriteJobState(emu->state_path_, StateForThisProcess(names)));

  Status built = emu->Build(options);
  if (!built.ok()) {
    Status cleaned = emu->Destroy();
    if (!cleaned.ok()) {
      CADRE_LOG(WARNING) << "netem: cleanup after failure: " << cleaned.message();
    }
    return built;
  }
  *out = std::move(emu);
  return Status::Ok();
}

std::unique_ptr<NetworkEmulator> NetworkEmulator::CreateOrThrow(const EmulatorOptions& options) {
  std::unique_ptr<NetworkEmulator> emu;
  ThrowIfError(Create(options, &emu));
  return emu;
}

Status NetworkEmulator::Build(const EmulatorOptions& options) {
  Deadline deadline(command_timeout_ * (8 + 12 * static_cast<int64_t>(hosts_.size())));
  const std::string& sw = switch_netns_;
  CADRE_RETURN_IF_ERROR(RunChecked({"ip", "netns", "add", sw}, deadline));
  created_.push_back(sw);
  CADRE_RETURN_IF_ERROR(OpenNetns(sw, &switch_fd_));
  CADRE_RETURN_IF_ERROR(RunChecked({"ip", "-n", sw, "link", "set", "lo", "up"}, deadline));
  bool use_relay = false;
  CADRE_RETURN_IF_ERROR(ChooseRelay(options, deadline, &use_relay));
  return use_relay ? BuildRelayNetwork(options, deadline) : BuildKernelNetwork(options, deadline);
}

Status NetworkEmulator::ChooseRelay(const EmulatorOptions& options, Deadline deadline,
                                    bool* use_relay) {
  *use_relay = options.emulation == LinkEmulation::kRelay;
  if (options.emulation != LinkEmulation::kAuto || !link_.wants_delay_or_loss()) {
    return Status::Ok();
  }
  Status netem = ProbeNetem(switch_netns_, deadline);
  if (netem.ok()) return Status::Ok();
  if (netem.code() != Code::kUnavailable) return netem;
  Status tun = CheckTunSupport();
  if (tun.ok()) {
    *use_relay = true;
  } else if (log_warnings_) {
    // The kernel path then reports the missing netem (or fails with require_delay_loss).
    CADRE_LOG(WARNING) << "netem: no netem qdisc and no TUN devices for the user-space relay: "
                       << tun.message();
  }
  return Status::Ok();
}

Status NetworkEmulator::BuildKernelNetwork(const EmulatorOptions& options, Deadline deadline) {
  const std::string& sw = switch_netns_;
  CADRE_RETURN_IF_ERROR(
      RunChecked({"ip", "-n", sw, "link", "add", kBridge, "type", "bridge"}, deadline));
  CADRE_RETURN_IF_ERROR(RunChecked(
      {"ip", "-n", sw, "addr", "add", switch_address_ + kPrefixLength, "dev", kBridge}, deadline));
  CADRE_RETURN_IF_ERROR(RunChecked({"ip", "-n", sw, "link", "set", kBridge, "up"}, deadline));

  for (int i = 0; i < size(); ++i) CADRE_RETURN_IF_ERROR(BuildHost(i, deadline));

  // Shaping. The first hop also probes for netem: without it, the rate limit still applies.
  delay_loss_emulated_ = true;
  for (int i = 0; i < size(); ++i) {
    bool netem_missing = false;
    CADRE_RETURN_IF_ERROR(
        ShapeHost(i, link_, options.require_delay_loss, deadline, &netem_missing));
    if (netem_missing) delay_loss_emulated_ = false;
  }
  return Status::Ok();
}

Status NetworkEmulator::BuildRelayNetwork(const EmulatorOptions& options, Deadline deadline) {
  std::vector<int> fds;  // the relay owns them once started; closed here on any failure
  Status built = [&]() -> Status {
    CADRE_RETURN_IF_ERROR(
        AddTun(switch_fd_, switch_netns_, kSwitchDevice, switch_address_, deadline, &fds));
    for (int i = 0; i < size(); ++i) {
      CADRE_RETURN_IF_ERROR(AddHostNamespace(i, deadline));
      CADRE_RETURN_IF_ERROR(AddTun(host_fds_[i], hosts_[i].netns, hosts_[i].device,
                                   hosts_[i].address, deadline, &fds));
    }
    return Status::Ok();
  }();
  if (!built.ok()) {
    for (int fd : fds) close(fd);
    return built;
  }
  delay_loss_emulated_ = true;
  return LinkRelay::Start(std::move(fds), link_, options.loss_seed, kTunPacketPrefix, &relay_);
}

Status NetworkEmulator::AddTun(int netns_fd, const std::string& netns, const std::string& device,
                               const std::string& address, Deadline deadline,
                               std::vector<int>* fds) {
  int fd = -1;
  Status opened;
  CADRE_RETURN_IF_ERROR(RunInNetns(netns_fd, netns, [&] { opened = OpenTunDevice(device, &fd); }));
  CADRE_RETURN_IF_ERROR(opened.WithContext("netem: in " + netns));
  fds->push_back(fd);
  // The queue a veth or Ethernet device has by default (a TUN has 500): what a sender may
  // burst while the relay thread waits for a core.
  CADRE_RETURN_IF_ERROR(RunChecked({"ip", "-n", netns, "link", "set", device, "mtu",
                                    std::to_string(kTunMtu), "txqueuelen", "1000", "up"},
                                   deadline));
  return RunChecked({"ip", "-n", netns, "addr", "add", address + kPrefixLength, "dev", device},
                    deadline);
}

Status NetworkEmulator::ShapeHost(int i, const LinkSpec& link, bool require_delay_loss,
                                  Deadline deadline, bool* netem_missing) {
  const EmulatedHost& h = hosts_[i];
  const std::string bridge_port = "v" + std::to_string(i);
  const HopShape hop = HopShapeFor(link);
  // Once netem is known to be missing, later hops do not ask again (and warn only once).
  bool with_netem = link.wants_delay_or_loss() && delay_loss_emulated_;
  *netem_missing = link.wants_delay_or_loss() && !delay_loss_emulated_;
  if (*netem_missing && require_delay_loss) {
    return Status(Code::kUnavailable, "netem: link " + link.ToString() +
                                          " asks for delay/loss, but this kernel has no netem "
                                          "qdisc (sch_netem) to emulate them");
  }
  for (int end = 0; end < 2; ++end) {
    const std::string& ns = end == 0 ? h.netns : switch_netns_;
    const std::string& dev = end == 0 ? h.device : bridge_port;
    Status s = ShapeEgress(ns, dev, hop, with_netem, deadline);
    if (s.code() == Code::kUnavailable) {
      std::string why = "link " + link.ToString() +
                        " asks for delay/loss, but this kernel has no netem qdisc (sch_netem) to "
                        "emulate them (" +
                        s.message() + ")";
      if (require_delay_loss) return Status(Code::kUnavailable, "netem: " + why);
      if (log_warnings_) {
        CADRE_LOG(WARNING) << "netem: " << why << "; emulating the rate "
                           << FormatRate(link.rate_bits_per_s) << " only";
      }
      with_netem = false;
      *netem_missing = true;
      continue;  // ShapeEgress installed the rate limit before netem failed
    }
    CADRE_RETURN_IF_ERROR(s.WithContext("netem: shaping " + dev + " in " + ns));
  }
  host_links_[i] = link;
  return Status::Ok();
}

Status NetworkEmulator::CheckHost(int i) const {
  if (destroyed_) return InvalidArgument("netem: the emulated network was destroyed");
  if (i < 0 || i >= size()) {
    return InvalidArgument("netem: no host " + std::to_string(i) + " (have " +
                           std::to_string(size()) + ")");
  }
  return Status::Ok();
}

Status NetworkEmulator::SetHostLink(int i, const LinkSpec& link, bool require_delay_loss) {
  CADRE_RETURN_IF_ERROR(CheckHost(i));
  if (link.rate_bits_per_s == 0) return InvalidArgument("netem: the link has no rate");
  if (link.loss < 0.0 || link.loss >= 1.0) {
    return InvalidArgument("netem: link loss must be in [0, 1)");
  }
  if (relay_) {
    relay_->SetHostLink(i, link);
    host_links_[i] = link;
    return Status::Ok();
  }
  bool netem_missing = false;
  CADRE_RETURN_IF_ERROR(
      ShapeHost(i, link, require_delay_loss, Deadline(command_timeout_ * 8), &netem_missing));
  if (netem_missing) delay_loss_emulated_ = false;
  return Status::Ok();
}

Status NetworkEmulator::SetHostConnected(int i, bool connected) {
  CADRE_RETURN_IF_ERROR(CheckHost(i));
  if (relay_) {
    relay_->SetHostConnected(i, connected);
    return Status::Ok();
  }
  return RunChecked({"ip", "-n", switch_netns_, "link", "set", "v" + std::to_string(i),
                     connected ? "up" : "down"},
                    Deadline(command_timeout_));
}

Status NetworkEmulator::ReconnectHost(int i) {
  CADRE_RETURN_IF_ERROR(CheckHost(i));
  CADRE_RETURN_IF_ERROR(
      RunChecked({"ip", "-n", hosts_[i].netns, "link", "set", hosts_[i].device, "up"},
                 Deadline(command_timeout_)));
  return SetHostConnected(i, true);
}

Status NetworkEmulator::AddHostNamespace(int i, Deadline deadline) {
  const EmulatedHost& h = hosts_[i];
  CADRE_RETURN_IF_ERROR(RunChecked({"ip", "netns", "add", h.netns}, deadline));
  created_.push_back(h.netns);
  int fd = -1;
  CADRE_RETURN_IF_ERROR(OpenNetns(h.netns, &fd));
  host_fds_.push_back(fd);
  return RunChecked({"ip", "-n", h.netns, "link", "set", "lo", "up"}, deadline);
}

Status NetworkEmulator::BuildHost(int i, Deadline deadline) {
  const EmulatedHost& h = hosts_[i];
  const std::string& sw = switch_netns_;
  const std::string port = "v" + std::to_string(i);
  CADRE_RETURN_IF_ERROR(AddHostNamespace(i, deadline));
  // Both ends are made in the switch's namespace and the host's end is moved in one command, so
  // no interface ever appears in the caller's namespace.
  CADRE_RETURN_IF_ERROR(RunChecked({"ip", "-n", sw, "link", "add", port, "type", "veth", "peer",
                                    "name", h.device, "netns", h.netns},
                                   deadline));
  CADRE_RETURN_IF_ERROR(
      RunChecked({"ip", "-n", sw, "link", "set", port, "master", kBridge, "up"}, deadline));
  CADRE_RETURN_IF_ERROR(RunChecked(
      {"ip", "-n", h.netns, "addr", "add", h.address + kPrefixLength, "dev", h.device}, deadline));
  return RunChecked({"ip", "-n", h.netns, "link", "set", h.device, "up"}, deadline);
}

NetworkEmulator::~NetworkEmulator() {
  Status s = Destroy();
  if (!s.ok()) {
    CADRE_LOG(ERROR) << "netem: " << s.message();
  }
}

Status NetworkEmulator::Destroy() {
  if (destroyed_) return Status::Ok();
  destroyed_ = true;
  // The relay first: closing its TUN descriptors removes the devices.
  if (relay_) relay_->Stop();
  for (int fd : host_fds_) close(fd);
  host_fds_.clear();
  if (switch_fd_ >= 0) close(switch_fd_);
  switch_fd_ = -1;
  // Hosts first, the switch last (the reverse of creation): its namespace holds the bridge.
  std::vector<std::string> names(created_.rbegin(), created_.rend());
  Deadline deadline(command_timeout_ * static_cast<int64_t>(names.size()));
  Status s = DeleteNamespaces(names, deadline);
  if (!s.ok()) {
    return s.WithContext("cannot remove emulated network (record kept in " + state_path_ +
                         " for a later sweep)");
  }
  std::remove(state_path_.c_str());
  return Status::Ok();
}

int NetworkEmulator::EnterHost(int i) const noexcept {
  if (i < 0 || i >= static_cast<int>(host_fds_.size())) return EINVAL;
  if (setns(host_fds_[i], CLONE_NEWNET) != 0) return errno;
  if (unshare(CLONE_NEWUTS) != 0) return errno;
  const std::string& name = hosts_[i].host_name;
  if (sethostname(name.data(), name.size()) != 0) return errno;
  return 0;
}

Status NetworkEmulator::RunInNetns(int fd, const std::string& name,
                                   const std::function<void()>& fn) const {
  int err = 0;
  std::exception_ptr thrown;
  std::thread worker([&] {
    if (setns(fd, CLONE_NEWNET) != 0) {
      err = errno;
      return;
    }
    try {
      fn();
    } catch (...) {
      thrown = std::current_exception();
    }
  });
  worker.join();
  if (err != 0) return IoError("netem: cannot enter namespace " + name + ": " + std::strerror(err));
  if (thrown) std::rethrow_exception(thrown);
  return Status::Ok();
}

Status NetworkEmulator::RunInHost(int i, const std::function<void()>& fn) const {
  if (i < 0 || i >= static_cast<int>(host_fds_.size())) {
    return InvalidArgument("netem: no host " + std::to_string(i) + " (have " +
                           std::to_string(host_fds_.size()) + ")");
  }
  return RunInNetns(host_fds_[i], hosts_[i].netns, fn);
}

Status NetworkEmulator::RunInSwitch(const std::function<void()>& fn) const {
  if (switch_fd_ < 0) return InvalidArgument("netem: the emulated network was destroyed");
  return RunInNetns(switch_fd_, switch_netns_, fn);
}

Status CheckNetnsSupport(Duration timeout) {
  if (geteuid() != 0) {
    return Status(Code::kUnavailable, "network emulation needs root (creates network namespaces)");
  }
  Deadline deadline(timeout);
  (void)SweepDeadProbes(deadline);  // best effort: leftovers of killed probes
  const std::string probe = ProbeNamespaceName(getpid());
  Status s = RunChecked({"ip", "netns", "add", probe}, deadline);
  if (!s.ok()) {
    return Status(Code::kUnavailable, "cannot create network namespaces: " + s.message());
  }
  s = RunChecked(
      {"ip", "-n", probe, "link", "add", "probe0", "type", "veth", "peer", "name", "probe1"},
      deadline);
  Status removed = DeleteNamespaces({probe}, deadline);
  if (!s.ok()) return Status(Code::kUnavailable, "cannot create veth links: " + s.message());
  if (!removed.ok()) return Status(Code::kUnavailable, removed.message());
  return Status::Ok();
}

}  // namespace cadre::netem
