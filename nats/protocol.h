// The NATS client protocol's wire format (docs/operations.md §6 "NATS JetStream"): an incremental
// parser of what a server sends (INFO, MSG, HMSG, PING, PONG, +OK, -ERR), the encoders of what a
// client sends (CONNECT, PUB, HPUB, SUB, UNSUB, PING, PONG), and the NATS/1.0 header block.
// Pure: no sockets, no clock. Invariants: the parser takes bytes however they are cut into reads
// and yields the same ops; a payload is delivered byte for byte (MSG: `data`; HMSG: the header
// block in `headers`, the rest in `data`); no op grows past its limits (a control line, a
// payload), and a violation is an error after which the parser yields nothing more (the
// connection is dropped).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/result.h"

namespace ringcast::nats {

// Bytes reserved past the end of each received payload, so that a JSON parser that wants padding
// (simdjson: 64 bytes) can read it in place.
inline constexpr size_t kPayloadSlack = 64;

struct ParserLimits {
  size_t max_control_line = 64u << 10;  // an INFO with many connect_urls is the longest
  size_t max_payload = 64u << 20;       // header + payload bytes of one MSG / HMSG
};

enum class OpKind : uint8_t { kInfo, kMsg, kPing, kPong, kOk, kErr };

// One message as the server delivered it (MSG or HMSG).
struct Msg {
  std::string subject;
  uint64_t sid = 0;
  std::string reply;    // empty: none
  std::string headers;  // the raw header block ("NATS/1.0 ...\r\n...\r\n\r\n"); empty for MSG
  std::string data;     // the payload, byte for byte (capacity >= size + kPayloadSlack)
};

struct Op {
  OpKind kind = OpKind::kPing;
  std::string text;  // INFO: its JSON; -ERR: the message without its quotes
  Msg msg;           // kMsg
};

// Receives each op the parser completes; false stops the parse (the receiver dropped the
// connection or closed it): feed() returns at once and the parser must be reset() before reuse.
class OpSink {
 public:
  virtual ~OpSink() = default;
  virtual bool on_op(Op& op) = 0;
};

class Parser {
 public:
  explicit Parser(ParserLimits limits = {}) : limits_(limits) {}

  // Parses all of `data`, handing every complete op to `sink`. An error names the violation
  // (reason "nats_protocol"); after one the parser stays failed until reset().
  Result<void> feed(const char* data, size_t n, OpSink& sink);
  void reset();
  bool failed() const { return failed_; }
  // Bytes of an op begun and not yet complete.
  size_t buffered() const { return line_.size() + (in_payload_ ? got_ : 0); }
  const ParserLimits& limits() const { return limits_; }

 private:
  enum class Step : uint8_t { kDone, kStop, kError };
  Step control_line(std::string_view line, OpSink& sink);
  Step payload(const char*& p, const char* end, OpSink& sink);
  Error fail(const char* message);

  ParserLimits limits_;
  std::string line_;  // a control line split across reads (no '\n' seen yet)
  bool in_payload_ = false;
  bool has_headers_ = false;
  size_t header_bytes_ = 0;
  size_t total_bytes_ = 0;  // header + payload, without the trailing CRLF
  size_t got_ = 0;          // of total_bytes_ + 2
  Op op_;
  bool failed_ = false;
  const char* error_ = nullptr;
};

// --- headers ------------------------------------------------------------------------------------

// A parsed header block: the status line's code ("NATS/1.0 408 Request Timeout": 408,
// "Request Timeout"; 0 and "" without one) and the fields in order (a repeated key repeats).
struct Headers {
  int status = 0;
  std::string description;
  std::vector<std::pair<std::string, std::string>> fields;
  // The first value of `key` (exact match), nullptr when absent.
  const std::string* find(std::string_view key) const;
};

// kInvalidArgument (reason nats_protocol) for a block that is not "NATS/1.0..." lines ending
// in an empty line.
Result<Headers> parse_headers(std::string_view block);

// The status of a header block without parsing its fields: 0 when it has none (or is empty).
int header_status(std::string_view block);

// A header block of these fields ("NATS/1.0\r\nk: v\r\n...\r\n"). Keys and values with CR or LF
// are not encodable: such a value has them replaced by spaces, such a key is skipped.
std::string encode_headers(const std::vector<std::pair<std::string, std::string>>& fields);

// --- what a client sends -----------------------------------------------------------------------

// A subject a client may publish to (`wildcards`: or subscribe to, with `*` and a final `>`):
// tokens of printable ASCII without spaces, none empty.
bool valid_subject(std::string_view s, bool wildcards = false);

struct ConnectFields {
  std::string name;
  std::string version;
  std::string token;  // auth_token
  std::string user;
  std::string pass;
  bool tls_required = false;
  std::string nkey{};  // NKEY auth: the user's public key, and the nonce's signature
  std::string sig{};
};
// "CONNECT {...}\r\n" with verbose:false, pedantic:false, headers:true, no_responders:true, and
// the credentials given (auth_token; user + pass; nkey + sig).
void encode_connect(std::string& out, const ConnectFields& f);
void encode_pub(std::string& out, std::string_view subject, std::string_view reply,
                std::string_view data);
void encode_hpub(std::string& out, std::string_view subject, std::string_view reply,
                 std::string_view headers, std::string_view data);
void encode_sub(std::string& out, std::string_view subject, std::string_view queue, uint64_t sid);
void encode_unsub(std::string& out, uint64_t sid);

// JSON string literal of `s` (quotes and escapes; bytes >= 0x80 pass as they are).
void append_json_string(std::string& out, std::string_view s);

// Error::reason of a protocol violation.
inline constexpr const char* kProtocol = "nats_protocol";

}  // namespace ringcast::nats
