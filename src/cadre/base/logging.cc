#include "cadre/base/logging.h"

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>

namespace cadre {
namespace {

const char* LevelTag(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return "D";
    case LogLevel::kInfo:
      return "I";
    case LogLevel::kWarning:
      return "W";
    case LogLevel::kError:
      return "E";
  }
  return "?";
}

}  // namespace

LogLevel ParseLogLevel(const char* value, std::string* complaint) {
  complaint->clear();
  if (value == nullptr || *value == '\0') return LogLevel::kWarning;
  const std::string v(value);
  if (v == "debug" || v == "DEBUG" || v == "0") return LogLevel::kDebug;
  if (v == "info" || v == "INFO" || v == "1") return LogLevel::kInfo;
  if (v == "warning" || v == "WARNING" || v == "2") return LogLevel::kWarning;
  if (v == "error" || v == "ERROR" || v == "3") return LogLevel::kError;
  *complaint = "CADRE_LOG_LEVEL='" + v +
               "' is not one of debug, info, warning, error (or 0 to 3); logging at warning";
  return LogLevel::kWarning;
}

LogLevel LogThreshold() {
  // Immutable after first use: read once from the environment.
  static const LogLevel threshold = [] {
    std::string complaint;
    const LogLevel level = ParseLogLevel(std::getenv("CADRE_LOG_LEVEL"), &complaint);
    if (!complaint.empty()) {
      const std::string line = "[cadre W] " + complaint + "\n";
      (void)!::write(STDERR_FILENO, line.data(), line.size());
    }
    return level;
  }();
  return threshold;
}

bool LogEnabled(LogLevel level) { return level >= LogThreshold(); }

LogMessage::LogMessage(LogLevel level, const char* file, int line) : level_(level) {
  const char* base = std::strrchr(file, '/');
  base = base ? base + 1 : file;
  auto now = std::chrono::system_clock::now();
  std::time_t t = std::chrono::system_clock::to_time_t(now);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof(stamp), "%H:%M:%S", &tm);
  stream_ << "[cadre " << LevelTag(level_) << " " << stamp << " " << base << ":" << line << "] ";
}

LogMessage::~LogMessage() {
  stream_ << '\n';
  std::string line = stream_.str();
  // A single write keeps concurrent lines whole; a short write to stderr is not retried.
  [[maybe_unused]] ssize_t n = ::write(STDERR_FILENO, line.data(), line.size());
}

}  // namespace cadre
