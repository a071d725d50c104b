#include "cadre/net/handshake.h"

#include <cstring>

#include "cadre/base/printable.h"
#include "cadre/net/crypto.h"
#include "cadre/net/wire.h"

namespace cadre::net {
namespace {

constexpr size_t kMaxReasonSize = 512;

std::vector<uint8_t> EncodeFrame(uint8_t type, const std::vector<uint8_t>& payload) {
  std::vector<uint8_t> out(kFrameHeaderSize + payload.size());
  EncodeFrameHeader(FrameHeader{kProtocolVersion, type, 0, 0, payload.size()}, out.data());
  if (!payload.empty()) std::memcpy(out.data() + kFrameHeaderSize, payload.data(), payload.size());
  return out;
}

void Append(std::vector<uint8_t>* out, const std::vector<uint8_t>& bytes) {
  out->insert(out->end(), bytes.begin(), bytes.end());
}

Status RandomNonce(uint8_t* nonce) {
  Status s = RandomBytes(nonce, kNonceSize);
  if (!s.ok()) return InternalError("no handshake nonce: " + s.message());
  return Status::Ok();
}

// HMAC-SHA256(token, label | client_nonce | server_nonce | client_id | server_id), with
// length-prefixed identities so no two inputs encode the same bytes.
void ComputeMac(std::string_view token, std::string_view label, const uint8_t* client_nonce,
                const uint8_t* server_nonce, std::string_view client_id, std::string_view server_id,
                uint8_t mac[kMacSize]) {
  WireWriter w;
  w.PutString(label);
  w.PutRaw({client_nonce, kNonceSize});
  w.PutRaw({server_nonce, kNonceSize});
  w.PutString(client_id);
  w.PutString(server_id);
  // Never empty here: ValidateJobToken refused it before any MAC is computed.
  static_assert(kMacSize == kSha256Bytes);
  HmacSha256({reinterpret_cast<const uint8_t*>(token.data()), token.size()}, w.data(), mac);
}

bool MacEquals(const uint8_t* a, const uint8_t* b) { return ConstantTimeEqual(a, b, kMacSize); }

// The peer's identity as messages show it: it arrives before the peer proved anything.
std::string Quote(std::string_view s) { return Quoted(s); }

// Reads a REJECT payload into a readable, quoted reason; garbage becomes a placeholder.
std::string RejectReason(std::span<const uint8_t> payload) {
  WireReader r(payload);
  std::string reason;
  if (!r.GetString("reason", kMaxReasonSize, &reason).ok()) return "(unreadable reason)";
  return Quoted(reason, kMaxReasonSize);
}

Status UnexpectedFrame(uint8_t type, std::string_view expected) {
  return ProtocolError("unexpected frame type " + std::to_string(type) + " during the handshake (" +
                       std::string(expected) + " expected)");
}

Status CheckIdentity(std::string_view id) {
  if (id.size() > kMaxIdentitySize) {
    return InvalidArgument("handshake identity is " + std::to_string(id.size()) +
                           " bytes, more than " + std::to_string(kMaxIdentitySize));
  }
  return Status::Ok();
}

// Drives a state machine over a blocking socket until done or failed.
template <typename Machine>
Status RunBlocking(Socket& socket, Machine& machine, std::vector<uint8_t> first_output,
                   Deadline deadline, std::string_view side) {
  std::string context = std::string(side) + " handshake with " + socket.peer_address();
  std::vector<uint8_t> out = std::move(first_output);
  FrameHeader header;
  std::vector<uint8_t> payload;
  for (;;) {
    if (!out.empty()) {
      Status sent = socket.SendAll(out.data(), out.size(), deadline);
      if (!sent.ok()) return sent.WithContext(context);
      out.clear();
    }
    if (machine.done()) return Status::Ok();
    Status got = RecvFrame(socket, kHandshakeMaxPayload, deadline, &header, &payload);
    if (!got.ok()) {
      if (got.code() == Code::kProtocol) {
        std::vector<uint8_t> reject = EncodeRejectFrame(got.message());
        (void)socket.SendAll(reject.data(), reject.size(), Deadline(Duration(100)));
      }
      return got.WithContext(context);
    }
    Status s = machine.OnFrame(header, payload, &out);
    if (!s.ok()) {
      // Tell the peer why before closing; its failure to read this is not our error.
      if (!out.empty()) (void)socket.SendAll(out.data(), out.size(), Deadline(Duration(100)));
      return s.WithContext(context);
    }
  }
}

}  // namespace

Status ValidateJobToken(std::string_view token) {
  if (token.empty()) {
    return InvalidArgument(
        "no job token: every cadre connection is authenticated with the job's secret "
        "(CADRE_JOB_TOKEN, set by cadre run); an empty token is refused, not taken as 'no "
        "authentication'");
  }
  return Status::Ok();
}

std::vector<uint8_t> EncodeRejectFrame(std::string_view reason) {
  WireWriter w;
  w.PutString(reason.substr(0, kMaxReasonSize));
  return EncodeFrame(frame_type::kReject, w.data());
}

HandshakeServer::HandshakeServer(std::string token, std::string identity)
    : token_(std::move(token)), identity_(std::move(identity)) {}

Status HandshakeServer::OnFrame(const FrameHeader& header, std::span<const uint8_t> payload,
                                std::vector<uint8_t>* out) {
  auto fail = [&](Status s, std::string_view reason) {
    state_ = State::kFailed;
    Append(out, EncodeRejectFrame(reason));
    return s;
  };
  switch (state_) {
    case State::kExpectHello: {
      if (Status no_token = ValidateJobToken(token_); !no_token.ok()) {
        return fail(no_token, "the server has no job token");
      }
      if (header.type != frame_type::kHello) {
        Status s = UnexpectedFrame(header.type, "HELLO");
        return fail(s, s.message());
      }
      WireReader r(payload);
      std::span<const uint8_t> nonce;
      Status s = r.GetRaw("client nonce", kNonceSize, &nonce);
      if (s.ok()) s = r.GetString("client identity", kMaxIdentitySize, &peer_identity_);
      if (s.ok()) s = r.ExpectEnd("HELLO");
      if (!s.ok()) return fail(s, s.message());
      std::memcpy(client_nonce_, nonce.data(), kNonceSize);
      CADRE_RETURN_IF_ERROR(RandomNonce(server_nonce_));
      uint8_t mac[kMacSize];
      ComputeMac(token_, "cadre-server", client_nonce_, server_nonce_, peer_identity_, identity_,
                 mac);
      WireWriter w;
      w.PutRaw({server_nonce_, kNonceSize});
      w.PutString(identity_);
      w.PutRaw({mac, kMacSize});
      Append(out, EncodeFrame(frame_type::kChallenge, w.data()));
      state_ = State::kExpectProof;
      return Status::Ok();
    }
    case State::kExpectProof: {
      if (header.type == frame_type::kReject) {
        state_ = State::kFailed;
        return AuthError("client " + Quote(peer_identity_) +
                         " refused the handshake: " + RejectReason(payload));
      }
      if (header.type != frame_type::kProof) {
        Status s = UnexpectedFrame(header.type, "PROOF");
        return fail(s, s.message());
      }
      WireReader r(payload);
      std::span<const uint8_t> proof;
      Status s = r.GetRaw("client proof", kMacSize, &proof);
      if (s.ok()) s = r.ExpectEnd("PROOF");
      if (!s.ok()) return fail(s, s.message());
      uint8_t expected[kMacSize];
      ComputeMac(token_, "cadre-client", client_nonce_, server_nonce_, peer_identity_, identity_,
                 expected);
      if (!MacEquals(expected, proof.data())) {
        return fail(AuthError("client " + Quote(peer_identity_) +
                              " does not hold this job's token (its proof does not match)"),
                    "server " + identity_ + " refused the job token");
      }
      Append(out, EncodeFrame(frame_type::kAccept, {}));
      state_ = State::kDone;
      return Status::Ok();
    }
    case State::kDone:
    case State::kFailed:
      break;
  }
  state_ = State::kFailed;
  return InternalError("handshake frame received after the handshake ended");
}

HandshakeClient::HandshakeClient(std::string token, std::string identity)
    : token_(std::move(token)), identity_(std::move(identity)) {}

Status HandshakeClient::Start(std::vector<uint8_t>* out) {
  if (state_ != State::kIdle) return InternalError("handshake started twice");
  CADRE_RETURN_IF_ERROR(ValidateJobToken(token_));
  CADRE_RETURN_IF_ERROR(CheckIdentity(identity_));
  CADRE_RETURN_IF_ERROR(RandomNonce(client_nonce_));
  WireWriter w;
  w.PutRaw({client_nonce_, kNonceSize});
  w.PutString(identity_);
  Append(out, EncodeFrame(frame_type::kHello, w.data()));
  state_ = State::kExpectChallenge;
  return Status::Ok();
}

Status HandshakeClient::OnFrame(const FrameHeader& header, std::span<const uint8_t> payload,
                                std::vector<uint8_t>* out) {
  auto fail = [&](Status s, std::string_view reason) {
    state_ = State::kFailed;
    Append(out, EncodeRejectFrame(reason));
    return s;
  };
  if (header.type == frame_type::kReject &&
      (state_ == State::kExpectChallenge || state_ == State::kExpectAccept)) {
    state_ = State::kFailed;
    std::string who = peer_identity_.empty() ? "the server" : "server " + Quote(peer_identity_);
    return AuthError(who + " refused the handshake: " + RejectReason(payload));
  }
  switch (state_) {
    case State::kExpectChallenge: {
      if (header.type != frame_type::kChallenge) {
        Status s = UnexpectedFrame(header.type, "CHALLENGE");
        return fail(s, s.message());
      }
      WireReader r(payload);
      std::span<const uint8_t> server_nonce, server_mac;
      Status s = r.GetRaw("server nonce", kNonceSize, &server_nonce);
      if (s.ok()) s = r.GetString("server identity", kMaxIdentitySize, &peer_identity_);
      if (s.ok()) s = r.GetRaw("server proof", kMacSize, &server_mac);
      if (s.ok()) s = r.ExpectEnd("CHALLENGE");
      if (!s.ok()) return fail(s, s.message());
      uint8_t expected[kMacSize];
      ComputeMac(token_, "cadre-server", client_nonce_, server_nonce.data(), identity_,
                 peer_identity_, expected);
      if (!MacEquals(expected, server_mac.data())) {
        return fail(AuthError("server " + Quote(peer_identity_) +
                              " does not hold this job's token (its proof does not match)"),
                    "client " + identity_ + " refused the server's job token");
      }
      uint8_t proof[kMacSize];
      ComputeMac(token_, "cadre-client", client_nonce_, server_nonce.data(), identity_,
                 peer_identity_, proof);
      WireWriter w;
      w.PutRaw({proof, kMacSize});
      Append(out, EncodeFrame(frame_type::kProof, w.data()));
      state_ = State::kExpectAccept;
      return Status::Ok();
    }
    case State::kExpectAccept: {
      if (header.type != frame_type::kAccept) {
        Status s = UnexpectedFrame(header.type, "ACCEPT");
        return fail(s, s.message());
      }
      if (!payload.empty()) {
        Status s = ProtocolError("ACCEPT frame with a payload");
        return fail(s, s.message());
      }
      state_ = State::kDone;
      return Status::Ok();
    }
    case State::kIdle:
    case State::kDone:
    case State::kFailed:
      break;
  }
  state_ = State::kFailed;
  return InternalError("handshake frame received outside the handshake");
}

Status ClientHandshake(Socket& socket, std::string_view token, std::string_view my_identity,
                       Deadline deadline, std::string* peer_identity) {
  HandshakeClient client{std::string(token), std::string(my_identity)};
  std::vector<uint8_t> hello;
  CADRE_RETURN_IF_ERROR(client.Start(&hello));
  CADRE_RETURN_IF_ERROR(RunBlocking(socket, client, std::move(hello), deadline, "client"));
  *peer_identity = client.peer_identity();
  return Status::Ok();
}

Status ServerHandshake(Socket& socket, std::string_view token, std::string_view my_identity,
                       Deadline deadline, std::string* peer_identity) {
  if (Status no_token = ValidateJobToken(token); !no_token.ok()) {
    // Tell the client why rather than leave it to time out; its failure to read this is not ours.
    std::vector<uint8_t> reject = EncodeRejectFrame("the server has no job token");
    (void)socket.SendAll(reject.data(), reject.size(), Deadline(Duration(100)));
    return no_token;
  }
  CADRE_RETURN_IF_ERROR(CheckIdentity(my_identity));
  HandshakeServer server{std::string(token), std::string(my_identity)};
  CADRE_RETURN_IF_ERROR(RunBlocking(socket, server, {}, deadline, "server"));
  *peer_identity = server.peer_identity();
  return Status::Ok();
}

}  // namespace cadre::net
