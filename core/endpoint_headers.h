// An endpoint's extra request headers and its Idempotency-Key option (docs/operations.md
// "Endpoints"): what may be configured, and how it is rendered onto every attempt. Pure.
// Invariant: a header set that passed normalize_endpoint_headers() renders into well-formed
// HTTP/1.1 header lines (RFC 9110 token names, no CR/LF/NUL/control bytes in values), never
// repeats or overrides a header ringcast itself sends (framing, signatures, the webhook id),
// and stays within kMaxEndpointHeaders headers and kMaxEndpointHeaderBytes bytes.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"
#include "core/types.h"

namespace ringcast {

inline constexpr size_t kMaxEndpointHeaders = 20;
inline constexpr size_t kMaxEndpointHeaderBytes = 4096;  // names + values, after trimming
inline constexpr std::string_view kIdempotencyKeyHeader = "Idempotency-Key";

// RFC 9110 §5.6.2 token: 1+ of ALPHA DIGIT ! # $ % & ' * + - . ^ _ ` | ~
bool is_http_token(std::string_view s);

// Names an endpoint may not set (ASCII case-insensitive): what ringcast's request framing
// owns (Host, Content-Length, Content-Type, Transfer-Encoding, Connection, Keep-Alive, Upgrade,
// TE, Trailer, Expect, Content-Encoding, User-Agent, every Proxy-*), the headers of every
// signature profile (SPEC R11.1, R11.2, R5.4: webhook-id/-timestamp/-signature,
// X-Webhook-Id/-Timestamp/-Signature, Smengo-Delivery-Id), and Idempotency-Key (the option's).
bool is_reserved_header(std::string_view name);

// A receiver credential (SPEC R14.5): Authorization, Proxy-Authorization, Cookie, and every name
// that contains (ASCII case-insensitively) key, token, secret, auth, password or signature. Its
// value is write-only: sent on every attempt, never returned by a read, to anyone.
bool is_credential_header(std::string_view name);

// Why a header set was refused. `index` is the header at fault (for kTooMany: the first one
// over the count limit; for kTooLarge: the one whose bytes crossed the limit), so the API can
// name it. `reason` is the API's error code, `message` static text.
struct HeaderProblem {
  size_t index = 0;
  const char* reason = "";
  const char* message = "";
};

// Trims each value's leading and trailing spaces and tabs (RFC 9110 §5.5), then checks the
// set: names are tokens, not reserved, unique ignoring case; values have no control bytes but
// HTAB (no CR, LF, NUL, DEL); at most kMaxEndpointHeaders headers and kMaxEndpointHeaderBytes
// bytes of names and values. Idempotent. The order of the headers is kept.
std::optional<HeaderProblem> normalize_endpoint_headers(std::vector<EndpointHeader>& headers);

// The same as a Result for the engine's own check (embedders bypass the API): the Error's
// field is "headers", its reason the problem's.
Result<void> check_endpoint_headers(std::vector<EndpointHeader>& headers);

// Appends what the endpoint adds to each request, "Name: value\r\n" per line:
// `Idempotency-Key: <message_id>` when the option is on, then its headers in order. Called once
// per attempt into a reused buffer (no allocation once the buffer has grown).
void append_endpoint_headers(const Endpoint& e, std::string_view message_id, std::string& out);

}  // namespace ringcast
