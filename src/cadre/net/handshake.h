// The authenticated handshake every cadre connection starts with: both ends prove they hold the
// job token (a per-job secret) without sending it, and exchange identities ("rank 3",
// "store-client") and protocol versions.
//
// Protocol (frames of net/frame.h; version checked on every frame):
//   client -> server  HELLO      client_nonce[32], client identity
//   server -> client  CHALLENGE  server_nonce[32], server identity,
//                                HMAC-SHA256(token, "cadre-server" | cn | sn | ids)
//   client -> server  PROOF      HMAC-SHA256(token, "cadre-client" | cn | sn | ids)
//   server -> client  ACCEPT     (empty)
// Either side may instead send REJECT (a reason string) and close. Nonces come from the OS CSPRNG,
// MACs are compared in constant time, and the domain labels keep one side's proof from being
// replayed as the other's. A peer without the token, with another token, with another protocol
// version, with garbage or with a stall gets a kAuth / kProtocol / kTimeout Status and is never
// trusted. Before the handshake finishes no frame above kHandshakeMaxPayload is accepted, so an
// unauthenticated peer cannot make the other side allocate. The handshake authenticates the
// peer when the connection opens; it does not encrypt or sign the frames that follow (jobs run
// on a trusted network; the token keeps out strays and other jobs, not a man in the middle).
//
// The job token must not be empty: an empty token would be a secret everyone holds, so every
// entry point refuses it (kInvalidArgument) instead of authenticating nobody. Identities and
// reject reasons from the peer appear in messages only through Quoted() (base/printable.h):
// they arrive before the peer proved anything.
//
// Two forms: blocking functions for a thread that owns a Socket (transport pairs, store client),
// and state machines for an event loop (store server) fed frame by frame.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cadre/base/deadline.h"
#include "cadre/base/status.h"
#include "cadre/net/frame.h"
#include "cadre/net/socket.h"

namespace cadre::net {

inline constexpr size_t kNonceSize = 32;
inline constexpr size_t kMacSize = 32;
inline constexpr size_t kMaxIdentitySize = 256;
inline constexpr uint64_t kHandshakeMaxPayload = 1024;

namespace frame_type {
inline constexpr uint8_t kHello = kHandshakeFirst;
inline constexpr uint8_t kChallenge = kHandshakeFirst + 1;
inline constexpr uint8_t kProof = kHandshakeFirst + 2;
inline constexpr uint8_t kAccept = kHandshakeFirst + 3;
inline constexpr uint8_t kReject = kHandshakeFirst + 4;
}  // namespace frame_type

// Ok for a usable job token; kInvalidArgument (saying what to set) for an empty one. Layers that
// take a token call it when they are configured, so a missing token fails at start-up.
Status ValidateJobToken(std::string_view token);

// Blocking handshakes. On success *peer_identity holds what the other side called itself. On
// failure a REJECT frame has been sent when possible; the caller closes the socket. Messages
// name the peer address and identity when known.
Status ClientHandshake(Socket& socket, std::string_view token, std::string_view my_identity,
                       Deadline deadline, std::string* peer_identity);
Status ServerHandshake(Socket& socket, std::string_view token, std::string_view my_identity,
                       Deadline deadline, std::string* peer_identity);

// An encoded REJECT frame carrying `reason` (truncated to fit kHandshakeMaxPayload). Used by
// servers that refuse a stream before or during the handshake (bad frame, version mismatch).
std::vector<uint8_t> EncodeRejectFrame(std::string_view reason);

// Event-loop form, server side. Feed every frame received; bytes to send are appended to *out
// (whole encoded frames). OnFrame returns Ok while the handshake proceeds or has succeeded
// (done()); a failed Status means: write *out (a REJECT) and close.
class HandshakeServer {
 public:
  HandshakeServer(std::string token, std::string identity);
  Status OnFrame(const FrameHeader& header, std::span<const uint8_t> payload,
                 std::vector<uint8_t>* out);
  bool done() const { return state_ == State::kDone; }
  const std::string& peer_identity() const { return peer_identity_; }

 private:
  enum class State { kExpectHello, kExpectProof, kDone, kFailed };
  std::string token_;
  std::string identity_;
  std::string peer_identity_;
  uint8_t client_nonce_[kNonceSize] = {};
  uint8_t server_nonce_[kNonceSize] = {};
  State state_ = State::kExpectHello;
};

// Event-loop form, client side. Start() produces the HELLO; then feed frames as above.
class HandshakeClient {
 public:
  HandshakeClient(std::string token, std::string identity);
  Status Start(std::vector<uint8_t>* out);
  Status OnFrame(const FrameHeader& header, std::span<const uint8_t> payload,
                 std::vector<uint8_t>* out);
  bool done() const { return state_ == State::kDone; }
  const std::string& peer_identity() const { return peer_identity_; }

 private:
  enum class State { kIdle, kExpectChallenge, kExpectAccept, kDone, kFailed };
  std::string token_;
  std::string identity_;
  std::string peer_identity_;
  uint8_t client_nonce_[kNonceSize] = {};
  State state_ = State::kIdle;
};

}  // namespace cadre::net
