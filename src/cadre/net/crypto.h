// The cryptography of the handshake (handshake.h): HMAC-SHA256 keyed by the job token, random
// nonces, constant-time comparison of MACs.
//
// Built on OpenSSL's libcrypto when the build finds it; otherwise on cadre's own SHA-256
// (FIPS 180-4) and HMAC (RFC 2104) with nonces from the kernel (getrandom), so that the core
// builds where no OpenSSL headers are installed (a CUDA machine's image, docs/gpu.md). Both give
// the same bytes; the portable one is always built, and tested against RFC 4231's vectors and
// against OpenSSL. Thread-safe, no state.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "cadre/base/status.h"

namespace cadre::net {

inline constexpr size_t kSha256Bytes = 32;

// HMAC-SHA256(key, data) into out.
void HmacSha256(std::span<const uint8_t> key, std::span<const uint8_t> data,
                uint8_t out[kSha256Bytes]);

// `n` bytes from the operating system's random generator; an error when it fails.
Status RandomBytes(uint8_t* out, size_t n);

// a[0..n) == b[0..n), in a time that does not depend on where they differ.
bool ConstantTimeEqual(const uint8_t* a, const uint8_t* b, size_t n);

// Which implementation HmacSha256 and RandomBytes use: "OpenSSL" or "cadre".
const char* CryptoBackendName();

// cadre's own implementation, whichever one the functions above use.
void PortableSha256(std::span<const uint8_t> data, uint8_t out[kSha256Bytes]);
void PortableHmacSha256(std::span<const uint8_t> key, std::span<const uint8_t> data,
                        uint8_t out[kSha256Bytes]);

}  // namespace cadre::net
