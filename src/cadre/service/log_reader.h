// LogReader: reads a job's training.log as numbered lines while the runner is still appending to
// it. Line numbers start at 1; a line is handed out only once complete (ends in a newline), so a
// follower never sees half a line. The file may not exist yet (a queued job).
//
// Not thread-safe: one reader per stream.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace cadre::service {

struct LogLine {
  int64_t number = 0;
  std::string text;  // without the newline
};

class LogReader {
 public:
  explicit LogReader(std::filesystem::path file) : file_(std::move(file)) {}

  // Complete lines written since the last call, at most about max_bytes of them.
  std::vector<LogLine> Next(size_t max_bytes = 1 << 20);
  // After the writer has finished: a last line without a newline counts too.
  std::vector<LogLine> Rest();

 private:
  std::filesystem::path file_;
  std::ifstream in_;
  std::string partial_;
  int64_t lines_ = 0;
};

}  // namespace cadre::service
