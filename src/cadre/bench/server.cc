// `cadre bench server` (server.h): the phases, the API client and the report.
#include "cadre/bench/server.h"

#include <fcntl.h>
#include <httplib.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cadre/base/status.h"
#include "cadre/bench/server_load.h"
#include "cadre/service/service.h"
#include "cadre/service/zip_folder.h"

extern char** environ;

namespace cadre::bench {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using Clock = std::chrono::steady_clock;
constexpr char kVersion[] = "version=2020-09-01";

[[noreturn]] void Fail(const std::string& what) {
  throw Error(Code::kInternal, "bench server: " + what);
}

double MsSince(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

std::string LoadAverage() {
  std::ifstream in("/proc/loadavg");
  std::string a, b, c;
  in >> a >> b >> c;
  return a + " " + b + " " + c;
}

// CPU seconds (user + system) of a process; < 0 when unknown.
double ProcessCpuSeconds(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t close = text.rfind(')');
  if (close == std::string::npos) return -1;
  std::istringstream rest(text.substr(close + 2));
  std::string field;
  std::vector<std::string> fields;
  while (rest >> field && fields.size() < 13) fields.push_back(field);
  if (fields.size() < 13) return -1;
  return double(std::stoll(fields[11]) + std::stoll(fields[12])) / sysconf(_SC_CLK_TCK);
}

double SelfCpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  auto sec = [](const timeval& t) { return t.tv_sec + t.tv_usec / 1e6; };
  return sec(u.ru_utime) + sec(u.ru_stime);
}

// Live processes (not this one) whose command line or environment contain `text`.
std::vector<pid_t> ProcessesMentioning(const std::string& text) {
  std::vector<pid_t> out;
  for (const auto& entry :
       fs::directory_iterator("/proc", fs::directory_options::skip_permission_denied)) {
    std::string name = entry.path().filename().string();
    if (name.empty() || !std::all_of(name.begin(), name.end(), ::isdigit)) continue;
    pid_t pid = static_cast<pid_t>(std::stol(name));
    if (pid == getpid()) continue;
    auto read = [&](const char* what) {
      std::ifstream in(entry.path() / what, std::ios::binary);
      return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    };
    std::string stat = read("stat");
    size_t close = stat.rfind(')');
    if (close == std::string::npos || close + 2 >= stat.size() || stat[close + 2] == 'Z') continue;
    if (read("cmdline").find(text) != std::string::npos ||
        read("environ").find(text) != std::string::npos) {
      out.push_back(pid);
    }
  }
  return out;
}

// The trainings API, as one user.
class Api {
 public:
  explicit Api(const HttpTarget& target) : client_(target.url) {
    client_.set_keep_alive(true);
    client_.set_connection_timeout(10);
    client_.set_read_timeout(60);
    headers_ = {{"Authorization", "Bearer " + target.token}};
  }

  std::string Submit(const json& body) {
    auto res = client_.Post((std::string("/ml/v4/trainings?") + kVersion).c_str(), headers_,
                            body.dump(), "application/json");
    return IdOf(res);
  }

  std::string SubmitManifest(const std::string& manifest, const std::string& zip) {
    httplib::MultipartFormDataItems items = {
        {"manifest", manifest, "manifest.yaml", "application/x-yaml"},
        {"model_definition", zip, "code.zip", "application/zip"}};
    auto res = client_.Post((std::string("/ml/v4/trainings?") + kVersion).c_str(), headers_, items);
    return IdOf(res);
  }

  json Status(const std::string& id) {
    auto res = client_.Get(Path(id).c_str(), headers_);
    if (!res || res->status != 200) Fail("GET " + Path(id) + ": " + Describe(res));
    return json::parse(res->body)["entity"]["status"];
  }

  std::string State(const std::string& id) { return Status(id)["state"].get<std::string>(); }

  void Cancel(const std::string& id) {
    auto res = client_.Delete(Path(id).c_str(), headers_);
    if (!res || res->status != 204) Fail("DELETE " + Path(id) + ": " + Describe(res));
  }

  std::string Log(const std::string& id) {
    auto res = client_.Get(LogsPath(id).c_str(), headers_);
    if (!res || res->status != 200) Fail("GET logs of " + id + ": " + Describe(res));
    return res->body;
  }

  // Polls (every 2 ms by default) until the training is in one of `states`; returns the state.
  std::string WaitFor(const std::string& id, const std::vector<std::string>& states,
                      double timeout_s = 300,
                      std::chrono::milliseconds poll = std::chrono::milliseconds(2)) {
    auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                       std::chrono::duration<double>(timeout_s));
    for (;;) {
      std::string state = State(id);
      if (std::find(states.begin(), states.end(), state) != states.end()) return state;
      if (Clock::now() > deadline) Fail("training " + id + " still " + state);
      std::this_thread::sleep_for(poll);
    }
  }

  static std::string Path(const std::string& id) {
    return "/ml/v4/trainings/" + id + "?" + kVersion;
  }
  static std::string LogsPath(const std::string& id) {
    return "/ml/v4/trainings/" + id + "/logs?" + kVersion;
  }

 private:
  static std::string Describe(const httplib::Result& res) {
    if (!res) return "no answer (" + httplib::to_string(res.error()) + ")";
    return "HTTP " + std::to_string(res->status) + " " + res->body.substr(0, 500);
  }
  std::string IdOf(const httplib::Result& res) {
    if (!res || res->status != 201) Fail("POST /ml/v4/trainings: " + Describe(res));
    return json::parse(res->body)["metadata"]["id"].get<std::string>();
  }

  httplib::Client client_;
  httplib::Headers headers_;
};

json WmlBody(const std::string& name, const std::string& command, int nodes) {
  return {{"name", name},
          {"model_definition", {{"command", command}}},
          {"hardware_spec", {{"name", "cpu"}, {"nodes", nodes}}},
          {"software_spec", {{"name", "pytorch"}}}};
}

// A `cadre server` child process with its own temporary data directory, and a user of it.
class StartedServer {
 public:
  StartedServer(const ServerBenchOptions& args) {
    std::string tmpl = (fs::temp_directory_path() / "cadre-bench-server-XXXXXX").string();
    if (mkdtemp(tmpl.data()) == nullptr) Fail("cannot create a temporary folder");
    dir_ = tmpl;
    data_ = dir_ / "data";
    fs::path log = dir_ / "server.log";
    std::vector<std::string> argv = args.server_command;
    std::vector<std::string> flags = {"--data-dir", data_.string(),
                                      "--listen",   "127.0.0.1:0",
                                      "--grace",    std::to_string(args.grace_s),
                                      "--threads",  std::to_string(args.server_threads)};
    argv.insert(argv.end(), flags.begin(), flags.end());
    std::vector<char*> cargv;
    for (auto& a : argv) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    int rc = posix_spawn(&pid_, cargv[0], &actions, nullptr, cargv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    if (rc != 0) Fail(std::string("cannot start cadre server: ") + strerror(rc));
    auto deadline = Clock::now() + std::chrono::seconds(60);
    std::regex listening("listening on (http://[^ ]+)");
    for (;;) {
      std::ifstream in(log);
      std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      std::smatch m;
      if (std::regex_search(text, m, listening)) {
        url_ = m[1];
        break;
      }
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = 0;
        Fail("cadre server exited at start:\n" + text);
      }
      if (Clock::now() > deadline) Fail("cadre server did not start within 60 s:\n" + text);
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    Status st = service::AddUser(data_, "bench", "premium", &token_);
    if (!st.ok()) Fail("cannot add a user: " + st.message());
  }

  ~StartedServer() {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      int status = 0;
      auto deadline = Clock::now() + std::chrono::seconds(30);
      while (waitpid(pid_, &status, WNOHANG) == 0) {
        if (Clock::now() > deadline) {
          kill(pid_, SIGKILL);
          waitpid(pid_, &status, 0);
          break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    }
    // A bench that failed midway may leave a job behind: nothing of it may outlive the bench.
    for (pid_t pid : ProcessesMentioning(data_.string())) kill(pid, SIGKILL);
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  pid_t pid() const { return pid_; }
  HttpTarget target() const { return {url_, token_}; }

 private:
  fs::path dir_, data_;
  pid_t pid_ = 0;
  std::string url_, token_;
};

struct Report {
  json out = json::object();
};

void SubmitPhase(Api& api, const ServerBenchOptions& args, json* out, std::string* last_id) {
  std::vector<double> to_running, to_completed;
  for (int i = 0; i < args.repeats; ++i) {
    auto t0 = Clock::now();
    std::string id = api.Submit(WmlBody("bench-empty", "true", 1));
    std::string state = api.WaitFor(id, {"running", "completed", "failed", "canceled"});
    to_running.push_back(MsSince(t0));
    state = api.WaitFor(id, {"completed", "failed", "canceled"});
    to_completed.push_back(MsSince(t0));
    if (state != "completed") Fail("the empty job " + id + " ended " + state);
    *last_id = id;
  }
  (*out)["submit_to_running_ms"] = {{"median", Median(to_running)}, {"all", to_running}};
  (*out)["submit_to_completed_ms"] = {{"median", Median(to_completed)}, {"all", to_completed}};
}

void RequestsPhase(const HttpTarget& target, pid_t server_pid, const std::string& id,
                   const ServerBenchOptions& args, json* out) {
  double server_cpu0 = server_pid > 0 ? ProcessCpuSeconds(server_pid) : -1;
  double self_cpu0 = SelfCpuSeconds();
  auto t0 = Clock::now();
  LoadResult r =
      ClosedLoopLoad(target, Api::Path(id), args.clients, args.warmup_s, args.duration_s);
  double wall = MsSince(t0) / 1000;
  double server_cpu = server_pid > 0 ? ProcessCpuSeconds(server_pid) - server_cpu0 : -1;
  double self_cpu = SelfCpuSeconds() - self_cpu0;
  (*out)["get_training"] = {
      {"clients", args.clients},
      {"seconds", args.duration_s},
      {"requests", r.requests},
      {"errors", r.errors},
      {"requests_per_s", r.rate()},
      {"p50_ms", r.PercentileMs(0.5)},
      {"p99_ms", r.PercentileMs(0.99)},
      {"max_ms", r.PercentileMs(1.0)},
      // CPU per wall second over the whole run (warm-up included), in cores.
      {"server_cpu_cores", server_cpu >= 0 ? json(server_cpu / wall) : json(nullptr)},
      {"bench_cpu_cores", self_cpu / wall}};
}

void CancelPhase(Api& api, const ServerBenchOptions& args, json* out) {
  std::vector<double> gone, canceled;
  for (int i = 0; i < args.repeats; ++i) {
    std::string id = api.Submit(WmlBody("bench-cancel", "sleep 600", 2));
    api.WaitFor(id, {"running"}, 120);
    // Both learners started: their environment names the training.
    auto deadline = Clock::now() + std::chrono::seconds(120);
    std::string marker = "TRAINING_ID=" + id;
    while (ProcessesMentioning(marker).size() < 2) {
      if (Clock::now() > deadline) Fail("the learners of " + id + " did not start");
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    auto t0 = Clock::now();
    api.Cancel(id);
    std::optional<double> gone_ms, canceled_ms;
    deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                  std::chrono::duration<double>(args.grace_s + 60));
    while (!gone_ms || !canceled_ms) {
      if (!gone_ms && ProcessesMentioning(id).empty()) gone_ms = MsSince(t0);
      if (!canceled_ms && api.State(id) == "canceled") canceled_ms = MsSince(t0);
      if (Clock::now() > deadline) Fail("training " + id + " was not canceled");
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    gone.push_back(*gone_ms);
    canceled.push_back(*canceled_ms);
  }
  (*out)["cancel_to_gone_ms"] = {
      {"median", Median(gone)}, {"all", gone}, {"grace_s", args.grace_s}};
  (*out)["cancel_to_canceled_ms"] = {{"median", Median(canceled)}, {"all", canceled}};
}

fs::path FindTrainWorker(const ServerBenchOptions& args) {
  if (!args.train_worker.empty()) return args.train_worker;
  std::vector<fs::path> candidates;
  if (!args.server_command.empty()) {  // the cadre program sits at the top of the build tree
    fs::path program = args.server_command.front();
    candidates.push_back(program.parent_path().parent_path() / "bench" / "train_worker.py");
  }
  candidates.push_back(fs::current_path() / "bench" / "train_worker.py");
  for (const fs::path& p : candidates) {
    if (fs::exists(p)) return p;
  }
  Fail("cannot find bench/train_worker.py; pass --train-worker PATH");
}

struct TrainingResult {
  double samples_per_s = 0;
  double server_cpu_cores = -1;  // the server's CPU per wall second meanwhile; < 0 unknown
  double bench_cpu_cores = 0;    // this process's (the load generator's)
};

TrainingResult TrainingRun(Api& api, const HttpTarget& target, pid_t server_pid,
                           const std::string& manifest, const std::string& zip,
                           const ServerBenchOptions& args, bool loaded) {
  double cpu0 = server_pid > 0 ? ProcessCpuSeconds(server_pid) : -1;
  double self0 = SelfCpuSeconds();
  auto t0 = Clock::now();
  std::string id = api.SubmitManifest(manifest, zip);
  std::unique_ptr<BackgroundLoad> load;
  if (loaded) {
    load = std::make_unique<BackgroundLoad>(target, Api::Path(id), args.status_rate,
                                            Api::LogsPath(id), args.followers);
  }
  // Polled gently: the job alone must not be under a load of the bench's own.
  std::string state =
      api.WaitFor(id, {"completed", "failed", "canceled"}, 1800, std::chrono::milliseconds(1000));
  if (load) load->Stop();
  std::string log = api.Log(id);
  if (state != "completed") Fail("the training job " + id + " ended " + state + ":\n" + log);
  size_t at = log.find("RESULT ");
  if (at == std::string::npos) Fail("the training job " + id + " printed no RESULT:\n" + log);
  size_t end = log.find('\n', at);
  json result = json::parse(log.substr(at + 7, end - at - 7));
  TrainingResult out;
  out.samples_per_s = result["samples_per_s"].get<double>();
  out.bench_cpu_cores = (SelfCpuSeconds() - self0) / (MsSince(t0) / 1000);
  if (cpu0 >= 0)
    out.server_cpu_cores = (ProcessCpuSeconds(server_pid) - cpu0) / (MsSince(t0) / 1000);
  return out;
}

void TrainingPhase(Api& api, const HttpTarget& target, pid_t server_pid,
                   const ServerBenchOptions& args, json* out) {
  fs::path worker = FindTrainWorker(args);
  std::string tmpl = (fs::temp_directory_path() / "cadre-bench-code-XXXXXX").string();
  if (mkdtemp(tmpl.data()) == nullptr) Fail("cannot create a temporary folder");
  fs::copy_file(worker, fs::path(tmpl) / "train_worker.py");
  std::string zip;
  Status st = service::ZipFolder(tmpl, 64 << 20, &zip);
  std::error_code ec;
  fs::remove_all(tmpl, ec);
  if (!st.ok()) Fail("cannot zip " + worker.string() + ": " + st.message());
  std::string manifest =
      "name: bench-train\nframework: {name: pytorch-horovod}\nexecution:\n  command: python3 "
      "train_worker.py cadre --steps " +
      std::to_string(args.steps) + "\n  compute_configuration: {name: cpu, nodes: 2}\n";
  std::vector<double> quiet, loaded, quiet_cpu, loaded_cpu, quiet_bench, loaded_bench;
  for (int round = 0; round < args.rounds; ++round) {
    // Alternating which goes first, so that a drift in the machine's load favours neither.
    for (bool with_load : {round % 2 == 1, round % 2 == 0}) {
      TrainingResult r = TrainingRun(api, target, server_pid, manifest, zip, args, with_load);
      (with_load ? loaded : quiet).push_back(r.samples_per_s);
      (with_load ? loaded_cpu : quiet_cpu).push_back(r.server_cpu_cores);
      (with_load ? loaded_bench : quiet_bench).push_back(r.bench_cpu_cores);
    }
  }
  double q = Median(quiet), l = Median(loaded);
  (*out)["training"] = {{"learners", 2},
                        {"steps", args.steps},
                        {"status_rate_per_s", args.status_rate},
                        {"followers", args.followers},
                        {"quiet_samples_per_s", {{"median", q}, {"all", quiet}}},
                        {"loaded_samples_per_s", {{"median", l}, {"all", loaded}}},
                        {"drop_percent", q > 0 ? (q - l) / q * 100 : 0},
                        // The service's own share of the machine during each job (the runner
                        // and learners are not the server's threads): what the load costs.
                        {"server_cpu_cores_alone", quiet_cpu},
                        {"server_cpu_cores_loaded", loaded_cpu},
                        {"bench_cpu_cores_alone", quiet_bench},
                        {"bench_cpu_cores_loaded", loaded_bench}};
}

void PrintTable(const json& r) {
  std::printf("# cadre bench server: %s; %s cores; load average at start %s\n",
              r["server"].get<std::string>().c_str(), r["cores"].dump().c_str(),
              r["load_average"].get<std::string>().c_str());
  const json& g = r["get_training"];
  std::printf(
      "GET /ml/v4/trainings/{id}, %d keep-alive clients, %.1f s: %.0f requests/s, p50 %.2f ms, "
      "p99 %.2f ms, max %.2f ms, %lld errors; CPU: server %s cores, load generator %.2f cores\n",
      g["clients"].get<int>(), g["seconds"].get<double>(), g["requests_per_s"].get<double>(),
      g["p50_ms"].get<double>(), g["p99_ms"].get<double>(), g["max_ms"].get<double>(),
      static_cast<long long>(g["errors"].get<int64_t>()),
      g["server_cpu_cores"].is_null()
          ? "n/a"
          : std::to_string(g["server_cpu_cores"].get<double>()).substr(0, 4).c_str(),
      g["bench_cpu_cores"].get<double>());
  auto series = [](const json& s) {
    std::string all;
    for (const auto& v : s["all"]) {
      char buf[32];
      std::snprintf(buf, sizeof(buf), "%s%.0f", all.empty() ? "" : " ", v.get<double>());
      all += buf;
    }
    return all;
  };
  std::printf("submit -> running (empty job): median %.0f ms (%s)\n",
              r["submit_to_running_ms"]["median"].get<double>(),
              series(r["submit_to_running_ms"]).c_str());
  std::printf("submit -> completed (empty job): median %.0f ms (%s)\n",
              r["submit_to_completed_ms"]["median"].get<double>(),
              series(r["submit_to_completed_ms"]).c_str());
  std::printf(
      "cancel -> every process gone (2 learners, grace %.0f s): median %.0f ms (%s); state "
      "canceled: median %.0f ms\n",
      r["cancel_to_gone_ms"]["grace_s"].get<double>(),
      r["cancel_to_gone_ms"]["median"].get<double>(), series(r["cancel_to_gone_ms"]).c_str(),
      r["cancel_to_canceled_ms"]["median"].get<double>());
  if (r.contains("training")) {
    const json& t = r["training"];
    std::printf(
        "training (2 learners, pytorch-horovod, %d steps): alone %.1f samples/s (%s), under "
        "%.0f status GET/s + %d log followers %.1f samples/s (%s): %.1f%% drop\n",
        t["steps"].get<int>(), t["quiet_samples_per_s"]["median"].get<double>(),
        series(t["quiet_samples_per_s"]).c_str(), t["status_rate_per_s"].get<double>(),
        t["followers"].get<int>(), t["loaded_samples_per_s"]["median"].get<double>(),
        series(t["loaded_samples_per_s"]).c_str(), t["drop_percent"].get<double>());
    auto cores = [](const json& list) {
      std::string all;
      for (const auto& v : list) {
        char buf[32];
        std::snprintf(buf, sizeof(buf), "%s%.3f", all.empty() ? "" : " ", v.get<double>());
        all += buf;
      }
      return all;
    };
    std::printf(
        "  CPU meanwhile, in cores: server alone %s, loaded %s; load generator alone %s, "
        "loaded %s\n",
        cores(t["server_cpu_cores_alone"]).c_str(), cores(t["server_cpu_cores_loaded"]).c_str(),
        cores(t["bench_cpu_cores_alone"]).c_str(), cores(t["bench_cpu_cores_loaded"]).c_str());
  }
}

}  // namespace

int RunServerBench(const ServerBenchOptions& args) {
  if (args.server.empty() && args.server_command.empty()) {
    throw Error(Code::kInvalidArgument, "bench server: no server to measure and none to start");
  }
  // Each flag's range, named when it is out of it: NaN or 1e300 seconds of load ran a
  // meaningless measurement, and a --grace or --server-threads the started server refuses
  // ended as an internal error.
  struct Range {
    const char* flag;
    double value, low, high;
  };
  const Range ranges[] = {
      {"--clients", static_cast<double>(args.clients), 1, 4096},
      {"--duration", args.duration_s, 0.001, 86400},
      {"--warmup", args.warmup_s, 0, 86400},
      {"--repeats", static_cast<double>(args.repeats), 1, 1000},
      {"--grace", args.grace_s, 0, 86400},
      {"--server-threads", static_cast<double>(args.server_threads), 4, 1024},
      {"--rounds", static_cast<double>(args.rounds), 1, 1000},
      {"--steps", static_cast<double>(args.steps), 1, 1e9},
      {"--status-rate", args.status_rate, 0, 1e6},
      {"--followers", static_cast<double>(args.followers), 0, 4096},
  };
  for (const Range& r : ranges) {
    if (!(r.value >= r.low && r.value <= r.high)) {
      char line[160];
      std::snprintf(line, sizeof(line), "bench server: %s must be %.15g..%.15g, got %.15g", r.flag,
                    r.low, r.high, r.value);
      throw Error(Code::kInvalidArgument, line);
    }
  }
  signal(SIGPIPE, SIG_IGN);
  std::unique_ptr<StartedServer> started;
  HttpTarget target{args.server, args.token};
  if (target.url.empty()) {
    started = std::make_unique<StartedServer>(args);
    target = started->target();
  } else if (target.token.empty()) {
    throw Error(Code::kInvalidArgument, "bench server: --server needs --token");
  }
  json report = {{"server", target.url},
                 {"cores", std::thread::hardware_concurrency()},
                 {"load_average", LoadAverage()}};
  Api api(target);
  std::string id;
  SubmitPhase(api, args, &report, &id);
  RequestsPhase(target, started ? started->pid() : 0, id, args, &report);
  CancelPhase(api, args, &report);
  if (args.training) TrainingPhase(api, target, started ? started->pid() : 0, args, &report);
  report["load_average_at_end"] = LoadAverage();
  if (args.json) {
    std::printf("%s\n", report.dump().c_str());
  } else {
    PrintTable(report);
  }
  return 0;
}

}  // namespace cadre::bench
