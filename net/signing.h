// Webhook signatures (SPEC R11) with BoringSSL HMAC-SHA256: what the sender adds and what a
// receiver (ringcast-sink, tests) checks. Invariant: signer and verifier share these
// functions, so the bytes signed are defined in exactly one place.
//
// Profiles (SignatureProfile):
// - kStandard (Standard Webhooks / Svix, R11.2): webhook-id, webhook-timestamp (Unix seconds),
//   webhook-signature = "v1,<base64(HMAC(key, id + "." + ts + "." + body))>", one per active
//   secret, space-separated (rotation).
// - kXhub (seed 000, R11.1): X-Webhook-Id, X-Webhook-Timestamp (Unix seconds),
//   X-Webhook-Signature = lower-case hex HMAC(key, ts + "." + body). The seed names no
//   encoding; hex is what its receivers' "HMAC-SHA256 of the raw body" checks compare against
//   (GitHub style). During rotation one hex value per active secret, space-separated.
// - kSmengo (seed 001): Smengo-Delivery-Id: <id>:<attempt> (R5.4). The seed names no signature
//   header; its schedule is Svix's, so the Standard Webhooks headers are sent as well.
// Keys are raw bytes (a "whsec_<base64>" secret is decoded before it gets here).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/types.h"

namespace ringcast::net {

using Sha256Digest = std::array<uint8_t, 32>;

// HMAC-SHA256 over the concatenation of `parts` (no copy of the body).
Sha256Digest hmac_sha256(std::string_view key, std::initializer_list<std::string_view> parts);

std::string base64_encode(std::string_view bytes);
std::optional<std::string> base64_decode(std::string_view text);
std::string hex_encode(std::string_view bytes);
// `bytes` random bytes (BoringSSL's RAND_bytes) as lower-case hex: ids and secrets of tokens.
std::string random_hex(size_t bytes);

// "whsec_<base64>" → the decoded bytes; anything else → the text itself.
std::optional<std::string> decode_secret(std::string_view secret);

// One signature value for one key.
std::string standard_signature(std::string_view key, std::string_view id, std::string_view ts,
                               std::string_view body);  // "v1,<base64>"
std::string xhub_signature(std::string_view key, std::string_view ts,
                           std::string_view body);  // lower-case hex

struct SignInput {
  SignatureProfile profile = SignatureProfile::kStandard;
  std::string_view message_id;
  uint16_t attempt = 1;
  int64_t timestamp_s = 0;  // fresh per attempt (R11.3)
  std::string_view body;
  const std::vector<std::string>* secrets = nullptr;  // newest first; may be empty
};

// Appends the profile's header lines ("Name: value\r\n" each) to `out`. No signature header
// when there is no secret; the id (and Smengo-Delivery-Id) headers are always sent.
void append_signature_headers(const SignInput& in, std::string& out);

// Receiver side. `header` is the whole signature header value (space-separated candidates);
// true when any candidate matches any key (constant-time compare).
bool verify_standard(std::string_view header, const std::vector<std::string>& keys,
                     std::string_view id, std::string_view ts, std::string_view body);
bool verify_xhub(std::string_view header, const std::vector<std::string>& keys, std::string_view ts,
                 std::string_view body);

}  // namespace ringcast::net
