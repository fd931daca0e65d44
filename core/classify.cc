#include "core/classify.h"

#include <cerrno>

#include "core/retry_after.h"

namespace ringcast {
namespace {

using K = ErrorCode::Kind;

// errno values that only a connect() can produce: the request never left.
bool is_connect_phase_errno(int err) {
  switch (err) {
    case ECONNREFUSED:
    case ENETUNREACH:
    case EHOSTUNREACH:
    case ENETDOWN:
    case EHOSTDOWN:
    case EADDRNOTAVAIL:
    case EAFNOSUPPORT:
      return true;
    default:
      return false;
  }
}

Classification classify_response(const TransportResult& r, WallTime now) {
  Classification c;
  const int s = r.http_status;
  c.http_status = r.http_status;
  if (s >= 200 && s <= 299) {  // SPEC R6: 2xx success, body ignored.
    c.outcome = Outcome::kSuccess;
    return c;
  }
  if (s >= 300 && s <= 399) {  // SPEC R6: redirects are never followed.
    c.outcome = Outcome::kRetryable;
    c.code = ErrorCode::of(K::kRedirectNotAllowed);
    return c;
  }
  if (s == 410) {  // SPEC R6, R8.1: terminal, the endpoint is disabled.
    c.outcome = Outcome::kRejected;
    c.code = ErrorCode::of(K::kGone);
    return c;
  }
  c.code = ErrorCode::http(s);
  if (s == 429) {  // SPEC R6, R7: retried with Retry-After; not an unavailability (R4.5).
    c.outcome = Outcome::kRetryable;
    c.retry_after = parse_retry_after(r.retry_after, now);
    return c;
  }
  if (s >= 500 && s <= 599) {  // SPEC R6, R7, R4.5.
    // R12.1: 502 means a gateway lost the upstream's answer, 504 that the upstream timed out
    // mid-request: either way the receiver may have acted.
    c.outcome = (s == 502 || s == 504) ? Outcome::kUnknown : Outcome::kRetryable;
    c.retry_after = parse_retry_after(r.retry_after, now);
    c.counts_as_unavailability = true;
    return c;
  }
  if (s >= 400 && s <= 499) {  // SPEC R6: the policy decides (smengo retries, xhub R3).
    c.outcome = Outcome::kRejected;
    return c;
  }
  // A final 1xx or a status outside 100..599: the receiver read the request and answered
  // nonsense; it may have acted.
  c.outcome = Outcome::kUnknown;
  return c;
}

}  // namespace

bool is_config_refusal(ErrorCode code) {
  switch (code.kind) {
    case K::kPrivateAddress:
    case K::kNotHttps:
    case K::kPortNotAllowed:
    case K::kUserinfoNotAllowed:
    case K::kFragmentNotAllowed:
    case K::kInvalidUrl:
    case K::kUrlTooLong:
    case K::kUrlTooShort:
      return true;
    default:
      return false;
  }
}

bool is_pre_send_code(ErrorCode code) {
  if (is_config_refusal(code)) return true;
  switch (code.kind) {
    case K::kDnsFailed:
    case K::kTlsCert:
    case K::kTlsHandshake:  // the handshake precedes every request byte
      return true;
    case K::kNetwork:
      return is_connect_phase_errno(code.detail);
    default:
      return false;
  }
}

Classification classify(const TransportResult& r, WallTime now) {
  if (r.response_received) return classify_response(r, now);

  Classification c;
  // A transport that reports neither a response nor an error broke its contract; log it as a
  // protocol error rather than as success.
  c.code = r.code.is_none() ? ErrorCode::network(EPROTO) : r.code;
  if (r.request_written) {
    // SPEC R12.1: the whole request reached the socket, so the receiver may have acted.
    c.outcome = Outcome::kUnknown;
  } else {
    c.outcome = Outcome::kRetryable;
    c.provably_not_received = !r.connect_attempted || is_pre_send_code(c.code);
  }
  switch (c.code.kind) {
    case K::kTimeout:
    case K::kNetwork:
    case K::kTlsCert:
    case K::kTlsHandshake:
    case K::kDnsFailed:
      c.counts_as_unavailability = true;  // SPEC R4.5: network, timeout
      break;
    default:  // private_address, URL codes: our own refusal, the receiver is not down
      break;
  }
  return c;
}

}  // namespace ringcast
