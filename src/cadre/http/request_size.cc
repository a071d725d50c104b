#include "cadre/http/request_size.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstring>

namespace cadre::http {
namespace {

// The body announced by the head `head` (lower case); `streamed` when the worker reads it.
size_t Body(const std::string& head, bool* streamed) {
  *streamed = head.find("\nexpect:") != std::string::npos ||
              head.find("\ntransfer-encoding:") != std::string::npos;
  if (*streamed) return 0;
  size_t at = head.find("\ncontent-length:");
  if (at == std::string::npos) return 0;
  at += std::strlen("\ncontent-length:");
  while (at < head.size() && (head[at] == ' ' || head[at] == '\t')) ++at;
  size_t length = 0;
  auto [end, ec] = std::from_chars(head.data() + at, head.data() + head.size(), length);
  (void)end;
  if (ec != std::errc()) return 0;
  *streamed = length > kLobbyBody;
  return *streamed ? 0 : length;
}

// The head that starts `bytes`, in lower case; empty while it has not ended within `max_head`.
std::string Head(std::string_view bytes, size_t max_head) {
  size_t end = bytes.find("\n\r\n");
  if (end == std::string::npos || end + 3 > max_head) return {};
  std::string head(bytes.substr(0, end + 3));
  std::transform(head.begin(), head.end(), head.begin(),
                 [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  return head;
}

}  // namespace

size_t RequestSize(std::string_view bytes, size_t max_head) {
  const std::string head = Head(bytes, max_head);
  if (head.empty()) return std::string::npos;
  bool streamed;
  return head.size() + Body(head, &streamed);
}

bool BodyStreamed(std::string_view bytes, size_t max_head) {
  const std::string head = Head(bytes, max_head);
  bool streamed = false;
  if (!head.empty()) Body(head, &streamed);
  return streamed;
}

}  // namespace cadre::http
