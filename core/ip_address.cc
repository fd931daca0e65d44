#include "core/ip_address.h"

#include <cstdio>

namespace ringcast {
namespace {

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Strict dotted quad: exactly four decimal octets, 1..3 digits, no leading zeros (so
// "0127.0.0.1" never means octal 87.0.0.1 to one parser and 127.0.0.1 to another).
bool parse_v4_into(std::string_view s, uint8_t* out) {
  int part = 0;
  size_t i = 0;
  while (part < 4) {
    size_t start = i;
    unsigned v = 0;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9' && i - start < 4) {
      v = v * 10 + static_cast<unsigned>(s[i] - '0');
      ++i;
    }
    size_t len = i - start;
    if (len == 0 || len > 3 || v > 255) return false;
    if (len > 1 && s[start] == '0') return false;
    out[part++] = static_cast<uint8_t>(v);
    if (part < 4) {
      if (i >= s.size() || s[i] != '.') return false;
      ++i;
    }
  }
  return i == s.size();
}

bool parse_v6_into(std::string_view s, uint8_t* out) {
  uint16_t groups[8] = {};
  int n = 0;     // groups written
  int gap = -1;  // index in groups where "::" sits
  size_t i = 0;
  if (s.size() < 2) return false;
  if (s[0] == ':') {
    if (s[1] != ':') return false;
    gap = 0;
    i = 2;
    if (i == s.size()) {  // "::"
      for (int k = 0; k < 16; ++k) out[k] = 0;
      return true;
    }
  }
  while (i < s.size()) {
    if (n >= 8) return false;
    // An embedded dotted quad may close the address (RFC 4291 2.2 form 3).
    size_t end = s.find(':', i);
    std::string_view tok = s.substr(i, end == std::string_view::npos ? s.size() - i : end - i);
    if (end == std::string_view::npos && tok.find('.') != std::string_view::npos) {
      if (n > 6) return false;
      uint8_t q[4];
      if (!parse_v4_into(tok, q)) return false;
      groups[n++] = static_cast<uint16_t>(q[0] << 8 | q[1]);
      groups[n++] = static_cast<uint16_t>(q[2] << 8 | q[3]);
      i = s.size();
      break;
    }
    if (tok.empty() || tok.size() > 4) return false;
    unsigned v = 0;
    for (char c : tok) {
      int h = hex_value(c);
      if (h < 0) return false;
      v = v << 4 | static_cast<unsigned>(h);
    }
    groups[n++] = static_cast<uint16_t>(v);
    i += tok.size();
    if (i == s.size()) break;
    // s[i] == ':'
    ++i;
    if (i < s.size() && s[i] == ':') {
      if (gap >= 0) return false;  // a second "::"
      gap = n;
      ++i;
      if (i == s.size()) break;  // trailing "::"
    } else if (i == s.size()) {
      return false;  // trailing single ':'
    }
  }
  uint16_t full[8] = {};
  if (gap >= 0) {
    if (n >= 8) return false;  // "::" must stand for at least one group
    int tail = n - gap;
    for (int k = 0; k < gap; ++k) full[k] = groups[k];
    for (int k = 0; k < tail; ++k) full[8 - tail + k] = groups[gap + k];
  } else {
    if (n != 8) return false;
    for (int k = 0; k < 8; ++k) full[k] = groups[k];
  }
  for (int k = 0; k < 8; ++k) {
    out[2 * k] = static_cast<uint8_t>(full[k] >> 8);
    out[2 * k + 1] = static_cast<uint8_t>(full[k] & 0xff);
  }
  return true;
}

}  // namespace

std::optional<IpAddress> parse_ip(std::string_view text) {
  IpAddress ip;
  if (text.find(':') == std::string_view::npos) {
    if (!parse_v4_into(text, ip.bytes.data())) return std::nullopt;
    return ip;
  }
  ip.family = IpAddress::Family::kV6;
  if (!parse_v6_into(text, ip.bytes.data())) return std::nullopt;
  return ip;
}

std::string to_string(const IpAddress& ip) {
  char buf[64];
  if (ip.is_v4()) {
    std::snprintf(buf, sizeof buf, "%u.%u.%u.%u", ip.bytes[0], ip.bytes[1], ip.bytes[2],
                  ip.bytes[3]);
    return buf;
  }
  uint16_t g[8];
  for (int k = 0; k < 8; ++k)
    g[k] = static_cast<uint16_t>(ip.bytes[2 * k] << 8 | ip.bytes[2 * k + 1]);
  // RFC 5952 5: v4-mapped addresses keep the dotted quad.
  if (g[0] == 0 && g[1] == 0 && g[2] == 0 && g[3] == 0 && g[4] == 0 && g[5] == 0xffff) {
    std::snprintf(buf, sizeof buf, "::ffff:%u.%u.%u.%u", ip.bytes[12], ip.bytes[13], ip.bytes[14],
                  ip.bytes[15]);
    return buf;
  }
  // RFC 5952 4.2: compress the longest run (>= 2) of zero groups, the first one on a tie.
  int best = -1, best_len = 0;
  for (int k = 0; k < 8;) {
    if (g[k] != 0) {
      ++k;
      continue;
    }
    int j = k;
    while (j < 8 && g[j] == 0) ++j;
    if (j - k > best_len) best = k, best_len = j - k;
    k = j;
  }
  if (best_len < 2) best = -1;
  std::string out;
  for (int k = 0; k < 8; ++k) {
    if (k == best) {
      out += "::";
      k += best_len - 1;
      continue;
    }
    if (!out.empty() && out.back() != ':') out += ':';
    std::snprintf(buf, sizeof buf, "%x", g[k]);
    out += buf;
  }
  return out;
}

bool Cidr::contains(const IpAddress& ip) const {
  if (ip.family != base.family) return false;
  const int max_bits = ip.is_v4() ? 32 : 128;
  const int bits = prefix_len > max_bits ? max_bits : prefix_len;
  const int whole = bits / 8;
  for (int k = 0; k < whole; ++k) {
    if (ip.bytes[k] != base.bytes[k]) return false;
  }
  const int rest = bits % 8;
  if (rest == 0) return true;
  const uint8_t mask = static_cast<uint8_t>(0xff << (8 - rest));
  return (ip.bytes[whole] & mask) == (base.bytes[whole] & mask);
}

std::optional<Cidr> parse_cidr(std::string_view text) {
  size_t slash = text.find('/');
  auto ip = parse_ip(text.substr(0, slash));
  if (!ip) return std::nullopt;
  const unsigned max_bits = ip->is_v4() ? 32 : 128;
  unsigned len = max_bits;  // a bare address is a single-host CIDR
  if (slash != std::string_view::npos) {
    std::string_view num = text.substr(slash + 1);
    if (num.empty() || num.size() > 3 || (num.size() > 1 && num[0] == '0')) return std::nullopt;
    len = 0;
    for (char c : num) {
      if (c < '0' || c > '9') return std::nullopt;
      len = len * 10 + static_cast<unsigned>(c - '0');
    }
    if (len > max_bits) return std::nullopt;
  }
  // Host bits beyond the prefix are cleared, so "10.1.2.3/8" is 10.0.0.0/8.
  Cidr c{*ip, static_cast<uint8_t>(len)};
  for (unsigned bit = len; bit < max_bits; ++bit) {
    c.base.bytes[bit / 8] &= static_cast<uint8_t>(~(0x80u >> (bit % 8)));
  }
  return c;
}

}  // namespace ringcast
