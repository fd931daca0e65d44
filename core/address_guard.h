// Address guard (SPEC R6 `private_address`): decides whether a resolved address may be connected
// to. Invariant: no special-purpose address (IANA registries) is allowed unless an explicit
// allow-list CIDR covers it, also when it hides inside an IPv6 transition form (v4-mapped, SIIT,
// NAT64, 6to4, Teredo).
#pragma once

#include <optional>
#include <vector>

#include "core/ip_address.h"

namespace ringcast {

// The IPv4 address embedded in an IPv6 transition form, or nullopt:
// ::ffff:0:0/96 (v4-mapped), ::ffff:0:0:0/96 (SIIT), 64:ff9b::/96 (RFC 6052 NAT64, last 32
// bits), 64:ff9b:1::/48 (RFC 8215 local NAT64; the /96 layout, see the candidates below),
// 2002::/16 (6to4, bits 16..47), 2001::/32 (Teredo: the client address is the last 32 bits
// XOR 0xffffffff). An IPv4 input returns nullopt.
std::optional<IpAddress> embedded_ipv4(const IpAddress& ip);

// Every IPv4 the address may stand for. Usually one; for 64:ff9b:1::/48 the operator may use
// any RFC 6052 prefix length (/48, /56, /64, /96) inside it, so the /96 reading comes first and
// the shorter layouts follow when the address is well formed for them (zero u octet and
// suffix). The guard requires each candidate to pass.
std::vector<IpAddress> embedded_ipv4_candidates(const IpAddress& ip);

class AddressGuard {
 public:
  // `allow` overrides the deny list (e.g. 127.0.0.0/8 and ::1/128 for tests).
  explicit AddressGuard(std::vector<Cidr> allow = {});

  // True when `ip` may be connected to: it is on the allow-list, or it is not special-purpose
  // and each embedded IPv4 reading is allow-listed or not special-purpose (so
  // ::ffff:127.0.0.1 passes with 127.0.0.0/8 on the allow-list). A special-purpose outer
  // address (e.g. Teredo inside 2001::/23) is denied whatever it embeds.
  bool allowed(const IpAddress& ip) const;

  // True for every deny range (address_guard.cc; not looking inside transition forms).
  static bool is_special_purpose(const IpAddress& ip);

  const std::vector<Cidr>& allow_list() const { return allow_; }

 private:
  bool on_allow_list(const IpAddress& ip) const;
  std::vector<Cidr> allow_;
};

}  // namespace ringcast
