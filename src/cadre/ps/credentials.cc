#include "cadre/ps/credentials.h"

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <cstdint>
#include <memory>

#include "cadre/net/handshake.h"

namespace cadre::ps {
namespace {

constexpr char kSalt[] = "cadre-ps-tls-v1";
constexpr size_t kSeedSize = 32;

struct FreeKey {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
struct FreeCert {
  void operator()(X509* x) const { X509_free(x); }
};
struct FreeKdf {
  void operator()(EVP_PKEY_CTX* c) const { EVP_PKEY_CTX_free(c); }
};
struct FreeBio {
  void operator()(BIO* b) const { BIO_free(b); }
};
using Key = std::unique_ptr<EVP_PKEY, FreeKey>;
using Cert = std::unique_ptr<X509, FreeCert>;

Status OpenSslError(const std::string& what) {
  char buf[256] = "unknown error";
  if (unsigned long e = ERR_get_error(); e != 0) ERR_error_string_n(e, buf, sizeof buf);
  ERR_clear_error();
  return InternalError("ps credentials: " + what + " failed: " + buf);
}

// HKDF-SHA256(token) for one purpose (`info`): the seed of that purpose's Ed25519 key.
Status DeriveKey(std::string_view token, std::string_view info, Key* out) {
  std::unique_ptr<EVP_PKEY_CTX, FreeKdf> ctx(EVP_PKEY_CTX_new_id(EVP_PKEY_HKDF, nullptr));
  uint8_t seed[kSeedSize];
  size_t len = sizeof seed;
  const auto* salt = reinterpret_cast<const unsigned char*>(kSalt);
  if (!ctx || EVP_PKEY_derive_init(ctx.get()) <= 0 ||
      EVP_PKEY_CTX_set_hkdf_md(ctx.get(), EVP_sha256()) <= 0 ||
      EVP_PKEY_CTX_set1_hkdf_salt(ctx.get(), salt, sizeof kSalt - 1) <= 0 ||
      EVP_PKEY_CTX_set1_hkdf_key(ctx.get(), reinterpret_cast<const unsigned char*>(token.data()),
                                 static_cast<int>(token.size())) <= 0 ||
      EVP_PKEY_CTX_add1_hkdf_info(ctx.get(), reinterpret_cast<const unsigned char*>(info.data()),
                                  static_cast<int>(info.size())) <= 0 ||
      EVP_PKEY_derive(ctx.get(), seed, &len) <= 0 || len != sizeof seed) {
    return OpenSslError("deriving the key seed");
  }
  out->reset(EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, nullptr, seed, sizeof seed));
  OPENSSL_cleanse(seed, sizeof seed);
  if (!*out) return OpenSslError("making the Ed25519 key");
  return Status::Ok();
}

Status AddExtension(X509* cert, X509* issuer, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
  if (ext == nullptr) return OpenSslError(std::string("certificate extension ") + value);
  const int added = X509_add_ext(cert, ext, -1);
  X509_EXTENSION_free(ext);
  if (added != 1) return OpenSslError(std::string("adding extension ") + value);
  return Status::Ok();
}

// A certificate for `key` named `cn`, signed by `issuer_key` (self-signed when issuer is null).
// Fixed serial numbers and validity keep the bytes the same on every learner.
Status MakeCertificate(const char* cn, long serial, EVP_PKEY* key, X509* issuer,
                       EVP_PKEY* issuer_key, Cert* out) {
  Cert x(X509_new());
  if (!x) return OpenSslError("X509_new");
  X509_NAME* name = X509_get_subject_name(x.get());
  const auto* org = reinterpret_cast<const unsigned char*>("cadre job");
  if (X509_set_version(x.get(), 2) != 1 ||
      ASN1_INTEGER_set(X509_get_serialNumber(x.get()), serial) != 1 ||
      ASN1_TIME_set_string_X509(X509_getm_notBefore(x.get()), "20000101000000Z") != 1 ||
      ASN1_TIME_set_string_X509(X509_getm_notAfter(x.get()), "99991231235959Z") != 1 ||
      X509_NAME_add_entry_by_txt(name, "O", MBSTRING_ASC, org, -1, -1, 0) != 1 ||
      X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                                 reinterpret_cast<const unsigned char*>(cn), -1, -1, 0) != 1 ||
      X509_set_issuer_name(x.get(), issuer ? X509_get_subject_name(issuer) : name) != 1 ||
      X509_set_pubkey(x.get(), key) != 1) {
    return OpenSslError(std::string("filling the certificate of ") + cn);
  }
  X509* signer = issuer ? issuer : x.get();
  if (issuer == nullptr) {
    CADRE_RETURN_IF_ERROR(AddExtension(x.get(), signer, NID_basic_constraints, "critical,CA:TRUE"));
    CADRE_RETURN_IF_ERROR(
        AddExtension(x.get(), signer, NID_key_usage, "critical,keyCertSign,cRLSign"));
    CADRE_RETURN_IF_ERROR(AddExtension(x.get(), signer, NID_subject_key_identifier, "hash"));
  } else {
    const std::string san = std::string("DNS:") + kTlsServerName;
    CADRE_RETURN_IF_ERROR(
        AddExtension(x.get(), signer, NID_basic_constraints, "critical,CA:FALSE"));
    CADRE_RETURN_IF_ERROR(
        AddExtension(x.get(), signer, NID_key_usage, "critical,digitalSignature"));
    CADRE_RETURN_IF_ERROR(
        AddExtension(x.get(), signer, NID_ext_key_usage, "serverAuth,clientAuth"));
    CADRE_RETURN_IF_ERROR(AddExtension(x.get(), signer, NID_subject_alt_name, san.c_str()));
    CADRE_RETURN_IF_ERROR(
        AddExtension(x.get(), signer, NID_authority_key_identifier, "keyid:always"));
  }
  // Ed25519 signs the whole message itself: no separate digest.
  if (X509_sign(x.get(), issuer_key, nullptr) <= 0) {
    return OpenSslError(std::string("signing the certificate of ") + cn);
  }
  *out = std::move(x);
  return Status::Ok();
}

template <typename Write>
Status ToPem(const char* what, Write write, std::string* out) {
  std::unique_ptr<BIO, FreeBio> bio(BIO_new(BIO_s_mem()));
  if (!bio || write(bio.get()) != 1) return OpenSslError(std::string("writing the ") + what);
  char* data = nullptr;
  const long len = BIO_get_mem_data(bio.get(), &data);
  out->assign(data, static_cast<size_t>(len));
  return Status::Ok();
}

}  // namespace

Status DeriveTlsCredentials(std::string_view token, TlsCredentials* out) {
  CADRE_RETURN_IF_ERROR(net::ValidateJobToken(token).WithContext("parameter-server credentials"));
  Key ca_key, member_key;
  CADRE_RETURN_IF_ERROR(DeriveKey(token, "ca", &ca_key));
  CADRE_RETURN_IF_ERROR(DeriveKey(token, "member", &member_key));
  Cert ca, member;
  CADRE_RETURN_IF_ERROR(
      MakeCertificate("cadre job CA", 1, ca_key.get(), nullptr, ca_key.get(), &ca));
  CADRE_RETURN_IF_ERROR(
      MakeCertificate(kTlsServerName, 2, member_key.get(), ca.get(), ca_key.get(), &member));
  TlsCredentials c;
  CADRE_RETURN_IF_ERROR(ToPem(
      "CA certificate", [&](BIO* b) { return PEM_write_bio_X509(b, ca.get()); }, &c.ca_pem));
  CADRE_RETURN_IF_ERROR(ToPem(
      "certificate", [&](BIO* b) { return PEM_write_bio_X509(b, member.get()); }, &c.cert_pem));
  CADRE_RETURN_IF_ERROR(ToPem(
      "private key",
      [&](BIO* b) {
        return PEM_write_bio_PrivateKey(b, member_key.get(), nullptr, nullptr, 0, nullptr, nullptr);
      },
      &c.key_pem));
  *out = std::move(c);
  return Status::Ok();
}

}  // namespace cadre::ps
