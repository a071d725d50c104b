// Where a request ends in the bytes a connection has sent so far.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace cadre::http {

// A body the lobby waits for along with its head, so that a client sending a small body slowly
// does not hold a worker either; larger ones, chunked ones and those whose client waits for
// 100 Continue are read by the worker.
inline constexpr size_t kLobbyBody = 64 << 10;

// How many bytes of `bytes` make a request a worker can serve without waiting: its head
// (cpp-httplib reads lines up to '\n' and ends the head at a line that is "\r\n" alone) and its
// small body. npos while the head has not ended within `max_head`.
size_t RequestSize(std::string_view bytes, size_t max_head);

// Whether the request whose whole head starts `bytes` has a body the worker reads (over
// kLobbyBody, chunked, or sent after 100 Continue).
bool BodyStreamed(std::string_view bytes, size_t max_head);

}  // namespace cadre::http
