// A certificate authority made at test time, in-process with BoringSSL (ECDSA P-256), and the
// leaf certificates it issues. Nothing touches the system trust store; each create() is a new,
// independent CA (so a second create() is the "untrusted CA" of a test).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace ringcast::test {

// When a certificate is valid, as offsets from "now" at issue time. A negative not_after makes
// an expired certificate; a positive not_before makes a not-yet-valid one.
struct Validity {
  std::chrono::seconds not_before{-3600};
  std::chrono::seconds not_after{7 * 24 * 3600};
};

// Paths of the files TestCa::write_files() produced.
struct CertFiles {
  std::string ca;    // <dir>/ca.pem: the CA certificate (the trust anchor for clients)
  std::string cert;  // <dir>/cert.pem: the leaf certificate (the server's chain)
  std::string key;   // <dir>/key.pem: the leaf's private key (PKCS#8 PEM)
};

struct LeafCert {
  std::string cert_pem;  // the leaf certificate alone (the CA is a root: no intermediates)
  std::string key_pem;   // its private key, PKCS#8 PEM
};

class TestCa {
 public:
  static TestCa create(const std::string& common_name = "ringcast test CA");

  TestCa(TestCa&&) noexcept;
  TestCa& operator=(TestCa&&) noexcept;
  ~TestCa();

  // A server (and client) certificate for these names: DNS names ("localhost", "*.example")
  // and IP addresses ("127.0.0.1", "::1") go into subjectAltName; the CN is the first name.
  LeafCert issue(const std::vector<std::string>& dns_names,
                 const std::vector<std::string>& ips = {}, Validity validity = {}) const;

  // Writes ca.pem, cert.pem and key.pem into `dir` (which must exist). Throws on I/O errors.
  CertFiles write_files(const std::string& dir, const LeafCert& leaf) const;
  // Shortcut: issue for localhost/127.0.0.1/::1 and write the files.
  CertFiles write_localhost(const std::string& dir, Validity validity = {}) const;

  std::string ca_pem;  // the CA certificate, PEM

 private:
  struct Impl;
  TestCa();
  std::unique_ptr<Impl> impl_;
};

// Writes `content` to `path` (truncating). Throws std::runtime_error on failure.
void write_file(const std::string& path, const std::string& content);

}  // namespace ringcast::test
