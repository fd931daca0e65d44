#include "core/address_guard.h"

#include <iterator>
#include <utility>

namespace ringcast {
namespace {

// SPEC R6 private_address: the IANA special-purpose ranges (IPv4 and IPv6 registries) plus the
// deprecated site-local fec0::/10. 255.255.255.255 sits inside 240/4 but is listed for clarity.
constexpr const char* kDenyV4[] = {
    "0.0.0.0/8",      "10.0.0.0/8",     "100.64.0.0/10", "127.0.0.0/8",
    "169.254.0.0/16", "172.16.0.0/12",  "192.0.0.0/24",  "192.0.2.0/24",
    "192.88.99.0/24", "192.168.0.0/16", "198.18.0.0/15", "198.51.100.0/24",
    "203.0.113.0/24", "224.0.0.0/4",    "240.0.0.0/4",   "255.255.255.255/32",
};
constexpr const char* kDenyV6[] = {
    "::/128",   "::1/128",  "::/96",         "fc00::/7",  "fe80::/10", "fec0::/10",
    "ff00::/8", "100::/64", "2001:db8::/32", "3fff::/20", "5f00::/16", "2001::/23",
};

std::vector<Cidr> parse_all(const char* const* begin, const char* const* end) {
  std::vector<Cidr> out;
  for (auto it = begin; it != end; ++it) out.push_back(*parse_cidr(*it));
  return out;
}

const std::vector<Cidr>& deny_v4() {
  static const std::vector<Cidr> kList = parse_all(std::begin(kDenyV4), std::end(kDenyV4));
  return kList;
}
const std::vector<Cidr>& deny_v6() {
  static const std::vector<Cidr> kList = parse_all(std::begin(kDenyV6), std::end(kDenyV6));
  return kList;
}

bool all_zero(const IpAddress& ip, int from, int to) {
  for (int k = from; k < to; ++k) {
    if (ip.bytes[k] != 0) return false;
  }
  return true;
}

}  // namespace

std::vector<IpAddress> embedded_ipv4_candidates(const IpAddress& ip) {
  std::vector<IpAddress> out;
  if (ip.is_v4()) return out;
  const auto& b = ip.bytes;
  auto v4 = [](uint8_t a, uint8_t b2, uint8_t c, uint8_t d) { return IpAddress::v4(a, b2, c, d); };
  // ::ffff:0:0/96, v4-mapped (RFC 4291 2.5.5.2).
  if (all_zero(ip, 0, 10) && b[10] == 0xff && b[11] == 0xff) {
    out.push_back(v4(b[12], b[13], b[14], b[15]));
    return out;
  }
  // ::ffff:0:0:0/96, SIIT IPv4-translated (RFC 7915 / 2765).
  if (all_zero(ip, 0, 8) && b[8] == 0xff && b[9] == 0xff && b[10] == 0 && b[11] == 0) {
    out.push_back(v4(b[12], b[13], b[14], b[15]));
    return out;
  }
  // 64:ff9b::/96, the NAT64 well-known prefix (RFC 6052 2.1: only used as a /96).
  if (b[0] == 0x00 && b[1] == 0x64 && b[2] == 0xff && b[3] == 0x9b && all_zero(ip, 4, 12)) {
    out.push_back(v4(b[12], b[13], b[14], b[15]));
    return out;
  }
  // 64:ff9b:1::/48, local-use NAT64 (RFC 8215). The operator may use any RFC 6052 prefix
  // length inside it, so the reading is ambiguous. The /96 reading is always a candidate; the
  // /48, /56 and /64 readings are candidates when the address is well formed for them (u
  // octet, bits 64..71, zero and the suffix zero, RFC 6052 2.2). The guard requires every
  // candidate to pass, so an address that is canonical for a shorter layout is denied through
  // its /96 reading (0.0.0.x): only /96 deployments work without an allow-list entry.
  if (b[0] == 0x00 && b[1] == 0x64 && b[2] == 0xff && b[3] == 0x9b && b[4] == 0x00 &&
      b[5] == 0x01) {
    out.push_back(v4(b[12], b[13], b[14], b[15]));  // /96
    if (b[8] == 0) {
      if (all_zero(ip, 11, 16)) out.push_back(v4(b[6], b[7], b[9], b[10]));    // /48
      if (all_zero(ip, 12, 16)) out.push_back(v4(b[7], b[9], b[10], b[11]));   // /56
      if (all_zero(ip, 13, 16)) out.push_back(v4(b[9], b[10], b[11], b[12]));  // /64
    }
    return out;
  }
  // 2002::/16, 6to4 (RFC 3056): the v4 is bits 16..47.
  if (b[0] == 0x20 && b[1] == 0x02) {
    out.push_back(v4(b[2], b[3], b[4], b[5]));
    return out;
  }
  // 2001::/32, Teredo (RFC 4380 4): the client's public v4 is the last 32 bits, inverted.
  if (b[0] == 0x20 && b[1] == 0x01 && b[2] == 0x00 && b[3] == 0x00) {
    out.push_back(v4(b[12] ^ 0xff, b[13] ^ 0xff, b[14] ^ 0xff, b[15] ^ 0xff));
    return out;
  }
  return out;
}

std::optional<IpAddress> embedded_ipv4(const IpAddress& ip) {
  auto all = embedded_ipv4_candidates(ip);
  if (all.empty()) return std::nullopt;
  return all.front();
}

AddressGuard::AddressGuard(std::vector<Cidr> allow) : allow_(std::move(allow)) {}

bool AddressGuard::on_allow_list(const IpAddress& ip) const {
  for (const Cidr& c : allow_) {
    if (c.contains(ip)) return true;
  }
  return false;
}

bool AddressGuard::is_special_purpose(const IpAddress& ip) {
  for (const Cidr& c : ip.is_v4() ? deny_v4() : deny_v6()) {
    if (c.contains(ip)) return true;
  }
  return false;
}

bool AddressGuard::allowed(const IpAddress& ip) const {
  if (on_allow_list(ip)) return true;
  if (is_special_purpose(ip)) return false;
  // Every embedded reading must pass: either allow-listed or not special-purpose.
  for (const IpAddress& v4 : embedded_ipv4_candidates(ip)) {
    if (!on_allow_list(v4) && is_special_purpose(v4)) return false;
  }
  return true;
}

}  // namespace ringcast
