// URL form check before anything is sent (SPEC R6 "URL fails the form check"): parses an
// absolute http(s) URL into its parts. Invariant: a Url returned by check_url() has a
// non-empty lower-case host, a port in 1..65535, and a path_and_query that starts with '/'.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"
#include "core/types.h"

namespace ringcast {

struct Url {
  std::string scheme;          // "https" or "http", lower-case
  std::string host;            // lower-case; IPv6 without brackets ("::1")
  uint16_t port = 0;           // explicit or the scheme default (443 / 80)
  std::string path_and_query;  // "/" when the URL has no path; never holds a fragment
  bool tls = false;            // scheme == "https"
  bool host_is_ip = false;     // host is an IPv4 dotted quad or an IPv6 literal
};

// Defaults (documented, configurable):
// - https only; plain http only with allow_http (tests, private deployments).
// - min_bytes 10: "http://a.b" (10 bytes) is the shortest URL with a dotted host; shorter
//   input ("https://", "https://a", junk) is `url_too_short`. max_bytes 2048, the
//   common browser/CDN limit. Length is checked first, so both codes win over the others.
// - allowed_ports empty: any port 1..65535 that is not denied.
// - denied_ports: well-known non-HTTP service ports that an SSRF would aim at
//   (kDefaultDeniedPorts). An explicit allowed_ports entry wins over the deny list.
inline const std::vector<uint16_t>& default_denied_ports() {
  // 0 is never valid anyway; 22 ssh, 23 telnet, 25 smtp, 53 dns, 110 pop3, 111 rpcbind,
  // 135 msrpc, 139/445 smb, 143 imap, 389 ldap, 465/587 smtp, 993/995 imaps/pop3s,
  // 2049 nfs, 2375/2376 docker, 2379/2380 etcd, 3306 mysql, 5432 postgres, 6379 redis,
  // 9200 elasticsearch, 11211 memcached, 27017 mongodb.
  static const std::vector<uint16_t> kPorts = {
      0,   22,  23,   25,   53,   110,  111,  135,  139,  143,  389,  445,   465,  587,
      993, 995, 2049, 2375, 2376, 2379, 2380, 3306, 5432, 6379, 9200, 11211, 27017};
  return kPorts;
}

struct UrlPolicy {
  bool allow_http = false;
  size_t min_bytes = 10;
  size_t max_bytes = 2048;
  std::vector<uint16_t> allowed_ports;                          // empty: any
  std::vector<uint16_t> denied_ports = default_denied_ports();  // checked after allowed_ports
};

// Parses and checks `text`. On failure the Error has code kInvalidArgument, field "url" and
// reason exactly one of the SPEC R6 codes: "not_https", "port_not_allowed",
// "userinfo_not_allowed", "fragment_not_allowed", "invalid_url", "url_too_long",
// "url_too_short". Checks, in order: length, characters (no controls, spaces, non-ASCII),
// scheme, userinfo, fragment, host, port syntax (0 or > 65535 is invalid_url), policy ports.
// Hosts are a DNS name ([a-z0-9_-] labels), a strict dotted quad, or a bracketed IPv6 literal
// without zone id; numeric-looking names ("127.1", "2130706433", "0x7f.1") are invalid_url
// because inet_aton-style resolvers would read them as addresses.
Result<Url> check_url(std::string_view text, const UrlPolicy& policy = {});

// Maps a check_url() error to the attempt's log code (kind kNotHttps ... kUrlTooShort);
// kInvalidUrl for anything it does not recognise.
ErrorCode url_error_code(const Error& error);

// "host:port" authority text for Host headers / connection keys: brackets around IPv6,
// port omitted when it is the scheme default.
std::string host_header(const Url& url);

}  // namespace ringcast
