#include "cadre/base/env.h"

#include <cmath>
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
    // Finite and bounded, so that the conversion below is defined ("inf", "1e300").
    if (used == v->size() && std::isfinite(s) && s >= 0 && s <= kMaxEnvSeconds) {
      return std::chrono::milliseconds(static_cast<int64_t>(s * 1000.0));
    }
  } catch (const std::exception&) {
  }
  throw Error(InvalidArgument(std::string(name) + "=" + *v + " is not a number of seconds (0 to " +
                              std::to_string(kMaxEnvSeconds) + ", a year)"));
}

bool EnvBool(const char* name, bool fallback) {
  auto v = GetEnv(name);
  if (!v) return fallback;
  const std::string& s = *v;
  if (s == "1" || s == "true" || s == "yes" || s == "on" || s == "TRUE") return true;
  if (s == "0" || s == "false" || s == "no" || s == "off" || s == "FALSE") return false;
  throw Error(InvalidArgument(std::string(name) + "=" + s +
                              " is not a boolean (1, true, yes, on, 0, false, no, off)"));
}

}  // namespace cadre
