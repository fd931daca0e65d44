#include "net/signing.h"

#include <openssl/base64.h>
#include <openssl/crypto.h>
#include <openssl/mem.h>
#include <openssl/rand.h>
#include <openssl/sha.h>

#include <charconv>
#include <cstring>

namespace ringcast::net {

// HMAC-SHA256 (RFC 2104) on stack SHA-256 contexts: no allocation per signature (the EVP
// HMAC_CTX path allocates its digest state on every init).
Sha256Digest hmac_sha256(std::string_view key, std::initializer_list<std::string_view> parts) {
  constexpr size_t kBlock = SHA256_CBLOCK;
  uint8_t k[kBlock] = {};
  if (key.size() > kBlock) {
    SHA256(reinterpret_cast<const uint8_t*>(key.data()), key.size(), k);
  } else {
    std::memcpy(k, key.data(), key.size());
  }
  uint8_t pad[kBlock];
  for (size_t i = 0; i < kBlock; ++i) pad[i] = k[i] ^ 0x36;
  SHA256_CTX ctx;
  SHA256_Init(&ctx);
  SHA256_Update(&ctx, pad, kBlock);
  for (std::string_view p : parts) SHA256_Update(&ctx, p.data(), p.size());
  uint8_t inner[SHA256_DIGEST_LENGTH];
  SHA256_Final(inner, &ctx);
  for (size_t i = 0; i < kBlock; ++i) pad[i] = k[i] ^ 0x5c;
  SHA256_Init(&ctx);
  SHA256_Update(&ctx, pad, kBlock);
  SHA256_Update(&ctx, inner, sizeof(inner));
  Sha256Digest out{};
  SHA256_Final(out.data(), &ctx);
  OPENSSL_cleanse(k, sizeof(k));
  OPENSSL_cleanse(pad, sizeof(pad));
  return out;
}

std::string base64_encode(std::string_view bytes) {
  size_t len = 0;
  EVP_EncodedLength(&len, bytes.size());
  std::string out(len, '\0');
  size_t n = EVP_EncodeBlock(reinterpret_cast<uint8_t*>(out.data()),
                             reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  out.resize(n);
  return out;
}

std::optional<std::string> base64_decode(std::string_view text) {
  size_t max = 0;
  if (!EVP_DecodedLength(&max, text.size())) return std::nullopt;
  std::string out(max, '\0');
  size_t n = 0;
  if (!EVP_DecodeBase64(reinterpret_cast<uint8_t*>(out.data()), &n, max,
                        reinterpret_cast<const uint8_t*>(text.data()), text.size())) {
    return std::nullopt;
  }
  out.resize(n);
  return out;
}

std::string hex_encode(std::string_view bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out(bytes.size() * 2, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) {
    const auto b = static_cast<uint8_t>(bytes[i]);
    out[2 * i] = kHex[b >> 4];
    out[2 * i + 1] = kHex[b & 15];
  }
  return out;
}

std::string random_hex(size_t bytes) {
  std::string raw(bytes, '\0');
  RAND_bytes(reinterpret_cast<uint8_t*>(raw.data()), raw.size());
  return hex_encode(raw);
}

std::optional<std::string> decode_secret(std::string_view secret) {
  constexpr std::string_view kPrefix = "whsec_";
  if (secret.substr(0, kPrefix.size()) == kPrefix) {
    return base64_decode(secret.substr(kPrefix.size()));
  }
  return std::string(secret);
}

namespace {
std::string_view digest_view(const Sha256Digest& d) {
  return {reinterpret_cast<const char*>(d.data()), d.size()};
}

bool equal_ct(std::string_view a, std::string_view b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

// Calls `matches` on each space-separated candidate of a signature header.
template <class F>
bool any_candidate(std::string_view header, F matches) {
  size_t i = 0;
  while (i <= header.size()) {
    size_t j = header.find(' ', i);
    if (j == std::string_view::npos) j = header.size();
    if (j > i && matches(header.substr(i, j - i))) return true;
    i = j + 1;
  }
  return false;
}
}  // namespace

std::string standard_signature(std::string_view key, std::string_view id, std::string_view ts,
                               std::string_view body) {
  return "v1," + base64_encode(digest_view(hmac_sha256(key, {id, ".", ts, ".", body})));
}

std::string xhub_signature(std::string_view key, std::string_view ts, std::string_view body) {
  return hex_encode(digest_view(hmac_sha256(key, {ts, ".", body})));
}

namespace {
// Plain table base64 (RFC 4648, padded): the digest is about to be published, so BoringSSL's
// constant-time encoder buys nothing here.
void append_base64(std::string& out, const Sha256Digest& d) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  const size_t old = out.size();
  out.resize(old + 4 * ((d.size() + 2) / 3));
  char* o = out.data() + old;
  size_t i = 0;
  for (; i + 3 <= d.size(); i += 3) {
    const uint32_t v = uint32_t{d[i]} << 16 | uint32_t{d[i + 1]} << 8 | d[i + 2];
    *o++ = kAlphabet[v >> 18];
    *o++ = kAlphabet[(v >> 12) & 63];
    *o++ = kAlphabet[(v >> 6) & 63];
    *o++ = kAlphabet[v & 63];
  }
  const size_t rest = d.size() - i;
  if (rest > 0) {
    const uint32_t v = uint32_t{d[i]} << 16 | (rest == 2 ? uint32_t{d[i + 1]} << 8 : 0);
    *o++ = kAlphabet[v >> 18];
    *o++ = kAlphabet[(v >> 12) & 63];
    *o++ = rest == 2 ? kAlphabet[(v >> 6) & 63] : '=';
    *o++ = '=';
  }
}

void append_hex(std::string& out, const Sha256Digest& d) {
  static constexpr char kHex[] = "0123456789abcdef";
  for (uint8_t b : d) {
    out.push_back(kHex[b >> 4]);
    out.push_back(kHex[b & 15]);
  }
}
}  // namespace

void append_signature_headers(const SignInput& in, std::string& out) {
  char ts_buf[24];
  auto [end, ec] = std::to_chars(ts_buf, ts_buf + sizeof(ts_buf), in.timestamp_s);
  (void)ec;
  const std::string_view ts(ts_buf, static_cast<size_t>(end - ts_buf));
  const bool has_secret = in.secrets != nullptr && !in.secrets->empty();

  if (in.profile == SignatureProfile::kXhub) {
    out.append("X-Webhook-Id: ").append(in.message_id).append("\r\n");
    out.append("X-Webhook-Timestamp: ").append(ts).append("\r\n");
    if (has_secret) {
      out.append("X-Webhook-Signature: ");
      bool first = true;
      for (const std::string& key : *in.secrets) {
        if (!first) out.push_back(' ');
        first = false;
        append_hex(out, hmac_sha256(key, {ts, ".", in.body}));
      }
      out.append("\r\n");
    }
    return;
  }
  if (in.profile == SignatureProfile::kSmengo) {
    char att[8];
    auto [aend, aec] = std::to_chars(att, att + sizeof(att), in.attempt);
    (void)aec;
    out.append("Smengo-Delivery-Id: ")
        .append(in.message_id)
        .append(":")
        .append(att, static_cast<size_t>(aend - att))
        .append("\r\n");
  }
  out.append("webhook-id: ").append(in.message_id).append("\r\n");
  out.append("webhook-timestamp: ").append(ts).append("\r\n");
  if (has_secret) {
    out.append("webhook-signature: ");
    bool first = true;
    for (const std::string& key : *in.secrets) {
      if (!first) out.push_back(' ');
      first = false;
      out.append("v1,");
      append_base64(out, hmac_sha256(key, {in.message_id, ".", ts, ".", in.body}));
    }
    out.append("\r\n");
  }
}

bool verify_standard(std::string_view header, const std::vector<std::string>& keys,
                     std::string_view id, std::string_view ts, std::string_view body) {
  std::vector<std::string> expected;
  expected.reserve(keys.size());
  for (const std::string& k : keys) expected.push_back(standard_signature(k, id, ts, body));
  return any_candidate(header, [&](std::string_view cand) {
    for (const std::string& e : expected) {
      if (equal_ct(cand, e)) return true;
    }
    return false;
  });
}

bool verify_xhub(std::string_view header, const std::vector<std::string>& keys, std::string_view ts,
                 std::string_view body) {
  std::vector<std::string> expected;
  expected.reserve(keys.size());
  for (const std::string& k : keys) expected.push_back(xhub_signature(k, ts, body));
  return any_candidate(header, [&](std::string_view cand) {
    for (const std::string& e : expected) {
      if (equal_ct(cand, e)) return true;
    }
    return false;
  });
}

}  // namespace ringcast::net
