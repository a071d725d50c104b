#include "cadre/netem/job_state.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "cadre/base/logging.h"
#include "cadre/netem/command.h"

namespace cadre::netem {
namespace {

constexpr const char* kStateSuffix = ".state";

Status MakeDirs(const std::string& dir) {
  std::string partial;
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = dir.find('/', pos + 1);
    partial = dir.substr(0, pos);
    if (partial.empty()) continue;
    if (mkdir(partial.c_str(), 0755) != 0 && errno != EEXIST) {
      return IoError("cannot create state directory " + partial + ": " + std::strerror(errno));
    }
  }
  return Status::Ok();
}

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

unsigned long long ProcessStartTime(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!in || !std::getline(in, line)) return 0;
  // The command name (field 2) may contain spaces and parentheses; fields resume after the last
  // ')'. starttime is field 22, i.e. the 20th field after the name.
  size_t close = line.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream rest(line.substr(close + 1));
  std::string field;
  for (int i = 3; i <= 22; ++i) {
    if (!(rest >> field)) return 0;
  }
  return std::strtoull(field.c_str(), nullptr, 10);
}

bool OwnerAlive(pid_t pid, unsigned long long start) {
  if (pid <= 0) return false;
  unsigned long long now = ProcessStartTime(pid);
  return now != 0 && now == start;
}

JobState StateForThisProcess(std::vector<std::string> namespaces) {
  JobState state;
  state.owner_pid = getpid();
  state.owner_start = ProcessStartTime(state.owner_pid);
  state.namespaces = std::move(namespaces);
  return state;
}

Status WriteJobState(const std::string& path, const JobState& state) {
  size_t slash = path.rfind('/');
  if (slash != std::string::npos && slash > 0)
    CADRE_RETURN_IF_ERROR(MakeDirs(path.substr(0, slash)));
  std::string tmp = path + ".tmp" + std::to_string(getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << "# cadre emulated network: namespaces owned by a running job. `cadre netem sweep`\n"
           "# removes them once the owner is gone.\n";
    out << "owner_pid " << state.owner_pid << "\n";
    out << "owner_start " << state.owner_start << "\n";
    for (const auto& ns : state.namespaces) out << "netns " << ns << "\n";
    out.flush();
    if (!out) {
      std::remove(tmp.c_str());
      return IoError("cannot write state file " + tmp);
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    std::remove(tmp.c_str());
    return IoError("cannot rename " + tmp + " to " + path + ": " + std::strerror(err));
  }
  return Status::Ok();
}

Status ReadJobState(const std::string& path, JobState* state) {
  std::ifstream in(path);
  if (!in) return NotFound("no state file " + path);
  JobState parsed;
  bool have_pid = false, have_start = false;
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    std::string key, value, extra;
    if (!(fields >> key >> value) || (fields >> extra)) {
      return InvalidArgument(path + ":" + std::to_string(number) + ": expected 'key value'");
    }
    char* end = nullptr;
    if (key == "owner_pid") {
      parsed.owner_pid = static_cast<pid_t>(std::strtol(value.c_str(), &end, 10));
      have_pid = *end == '\0' && parsed.owner_pid > 0;
    } else if (key == "owner_start") {
      parsed.owner_start = std::strtoull(value.c_str(), &end, 10);
      have_start = *end == '\0';
    } else if (key == "netns") {
      if (value.find('/') != std::string::npos || value == "." || value == "..") {
        return InvalidArgument(path + ":" + std::to_string(number) + ": bad namespace name '" +
                               value + "'");
      }
      parsed.namespaces.push_back(value);
    } else {
      return InvalidArgument(path + ":" + std::to_string(number) + ": unknown key '" + key + "'");
    }
  }
  if (!have_pid || !have_start) {
    return InvalidArgument(path + ": missing or bad owner_pid/owner_start");
  }
  *state = std::move(parsed);
  return Status::Ok();
}

bool NetnsExists(const std::string& name) {
  struct stat st;
  return stat((std::string(kNetnsRunDir) + "/" + name).c_str(), &st) == 0;
}

Status DeleteNamespaces(const std::vector<std::string>& names, Deadline deadline) {
  std::string failures;
  for (const auto& name : names) {
    if (!NetnsExists(name)) continue;
    Status s = RunChecked({"ip", "netns", "delete", name}, deadline);
    // A concurrent sweep may have removed it between the check and the command.
    if (!s.ok() && NetnsExists(name)) {
      if (!failures.empty()) failures += "; ";
      failures += s.message();
    }
  }
  if (!failures.empty()) return IoError(failures);
  return Status::Ok();
}

std::string ProbeNamespaceName(pid_t pid) { return "cadre-probe-" + std::to_string(pid); }

Status SweepDeadProbes(Deadline deadline, std::vector<std::string>* removed) {
  const std::string prefix = "cadre-probe-";
  std::vector<std::string> dead;
  if (DIR* dir = opendir(kNetnsRunDir)) {
    while (dirent* entry = readdir(dir)) {
      std::string name = entry->d_name;
      if (name.rfind(prefix, 0) != 0) continue;
      char* end = nullptr;
      long pid = std::strtol(name.c_str() + prefix.size(), &end, 10);
      if (*end != '\0' || pid <= 0) continue;
      if (ProcessStartTime(static_cast<pid_t>(pid)) == 0) dead.push_back(name);
    }
    closedir(dir);
  }
  CADRE_RETURN_IF_ERROR(DeleteNamespaces(dead, deadline));
  if (removed != nullptr) removed->insert(removed->end(), dead.begin(), dead.end());
  return Status::Ok();
}

Status SweepStaleJobs(const std::string& state_dir, const std::string& prefix, Deadline deadline,
                      std::vector<std::string>* removed) {
  DIR* dir = opendir(state_dir.c_str());
  if (dir == nullptr) {
    if (errno == ENOENT) return Status::Ok();
    return IoError("cannot read state directory " + state_dir + ": " + std::strerror(errno));
  }
  std::vector<std::string> files;
  while (dirent* entry = readdir(dir)) {
    std::string name = entry->d_name;
    if (name.rfind(prefix, 0) == 0 && EndsWith(name, kStateSuffix)) files.push_back(name);
  }
  closedir(dir);

  std::string failures;
  for (const auto& file : files) {
    std::string path = state_dir + "/" + file;
    JobState state;
    Status s = ReadJobState(path, &state);
    if (s.code() == Code::kNotFound) continue;  // its owner or another sweep just removed it
    if (!s.ok()) {
      CADRE_LOG(WARNING) << "netem sweep: leaving " << path << " alone: " << s.message();
      continue;
    }
    if (OwnerAlive(state.owner_pid, state.owner_start)) continue;
    std::vector<std::string> present;
    for (const auto& ns : state.namespaces) {
      if (NetnsExists(ns)) present.push_back(ns);
    }
    s = DeleteNamespaces(state.namespaces, deadline);
    if (!s.ok()) {
      if (!failures.empty()) failures += "; ";
      failures += "leftovers of pid " + std::to_string(state.owner_pid) + ": " + s.message();
      continue;  // keep the record so that a later sweep retries
    }
    if (!present.empty()) {
      CADRE_LOG(INFO) << "netem sweep: removed " << present.size()
                      << " namespaces of dead owner pid " << state.owner_pid << " (" << path << ")";
    }
    if (removed != nullptr) removed->insert(removed->end(), present.begin(), present.end());
    std::remove(path.c_str());
  }
  if (!failures.empty()) return IoError("netem sweep: " + failures);
  return Status::Ok();
}

}  // namespace cadre::netem
