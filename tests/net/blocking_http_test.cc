// net/blocking_http: the one blocking HTTP/1.1 client (forwarding, the CLI) against the
// scriptable test server: keep-alive, a peer that closes before answering, 1xx skipped, the
// answer cap; TLS verified by IP SAN or name, refused for another CA, another name or a pin
// that does not match, and always before a byte of the request goes out.
#include "net/blocking_http.h"

#include <gtest/gtest.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <chrono>
#include <memory>
#include <string>

#include "tests/net/test_http_server.h"
#include "tests/support/test_ca.h"

namespace ringcast::net {
namespace {

using test::net_server::HttpAction;
using test::net_server::HttpRequest;
using test::net_server::ServerOptions;
using test::net_server::TestHttpServer;
using namespace std::chrono_literals;

SteadyTime in(std::chrono::milliseconds d) {
  return std::chrono::steady_clock::now() + d;
}

std::string get(const std::string& target, bool close = false) {
  return "GET " + target + " HTTP/1.1\r\nHost: t\r\n" + (close ? "Connection: close\r\n" : "") +
         "\r\n";
}

struct CtxFree {
  void operator()(SSL_CTX* c) const { SSL_CTX_free(c); }
};
using Ctx = std::unique_ptr<SSL_CTX, CtxFree>;

// A client context trusting `ca_pem` alone.
Ctx trusting(const std::string& ca_pem) {
  Ctx ctx(SSL_CTX_new(TLS_method()));
  BIO* bio = BIO_new_mem_buf(ca_pem.data(), static_cast<int>(ca_pem.size()));
  X509* ca = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr);
  BIO_free(bio);
  X509_STORE_add_cert(SSL_CTX_get_cert_store(ctx.get()), ca);
  X509_free(ca);
  return ctx;
}

std::string der_of(const std::string& pem) {
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  X509* x = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr);
  BIO_free(bio);
  uint8_t* der = nullptr;
  const int len = i2d_X509(x, &der);
  X509_free(x);
  std::string out(reinterpret_cast<const char*>(der), static_cast<size_t>(len));
  OPENSSL_free(der);
  return out;
}

TEST(BlockingHttp, KeepsTheConnectionAliveAndSaysWhenThePeerClosedUnanswered) {
  int calls = 0;
  TestHttpServer server([&](const HttpRequest& r) {
    ++calls;
    if (r.target == "/close") return HttpAction{HttpAction::kClose, "", false, {}};
    if (r.target == "/c") {
      HttpAction bye = test::net_server::respond(200, "bye", "Connection: close\r\n");
      bye.close_after = true;
      return bye;
    }
    return test::net_server::respond(200, "hello " + r.target, "X-Extra: 1\r\n");
  });
  BlockingHttpConnection c;
  ASSERT_TRUE(c.connect("127.0.0.1", server.port(), nullptr, in(2s)).ok());
  auto a = c.exchange(get("/a"), in(2s), 1 << 20);
  ASSERT_TRUE(a.ok()) << a.error().message;
  EXPECT_EQ(a->status, 200);
  EXPECT_EQ(a->body, "hello /a");
  ASSERT_NE(a->header("x-extra"), nullptr);
  EXPECT_EQ(*a->header("x-extra"), "1");
  EXPECT_TRUE(a->keep_alive);
  EXPECT_TRUE(c.is_open());
  auto b = c.exchange(get("/b"), in(2s), 1 << 20);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->body, "hello /b");
  EXPECT_EQ(server.connections(), 1) << "the second request reused the connection";
  // The peer closes without answering: "closed", and the connection is gone.
  auto gone = c.exchange(get("/close"), in(2s), 1 << 20);
  ASSERT_FALSE(gone.ok());
  EXPECT_STREQ(gone.error().reason_or_code(), "closed");
  EXPECT_FALSE(c.is_open());
  // An answer with Connection: close ends the connection.
  auto last = blocking_exchange("127.0.0.1", server.port(), nullptr, get("/c", true), in(2s), 64);
  ASSERT_TRUE(last.ok());
  EXPECT_FALSE(last->keep_alive);
  EXPECT_EQ(calls, 4);
}

TEST(BlockingHttp, SkipsInterimAnswersAndCapsTheAnswer) {
  TestHttpServer server([](const HttpRequest&) {
    HttpAction a;
    a.response =
        "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 5\r\n\r\nmade!";
    return a;
  });
  auto r = blocking_exchange("127.0.0.1", server.port(), nullptr, get("/x"), in(2s), 1 << 20);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status, 201);
  EXPECT_EQ(r->body, "made!");
  auto small = blocking_exchange("127.0.0.1", server.port(), nullptr, get("/x"), in(2s), 10);
  ASSERT_FALSE(small.ok());
  EXPECT_STREQ(small.error().reason_or_code(), "too_large");
}

TEST(BlockingHttp, ANameResolvesAndAnUnknownOneSaysSo) {
  TestHttpServer server([](const HttpRequest&) { return test::net_server::respond(204, ""); });
  auto r = blocking_exchange("localhost", server.port(), nullptr, get("/"), in(2s), 1 << 20);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->status, 204);
  BlockingHttpConnection c;
  auto bad = c.connect("no-such-host.invalid", server.port(), nullptr, in(5s));
  ASSERT_FALSE(bad.ok());
  EXPECT_STREQ(bad.error().reason_or_code(), "resolve_failed");
  EXPECT_FALSE(c.detail().empty());
}

TEST(BlockingHttp, TlsIsVerifiedByAddressOrNameAndAPinIsExact) {
  const test::TestCa ca = test::TestCa::create();
  const test::LeafCert leaf = ca.issue({"localhost"}, {"127.0.0.1"});
  ServerOptions so;
  so.tls_cert_pem = leaf.cert_pem;
  so.tls_key_pem = leaf.key_pem;
  TestHttpServer server([](const HttpRequest&) { return test::net_server::respond(200, "tls"); },
                        so);
  Ctx good = trusting(ca.ca_pem);
  const BlockingTls by_ca{good.get(), {}};
  for (const char* host : {"127.0.0.1", "localhost"}) {
    auto r = blocking_exchange(host, server.port(), &by_ca, get("/"), in(3s), 1 << 20);
    ASSERT_TRUE(r.ok()) << host << ": " << r.error().message;
    EXPECT_EQ(r->body, "tls");
  }
  const int served = server.requests();

  // Another CA; a name the certificate does not carry; a pin of another certificate: refused
  // at the handshake, nothing sent.
  const test::TestCa other = test::TestCa::create("another CA");
  Ctx foreign = trusting(other.ca_pem);
  const BlockingTls by_other{foreign.get(), {}};
  BlockingHttpConnection c;
  auto untrusted = c.connect("127.0.0.1", server.port(), &by_other, in(3s));
  ASSERT_FALSE(untrusted.ok());
  EXPECT_STREQ(untrusted.error().reason_or_code(), "tls_untrusted");
  EXPECT_FALSE(c.detail().empty());
  EXPECT_FALSE(c.is_open());

  const test::LeafCert named = ca.issue({"other.example"});
  ServerOptions so2;
  so2.tls_cert_pem = named.cert_pem;
  so2.tls_key_pem = named.key_pem;
  TestHttpServer misnamed([](const HttpRequest&) { return test::net_server::respond(200); }, so2);
  auto wrong_name = c.connect("127.0.0.1", misnamed.port(), &by_ca, in(3s));
  ASSERT_FALSE(wrong_name.ok());
  EXPECT_STREQ(wrong_name.error().reason_or_code(), "tls_untrusted");

  Ctx bare(SSL_CTX_new(TLS_method()));
  const BlockingTls pinned_other{bare.get(), der_of(named.cert_pem)};
  auto not_pinned = c.connect("127.0.0.1", server.port(), &pinned_other, in(3s));
  ASSERT_FALSE(not_pinned.ok());
  EXPECT_STREQ(not_pinned.error().reason_or_code(), "tls_untrusted");
  EXPECT_EQ(server.requests(), served) << "a refused peer got no request";

  // Pinned to its own certificate: taken whatever the name and issuer.
  const BlockingTls pinned{bare.get(), der_of(leaf.cert_pem)};
  auto r = blocking_exchange("127.0.0.1", server.port(), &pinned, get("/"), in(3s), 1 << 20);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->status, 200);
}

}  // namespace
}  // namespace ringcast::net
