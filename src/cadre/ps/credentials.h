// Credentials of the parameter-server channel: TLS certificates every learner derives from the
// job token.
//
// The parameter servers speak gRPC, whose authentication is TLS rather than cadre's own
// handshake (net/handshake.h). Both ends prove they belong to the job the way the store and the
// transport do, by holding the job token, without sending it:
//   - the job's CA key is an Ed25519 key whose 32-byte seed is
//     HKDF-SHA256(key = token, salt = "cadre-ps-tls-v1", info = "ca"), with a self-signed
//     certificate;
//   - the member key (info = "member") has a certificate signed by that CA for the name
//     kTlsServerName, usable for TLS servers and clients.
// A server presents the member certificate and requires one from every client (mutual TLS); a
// client trusts only the job's CA and checks the name. So a process without the token cannot
// finish a TLS handshake with either side: the server never reads a request of it (nothing past
// its ClientHello), and a process squatting on port 2222 learns nothing from a worker. Ed25519
// signatures are deterministic, so every learner derives the same bytes; nothing is written to
// disk and every backend that hands out the token hands out the credentials.
//
// Pure functions; thread-safe.
#pragma once

#include <string>
#include <string_view>

#include "cadre/base/status.h"

namespace cadre::ps {

// The name in the member certificate, which clients check instead of the learner's host name
// (the CA is the job's own, so any certificate it signed is a member of the job).
inline constexpr char kTlsServerName[] = "cadre-ps";

struct TlsCredentials {
  std::string ca_pem;    // the job's CA certificate: the only root either side trusts
  std::string cert_pem;  // the member certificate
  std::string key_pem;   // the member private key (secret: it is as good as the token)
};

// kInvalidArgument for an empty token (see ValidateJobToken in net/handshake.h); kInternal when
// OpenSSL fails.
Status DeriveTlsCredentials(std::string_view token, TlsCredentials* out);

}  // namespace cadre::ps
