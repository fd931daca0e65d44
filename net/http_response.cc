#include "net/http_response.h"

#include <cerrno>
#include <cstring>

namespace ringcast::net {

namespace {
ResponseParser* self(llhttp_t* p) {
  return static_cast<ResponseParser*>(p->data);
}
constexpr size_t kRetryAfterValueMax = 256;
constexpr char kRetryAfter[] = "retry-after";
constexpr size_t kRetryAfterLen = sizeof(kRetryAfter) - 1;
}  // namespace

const llhttp_settings_t& ResponseParser::settings() {
  static const llhttp_settings_t kSettings = [] {
    llhttp_settings_t s;
    llhttp_settings_init(&s);
    s.on_message_begin = &ResponseParser::on_message_begin;
    s.on_status = &ResponseParser::on_status;
    s.on_header_field = &ResponseParser::on_header_field;
    s.on_header_field_complete = &ResponseParser::on_header_field_complete;
    s.on_header_value = &ResponseParser::on_header_value;
    s.on_header_value_complete = &ResponseParser::on_header_value_complete;
    s.on_headers_complete = &ResponseParser::on_headers_complete;
    s.on_body = &ResponseParser::on_body;
    s.on_message_complete = &ResponseParser::on_message_complete;
    return s;
  }();
  return kSettings;
}

ResponseParser::ResponseParser(const ResponseLimits& limits) : limits_(limits) {
  reset();
}

void ResponseParser::reset() {
  llhttp_init(&parser_, HTTP_RESPONSE, &settings());
  parser_.data = this;
  state_ = State::kNeedMore;
  headers_complete_ = false;
  in_retry_after_ = false;
  body_capped_ = false;
  keep_alive_ = false;
  status_ = 0;
  error_errno_ = 0;
  headers_ = 0;
  informational_ = 0;
  header_bytes_ = 0;
  body_bytes_ = 0;
  name_len_ = 0;
  retry_after_.clear();
  body_prefix_.clear();
}

int ResponseParser::count_header_bytes(size_t len) {
  header_bytes_ += len;
  if (header_bytes_ > limits_.header_bytes_max) {
    error_errno_ = EMSGSIZE;
    return HPE_USER;
  }
  return HPE_OK;
}

int ResponseParser::on_message_begin(llhttp_t* p) {
  ResponseParser* s = self(p);
  // A new message: after a 1xx the final response gets fresh header caps.
  s->headers_ = 0;
  s->header_bytes_ = 0;
  s->name_len_ = 0;
  s->in_retry_after_ = false;
  s->retry_after_.clear();
  return HPE_OK;
}

int ResponseParser::on_status(llhttp_t* p, const char*, size_t len) {
  return self(p)->count_header_bytes(len);
}

int ResponseParser::on_header_field(llhttp_t* p, const char* at, size_t len) {
  ResponseParser* s = self(p);
  if (int rc = s->count_header_bytes(len); rc != HPE_OK) return rc;
  for (size_t i = 0; i < len; ++i, ++s->name_len_) {
    if (s->name_len_ < sizeof(s->name_)) {
      char c = at[i];
      s->name_[s->name_len_] = (c >= 'A' && c <= 'Z') ? static_cast<char>(c + 32) : c;
    }
  }
  return HPE_OK;
}

int ResponseParser::on_header_field_complete(llhttp_t* p) {
  ResponseParser* s = self(p);
  if (++s->headers_ > s->limits_.headers_max) {
    s->error_errno_ = EMSGSIZE;
    return HPE_USER;
  }
  // The first Retry-After wins; a repeated one is ignored.
  s->in_retry_after_ = s->name_len_ == kRetryAfterLen &&
                       std::memcmp(s->name_, kRetryAfter, kRetryAfterLen) == 0 &&
                       s->retry_after_.empty();
  return HPE_OK;
}

int ResponseParser::on_header_value(llhttp_t* p, const char* at, size_t len) {
  ResponseParser* s = self(p);
  if (int rc = s->count_header_bytes(len); rc != HPE_OK) return rc;
  if (s->in_retry_after_) {
    const size_t room = kRetryAfterValueMax - s->retry_after_.size();
    s->retry_after_.append(at, len < room ? len : room);
  }
  return HPE_OK;
}

int ResponseParser::on_header_value_complete(llhttp_t* p) {
  ResponseParser* s = self(p);
  s->name_len_ = 0;
  s->in_retry_after_ = false;
  return HPE_OK;
}

int ResponseParser::on_headers_complete(llhttp_t* p) {
  ResponseParser* s = self(p);
  const int status = llhttp_get_status_code(p);
  // RFC 9110 15: the first digit is the class; 000-099 have none (llhttp takes any three
  // digits). Read as a status, 0 would also pass for "no response" in the attempt record.
  if (status < 100) {
    s->error_errno_ = EPROTO;
    return -1;
  }
  if (status == 101) {  // we never ask for an upgrade
    s->error_errno_ = EPROTO;
    return -1;
  }
  if (status >= 100 && status < 200) {
    // 1xx: the final response follows. RFC 9110 15.2: a 1xx ends with its header section,
    // whatever Content-Length or Transfer-Encoding it names; llhttp knows that only for 100
    // and would read a 103's "body" out of the final response. 1 tells it: no body.
    s->informational_++;
    return 1;
  }
  s->status_ = status;
  s->headers_complete_ = true;
  return 0;
}

int ResponseParser::on_body(llhttp_t* p, const char* at, size_t len) {
  ResponseParser* s = self(p);
  s->body_bytes_ += len;
  if (s->body_prefix_.size() < s->limits_.body_prefix_bytes) {
    const size_t room = s->limits_.body_prefix_bytes - s->body_prefix_.size();
    s->body_prefix_.append(at, len < room ? len : room);
  }
  if (s->body_bytes_ > s->limits_.body_drain_max) {
    s->body_capped_ = true;
    return HPE_USER;
  }
  return HPE_OK;
}

int ResponseParser::on_message_complete(llhttp_t* p) {
  ResponseParser* s = self(p);
  if (!s->headers_complete_) return HPE_OK;  // the end of a 1xx: keep parsing
  s->keep_alive_ = llhttp_should_keep_alive(p) != 0;
  return HPE_PAUSED;  // stop at the end of the final response
}

ResponseParser::State ResponseParser::feed(const char* data, size_t len, size_t* consumed) {
  if (consumed) *consumed = 0;
  if (state_ != State::kNeedMore) return state_;
  const llhttp_errno_t err = llhttp_execute(&parser_, data, len);
  switch (err) {
    case HPE_OK:
      if (consumed) *consumed = len;
      return state_;
    case HPE_PAUSED: {
      const char* pos = llhttp_get_error_pos(&parser_);
      if (consumed) *consumed = pos ? static_cast<size_t>(pos - data) : len;
      state_ = State::kDone;
      return state_;
    }
    case HPE_USER:
      if (body_capped_) {
        keep_alive_ = false;
        state_ = State::kDone;
        return state_;
      }
      break;
    default:
      break;
  }
  if (error_errno_ == 0) error_errno_ = EPROTO;
  state_ = State::kError;
  return state_;
}

ResponseParser::State ResponseParser::finish_eof() {
  if (state_ != State::kNeedMore) return state_;
  if (headers_complete_) {
    // A read-until-EOF body ends here; a truncated body still leaves a received response.
    (void)llhttp_finish(&parser_);
    keep_alive_ = false;
    state_ = State::kDone;
    return state_;
  }
  error_errno_ = ECONNRESET;  // closed before a complete status line and headers
  state_ = State::kError;
  return state_;
}

}  // namespace ringcast::net
