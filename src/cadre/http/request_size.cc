#include "cadre/http/request_size.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstring>

namespace cadre::http {
namespace {

// The body to wait for with the head `head` (lower case), when it is small.
size_t SmallBody(const std::string& head) {
  if (head.find("\nexpect:") != std::string::npos ||
      head.find("\ntransfer-encoding:") != std::string::npos) {
    return 0;
  }
  size_t at = head.find("\ncontent-length:");
  if (at == std::string::npos) return 0;
  at += std::strlen("\ncontent-length:");
  while (at < head.size() && (head[at] == ' ' || head[at] == '\t')) ++at;
  size_t length = 0;
  auto [end, ec] = std::from_chars(head.data() + at, head.data() + head.size(), length);
  (void)end;
  return ec == std::errc() && length <= kLobbyBody ? length : 0;
}

}  // namespace

size_t RequestSize(std::string_view bytes, size_t max_head) {
  size_t end = bytes.find("\n\r\n");
  if (end == std::string::npos || end + 3 > max_head) return std::string::npos;
  std::string head(bytes.substr(0, end + 3));
  std::transform(head.begin(), head.end(), head.begin(),
                 [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  return end + 3 + SmallBody(head);
}

}  // namespace cadre::http
