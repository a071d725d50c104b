// Wall-clock times as the API writes them: ISO 8601 UTC with milliseconds,
// "2026-12-02T04:51:07.123Z".
#pragma once

#include <chrono>
#include <string>

namespace cadre::service {

std::string IsoTime(std::chrono::system_clock::time_point t);
inline std::string NowIso() { return IsoTime(std::chrono::system_clock::now()); }

}  // namespace cadre::service
