// HTTP/1.1 response reader over llhttp (SPEC R1 "Attempt", R7, R10.3): keeps what an attempt
// records (status, Retry-After, first 512 body bytes) and enforces the caps.
// Invariant: memory per parser is bounded by the caps whatever the peer sends; 1xx responses
// are skipped; the first final response ends parsing (no pipelining).
#pragma once

#include <llhttp.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace ringcast::net {

struct ResponseLimits {
  size_t header_bytes_max = 64 * 1024;  // status line + header names and values, per response
  uint32_t headers_max = 100;
  size_t body_prefix_bytes = 512;       // SPEC R10.3
  size_t body_drain_max = 1024 * 1024;  // more than this: stop reading, close the connection
};

class ResponseParser {
 public:
  enum class State : uint8_t {
    kNeedMore,  // feed more bytes (or call finish_eof() on EOF)
    kDone,      // a final response is complete (or the body cap was hit: see body_capped())
    kError,     // protocol error or header cap: error_errno() says which
  };

  explicit ResponseParser(const ResponseLimits& limits = {});
  ResponseParser(const ResponseParser&) = delete;
  ResponseParser& operator=(const ResponseParser&) = delete;

  void reset();  // before each response
  // Consumes bytes. After kDone, `consumed` < len means the peer sent bytes nobody asked for
  // (the connection must not be reused).
  State feed(const char* data, size_t len, size_t* consumed = nullptr);
  // The peer closed its side: completes a read-until-EOF body, else an error.
  State finish_eof();

  State state() const { return state_; }
  bool headers_complete() const { return headers_complete_; }  // of the final response
  int status() const { return status_; }
  const std::string& retry_after() const { return retry_after_; }
  const std::string& body_prefix() const { return body_prefix_; }
  uint64_t body_bytes() const { return body_bytes_; }
  bool body_capped() const { return body_capped_; }  // kDone because of body_drain_max
  bool keep_alive() const { return keep_alive_; }    // valid at kDone
  int error_errno() const { return error_errno_; }   // EPROTO or EMSGSIZE at kError
  uint32_t informational_skipped() const { return informational_; }

 private:
  static int on_message_begin(llhttp_t* p);
  static int on_status(llhttp_t* p, const char* at, size_t len);
  static int on_header_field(llhttp_t* p, const char* at, size_t len);
  static int on_header_field_complete(llhttp_t* p);
  static int on_header_value(llhttp_t* p, const char* at, size_t len);
  static int on_header_value_complete(llhttp_t* p);
  static int on_headers_complete(llhttp_t* p);
  static int on_body(llhttp_t* p, const char* at, size_t len);
  static int on_message_complete(llhttp_t* p);
  int count_header_bytes(size_t len);
  static const llhttp_settings_t& settings();

  ResponseLimits limits_;
  llhttp_t parser_{};
  State state_ = State::kNeedMore;
  bool headers_complete_ = false;
  bool in_retry_after_ = false;
  bool body_capped_ = false;
  bool keep_alive_ = false;
  int status_ = 0;
  int error_errno_ = 0;
  uint32_t headers_ = 0;
  uint32_t informational_ = 0;
  size_t header_bytes_ = 0;
  uint64_t body_bytes_ = 0;
  char name_[16];  // enough for "retry-after"; longer names never match
  size_t name_len_ = 0;
  std::string retry_after_;
  std::string body_prefix_;
};

}  // namespace ringcast::net
