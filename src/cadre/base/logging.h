// Minimal leveled logging to stderr. One line per message, written with a single write(2) so
// lines from many threads or processes do not interleave. The threshold comes from
// CADRE_LOG_LEVEL (debug, info, warning, error; default warning) and is read once.
#pragma once

#include <sstream>
#include <string>
#include <string_view>

namespace cadre {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

LogLevel LogThreshold();
bool LogEnabled(LogLevel level);

// A CADRE_LOG_LEVEL value: debug/info/warning/error (also upper case, or 0 to 3); unset or empty
// is warning. Anything else is warning too, and *complaint then says so, naming the variable and
// the values it takes (logging cannot refuse to start, so LogThreshold() prints it once).
LogLevel ParseLogLevel(const char* value, std::string* complaint);

// Collects one message and writes it on destruction.
class LogMessage {
 public:
  LogMessage(LogLevel level, const char* file, int line);
  ~LogMessage();
  LogMessage(const LogMessage&) = delete;
  LogMessage& operator=(const LogMessage&) = delete;
  std::ostream& stream() { return stream_; }

 private:
  LogLevel level_;
  std::ostringstream stream_;
};

}  // namespace cadre

#define CADRE_LOG_LEVEL_DEBUG ::cadre::LogLevel::kDebug
#define CADRE_LOG_LEVEL_INFO ::cadre::LogLevel::kInfo
#define CADRE_LOG_LEVEL_WARNING ::cadre::LogLevel::kWarning
#define CADRE_LOG_LEVEL_ERROR ::cadre::LogLevel::kError

// CADRE_LOG(INFO) << "rank " << rank << " connected";
#define CADRE_LOG(level)                               \
  if (!::cadre::LogEnabled(CADRE_LOG_LEVEL_##level)) { \
  } else                                               \
    ::cadre::LogMessage(CADRE_LOG_LEVEL_##level, __FILE__, __LINE__).stream()
