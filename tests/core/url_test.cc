// core/url: every SPEC R6 URL code, the parsed parts of accepted URLs, and the policy knobs.
#include "core/url.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>

namespace ringcast {
namespace {

struct Accepted {
  const char* in;
  const char* scheme;
  const char* host;
  uint16_t port;
  const char* path;
  bool host_is_ip;
};

TEST(Url, AcceptsAndSplits) {
  const Accepted kCases[] = {
      {"https://example.com", "https", "example.com", 443, "/", false},
      {"https://example.com/", "https", "example.com", 443, "/", false},
      {"https://Example.COM/Hook?A=B", "https", "example.com", 443, "/Hook?A=B", false},
      {"HTTPS://example.com/x", "https", "example.com", 443, "/x", false},
      {"https://example.com?x=1", "https", "example.com", 443, "/?x=1", false},
      {"https://example.com:8443/a/b", "https", "example.com", 8443, "/a/b", false},
      {"https://example.com:/a", "https", "example.com", 443, "/a", false},  // empty port
      {"https://example.com:443", "https", "example.com", 443, "/", false},
      {"https://example.com:08443/", "https", "example.com", 8443, "/", false},
      {"https://a-b.c_d.example/", "https", "a-b.c_d.example", 443, "/", false},
      {"https://93.184.216.34/h", "https", "93.184.216.34", 443, "/h", true},
      {"https://[2606:4700::1111]/h", "https", "2606:4700::1111", 443, "/h", true},
      {"https://[2606:4700:0:0::1111]:8443", "https", "2606:4700::1111", 8443, "/", true},
      {"https://[::FFFF:8.8.8.8]/", "https", "::ffff:8.8.8.8", 443, "/", true},
      {"https://example.com/p%20q?r=%2F", "https", "example.com", 443, "/p%20q?r=%2F", false},
      {"https://example.com/a@b", "https", "example.com", 443, "/a@b", false},  // @ in path
      {"https://example.com/?u=a@b", "https", "example.com", 443, "/?u=a@b", false},
      {"https://localhost/h", "https", "localhost", 443, "/h", false},
      {"https://x1.io", "https", "x1.io", 443, "/", false},
      {"https://65535.example.com:65535/", "https", "65535.example.com", 65535, "/", false},
  };
  for (const auto& c : kCases) {
    SCOPED_TRACE(c.in);
    auto r = check_url(c.in);
    ASSERT_TRUE(r.ok()) << r.error().reason_or_code() << ": " << r.error().message;
    EXPECT_EQ(r->scheme, c.scheme);
    EXPECT_EQ(r->host, c.host);
    EXPECT_EQ(r->port, c.port);
    EXPECT_EQ(r->path_and_query, c.path);
    EXPECT_EQ(r->host_is_ip, c.host_is_ip);
    EXPECT_TRUE(r->tls);
  }
}

struct Rejected {
  const char* in;
  const char* reason;  // SPEC R6 code
  ErrorCode::Kind kind;
};

using K = ErrorCode::Kind;

// SPEC R6 "URL fails the form check before sending", one row per code and then the many ways
// of being invalid_url.
const Rejected kRejected[] = {
    {"http://example.com/hook", "not_https", K::kNotHttps},
    {"HTTP://example.com/hook", "not_https", K::kNotHttps},
    {"ftp://example.com/hook", "not_https", K::kNotHttps},
    {"wss://example.com/hook", "not_https", K::kNotHttps},
    {"https://example.com:22/", "port_not_allowed", K::kPortNotAllowed},
    {"https://example.com:25/", "port_not_allowed", K::kPortNotAllowed},
    {"https://example.com:6379/", "port_not_allowed", K::kPortNotAllowed},
    {"https://[2606:4700::1]:5432/", "port_not_allowed", K::kPortNotAllowed},
    {"https://user@example.com/", "userinfo_not_allowed", K::kUserinfoNotAllowed},
    {"https://user:pw@example.com/", "userinfo_not_allowed", K::kUserinfoNotAllowed},
    {"https://@example.com/", "userinfo_not_allowed", K::kUserinfoNotAllowed},
    {"https://example.com@evil.com/", "userinfo_not_allowed", K::kUserinfoNotAllowed},
    {"https://example.com/#frag", "fragment_not_allowed", K::kFragmentNotAllowed},
    {"https://example.com#", "fragment_not_allowed", K::kFragmentNotAllowed},
    {"https://example.com/?a=1#x", "fragment_not_allowed", K::kFragmentNotAllowed},
    {"https://example.com#@evil.com", "fragment_not_allowed", K::kFragmentNotAllowed},
    {"https:", "url_too_short", K::kUrlTooShort},
    {"https://", "url_too_short", K::kUrlTooShort},
    {"https://a", "url_too_short", K::kUrlTooShort},
    {"", "url_too_short", K::kUrlTooShort},
    // invalid_url
    {"example.com/hook", "invalid_url", K::kInvalidUrl},
    {"//example.com/hook", "invalid_url", K::kInvalidUrl},
    {"https:example.com", "invalid_url", K::kInvalidUrl},
    {"https:/example.com", "invalid_url", K::kInvalidUrl},
    {"1https://example.com", "invalid_url", K::kInvalidUrl},
    {"ht~tps://example.com", "invalid_url", K::kInvalidUrl},
    {"https:///path/only", "invalid_url", K::kInvalidUrl},
    {"https://:443/path", "invalid_url", K::kInvalidUrl},
    {"https://exa mple.com/", "invalid_url", K::kInvalidUrl},
    {"https://example.com/a b", "invalid_url", K::kInvalidUrl},
    {" https://example.com/", "invalid_url", K::kInvalidUrl},
    {"https://example.com/\t", "invalid_url", K::kInvalidUrl},
    {"https://example.com/\r\nX: y", "invalid_url", K::kInvalidUrl},
    {"https://example.com/\x7f", "invalid_url", K::kInvalidUrl},
    {"https://ex\xc3\xa4mple.com/", "invalid_url", K::kInvalidUrl},  // raw UTF-8: punycode it
    {"https://example.com\\@evil.com/", "invalid_url", K::kInvalidUrl},
    {"https://example.com:0/", "invalid_url", K::kInvalidUrl},
    {"https://example.com:65536/", "invalid_url", K::kInvalidUrl},
    {"https://example.com:99999999/", "invalid_url", K::kInvalidUrl},
    {"https://example.com:-1/", "invalid_url", K::kInvalidUrl},
    {"https://example.com:44a/", "invalid_url", K::kInvalidUrl},
    {"https://example.com:443:443/", "invalid_url", K::kInvalidUrl},
    {"https://[::1/", "invalid_url", K::kInvalidUrl},
    {"https://::1]/", "invalid_url", K::kInvalidUrl},
    {"https://[::1]]/", "invalid_url", K::kInvalidUrl},
    {"https://2606:4700::1111/", "invalid_url", K::kInvalidUrl},  // IPv6 needs brackets
    {"https://[2606:4700::zz]/", "invalid_url", K::kInvalidUrl},
    {"https://[93.184.216.34]/", "invalid_url", K::kInvalidUrl},
    {"https://[fe80::1%25eth0]/", "invalid_url", K::kInvalidUrl},  // zone id
    {"https://[::1]x/", "invalid_url", K::kInvalidUrl},
    {"https://[]/", "invalid_url", K::kInvalidUrl},
    {"https://exa[mple.com/", "invalid_url", K::kInvalidUrl},
    {"https://.example.com/", "invalid_url", K::kInvalidUrl},
    {"https://example..com/", "invalid_url", K::kInvalidUrl},
    {"https://example.com./", "invalid_url", K::kInvalidUrl},
    {"https://-example.com/", "invalid_url", K::kInvalidUrl},
    {"https://example-.com/", "invalid_url", K::kInvalidUrl},
    {"https://exa%6dple.com/", "invalid_url", K::kInvalidUrl},
    {"https://exa!mple.com/", "invalid_url", K::kInvalidUrl},
    {"https://127.1/", "invalid_url", K::kInvalidUrl},       // inet_aton short form
    {"https://2130706433/", "invalid_url", K::kInvalidUrl},  // 127.0.0.1 as an integer
    {"https://0x7f.0.0.1/", "invalid_url", K::kInvalidUrl},  // hex
    {"https://0177.0.0.1/", "invalid_url", K::kInvalidUrl},  // octal
    {"https://example.0x10/", "invalid_url", K::kInvalidUrl},
    {"https://256.1.1.1/", "invalid_url", K::kInvalidUrl},
    {"https://example.com/%", "invalid_url", K::kInvalidUrl},
    {"https://example.com/%4", "invalid_url", K::kInvalidUrl},
    {"https://example.com/%zz", "invalid_url", K::kInvalidUrl},
    {"https://example.com/?q=%g0", "invalid_url", K::kInvalidUrl},
};

TEST(Url, RejectsWithTheSpecCode) {
  for (const auto& c : kRejected) {
    SCOPED_TRACE(c.in);
    auto r = check_url(c.in);
    ASSERT_FALSE(r.ok()) << "accepted, host=" << r->host;
    const Error& e = r.error();
    EXPECT_EQ(e.code, Errc::kInvalidArgument);
    ASSERT_NE(e.field, nullptr);
    EXPECT_STREQ(e.field, "url");
    ASSERT_NE(e.reason, nullptr);
    EXPECT_STREQ(e.reason, c.reason);
    EXPECT_EQ(url_error_code(e).kind, c.kind);
    EXPECT_EQ(url_error_code(e).str(), c.reason);  // the log spells it the same way
    EXPECT_NE(std::strlen(e.message), 0u);
  }
}

TEST(Url, RejectsALabelLongerThan63AndAHostLongerThan253) {
  std::string label63(63, 'a'), label64(64, 'a');
  EXPECT_TRUE(check_url("https://" + label63 + ".com/").ok());
  EXPECT_FALSE(check_url("https://" + label64 + ".com/").ok());
  std::string host;
  while (host.size() < 250) host += "abcdefghi.";
  host += "com";  // 253 bytes
  ASSERT_EQ(host.size(), 253u);
  EXPECT_TRUE(check_url("https://" + host + "/").ok());
  auto r = check_url("https://a" + host + "/");
  ASSERT_FALSE(r.ok());
  EXPECT_STREQ(r.error().reason, "invalid_url");
}

TEST(Url, LengthLimitsAreInclusiveAndConfigurable) {
  UrlPolicy p;
  EXPECT_EQ(p.max_bytes, 2048u);
  EXPECT_EQ(p.min_bytes, 10u);
  std::string base = "https://example.com/";
  std::string at_max = base + std::string(2048 - base.size(), 'x');
  ASSERT_EQ(at_max.size(), 2048u);
  EXPECT_TRUE(check_url(at_max, p).ok());
  auto r = check_url(at_max + "x", p);
  ASSERT_FALSE(r.ok());
  EXPECT_STREQ(r.error().reason, "url_too_long");
  // Length is checked first: a too-long URL full of other faults still says url_too_long.
  r = check_url("http://u@x#" + std::string(3000, ' '), p);
  ASSERT_FALSE(r.ok());
  EXPECT_STREQ(r.error().reason, "url_too_long");

  p.allow_http = true;
  EXPECT_TRUE(check_url("http://a.b", p).ok());  // exactly min_bytes
  r = check_url("http://ab", p);
  ASSERT_FALSE(r.ok());
  EXPECT_STREQ(r.error().reason, "url_too_short");

  UrlPolicy small;
  small.max_bytes = 30;
  small.min_bytes = 20;
  EXPECT_STREQ(check_url("https://example.com/123456789012", small).error().reason, "url_too_long");
  EXPECT_STREQ(check_url("https://ex.com/", small).error().reason, "url_too_short");
  EXPECT_TRUE(check_url("https://example.com/abc", small).ok());
}

TEST(Url, PlainHttpOnlyWhenAllowed) {
  auto r = check_url("http://127.0.0.1:8080/hook");
  ASSERT_FALSE(r.ok());
  EXPECT_STREQ(r.error().reason, "not_https");
  UrlPolicy p;
  p.allow_http = true;
  r = check_url("http://127.0.0.1:8080/hook", p);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->scheme, "http");
  EXPECT_FALSE(r->tls);
  EXPECT_EQ(r->port, 8080);
  EXPECT_TRUE(r->host_is_ip);
  r = check_url("http://example.com", p);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->port, 80);
  // allow_http does not open other schemes.
  EXPECT_STREQ(check_url("ftp://example.com/", p).error().reason, "not_https");
}

TEST(Url, PortPolicy) {
  UrlPolicy p;
  // Default deny list.
  for (uint16_t port : default_denied_ports()) {
    if (port == 0) continue;  // port 0 is invalid_url before the policy is asked
    auto r = check_url("https://example.com:" + std::to_string(port) + "/", p);
    ASSERT_FALSE(r.ok()) << port;
    EXPECT_STREQ(r.error().reason, "port_not_allowed") << port;
  }
  EXPECT_TRUE(check_url("https://example.com:8443/", p).ok());
  // An allow-list: only those ports, the default port included.
  p.allowed_ports = {443, 8443};
  EXPECT_TRUE(check_url("https://example.com/", p).ok());
  EXPECT_TRUE(check_url("https://example.com:8443/", p).ok());
  EXPECT_STREQ(check_url("https://example.com:8080/", p).error().reason, "port_not_allowed");
  // An explicit allow wins over the deny list.
  p.allowed_ports = {6379};
  EXPECT_TRUE(check_url("https://example.com:6379/", p).ok());
  EXPECT_STREQ(check_url("https://example.com/", p).error().reason, "port_not_allowed");
  // An empty deny list lets everything through.
  UrlPolicy open;
  open.denied_ports.clear();
  EXPECT_TRUE(check_url("https://example.com:22/", open).ok());
  // A custom deny list that covers the default port.
  UrlPolicy no443;
  no443.denied_ports = {443};
  EXPECT_STREQ(check_url("https://example.com/", no443).error().reason, "port_not_allowed");
}

TEST(Url, UnknownReasonMapsToInvalidUrl) {
  Error e = make_error(Errc::kInvalidArgument, "x", "url", "something_else");
  EXPECT_EQ(url_error_code(e), ErrorCode::of(K::kInvalidUrl));
  e.reason = nullptr;
  EXPECT_EQ(url_error_code(e), ErrorCode::of(K::kInvalidUrl));
}

TEST(Url, HostHeader) {
  UrlPolicy p;
  p.allow_http = true;
  EXPECT_EQ(host_header(*check_url("https://Example.com/", p)), "example.com");
  EXPECT_EQ(host_header(*check_url("https://example.com:8443/", p)), "example.com:8443");
  EXPECT_EQ(host_header(*check_url("http://example.com:80/", p)), "example.com");
  EXPECT_EQ(host_header(*check_url("http://example.com:443/", p)), "example.com:443");
  EXPECT_EQ(host_header(*check_url("https://[::1]:8443/", p)), "[::1]:8443");
  EXPECT_EQ(host_header(*check_url("https://[2606:4700::1]/", p)), "[2606:4700::1]");
  EXPECT_EQ(host_header(*check_url("https://1.2.3.4/", p)), "1.2.3.4");
}

}  // namespace
}  // namespace ringcast
