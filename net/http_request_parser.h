// HTTP/1.1 request framing for the API server (RFC 9112), sans-I/O: llhttp plus the checks
// llhttp 8 leaves to its user, so that ringcast and any proxy in front of it cannot disagree
// on where a request ends (request smuggling). Invariant: a request handed to the Sink has
// an HTTP/1.x version, a target of visible ASCII, lower-case token header names, values
// without controls, no obs-fold, exactly one Host (HTTP/1.1), one framing (Content-Length or
// chunked, never both, no repeated Content-Length), no trailer fields merged into its headers,
// and a body within the limit the Sink gave its head. Anything else ends parsing with one
// error response (400, 413, 431, 501, 505), after which the connection takes no request.
#pragma once

#include <llhttp.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "net/http_server.h"

namespace ringcast::net {

struct RequestLimits {
  size_t max_header_bytes = 64 * 1024;  // request line + header (and trailer) fields → 431
  uint32_t max_headers = 100;           // header and trailer fields → 431
};

class RequestParser {
 public:
  struct RequestInfo {
    bool keep_alive = true;  // the request allows another one after it
    bool http10 = false;
  };

  // Where parsed requests go. Called from inside feed(), on its thread.
  class Sink {
   public:
    virtual void on_request_begin() {}  // the first byte of a request arrived
    // The head is complete and passed every check (no body yet): the largest body to accept.
    virtual size_t body_limit(const HttpRequest& head) = 0;
    // The head's declared body fits the limit; the body follows.
    virtual void on_head(const HttpRequest& head) { (void)head; }
    // A whole request; its body has kBodyPadding spare bytes of capacity. Returning false
    // pauses parsing right after it (feed() answers kPaused; resume() goes on).
    virtual bool on_request(HttpRequest&& request, const RequestInfo& info) = 0;

   protected:
    ~Sink() = default;
  };

  enum class Status : uint8_t {
    kNeedMore,  // every byte was consumed
    kPaused,    // on_request() returned false: `consumed` bytes were used
    kUpgrade,   // CONNECT / Upgrade: the request was handed on; nothing after it is parsed
    kFailed,    // error() is the last response; nothing more is parsed
  };
  struct Feed {
    Status status = Status::kNeedMore;
    size_t consumed = 0;
  };

  RequestParser(Sink& sink, const RequestLimits& limits);
  RequestParser(const RequestParser&) = delete;
  RequestParser& operator=(const RequestParser&) = delete;

  Feed feed(const char* data, size_t len);
  void resume();  // after kPaused; feed the bytes that were not consumed next
  // Between a request's first byte and its end (or a failure).
  bool in_message() const { return in_message_; }
  bool failed() const { return failed_; }
  // After kFailed: the response to send before closing (400, 413, 431, 501 or 505).
  const HttpResponse& error() const { return error_; }

 private:
  static const llhttp_settings_t& settings();
  static RequestParser* self(llhttp_t* p);

  int on_message_begin();
  int on_url(const char* at, size_t len);
  int on_header_field(const char* at, size_t len);
  int on_header_field_complete();
  int on_header_value(const char* at, size_t len);
  int on_header_value_complete();
  int on_headers_complete();
  int on_body(const char* at, size_t len);
  int on_message_complete();

  int count_head_bytes(size_t len);
  int fail(HttpResponse r);
  int bad(std::string_view message);  // 400
  int check_head();                   // the RFC 9112 rules llhttp does not enforce
  uint64_t offset_of(const char* at) const;

  Sink& sink_;
  RequestLimits limits_;
  llhttp_t parser_{};
  HttpRequest cur_;
  std::string field_;
  std::string value_;
  size_t head_bytes_ = 0;
  uint32_t fields_ = 0;    // header and trailer fields of the current request
  size_t name_bytes_ = 0;  // of the field name being read
  uint32_t hosts_ = 0;
  size_t body_limit_ = 0;
  bool in_message_ = false;
  bool headers_done_ = false;  // fields seen from now on are trailers
  bool failed_ = false;
  // Stream offsets (bytes ever consumed) so obs-fold is told from a value split across reads:
  // a value's next span continues it only when it starts where the last one ended.
  uint64_t stream_base_ = 0;  // offset of exec_begin_
  const char* exec_begin_ = nullptr;
  uint64_t value_end_ = 0;
  bool value_started_ = false;
  HttpResponse error_;
};

}  // namespace ringcast::net
