#include "core/types.h"

#include "core/transport.h"

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
  }
  return "unknown";
}

}  // namespace ringcast
