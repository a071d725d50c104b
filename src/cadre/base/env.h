// Reading configuration from environment variables, with defaults and clear errors for values
// that do not parse. These are read at construction time of the objects that use them, never
// cached in globals.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

namespace cadre {

std::optional<std::string> GetEnv(const char* name);

// Returns `fallback` when the variable is unset or empty; throws Error(kInvalidArgument) naming
// the variable when it is set to something that is not an integer.
int64_t EnvInt(const char* name, int64_t fallback);

// Seconds as a decimal number ("60", "0.5"), 0 to kMaxEnvSeconds; anything else (negative, nan,
// inf, more) throws Error(kInvalidArgument) naming the variable and the range.
inline constexpr int64_t kMaxEnvSeconds = 365 * 86400;
std::chrono::milliseconds EnvSeconds(const char* name, std::chrono::milliseconds fallback);

// 1/true/yes/on/TRUE or 0/false/no/off/FALSE; anything else throws naming the variable and these.
bool EnvBool(const char* name, bool fallback);

}  // namespace cadre
