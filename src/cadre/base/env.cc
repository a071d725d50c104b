#include "cadre/base/env.h"

#include <cstdlib>
#include <stdexcept>

#include "cadre/base/status.h"

namespace cadre {

std::optional<std::string> GetEnv(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

int64_t EnvInt(const char* name, int64_t fallback) {
  auto v = GetEnv(name);
  if (!v) return fallback;
  try {
    size_t used = 0;
    int64_t n = std::stoll(*v, &used);
    if (used == v->size()) return n;
  } catch (const std::exception&) {
  }
  throw Error(InvalidArgument(std::string(name) + "=" + *v + " is not an integer"));
}

std::chrono::milliseconds EnvSeconds(const char* name, std::chrono::milliseconds fallback) {
  auto v = GetEnv(name);
  if (!v) return fallback;
  try {
    size_t used = 0;
    double s = std::stod(*v, &used);
    if (used == v->size() && s >= 0) {
      return std::chrono::milliseconds(static_cast<int64_t>(s * 1000.0));
    }
  } catch (const std::exception&) {
  }
  throw Error(InvalidArgument(std::string(name) + "=" + *v + " is not a number of seconds"));
}

bool EnvBool(const char* name, bool fallback) {
  auto v = GetEnv(name);
  if (!v) return fallback;
  const std::string& s = *v;
  if (s == "1" || s == "true" || s == "yes" || s == "on" || s == "TRUE") return true;
  if (s == "0" || s == "false" || s == "no" || s == "off" || s == "FALSE") return false;
  throw Error(InvalidArgument(std::string(name) + "=" + s + " is not a boolean"));
}

}  // namespace cadre
