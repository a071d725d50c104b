// NetworkEmulator: N emulated hosts on one machine, for running learners as if on separate nodes
// joined by links of a given rate (and delay/loss where the kernel can emulate them).
//
// Topology (all of it in namespaces this object creates; the caller's namespace is untouched):
//
//   netns cadre-<job>-sw:   bridge br0, address 198.18.0.1/15 (the "switch"; a runner can serve
//                           the job's store there, see RunInSwitch)
//        |  veth v<i>  (egress shaped: the switch-to-host direction, the host's download)
//        |  veth eth0  (egress shaped: the host-to-switch direction, the host's upload)
//   netns cadre-<job>-h<i>: eth0 198.18.0.<2+i>/15, lo up
//
// Addresses come from 198.18.0.0/15 only (RFC 2544's benchmarking range), so emulated traffic
// never collides with a real network. Concurrent jobs have separate bridges, so their addresses
// may repeat without conflict.
//
// Lifetime: everything is removed by Destroy() or the destructor, however the owner unwinds. If
// the owner is killed outright, a record in the state directory lets SweepStaleJobs (called by
// every Create) remove the leftovers. Processes still inside a host namespace keep it alive until
// they exit, but its name and links are gone.
//
// How links are shaped (EmulatorOptions::emulation): in the kernel, with htb (and netem for delay
// and loss) on veth pairs joined by a bridge; or, when delay/loss are asked for and the kernel has
// no netem, by a user-space relay (LinkRelay): every endpoint gets a TUN device instead of a veth
// and a thread in this process moves the packets between them with the same rate/delay/loss
// semantics. Addresses, names, EnterHost/RunIn* and the fault tools are the same either way.
//
// Requires root (CAP_SYS_ADMIN and CAP_NET_ADMIN) and iproute2's `ip` and `tc`.
// Thread-safety: const methods may be called concurrently; Destroy must not race with them.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cadre/base/deadline.h"
#include "cadre/base/status.h"
#include "cadre/netem/job_state.h"
#include "cadre/netem/link_relay.h"
#include "cadre/netem/link_spec.h"

namespace cadre::netem {

enum class LinkEmulation {
  // The kernel (htb, plus netem for delay/loss) when it can do everything asked; the relay when
  // delay or loss are asked for and the kernel has no netem (but can make TUN devices).
  kAuto,
  kKernel,  // always tc; delay/loss without netem follow `require_delay_loss`
  kRelay,   // always the user-space relay, even for a rate alone (tests, comparisons)
};

struct EmulatorOptions {
  int hosts = 2;  // 1..1000
  LinkSpec link;  // rate is required; delay/loss optional
  // Names the namespaces (cadre-<job_id>-h<i>, cadre-<job_id>-sw): 1..40 of [A-Za-z0-9_.-].
  std::string job_id;
  LinkEmulation emulation = LinkEmulation::kAuto;
  // When the link asks for delay or loss and neither netem nor the relay can emulate them: true
  // makes Create fail with kUnavailable; false logs one warning and emulates the rate only.
  bool require_delay_loss = false;
  uint64_t loss_seed = 1;  // the relay's loss decisions (the kernel's netem has its own)
  // The one warning about missing netem goes to the log unless the caller reports
  // !delay_loss_emulated() itself (as `cadre run` does, in the job's messages).
  bool log_warnings = true;
  // Host names set (in a private UTS namespace) by EnterHost; empty means the netns names.
  std::vector<std::string> host_names;
  std::string state_dir = kDefaultStateDir;
  Duration command_timeout = std::chrono::seconds(20);  // per ip/tc command
};

struct EmulatedHost {
  std::string netns;       // cadre-<job>-h<i>
  std::string netns_path;  // /run/netns/cadre-<job>-h<i>
  std::string address;     // 198.18.0.<2+i>, dotted quad
  std::string host_name;
  std::string device;  // the host's interface: "eth0" (a veth end, or a TUN with the relay)
};

class NetworkEmulator {
 public:
  // Builds the whole network or nothing: on failure, what was created is removed again.
  // Errors: kInvalidArgument (options), kAlreadyExists (a live job with that id, or a namespace
  // of that name made by someone else), kUnavailable (no netem and require_delay_loss), kIo (a
  // failed ip/tc command, quoted with its stderr).
  static Status Create(const EmulatorOptions& options, std::unique_ptr<NetworkEmulator>* out);
  static std::unique_ptr<NetworkEmulator> CreateOrThrow(const EmulatorOptions& options);

  ~NetworkEmulator();
  NetworkEmulator(const NetworkEmulator&) = delete;
  NetworkEmulator& operator=(const NetworkEmulator&) = delete;

  const std::vector<EmulatedHost>& hosts() const { return hosts_; }
  int size() const { return static_cast<int>(hosts_.size()); }
  const LinkSpec& link() const { return link_; }
  const std::string& switch_netns() const { return switch_netns_; }
  const std::string& switch_address() const { return switch_address_; }
  // False when delay/loss were asked for but the kernel could not emulate them.
  bool delay_loss_emulated() const { return delay_loss_emulated_; }
  // Whether the user-space relay shapes the links (else the kernel does).
  bool relay_mode() const { return relay_ != nullptr; }
  // Ok unless the relay has stopped on an error (then no packet moves any more): a runner polls
  // this and fails its job clearly instead of letting the processes wait on a dead network.
  Status health() const { return relay_ ? relay_->health() : Status::Ok(); }
  // The relay's packet counts; all zero in kernel mode.
  RelayStats relay_stats() const { return relay_ ? relay_->stats() : RelayStats{}; }

  // For a child between fork and exec: moves the calling process into host i's network namespace
  // and a new UTS namespace with the host's name. Async-signal-safe (setns, unshare, sethostname
  // on data prepared in Create). Returns 0 or an errno value; EINVAL for a bad index.
  int EnterHost(int i) const noexcept;

  // Runs fn on a new thread that has joined host i's (or the switch's) network namespace, and
  // waits for it. Sockets created by fn belong to that namespace and keep working from any
  // thread afterwards: this is how a runner listens on an emulated address. Exceptions thrown by
  // fn are rethrown here. kInvalidArgument for a bad index, kIo when setns fails.
  Status RunInHost(int i, const std::function<void()>& fn) const;
  Status RunInSwitch(const std::function<void()>& fn) const;

  // Fault and what-if tools for tests and benchmarks; safe while processes run in the hosts.
  // SetHostLink re-shapes both directions of host i's link. In relay mode anything goes; in
  // kernel mode delay/loss need netem (without it: kUnavailable when `require_delay_loss`, else
  // a warning), so a network that will get delays later on a kernel without netem should be
  // created with LinkEmulation::kRelay.
  // SetHostConnected(i, false) takes the switch's port to host i down: host i is cut off (its
  // packets are dropped, connections stall) until it is connected again.
  Status SetHostLink(int i, const LinkSpec& link, bool require_delay_loss = false);
  Status SetHostConnected(int i, bool connected);
  // Brings host i's link back whichever end went down: its own interface (a learner that took
  // it down, `ip link set eth0 down`) and the switch's port. cadre run does it for every host
  // before a restart.
  Status ReconnectHost(int i);
  // The link host i has now (the options' link unless SetHostLink changed it).
  const LinkSpec& host_link(int i) const { return host_links_.at(i); }

  // Removes the namespaces (and with them the links) and the state record. Idempotent. On
  // failure the record stays, so a later sweep retries.
  Status Destroy();

 private:
  NetworkEmulator() = default;
  Status Build(const EmulatorOptions& options);
  // Decides between the kernel and the relay (probing for netem in the switch namespace).
  Status ChooseRelay(const EmulatorOptions& options, Deadline deadline, bool* use_relay);
  Status BuildKernelNetwork(const EmulatorOptions& options, Deadline deadline);
  Status BuildRelayNetwork(const EmulatorOptions& options, Deadline deadline);
  Status AddHostNamespace(int i, Deadline deadline);
  Status BuildHost(int i, Deadline deadline);
  // Creates a TUN device inside a namespace and gives it an address; appends its fd to *fds.
  Status AddTun(int netns_fd, const std::string& netns, const std::string& device,
                const std::string& address, Deadline deadline, std::vector<int>* fds);
  // Shapes both ends of host i's link; *netem_missing is set when delay/loss could not be had.
  Status ShapeHost(int i, const LinkSpec& link, bool require_delay_loss, Deadline deadline,
                   bool* netem_missing);
  Status CheckHost(int i) const;
  Status RunInNetns(int fd, const std::string& name, const std::function<void()>& fn) const;

  LinkSpec link_;
  std::string switch_netns_;
  std::string switch_address_;
  std::vector<EmulatedHost> hosts_;
  std::vector<LinkSpec> host_links_;
  std::vector<std::string> created_;  // namespaces this object made, in order of creation
  std::vector<int> host_fds_;         // O_CLOEXEC fds of the host namespaces, opened in Create
  int switch_fd_ = -1;
  std::unique_ptr<LinkRelay> relay_;  // relay mode only
  bool delay_loss_emulated_ = true;
  bool log_warnings_ = true;
  std::string state_path_;
  Duration command_timeout_{0};
  bool destroyed_ = false;
};

// Ok when `id` may be an EmulatorOptions::job_id (1..40 of [A-Za-z0-9_.-], not "." or ".."),
// else kInvalidArgument saying so, the id quoted.
Status CheckJobId(const std::string& id);

// 198.18.0.0 + offset as a dotted quad; offset must be below 2^17 (the /15).
std::string BenchmarkAddress(uint32_t offset);

// Whether this process may create network namespaces: Ok, or kUnavailable saying why (not root,
// no `ip`, or `ip netns add` refused — e.g. inside an unprivileged container). Creates and
// removes one probe namespace. For tests that skip themselves, and for a clear CLI error.
Status CheckNetnsSupport(Duration timeout = std::chrono::seconds(20));

}  // namespace cadre::netem
