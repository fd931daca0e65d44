// Fuzz target: the URL form check (core/url: check_url, host_header) and address parsing
// (core/ip_address: parse_ip, to_string, parse_cidr), which stand between a tenant's endpoint
// URL and the address guard (SPEC R6). A URL that passes meets check_url's invariant and
// passes again, unchanged, when rebuilt from its parts; an error carries one SPEC R6 code; a
// parsed address prints to text that parses back to it and agrees with inet_pton.
#include <arpa/inet.h>

#include <cstring>
#include <string>

#include "core/ip_address.h"
#include "core/url.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

using namespace ringcast;

void check_ip(std::string_view text) {
  const std::string z(text);  // inet_pton wants a C string
  const bool has_nul = z.find('\0') != std::string::npos;
  const auto ip = parse_ip(text);
  uint8_t buf[16];
  const bool v4 = !has_nul && inet_pton(AF_INET, z.c_str(), buf) == 1;
  if (ip && ip->is_v4()) {
    // Never more lenient than the C library, and the same bytes.
    FUZZ_CHECK(v4);
    FUZZ_CHECK(std::memcmp(buf, ip->bytes.data(), 4) == 0);
  }
  const bool v6 = !has_nul && !v4 && inet_pton(AF_INET6, z.c_str(), buf) == 1;
  if (ip && !ip->is_v4()) {
    FUZZ_CHECK(v6);
    FUZZ_CHECK(std::memcmp(buf, ip->bytes.data(), 16) == 0);
  }
  if (ip) {
    const std::string printed = to_string(*ip);
    const auto again = parse_ip(printed);
    FUZZ_CHECK(again && *again == *ip);
    FUZZ_CHECK(to_string(*again) == printed);
  }
  if (auto cidr = parse_cidr(text)) {
    FUZZ_CHECK(cidr->prefix_len <= (cidr->base.is_v4() ? 32 : 128));
    FUZZ_CHECK(cidr->contains(cidr->base));
    IpAddress other = cidr->base;
    other.family = cidr->base.is_v4() ? IpAddress::Family::kV6 : IpAddress::Family::kV4;
    FUZZ_CHECK(!cidr->contains(other));  // never across families
  }
}

bool is_r6_code(const char* r) {
  static constexpr const char* kCodes[] = {
      "not_https",   "port_not_allowed", "userinfo_not_allowed", "fragment_not_allowed",
      "invalid_url", "url_too_long",     "url_too_short"};
  if (r == nullptr) return false;
  for (const char* c : kCodes) {
    if (std::strcmp(c, r) == 0) return true;
  }
  return false;
}

void check_url_text(std::string_view text, const UrlPolicy& policy) {
  Result<Url> r = check_url(text, policy);
  if (!r) {
    FUZZ_CHECK(r.error().code == Errc::kInvalidArgument);
    FUZZ_CHECK(is_r6_code(r.error().reason));
    FUZZ_CHECK(r.error().field && std::strcmp(r.error().field, "url") == 0);
    return;
  }
  const Url& u = *r;
  FUZZ_CHECK(text.size() >= policy.min_bytes && text.size() <= policy.max_bytes);
  FUZZ_CHECK(u.scheme == (u.tls ? "https" : "http"));
  FUZZ_CHECK(u.tls || policy.allow_http);
  FUZZ_CHECK(!u.host.empty());
  for (char c : u.host) FUZZ_CHECK(!(c >= 'A' && c <= 'Z'));
  FUZZ_CHECK(u.port >= 1);
  FUZZ_CHECK(!u.path_and_query.empty() && u.path_and_query[0] == '/');
  FUZZ_CHECK(u.path_and_query.find('#') == std::string::npos);
  FUZZ_CHECK(u.host_is_ip == parse_ip(u.host).has_value());
  // What the sender connects to and sends as Host, rebuilt into a URL, passes unchanged.
  UrlPolicy loose = policy;
  loose.min_bytes = 0;
  loose.max_bytes = 1 << 20;
  const std::string rebuilt = u.scheme + "://" + host_header(u) + u.path_and_query;
  Result<Url> again = check_url(rebuilt, loose);
  FUZZ_CHECK(again.ok());
  FUZZ_CHECK(again->scheme == u.scheme && again->host == u.host && again->port == u.port);
  FUZZ_CHECK(again->path_and_query == u.path_and_query && again->tls == u.tls);
  FUZZ_CHECK(again->host_is_ip == u.host_is_ip);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ringcast::fuzz::Input in(data, size);
  const uint8_t flags = in.u8();
  UrlPolicy policy;
  policy.allow_http = flags & 1;
  if (flags & 2) policy.allowed_ports = {443, 8443, static_cast<uint16_t>(in.u8() * 256 + in.u8())};
  if (flags & 4) policy.denied_ports.clear();
  if (flags & 8) policy.min_bytes = 0;
  if (flags & 16) policy.max_bytes = 64;
  const std::string_view text = in.rest();
  check_url_text(text, policy);
  check_ip(text);
  return 0;
}
