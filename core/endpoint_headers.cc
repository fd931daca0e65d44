#include "core/endpoint_headers.h"

namespace ringcast {
namespace {

char ascii_lower(char c) {
  return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
}

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (ascii_lower(a[i]) != ascii_lower(b[i])) return false;
  }
  return true;
}

bool istarts_with(std::string_view s, std::string_view prefix) {
  return s.size() >= prefix.size() && iequals(s.substr(0, prefix.size()), prefix);
}

// Lower case; compared ignoring case.
constexpr std::string_view kReserved[] = {
    // Framing and connection management: ringcast's HTTP client owns these (RFC 9110 §7.6.1
    // hop-by-hop fields included), and a second Content-Length or Transfer-Encoding would make
    // the request ambiguous to the receiver (request smuggling).
    "host",
    "content-length",
    "content-type",
    "content-encoding",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "upgrade",
    "te",
    "trailer",
    "expect",
    "user-agent",
    // Signature profiles (net/signing.h): a receiver must be able to trust these.
    "webhook-id",  // SPEC R11.2
    "webhook-timestamp",
    "webhook-signature",
    "x-webhook-id",  // SPEC R11.1
    "x-webhook-timestamp",
    "x-webhook-signature",
    "smengo-delivery-id",  // SPEC R5.4
    // Set by the endpoint's idempotency_key option, to the webhook id.
    "idempotency-key",
};

bool value_byte_ok(unsigned char c) {
  // RFC 9110 §5.5 field-vchar / SP / HTAB / obs-text: no CTL but HTAB.
  return c == '\t' || (c >= 0x20 && c != 0x7f);
}

std::string_view trim(std::string_view v) {
  while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
  while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);
  return v;
}

}  // namespace

bool is_http_token(std::string_view s) {
  if (s.empty()) return false;
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    const bool alnum = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
    if (alnum) continue;
    switch (c) {
      case '!':
      case '#':
      case '$':
      case '%':
      case '&':
      case '\'':
      case '*':
      case '+':
      case '-':
      case '.':
      case '^':
      case '_':
      case '`':
      case '|':
      case '~':
        continue;
      default:
        return false;
    }
  }
  return true;
}

bool is_credential_header(std::string_view name) {
  std::string lower(name);
  for (char& c : lower) c = ascii_lower(c);
  if (lower == "authorization" || lower == "proxy-authorization" || lower == "cookie") return true;
  for (std::string_view part : {"key", "token", "secret", "auth", "password", "signature"}) {
    if (lower.find(part) != std::string::npos) return true;
  }
  return false;
}

bool is_reserved_header(std::string_view name) {
  for (std::string_view r : kReserved) {
    if (iequals(name, r)) return true;
  }
  return istarts_with(name, "proxy-");
}

std::optional<HeaderProblem> normalize_endpoint_headers(std::vector<EndpointHeader>& headers) {
  if (headers.size() > kMaxEndpointHeaders) {
    return HeaderProblem{kMaxEndpointHeaders, "too_many_headers", "at most 20 headers"};
  }
  size_t bytes = 0;
  for (size_t i = 0; i < headers.size(); ++i) {
    EndpointHeader& h = headers[i];
    if (!is_http_token(h.name)) {
      return HeaderProblem{i, "invalid_header",
                           "a header name is an RFC 9110 token (letters, digits, "
                           "!#$%&'*+-.^_`|~)"};
    }
    if (is_reserved_header(h.name)) {
      return HeaderProblem{i, "reserved_header", "ringcast sets this header itself"};
    }
    for (size_t j = 0; j < i; ++j) {
      if (iequals(headers[j].name, h.name)) {
        return HeaderProblem{i, "duplicate_header", "a header name appears twice (ignoring case)"};
      }
    }
    const std::string_view v = trim(h.value);
    if (v.size() != h.value.size()) h.value = std::string(v);
    for (char c : h.value) {
      if (!value_byte_ok(static_cast<unsigned char>(c))) {
        return HeaderProblem{i, "invalid_header",
                             "a header value has no control characters (CR, LF, NUL, ...) but "
                             "tab"};
      }
    }
    bytes += h.name.size() + h.value.size();
    if (bytes > kMaxEndpointHeaderBytes) {
      return HeaderProblem{i, "headers_too_large",
                           "at most 4096 bytes of header names and values in all"};
    }
  }
  return std::nullopt;
}

Result<void> check_endpoint_headers(std::vector<EndpointHeader>& headers) {
  auto p = normalize_endpoint_headers(headers);
  if (!p) return ok();
  return make_error(Errc::kInvalidArgument, p->message, "headers", p->reason);
}

void append_endpoint_headers(const Endpoint& e, std::string_view message_id, std::string& out) {
  if (e.idempotency_key) {
    out.append(kIdempotencyKeyHeader).append(": ").append(message_id).append("\r\n");
  }
  for (const EndpointHeader& h : e.headers) {
    out.append(h.name).append(": ").append(h.value).append("\r\n");
  }
}

}  // namespace ringcast
