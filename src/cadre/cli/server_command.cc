// `cadre server`: the job service (REST API, SQLite, scheduler, dashboard) on this machine.
// `cadre users add NAME --plan PLAN`: a user of that server, and their bearer token.
//
//   cadre server [--data-dir DIR] [--listen HOST:PORT] [--slots N] [--grace S] [--threads N]
//                [--request-timeout S] [--min-upload-kib N]
//                [--deployment-restarts N] [--max-deployments N] [--max-prediction-mib N]
//                [--backend local|slurm|mpi|kubernetes [--store-host H] [--partition P]
//                 [--hostfile F] [--namespace NS] [--queue-timeout S] [--heartbeat-timeout S]]
//   cadre users add NAME --plan PLAN [--data-dir DIR]
//
// The token is printed once, alone on the last line of stdout, so scripts can take it with
// `| tail -n 1`.
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "cadre/backends/backend.h"
#include "cadre/backends/slurm_backend.h"
#include "cadre/cli/commands.h"
#include "cadre/cli/support.h"
#include "cadre/service/service.h"

namespace cadre::cli {
namespace {

struct ServerFlags {
  std::string data_dir = "cadre-data";
  std::string listen = "127.0.0.1:" + std::to_string(service::kDefaultPort);
  std::optional<int64_t> slots;  // not given: this machine's cores (local), the cluster's (slurm)
  double grace_seconds = 10;
  int threads = 64;
  int64_t request_timeout_seconds = 30;
  int64_t min_upload_kib = 16;
  int64_t max_code_mib = 1024;
  int64_t deployment_restarts = 3;
  int64_t max_deployments = 16;
  int64_t max_prediction_mib = 16;
  // Where jobs run (docs/backends.md); the rest is handed to every job's `cadre run`.
  std::string backend = "local";
  std::string store_host;
  std::string partition;
  std::string hostfile;
  std::string name_space;
  std::optional<double> queue_timeout_seconds;
  std::optional<double> heartbeat_timeout_seconds;
};

// The `cadre run` flags for the chosen engine; checks that the engine is here and, when --slots
// was not given, asks it how many processes it runs at once. Returns the exit code on failure.
int ChooseBackend(const ServerFlags& flags, service::ServiceOptions* options) {
  backends::BackendOptions engine;
  if (Status st = backends::ParseBackendKind(flags.backend, &engine.kind); !st.ok()) {
    std::cerr << "cadre server: --backend: " << st.message() << "\n";
    return 2;
  }
  options->backend = std::string(backends::BackendName(engine.kind));
  backends::EngineFlagsGiven given;
  given.partition = !flags.partition.empty();
  given.hostfile = !flags.hostfile.empty();
  given.store_host = !flags.store_host.empty();
  given.queue_timeout = flags.queue_timeout_seconds.has_value();
  given.name_space = !flags.name_space.empty();
  given.heartbeat_timeout = flags.heartbeat_timeout_seconds.has_value();
  std::vector<backends::MisplacedFlag> misplaced =
      backends::FlagsForOtherEngines(engine.kind, given);
  for (const auto& m : misplaced)
    std::cerr << "cadre server: " << m.flag << " " << m.message << "\n";
  if (!misplaced.empty()) return 2;
  if (engine.kind == backends::BackendKind::kLocal) return 0;
  const bool k8s = engine.kind == backends::BackendKind::kKubernetes;
  if (engine.kind == backends::BackendKind::kMpi && flags.hostfile.empty()) {
    std::cerr << "cadre server: --backend mpi needs --hostfile FILE (one learner per host)\n";
    return 2;
  }
  // The bound of `cadre run --queue-timeout`, which every job is started with.
  if (flags.queue_timeout_seconds &&
      !(*flags.queue_timeout_seconds >= 0 && *flags.queue_timeout_seconds <= 31536000)) {
    std::cerr << "cadre server: --queue-timeout must be 0..31536000 seconds, got "
              << *flags.queue_timeout_seconds << "\n";
    return 2;
  }
  std::chrono::milliseconds heartbeat{};
  if (flags.heartbeat_timeout_seconds) {
    Status st = backends::ParseHeartbeatTimeout(*flags.heartbeat_timeout_seconds, &heartbeat);
    if (!st.ok()) {
      std::cerr << "cadre server: --heartbeat-timeout " << st.message() << "\n";
      return 2;
    }
  }
  if (options->slots == 0 && engine.kind != backends::BackendKind::kSlurm) {
    // Kubernetes: what the cluster would run for this server (quotas, other tenants, autoscaling)
    // is not a cheap question; the operator says.
    std::cerr << "cadre server: --backend " << options->backend
              << " needs --slots N: how many learner processes "
              << (k8s ? "the cluster may run for this server" : "its hosts run") << " at once\n";
    return 2;
  }
  if (Status st = backends::MakeBackend(engine)->CheckEngine(); !st.ok()) {
    std::cerr << "cadre server: " << st.message() << "\n";
    return 1;
  }
  auto& args = options->run_args;
  args = {"--backend", options->backend};
  if (!flags.store_host.empty()) args.insert(args.end(), {"--store-host", flags.store_host});
  if (!flags.partition.empty()) args.insert(args.end(), {"--partition", flags.partition});
  if (!flags.name_space.empty()) args.insert(args.end(), {"--namespace", flags.name_space});
  if (!flags.hostfile.empty()) {
    args.insert(args.end(), {"--hostfile", std::filesystem::absolute(flags.hostfile).string()});
  }
  if (flags.queue_timeout_seconds) {
    args.insert(args.end(), {"--queue-timeout", std::to_string(*flags.queue_timeout_seconds)});
  }
  if (flags.heartbeat_timeout_seconds) {
    // In milliseconds' precision, as cadre run keeps it.
    char seconds[32];
    std::snprintf(seconds, sizeof(seconds), "%.3f", static_cast<double>(heartbeat.count()) / 1000);
    args.insert(args.end(), {"--heartbeat-timeout", seconds});
  }
  if (options->slots == 0) {
    if (Status st = backends::SlurmClusterCpus(&options->slots); !st.ok()) {
      std::cerr << "cadre server: the Slurm cluster's size: " << st.message()
                << "; give --slots N\n";
      return 1;
    }
    if (options->slots <= 0) {
      std::cerr << "cadre server: the Slurm cluster reports no CPUs; give --slots N\n";
      return 1;
    }
  }
  return 0;
}

bool ParseListen(const std::string& text, std::string* host, int* port) {
  size_t colon = text.rfind(':');
  if (colon == std::string::npos) return false;
  *host = text.substr(0, colon);
  try {
    size_t used = 0;
    *port = std::stoi(text.substr(colon + 1), &used);
    return used == text.size() - colon - 1 && *port >= 0 && *port <= 65535 && !host->empty();
  } catch (const std::exception&) {
    return false;
  }
}

int RunServer(const ServerFlags& flags) {
  service::ServiceOptions options;
  if (!ParseListen(flags.listen, &options.host, &options.port)) {
    std::cerr << "cadre server: --listen: expected HOST:PORT, got '" << flags.listen << "'\n";
    return 2;
  }
  // Each flag's range, named when it is out of it (a huge --grace overflowed, a huge --threads
  // started that many threads, a negative --max-code-mib was taken for 1).
  struct Range {
    const char* flag;
    double value, low, high;
  };
  const Range ranges[] = {
      {"--grace", flags.grace_seconds, 0, 86400},
      {"--slots", static_cast<double>(flags.slots.value_or(1)), 1, 1 << 20},
      {"--threads", static_cast<double>(flags.threads), 4, 1024},
      {"--max-code-mib", static_cast<double>(flags.max_code_mib), 1, 1 << 20},
      {"--deployment-restarts", static_cast<double>(flags.deployment_restarts), 0, 1000},
      {"--max-deployments", static_cast<double>(flags.max_deployments), 0, 1024},
      {"--max-prediction-mib", static_cast<double>(flags.max_prediction_mib), 1, 4096},
  };
  auto number = [](double v) {
    char text[32];
    std::snprintf(text, sizeof(text), "%.15g", v);
    return std::string(text);
  };
  for (const Range& r : ranges) {
    if (!(r.value >= r.low && r.value <= r.high)) {
      std::cerr << "cadre server: " << r.flag << " must be " << number(r.low) << ".."
                << number(r.high) << ", got " << number(r.value) << "\n";
      return 2;
    }
  }
  options.data_dir = flags.data_dir;
  options.slots = flags.slots.value_or(0);
  options.grace = std::chrono::milliseconds(static_cast<int64_t>(flags.grace_seconds * 1000));
  options.threads = flags.threads;
  if (flags.request_timeout_seconds < 1 || flags.request_timeout_seconds > 3600) {
    std::cerr << "cadre server: --request-timeout must be 1..3600 seconds, got "
              << flags.request_timeout_seconds << "\n";
    return 2;
  }
  if (flags.min_upload_kib < 0 || flags.min_upload_kib > (1 << 20)) {
    std::cerr << "cadre server: --min-upload-kib must be 0..1048576 (KiB a second; 0: no "
                 "limit), got "
              << flags.min_upload_kib << "\n";
    return 2;
  }
  options.request_timeout = std::chrono::seconds(flags.request_timeout_seconds);
  options.min_upload_rate = static_cast<uint64_t>(flags.min_upload_kib) << 10;
  options.max_unzipped = static_cast<uint64_t>(flags.max_code_mib) << 20;
  options.max_deployment_restarts = flags.deployment_restarts;
  options.max_deployments = flags.max_deployments;
  options.max_prediction_bytes = static_cast<uint64_t>(flags.max_prediction_mib) << 20;
  if (int code = ChooseBackend(flags, &options); code != 0) return code;
  std::error_code ec;
  options.cadre = std::filesystem::read_symlink("/proc/self/exe", ec);

  // Each client connection is a file descriptor: as many as the system allows this process
  // (the soft limit is often 1024, the hard one far more).
  rlimit files{};
  if (getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
    files.rlim_cur = std::min<rlim_t>(files.rlim_max, 1 << 16);
    setrlimit(RLIMIT_NOFILE, &files);
  }

  // Every thread the service starts inherits this mask, so only the waiter below sees them.
  sigset_t stop;
  sigemptyset(&stop);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&stop, sig);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  signal(SIGPIPE, SIG_IGN);

  auto server = std::make_shared<service::Service>(options);
  Status st = server->Start();
  if (!st.ok()) {
    std::cerr << "cadre server: " << st.message() << "\n";
    return 1;
  }
  const auto& o = server->options();
  std::string url = "http://" + o.host + ":" + std::to_string(server->port());
  std::cout << "cadre server: listening on " << url << " (data in " << o.data_dir.string() << ", "
            << o.slots << " slots"
            << (server->gpus().count > 0 ? " and " + std::to_string(server->gpus().count) +
                                               " GPUs (" + server->gpus().source + ")"
                                         : std::string())
            << " on the " << o.backend << " backend)\n"
            << "cadre server: sign in at " << url << "/ with a token from: cadre users add NAME "
            << "--plan standard --data-dir " << o.data_dir.string() << "\n"
            << std::flush;
  std::thread([server, stop] {
    int sig = 0;
    sigwait(&stop, &sig);
    std::cout << "cadre server: " << strsignal(sig)
              << "; stopping (running jobs keep running; deployments stop and start again "
                 "with the server)\n"
              << std::flush;
    server->Stop();
    // Stopping waits for requests in flight (a log followed to a job's end, say). A second
    // signal does not wait: the database is transactional and deployments die with us
    // (PR_SET_PDEATHSIG); running jobs keep running either way.
    sigwait(&stop, &sig);
    std::cout << "cadre server: " << strsignal(sig) << " again; exiting now\n" << std::flush;
    std::_Exit(128 + sig);
  }).detach();
  server->Run();
  return 0;
}

}  // namespace

void AddServerCommand(CLI::App& app, int* exit_code) {
  auto flags = std::make_shared<ServerFlags>();
  auto* cmd = app.add_subcommand(
      "server",
      "The job service: WML v4 trainings API, accounts and plans, live logs and a "
      "dashboard, with its state in SQLite (docs/service.md)");
  cmd->add_option("--data-dir", flags->data_dir, "State and job directories (default ./cadre-data)")
      ->type_name(kDirType);
  cmd->add_option("--listen", flags->listen,
                  "HOST:PORT to listen on (default 127.0.0.1:" +
                      std::to_string(service::kDefaultPort) + "; port 0 picks a free one)");
  cmd->add_option("--slots", flags->slots,
                  "Learner processes this machine runs at once (default: its cores, at least 4)");
  cmd->add_option(
      "--grace", flags->grace_seconds,
      "Seconds between SIGTERM and SIGKILL when stopping a job's learners (default 10)");
  cmd->add_option("--threads", flags->threads, "HTTP worker threads (default 64)");
  cmd->add_option("--request-timeout", flags->request_timeout_seconds,
                  "Seconds a request's head may take to arrive, and a large body after it "
                  "(plus a second for every --min-upload-kib); slower ones get 408 (default 30)");
  cmd->add_option("--min-upload-kib", flags->min_upload_kib,
                  "KiB a second a large request body must keep up after --request-timeout, or "
                  "408; 0: only the read timeout (default 16)");
  cmd->add_option("--max-code-mib", flags->max_code_mib,
                  "Largest a job's uploaded code may expand to, in MiB (default 1024)");
  cmd->add_option("--deployment-restarts", flags->deployment_restarts,
                  "Times a deployment's scoring process is started again after it died, before "
                  "the deployment is marked failed (default 3)");
  cmd->add_option("--max-deployments", flags->max_deployments,
                  "Online deployments (scoring processes) this server runs at most (default 16)");
  cmd->add_option("--max-prediction-mib", flags->max_prediction_mib,
                  "Largest prediction request in MiB; larger ones get 413 before they are read "
                  "(default 16)");
  cmd->add_option("--backend", flags->backend,
                  "Where jobs run: local (this machine), slurm (sbatch; --slots defaults to the "
                  "cluster's CPUs), mpi (mpirun on --hostfile's hosts) or kubernetes (kubectl; "
                  "--slots needed, images from the manifests) (docs/backends.md)");
  cmd->add_option("--store-host", flags->store_host,
                  "slurm/mpi: the address the nodes reach this machine at (cadre run's flag)")
      ->type_name(kHostType);
  cmd->add_option("--partition", flags->partition, "slurm: the partition jobs are submitted to")
      ->type_name(kNameType);
  cmd->add_option("--hostfile", flags->hostfile, "mpi: the hosts, one learner each")
      ->type_name(kFileType);
  cmd->add_option("--namespace", flags->name_space,
                  "kubernetes: the namespace jobs run in (default: default)")
      ->type_name(kNameType);
  cmd->add_option("--queue-timeout", flags->queue_timeout_seconds,
                  "slurm, kubernetes: cancel a job still pending after S seconds (default: wait)");
  cmd->add_option("--heartbeat-timeout", flags->heartbeat_timeout_seconds,
                  "slurm, mpi: every job's cadre run --heartbeat-timeout: a learner's node not "
                  "heard from for S seconds ends the job, and a job whose cadre run is not "
                  "heard from for S seconds stops itself (default 60, 0 for no heartbeats)");
  cmd->callback([flags, exit_code] { *exit_code = RunServer(*flags); });

  auto* users = app.add_subcommand("users", "Users of a cadre server");
  users->require_subcommand(1);
  auto add = users->add_subcommand("add",
                                   "Create a user; prints their bearer token once, alone "
                                   "on the last line");
  auto name = std::make_shared<std::string>();
  auto plan = std::make_shared<std::string>();
  auto data_dir = std::make_shared<std::string>("cadre-data");
  add->add_option("name", *name, "The user's name")->required();
  add->add_option("--plan", *plan, "lite, standard or premium")->required();
  add->add_option("--data-dir", *data_dir, "The server's data directory (default ./cadre-data)")
      ->type_name(kDirType);
  add->callback([name, plan, data_dir, exit_code] {
    std::string token;
    Status st = service::AddUser(*data_dir, *name, *plan, &token);
    if (!st.ok()) {
      std::cerr << "cadre users add: " << st.message() << "\n";
      *exit_code = st.code() == Code::kInvalidArgument ? 2 : 1;
      return;
    }
    std::cout << "cadre users add: created " << *name << " (plan " << *plan
              << "); their token, shown only now:\n"
              << token << "\n";
    *exit_code = 0;
  });

  struct Change {
    const char* name;
    const char* help;
    service::UserChange change;
  };
  static constexpr Change kChanges[] = {
      {"token", "Give a user a further bearer token; prints it once, alone on the last line",
       service::UserChange::kNewToken},
      {"revoke",
       "Revoke every token of a user (the server refuses them within 5 s); their jobs stay",
       service::UserChange::kRevokeTokens},
      {"plan",
       "Move a user to another plan; queued and running jobs go on, later submissions "
       "meet the new plan's limits",
       service::UserChange::kSetPlan},
  };
  for (const Change& c : kChanges) {
    auto* sub = users->add_subcommand(c.name, c.help);
    auto user = std::make_shared<std::string>();
    auto value = std::make_shared<std::string>();
    auto dir = std::make_shared<std::string>("cadre-data");
    sub->add_option("name", *user, "The user's name")->required();
    if (c.change == service::UserChange::kSetPlan) {
      sub->add_option("plan", *value, "lite, standard or premium")->required();
    }
    sub->add_option("--data-dir", *dir, "The server's data directory (default ./cadre-data)")
        ->type_name(kDirType);
    sub->callback([c, user, value, dir, exit_code] {
      std::string out;
      Status st = service::ChangeUser(*dir, c.change, *user, *value, &out);
      if (!st.ok()) {
        std::cerr << "cadre users " << c.name << ": " << st.message() << "\n";
        *exit_code = st.code() == Code::kInvalidArgument || st.code() == Code::kNotFound ? 2 : 1;
        return;
      }
      std::cout << "cadre users " << c.name << ": ";
      switch (c.change) {
        case service::UserChange::kNewToken:
          std::cout << "a new token for " << *user << ", shown only now:\n" << out << "\n";
          break;
        case service::UserChange::kRevokeTokens:
          std::cout << "revoked " << out << " token(s) of " << *user << "\n";
          break;
        case service::UserChange::kSetPlan:
          std::cout << *user << " is now on the " << *value << " plan\n";
          break;
      }
      *exit_code = 0;
    });
  }
}

}  // namespace cadre::cli
