// Follows the slots' log files that a cluster engine's tasks write (on a file system this machine
// shares with the nodes) and shows their new lines on the console, each whole line prefixed with
// the slot's label ("[learner-2/1] "), as the local backend's LogMux does for its pipes. An engine
// that reads meaning from the lines (Kubernetes: a learner saying it finished) watches them too.
#pragma once

#include <deque>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace cadre::backends {

class LogFollower {
 public:
  LogFollower(int console_fd, bool quiet, size_t tail_lines = 20)
      : console_fd_(console_fd), quiet_(quiet), tail_lines_(tail_lines) {}

  // Adds a stream; its index is the number of streams added before it.
  void Add(std::string label, std::filesystem::path path);
  // Called with every whole line as it is shown (also when quiet), with its stream's index.
  void Watch(std::function<void(size_t index, const std::string& line)> watcher) {
    watcher_ = std::move(watcher);
  }
  // Shows what the files gained since the last call; `flush` also shows unfinished last lines.
  void Poll(bool flush = false);
  // The last lines of stream `index` (for the failure summary).
  const std::deque<std::string>& tail(size_t index) const { return files_[index].tail; }

 private:
  struct File {
    std::string label;
    std::filesystem::path path;
    std::uintmax_t offset = 0;
    std::string partial;
    std::deque<std::string> tail;
  };
  void Emit(File& f, const std::string& line, std::string* out);

  int console_fd_;
  bool quiet_;
  size_t tail_lines_;
  std::vector<File> files_;
  std::function<void(size_t, const std::string&)> watcher_;
};

}  // namespace cadre::backends
