// core/classify: the SPEC R6 table row by row, R12.1 (unknown vs retryable vs provably not
// received), R7 Retry-After on 429/5xx only, and R4.5 breaker counting.
#include "core/classify.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <string>

namespace ringcast {
namespace {

using K = ErrorCode::Kind;
const WallTime kNow = WallTime::from_ns(1'767'225'600LL * 1'000'000'000);  // 2026-01-01

TransportResult response(int status, std::string retry_after = "") {
  TransportResult r;
  r.connect_attempted = true;
  r.request_written = true;
  r.response_received = true;
  r.http_status = static_cast<uint16_t>(status);
  r.retry_after = std::move(retry_after);
  return r;
}

struct StatusCase {
  int status;
  Outcome outcome;
  const char* code;  // ErrorCode::str(), "" for none
  bool unavailability;
};

TEST(Classify, HttpStatusTable) {
  const StatusCase kCases[] = {
      // 2xx: success, body ignored.
      {200, Outcome::kSuccess, "", false},
      {201, Outcome::kSuccess, "", false},
      {202, Outcome::kSuccess, "", false},
      {204, Outcome::kSuccess, "", false},
      {299, Outcome::kSuccess, "", false},
      // 3xx: failure, retried, never followed.
      {300, Outcome::kRetryable, "redirect_not_allowed", false},
      {301, Outcome::kRetryable, "redirect_not_allowed", false},
      {302, Outcome::kRetryable, "redirect_not_allowed", false},
      {304, Outcome::kRetryable, "redirect_not_allowed", false},
      {307, Outcome::kRetryable, "redirect_not_allowed", false},
      {308, Outcome::kRetryable, "redirect_not_allowed", false},
      {399, Outcome::kRetryable, "redirect_not_allowed", false},
      // 410: terminal.
      {410, Outcome::kRejected, "gone", false},
      // 429: retried, not an unavailability (R4.5 lists network, timeout, 5xx).
      {429, Outcome::kRetryable, "http_429", false},
      // 5xx: retried, counts for the breaker; 502 and 504 may have acted (R12.1).
      {500, Outcome::kRetryable, "http_500", true},
      {501, Outcome::kRetryable, "http_501", true},
      {502, Outcome::kUnknown, "http_502", true},
      {503, Outcome::kRetryable, "http_503", true},
      {504, Outcome::kUnknown, "http_504", true},
      {599, Outcome::kRetryable, "http_599", true},
      // other 4xx: rejected here, the policy decides (smengo retries, xhub R3 / FAILED).
      {400, Outcome::kRejected, "http_400", false},
      {401, Outcome::kRejected, "http_401", false},
      {403, Outcome::kRejected, "http_403", false},
      {404, Outcome::kRejected, "http_404", false},
      {405, Outcome::kRejected, "http_405", false},
      {408, Outcome::kRejected, "http_408", false},
      {409, Outcome::kRejected, "http_409", false},
      {411, Outcome::kRejected, "http_411", false},
      {413, Outcome::kRejected, "http_413", false},
      {422, Outcome::kRejected, "http_422", false},
      {499, Outcome::kRejected, "http_499", false},
      // A final 1xx or a status outside 100..599: answered nonsense after reading it.
      {100, Outcome::kUnknown, "http_100", false},
      {101, Outcome::kUnknown, "http_101", false},
      {600, Outcome::kUnknown, "http_600", false},
      {0, Outcome::kUnknown, "http_0", false},
  };
  for (const auto& c : kCases) {
    SCOPED_TRACE(c.status);
    Classification k = classify(response(c.status), kNow);
    EXPECT_EQ(k.outcome, c.outcome) << outcome_name(k.outcome);
    EXPECT_EQ(k.code.str(), c.code);
    EXPECT_EQ(k.http_status, c.status);
    EXPECT_EQ(k.counts_as_unavailability, c.unavailability);
    EXPECT_FALSE(k.provably_not_received);  // a response means it was received
    EXPECT_FALSE(k.retry_after.has_value());
  }
}

TEST(Classify, HttpCodesUseTheTypedKinds) {
  EXPECT_EQ(classify(response(302), kNow).code, ErrorCode::of(K::kRedirectNotAllowed));
  EXPECT_EQ(classify(response(410), kNow).code, ErrorCode::of(K::kGone));
  EXPECT_EQ(classify(response(503), kNow).code, ErrorCode::http(503));
  EXPECT_EQ(classify(response(200), kNow).code, ErrorCode::none());
}

TEST(Classify, RetryAfterOnlyOn429And5xx) {
  struct RaCase {
    int status;
    const char* header;
    std::optional<Duration> expected;
  };
  const RaCase kCases[] = {
      {429, "120", seconds(120)},
      {503, "30", seconds(30)},
      {500, "0", seconds(0)},
      {502, "Thu, 01 Jan 2026 00:10:00 GMT", minutes(10)},
      {504, "7200", hours(1)},  // capped (R7.2)
      {429, "garbage", std::nullopt},
      {429, "-5", std::nullopt},
      {503, "", std::nullopt},
      // Not honoured outside 429/5xx.
      {301, "120", std::nullopt},
      {410, "120", std::nullopt},
      {404, "120", std::nullopt},
      {200, "120", std::nullopt},
  };
  for (const auto& c : kCases) {
    SCOPED_TRACE(std::to_string(c.status) + " Retry-After: " + c.header);
    Classification k = classify(response(c.status, c.header), kNow);
    EXPECT_EQ(k.retry_after, c.expected);
  }
}

TransportResult failure(ErrorCode code, bool connect_attempted, bool request_written) {
  TransportResult r;
  r.code = code;
  r.connect_attempted = connect_attempted;
  r.request_written = request_written;
  return r;
}

struct TransportCase {
  const char* name;
  TransportResult r;
  Outcome outcome;
  const char* code;
  bool provably_not_received;
  bool unavailability;
};

TEST(Classify, TransportFailureTable) {
  const ErrorCode kTimeout = ErrorCode::of(K::kTimeout);
  const TransportCase kCases[] = {
      // R12.1: after the whole request was written the receiver may have acted.
      {"timeout after write", failure(kTimeout, true, true), Outcome::kUnknown, "timeout", false,
       true},
      {"reset after write", failure(ErrorCode::network(ECONNRESET), true, true), Outcome::kUnknown,
       "network_ECONNRESET", false, true},
      {"EPIPE after write", failure(ErrorCode::network(EPIPE), true, true), Outcome::kUnknown,
       "network_EPIPE", false, true},
      {"TLS error after write", failure(ErrorCode::of(K::kTlsHandshake), true, true),
       Outcome::kUnknown, "network_tls_handshake", false, true},
      // Before the request was complete: retryable; not provably unseen when bytes may have
      // left (timeout or reset mid-write).
      {"timeout before write", failure(kTimeout, true, false), Outcome::kRetryable, "timeout",
       false, true},
      {"reset mid-write", failure(ErrorCode::network(ECONNRESET), true, false), Outcome::kRetryable,
       "network_ECONNRESET", false, true},
      // Refused before anything was sent: provably not received.
      {"refused", failure(ErrorCode::network(ECONNREFUSED), true, false), Outcome::kRetryable,
       "network_ECONNREFUSED", true, true},
      {"host unreachable", failure(ErrorCode::network(EHOSTUNREACH), true, false),
       Outcome::kRetryable, "network_EHOSTUNREACH", true, true},
      {"net unreachable", failure(ErrorCode::network(ENETUNREACH), true, false),
       Outcome::kRetryable, "network_ENETUNREACH", true, true},
      {"dns", failure(ErrorCode::of(K::kDnsFailed), false, false), Outcome::kRetryable,
       "dns_failed", true, true},
      {"tls cert", failure(ErrorCode::of(K::kTlsCert), true, false), Outcome::kRetryable,
       "network_tls_cert", true, true},
      {"tls handshake", failure(ErrorCode::of(K::kTlsHandshake), true, false), Outcome::kRetryable,
       "network_tls_handshake", true, true},
      {"no connect attempted", failure(ErrorCode::network(EMFILE), false, false),
       Outcome::kRetryable, "network_EMFILE", true, true},
      // Our own refusals: nothing is sent, the receiver is not unavailable.
      {"private address", failure(ErrorCode::of(K::kPrivateAddress), false, false),
       Outcome::kRetryable, "private_address", true, false},
      {"not_https", failure(ErrorCode::of(K::kNotHttps), false, false), Outcome::kRetryable,
       "not_https", true, false},
      {"port", failure(ErrorCode::of(K::kPortNotAllowed), false, false), Outcome::kRetryable,
       "port_not_allowed", true, false},
      {"userinfo", failure(ErrorCode::of(K::kUserinfoNotAllowed), false, false),
       Outcome::kRetryable, "userinfo_not_allowed", true, false},
      {"fragment", failure(ErrorCode::of(K::kFragmentNotAllowed), false, false),
       Outcome::kRetryable, "fragment_not_allowed", true, false},
      {"invalid", failure(ErrorCode::of(K::kInvalidUrl), false, false), Outcome::kRetryable,
       "invalid_url", true, false},
      {"too long", failure(ErrorCode::of(K::kUrlTooLong), false, false), Outcome::kRetryable,
       "url_too_long", true, false},
      {"too short", failure(ErrorCode::of(K::kUrlTooShort), false, false), Outcome::kRetryable,
       "url_too_short", true, false},
      // A transport that reports nothing is logged as a protocol error, never a success.
      {"no code, written", failure(ErrorCode::none(), true, true), Outcome::kUnknown,
       "network_EPROTO", false, true},
      {"no code, not written", failure(ErrorCode::none(), true, false), Outcome::kRetryable,
       "network_EPROTO", false, true},
  };
  for (const auto& c : kCases) {
    SCOPED_TRACE(c.name);
    Classification k = classify(c.r, kNow);
    EXPECT_EQ(k.outcome, c.outcome) << outcome_name(k.outcome);
    EXPECT_EQ(k.code.str(), c.code);
    if (!c.r.code.is_none()) {
      EXPECT_EQ(k.code, c.r.code);  // the transport's code passes through unchanged
    }
    EXPECT_EQ(k.provably_not_received, c.provably_not_received);
    EXPECT_EQ(k.counts_as_unavailability, c.unavailability);
    EXPECT_EQ(k.http_status, 0);
    EXPECT_FALSE(k.retry_after.has_value());
  }
}

TEST(Classify, AStatusLineWinsOverALaterTransportError) {
  // Headers arrived, then the body timed out: the receiver answered, so the status decides.
  TransportResult r = response(200);
  r.code = ErrorCode::of(K::kTimeout);
  EXPECT_EQ(classify(r, kNow).outcome, Outcome::kSuccess);
  r = response(503, "60");
  r.code = ErrorCode::network(ECONNRESET);
  Classification k = classify(r, kNow);
  EXPECT_EQ(k.outcome, Outcome::kRetryable);
  EXPECT_EQ(k.code, ErrorCode::http(503));
  EXPECT_EQ(k.retry_after, seconds(60));
}

TEST(Classify, PreSendCodes) {
  EXPECT_TRUE(is_pre_send_code(ErrorCode::of(K::kPrivateAddress)));
  EXPECT_TRUE(is_pre_send_code(ErrorCode::of(K::kDnsFailed)));
  EXPECT_TRUE(is_pre_send_code(ErrorCode::network(ECONNREFUSED)));
  EXPECT_FALSE(is_pre_send_code(ErrorCode::network(ECONNRESET)));
  EXPECT_FALSE(is_pre_send_code(ErrorCode::network(ETIMEDOUT)));  // connect or read: unknown
  EXPECT_FALSE(is_pre_send_code(ErrorCode::of(K::kTimeout)));
  EXPECT_FALSE(is_pre_send_code(ErrorCode::http(503)));
  EXPECT_FALSE(is_pre_send_code(ErrorCode::none()));
}

TEST(Classify, ConfigRefusalsAreTheUrlAndGuardCodesOnly) {
  for (K k : {K::kPrivateAddress, K::kNotHttps, K::kPortNotAllowed, K::kUserinfoNotAllowed,
              K::kFragmentNotAllowed, K::kInvalidUrl, K::kUrlTooLong, K::kUrlTooShort}) {
    EXPECT_TRUE(is_config_refusal(ErrorCode::of(k))) << static_cast<int>(k);
    EXPECT_TRUE(is_pre_send_code(ErrorCode::of(k))) << static_cast<int>(k);
  }
  // Decided before sending, but not by our configuration: another try may succeed.
  for (K k : {K::kDnsFailed, K::kTlsCert, K::kTlsHandshake, K::kTimeout}) {
    EXPECT_FALSE(is_config_refusal(ErrorCode::of(k))) << static_cast<int>(k);
  }
  EXPECT_FALSE(is_config_refusal(ErrorCode::http(503)));
  EXPECT_FALSE(is_config_refusal(ErrorCode::none()));
}

}  // namespace
}  // namespace ringcast
