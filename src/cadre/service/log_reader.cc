#include "cadre/service/log_reader.h"

namespace cadre::service {

std::vector<LogLine> LogReader::Next(size_t max_bytes) {
  std::vector<LogLine> out;
  if (!in_.is_open()) {
    in_.open(file_, std::ios::binary);
    if (!in_.is_open()) return out;
  }
  in_.clear();  // past EOF last time; the writer may have appended since
  char buffer[64 << 10];
  size_t read = 0;
  while (read < max_bytes) {
    in_.read(buffer, sizeof(buffer));
    std::streamsize n = in_.gcount();
    if (n <= 0) break;
    read += static_cast<size_t>(n);
    for (std::streamsize i = 0; i < n; ++i) {
      if (buffer[i] == '\n') {
        out.push_back({++lines_, std::move(partial_)});
        partial_.clear();
      } else {
        partial_ += buffer[i];
      }
    }
  }
  return out;
}

std::vector<LogLine> LogReader::Rest() {
  std::vector<LogLine> out = Next(SIZE_MAX);
  if (!partial_.empty()) {
    out.push_back({++lines_, std::move(partial_)});
    partial_.clear();
  }
  return out;
}

}  // namespace cadre::service
