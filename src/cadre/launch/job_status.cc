#include "cadre/launch/job_status.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <nlohmann/json.hpp>

namespace cadre::launch {
namespace {

namespace fs = std::filesystem;

std::string Iso8601(WallClock::time_point t) {
  std::time_t secs = WallClock::to_time_t(t);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S", &tm);
  auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count() % 1000;
  char out[40];
  std::snprintf(out, sizeof(out), "%s.%03lldZ", buf, static_cast<long long>(ms));
  return out;
}

std::string RandomHex(size_t bytes) {
  std::string raw(bytes, '\0');
  size_t got = 0;
  while (got < bytes) {
    ssize_t n = getrandom(raw.data() + got, bytes - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw Error(Code::kInternal, std::string("getrandom: ") + std::strerror(errno));
    got += static_cast<size_t>(n);
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : raw) {
    out += kHex[c >> 4];
    out += kHex[c & 15];
  }
  return out;
}

// The job as run, in the WML shape, with every default resolved.
std::string EffectiveManifest(const JobSpec& spec, const JobLayout& layout) {
  YAML::Emitter out;
  out << YAML::BeginMap;
  out << YAML::Key << "name" << YAML::Value << spec.name;
  out << YAML::Key << "framework" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "name" << YAML::Value << std::string(spec.framework.name);
  if (!spec.framework_version.empty()) {
    out << YAML::Key << "version" << YAML::Value << YAML::DoubleQuoted << spec.framework_version;
  }
  out << YAML::EndMap;
  out << YAML::Key << "execution" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "command" << YAML::Value << spec.command;
  out << YAML::Key << "compute_configuration" << YAML::Value << YAML::Flow << YAML::BeginMap;
  out << YAML::Key << "name" << YAML::Value << std::string(spec.compute.name);
  out << YAML::Key << "nodes" << YAML::Value << spec.nodes << YAML::EndMap;
  out << YAML::EndMap;
  if (spec.framework.mode == Mode::kParameterServer) {
    out << YAML::Key << "parameter_servers" << YAML::Value << spec.parameter_servers;
  }
  out << YAML::Key << "max_restarts" << YAML::Value << spec.max_restarts;
  out << YAML::Key << "min_nodes" << YAML::Value << spec.min_nodes;
  if (spec.elastic()) out << YAML::Key << "rejoin_after" << YAML::Value << spec.rejoin_after_s;
  for (auto [key, path] : {std::pair{"training_data_reference", layout.data_dir},
                           std::pair{"training_results_reference", spec.results_dir}}) {
    out << YAML::Key << key << YAML::Value << YAML::BeginMap;
    out << YAML::Key << "type" << YAML::Value << "fs";
    out << YAML::Key << "location" << YAML::Value << YAML::Flow << YAML::BeginMap << YAML::Key
        << "path" << YAML::Value << path.string() << YAML::EndMap;
    out << YAML::EndMap;
  }
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

}  // namespace

std::string SignalName(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

const char* JobStateName(JobState state) {
  switch (state) {
    case JobState::kRunning:
      return "running";
    case JobState::kCompleted:
      return "completed";
    case JobState::kFailed:
      return "failed";
    case JobState::kStopped:
      return "stopped";
  }
  return "unknown";
}

std::string DescribeExit(std::optional<int> exit_code, std::optional<int> signal) {
  if (exit_code) {
    std::string text = "exited with code " + std::to_string(*exit_code);
    // A manifest's command runs under /bin/sh -c, which waits for the program it starts: a
    // program killed by SIGKILL (the OOM killer, a user) shows as the shell's 128 + 9.
    if (*exit_code > 128 && *exit_code < 128 + 32) {
      text += " (what a shell returns when its command is killed by " +
              SignalName(*exit_code - 128) + ")";
    }
    return text;
  }
  if (signal) return "was killed by " + SignalName(*signal);
  return "";
}

std::string SlotStatus::Describe() const {
  if (exit_code || signal) return DescribeExit(exit_code, signal);
  if (lost) return node.empty() ? "was lost with its node" : "was lost with node " + node;
  return running ? "is running" : "did not start";
}

std::string NewTrainingId() {
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y%m%d-%H%M%S", &tm);
  return std::string("training-") + buf + "-" + RandomHex(3);
}

std::string NewJobToken() { return RandomHex(32); }

Status WriteFileAtomically(const fs::path& path, const std::string& text) {
  // A fresh name that nobody can have planted (O_EXCL, no symlink followed), synced before the
  // rename and the folder after it, so a crash leaves the old file or the new one.
  fs::path tmp = path;
  tmp += ".tmp." + RandomHex(6);
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) return IoError("cannot write " + tmp.string() + ": " + std::strerror(errno));
  auto fail = [&](const std::string& what) {
    int err = errno;
    if (fd >= 0) close(fd);
    unlink(tmp.c_str());
    return IoError("cannot " + what + " " + tmp.string() + ": " + std::strerror(err));
  };
  std::string_view rest = text;
  while (!rest.empty()) {
    ssize_t n = write(fd, rest.data(), rest.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return fail("write");
    rest.remove_prefix(static_cast<size_t>(n));
  }
  if (fsync(fd) != 0) return fail("sync");
  close(fd);
  fd = -1;
  if (rename(tmp.c_str(), path.c_str()) != 0) return fail("rename");
  int dir = open(path.parent_path().empty() ? "." : path.parent_path().c_str(),
                 O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {
    fsync(dir);
    close(dir);
  }
  return Status::Ok();
}

Status MakeJobDirectory(const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir.parent_path(), ec);
  if (ec) {
    return IoError("cannot create the job directory " + dir.string() + ": " + ec.message());
  }
  if (mkdir(dir.c_str(), 0755) == 0) return Status::Ok();
  int err = errno;
  // An empty folder (made for the job by its caller) is fine; anything else is someone's.
  auto st = fs::symlink_status(dir, ec);
  if (err == EEXIST && !ec && fs::is_directory(st) && fs::is_empty(dir, ec) && !ec) {
    return Status::Ok();
  }
  if (err == EEXIST) {
    return Status(Code::kAlreadyExists,
                  "the job directory " + dir.string() +
                      " already exists and is not an empty folder; cadre run never reuses one "
                      "(choose another -o)");
  }
  return IoError("cannot create the job directory " + dir.string() + ": " + std::strerror(err));
}

Status RecordRefusal(const fs::path& dir, const std::string& training_id, const std::string& reason,
                     int exit_code) {
  std::error_code ec;
  if (fs::exists(fs::symlink_status(dir / "status.json", ec))) return Status::Ok();
  // Set-up begun by this runner (manifest.yaml written) is its own; anything else is someone's.
  if (!fs::exists(dir / "manifest.yaml", ec)) CADRE_RETURN_IF_ERROR(MakeJobDirectory(dir));
  nlohmann::json status = {{"state", JobStateName(JobState::kFailed)},
                           {"failure", reason},
                           {"exit_code", exit_code},
                           {"end_time", Iso8601(WallClock::now())}};
  if (!training_id.empty()) status["training_id"] = training_id;
  return WriteFileAtomically(
      dir / "status.json",
      status.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
}

Status CreateJobDirectory(const JobSpec& spec, const JobLayout& layout) {
  std::error_code ec;
  std::vector<fs::path> dirs = {layout.job_dir / "checkpoints", layout.job_dir / "state",
                                layout.data_dir};
  for (int id = 1; id <= spec.nodes; ++id) dirs.push_back(LearnerDir(layout, id));
  for (const auto& d : dirs) {
    fs::create_directories(d, ec);
    if (ec) return IoError("cannot create " + d.string() + ": " + ec.message());
  }
  CADRE_RETURN_IF_ERROR(
      WriteFileAtomically(layout.job_dir / "manifest.yaml", EffectiveManifest(spec, layout)));
  if (!spec.manifest_text.empty()) {
    CADRE_RETURN_IF_ERROR(
        WriteFileAtomically(layout.job_dir / "manifest.original.yaml", spec.manifest_text));
  }
  return Status::Ok();
}

std::string StatusJson(const JobSpec& spec, const JobLayout& layout, const JobStatus& status) {
  using nlohmann::json;
  json learners = json::array();
  for (const auto& h : layout.hosts) {
    json slots = json::array();
    for (const auto& s : status.slots) {
      if (s.learner_id != h.id) continue;
      const char* state = s.running                   ? "running"
                          : s.succeeded()             ? "succeeded"
                          : !s.exit_code && !s.signal ? (s.lost ? "lost" : "not-started")
                          : s.stop_requested          ? "stopped"
                                                      : "failed";
      json slot = {{"local_rank", s.local_rank},
                   {"rank", s.rank},
                   {"pid", s.pid},
                   {"state", state},
                   {"exit_code", s.exit_code ? json(*s.exit_code) : json(nullptr)},
                   {"signal", s.signal ? json(SignalName(*s.signal)) : json(nullptr)},
                   {"stopped_by_runner", s.stop_requested},
                   {"end_time", s.end_time ? json(Iso8601(*s.end_time)) : json(nullptr)},
                   {"log", s.log.string()}};
      if (s.lost) slot["node"] = s.node.empty() ? json(nullptr) : json(s.node);
      slots.push_back(std::move(slot));
    }
    learners.push_back({{"id", h.id},
                        {"host", h.name},
                        {"address", h.address},
                        {"role", spec.is_server(h.id) ? "parameter-server" : "worker"},
                        {"slots", std::move(slots)}});
  }
  json doc = {
      {"training_id", layout.training_id},
      {"name", spec.name},
      {"framework", std::string(spec.framework.name)},
      {"mode", std::string(ModeName(spec.framework.mode))},
      {"compute_configuration", std::string(spec.compute.name)},
      {"nodes", spec.nodes},
      {"slots_per_learner", spec.slots_per_learner},
      {"parameter_servers", spec.parameter_servers},
      {"command", spec.command},
      {"hosts_method", HostsMethodName(layout.hosts_method)},
      {"state", JobStateName(status.state)},
      {"start_time", Iso8601(status.start_time)},
      {"end_time", status.end_time ? json(Iso8601(*status.end_time)) : json(nullptr)},
      {"exit_code", status.exit_code ? json(*status.exit_code) : json(nullptr)},
      {"failure", status.failure.empty() ? json(nullptr) : json(status.failure)},
      {"failed_slot", status.failed_slot
                          ? json({{"learner_id", status.slots[*status.failed_slot].learner_id},
                                  {"local_rank", status.slots[*status.failed_slot].local_rank}})
                          : json(nullptr)},
      {"learners", std::move(learners)},
      {"max_restarts", spec.max_restarts},
      {"min_nodes", spec.min_nodes},
      {"restarts", status.restarts},
      {"restart_causes", status.restart_causes},
      {"rejoins", status.rejoins},
  };
  // JSON is UTF-8: bytes that are not (a command's argument, a path, given after --) are written
  // as U+FFFD rather than stopping the runner mid-job.
  return doc.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
}

Status WriteStatusFile(const JobSpec& spec, const JobLayout& layout, const JobStatus& status) {
  return WriteFileAtomically(layout.job_dir / "status.json", StatusJson(spec, layout, status));
}

}  // namespace cadre::launch
