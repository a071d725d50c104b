#include "cadre/engine/timeline.h"

#include <cctype>
#include <cerrno>
#include <chrono>
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

std::string Timeline::Upper(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

std::string Timeline::HorovodDataTypeName(comm::DataType dtype) {
  return "HOROVOD_" + Upper(comm::DataTypeName(dtype));
}

std::string Timeline::ShapeString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

void Timeline::Start(const std::string& path, bool mark_cycles) {
  Stop();
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (!f) throw Error(IoError("timeline: cannot open " + path + ": " + std::strerror(errno)));
  std::lock_guard<std::mutex> lock(mu_);
  file_ = f;
  active_.store(true, std::memory_order_relaxed);
  mark_cycles_ = mark_cycles;
  first_ = true;
  start_ = Clock::now();
  tensors_.clear();
  const auto epoch_us = std::chrono::duration_cast<std::chrono::microseconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count();
  WriteLocked(R"({"name": "process_name", "ph": "M", "pid": 0, "args": )"
              R"({"start_time_since_epoch_in_micros": )" +
              std::to_string(epoch_us) + "}}");
  WriteLocked(R"({"name": "process_sort_index", "ph": "M", "pid": 0, "args": {"sort_index": 0}})");
}

void Timeline::Stop() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!file_) return;
  std::fclose(file_);  // already valid JSON: every record ends the array
  file_ = nullptr;
  active_.store(false, std::memory_order_relaxed);
}

bool Timeline::active() const { return active_.load(std::memory_order_relaxed); }

long long Timeline::NowLocked() const {
  return std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start_).count();
}

void Timeline::WriteLocked(const std::string& record) {
  if (first_) {
    std::fputs("[\n", file_);
    first_ = false;
  } else {
    std::fseek(file_, -1, SEEK_CUR);  // over the closing "]" of the previous record
    std::fputs(",\n", file_);
  }
  std::fputs(record.c_str(), file_);
  std::fputs("]", file_);
  std::fflush(file_);
}

Timeline::Tensor& Timeline::TensorLocked(const std::string& tensor, OpType op) {
  auto [it, inserted] = tensors_.try_emplace(tensor);
  Tensor& t = it->second;
  if (inserted) {
    t.pid = static_cast<int>(tensors_.size());
    const std::string prefix = std::string(OpTypeName(op)) + ".";
    t.display = tensor.rfind(prefix, 0) == 0 ? tensor : prefix + tensor;
    const std::string pid = std::to_string(t.pid);
    WriteLocked(R"({"name": "process_name", "ph": "M", "pid": )" + pid + R"(, "args": {"name": ")" +
                Escape(t.display) + "\"}}");
    WriteLocked(R"({"name": "process_sort_index", "ph": "M", "pid": )" + pid +
                R"(, "args": {"sort_index": )" + pid + "}}");
  }
  return t;
}

void Timeline::EventLocked(const Tensor& t, char phase, const std::string& name,
                           const std::string& args) {
  std::string r = R"({"ph": ")" + std::string(1, phase) + "\"";
  if (phase != 'E') r += R"(, "name": ")" + Escape(name) + "\"";
  r += R"(, "ts": )" + std::to_string(NowLocked()) + R"(, "pid": )" + std::to_string(t.pid);
  if (phase == 'X') r += R"(, "dur": 0)";
  if (!args.empty()) r += R"(, "args": {)" + args + "}";
  WriteLocked(r + "}");
}

void Timeline::NegotiateStart(const std::string& tensor, OpType op) {
  if (!active()) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (!file_) return;
  Tensor& t = TensorLocked(tensor, op);
  if (t.state != State::kNone) return;  // the first submission's negotiation is the one shown
  EventLocked(t, 'B', "NEGOTIATE_" + Upper(OpTypeName(op)));
  t.state = State::kNegotiating;
}

void Timeline::NegotiateRankReady(const std::string& tensor, int rank) {
  if (!active()) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (!file_) return;
  auto it = tensors_.find(tensor);
  if (it == tensors_.end() || it->second.state != State::kNegotiating) return;
  EventLocked(it->second, 'X', std::to_string(rank));
}

void Timeline::NegotiateEnd(const std::string& tensor) {
  if (!active()) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (!file_) return;
  auto it = tensors_.find(tensor);
  if (it == tensors_.end() || it->second.state != State::kNegotiating) return;
  EventLocked(it->second, 'E', "");
  it->second.state = State::kNone;
}

void Timeline::Start(const std::string& tensor, const std::string& name) {
  if (!active()) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (!file_) return;
  auto it = tensors_.find(tensor);
  if (it == tensors_.end() || it->second.state != State::kNone) return;
  EventLocked(it->second, 'B', name);
  it->second.state = State::kTopLevel;
}

void Timeline::ActivityStart(const std::string& tensor, const std::string& activity) {
  if (!active()) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (!file_) return;
  auto it = tensors_.find(tensor);
  if (it == tensors_.end() || it->second.state != State::kTopLevel) return;
  EventLocked(it->second, 'B', activity);
  it->second.state = State::kActivity;
}

void Timeline::ActivityEnd(const std::string& tensor) {
  if (!active()) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (!file_) return;
  auto it = tensors_.find(tensor);
  if (it == tensors_.end() || it->second.state != State::kActivity) return;
  EventLocked(it->second, 'E', "");
  it->second.state = State::kTopLevel;
}

void Timeline::End(const std::string& tensor, const Request* request) {
  if (!active()) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (!file_) return;
  auto it = tensors_.find(tensor);
  if (it == tensors_.end() || it->second.state == State::kNone) return;
  Tensor& t = it->second;
  if (t.state == State::kActivity) EventLocked(t, 'E', "");
  std::string args;
  if (request) {
    args = R"("dtype": ")" + HorovodDataTypeName(request->dtype) + R"(", "shape": ")" +
           ShapeString(request->shape) + "\"";
  }
  EventLocked(t, 'E', "", args);
  t.state = State::kNone;
}

void Timeline::MarkCycle() {
  if (!active()) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (!file_ || !mark_cycles_) return;
  WriteLocked(R"({"ph": "i", "name": "CYCLE_START", "ts": )" + std::to_string(NowLocked()) +
              R"(, "s": "g"})");
}

}  // namespace cadre::engine
