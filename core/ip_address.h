// An IPv4 or IPv6 address as plain bytes, free of socket types so the core can reason about
// it (address guard, allow-lists) without syscalls.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace ringcast {

struct IpAddress {
  enum class Family : uint8_t { kV4, kV6 };
  Family family = Family::kV4;
  std::array<uint8_t, 16> bytes{};  // v4 uses bytes[0..3], network order

  static IpAddress v4(uint8_t a, uint8_t b, uint8_t c, uint8_t d) {
    IpAddress ip;
    ip.bytes[0] = a, ip.bytes[1] = b, ip.bytes[2] = c, ip.bytes[3] = d;
    return ip;
  }
  static IpAddress v6(const std::array<uint8_t, 16>& b) {
    IpAddress ip;
    ip.family = Family::kV6;
    ip.bytes = b;
    return ip;
  }
  bool is_v4() const { return family == Family::kV4; }
  bool operator==(const IpAddress&) const = default;
};

// Dotted quad or RFC 4291 / 5952 text (with "::" and embedded dotted quad); no zone ids,
// no leading-zero octal tricks ("0127.0.0.1" is rejected, not read as octal).
std::optional<IpAddress> parse_ip(std::string_view text);
std::string to_string(const IpAddress& ip);  // RFC 5952 form for v6

struct Cidr {
  IpAddress base;
  uint8_t prefix_len = 0;
  bool contains(const IpAddress& ip) const;  // false across families
};
std::optional<Cidr> parse_cidr(std::string_view text);  // "127.0.0.0/8", "::1/128"

}  // namespace ringcast
