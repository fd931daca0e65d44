#include "nats/nkey.h"

#include <openssl/base64.h>
#include <openssl/curve25519.h>
#include <openssl/mem.h>

#include <vector>

namespace ringcast::nats {
namespace {

constexpr uint8_t kPrefixSeed = 18 << 3;  // 'S'
constexpr uint8_t kPrefixUser = 20 << 3;  // 'U'
constexpr char kBase32[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";

// CRC-16/XMODEM (polynomial 0x1021, initial 0), as the nkeys format uses.
uint16_t crc16(const uint8_t* p, size_t n) {
  uint16_t crc = 0;
  for (size_t i = 0; i < n; ++i) {
    crc ^= static_cast<uint16_t>(p[i]) << 8;
    for (int b = 0; b < 8; ++b)
      crc = static_cast<uint16_t>((crc & 0x8000) ? (crc << 1) ^ 0x1021 : crc << 1);
  }
  return crc;
}

std::string base32(const std::vector<uint8_t>& in) {  // RFC 4648, no padding
  std::string out;
  uint32_t buf = 0;
  int bits = 0;
  for (uint8_t b : in) {
    buf = (buf << 8) | b;
    bits += 8;
    while (bits >= 5) {
      out.push_back(kBase32[(buf >> (bits - 5)) & 31]);
      bits -= 5;
    }
  }
  if (bits > 0) out.push_back(kBase32[(buf << (5 - bits)) & 31]);
  return out;
}

bool unbase32(std::string_view in, std::vector<uint8_t>& out) {
  uint32_t buf = 0;
  int bits = 0;
  for (char c : in) {
    int v;
    if (c >= 'A' && c <= 'Z') {
      v = c - 'A';
    } else if (c >= '2' && c <= '7') {
      v = c - '2' + 26;
    } else {
      return false;
    }
    buf = (buf << 5) | static_cast<uint32_t>(v);
    bits += 5;
    if (bits >= 8) {
      out.push_back(static_cast<uint8_t>(buf >> (bits - 8)));
      bits -= 8;
    }
  }
  return true;
}

// Payload bytes with their CRC-16 appended little-endian, in base32.
std::string encode(std::vector<uint8_t> raw) {
  const uint16_t crc = crc16(raw.data(), raw.size());
  raw.push_back(static_cast<uint8_t>(crc & 0xff));
  raw.push_back(static_cast<uint8_t>(crc >> 8));
  return base32(raw);
}

}  // namespace

Result<NkeyUser> nkey_from_seed(std::string_view seed) {
  auto bad = [] {
    return make_error(Errc::kInvalidArgument,
                      "nats: not an NKEY user seed (\"SU\" and 56 base32 characters)", "nkey_seed");
  };
  while (!seed.empty() && (seed.back() == '\n' || seed.back() == '\r' || seed.back() == ' '))
    seed.remove_suffix(1);
  while (!seed.empty() && (seed.front() == ' ' || seed.front() == '\n')) seed.remove_prefix(1);
  std::vector<uint8_t> raw;
  if (!unbase32(seed, raw) || raw.size() != 2 + 32 + 2) return bad();
  const uint16_t want = static_cast<uint16_t>(raw[34] | (raw[35] << 8));
  if (crc16(raw.data(), 34) != want) return bad();
  const uint8_t b1 = raw[0] & 248;
  const uint8_t b2 = static_cast<uint8_t>(((raw[0] & 7) << 5) | ((raw[1] & 248) >> 3));
  if (b1 != kPrefixSeed || b2 != kPrefixUser) return bad();
  NkeyUser u;
  uint8_t pub[32];
  ED25519_keypair_from_seed(pub, u.private_key.data(), raw.data() + 2);
  OPENSSL_cleanse(raw.data(), raw.size());
  std::vector<uint8_t> p{kPrefixUser};
  p.insert(p.end(), pub, pub + 32);
  u.public_key = encode(std::move(p));
  return u;
}

std::string nkey_sign(const NkeyUser& user, std::string_view nonce) {
  uint8_t sig[64];
  ED25519_sign(sig, reinterpret_cast<const uint8_t*>(nonce.data()), nonce.size(),
               user.private_key.data());
  uint8_t out[128];
  const size_t n = EVP_EncodeBlock(out, sig, sizeof sig);
  std::string s(reinterpret_cast<const char*>(out), n);
  for (char& c : s) {
    if (c == '+') c = '-';
    if (c == '/') c = '_';
  }
  while (!s.empty() && s.back() == '=') s.pop_back();
  return s;
}

std::string nkey_user_seed(const std::array<uint8_t, 32>& raw) {
  std::vector<uint8_t> b{static_cast<uint8_t>(kPrefixSeed | (kPrefixUser >> 5)),
                         static_cast<uint8_t>((kPrefixUser & 31) << 3)};
  b.insert(b.end(), raw.begin(), raw.end());
  return encode(std::move(b));
}

}  // namespace ringcast::nats
