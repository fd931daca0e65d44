// A small, strict HTTP/1.1 request parser for ringcast-sink: request line, headers (only the
// ones the sink acts on are kept), Content-Length or chunked bodies. Views point into the
// caller's buffer and stay valid while that buffer is unchanged.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace ringcast::sink {

struct Request {
  std::string_view method;
  std::string_view target;  // as sent: path plus query
  int minor_version = 1;
  bool keep_alive = true;
  bool chunked = false;
  bool expect_continue = false;
  size_t content_length = 0;
  size_t head_bytes = 0;  // request line + headers + the blank line

  // Signature and id headers (SPEC R11, R5.4). A repeated header is kept as its first value,
  // except webhook-signature whose values are joined with ' ' (all are candidates).
  std::string_view webhook_id, webhook_timestamp, webhook_signature;
  std::string_view x_webhook_id, x_webhook_timestamp, x_webhook_signature;
  std::string_view smengo_delivery_id;
  std::string signature_joined;  // used only when webhook-signature repeats
  // Every header line as received ("Name: value\r\n" each), for --headers-file.
  std::string_view header_lines;
};

enum class ParseResult { kIncomplete, kDone, kError };

// Parses the head in data[0, len). On kError, *error_status is the status to answer
// (400, 431, 501, 505).
ParseResult parse_request_head(const char* data, size_t len, size_t max_head_bytes, Request& req,
                               int* error_status);

// Chunked body in data[0, len) (starting right after the head). kDone: the whole body with its
// trailer is present; *consumed is its encoded size and `body` holds the decoded bytes (only
// filled when `decode` is true: the first pass just checks completeness).
ParseResult parse_chunked_body(const char* data, size_t len, size_t max_body_bytes, bool decode,
                               std::string& body, size_t* consumed);

}  // namespace ringcast::sink
