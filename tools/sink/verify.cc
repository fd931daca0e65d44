#include "tools/sink/verify.h"

#include <openssl/crypto.h>
#include <openssl/digest.h>
#include <openssl/hmac.h>

#include <cstdlib>
#include <initializer_list>

namespace ringcast::sink {
namespace {

constexpr size_t kMacBytes = 32;

void hmac_sha256(const std::string& key, std::initializer_list<std::string_view> parts,
                 uint8_t out[kMacBytes]) {
  HMAC_CTX ctx;
  HMAC_CTX_init(&ctx);
  HMAC_Init_ex(&ctx, key.data(), key.size(), EVP_sha256(), nullptr);
  for (std::string_view p : parts) {
    HMAC_Update(&ctx, reinterpret_cast<const uint8_t*>(p.data()), p.size());
  }
  unsigned len = 0;
  HMAC_Final(&ctx, out, &len);
  HMAC_CTX_cleanup(&ctx);
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// A candidate signature in any encoding a sender may reasonably use: 64 hex digits or base64
// of 32 bytes, optionally prefixed with "sha256=" or "v1,".
bool decode_candidate(std::string_view s, uint8_t out[kMacBytes]) {
  if (s.size() > 7 && (s.substr(0, 7) == "sha256=" || s.substr(0, 7) == "SHA256=")) {
    s.remove_prefix(7);
  } else if (s.size() > 3 && s.substr(0, 3) == "v1,") {
    s.remove_prefix(3);
  }
  if (s.size() == 2 * kMacBytes) {
    bool all_hex = true;
    for (size_t i = 0; i < kMacBytes && all_hex; ++i) {
      int hi = hex_value(s[2 * i]), lo = hex_value(s[2 * i + 1]);
      if (hi < 0 || lo < 0) {
        all_hex = false;
      } else {
        out[i] = static_cast<uint8_t>(hi * 16 + lo);
      }
    }
    if (all_hex) return true;
  }
  std::string raw;
  if (!base64_decode(s, raw) || raw.size() != kMacBytes) return false;
  std::copy(raw.begin(), raw.end(), out);
  return true;
}

// Space-separated candidates; true if any equals `mac`.
bool any_candidate_matches(std::string_view header, const uint8_t mac[kMacBytes], bool v1_only) {
  while (!header.empty()) {
    size_t sp = header.find(' ');
    std::string_view tok = header.substr(0, sp);
    if (!tok.empty() && (!v1_only || tok.substr(0, 3) == "v1,")) {
      uint8_t cand[kMacBytes];
      if (decode_candidate(tok, cand) && CRYPTO_memcmp(cand, mac, kMacBytes) == 0) return true;
    }
    if (sp == std::string_view::npos) break;
    header.remove_prefix(sp + 1);
  }
  return false;
}

}  // namespace

bool split_smengo_id(std::string_view value, std::string_view* id, uint32_t* attempt) {
  size_t colon = value.rfind(':');
  if (colon == std::string_view::npos || colon == 0 || colon + 1 == value.size()) return false;
  std::string_view num = value.substr(colon + 1);
  if (num.size() > 9) return false;
  uint32_t a = 0;
  for (char c : num) {
    if (c < '0' || c > '9') return false;
    a = a * 10 + static_cast<uint32_t>(c - '0');
  }
  *id = value.substr(0, colon);
  *attempt = a;
  return true;
}

Verifier::Verifier(VerifyMode mode, std::vector<std::string> secrets, int64_t tolerance_s)
    : mode_(mode), secrets_(std::move(secrets)), tolerance_s_(tolerance_s) {}

bool Verifier::timestamp_ok(std::string_view ts, int64_t now) const {
  if (ts.empty() || ts.size() > 18) return false;
  int64_t v = 0;
  for (char c : ts) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  if (tolerance_s_ <= 0) return true;
  return std::llabs(now - v) <= tolerance_s_;
}

bool Verifier::standard(const Request& req, std::string_view body, int64_t now,
                        const char** reason) const {
  if (req.webhook_id.empty() || req.webhook_timestamp.empty() || req.webhook_signature.empty()) {
    *reason = "missing webhook-id/webhook-timestamp/webhook-signature";
    return false;
  }
  if (!timestamp_ok(req.webhook_timestamp, now)) {
    *reason = "bad or stale webhook-timestamp";
    return false;
  }
  for (const std::string& key : secrets_) {
    uint8_t mac[kMacBytes];
    hmac_sha256(key, {req.webhook_id, ".", req.webhook_timestamp, ".", body}, mac);
    if (any_candidate_matches(req.webhook_signature, mac, /*v1_only=*/true)) return true;
  }
  *reason = "webhook-signature mismatch";
  return false;
}

bool Verifier::xhub(const Request& req, std::string_view body, int64_t now,
                    const char** reason) const {
  if (req.x_webhook_timestamp.empty() || req.x_webhook_signature.empty()) {
    *reason = "missing X-Webhook-Timestamp/X-Webhook-Signature";
    return false;
  }
  if (!timestamp_ok(req.x_webhook_timestamp, now)) {
    *reason = "bad or stale X-Webhook-Timestamp";
    return false;
  }
  for (const std::string& key : secrets_) {
    uint8_t mac[kMacBytes];
    hmac_sha256(key, {req.x_webhook_timestamp, ".", body}, mac);  // SPEC R11.1
    if (any_candidate_matches(req.x_webhook_signature, mac, /*v1_only=*/false)) return true;
  }
  *reason = "X-Webhook-Signature mismatch";
  return false;
}

bool Verifier::verify(const Request& req, std::string_view body, int64_t now,
                      const char** reason) const {
  switch (mode_) {
    case VerifyMode::kNone:
      return true;
    case VerifyMode::kStandard:
      return standard(req, body, now, reason);
    case VerifyMode::kXhub:
      return xhub(req, body, now, reason);
    case VerifyMode::kSmengo: {
      std::string_view id;
      uint32_t attempt = 0;
      if (!split_smengo_id(req.smengo_delivery_id, &id, &attempt) || attempt == 0) {
        *reason = "missing or malformed Smengo-Delivery-Id";
        return false;
      }
      if (secrets_.empty()) return true;
      [[fallthrough]];
    }
    case VerifyMode::kAny:
      if (!req.webhook_signature.empty()) return standard(req, body, now, reason);
      if (!req.x_webhook_signature.empty()) return xhub(req, body, now, reason);
      *reason = "no signature header";
      return false;
  }
  return false;
}

}  // namespace ringcast::sink
