// `cadre ps-server`: a parameter server as a process (`cadre bench ps` is bench_ps_command.cc).
#include <iostream>

#include "cadre/base/env.h"
#include "cadre/base/status.h"
#include "cadre/cli/commands.h"
#include "cadre/cli/usage.h"
#include "cadre/ps/learner.h"
#include "cadre/ps/server.h"

namespace cadre::cli {
namespace {

struct PsServerArgs {
  std::string address;  // empty: from the learner contract
  int workers = 0;      // 0: from the learner contract
  double timeout_s = 300;
  double worker_timeout_s = 600;
};

int RunPsServer(const PsServerArgs& args) {
  ps::ServerOptions options;
  options.token = GetEnv("CADRE_JOB_TOKEN").value_or("");
  options.step_timeout = std::chrono::milliseconds(static_cast<int64_t>(args.timeout_s * 1000));
  options.worker_timeout =
      std::chrono::milliseconds(static_cast<int64_t>(args.worker_timeout_s * 1000));
  if (args.address.empty() || args.workers == 0) {
    ps::LearnerRole role;
    ThrowIfError(ps::RoleFromEnvironment(&role).WithContext(
        "ps-server: --address and --workers not given, and the learner environment"));
    if (!role.is_server)
      throw Error(Code::kInvalidArgument,
                  "ps-server: learner " + std::to_string(role.learner_id) +
                      " is a worker (PS_HOSTS_COUNT=" + std::to_string(role.num_servers) + ")");
    options.address = role.listen_address;
    options.num_workers = role.num_workers;
  }
  if (!args.address.empty()) options.address = args.address;
  if (args.workers > 0) options.num_workers = args.workers;
  std::unique_ptr<ps::Server> server;
  ThrowIfError(ps::Server::Start(options, &server));
  std::cout << "ps server listening on " << options.address << " (port " << server->port()
            << "), waiting for " << options.num_workers << " workers" << std::endl;
  ThrowIfError(server->WaitAllDone(Deadline::Never()));
  server->Shutdown();
  std::cout << "ps server: every worker is done" << std::endl;
  return 0;
}

}  // namespace

void AddPsServerCommand(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<PsServerArgs>();
  CLI::App* cmd = app.add_subcommand(
      "ps-server",
      "Serve parameter-server variables on this learner's port 2222 until every worker is done");
  cmd->add_option("--address", args->address,
                  "host:port to serve on (default: this learner's address, port 2222)")
      ->type_name(kAddressType);
  cmd->add_option("--workers", args->workers,
                  "number of workers (default: NUM_LEARNERS - PS_HOSTS_COUNT)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--step-timeout", args->timeout_s,
                  "seconds a sync step waits for missing workers before failing")
      ->check(NumberIn(0.001, 3.0e7));
  cmd->add_option("--worker-timeout", args->worker_timeout_s,
                  "seconds a worker that has not said done may stay silent before the server "
                  "gives up on it (an error naming it)")
      ->check(NumberIn(0.001, 3.0e7))
      ->capture_default_str();
  cmd->callback([args, exit_code] { *exit_code = RunPsServer(*args); });
}

}  // namespace cadre::cli
