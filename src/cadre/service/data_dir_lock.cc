#include "cadre/service/data_dir_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace cadre::service {

Status DataDirLock::Acquire(const std::filesystem::path& data_dir,
                            std::unique_ptr<DataDirLock>* out) {
  std::filesystem::path file = data_dir / "server.lock";
  int fd = open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return IoError("cannot open " + file.string() + ": " + std::strerror(errno));
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    int err = errno;
    std::string holder;
    char buf[32] = {};
    ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
    if (n > 0) holder = std::string(buf, static_cast<size_t>(n));
    while (!holder.empty() && (holder.back() == '\n' || holder.back() == ' ')) holder.pop_back();
    close(fd);
    if (err != EWOULDBLOCK) {
      return IoError("cannot lock " + file.string() + ": " + std::strerror(err));
    }
    return Status(Code::kAlreadyExists, "another cadre server" +
                                            (holder.empty() ? "" : " (pid " + holder + ")") +
                                            " is using the data directory " + data_dir.string() +
                                            "; stop it first, or give this one another --data-dir");
  }
  // Our pid, for the message above; the lock itself is what counts, not the file's text.
  std::string pid = std::to_string(getpid()) + "\n";
  if (ftruncate(fd, 0) != 0 || pwrite(fd, pid.data(), pid.size(), 0) < 0) {
    // The pid is only a courtesy to the next server's message.
  }
  out->reset(new DataDirLock(fd));
  return Status::Ok();
}

DataDirLock::~DataDirLock() { close(fd_); }

}  // namespace cadre::service
