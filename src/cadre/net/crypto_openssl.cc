// crypto.h on OpenSSL's libcrypto.
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include "cadre/net/crypto.h"

namespace cadre::net {

void HmacSha256(std::span<const uint8_t> key, std::span<const uint8_t> data,
                uint8_t out[kSha256Bytes]) {
  unsigned int len = kSha256Bytes;
  // An empty key is valid HMAC input; OpenSSL wants a non-null pointer for it.
  static const uint8_t kEmpty = 0;
  HMAC(EVP_sha256(), key.empty() ? &kEmpty : key.data(), static_cast<int>(key.size()), data.data(),
       data.size(), out, &len);
}

Status RandomBytes(uint8_t* out, size_t n) {
  if (RAND_bytes(out, static_cast<int>(n)) != 1) {
    return InternalError("the OS random generator failed to produce " + std::to_string(n) +
                         " bytes");
  }
  return Status::Ok();
}

bool ConstantTimeEqual(const uint8_t* a, const uint8_t* b, size_t n) {
  return CRYPTO_memcmp(a, b, n) == 0;
}

const char* CryptoBackendName() { return "OpenSSL"; }

}  // namespace cadre::net
