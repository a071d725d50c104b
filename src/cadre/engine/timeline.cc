#include "cadre/engine/timeline.h"

#include <cerrno>
#include <cstring>

#include "cadre/base/status.h"

namespace cadre::engine {

namespace {

std::string Escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += ' ';
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

void Timeline::Start(const std::string& path, bool mark_cycles) {
  Stop();
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (!f) throw Error(IoError("timeline: cannot open " + path + ": " + std::strerror(errno)));
  std::lock_guard<std::mutex> lock(mu_);
  file_ = f;
  mark_cycles_ = mark_cycles;
  first_ = true;
  start_ = Clock::now();
  tids_.clear();
  std::fputs("[\n", file_);
}

void Timeline::Stop() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!file_) return;
  std::fputs("\n]\n", file_);
  std::fclose(file_);
  file_ = nullptr;
}

bool Timeline::active() const {
  std::lock_guard<std::mutex> lock(mu_);
  return file_ != nullptr;
}

int Timeline::TidLocked(const std::string& tensor) {
  auto [it, inserted] = tids_.emplace(tensor, static_cast<int>(tids_.size()) + 1);
  if (inserted) {
    WriteLocked(R"({"name":"thread_name","ph":"M","pid":0,"tid":)" + std::to_string(it->second) +
                R"(,"args":{"name":")" + Escape(tensor) + "\"}}");
  }
  return it->second;
}

void Timeline::WriteLocked(const std::string& json) {
  if (!first_) std::fputs(",\n", file_);
  first_ = false;
  std::fputs(json.c_str(), file_);
}

void Timeline::Begin(const std::string& tensor, const std::string& activity) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!file_) return;
  const auto us =
      std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start_).count();
  const int tid = TidLocked(tensor);
  WriteLocked(R"({"name":")" + Escape(activity) + R"(","ph":"B","pid":0,"tid":)" +
              std::to_string(tid) + R"(,"ts":)" + std::to_string(us) + "}");
}

void Timeline::End(const std::string& tensor) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!file_) return;
  const auto us =
      std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start_).count();
  const int tid = TidLocked(tensor);
  WriteLocked(R"({"ph":"E","pid":0,"tid":)" + std::to_string(tid) + R"(,"ts":)" +
              std::to_string(us) + "}");
}

void Timeline::MarkCycle() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!file_ || !mark_cycles_) return;
  const auto us =
      std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start_).count();
  WriteLocked(R"({"name":"CYCLE_START","ph":"i","s":"g","pid":0,"tid":0,"ts":)" +
              std::to_string(us) + "}");
}

}  // namespace cadre::engine
