// The handshake's cryptography (crypto.h): RFC 4231's HMAC-SHA256 vectors and FIPS 180-4's
// SHA-256 ones for cadre's own implementation and for the one this build uses, which must agree
// on any input.
#include "cadre/net/crypto.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace cadre::net {
namespace {

std::vector<uint8_t> Bytes(const std::string& s) { return {s.begin(), s.end()}; }
std::vector<uint8_t> Repeat(uint8_t b, size_t n) { return std::vector<uint8_t>(n, b); }

std::string Hex(const uint8_t* p, size_t n = kSha256Bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < n; ++i) {
    out += digits[p[i] >> 4];
    out += digits[p[i] & 15];
  }
  return out;
}

struct Vector {
  std::vector<uint8_t> key, data;
  const char* mac;
};

std::vector<Vector> Rfc4231() {
  std::vector<uint8_t> counting;
  for (uint8_t i = 1; i <= 25; ++i) counting.push_back(i);
  return {
      {Repeat(0x0b, 20), Bytes("Hi There"),
       "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"},
      {Bytes("Jefe"), Bytes("what do ya want for nothing?"),
       "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"},
      {Repeat(0xaa, 20), Repeat(0xdd, 50),
       "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe"},
      {counting, Repeat(0xcd, 50),
       "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b"},
      {Repeat(0xaa, 131), Bytes("Test Using Larger Than Block-Size Key - Hash Key First"),
       "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"},
      {Repeat(0xaa, 131),
       Bytes("This is a test using a larger than block-size key and a larger than block-size "
             "data. The key needs to be hashed before being used by the HMAC algorithm."),
       "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2"},
      {{}, {}, "b613679a0814d9ec772f95d778c35fc5ff1697c493715653c6c712144292c5ad"},
  };
}

TEST(Crypto, Sha256MatchesFips180Vectors) {
  uint8_t out[kSha256Bytes];
  PortableSha256(Bytes("abc"), out);
  EXPECT_EQ(Hex(out), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  PortableSha256({}, out);
  EXPECT_EQ(Hex(out), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

TEST(Crypto, HmacMatchesRfc4231InBothImplementations) {
  for (const Vector& v : Rfc4231()) {
    uint8_t mine[kSha256Bytes], used[kSha256Bytes];
    PortableHmacSha256(v.key, v.data, mine);
    HmacSha256(v.key, v.data, used);
    EXPECT_EQ(Hex(mine), v.mac) << "key of " << v.key.size() << " bytes";
    EXPECT_EQ(Hex(used), v.mac) << CryptoBackendName();
  }
}

TEST(Crypto, ImplementationsAgreeOnEveryLengthAroundTheBlocks) {
  std::mt19937 gen(7);
  for (size_t key_len : {0, 1, 63, 64, 65, 200}) {
    for (size_t len = 0; len < 200; len += 7) {
      std::vector<uint8_t> key(key_len), data(len);
      for (auto& b : key) b = static_cast<uint8_t>(gen());
      for (auto& b : data) b = static_cast<uint8_t>(gen());
      uint8_t a[kSha256Bytes], b[kSha256Bytes];
      PortableHmacSha256(key, data, a);
      HmacSha256(key, data, b);
      ASSERT_EQ(Hex(a), Hex(b)) << key_len << " " << len;
    }
  }
}

TEST(Crypto, RandomBytesAndConstantTimeEqual) {
  uint8_t a[32], b[32];
  ASSERT_TRUE(RandomBytes(a, sizeof a).ok());
  ASSERT_TRUE(RandomBytes(b, sizeof b).ok());
  EXPECT_FALSE(ConstantTimeEqual(a, b, sizeof a));
  EXPECT_TRUE(ConstantTimeEqual(a, a, sizeof a));
  b[0] = a[0];
  std::copy(a, a + 31, b);
  b[31] = static_cast<uint8_t>(a[31] ^ 1);
  EXPECT_FALSE(ConstantTimeEqual(a, b, sizeof a));
  EXPECT_TRUE(ConstantTimeEqual(a, b, 31));
}

}  // namespace
}  // namespace cadre::net
