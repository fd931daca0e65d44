// The domain's vocabulary (SPEC R1): events, endpoints, deliveries, attempts, and the compact
// error code every attempt carries (SPEC R6). Records here are what the store persists and the
// scheduler keeps in memory; `Delivery` is kept small on purpose: millions are pending at once.
#pragma once

#include <array>
#include <bitset>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/time.h"

namespace ringcast {

// A partition is xxh3(tenant) % kPartitions; fixed at creation (ARCHITECTURE.md).
inline constexpr uint32_t kPartitions = 256;
// A set of partitions (Scheduler::drop_partitions and friends: one pass for many).
using PartitionSet = std::bitset<kPartitions>;
using Partition = uint16_t;

// Ids that the engine assigns: (partition << 48) | per-partition sequence. The partition in
// the top bits makes every record of a partition one key range in the store.
using EventSeq = uint64_t;
using DeliveryId = uint64_t;
using EndpointId = uint64_t;
inline constexpr int kIdSequenceBits = 48;
inline constexpr uint64_t make_id(Partition p, uint64_t seq) {
  return (uint64_t{p} << kIdSequenceBits) | (seq & ((uint64_t{1} << kIdSequenceBits) - 1));
}
inline constexpr Partition id_partition(uint64_t id) {
  return static_cast<Partition>(id >> kIdSequenceBits);
}
inline constexpr uint64_t id_sequence(uint64_t id) {
  return id & ((uint64_t{1} << kIdSequenceBits) - 1);
}

uint64_t tenant_hash(std::string_view tenant);  // xxh3-64
inline Partition partition_of(std::string_view tenant) {
  return static_cast<Partition>(tenant_hash(tenant) % kPartitions);
}
uint64_t payload_hash(std::string_view payload);  // xxh3-64, for idempotent intake (R12.5)

// SPEC R6 outcome of one attempt, business view. kUnknown: the receiver may have acted
// (timeout or reset after the request was written, 502 — R12.1); retried like kRetryable.
enum class Outcome : uint8_t { kSuccess, kRejected, kRetryable, kUnknown };
const char* outcome_name(Outcome o);

// The log's error code (SPEC R6): a kind plus a detail (HTTP status or errno).
struct ErrorCode {
  enum class Kind : uint8_t {
    kNone = 0,
    kHttp,                // http_<status>; detail = status
    kRedirectNotAllowed,  // 3xx
    kGone,                // 410
    kTimeout,             // whole-exchange deadline
    kNetwork,             // network_<ERRNO>; detail = errno
    kTlsCert,             // network_tls_cert
    kTlsHandshake,        // network_tls_handshake
    kDnsFailed,
    kPrivateAddress,
    kNotHttps,
    kPortNotAllowed,
    kUserinfoNotAllowed,
    kFragmentNotAllowed,
    kInvalidUrl,
    kUrlTooLong,
    kUrlTooShort,
    kSubscriptionInactive,
    kEndpointDisabled,
    kLeaseExpired,
    kBreakerHoldExpired,  // held by the breaker for 30 days in total (R4.7)
    kDeadlineExceeded,    // a ladder's ceiling (R3.2, R3.3)
    kEndpointDeleted,
    kInternalError,  // the engine could not build the request (e.g. the event is unreadable)
    // History records that are not attempts (R12.10): an operator's resolution of an
    // UNKNOWN delivery, and a resend. Their Attempt::number is kHistoryRecordBase + k.
    kResolvedByOperator,
    kResent,
    // A reconciliation status check (R12.11): its Attempt::number is in [kCheckBase,
    // kHistoryRecordBase). The answer's meaning is in the record's outcome.
    kStatusCheck,
    kReconcileExpired,  // the reconciliation deadline passed without an answer: needs review
    // SPEC R13.3: a newer delivery of the same ordering key replaced it while it waited.
    kSuperseded,
  };
  Kind kind = Kind::kNone;
  int16_t detail = 0;

  static constexpr ErrorCode none() { return {}; }
  static constexpr ErrorCode http(int status) {
    return {Kind::kHttp, static_cast<int16_t>(status)};
  }
  static constexpr ErrorCode network(int err) {
    return {Kind::kNetwork, static_cast<int16_t>(err)};
  }
  static constexpr ErrorCode of(Kind k) { return {k, 0}; }
  bool is_none() const { return kind == Kind::kNone; }
  bool operator==(const ErrorCode&) const = default;
  // "http_503", "network_ECONNREFUSED", "private_address", ... (SPEC R6 spelling)
  std::string str() const;
};
static_assert(sizeof(ErrorCode) == 4);

enum class SignatureProfile : uint8_t { kStandard, kXhub, kSmengo };
const char* signature_profile_name(SignatureProfile p);

enum class EndpointState : uint8_t { kEnabled, kPaused, kDisabled };
const char* endpoint_state_name(EndpointState s);

// What follows an UNKNOWN outcome (SPEC R12.11). kRetry: resend on the ladder
// (receivers dedupe by webhook id, the Standard Webhooks contract). kReconcile: first ask the
// endpoint's status URL whether it has the webhook; resend only on "not received". kReview:
// never resend after an UNKNOWN: the delivery ends `unknown` for an operator.
enum class OnUnknown : uint8_t { kRetry, kReconcile, kReview };
const char* on_unknown_name(OnUnknown o);

// SPEC R13 (docs/operations.md "Ordered delivery"): what an endpoint keeps in order. kPerKey:
// the deliveries of one ordering key, one at a time, in acceptance order; kEndpoint: all of
// the endpoint's deliveries so.
enum class Ordering : uint8_t { kNone, kPerKey, kEndpoint };
const char* ordering_name(Ordering o);
// What a head delivery that ends failed, dead or unknown does to its key (SPEC R13.2): kBlock
// holds the key until that head is resent or resolved; kSkip lets the next one go.
enum class OnHeadFailure : uint8_t { kBlock, kSkip };
const char* on_head_failure_name(OnHeadFailure o);

// The hash an ordering key is known by in a delivery record and in the scheduler: 56 bits (what
// Delivery keeps), never 0 (no key) or 1 (kEndpointOrderKey). Two keys of one endpoint with the
// same hash would share one queue: stricter order, never a broken one.
inline constexpr uint64_t kEndpointOrderKey = 1;  // an endpoint with ordering = endpoint
uint64_t ordering_key_hash(std::string_view key);

// Delivery lifecycle. kInFlight doubles as the lease: persisted before the request goes on
// the wire; a delivery found kInFlight at recovery gets a `lease_expired` attempt (R6).
// kUnknown ("needs review", SPEC R12.10): its budget or a ceiling ended while its last
// attempt's outcome was UNKNOWN (R12.1) — the receiver may have acted, so it is not `failed`
// — until an operator resolves it (delivered or failed) or resends it.
// kSuperseded (SPEC R13.3): it waited behind its key's head and a newer delivery of the key
// replaced it (the endpoint's `supersede`); never one that had an attempt.
enum class DeliveryStatus : uint8_t {
  kPending,
  kInFlight,
  kDelivered,
  kFailed,
  kDead,
  kUnknown,
  kSuperseded
};
const char* delivery_status_name(DeliveryStatus s);
inline bool is_terminal(DeliveryStatus s) {
  return s == DeliveryStatus::kDelivered || s == DeliveryStatus::kFailed ||
         s == DeliveryStatus::kDead || s == DeliveryStatus::kUnknown ||
         s == DeliveryStatus::kSuperseded;
}

// Which ladder an attempt was spent on (R3.4: separate budgets).
enum class Ladder : uint8_t { kNone, kFast, kSlow };

// The webhook id receivers deduplicate by (`webhook-id`, `X-Webhook-Id`, SPEC R11.3): unique across
// tenants and across time (operations.md "Events"), assigned when an event is accepted and the same
// on every attempt of every delivery of it. "msg_" + 26 Crockford base32 characters of 128 bits: 48
// bits of Unix milliseconds (ids sort by acceptance time), then 80 random bits.
inline constexpr size_t kMessageIdChars = 30;
std::string make_message_id(WallTime accepted_at, uint64_t random_hi, uint64_t random_lo);
// A message id's 128 bits ({0, 0}: none). The idempotency record keeps them (16 bytes instead of
// the 30 characters) so a repeat of an event is answered with its message id (SPEC R12.5).
struct MessageIdBits {
  uint64_t hi = 0, lo = 0;
  bool empty() const { return (hi | lo) == 0; }
  bool operator==(const MessageIdBits&) const = default;
};
// The bits of "msg_" + 26 Crockford base32 digits; {0, 0} when `id` is not of that form.
MessageIdBits message_id_bits(std::string_view id);
// The id of `bits` ("" for empty bits); append_message_id writes it onto `out`.
std::string message_id_of(MessageIdBits bits);
void append_message_id(std::string& out, MessageIdBits bits);
// Writes the id into out[0, kMessageIdChars) and answers its length (0 for empty bits).
size_t format_message_id(MessageIdBits bits, char* out);
// For events stored before message ids existed: derived from the store's own sequence (unique
// within that store) so they keep one stable id.
std::string legacy_message_id(WallTime created_at, EventSeq seq);

// W3C trace context (docs/tracing.md): a trace id, a span id and the trace flags (bit 0:
// sampled). All zero: none. Kept in 25 bytes of the event record when a producer sent a
// `traceparent` (core/trace_context.h).
using TraceId = std::array<uint8_t, 16>;
using SpanId = std::array<uint8_t, 8>;
struct TraceContext {
  TraceId trace_id{};
  SpanId span_id{};
  uint8_t flags = 0;
  // W3C: an all-zero trace id or span id is invalid.
  bool valid() const {
    bool t = false, s = false;
    for (uint8_t b : trace_id) t = t || b != 0;
    for (uint8_t b : span_id) s = s || b != 0;
    return t && s;
  }
  bool sampled() const { return (flags & 1) != 0; }
  bool operator==(const TraceContext&) const = default;
};

struct Event {
  EventSeq seq = 0;
  std::string tenant;
  std::string id;          // the producer's idempotency key, unique per tenant (R12.5)
  std::string message_id;  // the webhook id (see make_message_id)
  std::string type;        // e.g. payment.status_changed
  std::string payload;     // raw JSON bytes, delivered byte-for-byte (R1)
  WallTime created_at;
  uint64_t payload_hash = 0;
  // SPEC R13.1: empty, or 1..256 bytes of printable ASCII (core/event_input.h). Endpoints with
  // ordering = per_key send the deliveries of one key one at a time, in acceptance order.
  std::string ordering_key;
  // The producer's trace (docs/tracing.md): its trace id, the id of this event's intake span and
  // the producer's flags, when the producer sent a valid `traceparent`; all zero otherwise (the
  // trace is then derived from message_id: core/trace_context.h event_trace). Persisted.
  TraceContext trace{};
};

struct Secret {
  std::string key;                        // raw bytes (Standard Webhooks: after "whsec_" base64)
  WallTime expires_at = WallTime::max();  // set on the old secret during rotation
};

// One extra request header of an endpoint (docs/operations.md "Endpoints"), sent as "name: value"
// after ringcast's own headers; the rules are in core/endpoint_headers.h.
struct EndpointHeader {
  std::string name;
  std::string value;
  bool operator==(const EndpointHeader&) const = default;
};

struct RateLimit {
  double per_second = 0;  // 0: unlimited
  uint32_t burst = 0;
};

struct Endpoint {
  EndpointId id = 0;
  std::string tenant;
  std::string url;
  std::vector<std::string> event_types;  // empty: all; "payment.*": prefix wildcard
  std::string policy = "smengo";         // a preset or a named policy from config
  SignatureProfile signature = SignatureProfile::kStandard;
  std::vector<Secret> secrets;  // newest first; all unexpired ones sign (R11.2)
  RateLimit rate_limit;
  uint32_t max_in_flight = 0;  // 0: the engine default
  // Extra request headers, in the order given (core/endpoint_headers.h: at most 20, 4 KiB).
  std::vector<EndpointHeader> headers;
  // Send `Idempotency-Key: <message id>` (the webhook id: the same on every attempt, R11.3).
  bool idempotency_key = false;
  EndpointState state = EndpointState::kEnabled;
  ErrorCode disabled_reason;
  OnUnknown on_unknown = OnUnknown::kRetry;
  // kReconcile: where to ask, "{webhook_id}" replaced by the delivery's webhook id; a GET
  // signed like a delivery (empty body). Validated like `url`.
  std::string status_url;
  // SPEC R13 (docs/operations.md "Ordered delivery").
  Ordering ordering = Ordering::kNone;
  OnHeadFailure on_head_failure = OnHeadFailure::kBlock;
  bool supersede = false;  // R13.3: after a backlog only a key's newest waiting one is sent
  // Send a W3C `traceparent: 00-<trace id>-<attempt span id>-<flags>` on every attempt
  // (docs/tracing.md "Propagation").
  bool send_traceparent = false;
  WallTime created_at;
  WallTime updated_at;
};

// Persisted circuit-breaker state of one tenant (R4). The sliding window itself is not
// persisted: after a restart it refills within five minutes.
struct BreakerSnapshot {
  enum class State : uint8_t { kClosed, kOpen, kHalfOpen };
  State state = State::kClosed;
  uint32_t failed_probes = 0;
  WallTime opened_at;
  WallTime reopen_at;  // when kOpen: the end of the current pause
};

struct Tenant {
  std::string name;
  bool subscription_active = true;
  BreakerSnapshot breaker;
  WallTime updated_at;
  // SPEC R8.4: who gets the e-mail when one of the tenant's endpoints is disabled; empty:
  // nobody. Checked by the API (core/input_rules.h valid_email).
  std::string owner_email;
  // SPEC R14 (docs/security.md "Owner e-mail"): an address the merchant set gets notices only
  // once it is confirmed (a signed link mailed to it); one the platform set is confirmed at
  // once. asked_at: when the last confirmation e-mail was queued (one per confirm interval).
  bool owner_email_confirmed = false;
  WallTime owner_email_asked_at;
};

// One event to one endpoint. Compact and trivially copyable: the scheduler keeps millions of
// these in memory next to their timer entries (10 M pending in < 1 GiB, measured by
// bench/core_timer_wheel.cc).
struct Delivery {
  DeliveryId id = 0;
  EventSeq event = 0;
  EndpointId endpoint = 0;
  WallTime created_at;
  WallTime next_attempt_at;  // due time while pending
  WallTime first_slow_at;    // first slow-ladder step (R3.2); zero = none yet
  Duration held{0};          // total time held by the breaker (R4.7)
  uint16_t attempts = 0;     // all attempts, the number the receiver sees (R5.4)
  uint8_t fast_attempts = 0;
  uint8_t slow_attempts = 0;
  uint16_t last_http_status = 0;
  ErrorCode last_code;
  DeliveryStatus status = DeliveryStatus::kPending;
  uint8_t flags = 0;
  // The sample this delivery left in its tenant's breaker window (core/breaker: R4.1 counts
  // deliveries, not attempts); 0 = none. In memory only: the window is not persisted either.
  uint32_t breaker_mark = 0;
  // How often a crash of ringcast left it in flight (SPEC R6 lease_expired, expire_lease()):
  // each such attempt is in its history but spent none of its budget. Saturates at 255.
  uint8_t lease_expiries = 0;
  // SPEC R13: ordering_key_hash() of its event's key (or kEndpointOrderKey), 0 when unordered;
  // 56 bits, in the bytes the fields above leave free (Delivery stays 80 bytes). Persisted.
  uint8_t order_key_bytes[7] = {};

  uint64_t order_key() const {
    uint64_t k = 0;
    for (int i = 6; i >= 0; --i) k = (k << 8) | order_key_bytes[i];
    return k;
  }
  void set_order_key(uint64_t k) {
    for (int i = 0; i < 7; ++i) order_key_bytes[i] = static_cast<uint8_t>(k >> (8 * i));
  }

  static constexpr uint8_t kFlagMoney = 1;  // money event (R3.5), decided at intake
  static constexpr uint8_t kFlagTest = 2;   // endpoint test event (R8.5, R9.3)
  // The pending (or in-flight) attempt is a slow-ladder step (R3.4: separate budgets); unset:
  // the fast ladder / the fixed schedule. Written by core/scheduler, read back at recovery.
  static constexpr uint8_t kFlagSlowLadder = 4;
  // It waits because the transport gave its send back unsent (ringcast's own back-pressure:
  // pacing, connection limits), not because of a receiver's answer. Cleared when leased again.
  static constexpr uint8_t kFlagDeferred = 8;
  // It waits because its endpoint answered Retry-After (SPEC R7): next_attempt_at is the end of
  // that hold, persisted so a restart keeps it. Cleared when leased again.
  static constexpr uint8_t kFlagRetryAfterHold = 16;
  // Its latest attempt's outcome was UNKNOWN (R12.1) and no later answer settled it: the API
  // shows `"outcome_pending": "unknown"` while it retries, and a budget or ceiling that ends
  // now ends it kUnknown, not kFailed (R12.10). Persisted; cleared by a definitive outcome.
  static constexpr uint8_t kFlagLastUnknown = 32;
  // SPEC R13.2: the first of its key's waiting deliveries while the key's head ended failed under
  // on_head_failure = block: the key stays held after a restart. Persisted; cleared when it is
  // released.
  static constexpr uint8_t kFlagKeyBlocked = 64;
  bool money() const { return flags & kFlagMoney; }
  bool test() const { return flags & kFlagTest; }
  bool deferred() const { return flags & kFlagDeferred; }
  bool last_unknown() const { return flags & kFlagLastUnknown; }
  Ladder ladder() const { return (flags & kFlagSlowLadder) ? Ladder::kSlow : Ladder::kFast; }
};
static_assert(sizeof(Delivery) <= 80);
inline constexpr uint64_t kOrderKeyMask = (uint64_t{1} << 56) - 1;

// Network timings of one attempt (0 when a phase did not happen, e.g. a reused connection).
struct Timings {
  Duration dns{0}, connect{0}, tls{0}, first_byte{0}, total{0};
};

inline constexpr size_t kResponsePrefixBytes = 512;  // R10.3

// Attempt numbers from here on are history records, not attempts (R12.10): an operator's
// resolution or a resend, numbered in the order they were made. They sort after every attempt
// (a delivery has fewer than 2^15 attempts: the ladders' budgets are uint8 each).
inline constexpr uint16_t kHistoryRecordBase = 0x8000;
inline bool is_history_record(uint16_t number) {
  return number >= kHistoryRecordBase;
}
// Reconciliation status checks (R12.11): number = kCheckBase + (attempt after which it was
// asked, mod 512) * 32 + min(check index, 31). They sort after the attempts, before the
// operator's records.
inline constexpr uint16_t kCheckBase = 0x4000;
inline bool is_check_record(uint16_t number) {
  return number >= kCheckBase && number < kHistoryRecordBase;
}
// SPEC R13.3: the record that says a delivery ended superseded, and by which delivery (its
// response_prefix: that delivery's id, decimal); code kSuperseded. Numbered below the status
// checks, after any attempt (at most 510, the ladders' budgets).
inline constexpr uint16_t kSupersededRecord = kCheckBase - 1;
inline uint16_t check_record_number(uint16_t after_attempt, uint32_t index) {
  return static_cast<uint16_t>(kCheckBase + (after_attempt % 512u) * 32u +
                               (index < 31u ? index : 31u));
}

struct Attempt {
  DeliveryId delivery = 0;
  uint16_t number = 0;  // 1-based, over all ladders
  Ladder ladder = Ladder::kNone;
  Outcome outcome = Outcome::kRetryable;
  ErrorCode code;
  uint16_t http_status = 0;
  bool request_written = false;  // the whole request reached the socket
  WallTime started_at;
  Duration duration{0};
  Timings timings;
  std::string response_prefix;  // first kResponsePrefixBytes of the body
};

// A lease found open at recovery (SPEC R6 lease_expired, R12.1): the process that wrote it
// died with the attempt in flight, so the receiver may or may not have the request. Returns
// the lease_expired attempt numbered `number` (after every attempt stored) and turns `d` back
// to pending, due at `now`, its latest outcome UNKNOWN. The lost attempt is given back to its
// ladder's budget: ringcast's own crash is no answer of the receiver, so it can neither end the
// delivery nor, through an exhausted budget, auto-disable the endpoint (R8.1) — a crash loop of
// the whole service would otherwise kill every queued delivery of a healthy receiver. What
// bounds a delivery that itself crashes the process is `lease_expiries` (the scheduler's
// max_lease_expiries). Every store's recovery calls this, in the write that records the attempt.
Attempt expire_lease(Delivery& d, uint16_t number, WallTime now);

// A tenant-scoped API key (SPEC R14.1). The key a client holds is "rck_<id>_<secret>"; the store
// keeps only the SHA-256 of the secret part, so a store dump reveals no usable key.
struct ApiKey {
  std::string id;           // 16 lower-case hex digits; public (shown as the prefix "rck_<id>")
  std::string tenant;       // the only tenant it reaches
  std::string secret_hash;  // SHA-256 of the secret part, 32 raw bytes
  std::string name;         // the admin's label, may be empty
  bool read_only = false;   // GET and HEAD only
  WallTime created_at;
  WallTime expires_at;  // zero: never
};

// Operator notification (R8.4): e.g. an endpoint was auto-disabled.
struct Notification {
  uint64_t seq = 0;  // (partition << 48) | sequence, like the other ids
  std::string tenant;
  EndpointId endpoint = 0;
  std::string kind;  // "endpoint_disabled"
  ErrorCode reason;
  WallTime at;
  std::string message;
  // The owner's e-mail (SPEC R8.4): what the e-mail needs, taken when the
  // notification is made, so a resend after a restart says what the first send would have.
  std::string owner_email{};      // the tenant's owner_email at the time (empty: no e-mail)
  std::string endpoint_url{};     // the endpoint's URL at the time
  DeliveryId trigger = 0;         // the delivery whose outcome disabled the endpoint
  uint16_t attempts = 0;          // its attempts
  uint16_t last_http_status = 0;  // its last HTTP status (0: none, e.g. a network error)
};

}  // namespace ringcast
