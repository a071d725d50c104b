#include "cadre/launch/log_mux.h"

#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "cadre/base/deadline.h"

namespace cadre::launch {
namespace {

// A line longer than this is cut into pieces, so one runaway slot cannot grow memory unbounded.
constexpr size_t kMaxLine = 64 * 1024;
// Console text waiting for a console that does not take it; beyond this, lines are dropped.
constexpr size_t kMaxQueued = 1024 * 1024;

// Writes all of `text` to a log file; false (errno set) when the file does not take it.
bool WriteAll(int fd, std::string_view text) {
  while (!text.empty()) {
    ssize_t n = write(fd, text.data(), text.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    text.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

size_t CountLines(std::string_view text) {
  return static_cast<size_t>(std::count(text.begin(), text.end(), '\n'));
}

}  // namespace

LogMux::LogMux(LogMuxOptions options) : options_(options) {
  for (int fd : {options_.console_fd, options_.message_fd}) {
    if (!sinks_.empty() && fd == sinks_[0].fd) break;  // one sink for both: order kept
    Sink sink;
    sink.fd = fd;
    struct stat st {};
    // A pipe or terminal may stop taking output (a paused pager). Our own open file description
    // of it can be non-blocking without changing the caller's. Regular files never stall.
    if (fd >= 0 && fstat(fd, &st) == 0 && (S_ISFIFO(st.st_mode) || S_ISCHR(st.st_mode))) {
      std::string self = "/proc/self/fd/" + std::to_string(fd);
      int copy = open(self.c_str(), O_WRONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
      if (copy >= 0) {
        sink.fd = copy;
        sink.owned = true;
        sink.nonblocking = true;
      }
    }
    sinks_.push_back(sink);
  }
  message_sink_ = sinks_.size() - 1;
}

LogMux::~LogMux() {
  FlushConsole(2000);
  for (auto& s : streams_) {
    if (s.read_fd >= 0) close(s.read_fd);
    if (s.log_fd >= 0) close(s.log_fd);
  }
  for (auto& sink : sinks_) {
    if (sink.owned) close(sink.fd);
  }
}

void LogMux::Enqueue(size_t sink, std::string text) {
  if (text.empty() || sinks_[sink].fd < 0 || sinks_[sink].broken) return;
  if (queued_bytes_ + text.size() > kMaxQueued) {
    dropped_lines_ += std::max<size_t>(1, CountLines(text));
    return;
  }
  queued_bytes_ += text.size();
  queue_.emplace_back(sink, std::move(text));
  Flush();
}

void LogMux::Flush() {
  while (!queue_.empty()) {
    auto& [index, text] = queue_.front();
    Sink& sink = sinks_[index];
    ssize_t n = -1;
    if (!sink.broken) {
      size_t chunk = text.size();
      if (!sink.nonblocking) {
        // A descriptor we could not copy: write only what poll says fits (PIPE_BUF).
        pollfd p{sink.fd, POLLOUT, 0};
        if (poll(&p, 1, 0) <= 0) return;
        chunk = std::min<size_t>(chunk, PIPE_BUF);
      }
      n = write(sink.fd, text.data(), chunk);
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
      if (n <= 0) sink.broken = true;  // console gone: the job still runs, logs still written
    }
    if (sink.broken) n = static_cast<ssize_t>(text.size());
    queued_bytes_ -= static_cast<size_t>(n);
    text.erase(0, static_cast<size_t>(n));
    if (text.empty()) queue_.pop_front();
  }
  if (dropped_lines_ > 0) {
    std::string note = "cadre: " + std::to_string(dropped_lines_) +
                       " lines were not shown: the console did not take them; the slots' logs "
                       "have every line\n";
    dropped_lines_ = 0;
    Enqueue(message_sink_, std::move(note));
  }
}

void LogMux::FlushConsole(int timeout_ms) {
  Deadline deadline{std::chrono::milliseconds(timeout_ms)};
  Flush();
  while (queued() && !deadline.expired()) {
    pollfd p{sinks_[queue_.front().first].fd, POLLOUT, 0};
    poll(&p, 1, std::min(deadline.poll_timeout_ms(), 100));
    Flush();
  }
}

size_t LogMux::lost_log_lines() const {
  size_t n = 0;
  for (const auto& s : streams_) n += s.lost_lines;
  return n;
}

Status LogMux::AddStream(std::string label, const std::filesystem::path& log_file, int* write_fd,
                         size_t* index) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return IoError(std::string("pipe: ") + std::strerror(errno));
  // Appended to: a restarted job's slots continue their log. Never through a symlink.
  int log_fd = open(log_file.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | O_APPEND | O_NOFOLLOW, 0644);
  if (log_fd < 0) {
    close(fds[0]);
    close(fds[1]);
    return IoError("cannot create " + log_file.string() + ": " + std::strerror(errno));
  }
  Stream s;
  s.label = std::move(label);
  s.log_path = log_file.string();
  s.read_fd = fds[0];
  s.log_fd = log_fd;
  streams_.push_back(std::move(s));
  *write_fd = fds[1];
  *index = streams_.size() - 1;
  return Status::Ok();
}

Status LogMux::ReopenStream(size_t index, int* write_fd) {
  Stream& s = streams_.at(index);
  if (s.read_fd >= 0) return Status(Code::kInternal, "ReopenStream: " + s.label + " is open");
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return IoError(std::string("pipe: ") + std::strerror(errno));
  s.read_fd = fds[0];
  *write_fd = fds[1];
  return Status::Ok();
}

void LogMux::Note(size_t index, const std::string& line) {
  std::string unused;
  bool quiet = options_.quiet;
  options_.quiet = true;
  EmitLine(streams_.at(index), line, &unused);
  options_.quiet = quiet;
}

void LogMux::EmitLine(Stream& s, std::string_view line, std::string* console) {
  std::string raw(line);
  raw += '\n';
  if (!WriteAll(s.log_fd, raw)) {
    if (s.lost_lines++ == 0) {
      Message("cadre: warning: cannot write " + s.log_path + ": " + std::strerror(errno) +
              "; its lines are lost until it can be written again (counted at the end)\n");
    }
  }
  s.tail.emplace_back(line);
  while (s.tail.size() > options_.tail_lines) s.tail.pop_front();
  if (options_.quiet) return;
  if (!s.label.empty()) *console += "[" + s.label + "] ";
  *console += raw;
}

void LogMux::HandleReadable(Stream& s) {
  char buf[16384];
  ssize_t n = read(s.read_fd, buf, sizeof(buf));
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return;
  std::string console;
  if (n <= 0) {
    // End of output: a last line without a newline is still a line.
    if (!s.partial.empty()) EmitLine(s, s.partial, &console);
    s.partial.clear();
    close(s.read_fd);
    s.read_fd = -1;
  } else {
    s.partial.append(buf, static_cast<size_t>(n));
    size_t start = 0;
    for (size_t nl; (nl = s.partial.find('\n', start)) != std::string::npos; start = nl + 1) {
      EmitLine(s, std::string_view(s.partial).substr(start, nl - start), &console);
    }
    s.partial.erase(0, start);
    while (s.partial.size() >= kMaxLine) {
      EmitLine(s, std::string_view(s.partial).substr(0, kMaxLine), &console);
      s.partial.erase(0, kMaxLine);
    }
  }
  if (!console.empty()) WriteConsole(console);
}

void LogMux::Poll(int timeout_ms, int extra_fd, bool* extra_ready) {
  std::vector<pollfd> fds;
  std::vector<size_t> owners;
  for (size_t i = 0; i < streams_.size(); ++i) {
    if (streams_[i].read_fd < 0) continue;
    fds.push_back({streams_[i].read_fd, POLLIN, 0});
    owners.push_back(i);
  }
  // Wake when a stalled console takes output again.
  if (queued()) fds.push_back({sinks_[queue_.front().first].fd, POLLOUT, 0});
  size_t extra_at = fds.size();
  if (extra_fd >= 0) fds.push_back({extra_fd, POLLIN, 0});
  *extra_ready = false;
  int r = poll(fds.data(), fds.size(), timeout_ms);
  if (r > 0) {
    for (size_t i = 0; i < owners.size(); ++i) {
      if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) HandleReadable(streams_[owners[i]]);
    }
    if (extra_fd >= 0 && (fds[extra_at].revents & POLLIN)) *extra_ready = true;
  }
  Flush();
}

void LogMux::Drain(int timeout_ms) {
  Deadline deadline{std::chrono::milliseconds(timeout_ms)};
  bool unused = false;
  while (!all_closed() && !deadline.expired()) Poll(deadline.poll_timeout_ms(), -1, &unused);
  std::string console;
  for (auto& s : streams_) {
    if (s.read_fd < 0) continue;
    if (!s.partial.empty()) EmitLine(s, s.partial, &console);
    s.partial.clear();
    close(s.read_fd);
    s.read_fd = -1;
  }
  if (!console.empty()) WriteConsole(console);
}

bool LogMux::all_closed() const {
  for (const auto& s : streams_) {
    if (s.read_fd >= 0) return false;
  }
  return true;
}

void LogMux::WriteConsole(const std::string& text) {
  if (!options_.status_line || status_.empty()) {
    Enqueue(0, text);
    return;
  }
  // Clear the status line, print, redraw it: one write, so the terminal never shows a torn line.
  Enqueue(0, "\r\033[K" + text + status_);
}

void LogMux::SetStatus(std::string text) {
  if (!options_.status_line || text == status_) return;
  status_ = std::move(text);
  // A console that is behind gets no redraws, only the lines.
  if (!queued()) Enqueue(0, "\r\033[K" + status_);
}

void LogMux::Message(const std::string& text) {
  if (options_.status_line && !status_.empty()) Enqueue(0, "\r\033[K");
  Enqueue(message_sink_, text);
  if (options_.status_line && !status_.empty()) Enqueue(0, status_);
}

void LogMux::ClearStatus() {
  if (!options_.status_line || status_.empty()) return;
  status_.clear();
  Enqueue(0, "\r\033[K");
}

}  // namespace cadre::launch
