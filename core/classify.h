// Response classification (SPEC R6, R12.1): turns what the transport saw into the business
// outcome and the log's error code. Pure. Invariant: kUnknown only when the receiver may have
// acted; provably_not_received only when no request byte can have reached the receiver.
#pragma once

#include <cstdint>
#include <optional>

#include "core/time.h"
#include "core/transport.h"
#include "core/types.h"

namespace ringcast {

struct Classification {
  Outcome outcome = Outcome::kRetryable;
  ErrorCode code;
  uint16_t http_status = 0;
  std::optional<Duration> retry_after;    // parsed and capped (R7); only for 429 / 5xx
  bool provably_not_received = false;     // nothing was sent (refused, DNS, guard, URL, ...)
  bool counts_as_unavailability = false;  // breaker failure (R4.5): network, timeout, 5xx
};

// Rules (SPEC R6 table, R12.1):
//   2xx → kSuccess.  3xx → kRetryable redirect_not_allowed.  410 → kRejected gone.
//   429 → kRetryable http_429 (+Retry-After), not an unavailability (R4.5 lists 5xx only).
//   5xx → kRetryable http_<code> (+Retry-After), unavailability; 502 and 504 → kUnknown:
//     a gateway answered for an upstream that may already have acted (R12.1 names 502; 504
//     is the same situation: the upstream timed out mid-request).
//   other 1xx..5xx 4xx → kRejected http_<code> (the policy decides: smengo retries them).
//   No response: r.code passes through. timeout / network error after request_written →
//     kUnknown; before that → kRetryable. Refusals before any byte left (URL check,
//     private_address, DNS, connect refused, TLS, no connect attempted) →
//     provably_not_received. URL errors and private_address are kRetryable ("nothing is
//     sent", the seed logs them as a failed attempt and the ladder decides) and do not count
//     for the breaker (the receiver is not unavailable, our config refuses it).
Classification classify(const TransportResult& r, WallTime now);

// True for transport codes that are decided before any byte can reach the receiver.
bool is_pre_send_code(ErrorCode code);

// True for the SPEC R6 refusals our own configuration decides (URL form, address guard):
// nothing was sent, and sending again would be refused the same way.
bool is_config_refusal(ErrorCode code);

}  // namespace ringcast
