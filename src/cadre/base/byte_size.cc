#include "cadre/base/byte_size.h"

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <string>

namespace cadre {

Status ParseByteSize(std::string_view text, uint64_t* bytes) {
  const std::string s(text);
  auto bad = [&] {
    return InvalidArgument("'" + s + "' is not a byte count (like 4096, 256K, 16M or 1G)");
  };
  if (s.empty() || !(std::isdigit(static_cast<unsigned char>(s[0])) || s[0] == '.')) return bad();
  char* end = nullptr;
  const double value = std::strtod(s.c_str(), &end);
  const std::string unit = end;
  double mult = 0;
  if (unit.empty() || unit == "B") {
    mult = 1;
  } else if (unit == "K" || unit == "k" || unit == "KiB") {
    mult = 1024;
  } else if (unit == "M" || unit == "MiB") {
    mult = 1 << 20;
  } else if (unit == "G" || unit == "GiB") {
    mult = 1 << 30;
  } else {
    return bad();
  }
  const double total = value * mult;
  if (end == s.c_str() || !std::isfinite(total) || total < 0 || total > std::ldexp(1.0, 50) ||
      total != std::floor(total)) {
    return bad();
  }
  *bytes = static_cast<uint64_t>(total);
  return Status::Ok();
}

}  // namespace cadre
