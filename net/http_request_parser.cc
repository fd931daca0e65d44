#include "net/http_request_parser.h"

#include <strings.h>

#include <cstring>

namespace ringcast::net {

namespace {

// RFC 9110 5.6.2 tchar.
bool is_tchar(unsigned char c) {
  if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return true;
  return std::strchr("!#$%&'*+-.^_`|~", c) != nullptr && c != 0;
}

std::string_view trim_ows(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

}  // namespace

const llhttp_settings_t& RequestParser::settings() {
  static const llhttp_settings_t kSettings = [] {
    llhttp_settings_t s;
    llhttp_settings_init(&s);
    s.on_message_begin = [](llhttp_t* p) { return self(p)->on_message_begin(); };
    s.on_url = [](llhttp_t* p, const char* at, size_t n) { return self(p)->on_url(at, n); };
    s.on_header_field = [](llhttp_t* p, const char* at, size_t n) {
      return self(p)->on_header_field(at, n);
    };
    s.on_header_field_complete = [](llhttp_t* p) { return self(p)->on_header_field_complete(); };
    s.on_header_value = [](llhttp_t* p, const char* at, size_t n) {
      return self(p)->on_header_value(at, n);
    };
    s.on_header_value_complete = [](llhttp_t* p) { return self(p)->on_header_value_complete(); };
    s.on_headers_complete = [](llhttp_t* p) { return self(p)->on_headers_complete(); };
    s.on_body = [](llhttp_t* p, const char* at, size_t n) { return self(p)->on_body(at, n); };
    s.on_message_complete = [](llhttp_t* p) { return self(p)->on_message_complete(); };
    return s;
  }();
  return kSettings;
}

RequestParser* RequestParser::self(llhttp_t* p) {
  return static_cast<RequestParser*>(p->data);
}

RequestParser::RequestParser(Sink& sink, const RequestLimits& limits)
    : sink_(sink), limits_(limits) {
  // No lenient flag is ever set: llhttp's strict mode refuses Content-Length with
  // Transfer-Encoding, a repeated Content-Length, chunked not last, bad chunk sizes.
  llhttp_init(&parser_, HTTP_REQUEST, &settings());
  parser_.data = this;
}

uint64_t RequestParser::offset_of(const char* at) const {
  return stream_base_ + static_cast<uint64_t>(at - exec_begin_);
}

int RequestParser::fail(HttpResponse r) {
  r.close = true;
  error_ = std::move(r);
  failed_ = true;
  in_message_ = false;
  return HPE_USER;
}

int RequestParser::bad(std::string_view message) {
  return fail(HttpResponse::error(400, "bad_request", message));
}

int RequestParser::count_head_bytes(size_t len) {
  head_bytes_ += len;
  if (head_bytes_ > limits_.max_header_bytes) {
    return fail(HttpResponse::error(
        431, "headers_too_large",
        "request line and headers exceed " + std::to_string(limits_.max_header_bytes) + " bytes"));
  }
  return HPE_OK;
}

int RequestParser::on_message_begin() {
  cur_ = HttpRequest();
  field_.clear();
  value_.clear();
  head_bytes_ = 0;
  fields_ = 0;
  name_bytes_ = 0;
  hosts_ = 0;
  body_limit_ = 0;
  headers_done_ = false;
  value_started_ = false;
  in_message_ = true;
  sink_.on_request_begin();
  return HPE_OK;
}

int RequestParser::on_url(const char* at, size_t len) {
  if (int rc = count_head_bytes(len); rc != HPE_OK) return rc;
  // RFC 9112 3.2: the request-target holds no whitespace; RFC 3986 allows only visible ASCII
  // (llhttp lets a tab and bytes >= 0x80 through).
  for (size_t i = 0; i < len; ++i) {
    const auto c = static_cast<unsigned char>(at[i]);
    if (c <= 0x20 || c >= 0x7f) return bad("invalid character in the request target");
  }
  cur_.target.append(at, len);
  return HPE_OK;
}

int RequestParser::on_header_field(const char* at, size_t len) {
  if (int rc = count_head_bytes(len); rc != HPE_OK) return rc;
  value_started_ = false;
  name_bytes_ += len;
  if (!headers_done_) field_.append(at, len);  // a trailer's name is checked, not kept
  for (size_t i = 0; i < len; ++i) {
    if (!is_tchar(static_cast<unsigned char>(at[i]))) {
      // RFC 9112 5.1: no whitespace is allowed between the field name and the colon; a
      // server MUST reject such a request with 400.
      return bad(at[i] == ' ' || at[i] == '\t'
                     ? "whitespace between a header field name and the colon (RFC 9112 5.1)"
                     : "invalid character in a header field name");
    }
  }
  return HPE_OK;
}

int RequestParser::on_header_field_complete() {
  if (++fields_ > limits_.max_headers) {
    return fail(
        HttpResponse::error(431, "headers_too_large",
                            "more than " + std::to_string(limits_.max_headers) + " header fields"));
  }
  if (name_bytes_ == 0) return bad("empty header field name");
  return HPE_OK;
}

int RequestParser::on_header_value(const char* at, size_t len) {
  if (int rc = count_head_bytes(len); rc != HPE_OK) return rc;
  const uint64_t start = offset_of(at);
  if (value_started_ && start != value_end_) {
    // A second piece of the same value that does not start where the last one ended: a line
    // break came between them. RFC 9112 5.2: obs-fold outside message/http is rejected (400).
    return bad("obsolete line folding in a header field (RFC 9112 5.2)");
  }
  value_started_ = true;
  value_end_ = start + len;
  for (size_t i = 0; i < len; ++i) {
    const auto c = static_cast<unsigned char>(at[i]);
    // RFC 9110 5.5: CR, LF and NUL are never part of a field value; nor are other controls.
    if ((c < 0x20 && c != '\t') || c == 0x7f) return bad("control character in a header value");
  }
  if (!headers_done_) value_.append(at, len);
  return HPE_OK;
}

int RequestParser::on_header_value_complete() {
  value_started_ = false;
  name_bytes_ = 0;
  if (headers_done_) {
    // A trailer field (chunked body): RFC 9110 6.5.1 forbids merging it into the header
    // section unless its definition allows that; none that ringcast reads does. Dropped.
    return HPE_OK;
  }
  for (char& c : field_) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (field_ == "host") hosts_++;
  cur_.headers.push_back(HttpHeader{std::move(field_), std::string(trim_ows(value_))});
  field_.clear();
  value_.clear();
  return HPE_OK;
}

int RequestParser::check_head() {
  const uint8_t major = llhttp_get_http_major(&parser_);
  const uint8_t minor = llhttp_get_http_minor(&parser_);
  if (major == 0) {
    // llhttp reads "GET /" (no version) as HTTP/0.9. RFC 9112 3: the request line ends with
    // HTTP-version; a request without one is malformed.
    return bad("request line without an HTTP version (RFC 9112 3)");
  }
  if (major != 1) {
    return fail(HttpResponse::error(505, "http_version_not_supported",
                                    "only HTTP/1.0 and HTTP/1.1 are served here"));
  }
  // RFC 9112 3.2: a server MUST respond 400 to an HTTP/1.1 request without a Host field or
  // with more than one.
  if (minor >= 1 && hosts_ != 1) {
    return bad(hosts_ == 0 ? "HTTP/1.1 request without a Host header (RFC 9112 3.2)"
                           : "more than one Host header (RFC 9112 3.2)");
  }
  if (minor == 0 && hosts_ > 1) return bad("more than one Host header (RFC 9112 3.2)");
  const std::string* te = cur_.header("transfer-encoding");
  if (te) {
    // RFC 9112 6.1: Transfer-Encoding in an HTTP/1.0 message means faulty framing.
    if (minor == 0) return bad("Transfer-Encoding in an HTTP/1.0 request (RFC 9112 6.1)");
    // RFC 9112 6.1: a transfer coding the server does not understand → 501. ringcast
    // decodes chunked only; "gzip, chunked" would be read as chunked but is not.
    std::string_view v = trim_ows(*te);
    if (v.size() != 7 || strncasecmp(v.data(), "chunked", 7) != 0) {
      return fail(HttpResponse::error(501, "not_implemented",
                                      "only Transfer-Encoding: chunked is understood"));
    }
  }
  return HPE_OK;
}

int RequestParser::on_headers_complete() {
  if (int rc = check_head(); rc != HPE_OK) return rc;
  headers_done_ = true;
  cur_.method = llhttp_method_name(static_cast<llhttp_method_t>(llhttp_get_method(&parser_)));
  body_limit_ = sink_.body_limit(cur_);
  const bool has_length = (parser_.flags & F_CONTENT_LENGTH) != 0;
  if (has_length && parser_.content_length > body_limit_) {
    return fail(HttpResponse::error(
        413, "body_too_large",
        "request body exceeds " + std::to_string(body_limit_) + " bytes for this route", "body"));
  }
  if (has_length) cur_.body.reserve(parser_.content_length + kBodyPadding);
  sink_.on_head(cur_);
  return HPE_OK;
}

int RequestParser::on_body(const char* at, size_t len) {
  if (cur_.body.size() + len > body_limit_) {
    return fail(HttpResponse::error(
        413, "body_too_large",
        "request body exceeds " + std::to_string(body_limit_) + " bytes for this route", "body"));
  }
  cur_.body.append(at, len);
  return HPE_OK;
}

int RequestParser::on_message_complete() {
  in_message_ = false;
  RequestInfo info;
  info.keep_alive = llhttp_should_keep_alive(&parser_) != 0;
  info.http10 = llhttp_get_http_major(&parser_) == 1 && llhttp_get_http_minor(&parser_) == 0;
  cur_.keep_alive = info.keep_alive;
  if (cur_.body.capacity() < cur_.body.size() + kBodyPadding) {
    cur_.body.reserve(cur_.body.size() + kBodyPadding);
  }
  HttpRequest done = std::move(cur_);
  cur_ = HttpRequest();
  return sink_.on_request(std::move(done), info) ? HPE_OK : HPE_PAUSED;
}

RequestParser::Feed RequestParser::feed(const char* data, size_t len) {
  if (failed_) return {Status::kFailed, 0};
  exec_begin_ = data;
  const llhttp_errno_t err = llhttp_execute(&parser_, data, len);
  Feed out;
  switch (err) {
    case HPE_OK:
      out = {Status::kNeedMore, len};
      break;
    case HPE_PAUSED:
    case HPE_PAUSED_UPGRADE: {
      const char* pos = llhttp_get_error_pos(&parser_);
      out.consumed = pos ? static_cast<size_t>(pos - data) : len;
      out.status = err == HPE_PAUSED ? Status::kPaused : Status::kUpgrade;
      break;
    }
    default: {
      const char* pos = llhttp_get_error_pos(&parser_);
      if (!failed_ && err == HPE_INVALID_HEADER_TOKEN && pos && pos < data + len &&
          (*pos == ' ' || *pos == '\t')) {
        // llhttp (strict mode) stops at the blank itself, which in a value would be fine: so
        // it is in a field name. Say what RFC 9112 5.1 says.
        bad("whitespace between a header field name and the colon (RFC 9112 5.1)");
      }
      if (!failed_) {
        std::string msg = std::string("malformed HTTP request: ") + llhttp_errno_name(err);
        if (const char* reason = llhttp_get_error_reason(&parser_)) {
          msg += " (";
          msg += reason;
          msg += ")";
        }
        bad(msg);
      }
      out.consumed = pos ? static_cast<size_t>(pos - data) : len;
      out.status = Status::kFailed;
      break;
    }
  }
  stream_base_ += out.consumed;
  return out;
}

void RequestParser::resume() {
  llhttp_resume(&parser_);
}

}  // namespace ringcast::net
