#include "cadre/backends/task.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <stdexcept>

#include "cadre/backends/heartbeat.h"
#include "cadre/base/printable.h"
#include "cadre/launch/gpu_plan.h"
#include "cadre/launch/hosts.h"
#include "cadre/launch/job_status.h"
#include "cadre/launch/learner_env.h"
#include "cadre/launch/process.h"

extern char** environ;

namespace cadre::backends {
namespace {

namespace fs = std::filesystem;
using launch::LearnerContract;

}  // namespace

std::string ReadTextFile(const fs::path& path, bool* ok) {
  std::ifstream in(path);
  if (ok != nullptr) *ok = static_cast<bool>(in);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

namespace {

std::string ReadFile(const fs::path& path, bool* ok = nullptr) { return ReadTextFile(path, ok); }

double Now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Writes through a file of this process's own and rename(2): several slots write the same
// files (the hosts file) at once.
Status WriteShared(const fs::path& path, const std::string& text) {
  fs::path tmp = path;
  tmp += ".tmp." + std::to_string(getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text;
    if (!out) return IoError("cannot write " + tmp.string());
  }
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    return IoError("cannot rename " + tmp.string() + ": " + std::strerror(errno));
  }
  return Status::Ok();
}

// Slurm knows its nodes' addresses (NodeAddr); names that DNS resolves need no Slurm.
std::vector<std::string> SlurmNodeAddresses(const std::vector<std::string>& nodes) {
  std::string list;
  for (const auto& n : nodes) list += (list.empty() ? "" : ",") + n;
  launch::CaptureResult result;
  std::map<std::string, std::string> addr;
  if (launch::RunAndCapture({"scontrol", "show", "node", "-o", list}, std::chrono::seconds(30),
                            &result)
          .ok()) {
    std::stringstream lines(result.output);
    for (std::string line; std::getline(lines, line);) {
      std::string name, address;
      std::stringstream words(line);
      for (std::string w; words >> w;) {
        if (w.starts_with("NodeName=")) name = w.substr(9);
        if (w.starts_with("NodeAddr=")) address = w.substr(9);
      }
      if (!name.empty() && !address.empty()) addr[name] = address;
    }
  }
  std::vector<std::string> out;
  for (const auto& n : nodes) out.push_back(addr.contains(n) ? addr[n] : "");
  return out;
}

Status NodeAddresses(const std::string& engine, const std::vector<std::string>& nodes,
                     std::vector<std::string>* out) {
  std::vector<std::string> addresses =
      engine == "slurm" ? SlurmNodeAddresses(nodes) : std::vector<std::string>(nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (addresses[i].empty() || addresses[i] == nodes[i]) addresses[i] = ResolveIPv4(nodes[i]);
    if (addresses[i].empty()) {
      return {Code::kUnavailable, "node " + nodes[i] + " (learner-" + std::to_string(i + 1) +
                                      ") has no address: its name does not resolve here"};
    }
  }
  *out = std::move(addresses);
  return Status::Ok();
}

void WriteExit(const fs::path& job_dir, const SlotExit& e) {
  nlohmann::json j = {{"learner_id", e.learner_id},
                      {"local_rank", e.local_rank},
                      {"stop_requested", e.stop_requested},
                      {"end_time", e.end_time},
                      {"error", e.error}};
  if (!e.runner_lost.empty()) j["runner_lost"] = e.runner_lost;
  if (e.exit_code) j["exit_code"] = *e.exit_code;
  if (e.signal) j["signal"] = *e.signal;
  (void)WriteShared(SlotExitPath(job_dir, e.learner_id, e.local_rank), j.dump() + "\n");
}

// Whether every worker (learners after the servers) has a record saying it succeeded.
bool WorkersSucceeded(const TaskPlan& plan) {
  const auto& job = plan.job;
  int done = 0;
  for (const auto& e : ReadSlotExits(job.job_dir, job.learners, job.slots_per_learner)) {
    if (!job.is_server(e.learner_id) && e.succeeded()) ++done;
  }
  return done == (job.learners - job.parameter_servers) * job.slots_per_learner;
}

// Runs the slot's command and waits for it, passing the engine's stop signals on.
// `beat`: the slot's heartbeat (none when the plan asks for none); when it says cadre run is
// gone, the command is stopped (SIGTERM, SIGKILL 10 s later) and the reason written to its log.
int Supervise(const TaskPlan& plan, const LearnerContract& contract,
              const launch::SpawnOptions& spawn, TaskHeartbeat* beat, SlotExit* record) {
  sigset_t set, old;
  sigemptyset(&set);
  for (int sig : {SIGCHLD, SIGINT, SIGTERM, SIGHUP}) sigaddset(&set, sig);
  sigprocmask(SIG_BLOCK, &set, &old);
  pid_t pid = 0;
  Status st = launch::SpawnSlot(spawn, &pid);
  if (!st.ok()) {
    record->error = st.message();
    return 1;
  }
  const bool server = plan.job.is_server(contract.learner_id);
  int wait_status = 0;
  std::optional<std::chrono::steady_clock::time_point> kill_at;  // the runner is gone
  for (;;) {
    timespec tick{0, 200 * 1000 * 1000};
    siginfo_t info;
    int sig = sigtimedwait(&set, &info, &tick);
    if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP) {
      record->stop_requested = true;
      kill(-pid, sig);
    }
    if (waitpid(pid, &wait_status, WNOHANG) == pid) break;
    if (std::optional<std::string> lost;
        !kill_at && beat != nullptr && (lost = beat->runner_lost())) {
      // No one is left to follow the job or cancel it: end the slot, as a foreground srun's
      // tasks end with it, rather than hold the cluster's nodes until the time limit.
      record->stop_requested = true;
      record->runner_lost = *lost;
      const std::string line = "cadre task: stopping learner-" +
                               std::to_string(contract.learner_id) + " slot " +
                               std::to_string(contract.local_rank) + ": " + *lost + "\n";
      if (write(spawn.output_fd, line.data(), line.size()) < 0) {
        // The same line goes to the engine's output below.
      }
      std::cerr << line << std::flush;
      kill(-pid, SIGTERM);
      kill_at = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    }
    if (kill_at && std::chrono::steady_clock::now() > *kill_at) kill(-pid, SIGKILL);
    if (server && !record->stop_requested && WorkersSucceeded(plan)) {
      record->stop_requested = true;  // a server's work ends with the workers'
      kill(-pid, SIGTERM);
    }
  }
  // The engine stops a job by signalling every process of its step, the command's as well as
  // this one's, in no set order: a command that a stop signal ended first was stopped too, not
  // failed, when this process's own copy arrives soon after.
  if (WIFSIGNALED(wait_status) && !record->stop_requested) {
    const int by = WTERMSIG(wait_status);
    if (by == SIGINT || by == SIGTERM || by == SIGHUP) {
      sigset_t stops;
      sigemptyset(&stops);
      for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&stops, sig);
      timespec soon{0, 200 * 1000 * 1000};
      siginfo_t info;
      if (sigtimedwait(&stops, &info, &soon) > 0) record->stop_requested = true;
    }
  }
  kill(-pid, SIGKILL);  // whatever the command left behind in its group
  sigprocmask(SIG_SETMASK, &old, nullptr);
  if (WIFEXITED(wait_status)) record->exit_code = WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) record->signal = WTERMSIG(wait_status);
  // A server stopped because the workers finished has done its job.
  if (server && record->stop_requested && WorkersSucceeded(plan)) return 0;
  if (record->signal) return 128 + *record->signal;
  return record->exit_code.value_or(1);
}

}  // namespace

// The node's IPv4 address as this machine resolves its name; "" when it does not.
std::string ResolveIPv4(const std::string& name) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(name.c_str(), nullptr, &hints, &res) != 0 || res == nullptr) return "";
  char text[INET_ADDRSTRLEN] = {};
  auto* in = reinterpret_cast<sockaddr_in*>(res->ai_addr);
  inet_ntop(AF_INET, &in->sin_addr, text, sizeof(text));
  freeaddrinfo(res);
  return text;
}

EnvMap ProcessEnv() {
  EnvMap env;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string entry = *e;
    size_t eq = entry.find('=');
    if (eq != std::string::npos && eq > 0) env[entry.substr(0, eq)] = entry.substr(eq + 1);
  }
  return env;
}

launch::SpawnOptions SlotSpawn(const TaskPlan& plan, const LearnerContract& contract,
                               launch::HostsMethod method, const fs::path& hosts_file) {
  std::vector<std::string> base;
  for (char** e = environ; *e != nullptr; ++e) base.emplace_back(*e);
  launch::SpawnOptions spawn;
  if (plan.command_argv.empty()) {
    spawn.argv = {"/bin/sh", "-c", plan.command};
  } else {
    spawn.argv = {"/bin/sh", "-c", "exec \"$@\"", "sh"};
    spawn.argv.insert(spawn.argv.end(), plan.command_argv.begin(), plan.command_argv.end());
  }
  spawn.env = launch::MergeSlotEnvironment(launch::ContractToEnv(contract), plan.python_bin_dir,
                                           plan.python_path, base);
  spawn.cwd = plan.job.model_dir;
  spawn.hosts_method = method;
  spawn.hosts_file = hosts_file;
  return spawn;
}

std::string SlotExit::Describe() const {
  if (!error.empty()) return "could not start: " + error;
  if (!runner_lost.empty()) {
    // Read by a runner that is there after all.
    return "stopped itself: " + runner_lost +
           " (yet cadre run is running: the node cannot reach this machine's store, see "
           "--store-host, or cadre run was stopped (Ctrl-Z) or starved for that long)";
  }
  if (exit_code || signal) return launch::DescribeExit(exit_code, signal);
  return "ended";
}

fs::path TaskPlanPath(const fs::path& job_dir) { return job_dir / "task.json"; }
fs::path TokenPath(const fs::path& job_dir) { return job_dir / "token"; }
fs::path SlotExitPath(const fs::path& job_dir, int learner_id, int local_rank) {
  return job_dir / ("learner-" + std::to_string(learner_id)) /
         ("slot-" + std::to_string(local_rank) + ".exit");
}

namespace {

// JSON text is UTF-8, a command's arguments any bytes but NUL (a Latin-1 file name): a string
// that is not UTF-8 is written as {"hex": "<its bytes>"} and read back byte for byte.
nlohmann::json BytesJson(const std::string& bytes) {
  if (IsUtf8(bytes)) return bytes;
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string hex;
  for (unsigned char c : bytes) {
    hex += kDigits[c >> 4];
    hex += kDigits[c & 15];
  }
  return {{"hex", hex}};
}

std::string BytesFromJson(const nlohmann::json& j) {
  if (j.is_string()) return j.get<std::string>();
  const std::string hex = j.at("hex").get<std::string>();
  auto digit = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    throw std::invalid_argument("a \"hex\" string has a digit that is not 0-9a-f");
  };
  if (hex.size() % 2 != 0) {
    throw std::invalid_argument("a \"hex\" string of an odd length");
  }
  std::string bytes;
  for (size_t i = 0; i < hex.size(); i += 2) {
    bytes += static_cast<char>(digit(hex[i]) * 16 + digit(hex[i + 1]));
  }
  return bytes;
}

}  // namespace

std::string TaskPlanJson(const TaskPlan& plan) {
  nlohmann::json argv = nlohmann::json::array();
  for (const auto& a : plan.command_argv) argv.push_back(BytesJson(a));
  nlohmann::json j = {{"contract", nlohmann::json::parse(launch::JobContractJson(plan.job))},
                      {"command", BytesJson(plan.command)},
                      {"command_argv", argv},
                      {"python_bin_dir", plan.python_bin_dir.string()},
                      {"python_path", plan.python_path},
                      {"heartbeat_timeout_ms", plan.heartbeat_timeout.count()}};
  return j.dump(2) + "\n";
}

Status ParseTaskPlanJson(const std::string& text, TaskPlan* plan) {
  TaskPlan out;
  try {
    auto j = nlohmann::json::parse(text);
    CADRE_RETURN_IF_ERROR(launch::ParseJobContractJson(j.at("contract").dump(), &out.job));
    out.command = BytesFromJson(j.at("command"));
    for (const auto& a : j.at("command_argv")) out.command_argv.push_back(BytesFromJson(a));
    out.python_bin_dir = j.at("python_bin_dir").get<std::string>();
    out.python_path = j.at("python_path").get<std::string>();
    out.heartbeat_timeout = std::chrono::milliseconds(j.value("heartbeat_timeout_ms", int64_t{0}));
  } catch (const nlohmann::json::exception& e) {
    return InvalidArgument(std::string("task.json is malformed: ") + e.what());
  } catch (const std::invalid_argument& e) {
    return InvalidArgument(std::string("task.json is malformed: ") + e.what());
  }
  *plan = std::move(out);
  return Status::Ok();
}

Status WriteTaskPlan(const TaskPlan& plan) {
  const fs::path& dir = plan.job.job_dir;
  CADRE_RETURN_IF_ERROR(launch::WriteFileAtomically(TaskPlanPath(dir), TaskPlanJson(plan)));
  int fd = open(TokenPath(dir).c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return IoError("cannot write " + TokenPath(dir).string() + ": " + strerror(errno));
  const std::string& token = plan.job.job_token;
  bool ok = write(fd, token.data(), token.size()) == static_cast<ssize_t>(token.size());
  close(fd);
  return ok ? Status::Ok() : IoError("cannot write " + TokenPath(dir).string());
}

std::vector<SlotExit> ReadSlotExits(const fs::path& job_dir, int learners, int slots) {
  std::vector<SlotExit> out;
  for (int id = 1; id <= learners; ++id) {
    for (int r = 0; r < slots; ++r) {
      bool ok = false;
      std::string text = ReadFile(SlotExitPath(job_dir, id, r), &ok);
      if (!ok) continue;
      try {
        auto j = nlohmann::json::parse(text);
        SlotExit e;
        e.learner_id = id;
        e.local_rank = r;
        if (j.contains("exit_code")) e.exit_code = j["exit_code"].get<int>();
        if (j.contains("signal")) e.signal = j["signal"].get<int>();
        e.stop_requested = j.value("stop_requested", false);
        e.end_time = j.value("end_time", 0.0);
        e.error = j.value("error", "");
        e.runner_lost = j.value("runner_lost", "");
        out.push_back(e);
      } catch (const nlohmann::json::exception&) {
        // Half-written records cannot happen (rename); anything else is not ours.
      }
    }
  }
  return out;
}

Status TaskContract(const TaskPlan& plan, const EngineSlot& slot,
                    const std::vector<std::string>& addresses, LearnerContract* out) {
  const auto& job = plan.job;
  if (static_cast<int>(slot.nodes.size()) != job.learners) {
    return InvalidArgument("the engine gave the job " + std::to_string(slot.nodes.size()) +
                           " nodes but it has " + std::to_string(job.learners) +
                           " learners (one node each)");
  }
  if (slot.tasks_per_node != job.slots_per_learner) {
    return InvalidArgument("the engine started " + std::to_string(slot.tasks_per_node) +
                           " tasks per node but each learner has " +
                           std::to_string(job.slots_per_learner) + " slots");
  }
  launch::JobContract placed = job;
  placed.hosts = launch::NamedHosts(job.name_prefix, addresses);
  launch::SlotFacts facts;
  facts.learner_id = slot.learner_index + 1;
  facts.local_rank = slot.local_rank;
  // A node is one learner's: the GPUs the engine gave it are the learner's.
  facts.node_gpus = static_cast<int>(slot.gpu_ids.size());
  facts.learner_on_node = 1;
  facts.node_gpu_ids = slot.gpu_ids;
  const long cores = sysconf(_SC_NPROCESSORS_ONLN);
  facts.node_cores = cores > 0 ? static_cast<int>(cores) : 1;
  return launch::MakeLearnerContract(placed, facts, out);
}

int RunTask(const std::string& engine, const fs::path& job_dir, const fs::path& plan_file,
            const fs::path& token_file) {
  auto fail = [&](const Status& st) {
    std::cerr << "cadre task: " << st.ToString() << "\n";
    return 1;
  };
  bool ok = false;
  const fs::path plan_path = plan_file.empty() ? TaskPlanPath(job_dir) : plan_file;
  const fs::path token_path = token_file.empty() ? TokenPath(job_dir) : token_file;
  std::string text = ReadFile(plan_path, &ok);
  if (!ok) return fail(NotFound("no " + plan_path.string() + " on this node"));
  TaskPlan plan;
  Status st = ParseTaskPlanJson(text, &plan);
  if (!st.ok()) return fail(st);
  plan.job.job_token = ReadFile(token_path, &ok);
  if (!ok) return fail(NotFound("no " + token_path.string() + " on this node"));
  if (engine == "kubernetes") return RunKubernetesLearner(std::move(plan), job_dir);

  EnvMap env = ProcessEnv();
  EngineSlot slot;
  if (engine == "slurm") {
    st = SlurmSlotFromEnv(env, &slot);
  } else if (engine == "mpi") {
    std::vector<std::string> hosts;
    st = ParseHostfile(ReadFile(job_dir / "hostfile"), &hosts);
    if (st.ok()) st = MpiSlotFromEnv(env, hosts, &slot);
  } else {
    st = InvalidArgument("--engine '" + engine + "' is not slurm, mpi or kubernetes");
  }
  if (!st.ok()) return fail(st);
  SlotExit record;
  record.learner_id = slot.learner_index + 1;
  record.local_rank = slot.local_rank;
  auto fail_slot = [&](const Status& why) {
    record.error = why.message();
    record.end_time = Now();
    WriteExit(job_dir, record);
    return fail(why.WithContext("learner-" + std::to_string(record.learner_id) + " slot " +
                                std::to_string(record.local_rank)));
  };

  std::vector<std::string> addresses;
  st = NodeAddresses(engine, slot.nodes, &addresses);
  if (!st.ok()) return fail_slot(st);
  // The learners' names for every slot: a private /etc/hosts where one can be had.
  fs::path hosts_file = job_dir / ("learner-" + std::to_string(record.learner_id)) / "hosts";
  std::error_code ec;
  fs::create_directories(hosts_file.parent_path(), ec);
  st = WriteShared(hosts_file,
                   launch::HostsFileText(launch::NamedHosts(plan.job.name_prefix, addresses),
                                         ReadFile("/etc/hosts")));
  if (!st.ok()) return fail_slot(st);
  launch::HostsMethod method = launch::HostsMethod::kCadreHosts;
  st = launch::ChooseHostsMethod(hosts_file, &method);
  if (!st.ok()) return fail_slot(st);
  plan.job.names_resolve = method != launch::HostsMethod::kCadreHosts;
  plan.job.hosts_file = hosts_file;
  LearnerContract contract;
  st = TaskContract(plan, slot, addresses, &contract);
  if (!st.ok()) return fail_slot(st);

  launch::SpawnOptions spawn = SlotSpawn(plan, contract, method, hosts_file);
  fs::path log = job_dir / ("learner-" + std::to_string(record.learner_id)) /
                 ("slot-" + std::to_string(record.local_rank) + ".log");
  spawn.output_fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (spawn.output_fd < 0) {
    return fail_slot(IoError("cannot open " + log.string() + ": " + std::strerror(errno)));
  }
  std::optional<TaskHeartbeat> beat;
  if (plan.heartbeat_timeout.count() > 0) {
    TaskHeartbeat::Options o;
    o.store_address = plan.job.store_address;
    o.token = plan.job.job_token;
    o.rank = contract.rank();
    o.identity = "cadre task learner-" + std::to_string(record.learner_id) + " slot " +
                 std::to_string(record.local_rank);
    o.node = slot.nodes[static_cast<size_t>(slot.learner_index)];
    o.timeout = plan.heartbeat_timeout;
    beat.emplace(std::move(o));
  }
  int code = Supervise(plan, contract, spawn, beat ? &*beat : nullptr, &record);
  beat.reset();
  close(spawn.output_fd);
  record.end_time = Now();
  WriteExit(job_dir, record);
  if (!record.error.empty()) return fail_slot(IoError(record.error));
  return code;
}

}  // namespace cadre::backends
