// An endpoint's extra headers and the Idempotency-Key option (operations.md "Endpoints"): which
// names and values are refused, the limits at their edges, and the lines rendered onto each
// attempt.
#include "core/endpoint_headers.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace ringcast {
namespace {

std::vector<EndpointHeader> one(std::string name, std::string value = "v") {
  return {EndpointHeader{std::move(name), std::move(value)}};
}

std::string reason_of(std::vector<EndpointHeader> hs) {
  auto p = normalize_endpoint_headers(hs);
  return p ? p->reason : "";
}

// Upper, lower and mixed case of `s` (ASCII).
std::vector<std::string> case_variants(const std::string& s) {
  std::string up = s, low = s, mixed = s;
  for (size_t i = 0; i < s.size(); ++i) {
    up[i] = static_cast<char>(std::toupper(static_cast<unsigned char>(s[i])));
    low[i] = static_cast<char>(std::tolower(static_cast<unsigned char>(s[i])));
    mixed[i] = i % 2 ? up[i] : low[i];
  }
  return {s, up, low, mixed};
}

TEST(EndpointHeaders, EveryReservedNameIsRefusedInEveryCase) {
  const std::vector<std::string> reserved = {"Host",
                                             "Content-Length",
                                             "Content-Type",
                                             "Content-Encoding",
                                             "Transfer-Encoding",
                                             "Connection",
                                             "Keep-Alive",
                                             "Upgrade",
                                             "TE",
                                             "Trailer",
                                             "Expect",
                                             "User-Agent",
                                             "webhook-id",
                                             "webhook-timestamp",
                                             "webhook-signature",
                                             "X-Webhook-Id",
                                             "X-Webhook-Timestamp",
                                             "X-Webhook-Signature",
                                             "Smengo-Delivery-Id",
                                             "Idempotency-Key",
                                             "Proxy-Authorization",
                                             "Proxy-Connection",
                                             "proxy-x"};
  for (const auto& name : reserved) {
    for (const auto& v : case_variants(name)) {
      EXPECT_TRUE(is_reserved_header(v)) << v;
      auto hs = one(v);
      auto p = normalize_endpoint_headers(hs);
      ASSERT_TRUE(p.has_value()) << v;
      EXPECT_STREQ(p->reason, "reserved_header") << v;
      EXPECT_EQ(p->index, 0u);
    }
  }
  // Near misses are ordinary names.
  for (const char* ok : {"X-Host", "Hosts", "Content-Lengths", "X-Webhook-Ids", "webhook",
                         "Idempotency", "Proxy", "TE2", "Authorization", "X-Api-Key"}) {
    EXPECT_FALSE(is_reserved_header(ok)) << ok;
    EXPECT_EQ(reason_of(one(ok)), "") << ok;
  }
}

TEST(EndpointHeaders, NamesAreTokens) {
  EXPECT_TRUE(is_http_token("X-Foo_Bar.1!#$%&'*+^`|~"));
  for (const char* bad :
       {"", "X Foo", "X:Foo", "X\rFoo", "X\nFoo", "(x)", "x\"y", "x/y", "x@y", "x=y", "x,y", "x;y",
        "x{y}", "x[y]", "x?y", "\xc3\xa9t\xc3\xa9", "x\ty"}) {
    EXPECT_FALSE(is_http_token(bad)) << bad;
    EXPECT_EQ(reason_of(one(bad)), "invalid_header") << bad;
  }
  EXPECT_EQ(reason_of(one(std::string("X\0Y", 3))), "invalid_header");
}

TEST(EndpointHeaders, NamesAreUniqueIgnoringCase) {
  std::vector<EndpointHeader> hs = {{"X-A", "1"}, {"X-B", "2"}, {"x-a", "3"}};
  auto p = normalize_endpoint_headers(hs);
  ASSERT_TRUE(p.has_value());
  EXPECT_STREQ(p->reason, "duplicate_header");
  EXPECT_EQ(p->index, 2u);  // the second one is named
  hs = {{"X-A", "1"}, {"X-A", "1"}};
  EXPECT_EQ(reason_of(hs), "duplicate_header");
  hs = {{"X-A", "1"}, {"X-AA", "1"}};
  EXPECT_EQ(reason_of(hs), "");
}

TEST(EndpointHeaders, ValuesRefuseControlCharactersButTab) {
  for (const std::string& bad :
       {std::string("a\rb"), std::string("a\nb"), std::string("a\r\nX-Evil: 1"),
        std::string("a\0b", 3), std::string("a\x7f"), std::string("a\x01"), std::string("a\x1f"),
        std::string("\r\n"), std::string("x\v")}) {
    auto hs = one("X-Foo", bad);
    auto p = normalize_endpoint_headers(hs);
    ASSERT_TRUE(p.has_value()) << bad;
    EXPECT_STREQ(p->reason, "invalid_header");
    EXPECT_EQ(p->index, 0u);
  }
  // Tab inside, spaces, punctuation, UTF-8 (obs-text) and empty values pass.
  for (const std::string ok : {"a\tb", "Bearer abc.def", "caf\xc3\xa9", "", "a,b;c=\"d\""}) {
    EXPECT_EQ(reason_of(one("X-Foo", ok)), "") << ok;
  }
}

TEST(EndpointHeaders, ValuesAreTrimmedAndTheOrderKept) {
  std::vector<EndpointHeader> hs = {{"X-B", " \t two \t"}, {"X-A", "one"}, {"X-C", "   "}};
  ASSERT_FALSE(normalize_endpoint_headers(hs).has_value());
  ASSERT_EQ(hs.size(), 3u);
  EXPECT_EQ(hs[0], (EndpointHeader{"X-B", "two"}));
  EXPECT_EQ(hs[1], (EndpointHeader{"X-A", "one"}));
  EXPECT_EQ(hs[2], (EndpointHeader{"X-C", ""}));
  auto again = hs;  // idempotent
  ASSERT_FALSE(normalize_endpoint_headers(again).has_value());
  EXPECT_EQ(again, hs);
}

TEST(EndpointHeaders, AtMostTwentyHeaders) {
  std::vector<EndpointHeader> hs;
  for (int i = 0; i < 20; ++i) hs.push_back({"X-H" + std::to_string(i), "v"});
  EXPECT_EQ(reason_of(hs), "");
  hs.push_back({"X-H20", "v"});
  auto p = normalize_endpoint_headers(hs);
  ASSERT_TRUE(p.has_value());
  EXPECT_STREQ(p->reason, "too_many_headers");
  EXPECT_EQ(p->index, 20u);
  EXPECT_EQ(reason_of({}), "");
}

TEST(EndpointHeaders, AtMost4096BytesOfNamesAndValues) {
  // Two headers: names 4 + 4 bytes, values filling the rest exactly.
  auto make = [](size_t total) {
    std::vector<EndpointHeader> hs = {{"X-A1", std::string(100, 'a')}, {"X-B2", ""}};
    hs[1].value.assign(total - 8 - 100, 'b');
    return hs;
  };
  EXPECT_EQ(reason_of(make(4096)), "");
  auto hs = make(4097);
  auto p = normalize_endpoint_headers(hs);
  ASSERT_TRUE(p.has_value());
  EXPECT_STREQ(p->reason, "headers_too_large");
  EXPECT_EQ(p->index, 1u);  // the header that crossed the limit
  // Trimmed bytes do not count.
  hs = make(4096);
  hs[1].value = "  " + hs[1].value + "\t";
  EXPECT_EQ(reason_of(hs), "");
  // One long name alone.
  EXPECT_EQ(reason_of(one(std::string(4096, 'n'), "")), "");
  EXPECT_EQ(reason_of(one(std::string(4096, 'n'), "v")), "headers_too_large");
}

TEST(EndpointHeaders, CheckGivesAnInvalidArgumentOnTheHeadersField) {
  auto hs = one("Host", "evil.example");
  Result<void> r = check_endpoint_headers(hs);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::kInvalidArgument);
  EXPECT_STREQ(r.error().field, "headers");
  EXPECT_STREQ(r.error().reason, "reserved_header");
  hs = one("X-Ok", " fine ");
  EXPECT_TRUE(check_endpoint_headers(hs).ok());
  EXPECT_EQ(hs[0].value, "fine");
}

TEST(EndpointHeaders, RenderedLinesFollowTheIdempotencyKey) {
  Endpoint e;
  std::string out = "keep\r\n";
  append_endpoint_headers(e, "msg_1", out);
  EXPECT_EQ(out, "keep\r\n");  // nothing configured: nothing added
  e.headers = {{"X-Tenant", "acme"}, {"Authorization", "Bearer t"}};
  out.clear();
  append_endpoint_headers(e, "msg_1", out);
  EXPECT_EQ(out, "X-Tenant: acme\r\nAuthorization: Bearer t\r\n");
  e.idempotency_key = true;
  out.clear();
  append_endpoint_headers(e, "msg_01HZX", out);
  EXPECT_EQ(out, "Idempotency-Key: msg_01HZX\r\nX-Tenant: acme\r\nAuthorization: Bearer t\r\n");
  e.headers.clear();
  out.clear();
  append_endpoint_headers(e, "msg_2", out);
  EXPECT_EQ(out, "Idempotency-Key: msg_2\r\n");
}

}  // namespace
}  // namespace ringcast

namespace ringcast {
namespace {

// SPEC R14.5: which header values are write-only.
TEST(CredentialHeaders, TheNamesOfReceiverCredentialsAreKnownWhateverTheirCase) {
  for (const char* n : {"Authorization", "authorization", "Proxy-Authorization", "Cookie",
                        "X-Api-Key", "X-TENANT-TOKEN", "X-Client-Secret", "X-Auth-User",
                        "X-Password", "X-Upstream-Signature", "Apikey", "OAuth-Bearer"}) {
    EXPECT_TRUE(is_credential_header(n)) << n;
  }
  for (const char* n : {"X-Trace", "X-Env", "Accept", "X-Tenant", "X-Request-Id"}) {
    EXPECT_FALSE(is_credential_header(n)) << n;
  }
}

}  // namespace
}  // namespace ringcast
