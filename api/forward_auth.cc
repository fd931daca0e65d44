#include "api/forward_auth.h"

#include <openssl/mem.h>
#include <openssl/sha.h>

#include <charconv>
#include <utility>

#include "net/signing.h"

namespace ringcast::api {

namespace {

constexpr std::string_view kMacContext = "ringcast-forward-v1";
constexpr size_t kNonceHex = 32;  // 128 random bits
constexpr size_t kMacHex = 64;
constexpr size_t kMaxPrincipalBytes = 512;

bool is_lower_hex(std::string_view s) {
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

// A tenant as the REST adapter accepts it (input rules): printable, no space or separator.
bool plain_token(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s)
    if (static_cast<unsigned char>(c) <= 0x20 || static_cast<unsigned char>(c) >= 0x7f)
      return false;
  return true;
}

std::string body_digest_hex(std::string_view body) {
  uint8_t d[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const uint8_t*>(body.data()), body.size(), d);
  return net::hex_encode(std::string_view(reinterpret_cast<const char*>(d), sizeof d));
}

// "t=<ms>,n=<hex>,s=<hex>" → its three parts, in that order and nothing else.
bool split_signature(std::string_view v, std::string_view& t, std::string_view& n,
                     std::string_view& s) {
  std::string_view* outs[3] = {&t, &n, &s};
  constexpr std::string_view kNames[3] = {"t=", "n=", "s="};
  for (int i = 0; i < 3; ++i) {
    if (!v.starts_with(kNames[i])) return false;
    v.remove_prefix(2);
    const size_t comma = v.find(',');
    if ((comma == std::string_view::npos) != (i == 2)) return false;
    *outs[i] = v.substr(0, comma);
    if (outs[i]->empty()) return false;
    if (i < 2) v.remove_prefix(comma + 1);
  }
  return true;
}

}  // namespace

std::string encode_principal(const Principal& p) {
  std::string out = "v1 ";
  switch (p.kind) {
    case Principal::Kind::kAdmin:
      out += "admin";
      break;
    case Principal::Kind::kKey:
      out += "key";
      break;
    case Principal::Kind::kSession:
      out += "session";
      break;
  }
  out += p.read_only ? " ro " : " rw ";
  out += p.key_id.empty() ? std::string_view("-") : std::string_view(p.key_id);
  out += ' ';
  out += p.tenant.empty() ? std::string_view("-") : std::string_view(p.tenant);
  return out;
}

bool decode_principal(std::string_view text, Principal& out) {
  if (text.size() > kMaxPrincipalBytes || !text.starts_with("v1 ")) return false;
  text.remove_prefix(3);
  std::string_view parts[4];
  for (int i = 0; i < 4; ++i) {
    const size_t sp = text.find(' ');
    if ((sp == std::string_view::npos) != (i == 3)) return false;
    parts[i] = text.substr(0, sp);
    if (!plain_token(parts[i])) return false;
    if (i < 3) text.remove_prefix(sp + 1);
  }
  Principal p;
  if (parts[0] == "admin") {
    p.kind = Principal::Kind::kAdmin;
  } else if (parts[0] == "key") {
    p.kind = Principal::Kind::kKey;
  } else if (parts[0] == "session") {
    p.kind = Principal::Kind::kSession;
  } else {
    return false;
  }
  if (parts[1] == "ro") {
    p.read_only = true;
  } else if (parts[1] != "rw") {
    return false;
  }
  if (parts[2] != "-") {
    if (!is_lower_hex(parts[2])) return false;
    p.key_id.assign(parts[2]);
  }
  if (parts[3] != "-") p.tenant.assign(parts[3]);
  // The shapes a node can sign: the admin reaches no one tenant and has no key; a key names
  // itself and its tenant; a session names its tenant (and its link's key, when a key minted it).
  const bool admin = p.kind == Principal::Kind::kAdmin;
  if (admin != p.tenant.empty()) return false;
  if (admin && (!p.key_id.empty() || p.read_only)) return false;
  if (p.kind == Principal::Kind::kKey && p.key_id.empty()) return false;
  out = std::move(p);
  return true;
}

const char* forward_verdict_code(ForwardVerdict v) {
  switch (v) {
    case ForwardVerdict::kOk:
      return "ok";
    case ForwardVerdict::kUnsigned:
      return "forward_unsigned";
    case ForwardVerdict::kMalformed:
      return "forward_malformed";
    case ForwardVerdict::kBadSignature:
      return "forward_bad_signature";
    case ForwardVerdict::kStale:
      return "forward_stale";
    case ForwardVerdict::kReplayed:
      return "forward_replayed";
    case ForwardVerdict::kBusy:
      return "forward_busy";
  }
  return "forward_unknown";
}

ForwardAuth::ForwardAuth(std::string secret, Duration window, size_t max_remembered)
    // The MAC key is derived, so the same secret keys nothing else in another context.
    : key_([&] {
        const net::Sha256Digest d = net::hmac_sha256(secret, {kMacContext});
        return std::string(reinterpret_cast<const char*>(d.data()), d.size());
      }()),
      window_(window),
      max_remembered_(max_remembered) {}

std::string ForwardAuth::mac_hex(std::string_view origin, std::string_view method,
                                 std::string_view target, std::string_view body,
                                 std::string_view principal, std::string_view ts,
                                 std::string_view nonce) const {
  const std::string digest = body_digest_hex(body);
  const net::Sha256Digest mac =
      net::hmac_sha256(key_, {kMacContext, "\n", origin, "\n", method, "\n", target, "\n", digest,
                              "\n", principal, "\n", ts, "\n", nonce});
  return net::hex_encode(std::string_view(reinterpret_cast<const char*>(mac.data()), mac.size()));
}

SignedHeaders ForwardAuth::sign(const Principal& who, std::string_view origin,
                                std::string_view method, std::string_view target,
                                std::string_view body, WallTime now) const {
  return sign_with_nonce(who, origin, method, target, body, now, net::random_hex(kNonceHex / 2));
}

SignedHeaders ForwardAuth::sign_with_nonce(const Principal& who, std::string_view origin,
                                           std::string_view method, std::string_view target,
                                           std::string_view body, WallTime now,
                                           std::string_view nonce_hex) const {
  SignedHeaders h;
  h.principal = encode_principal(who);
  const std::string ts = std::to_string(now.ms());
  h.signature = "t=" + ts + ",n=" + std::string(nonce_hex) +
                ",s=" + mac_hex(origin, method, target, body, h.principal, ts, nonce_hex);
  return h;
}

ForwardVerdict ForwardAuth::verify(std::string_view origin, const HttpRequest& req, WallTime now,
                                   Principal& out) {
  const std::string* principal = req.header(kPrincipalHeader);
  const std::string* signature = req.header(kForwardSignatureHeader);
  if (principal == nullptr || signature == nullptr) return ForwardVerdict::kUnsigned;
  return verify_parts(origin, req.method, req.target, req.body, *principal, *signature, now, out);
}

ForwardVerdict ForwardAuth::verify_parts(std::string_view origin, std::string_view method,
                                         std::string_view target, std::string_view body,
                                         std::string_view principal, std::string_view signature,
                                         WallTime now, Principal& out) {
  std::string_view t, n, s;
  if (!split_signature(signature, t, n, s)) return ForwardVerdict::kMalformed;
  int64_t ts_ms = 0;
  auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), ts_ms);
  if (ec != std::errc() || end != t.data() + t.size() || t.size() > 19 || t.front() == '-')
    return ForwardVerdict::kMalformed;
  if (n.size() != kNonceHex || !is_lower_hex(n) || s.size() != kMacHex || !is_lower_hex(s))
    return ForwardVerdict::kMalformed;
  Principal who;
  if (!decode_principal(principal, who)) return ForwardVerdict::kMalformed;
  const std::string want = mac_hex(origin, method, target, body, principal, t, n);
  if (CRYPTO_memcmp(want.data(), s.data(), kMacHex) != 0) return ForwardVerdict::kBadSignature;
  // Only a good signature reaches the clock and the cache: a forger can neither fill the cache
  // nor learn which of its guesses was close.
  const int64_t now_ms = now.ms();
  const int64_t window_ms = to_ms(window_);
  if (ts_ms < now_ms - window_ms || ts_ms > now_ms + window_ms) return ForwardVerdict::kStale;
  std::lock_guard lk(mu_);
  // A nonce is kept while a call carrying it could still be fresh: 2 × window after it was
  // accepted covers a sender clock up to one window ahead.
  while (!order_.empty() && order_.front().first < now_ms - 2 * window_ms) {
    nonces_.erase(order_.front().second);
    order_.pop_front();
  }
  if (nonces_.count(std::string(n)) != 0) return ForwardVerdict::kReplayed;
  if (nonces_.size() >= max_remembered_) return ForwardVerdict::kBusy;
  nonces_.emplace(n);
  order_.emplace_back(now_ms, std::string(n));
  out = std::move(who);
  return ForwardVerdict::kOk;
}

size_t ForwardAuth::remembered() const {
  std::lock_guard lk(mu_);
  return nonces_.size();
}

}  // namespace ringcast::api
