// The core's view of the wire: send one signed request, get one result. The transport never
// retries (SPEC R12.3) and keeps the transport result apart from the business outcome
// (R12.1): it reports what happened; core/classify turns that into an Outcome.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/types.h"

namespace ringcast {

struct SendRequest {
  DeliveryId delivery_id = 0;
  uint16_t attempt = 1;    // 1-based; visible to smengo receivers (R5.4)
  std::string message_id;  // stable across attempts of one delivery (R11.3)
  std::string url;
  SignatureProfile profile = SignatureProfile::kStandard;
  std::vector<std::string> secrets;  // every active secret signs (R11.2 rotation)
  // The event payload, byte-for-byte. Not a copy: the caller keeps these bytes alive until the
  // op completes (the engine's send slot holds the event).
  std::string_view body;
  // The endpoint's own lines ("Name: value\r\n" each: Idempotency-Key, its extra headers;
  // core/endpoint_headers.h), sent after ringcast's headers. Already checked: sent as is.
  std::string extra_headers;
  // A reconciliation status check (R12.11): GET `url` with no body (no Content-Type), signed
  // over the empty body like a delivery. False: the delivery's POST.
  bool status_check = false;
  uint64_t pool_key = 0;  // optional hint: endpoint id, for per-endpoint limits
};

// Why the transport gave an op back without sending it (ringcast's own back-pressure, never the
// receiver's failure: SPEC R2.3).
enum class DeferReason : uint8_t {
  kNone = 0,
  kPacing,       // the host's token bucket (transport.host_rate_per_second) had no token in time
  kConnections,  // the connection limits (per host, in all) had no room in time
  kQueueFull,    // the host's queue of waiting requests was full (the bulkhead, R12.6)
};
inline constexpr int kDeferReasons = 4;
const char* defer_reason_name(DeferReason r);

struct TransportResult {
  // Not sent at all: no byte left, no connection was attempted for this op, and the caller may
  // try again from `not_before` on. Such a result is not an attempt (SPEC R2.3): the scheduler
  // releases the lease without spending the attempt, recording anything, or feeding the
  // breaker. Every other field is unset when deferred.
  DeferReason deferred = DeferReason::kNone;
  WallTime not_before;
  bool response_received = false;  // a complete status line + headers were parsed
  bool request_written = false;    // every request byte reached the socket
  bool connect_attempted = false;  // a TCP connect was started (false: refused before sending)
  uint16_t http_status = 0;
  ErrorCode code;           // network/TLS/DNS/URL/guard failure; kNone when a response came
  std::string retry_after;  // raw Retry-After header value, if any
  std::string body_prefix;  // first kResponsePrefixBytes of the body
  Timings timings;
  bool reused_connection = false;
};

// A caller-owned, pinned operation (STYLE 4): its address identifies it; no copies.
class SendOp {
 public:
  SendOp() = default;
  SendOp(const SendOp&) = delete;
  SendOp& operator=(const SendOp&) = delete;
  virtual ~SendOp() = default;

  SendRequest request;
  TransportResult result;
  // Set by the transport when the attempt starts: when the request leaves its host queue for a
  // connection (time waiting for pacing or a connection is not the receiver's).
  WallTime started_at;

  // Runs on the loop thread once `result` is final. The op may be reused or freed inside.
  virtual void on_complete() = 0;
};

class Transport {
 public:
  virtual ~Transport() = default;
  // Starts one exchange. The op stays alive until on_complete(); completion never runs
  // inline inside send() (STYLE 5).
  virtual void send(SendOp* op) = 0;
};

}  // namespace ringcast
