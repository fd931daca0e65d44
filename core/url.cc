#include "core/url.h"

#include <algorithm>
#include <cstring>

#include "core/ip_address.h"

namespace ringcast {
namespace {

constexpr const char* kField = "url";

Error url_error(const char* reason, const char* message) {
  return make_error(Errc::kInvalidArgument, message, kField, reason);
}

char lower(char c) {
  return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
}
bool is_alpha(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}
bool is_digit(char c) {
  return c >= '0' && c <= '9';
}
bool is_hex(char c) {
  return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (lower(a[i]) != lower(b[i])) return false;
  }
  return true;
}

// A DNS name: labels of [a-z0-9_-], 1..63 bytes, no leading/trailing '-', 253 bytes total.
// A name whose last label looks numeric ("127.1", "2130706433", "0x7f.1") is rejected: it is
// not a valid dotted quad (that path is taken before), but inet_aton-style resolvers would
// read it as an address, which is the classic way around address filters.
bool valid_reg_name(std::string_view host) {
  if (host.empty() || host.size() > 253) return false;
  size_t start = 0;
  std::string_view last;
  while (start <= host.size()) {
    size_t dot = host.find('.', start);
    size_t end = dot == std::string_view::npos ? host.size() : dot;
    std::string_view label = host.substr(start, end - start);
    if (label.empty() || label.size() > 63) return false;
    if (label.front() == '-' || label.back() == '-') return false;
    for (char c : label) {
      if (!(is_alpha(c) || is_digit(c) || c == '-' || c == '_')) return false;
    }
    last = label;
    if (dot == std::string_view::npos) break;
    start = dot + 1;
  }
  bool all_digits = std::all_of(last.begin(), last.end(), is_digit);
  bool hex_prefixed = last.size() >= 2 && last[0] == '0' && lower(last[1]) == 'x';
  return !(all_digits || hex_prefixed);
}

bool valid_percent_escapes(std::string_view s) {
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') continue;
    if (i + 2 >= s.size() || !is_hex(s[i + 1]) || !is_hex(s[i + 2])) return false;
    i += 2;
  }
  return true;
}

bool port_listed(const std::vector<uint16_t>& ports, uint16_t port) {
  return std::find(ports.begin(), ports.end(), port) != ports.end();
}

}  // namespace

Result<Url> check_url(std::string_view text, const UrlPolicy& policy) {
  // Length first: it bounds every later scan (SPEC R6 url_too_long / url_too_short).
  if (text.size() > policy.max_bytes) return url_error("url_too_long", "URL is too long");
  if (text.size() < policy.min_bytes) return url_error("url_too_short", "URL is too short");

  // Printable ASCII only: no controls, spaces, DEL, raw non-ASCII (IDNs must be punycode),
  // and no backslash (browsers read it as '/', which splits parsers on the authority).
  for (char c : text) {
    auto u = static_cast<unsigned char>(c);
    if (u <= 0x20 || u >= 0x7f || c == '\\') {
      return url_error("invalid_url", "URL contains a control, space, backslash or non-ASCII byte");
    }
  }

  // scheme ":" "//" — RFC 3986 3.1.
  size_t colon = text.find(':');
  if (colon == std::string_view::npos || colon == 0 || !is_alpha(text[0])) {
    return url_error("invalid_url", "URL has no scheme");
  }
  std::string_view scheme = text.substr(0, colon);
  for (char c : scheme) {
    if (!(is_alpha(c) || is_digit(c) || c == '+' || c == '-' || c == '.')) {
      return url_error("invalid_url", "URL scheme is malformed");
    }
  }
  if (text.substr(colon + 1, 2) != "//") {
    return url_error("invalid_url", "URL is not absolute (scheme://host)");
  }
  Url url;
  if (iequals(scheme, "https")) {
    url.scheme = "https";
    url.tls = true;
    url.port = 443;
  } else if (iequals(scheme, "http")) {
    if (!policy.allow_http) return url_error("not_https", "URL must use https");
    url.scheme = "http";
    url.port = 80;
  } else {
    return url_error("not_https", "URL scheme must be https");
  }

  std::string_view rest = text.substr(colon + 3);
  size_t auth_end = rest.find_first_of("/?#");
  std::string_view authority = rest.substr(0, auth_end);
  std::string_view tail =
      auth_end == std::string_view::npos ? std::string_view() : rest.substr(auth_end);

  if (authority.find('@') != std::string_view::npos) {
    return url_error("userinfo_not_allowed", "URL must not carry user:password@");
  }
  if (text.find('#') != std::string_view::npos) {
    return url_error("fragment_not_allowed", "URL must not carry a #fragment");
  }

  // host [":" port]
  std::string_view host_text, port_text;
  bool has_port = false;
  if (!authority.empty() && authority[0] == '[') {
    size_t close = authority.find(']');
    if (close == std::string_view::npos) return url_error("invalid_url", "unbalanced '[' in host");
    host_text = authority.substr(1, close - 1);
    std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after[0] != ':') return url_error("invalid_url", "junk after IPv6 literal");
      has_port = true;
      port_text = after.substr(1);
    }
    auto ip = parse_ip(host_text);  // rejects zone ids ("%25eth0") too
    if (host_text.find(':') == std::string_view::npos || !ip || ip->is_v4()) {
      return url_error("invalid_url", "bad IPv6 literal");
    }
    url.host = to_string(*ip);
    url.host_is_ip = true;
  } else {
    if (authority.find_first_of("[]") != std::string_view::npos) {
      return url_error("invalid_url", "unbalanced ']' in host");
    }
    size_t pc = authority.find(':');
    if (pc != std::string_view::npos) {
      if (authority.find(':', pc + 1) != std::string_view::npos) {
        return url_error("invalid_url", "IPv6 literal must be in brackets");
      }
      has_port = true;
      port_text = authority.substr(pc + 1);
    }
    host_text = authority.substr(0, pc);
    if (host_text.empty()) return url_error("invalid_url", "URL has an empty host");
    if (auto ip = parse_ip(host_text)) {
      url.host = to_string(*ip);
      url.host_is_ip = true;
    } else {
      if (!valid_reg_name(host_text)) return url_error("invalid_url", "URL host is malformed");
      url.host.resize(host_text.size());
      std::transform(host_text.begin(), host_text.end(), url.host.begin(), lower);
    }
  }

  // An empty port ("host:") means the default (RFC 3986 3.2.3).
  if (has_port && !port_text.empty()) {
    if (port_text.size() > 5) return url_error("invalid_url", "URL port is out of range");
    uint32_t port = 0;
    for (char c : port_text) {
      if (!is_digit(c)) return url_error("invalid_url", "URL port is not a number");
      port = port * 10 + static_cast<uint32_t>(c - '0');
    }
    if (port == 0 || port > 65535) return url_error("invalid_url", "URL port is out of range");
    url.port = static_cast<uint16_t>(port);
  }
  if (!policy.allowed_ports.empty()) {
    if (!port_listed(policy.allowed_ports, url.port)) {
      return url_error("port_not_allowed", "URL port is not on the allowed list");
    }
  } else if (port_listed(policy.denied_ports, url.port)) {
    return url_error("port_not_allowed", "URL port is denied");
  }

  if (!valid_percent_escapes(tail)) return url_error("invalid_url", "bad %-escape in URL");
  if (tail.empty() || tail[0] == '?') {
    url.path_and_query = "/";
    url.path_and_query += tail;
  } else {
    url.path_and_query = std::string(tail);
  }
  return url;
}

ErrorCode url_error_code(const Error& error) {
  using K = ErrorCode::Kind;
  struct Row {
    const char* reason;
    K kind;
  };
  static constexpr Row kRows[] = {
      {"not_https", K::kNotHttps},
      {"port_not_allowed", K::kPortNotAllowed},
      {"userinfo_not_allowed", K::kUserinfoNotAllowed},
      {"fragment_not_allowed", K::kFragmentNotAllowed},
      {"invalid_url", K::kInvalidUrl},
      {"url_too_long", K::kUrlTooLong},
      {"url_too_short", K::kUrlTooShort},
  };
  if (error.reason != nullptr) {
    for (const Row& row : kRows) {
      if (std::strcmp(row.reason, error.reason) == 0) return ErrorCode::of(row.kind);
    }
  }
  return ErrorCode::of(K::kInvalidUrl);
}

std::string host_header(const Url& url) {
  std::string out;
  bool v6 = url.host_is_ip && url.host.find(':') != std::string::npos;
  if (v6) out += '[';
  out += url.host;
  if (v6) out += ']';
  if (url.port != (url.tls ? 443 : 80)) {
    out += ':';
    out += std::to_string(url.port);
  }
  return out;
}

}  // namespace ringcast
