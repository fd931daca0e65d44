// Redis replies as owned trees, and the RESP2 codec around Debian's hiredis 0.14 (docs/redis.md):
// commands are formatted here (encode_command); hiredis is used only to parse the byte
// stream (redisReaderCreateWithFunctions/Feed/GetReply); the io_uring loop owns the socket.
// Invariants: a Reply owns its whole tree (no hiredis object outlives a parse); an error reply
// keeps the server's message verbatim ("MOVED 3999 127.0.0.1:6381"); the reader yields only
// complete replies, never a truncated value, and refuses input beyond its limits with an error
// after which the stream is unusable (the connection must be dropped).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"

struct redisReader;

namespace ringcast::redis {

class Reply {
 public:
  enum class Type : uint8_t { kNil, kInteger, kStatus, kString, kError, kArray };

  Reply() = default;  // nil
  static Reply nil() { return Reply(); }
  static Reply integer(int64_t v);
  static Reply status(std::string s);
  static Reply string(std::string s);
  static Reply error(std::string message);
  static Reply array(std::vector<Reply> elements);

  Type type() const { return type_; }
  bool is_nil() const { return type_ == Type::kNil; }
  bool is_integer() const { return type_ == Type::kInteger; }
  bool is_status() const { return type_ == Type::kStatus; }
  bool is_string() const { return type_ == Type::kString; }
  bool is_error() const { return type_ == Type::kError; }
  bool is_array() const { return type_ == Type::kArray; }

  int64_t integer_value() const { return integer_; }
  // The text of a bulk string, a status ("OK") or an error (the server's whole message).
  const std::string& str() const { return str_; }
  const std::vector<Reply>& elements() const { return elements_; }
  size_t size() const { return elements_.size(); }
  const Reply& operator[](size_t i) const { return elements_[i]; }
  // For a caller that owns the reply and keeps its parts: moves the text out (the reply's
  // text is empty afterwards), and the elements, mutable.
  std::string take_str() { return std::move(str_); }
  std::vector<Reply>& mutable_elements() { return elements_; }

  // Bulk strings of at least kSlackFrom bytes are allocated with kStringSlack spare bytes
  // past their end, so a consumer can parse them in place (simdjson reads up to 64 bytes past
  // a document's end and copies any string that lacks that room).
  static constexpr size_t kSlackFrom = 128;
  static constexpr size_t kStringSlack = 64;

  // For error replies: the first word of the message ("MOVED", "ASK", "NOSCRIPT", "ERR",
  // "WRONGTYPE", "TRYAGAIN", "CLUSTERDOWN"); empty for other types.
  std::string_view error_code() const;
  bool error_is(std::string_view code) const { return is_error() && error_code() == code; }

  // A compact, readable rendering for tests and logs: nil, (integer) 5, +OK, "bulk",
  // -ERR message, [a, b].
  std::string debug_string() const;

  friend bool operator==(const Reply& a, const Reply& b);

 private:
  friend struct ReaderAccess;
  Type type_ = Type::kNil;
  int64_t integer_ = 0;
  std::string str_;
  std::vector<Reply> elements_;
};

// Bounds on what one reply may make the reader hold (STYLE 6).
struct ReaderLimits {
  // Unparsed bytes held while a reply is incomplete (a bulk string of this size still fits:
  // Redis' own proto-max-bulk-len is 512 MiB, ringcast does not need that).
  size_t max_buffered_bytes = 64u << 20;
  // Elements of one array header; guards against "*2000000000\r\n" sizing a vector up front.
  uint32_t max_array_elements = 1u << 20;
};

// An incremental RESP2 parser: feed() bytes as they arrive, take complete replies with next().
class ReplyReader {
 public:
  explicit ReplyReader(const ReaderLimits& limits = {});
  ~ReplyReader();
  ReplyReader(const ReplyReader&) = delete;
  ReplyReader& operator=(const ReplyReader&) = delete;

  // kLimitExceeded when more than max_buffered_bytes would wait unparsed.
  Result<void> feed(const char* data, size_t len);
  // The next complete reply; nullopt when more bytes are needed; an error (kCorruption for a
  // protocol error, kLimitExceeded for a limit) after which only reset() helps.
  Result<std::optional<Reply>> next();
  // Forgets everything buffered (a new connection starts from a clean stream).
  void reset();
  size_t buffered_bytes() const;
  // hiredis' description of the last protocol error (for logs; "" when none).
  const char* last_error_text() const;

 private:
  void create();
  redisReader* r_ = nullptr;
  ReaderLimits limits_;
  struct Context;
  Context* ctx_ = nullptr;
};

// Appends the RESP encoding of `args` (one command: a multi-bulk array) to `out`.
// kInvalidArgument for an empty command.
Result<void> encode_command(std::span<const std::string_view> args, std::string* out);

}  // namespace ringcast::redis
