// What a JetStream pull consumer says and hears (docs/operations.md §6 "NATS JetStream"): the
// `$JS.API` subjects and request bodies, the acknowledgements a message's `$JS.ACK` reply subject
// takes, the metadata that subject carries, and the API's JSON answers. Pure.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/time.h"

namespace ringcast::nats {

// A delivered message's reply subject, "$JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.
// <consumer seq>.<timestamp ns>.<pending>" (and the 2.10+ form with a domain and an account hash
// in front, and a random token after).
struct AckMeta {
  std::string stream;
  std::string consumer;
  uint64_t delivered = 0;  // 1 on the first delivery; more on each redelivery
  uint64_t stream_seq = 0;
  uint64_t consumer_seq = 0;
  int64_t timestamp_ns = 0;
  uint64_t pending = 0;  // messages after this one not yet delivered to the consumer
};
std::optional<AckMeta> parse_ack_subject(std::string_view reply);

struct ConsumerConfig {
  std::string durable;
  std::string filter_subject;  // empty: every subject of the stream
  uint64_t max_ack_pending = 0;
  Duration ack_wait = seconds(30);
};

// "$JS.API.CONSUMER.DURABLE.CREATE.<stream>.<durable>" (2.9 and later; idempotent for the same
// config) and its body: ack_policy explicit, deliver_policy all, max_deliver -1.
std::string consumer_create_subject(std::string_view stream, std::string_view durable);
std::string consumer_create_body(std::string_view stream, const ConsumerConfig& c);
std::string consumer_info_subject(std::string_view stream, std::string_view durable);
// "$JS.API.CONSUMER.MSG.NEXT.<stream>.<durable>" and {"batch":N,"expires":ns}.
std::string pull_subject(std::string_view stream, std::string_view durable);
std::string pull_body(uint32_t batch, Duration expires);

// The bodies published to a message's $JS.ACK subject.
inline constexpr std::string_view kAck = "+ACK";
inline constexpr std::string_view kTerm = "+TERM";
inline constexpr std::string_view kProgress = "+WPI";
std::string nak_body(Duration delay);  // "-NAK {\"delay\":ns}"

// Status codes of a pull request's status messages (an HMSG with no body and no reply).
inline constexpr int kStatusIdleHeartbeat = 100;
inline constexpr int kStatusNoMessages = 404;
inline constexpr int kStatusRequestTimeout = 408;
inline constexpr int kStatusConflict = 409;  // "Consumer Deleted", "Exceeded MaxWaiting", ...
inline constexpr int kStatusNoResponders = 503;

// An answer of the JetStream API or a PubAck, as far as it was understood.
struct ApiReply {
  bool json = false;   // the body was a JSON object
  bool error = false;  // it had an "error"
  int code = 0;        // error.code (HTTP-like: 404, 400, 503, ...)
  int err_code = 0;    // error.err_code (10059 stream not found, 10014 consumer not found, ...)
  std::string description;
  // CONSUMER.INFO / CREATE
  int64_t num_pending = -1;
  int64_t num_ack_pending = -1;
  int64_t num_redelivered = -1;
  // PubAck
  std::string stream;
  uint64_t seq = 0;
  bool duplicate = false;
};
ApiReply parse_api_reply(std::string_view body);

// "$JS.API.STREAM.MSG.GET.<stream>" and {"seq":N}: a stored message read back (its headers and
// data come base64-encoded in the answer).
std::string msg_get_subject(std::string_view stream);
std::string msg_get_body(uint64_t seq);
struct StoredMsg {
  std::string subject;
  std::string headers;  // the raw header block ("" when it had none)
  std::string data;     // capacity >= size + kPayloadSlack
};
// The message of a MSG.GET answer; nullopt with `gone` set when the stream no longer has it
// (an error 404: deleted, or past its limits), nullopt alone for an answer not understood.
std::optional<StoredMsg> parse_stored_msg(std::string_view body, bool* gone);

inline constexpr int kErrStreamNotFound = 10059;
inline constexpr int kErrConsumerNotFound = 10014;

}  // namespace ringcast::nats
