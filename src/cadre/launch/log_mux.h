// LogMux: the log multiplexer. Reads every slot's output pipe, splits it into lines, writes each
// line raw to the slot's log file and, prefixed with the slot's label ("[learner-2/1] "), to the
// console. A single thread does all console writes, a whole line at a time, so lines from
// different slots never mix. On a terminal a status line is kept at the bottom.
//
// Nothing here blocks the supervisor: console and message writes are queued and written as the
// console takes them (through a non-blocking copy of a pipe or terminal descriptor), so a paused
// pager or a stopped `| less` never holds up signal handling. A console that takes nothing for
// long loses lines past a 1 MiB backlog (counted and reported; the log files have every line).
// A log file that cannot be written (disk full) is reported once, with the lines lost counted.
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
  explicit LogMux(LogMuxOptions options);
  ~LogMux();
  LogMux(const LogMux&) = delete;
  LogMux& operator=(const LogMux&) = delete;

  // Opens the slot's pipe and log file; *write_fd is the child's end (close it after spawning).
  // Returns the stream index. An empty label writes the stream's lines to the console as they
  // are, unprefixed (still whole lines).
  Status AddStream(std::string label, const std::filesystem::path& log_file, int* write_fd,
                   size_t* index);

  // A new pipe for a stream whose pipe has closed (a restarted slot): same label, log file
  // (appended to) and tail. *write_fd is the child's end.
  Status ReopenStream(size_t index, int* write_fd);
  // Writes a line of the runner's own into a stream's log file (and its tail), not the console.
  void Note(size_t index, const std::string& line);
  size_t streams() const { return streams_.size(); }

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
  // Writes what is queued for the console, waiting at most timeout_ms for it to take it.
  void FlushConsole(int timeout_ms);
  // Lines the log files could not take (disk full), over every stream.
  size_t lost_log_lines() const;

 private:
  struct Stream {
    std::string label;
    std::string log_path;
    int read_fd = -1;
    int log_fd = -1;
    std::string partial;
    std::deque<std::string> tail;
    size_t lost_lines = 0;  // lines the log file did not take
  };
  // Where console and message text goes: the caller's descriptor, or our own non-blocking
  // copy of it (owned) when it is a pipe or a terminal.
  struct Sink {
    int fd = -1;
    bool owned = false;
    bool nonblocking = false;
    bool broken = false;  // a write failed for good (closed pipe): text for it is dropped
  };

  void HandleReadable(Stream& s);
  void EmitLine(Stream& s, std::string_view line, std::string* console);
  void WriteConsole(const std::string& text);
  void Enqueue(size_t sink, std::string text);
  // Writes queued text while the sinks take it without blocking.
  void Flush();
  bool queued() const { return !queue_.empty(); }

  LogMuxOptions options_;
  std::vector<Stream> streams_;
  std::string status_;
  std::vector<Sink> sinks_;  // [0] console, [1] messages (the same as [0] when fds are equal)
  size_t message_sink_ = 0;
  std::deque<std::pair<size_t, std::string>> queue_;  // in the order written
  size_t queued_bytes_ = 0;
  size_t dropped_lines_ = 0;  // console lines dropped past the backlog, not yet reported
};

}  // namespace cadre::launch
