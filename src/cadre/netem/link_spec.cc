#include "cadre/netem/link_spec.h"

#include <charconv>
#include <cmath>
#include <string>
#include <vector>

namespace cadre::netem {
namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

// Splits "2.5gbit" into 2.5 and "gbit". Fails when there is no leading non-negative number.
bool SplitNumber(std::string_view part, double* number, std::string* unit) {
  const char* begin = part.data();
  const char* end = part.data() + part.size();
  auto [ptr, ec] = std::from_chars(begin, end, *number, std::chars_format::fixed);
  if (ec != std::errc() || ptr == begin || !std::isfinite(*number) || *number < 0) return false;
  *unit = Lower(std::string_view(ptr, static_cast<size_t>(end - ptr)));
  return true;
}

struct Unit {
  const char* name;
  double scale;
};

constexpr Unit kRateUnits[] = {
    {"bit", 1.0}, {"kbit", 1e3}, {"mbit", 1e6}, {"gbit", 1e9}, {"tbit", 1e12},
};
constexpr Unit kDelayUnits[] = {{"us", 1.0}, {"ms", 1e3}, {"s", 1e6}};

constexpr uint64_t kMinRate = 1000;                // htb cannot shape usefully below 1 kbit/s
constexpr uint64_t kMaxRate = 10'000'000'000'000;  // 10 tbit/s
constexpr int64_t kMaxDelayUs = 60'000'000;        // a minute: anything above is a typo

Status Bad(std::string_view text, std::string_view what, std::string_view part,
           std::string_view why) {
  std::string m = "link spec \"";
  m += text;
  m += "\": ";
  m += what;
  m += " \"";
  m += part;
  m += "\" ";
  m += why;
  return InvalidArgument(std::move(m));
}

Status ParseRate(std::string_view text, std::string_view part, uint64_t* out) {
  double n = 0;
  std::string unit;
  if (!SplitNumber(part, &n, &unit)) {
    return Bad(text, "rate", part, "is not a number with a unit (e.g. 1gbit, 100mbit)");
  }
  if (unit == "bps" || unit == "kbps" || unit == "mbps" || unit == "gbps" || unit == "tbps") {
    return Bad(text, "rate", part,
               "is ambiguous: tc reads 'bps' as bytes per second; write it in bit, kbit, mbit, "
               "gbit or tbit");
  }
  for (const Unit& u : kRateUnits) {
    if (unit != u.name) continue;
    double bits = n * u.scale;
    if (bits < static_cast<double>(kMinRate) || bits > static_cast<double>(kMaxRate)) {
      return Bad(text, "rate", part, "is out of range (1kbit to 10tbit)");
    }
    *out = static_cast<uint64_t>(std::llround(bits));
    return Status::Ok();
  }
  return Bad(text, "rate", part,
             "has unknown unit \"" + unit + "\" (use bit, kbit, mbit, gbit or tbit)");
}

Status ParseDelay(std::string_view text, std::string_view part, std::chrono::microseconds* out) {
  double n = 0;
  std::string unit;
  if (!SplitNumber(part, &n, &unit)) {
    return Bad(text, "delay", part, "is not a number with a unit (e.g. 1ms, 500us)");
  }
  for (const Unit& u : kDelayUnits) {
    if (unit != u.name) continue;
    double us = n * u.scale;
    if (us > static_cast<double>(kMaxDelayUs)) {
      return Bad(text, "delay", part, "is out of range (at most 60s)");
    }
    *out = std::chrono::microseconds(std::llround(us));
    return Status::Ok();
  }
  return Bad(text, "delay", part, "has unknown unit \"" + unit + "\" (use us, ms or s)");
}

Status ParseLoss(std::string_view text, std::string_view part, double* out) {
  double n = 0;
  std::string unit;
  if (!SplitNumber(part, &n, &unit) || unit != "%") {
    return Bad(text, "loss", part, "is not a percentage (e.g. 0.1%)");
  }
  if (n >= 100.0) return Bad(text, "loss", part, "must be below 100%");
  *out = n / 100.0;
  return Status::Ok();
}

// Formats `value` with the largest unit that divides it exactly.
std::string FormatExact(uint64_t value, const Unit* units, size_t count) {
  for (size_t i = count; i-- > 0;) {
    auto scale = static_cast<uint64_t>(units[i].scale);
    if (value != 0 && value % scale == 0) return std::to_string(value / scale) + units[i].name;
  }
  return std::to_string(value) + units[0].name;
}

}  // namespace

std::string FormatRate(uint64_t bits_per_s) {
  return FormatExact(bits_per_s, kRateUnits, std::size(kRateUnits));
}

std::string FormatDelay(std::chrono::microseconds delay) {
  return FormatExact(static_cast<uint64_t>(delay.count()), kDelayUnits, std::size(kDelayUnits));
}

std::string LinkSpec::ToString() const {
  std::string out = FormatRate(rate_bits_per_s);
  if (delay.count() > 0 || loss > 0.0) out += "," + FormatDelay(delay);
  if (loss > 0.0) {
    char buf[32];
    auto [ptr, ec] = std::to_chars(buf, buf + sizeof(buf), loss * 100.0);
    out += "," + std::string(buf, ec == std::errc() ? ptr : buf) + "%";
  }
  return out;
}

Status ParseLinkSpec(std::string_view text, LinkSpec* out) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  while (true) {
    size_t comma = text.find(',', start);
    parts.push_back(Trim(text.substr(start, comma - start)));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  if (parts.size() > 3) {
    return InvalidArgument("link spec \"" + std::string(text) +
                           "\" has more than 3 parts (expected RATE[,DELAY[,LOSS]])");
  }
  LinkSpec spec;
  if (parts[0].empty()) {
    return InvalidArgument("link spec \"" + std::string(text) +
                           "\" has no rate (expected RATE[,DELAY[,LOSS]], e.g. 1gbit,1ms)");
  }
  CADRE_RETURN_IF_ERROR(ParseRate(text, parts[0], &spec.rate_bits_per_s));
  if (parts.size() > 1) CADRE_RETURN_IF_ERROR(ParseDelay(text, parts[1], &spec.delay));
  if (parts.size() > 2) CADRE_RETURN_IF_ERROR(ParseLoss(text, parts[2], &spec.loss));
  *out = spec;
  return Status::Ok();
}

LinkSpec ParseLinkSpecOrThrow(std::string_view text) {
  LinkSpec spec;
  ThrowIfError(ParseLinkSpec(text, &spec));
  return spec;
}

}  // namespace cadre::netem
