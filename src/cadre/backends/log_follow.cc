#include "cadre/backends/log_follow.h"

#include <unistd.h>

#include <fstream>

namespace cadre::backends {

void LogFollower::Add(std::string label, std::filesystem::path path) {
  File f;
  f.label = std::move(label);
  f.path = std::move(path);
  files_.push_back(std::move(f));
}

void LogFollower::Emit(File& f, const std::string& line, std::string* out) {
  if (watcher_) watcher_(static_cast<size_t>(&f - files_.data()), line);
  f.tail.push_back(line);
  if (f.tail.size() > tail_lines_) f.tail.pop_front();
  if (!quiet_) *out += "[" + f.label + "] " + line + "\n";
}

void LogFollower::Poll(bool flush) {
  std::string out;
  for (auto& f : files_) {
    std::ifstream in(f.path, std::ios::binary);
    if (in) {
      in.seekg(static_cast<std::streamoff>(f.offset));
      std::string chunk((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      f.offset += chunk.size();
      f.partial += chunk;
    }
    size_t start = 0;
    for (size_t nl; (nl = f.partial.find('\n', start)) != std::string::npos; start = nl + 1) {
      Emit(f, f.partial.substr(start, nl - start), &out);
    }
    f.partial.erase(0, start);
    if (flush && !f.partial.empty()) {
      Emit(f, f.partial, &out);
      f.partial.clear();
    }
  }
  std::string_view rest = out;
  while (!rest.empty()) {
    ssize_t n = write(console_fd_, rest.data(), rest.size());
    if (n <= 0) break;  // a closed console loses the lines, never the job (logs are kept)
    rest.remove_prefix(static_cast<size_t>(n));
  }
}

}  // namespace cadre::backends
