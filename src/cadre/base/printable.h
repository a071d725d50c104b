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
#include <string>
#include <string_view>

namespace cadre {

// How much of an untrusted string a message shows by default.
inline constexpr size_t kMaxQuotedBytes = 80;

// 'text' with the quote, backslash, control and non-ASCII bytes escaped (\', \\, \xNN); when the
// text is longer than max_bytes only its first max_bytes are shown, followed by
// "... (N bytes)". Printable ASCII within the bound reads unchanged: Quoted("rank 3") is 'rank 3'.
std::string Quoted(std::string_view text, size_t max_bytes = kMaxQuotedBytes);

}  // namespace cadre
