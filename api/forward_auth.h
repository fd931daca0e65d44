// Cluster mode's inter-node trust (SPEC R14, docs/security.md "Between nodes"): a node that
// forwards a tenant call to the partition's owner sends the principal it authenticated, signed
// under `cluster.secret`, and no credential of the caller's or of the platform's. Invariants:
//   - the signature (HMAC-SHA256) covers origin node, method, target, the body's SHA-256, the
//     principal, a timestamp and a nonce, so no part of a signed call can be changed or moved;
//   - a signed call is accepted once: its timestamp within `window` of this node's clock and
//     its nonce not seen in the last 2 × window (the replay cache, bounded by `max_remembered`;
//     a full cache refuses rather than forgets);
//   - what crosses the network is never reusable: a captured call is stale after `window` and
//     refused as a replay before that.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_set>

#include "api/http_names.h"
#include "api/principal.h"
#include "core/time.h"

namespace ringcast::api {

// Request headers of a forwarded call, lower-case as HttpRequest::header() wants them.
inline constexpr std::string_view kPrincipalHeader = "x-ringcast-principal";
inline constexpr std::string_view kForwardSignatureHeader = "x-ringcast-signature";

// The shortest cluster.secret (and server.api_token) accepted (docs/security.md "Secrets").
inline constexpr size_t kMinSecretBytes = 32;

// "v1 <admin|key|session> <rw|ro> <key id or -> <tenant or ->": the principal as signed.
std::string encode_principal(const Principal& p);
// The principal of a header value; false when it is not exactly that form.
bool decode_principal(std::string_view text, Principal& out);

enum class ForwardVerdict : uint8_t {
  kOk,
  kUnsigned,      // no principal or no signature header
  kMalformed,     // a header is not of its form
  kBadSignature,  // the MAC does not match (wrong secret, or a part changed)
  kStale,         // the timestamp is outside the window
  kReplayed,      // this nonce was accepted before
  kBusy,          // the replay cache is full of live nonces
};
const char* forward_verdict_code(ForwardVerdict v);

struct SignedHeaders {
  std::string principal;  // the X-Ringcast-Principal value
  std::string signature;  // the X-Ringcast-Signature value: "t=<ms>,n=<hex>,s=<hex>"
};

class ForwardAuth {
 public:
  explicit ForwardAuth(std::string secret, Duration window = seconds(30),
                       size_t max_remembered = size_t{1} << 20);
  ForwardAuth(const ForwardAuth&) = delete;
  ForwardAuth& operator=(const ForwardAuth&) = delete;

  // The headers for a call forwarded by `origin` (the X-Ringcast-Forwarded value). Any thread.
  SignedHeaders sign(const Principal& who, std::string_view origin, std::string_view method,
                     std::string_view target, std::string_view body, WallTime now) const;
  // `nonce_hex` given: for tests that need two signatures alike.
  SignedHeaders sign_with_nonce(const Principal& who, std::string_view origin,
                                std::string_view method, std::string_view target,
                                std::string_view body, WallTime now,
                                std::string_view nonce_hex) const;

  // Checks a received forwarded call and, when it is good, remembers its nonce and fills
  // `out`. `origin` is the X-Ringcast-Forwarded value. Any thread.
  ForwardVerdict verify(std::string_view origin, const HttpRequest& req, WallTime now,
                        Principal& out);
  // The same on the header values alone (the fuzz target's entry).
  ForwardVerdict verify_parts(std::string_view origin, std::string_view method,
                              std::string_view target, std::string_view body,
                              std::string_view principal, std::string_view signature, WallTime now,
                              Principal& out);

  size_t remembered() const;
  Duration window() const { return window_; }

 private:
  std::string mac_hex(std::string_view origin, std::string_view method, std::string_view target,
                      std::string_view body, std::string_view principal, std::string_view ts,
                      std::string_view nonce) const;

  const std::string key_;
  const Duration window_;
  const size_t max_remembered_;
  mutable std::mutex mu_;
  std::unordered_set<std::string> nonces_;
  std::deque<std::pair<int64_t, std::string>> order_;  // (accepted at ms, nonce), oldest first
};

}  // namespace ringcast::api
