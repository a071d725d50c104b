// Printable: text that came from outside (a peer's identity or reject reason, a name in a
// request) made safe for one log line or error message.
//
// A peer can send any bytes before it has proved anything. Written raw, they could forge log
// lines (a newline and a fake "rank 0 connected"), drive the terminal (escape sequences) or
// flood the log (a long string on every connection). Quoted() is the one way such text enters a
// message: it is quoted, control and non-ASCII bytes become \xNN, and it is cut to a bound.
// Pure functions; thread-safe.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace cadre {

// How much of an untrusted string a message shows by default.
inline constexpr size_t kMaxQuotedBytes = 80;

// 'text' with the quote, backslash, control and non-ASCII bytes escaped (\', \\, \xNN); when the
// text is longer than max_bytes only its first max_bytes are shown, followed by
// "... (N bytes)". Printable ASCII within the bound reads unchanged: Quoted("rank 3") is 'rank 3'.
std::string Quoted(std::string_view text, size_t max_bytes = kMaxQuotedBytes);

// Text a person wrote (a manifest's value or key, a YAML parser's message that holds the byte it
// stopped at) for one line of an error message. As Quoted, except that well-formed UTF-8 reads
// unchanged, so that a name in any script is shown as written: only the quote, the backslash,
// control characters (C0, DEL, C1, and the bidirectional and line-separator formats that would
// reorder or break the line) and bytes that are not UTF-8 are escaped. Cut at a character.
std::string QuotedText(std::string_view text, size_t max_bytes = kMaxQuotedBytes);

// QuotedText without the quotes (a key inside a field path, a parser's own message); the quote
// itself then reads unchanged.
std::string EscapedText(std::string_view text, size_t max_bytes = kMaxQuotedBytes);

// Whether `text` is well-formed UTF-8 (no overlong forms, surrogates or code points past
// U+10FFFF).
bool IsUtf8(std::string_view text);

// The offset of the first byte of `text` that does not start a well-formed UTF-8 sequence (as
// IsUtf8 judges it), or nullopt when it is all UTF-8.
std::optional<size_t> FirstNonUtf8Byte(std::string_view text);

}  // namespace cadre
