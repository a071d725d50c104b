#include "cadre/base/printable.h"

#include <algorithm>

namespace cadre {
namespace {

constexpr char kHex[] = "0123456789abcdef";

void AppendHex(unsigned char c, std::string* out) {
  *out += "\\x";
  *out += kHex[c >> 4];
  *out += kHex[c & 0xf];
}

// The length of the well-formed UTF-8 sequence that starts text[i] (Unicode's table 3-7), or 0
// when the bytes there are not one.
size_t Utf8Length(std::string_view text, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(text[i + k]); };
  const unsigned char lead = byte(0);
  if (lead < 0x80) return 1;
  size_t length = 0;
  unsigned char low = 0x80, high = 0xbf;  // the second byte's range
  if (lead >= 0xc2 && lead <= 0xdf) {
    length = 2;
  } else if (lead >= 0xe0 && lead <= 0xef) {
    length = 3;
    if (lead == 0xe0) low = 0xa0;   // overlong
    if (lead == 0xed) high = 0x9f;  // surrogates
  } else if (lead >= 0xf0 && lead <= 0xf4) {
    length = 4;
    if (lead == 0xf0) low = 0x90;   // overlong
    if (lead == 0xf4) high = 0x8f;  // past U+10FFFF
  } else {
    return 0;
  }
  if (text.size() - i < length || byte(1) < low || byte(1) > high) return 0;
  for (size_t k = 2; k < length; ++k) {
    if (byte(k) < 0x80 || byte(k) > 0xbf) return 0;
  }
  return length;
}

// A well-formed sequence that is still a control: C1 (U+0080..U+009F), the line and paragraph
// separators (U+2028, U+2029), the bidirectional embeddings, overrides and isolates (U+202A..
// U+202E, U+2066..U+2069).
bool IsControlSequence(std::string_view c) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(c[k]); };
  if (c.size() == 2) return b(0) == 0xc2 && b(1) <= 0x9f;
  if (c.size() != 3 || b(0) != 0xe2) return false;
  return (b(1) == 0x80 && b(2) >= 0xa8 && b(2) <= 0xae) ||
         (b(1) == 0x81 && b(2) >= 0xa6 && b(2) <= 0xa9);
}

std::string EscapeText(std::string_view text, size_t max_bytes, bool quoted) {
  std::string out;
  out.reserve(std::min(text.size(), max_bytes) + 2);
  if (quoted) out += '\'';
  size_t i = 0;
  while (i < text.size()) {
    const size_t length = Utf8Length(text, i);
    const size_t taken = length == 0 ? 1 : length;
    if (i + taken > max_bytes) break;
    const std::string_view c = text.substr(i, taken);
    const auto first = static_cast<unsigned char>(c[0]);
    if (length == 0 || (length == 1 && (first < 0x20 || first == 0x7f)) || IsControlSequence(c)) {
      for (char byte : c) AppendHex(static_cast<unsigned char>(byte), &out);
    } else if (c == "\\" || (quoted && c == "'")) {
      out += '\\';
      out += c;
    } else {
      out += c;
    }
    i += taken;
  }
  if (quoted) out += '\'';
  if (i < text.size()) out += "... (" + std::to_string(text.size()) + " bytes)";
  return out;
}

}  // namespace

std::string Quoted(std::string_view text, size_t max_bytes) {
  const std::string_view shown = text.substr(0, max_bytes);
  std::string out;
  out.reserve(shown.size() + 2);
  out += '\'';
  for (char ch : shown) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '\'' || c == '\\') {
      out += '\\';
      out += ch;
    } else if (c >= 0x20 && c < 0x7f) {
      out += ch;
    } else {
      AppendHex(c, &out);
    }
  }
  out += '\'';
  if (shown.size() < text.size()) out += "... (" + std::to_string(text.size()) + " bytes)";
  return out;
}

std::string QuotedText(std::string_view text, size_t max_bytes) {
  return EscapeText(text, max_bytes, /*quoted=*/true);
}

std::string EscapedText(std::string_view text, size_t max_bytes) {
  return EscapeText(text, max_bytes, /*quoted=*/false);
}

bool IsUtf8(std::string_view text) { return !FirstNonUtf8Byte(text).has_value(); }

std::optional<size_t> FirstNonUtf8Byte(std::string_view text) {
  for (size_t i = 0; i < text.size();) {
    const size_t length = Utf8Length(text, i);
    if (length == 0) return i;
    i += length;
  }
  return std::nullopt;
}

}  // namespace cadre
