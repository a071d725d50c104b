// LogMux: the log multiplexer. Reads every slot's output pipe, splits it into lines, writes each
// line raw to the slot's log file and, prefixed with the slot's label ("[learner-2/1] "), to the
// console. A single thread does all console writes, a whole line at a time, so lines from
// different slots never mix. On a terminal a status line is kept at the bottom.
//
// Not thread-safe: the job's supervisor loop owns it.
#pragma once

#include <deque>
#include <filesystem>
#include <string>
#include <vector>

#include "cadre/base/status.h"

namespace cadre::launch {

struct LogMuxOptions {
  int console_fd = 1;        // slot lines and the status line
  int message_fd = 2;        // the runner's own messages (warnings, the summary)
  bool quiet = false;        // nothing from the slots on the console (log files still written)
  bool status_line = false;  // keep a redrawn status line at the bottom (terminals only)
  size_t tail_lines = 20;    // lines remembered per slot for the failure summary
};

class LogMux {
 public:
  explicit LogMux(LogMuxOptions options) : options_(options) {}
  ~LogMux();
  LogMux(const LogMux&) = delete;
  LogMux& operator=(const LogMux&) = delete;

  // Opens the slot's pipe and log file; *write_fd is the child's end (close it after spawning).
  // Returns the stream index.
  Status AddStream(std::string label, const std::filesystem::path& log_file, int* write_fd,
                   size_t* index);

  // Waits up to timeout_ms for output (or for `extra_fd` to become readable) and handles what
  // arrived. *extra_ready tells whether extra_fd is readable.
  void Poll(int timeout_ms, int extra_fd, bool* extra_ready);

  // Reads what the pipes still hold, waiting at most timeout_ms for writers that have not closed
  // (a slot's background process may keep a pipe open), then flushes partial lines.
  void Drain(int timeout_ms);

  bool all_closed() const;
  const std::deque<std::string>& tail(size_t index) const { return streams_[index].tail; }

  // Replaces the status line (no-op unless options.status_line).
  void SetStatus(std::string text);
  // Writes a runner message (newline-terminated) to message_fd without tearing the status line.
  void Message(const std::string& text);
  // Removes the status line for good (at the end of the job).
  void ClearStatus();

 private:
  struct Stream {
    std::string label;
    int read_fd = -1;
    int log_fd = -1;
    std::string partial;
    std::deque<std::string> tail;
  };

  void HandleReadable(Stream& s);
  void EmitLine(Stream& s, std::string_view line, std::string* console);
  void WriteConsole(const std::string& text);

  LogMuxOptions options_;
  std::vector<Stream> streams_;
  std::string status_;
};

}  // namespace cadre::launch
