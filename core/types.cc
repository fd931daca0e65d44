#include "core/types.h"

#include "core/transport.h"

#include <algorithm>
#include <cstring>
#include <string>

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace ringcast {

uint64_t tenant_hash(std::string_view tenant) {
  return XXH3_64bits(tenant.data(), tenant.size());
}
uint64_t payload_hash(std::string_view payload) {
  return XXH3_64bits(payload.data(), payload.size());
}

namespace {
// 128 bits as 26 Crockford base32 digits, most significant first (the first digit holds 3 bits).
void write_base32_128(char* buf, uint64_t hi, uint64_t lo) {
  static constexpr char kDigits[] = "0123456789ABCDEFGHJKMNPQRSTVWXYZ";
  for (int i = 25; i >= 0; --i) {
    buf[i] = kDigits[lo & 31];
    lo = (lo >> 5) | (hi << 59);
    hi >>= 5;
  }
}
}  // namespace

std::string make_message_id(WallTime accepted_at, uint64_t random_hi, uint64_t random_lo) {
  const uint64_t ms = static_cast<uint64_t>(std::max<int64_t>(0, accepted_at.ms()));
  return message_id_of({(ms << 16) | (random_hi & 0xffff), random_lo});
}

size_t format_message_id(MessageIdBits bits, char* out) {
  if (bits.empty()) return 0;
  std::memcpy(out, "msg_", 4);
  write_base32_128(out + 4, bits.hi, bits.lo);
  return kMessageIdChars;
}

void append_message_id(std::string& out, MessageIdBits bits) {
  char buf[kMessageIdChars];
  out.append(buf, format_message_id(bits, buf));
}

std::string message_id_of(MessageIdBits bits) {
  std::string out;
  out.reserve(kMessageIdChars);
  append_message_id(out, bits);
  return out;
}

MessageIdBits message_id_bits(std::string_view id) {
  if (id.size() != kMessageIdChars || id.substr(0, 4) != "msg_") return {};
  uint64_t hi = 0, lo = 0;
  for (size_t i = 4; i < id.size(); ++i) {
    const char c = id[i];
    int v = -1;
    if (c >= '0' && c <= '9') {
      v = c - '0';
    } else if (c >= 'A' && c <= 'Z' && c != 'I' && c != 'L' && c != 'O' && c != 'U') {
      // Crockford's alphabet skips I, L, O and U.
      v = 10 + (c - 'A') - (c > 'I') - (c > 'L') - (c > 'O') - (c > 'U');
    } else {
      return {};
    }
    if (i == 4 && v > 7) return {};  // the first digit holds 3 bits
    hi = (hi << 5) | (lo >> 59);
    lo = (lo << 5) | static_cast<uint64_t>(v);
  }
  return {hi, lo};
}

std::string legacy_message_id(WallTime created_at, EventSeq seq) {
  return make_message_id(created_at, 0, seq);
}

Attempt expire_lease(Delivery& d, uint16_t number, WallTime now) {
  Attempt a;
  a.delivery = d.id;
  a.number = number;
  a.ladder = Ladder::kNone;
  a.outcome = Outcome::kUnknown;  // the receiver may have acted (R12.1)
  a.code = ErrorCode::of(ErrorCode::Kind::kLeaseExpired);
  a.started_at = now;
  uint8_t& spent = d.ladder() == Ladder::kSlow ? d.slow_attempts : d.fast_attempts;
  if (spent > 0) --spent;
  if (d.lease_expiries < 255) ++d.lease_expiries;
  d.attempts = number;
  d.status = DeliveryStatus::kPending;
  d.next_attempt_at = now;
  d.last_code = a.code;
  d.last_http_status = 0;
  d.flags |= Delivery::kFlagLastUnknown;
  return a;
}

const char* outcome_name(Outcome o) {
  switch (o) {
    case Outcome::kSuccess:
      return "success";
    case Outcome::kRejected:
      return "rejected";
    case Outcome::kRetryable:
      return "retryable";
    case Outcome::kUnknown:
      return "unknown";
  }
  return "?";
}

const char* defer_reason_name(DeferReason r) {
  switch (r) {
    case DeferReason::kNone:
      return "none";
    case DeferReason::kPacing:
      return "pacing";
    case DeferReason::kConnections:
      return "connections";
    case DeferReason::kQueueFull:
      return "queue_full";
  }
  return "?";
}

const char* signature_profile_name(SignatureProfile p) {
  switch (p) {
    case SignatureProfile::kStandard:
      return "standard";
    case SignatureProfile::kXhub:
      return "xhub";
    case SignatureProfile::kSmengo:
      return "smengo";
  }
  return "?";
}

const char* endpoint_state_name(EndpointState s) {
  switch (s) {
    case EndpointState::kEnabled:
      return "enabled";
    case EndpointState::kPaused:
      return "paused";
    case EndpointState::kDisabled:
      return "disabled";
  }
  return "?";
}

const char* on_unknown_name(OnUnknown o) {
  switch (o) {
    case OnUnknown::kRetry:
      return "retry";
    case OnUnknown::kReconcile:
      return "reconcile";
    case OnUnknown::kReview:
      return "review";
  }
  return "?";
}

const char* ordering_name(Ordering o) {
  switch (o) {
    case Ordering::kNone:
      return "none";
    case Ordering::kPerKey:
      return "per_key";
    case Ordering::kEndpoint:
      return "endpoint";
  }
  return "?";
}

const char* on_head_failure_name(OnHeadFailure o) {
  return o == OnHeadFailure::kSkip ? "skip" : "block";
}

uint64_t ordering_key_hash(std::string_view key) {
  const uint64_t h = XXH3_64bits_withSeed(key.data(), key.size(), 0x6f72646572ULL) & kOrderKeyMask;
  return h <= kEndpointOrderKey ? h + 2 : h;
}

const char* delivery_status_name(DeliveryStatus s) {
  switch (s) {
    case DeliveryStatus::kPending:
      return "pending";
    case DeliveryStatus::kInFlight:
      return "in_flight";
    case DeliveryStatus::kDelivered:
      return "delivered";
    case DeliveryStatus::kFailed:
      return "failed";
    case DeliveryStatus::kDead:
      return "dead";
    case DeliveryStatus::kUnknown:
      return "unknown";
    case DeliveryStatus::kSuperseded:
      return "superseded";
  }
  return "?";
}

std::string ErrorCode::str() const {
  using K = Kind;
  switch (kind) {
    case K::kNone:
      return "";
    case K::kHttp:
      return "http_" + std::to_string(detail);
    case K::kRedirectNotAllowed:
      return "redirect_not_allowed";
    case K::kGone:
      return "gone";
    case K::kTimeout:
      return "timeout";
    case K::kNetwork: {
      // strerrorname_np is a table lookup (glibc >= 2.32), no syscall.
      const char* name = ::strerrorname_np(detail);
      std::string out = "network_";
      if (name) {
        out += name;
      } else {
        out += 'E';
        out += std::to_string(detail);
      }
      return out;
    }
    case K::kTlsCert:
      return "network_tls_cert";
    case K::kTlsHandshake:
      return "network_tls_handshake";
    case K::kDnsFailed:
      return "dns_failed";
    case K::kPrivateAddress:
      return "private_address";
    case K::kNotHttps:
      return "not_https";
    case K::kPortNotAllowed:
      return "port_not_allowed";
    case K::kUserinfoNotAllowed:
      return "userinfo_not_allowed";
    case K::kFragmentNotAllowed:
      return "fragment_not_allowed";
    case K::kInvalidUrl:
      return "invalid_url";
    case K::kUrlTooLong:
      return "url_too_long";
    case K::kUrlTooShort:
      return "url_too_short";
    case K::kSubscriptionInactive:
      return "subscription_inactive";
    case K::kEndpointDisabled:
      return "endpoint_disabled";
    case K::kLeaseExpired:
      return "lease_expired";
    case K::kBreakerHoldExpired:
      return "breaker_hold_expired";
    case K::kDeadlineExceeded:
      return "deadline_exceeded";
    case K::kEndpointDeleted:
      return "endpoint_deleted";
    case K::kInternalError:
      return "internal_error";
    case K::kResolvedByOperator:
      return "resolved_by_operator";
    case K::kResent:
      return "resent";
    case K::kStatusCheck:
      return "status_check";
    case K::kReconcileExpired:
      return "reconcile_expired";
    case K::kSuperseded:
      return "superseded";
  }
  return "unknown";
}

}  // namespace ringcast
