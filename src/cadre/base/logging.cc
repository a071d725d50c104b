#include "cadre/base/logging.h"

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>

namespace cadre {
namespace {

LogLevel ParseLevel(const char* value) {
  if (value == nullptr) return LogLevel::kWarning;
  std::string v(value);
  if (v == "debug" || v == "DEBUG" || v == "0") return LogLevel::kDebug;
  if (v == "info" || v == "INFO" || v == "1") return LogLevel::kInfo;
  if (v == "error" || v == "ERROR" || v == "3") return LogLevel::kError;
  return LogLevel::kWarning;
}

const char* LevelTag(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug: return "D";
    case LogLevel::kInfo: return "I";
    case LogLevel::kWarning: return "W";
    case LogLevel::kError: return "E";
  }
  return "?";
}

}  // namespace

LogLevel LogThreshold() {
  // Immutable after first use: read once from the environment.
  static const LogLevel threshold = ParseLevel(std::getenv("CADRE_LOG_LEVEL"));
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
