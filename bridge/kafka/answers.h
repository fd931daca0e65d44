// What the daemon's answers mean for the records the bridge sent (docs/operations.md §1 "Events",
// §6 "Kafka bridge"): each bulk result line, or a single route's answer, is done (202 accepted,
// 200 duplicate: SPEC R12.5), permanent (the record itself is refused: dead-lettered with the
// answer's code), or transient (the daemon could not take it now: sent again, never skipped).
// Invariant: only an answer that names a line's status can make that line done or permanent;
// anything unreadable, missing or unexpected is transient.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "bridge/kafka/http_client.h"

namespace ringcast::kafka_bridge {

enum class Outcome : uint8_t { kAccepted, kDuplicate, kPermanent, kTransient };

struct LineResult {
  Outcome outcome = Outcome::kTransient;
  int status = 0;
  std::string code;     // the answer's error code ("conflict", "unknown_tenant", ...), or ""
  std::string message;  // the answer's error message, or why the bridge holds it transient
};

// A line's status: 202 accepted, 200 duplicate; 400, 409, 413, 422 and 404 unknown_tenant the
// record's own fault; 429, 5xx, 401/403 (the bridge's credentials) and anything else transient.
Outcome outcome_for(int status, const std::string& code);

struct BulkVerdict {
  enum class Kind : uint8_t {
    kLines,     // `lines` holds one result per line sent
    kTooLarge,  // 413 for the whole request: send fewer lines at a time
    kTransient  // no usable answer: every line stays to be sent again
  };
  Kind kind = Kind::kTransient;
  std::vector<LineResult> lines;
  std::string reason;  // for the log (kTooLarge, kTransient)
};

// The answer of POST /v1/events/bulk that carried `lines` lines (no blank line among them).
BulkVerdict read_bulk_answer(const HttpAnswer& answer, size_t lines);
// The answer of POST /v1/tenants/{t}/events.
LineResult read_single_answer(const HttpAnswer& answer);

}  // namespace ringcast::kafka_bridge
