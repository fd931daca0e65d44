// Tests of the test support (test CA, child processes, nginx) and of ringcast-sink, the webhook
// receiver the net and e2e tests talk to. Everything runs on loopback with ports chosen at run
// time.
#include <gtest/gtest.h>
#include <openssl/bio.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <signal.h>

#include <string>
#include <vector>

#include "tests/support/process.h"
#include "tests/support/temp_dir.h"
#include "tests/support/test_ca.h"

namespace ringcast::test {
namespace {

bssl::UniquePtr<X509> parse_pem(const std::string& pem) {
  bssl::UniquePtr<BIO> bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  return bssl::UniquePtr<X509>(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
}

// Verifies `leaf` against `ca` for `host` (a DNS name) the way a TLS client would; returns the
// X509_V_ERR_* code (X509_V_OK on success).
int verify(const std::string& ca_pem, const std::string& leaf_pem, const std::string& host) {
  bssl::UniquePtr<X509> ca = parse_pem(ca_pem);
  bssl::UniquePtr<X509> leaf = parse_pem(leaf_pem);
  EXPECT_TRUE(ca && leaf);
  bssl::UniquePtr<X509_STORE> store(X509_STORE_new());
  X509_STORE_add_cert(store.get(), ca.get());
  bssl::UniquePtr<X509_STORE_CTX> ctx(X509_STORE_CTX_new());
  X509_STORE_CTX_init(ctx.get(), store.get(), leaf.get(), nullptr);
  X509_VERIFY_PARAM* param = X509_STORE_CTX_get0_param(ctx.get());
  X509_VERIFY_PARAM_set1_host(param, host.data(), host.size());
  if (X509_verify_cert(ctx.get()) == 1) return X509_V_OK;
  return X509_STORE_CTX_get_error(ctx.get());
}

TEST(TestCa, IssuesVerifiableLeaf) {
  TestCa ca = TestCa::create();
  LeafCert leaf = ca.issue({"localhost", "sink.test"}, {"127.0.0.1"});
  EXPECT_NE(ca.ca_pem.find("BEGIN CERTIFICATE"), std::string::npos);
  EXPECT_NE(leaf.key_pem.find("PRIVATE KEY"), std::string::npos);
  EXPECT_EQ(verify(ca.ca_pem, leaf.cert_pem, "localhost"), X509_V_OK);
  EXPECT_EQ(verify(ca.ca_pem, leaf.cert_pem, "sink.test"), X509_V_OK);
}

TEST(TestCa, WrongHostUntrustedCaAndExpiredAreRejected) {
  TestCa ca = TestCa::create();
  TestCa other = TestCa::create("another CA");
  LeafCert leaf = ca.issue({"localhost"});
  EXPECT_EQ(verify(ca.ca_pem, leaf.cert_pem, "example.test"), X509_V_ERR_HOSTNAME_MISMATCH);
  EXPECT_NE(verify(other.ca_pem, leaf.cert_pem, "localhost"), X509_V_OK);
  LeafCert expired =
      ca.issue({"localhost"}, {}, Validity{std::chrono::hours(-48), std::chrono::hours(-24)});
  EXPECT_EQ(verify(ca.ca_pem, expired.cert_pem, "localhost"), X509_V_ERR_CERT_HAS_EXPIRED);
  LeafCert future =
      ca.issue({"localhost"}, {}, Validity{std::chrono::hours(24), std::chrono::hours(48)});
  EXPECT_EQ(verify(ca.ca_pem, future.cert_pem, "localhost"), X509_V_ERR_CERT_NOT_YET_VALID);
}

TEST(TestCa, WritesFiles) {
  TempDir dir;
  TestCa ca = TestCa::create();
  CertFiles files = ca.write_localhost(dir.path());
  EXPECT_EQ(files.ca, dir.file("ca.pem"));
  FILE* f = std::fopen(files.key.c_str(), "rb");
  ASSERT_NE(f, nullptr);
  bssl::UniquePtr<EVP_PKEY> key(PEM_read_PrivateKey(f, nullptr, nullptr, nullptr));
  std::fclose(f);
  EXPECT_TRUE(key);
}

TEST(Process, StartsWaitsForLineAndStops) {
  TempDir dir;
  ProcessOptions o;
  o.env = {"GREETING=hello"};
  o.stdout_path = dir.file("out");
  o.stderr_path = dir.file("err");
  Process p = Process::start({"/bin/sh", "-c", "echo \"ready $GREETING\"; exec sleep 30"}, o);
  auto line = p.wait_for_stdout_line("ready", std::chrono::seconds(10));
  ASSERT_TRUE(line);
  EXPECT_EQ(*line, "ready hello");
  EXPECT_TRUE(p.running());
  ExitStatus s = p.stop(std::chrono::seconds(5));
  EXPECT_TRUE(s.signaled) << s.str();
  EXPECT_EQ(s.signal, SIGTERM);
  EXPECT_FALSE(p.running());
}

TEST(Process, ReportsExitCodeAndExecFailure) {
  Process p = Process::start({"/bin/sh", "-c", "exit 7"});
  auto s = p.wait(std::chrono::seconds(10));
  ASSERT_TRUE(s);
  EXPECT_TRUE(s->exited);
  EXPECT_EQ(s->code, 7);
  EXPECT_THROW(Process::start({"/nonexistent/ringcast-binary"}), std::runtime_error);
}

TEST(Process, DestructorKillsTheChild) {
  pid_t pid;
  {
    Process p = Process::start({"/bin/sleep", "30"});
    pid = p.pid();
    EXPECT_EQ(::kill(pid, 0), 0);
  }
  EXPECT_NE(::kill(pid, 0), 0);  // reaped: the pid no longer exists
}

TEST(Process, FreePortIsBindable) {
  uint16_t port = free_tcp_port();
  EXPECT_GT(port, 0);
  EXPECT_FALSE(wait_for_port("127.0.0.1", port, std::chrono::milliseconds(20)));
  EXPECT_FALSE(wait_for_port("10.0.0.1", port, std::chrono::milliseconds(20)));  // not loopback
}

}  // namespace
}  // namespace ringcast::test
