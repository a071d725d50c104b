// `cadre netem`: emulated nodes for benchmarks and experiments (root only).
//   cadre netem exec --hosts N --link 1gbit,1ms -- CMD ARGS...   CMD once per emulated host
//   cadre netem sweep                                             remove leftovers of dead jobs
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <functional>
#include <iostream>
#include <memory>

#include "cadre/base/printable.h"
#include "cadre/cli/commands.h"
#include "cadre/cli/support.h"
#include "cadre/netem/host_exec.h"
#include "cadre/netem/network_emulator.h"

namespace cadre::cli {
namespace {

// A CLI11 check from a Status-returning one: its message, or "" when the value is good.
CLI::Validator StatusCheck(std::function<Status(const std::string&)> check, const char* name) {
  return CLI::Validator(
      [check = std::move(check)](std::string& value) {
        Status s = check(value);
        return s.ok() ? std::string() : s.message();
      },
      "", name);
}

struct ExecArgs {
  int hosts = 2;
  std::string link;
  std::string job_id;
  bool require_delay = false;
  std::string emulation = "auto";
  double timeout_s = 0;
  std::string state_dir = netem::kDefaultStateDir;
  std::vector<std::string> command;
};

int RunExec(const ExecArgs& args) {
  SignalsDeferred deferred;
  netem::EmulatorOptions options;
  options.hosts = args.hosts;
  options.link = netem::ParseLinkSpecOrThrow(args.link);
  options.job_id = args.job_id.empty() ? "exec-" + std::to_string(getpid()) : args.job_id;
  options.require_delay_loss = args.require_delay;
  options.log_warnings = false;  // the summary line below says it
  options.state_dir = args.state_dir;
  options.emulation = args.emulation == "relay"    ? netem::LinkEmulation::kRelay
                      : args.emulation == "kernel" ? netem::LinkEmulation::kKernel
                                                   : netem::LinkEmulation::kAuto;
  auto emu = netem::NetworkEmulator::CreateOrThrow(options);
  std::cerr << "cadre netem: " << emu->size() << " hosts (" << emu->hosts().front().address
            << " to " << emu->hosts().back().address << "), link " << emu->link().ToString()
            << (emu->relay_mode() ? " (user-space relay)" : " (tc)")
            << (emu->delay_loss_emulated() ? "" : " (rate only: no netem to add delay/loss)")
            << "\n";
  netem::HostExecOptions exec;
  if (args.timeout_s > 0) {
    exec.deadline = Deadline(std::chrono::milliseconds(static_cast<int64_t>(args.timeout_s * 1e3)));
  }
  int code = 0;
  Status s = netem::RunOnEveryHost(*emu, args.command, exec, &code);
  if (!s.ok()) std::cerr << "cadre netem: " << s.message() << "\n";
  if (emu->relay_mode()) {
    netem::RelayStats r = emu->relay_stats();
    std::cerr << "cadre netem: relay delivered " << r.delivered << " packets; dropped " << r.lost
              << " (emulated loss), " << r.queue_full << " (full buffers), " << r.disconnected
              << " (cut-off hosts), " << r.unroutable << " (unroutable), " << r.refused
              << " (refused)\n";
  }
  ThrowIfError(emu->Destroy());
  if (s.code() == Code::kAborted && code == 0) code = 130;
  if (!s.ok() && code == 0) code = 1;
  return code;
}

}  // namespace

void AddNetemCommand(CLI::App& app, int* exit_code) {
  auto* netem = app.add_subcommand(
      "netem", "Emulated nodes: network namespaces joined by shaped links (needs root)");
  netem->require_subcommand(1);

  auto args = std::make_shared<ExecArgs>();
  auto* exec = netem->add_subcommand(
      "exec",
      "Run CMD once per emulated host, with CADRE_NETEM_HOST/HOSTS/ADDRESS/ADDRESSES set; the "
      "exit code is the first failure in host order");
  exec->add_option("--hosts", args->hosts, "Number of emulated hosts")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  // Checked while parsing, so that a bad value is a usage error naming the flag.
  exec->add_option("--link", args->link, "Link of each host: RATE[,DELAY[,LOSS]], e.g. 1gbit,1ms")
      ->required()
      ->check(StatusCheck(
          [](const std::string& v) {
            netem::LinkSpec link;
            return netem::ParseLinkSpec(v, &link);
          },
          "LINK"));
  exec->add_option("--job-id", args->job_id,
                   "Names the namespaces cadre-ID-h<i> (default exec-PID)")
      ->check(StatusCheck(netem::CheckJobId, "JOB_ID"));
  exec->add_flag("--require-delay", args->require_delay,
                 "Fail instead of warning when the kernel cannot emulate delay/loss (no netem)");
  exec->add_option("--emulation", args->emulation,
                   "auto: tc, or the user-space relay when delay/loss are asked for and the "
                   "kernel has no netem; kernel: tc only; relay: the relay even for a rate")
      ->check(CLI::IsMember({"auto", "kernel", "relay"}))
      ->capture_default_str();
  exec->add_option("--timeout", args->timeout_s,
                   "Kill the processes after this many seconds (default: never)")
      ->check(StatusCheck(
          [](const std::string& v) {
            // CLI::Range lets "nan" through, and -1 meant no timeout without saying so.
            char* end = nullptr;
            double seconds = std::strtod(v.c_str(), &end);
            if (end != v.c_str() && *end == '\0' && seconds > 0 && seconds <= 3.0e7) {
              return Status::Ok();
            }
            return InvalidArgument("must be above 0 and at most 30000000 seconds, got " +
                                   QuotedText(v));
          },
          "SECONDS"));
  exec->add_option("--state-dir", args->state_dir, "Where ownership records live")
      ->type_name(kDirType)
      ->capture_default_str();
  exec->add_option("command", args->command, "The command to run on every host (after --)")
      ->required();
  exec->callback([args, exit_code] { *exit_code = RunExec(*args); });

  auto state_dir = std::make_shared<std::string>(netem::kDefaultStateDir);
  auto* sweep = netem->add_subcommand(
      "sweep", "Remove the namespaces of emulated networks whose owning process is gone");
  sweep->add_option("--state-dir", *state_dir, "Where ownership records live")
      ->type_name(kDirType)
      ->capture_default_str();
  sweep->callback([state_dir, exit_code] {
    std::vector<std::string> removed;
    Deadline deadline(std::chrono::seconds(120));
    Status s = netem::SweepStaleJobs(*state_dir, "cadre-", deadline, &removed);
    Status probes = netem::SweepDeadProbes(deadline, &removed);
    if (s.ok()) s = probes;
    for (const auto& name : removed) std::cout << "removed " << name << "\n";
    ThrowIfError(s);
    *exit_code = 0;
  });
}

}  // namespace cadre::cli
