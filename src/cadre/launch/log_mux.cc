#include "cadre/launch/log_mux.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "cadre/base/deadline.h"

namespace cadre::launch {
namespace {

// A line longer than this is cut into pieces, so one runaway slot cannot grow memory unbounded.
constexpr size_t kMaxLine = 64 * 1024;

void WriteAll(int fd, std::string_view text) {
  while (!text.empty()) {
    ssize_t n = write(fd, text.data(), text.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // console gone (closed pipe): the job still runs, logs still written
    text.remove_prefix(static_cast<size_t>(n));
  }
}

}  // namespace

LogMux::~LogMux() {
  for (auto& s : streams_) {
    if (s.read_fd >= 0) close(s.read_fd);
    if (s.log_fd >= 0) close(s.log_fd);
  }
}

Status LogMux::AddStream(std::string label, const std::filesystem::path& log_file, int* write_fd,
                         size_t* index) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return IoError(std::string("pipe: ") + std::strerror(errno));
  int log_fd = open(log_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_APPEND, 0644);
  if (log_fd < 0) {
    close(fds[0]);
    close(fds[1]);
    return IoError("cannot create " + log_file.string() + ": " + std::strerror(errno));
  }
  Stream s;
  s.label = std::move(label);
  s.read_fd = fds[0];
  s.log_fd = log_fd;
  streams_.push_back(std::move(s));
  *write_fd = fds[1];
  *index = streams_.size() - 1;
  return Status::Ok();
}

void LogMux::EmitLine(Stream& s, std::string_view line, std::string* console) {
  std::string raw(line);
  raw += '\n';
  WriteAll(s.log_fd, raw);
  s.tail.emplace_back(line);
  while (s.tail.size() > options_.tail_lines) s.tail.pop_front();
  if (!options_.quiet) *console += "[" + s.label + "] " + raw;
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
  if (extra_fd >= 0) fds.push_back({extra_fd, POLLIN, 0});
  *extra_ready = false;
  int r = poll(fds.data(), fds.size(), timeout_ms);
  if (r <= 0) return;
  for (size_t i = 0; i < owners.size(); ++i) {
    if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) HandleReadable(streams_[owners[i]]);
  }
  if (extra_fd >= 0 && (fds.back().revents & POLLIN)) *extra_ready = true;
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
    WriteAll(options_.console_fd, text);
    return;
  }
  // Clear the status line, print, redraw it: one write, so the terminal never shows a torn line.
  WriteAll(options_.console_fd, "\r\033[K" + text + status_);
}

void LogMux::SetStatus(std::string text) {
  if (!options_.status_line || text == status_) return;
  status_ = std::move(text);
  WriteAll(options_.console_fd, "\r\033[K" + status_);
}

void LogMux::Message(const std::string& text) {
  if (options_.status_line && !status_.empty()) WriteAll(options_.console_fd, "\r\033[K");
  WriteAll(options_.message_fd, text);
  if (options_.status_line && !status_.empty()) WriteAll(options_.console_fd, status_);
}

void LogMux::ClearStatus() {
  if (!options_.status_line || status_.empty()) return;
  status_.clear();
  WriteAll(options_.console_fd, "\r\033[K");
}

}  // namespace cadre::launch
