#include "tools/sink/http.h"

#include <cstring>

namespace ringcast::sink {
namespace {

inline char lower(char c) {
  return (c >= 'A' && c <= 'Z') ? static_cast<char>(c + 32) : c;
}

// `lit` is lower case.
bool ieq(std::string_view a, std::string_view lit) {
  if (a.size() != lit.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (lower(a[i]) != lit[i]) return false;
  }
  return true;
}

bool icontains_token(std::string_view value, std::string_view token) {
  // Comma-separated tokens, case-insensitive.
  while (!value.empty()) {
    size_t comma = value.find(',');
    std::string_view t = value.substr(0, comma);
    while (!t.empty() && (t.front() == ' ' || t.front() == '\t')) t.remove_prefix(1);
    while (!t.empty() && (t.back() == ' ' || t.back() == '\t')) t.remove_suffix(1);
    if (ieq(t, token)) return true;
    if (comma == std::string_view::npos) break;
    value.remove_prefix(comma + 1);
  }
  return false;
}

bool is_tchar(char c) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) return true;
  return std::strchr("!#$%&'*+-.^_`|~", c) != nullptr && c != '\0';
}

}  // namespace

ParseResult parse_request_head(const char* data, size_t len, size_t max_head_bytes, Request& req,
                               int* error_status) {
  const void* end_ptr = memmem(data, len, "\r\n\r\n", 4);
  if (end_ptr == nullptr) {
    if (len > max_head_bytes) {
      *error_status = 431;
      return ParseResult::kError;
    }
    return ParseResult::kIncomplete;
  }
  const size_t head_len = static_cast<const char*>(end_ptr) - data + 4;
  if (head_len > max_head_bytes) {
    *error_status = 431;
    return ParseResult::kError;
  }
  req = Request{};
  req.head_bytes = head_len;
  *error_status = 400;
  std::string_view head(data, head_len - 2);  // keep the last header's CRLF

  // Request line.
  size_t eol = head.find("\r\n");
  std::string_view line = head.substr(0, eol);
  size_t sp1 = line.find(' ');
  if (sp1 == std::string_view::npos || sp1 == 0) return ParseResult::kError;
  size_t sp2 = line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || sp2 == sp1 + 1) return ParseResult::kError;
  req.method = line.substr(0, sp1);
  for (char c : req.method) {
    if (!is_tchar(c)) return ParseResult::kError;
  }
  req.target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  std::string_view version = line.substr(sp2 + 1);
  if (version.size() != 8 || version.substr(0, 7) != "HTTP/1.") {
    *error_status = 505;
    return ParseResult::kError;
  }
  if (version[7] == '1') {
    req.minor_version = 1;
  } else if (version[7] == '0') {
    req.minor_version = 0;
  } else {
    *error_status = 505;
    return ParseResult::kError;
  }
  for (char c : req.target) {
    if (c <= ' ' || c == 0x7f) return ParseResult::kError;
  }
  bool keep_alive_token = false, close_token = false, has_cl = false, has_te = false;
  int signature_count = 0;
  if (eol + 2 <= head.size()) req.header_lines = head.substr(eol + 2);

  size_t pos = eol + 2;
  while (pos < head.size()) {
    size_t e = head.find("\r\n", pos);
    std::string_view h = head.substr(pos, e - pos);
    pos = e + 2;
    if (h.empty()) break;
    if (h.front() == ' ' || h.front() == '\t') return ParseResult::kError;  // obs-fold
    size_t colon = h.find(':');
    if (colon == std::string_view::npos || colon == 0) return ParseResult::kError;
    std::string_view name = h.substr(0, colon);
    for (char c : name) {
      if (!is_tchar(c)) return ParseResult::kError;
    }
    std::string_view value = h.substr(colon + 1);
    while (!value.empty() && (value.front() == ' ' || value.front() == '\t'))
      value.remove_prefix(1);
    while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) value.remove_suffix(1);
    for (char ch : value) {  // obs-text (bytes above 0x7f, e.g. UTF-8) is allowed: RFC 9110 5.5
      const auto c = static_cast<unsigned char>(ch);
      if ((c < ' ' && c != '\t') || c == 0x7f) return ParseResult::kError;
    }
    const char first = lower(name.front());
    switch (first) {
      case 'c':
        if (ieq(name, "content-length")) {
          if (value.empty() || value.size() > 15) return ParseResult::kError;
          size_t v = 0;
          for (char c : value) {
            if (c < '0' || c > '9') return ParseResult::kError;
            v = v * 10 + static_cast<size_t>(c - '0');
          }
          if (has_cl && v != req.content_length) return ParseResult::kError;
          has_cl = true;
          req.content_length = v;
        } else if (ieq(name, "connection")) {
          if (icontains_token(value, "close")) close_token = true;
          if (icontains_token(value, "keep-alive")) keep_alive_token = true;
        }
        break;
      case 't':
        if (ieq(name, "transfer-encoding")) {
          has_te = true;
          // Only "chunked" (possibly listed alone) is supported.
          if (!ieq(value, "chunked")) {
            *error_status = 501;
            return ParseResult::kError;
          }
          req.chunked = true;
        }
        break;
      case 'e':
        if (ieq(name, "expect") && ieq(value, "100-continue")) req.expect_continue = true;
        break;
      case 'w':
        if (ieq(name, "webhook-id")) {
          if (req.webhook_id.empty()) req.webhook_id = value;
        } else if (ieq(name, "webhook-timestamp")) {
          if (req.webhook_timestamp.empty()) req.webhook_timestamp = value;
        } else if (ieq(name, "webhook-signature")) {
          if (signature_count++ == 0) {
            req.webhook_signature = value;
          } else {
            if (signature_count == 2) req.signature_joined = std::string(req.webhook_signature);
            req.signature_joined += ' ';
            req.signature_joined += value;
          }
        }
        break;
      case 'x':
        if (ieq(name, "x-webhook-id")) {
          if (req.x_webhook_id.empty()) req.x_webhook_id = value;
        } else if (ieq(name, "x-webhook-timestamp")) {
          if (req.x_webhook_timestamp.empty()) req.x_webhook_timestamp = value;
        } else if (ieq(name, "x-webhook-signature")) {
          if (req.x_webhook_signature.empty()) req.x_webhook_signature = value;
        }
        break;
      case 's':
        if (ieq(name, "smengo-delivery-id")) {
          if (req.smengo_delivery_id.empty()) req.smengo_delivery_id = value;
        }
        break;
      default:
        break;
    }
  }
  if (signature_count > 1) req.webhook_signature = req.signature_joined;
  if (has_cl && has_te) return ParseResult::kError;  // request smuggling shape: refuse
  req.keep_alive = req.minor_version == 1 ? !close_token : (keep_alive_token && !close_token);
  return ParseResult::kDone;
}

ParseResult parse_chunked_body(const char* data, size_t len, size_t max_body_bytes, bool decode,
                               std::string& body, size_t* consumed) {
  size_t pos = 0;
  size_t total = 0;
  if (decode) body.clear();
  for (;;) {
    // chunk-size [; ext] CRLF
    const void* eol = memmem(data + pos, len - pos, "\r\n", 2);
    if (eol == nullptr) return len - pos > 1024 ? ParseResult::kError : ParseResult::kIncomplete;
    size_t line_end = static_cast<const char*>(eol) - data;
    size_t size = 0;
    size_t digits = 0;
    size_t i = pos;
    for (; i < line_end; ++i) {
      char c = lower(data[i]);
      int d;
      if (c >= '0' && c <= '9') {
        d = c - '0';
      } else if (c >= 'a' && c <= 'f') {
        d = c - 'a' + 10;
      } else {
        break;
      }
      if (++digits > 15) return ParseResult::kError;
      size = size * 16 + static_cast<size_t>(d);
    }
    if (digits == 0) return ParseResult::kError;
    if (i < line_end && data[i] != ';' && data[i] != ' ' && data[i] != '\t') {
      return ParseResult::kError;
    }
    pos = line_end + 2;
    if (size == 0) {
      // Trailer fields, then an empty line.
      for (;;) {
        const void* t = memmem(data + pos, len - pos, "\r\n", 2);
        if (t == nullptr) return len - pos > 8192 ? ParseResult::kError : ParseResult::kIncomplete;
        size_t t_end = static_cast<const char*>(t) - data;
        bool empty = t_end == pos;
        pos = t_end + 2;
        if (empty) {
          *consumed = pos;
          return ParseResult::kDone;
        }
      }
    }
    total += size;
    if (total > max_body_bytes) return ParseResult::kError;
    if (len - pos < size + 2) return ParseResult::kIncomplete;
    if (decode) body.append(data + pos, size);
    pos += size;
    if (data[pos] != '\r' || data[pos + 1] != '\n') return ParseResult::kError;
    pos += 2;
  }
}

}  // namespace ringcast::sink
