// DataDirLock: one `cadre server` per data directory. Two servers over one database would both
// admit queued jobs, follow and conclude the same runners, and start every deployment twice; the
// second one is refused at start, naming the first one's pid.
//
// The lock is flock(2) on `<data_dir>/server.lock`, held for the object's life and released by
// the kernel when the process ends however it ends (SIGKILL included), so a stale lock file never
// blocks a restarted server. The descriptor is close-on-exec: the jobs' runners and the
// deployments' processes the server starts (which may outlive it) do not hold the lock.
// `cadre users add` does not take it: it works while the server runs.
#pragma once

#include <filesystem>
#include <memory>

#include "cadre/base/status.h"

namespace cadre::service {

class DataDirLock {
 public:
  // Takes the lock or fails without waiting: AlreadyExists when another process holds it (the
  // message names the data directory and that process), IoError when the file cannot be opened.
  static Status Acquire(const std::filesystem::path& data_dir, std::unique_ptr<DataDirLock>* out);
  ~DataDirLock();
  DataDirLock(const DataDirLock&) = delete;
  DataDirLock& operator=(const DataDirLock&) = delete;

 private:
  explicit DataDirLock(int fd) : fd_(fd) {}
  int fd_;
};

}  // namespace cadre::service
