#include "cadre/backends/hostlist.h"

#include <charconv>

namespace cadre::backends {
namespace {

bool IsDigits(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

std::string Padded(unsigned long value, size_t width) {
  std::string digits = std::to_string(value);
  if (digits.size() < width) digits.insert(0, width - digits.size(), '0');
  return digits;
}

// The names of one bracket group's contents: "01-03,7" -> 01 02 03 7.
Status ExpandRanges(std::string_view entry, std::string_view ranges, std::vector<std::string>* out,
                    size_t max_hosts) {
  size_t start = 0;
  while (start <= ranges.size()) {
    size_t comma = std::min(ranges.find(',', start), ranges.size());
    std::string_view part = ranges.substr(start, comma - start);
    size_t dash = part.find('-');
    std::string_view lo = part.substr(0, dash);
    std::string_view hi = dash == std::string_view::npos ? lo : part.substr(dash + 1);
    if (!IsDigits(lo) || !IsDigits(hi) || lo.size() > 9 || hi.size() > 9) {
      return InvalidArgument("host list entry '" + std::string(entry) + "': '" + std::string(part) +
                             "' is not a number or a range of numbers");
    }
    unsigned long a = 0, b = 0;
    std::from_chars(lo.data(), lo.data() + lo.size(), a);
    std::from_chars(hi.data(), hi.data() + hi.size(), b);
    if (b < a) {
      return InvalidArgument("host list entry '" + std::string(entry) + "': range '" +
                             std::string(part) + "' runs backwards");
    }
    if (b - a >= max_hosts || out->size() + (b - a + 1) > max_hosts) {
      return InvalidArgument("host list entry '" + std::string(entry) + "' names more than " +
                             std::to_string(max_hosts) + " hosts");
    }
    for (unsigned long v = a; v <= b; ++v) out->push_back(Padded(v, lo.size()));
    start = comma + 1;
  }
  return Status::Ok();
}

// Expands one entry (no top-level commas), appending to *hosts.
Status ExpandEntry(std::string_view whole, std::string_view entry, std::string prefix,
                   std::vector<std::string>* hosts, size_t max_hosts) {
  size_t open = entry.find('[');
  size_t stray = entry.find(']');
  if (open == std::string_view::npos) {
    if (stray != std::string_view::npos) {
      return InvalidArgument("host list entry '" + std::string(whole) + "' has a ']' without '['");
    }
    if (hosts->size() >= max_hosts) {
      return InvalidArgument("the host list names more than " + std::to_string(max_hosts) +
                             " hosts");
    }
    hosts->push_back(prefix + std::string(entry));
    return Status::Ok();
  }
  size_t close = entry.find(']', open);
  if (close == std::string_view::npos || stray < open) {
    return InvalidArgument("host list entry '" + std::string(whole) + "' has unbalanced brackets");
  }
  std::vector<std::string> numbers;
  CADRE_RETURN_IF_ERROR(
      ExpandRanges(whole, entry.substr(open + 1, close - open - 1), &numbers, max_hosts));
  std::string head = prefix + std::string(entry.substr(0, open));
  for (const auto& n : numbers) {
    CADRE_RETURN_IF_ERROR(ExpandEntry(whole, entry.substr(close + 1), head + n, hosts, max_hosts));
  }
  return Status::Ok();
}

}  // namespace

Status ExpandHostlist(std::string_view list, std::vector<std::string>* hosts, size_t max_hosts) {
  std::vector<std::string> out;
  size_t start = 0;
  int depth = 0;
  for (size_t i = 0; i <= list.size(); ++i) {
    char c = i < list.size() ? list[i] : ',';
    if (c == '[') ++depth;
    if (c == ']') --depth;
    if (c != ',' || depth > 0) continue;
    std::string_view entry = list.substr(start, i - start);
    start = i + 1;
    if (entry.empty()) continue;
    CADRE_RETURN_IF_ERROR(ExpandEntry(entry, entry, "", &out, max_hosts));
  }
  if (depth != 0) {
    return InvalidArgument("host list '" + std::string(list) + "' has unbalanced brackets");
  }
  *hosts = std::move(out);
  return Status::Ok();
}

}  // namespace cadre::backends
