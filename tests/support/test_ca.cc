#include "tests/support/test_ca.h"

#include <openssl/bio.h>
#include <openssl/bytestring.h>
#include <openssl/ec.h>
#include <openssl/evp.h>
#include <openssl/mem.h>
#include <openssl/nid.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <cstdio>
#include <stdexcept>
#include <string_view>

namespace ringcast::test {
namespace {

[[noreturn]] void fail(const std::string& what) {
  throw std::runtime_error("test_ca: " + what);
}

void check(int ok, const char* what) {
  if (ok != 1) fail(what);
}

bssl::UniquePtr<EVP_PKEY> make_key() {
  bssl::UniquePtr<EC_KEY> ec(EC_KEY_new_by_curve_name(NID_X9_62_prime256v1));
  if (!ec || !EC_KEY_generate_key(ec.get())) fail("EC key generation");
  bssl::UniquePtr<EVP_PKEY> pkey(EVP_PKEY_new());
  if (!pkey || !EVP_PKEY_assign_EC_KEY(pkey.get(), ec.release())) fail("EVP_PKEY");
  return pkey;
}

void add_ext(X509* cert, X509* issuer, int nid, const std::string& value) {
  X509V3_CTX ctx;
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  bssl::UniquePtr<X509_EXTENSION> ext(X509V3_EXT_nconf_nid(nullptr, &ctx, nid, value.c_str()));
  if (!ext) fail("extension " + std::to_string(nid) + "=" + value);
  check(X509_add_ext(cert, ext.get(), -1), "X509_add_ext");
}

bssl::UniquePtr<X509> new_cert(EVP_PKEY* subject_key, const std::string& cn, Validity v) {
  bssl::UniquePtr<X509> x(X509_new());
  if (!x) fail("X509_new");
  check(X509_set_version(x.get(), X509_VERSION_3), "version");
  uint64_t serial = 0;
  RAND_bytes(reinterpret_cast<uint8_t*>(&serial), sizeof(serial));
  serial &= 0x7fffffffffffffffULL;  // positive
  check(ASN1_INTEGER_set_uint64(X509_get_serialNumber(x.get()), serial | 1), "serial");
  if (!X509_gmtime_adj(X509_getm_notBefore(x.get()), static_cast<long>(v.not_before.count())) ||
      !X509_gmtime_adj(X509_getm_notAfter(x.get()), static_cast<long>(v.not_after.count()))) {
    fail("validity");
  }
  X509_NAME* name = X509_get_subject_name(x.get());
  check(X509_NAME_add_entry_by_txt(name, "O", MBSTRING_UTF8,
                                   reinterpret_cast<const uint8_t*>("ringcast tests"), -1, -1, 0),
        "O");
  check(X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8,
                                   reinterpret_cast<const uint8_t*>(cn.c_str()), -1, -1, 0),
        "CN");
  check(X509_set_pubkey(x.get(), subject_key), "pubkey");
  return x;
}

std::string cert_to_pem(X509* x) {
  bssl::UniquePtr<BIO> bio(BIO_new(BIO_s_mem()));
  check(PEM_write_bio_X509(bio.get(), x), "PEM_write_bio_X509");
  const uint8_t* data = nullptr;
  size_t len = 0;
  check(BIO_mem_contents(bio.get(), &data, &len), "BIO_mem_contents");
  return std::string(reinterpret_cast<const char*>(data), len);
}

std::string key_to_pem(EVP_PKEY* key) {
  bssl::UniquePtr<BIO> bio(BIO_new(BIO_s_mem()));
  check(PEM_write_bio_PrivateKey(bio.get(), key, nullptr, nullptr, 0, nullptr, nullptr),
        "PEM_write_bio_PrivateKey");
  const uint8_t* data = nullptr;
  size_t len = 0;
  check(BIO_mem_contents(bio.get(), &data, &len), "BIO_mem_contents");
  return std::string(reinterpret_cast<const char*>(data), len);
}

}  // namespace

struct TestCa::Impl {
  bssl::UniquePtr<EVP_PKEY> key;
  bssl::UniquePtr<X509> cert;
};

TestCa::TestCa() : impl_(std::make_unique<Impl>()) {}
TestCa::TestCa(TestCa&&) noexcept = default;
TestCa& TestCa::operator=(TestCa&&) noexcept = default;
TestCa::~TestCa() = default;

TestCa TestCa::create(const std::string& common_name) {
  TestCa ca;
  ca.impl_->key = make_key();
  // Backdate generously so that clock skew between processes never matters.
  ca.impl_->cert = new_cert(ca.impl_->key.get(), common_name,
                            Validity{std::chrono::hours(-24), std::chrono::hours(24 * 365)});
  X509* x = ca.impl_->cert.get();
  check(X509_set_issuer_name(x, X509_get_subject_name(x)), "issuer");
  add_ext(x, x, NID_basic_constraints, "critical,CA:TRUE");
  add_ext(x, x, NID_key_usage, "critical,keyCertSign,cRLSign,digitalSignature");
  add_ext(x, x, NID_subject_key_identifier, "hash");
  add_ext(x, x, NID_authority_key_identifier, "keyid:always");
  if (X509_sign(x, ca.impl_->key.get(), EVP_sha256()) <= 0) fail("sign CA");
  ca.ca_pem = cert_to_pem(x);
  return ca;
}

LeafCert TestCa::issue(const std::vector<std::string>& dns_names,
                       const std::vector<std::string>& ips, Validity validity) const {
  bssl::UniquePtr<EVP_PKEY> key = make_key();
  std::string cn = !dns_names.empty() ? dns_names.front()
                   : !ips.empty()     ? ips.front()
                                      : std::string("ringcast test leaf");
  bssl::UniquePtr<X509> x = new_cert(key.get(), cn, validity);
  check(X509_set_issuer_name(x.get(), X509_get_subject_name(impl_->cert.get())), "issuer");
  add_ext(x.get(), impl_->cert.get(), NID_basic_constraints, "critical,CA:FALSE");
  add_ext(x.get(), impl_->cert.get(), NID_key_usage, "critical,digitalSignature");
  add_ext(x.get(), impl_->cert.get(), NID_ext_key_usage, "serverAuth,clientAuth");
  add_ext(x.get(), impl_->cert.get(), NID_subject_key_identifier, "hash");
  add_ext(x.get(), impl_->cert.get(), NID_authority_key_identifier, "keyid:always");
  // Appended piece by piece: `"," + std::string(...)` (operator+ inserting at the front) trips
  // GCC 12's false -Wrestrict at -O3 (Release), which -Werror turns into a build failure.
  std::string san;
  auto add_san = [&san](std::string_view kind, const std::string& value) {
    if (!san.empty()) san += ',';
    san += kind;
    san += value;
  };
  for (const auto& d : dns_names) add_san("DNS:", d);
  for (const auto& ip : ips) add_san("IP:", ip);
  if (!san.empty()) add_ext(x.get(), impl_->cert.get(), NID_subject_alt_name, san);
  if (X509_sign(x.get(), impl_->key.get(), EVP_sha256()) <= 0) fail("sign leaf");
  return LeafCert{cert_to_pem(x.get()), key_to_pem(key.get())};
}

CertFiles TestCa::write_files(const std::string& dir, const LeafCert& leaf) const {
  CertFiles files{dir + "/ca.pem", dir + "/cert.pem", dir + "/key.pem"};
  write_file(files.ca, ca_pem);
  write_file(files.cert, leaf.cert_pem);
  write_file(files.key, leaf.key_pem);
  return files;
}

CertFiles TestCa::write_localhost(const std::string& dir, Validity validity) const {
  return write_files(dir, issue({"localhost"}, {"127.0.0.1", "::1"}, validity));
}

void write_file(const std::string& path, const std::string& content) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) fail("cannot open " + path);
  size_t n = std::fwrite(content.data(), 1, content.size(), f);
  if (std::fclose(f) != 0 || n != content.size()) fail("cannot write " + path);
}

}  // namespace ringcast::test
