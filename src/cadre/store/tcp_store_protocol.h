// The TcpStore wire protocol, shared by the server and the client (internal to store/).
//
// After the job-token handshake the client sends one request frame at a time and reads its reply;
// the reply carries the request's tag. Payloads use net::WireWriter encoding:
//   SET    key, value                        -> OK
//   GET    u64 timeout_ms, key               -> VALUE value | ERROR (kTimeout)
//   ADD    key, i64 delta                    -> VALUE i64 | ERROR (kInvalidArgument)
//   CHECK  u32 n, n x key                    -> VALUE u8 (1 when every key exists)
//   WAIT   u64 timeout_ms, u32 n, n x key    -> OK | ERROR (kTimeout naming the missing keys)
//   ERROR  payload: u8 cadre::Code, message
// GET and WAIT are parked by the server until the keys exist or timeout_ms passes. A request the
// server cannot decode gets an ERROR of kProtocol naming the field; a frame it cannot read, an
// ERROR of tag 0; the server closes the connection after either.
#pragma once

#include <cstdint>

#include "cadre/net/frame.h"

namespace cadre::store::wire {

inline constexpr uint8_t kSet = net::frame_type::kStoreFirst;
inline constexpr uint8_t kGet = net::frame_type::kStoreFirst + 1;
inline constexpr uint8_t kAdd = net::frame_type::kStoreFirst + 2;
inline constexpr uint8_t kCheck = net::frame_type::kStoreFirst + 3;
inline constexpr uint8_t kWait = net::frame_type::kStoreFirst + 4;
inline constexpr uint8_t kOk = net::frame_type::kStoreFirst + 8;
inline constexpr uint8_t kValue = net::frame_type::kStoreFirst + 9;
inline constexpr uint8_t kError = net::frame_type::kStoreFirst + 10;

// Largest request or reply payload: one maximal value plus room for its key and fields, or a
// WAIT/CHECK naming many keys.
inline constexpr uint64_t kMaxPayload = (uint64_t{256} << 20) + (uint64_t{1} << 20);

}  // namespace cadre::store::wire
