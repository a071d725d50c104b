// crypto.h without OpenSSL: cadre's own HMAC-SHA256 (sha256.cc) and the kernel's getrandom.
#include <sys/random.h>

#include <cerrno>
#include <cstring>

#include "cadre/net/crypto.h"

namespace cadre::net {

void HmacSha256(std::span<const uint8_t> key, std::span<const uint8_t> data,
                uint8_t out[kSha256Bytes]) {
  PortableHmacSha256(key, data, out);
}

Status RandomBytes(uint8_t* out, size_t n) {
  size_t done = 0;
  while (done < n) {
    const ssize_t got = getrandom(out + done, n - done, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      return InternalError(std::string("getrandom failed: ") + std::strerror(errno));
    }
    done += static_cast<size_t>(got);
  }
  return Status::Ok();
}

bool ConstantTimeEqual(const uint8_t* a, const uint8_t* b, size_t n) {
  volatile uint8_t diff = 0;
  for (size_t i = 0; i < n; ++i) diff = diff | static_cast<uint8_t>(a[i] ^ b[i]);
  return diff == 0;
}

const char* CryptoBackendName() { return "cadre"; }

}  // namespace cadre::net
