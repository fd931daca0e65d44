// core/address_guard: every deny range (both edges), the IPv6 transition forms that hide an IPv4,
// public addresses, and allow-list behaviour (SPEC R6 private_address).
#include "core/address_guard.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace ringcast {
namespace {

IpAddress ip(const char* text) {
  auto a = parse_ip(text);
  EXPECT_TRUE(a.has_value()) << text;
  return a.value_or(IpAddress{});
}

Cidr cidr(const char* text) {
  auto c = parse_cidr(text);
  EXPECT_TRUE(c.has_value()) << text;
  return c.value_or(Cidr{});
}

struct RangeCase {
  const char* range;
  const char* first;  // first address inside
  const char* last;   // last address inside
  const char* below;  // just outside, below (nullptr: none)
  const char* above;  // just outside, above (nullptr: none)
};

// The IANA special-purpose ranges (SPEC R6 private_address), in full; edges picked so an
// off-by-one prefix fails.
const RangeCase kDenied[] = {
    {"0.0.0.0/8", "0.0.0.0", "0.255.255.255", nullptr, "1.0.0.0"},
    {"10.0.0.0/8", "10.0.0.0", "10.255.255.255", "9.255.255.255", "11.0.0.0"},
    {"100.64.0.0/10", "100.64.0.0", "100.127.255.255", "100.63.255.255", "100.128.0.0"},
    {"127.0.0.0/8", "127.0.0.0", "127.255.255.255", "126.255.255.255", "128.0.0.0"},
    {"169.254.0.0/16", "169.254.0.0", "169.254.255.255", "169.253.255.255", "169.255.0.0"},
    {"172.16.0.0/12", "172.16.0.0", "172.31.255.255", "172.15.255.255", "172.32.0.0"},
    {"192.0.0.0/24", "192.0.0.0", "192.0.0.255", "191.255.255.255", "192.0.1.0"},
    {"192.0.2.0/24", "192.0.2.0", "192.0.2.255", "192.0.1.255", "192.0.3.0"},
    {"192.88.99.0/24", "192.88.99.0", "192.88.99.255", "192.88.98.255", "192.88.100.0"},
    {"192.168.0.0/16", "192.168.0.0", "192.168.255.255", "192.167.255.255", "192.169.0.0"},
    {"198.18.0.0/15", "198.18.0.0", "198.19.255.255", "198.17.255.255", "198.20.0.0"},
    {"198.51.100.0/24", "198.51.100.0", "198.51.100.255", "198.51.99.255", "198.51.101.0"},
    {"203.0.113.0/24", "203.0.113.0", "203.0.113.255", "203.0.112.255", "203.0.114.0"},
    {"224.0.0.0/4", "224.0.0.0", "239.255.255.255", "223.255.255.255", nullptr},
    {"240.0.0.0/4", "240.0.0.0", "255.255.255.254", nullptr, nullptr},
    {"255.255.255.255/32", "255.255.255.255", "255.255.255.255", nullptr, nullptr},
    {"::/128", "::", "::", nullptr, nullptr},
    {"::1/128", "::1", "::1", nullptr, nullptr},
    {"::/96", "::", "::ffff:ffff", nullptr, "::1:0:0"},
    {"fc00::/7", "fc00::", "fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
     "fbff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "fe00::"},
    {"fe80::/10", "fe80::", "febf:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
     "fe7f:ffff:ffff:ffff:ffff:ffff:ffff:ffff", nullptr},
    {"fec0::/10", "fec0::", "feff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", nullptr, nullptr},
    {"ff00::/8", "ff00::", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", nullptr, nullptr},
    {"100::/64", "100::", "100::ffff:ffff:ffff:ffff", "ff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
     "100:0:0:1::"},
    {"2001:db8::/32", "2001:db8::", "2001:db8:ffff:ffff:ffff:ffff:ffff:ffff",
     "2001:db7:ffff:ffff:ffff:ffff:ffff:ffff", "2001:db9::"},
    {"3fff::/20", "3fff::", "3fff:fff:ffff:ffff:ffff:ffff:ffff:ffff",
     "3ffe:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "3fff:1000::"},
    {"5f00::/16", "5f00::", "5f00:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
     "5eff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "5f01::"},
    {"2001::/23", "2001::", "2001:1ff:ffff:ffff:ffff:ffff:ffff:ffff",
     "2000:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "2001:200::"},
};

TEST(AddressGuard, DeniesEverySpecialPurposeRangeAtBothEdges) {
  AddressGuard guard;
  for (const auto& r : kDenied) {
    SCOPED_TRACE(r.range);
    EXPECT_TRUE(AddressGuard::is_special_purpose(ip(r.first)));
    EXPECT_TRUE(AddressGuard::is_special_purpose(ip(r.last)));
    EXPECT_FALSE(guard.allowed(ip(r.first))) << r.first;
    EXPECT_FALSE(guard.allowed(ip(r.last))) << r.last;
    // The first/last pair really spans the whole range.
    auto c = cidr(r.range);
    EXPECT_TRUE(c.contains(ip(r.first)));
    EXPECT_TRUE(c.contains(ip(r.last)));
    // Just outside is public unless it falls in a neighbouring deny range (none do here).
    if (r.below) {
      EXPECT_TRUE(guard.allowed(ip(r.below))) << r.below;
    }
    if (r.above) {
      EXPECT_TRUE(guard.allowed(ip(r.above))) << r.above;
    }
  }
}

TEST(AddressGuard, AllowsPublicAddresses) {
  AddressGuard guard;
  const char* kPublic[] = {
      "8.8.8.8",
      "1.1.1.1",
      "9.9.9.9",
      "93.184.216.34",
      "100.63.0.1",
      "172.15.0.1",
      "172.32.0.1",
      "192.0.1.1",
      "192.169.0.1",
      "198.20.0.1",
      "223.255.255.255",
      "2606:4700::1111",
      "2001:4860:4860::8888",
      "2a00:1450:4001::200e",
      "2620:fe::fe",
      "2001:200::1",
      "::ffff:8.8.8.8",
      "64:ff9b::8.8.8.8",
      "2002:808:808::1",
      "::ffff:0:1.1.1.1",
  };
  for (const char* s : kPublic) {
    EXPECT_FALSE(AddressGuard::is_special_purpose(ip(s))) << s;
    EXPECT_TRUE(guard.allowed(ip(s))) << s;
  }
}

struct EmbeddedCase {
  const char* v6;
  const char* v4;  // nullptr: no embedded address
};

TEST(AddressGuard, UnwrapsEmbeddedIpv4) {
  const EmbeddedCase kCases[] = {
      {"::ffff:127.0.0.1", "127.0.0.1"},  // v4-mapped
      {"::ffff:7f00:1", "127.0.0.1"},
      {"::ffff:0:a00:1", "10.0.0.1"},  // SIIT ::ffff:0:0:0/96
      {"::ffff:0:169.254.169.254", "169.254.169.254"},
      {"64:ff9b::a9fe:a9fe", "169.254.169.254"},  // NAT64 well-known prefix
      {"64:ff9b::7f00:1", "127.0.0.1"},
      {"64:ff9b:1::c0a8:101", "192.168.1.1"},  // local-use NAT64, /96 layout
      {"2002:7f00:1::", "127.0.0.1"},          // 6to4
      {"2002:a9fe:a9fe:1:2:3:4:5", "169.254.169.254"},
      {"2001:0:4136:e378:8000:63bf:80ff:fffe", "127.0.0.1"},   // Teredo: ~7f000001
      {"2001:0:4136:e378:8000:63bf:3fff:fdd2", "192.0.2.45"},  // RFC 4380 example client
      {"2001:db8::1", nullptr},
      {"2606:4700::1111", nullptr},
      {"::1", nullptr},
      {"64:ff9b:0:0:1::7f00:1", nullptr},  // not in 64:ff9b::/96 nor 64:ff9b:1::/48
      {"::fffe:7f00:1", nullptr},
  };
  for (const auto& c : kCases) {
    SCOPED_TRACE(c.v6);
    auto e = embedded_ipv4(ip(c.v6));
    if (c.v4 == nullptr) {
      EXPECT_FALSE(e.has_value()) << to_string(*e);
    } else {
      ASSERT_TRUE(e.has_value());
      EXPECT_EQ(to_string(*e), c.v4);
    }
  }
  EXPECT_FALSE(embedded_ipv4(ip("127.0.0.1")).has_value());
}

TEST(AddressGuard, LocalNat64ChecksEveryPlausiblePrefixLayout) {
  AddressGuard guard;
  // /48 layout (RFC 6052 2.2): 127.0.0.1 in bits 48..63 and 72..87, u octet and suffix zero.
  auto a48 = ip("64:ff9b:1:7f00:0:100::");
  bool found = false;
  for (const auto& v4 : embedded_ipv4_candidates(a48)) found |= v4 == IpAddress::v4(127, 0, 0, 1);
  EXPECT_TRUE(found);
  EXPECT_FALSE(guard.allowed(a48));
  // /64 layout: 10.0.0.1 in bits 72..103.
  auto a64 = ip("64:ff9b:1:0:a:0:100::");
  found = false;
  for (const auto& v4 : embedded_ipv4_candidates(a64)) found |= v4 == IpAddress::v4(10, 0, 0, 1);
  EXPECT_TRUE(found);
  EXPECT_FALSE(guard.allowed(a64));
  // /56 layout: 192.168.1.1 in bits 56..63 and 72..95.
  auto a56 = ip("64:ff9b:1:c0:a8:101::");
  found = false;
  for (const auto& v4 : embedded_ipv4_candidates(a56)) found |= v4 == IpAddress::v4(192, 168, 1, 1);
  EXPECT_TRUE(found);
  EXPECT_FALSE(guard.allowed(a56));
  // /96 deployments (64:ff9b:1::/96) reach public addresses; shorter readings of these have a
  // non-zero suffix and are not plausible.
  EXPECT_EQ(embedded_ipv4_candidates(ip("64:ff9b:1::808:808")).size(), 1u);
  EXPECT_TRUE(guard.allowed(ip("64:ff9b:1::808:808")));
  EXPECT_TRUE(guard.allowed(ip("64:ff9b:1::102:304")));
  EXPECT_FALSE(guard.allowed(ip("64:ff9b:1::a9fe:a9fe")));
  EXPECT_FALSE(guard.allowed(ip("64:ff9b:1::7f00:1")));
  // A non-zero u octet rules the shorter layouts out.
  EXPECT_EQ(embedded_ipv4_candidates(ip("64:ff9b:1:0:ff00::")).size(), 1u);
}

TEST(AddressGuard, TrickyFormsAreDenied) {
  AddressGuard guard;
  const char* kTricky[] = {
      "::ffff:127.0.0.1",
      "::ffff:10.1.2.3",
      "::ffff:169.254.169.254",
      "::ffff:0:127.0.0.1",  // SIIT
      "64:ff9b::a9fe:a9fe",  // NAT64 of the metadata address
      "64:ff9b::127.0.0.1",
      "64:ff9b::0.0.0.0",
      "64:ff9b:1::a9fe:a9fe",
      "2002:7f00:1::",                         // 6to4 of 127.0.0.1
      "2002:c0a8:101::1",                      // 6to4 of 192.168.1.1
      "2002:a00:1::",                          // 6to4 of 10.0.0.1
      "2001:0:4136:e378:8000:63bf:80ff:fffe",  // Teredo of 127.0.0.1
      "2001::80ff:fffe",                       // Teredo of 127.0.0.1, minimal
      "::",
      "0.0.0.0",
      "::127.0.0.1",  // IPv4-compatible (::/96)
      "::ffff:0.0.0.0",
      "::ffff:255.255.255.255",
      "::ffff:224.0.0.1",
  };
  for (const char* s : kTricky) EXPECT_FALSE(guard.allowed(ip(s))) << s;
}

TEST(AddressGuard, AllowListOverridesDenyList) {
  AddressGuard guard({cidr("127.0.0.0/8"), cidr("::1/128")});
  EXPECT_TRUE(guard.allowed(ip("127.0.0.1")));
  EXPECT_TRUE(guard.allowed(ip("127.10.20.30")));
  EXPECT_TRUE(guard.allowed(ip("::1")));
  // The embedded IPv4 is checked against the allow-list too.
  EXPECT_TRUE(guard.allowed(ip("::ffff:127.0.0.1")));
  EXPECT_TRUE(guard.allowed(ip("64:ff9b::7f00:1")));
  EXPECT_TRUE(guard.allowed(ip("2002:7f00:1::")));
  // Everything else stays denied.
  EXPECT_FALSE(guard.allowed(ip("10.0.0.1")));
  EXPECT_FALSE(guard.allowed(ip("::ffff:10.0.0.1")));
  EXPECT_FALSE(guard.allowed(ip("::2")));
  EXPECT_FALSE(guard.allowed(ip("169.254.169.254")));
  EXPECT_FALSE(guard.allowed(ip("0.0.0.0")));
  EXPECT_FALSE(guard.allowed(ip("::")));
  // Teredo sits inside 2001::/23, denied as a whole whatever it embeds.
  EXPECT_FALSE(guard.allowed(ip("2001::80ff:fffe")));
  // Public stays public.
  EXPECT_TRUE(guard.allowed(ip("8.8.8.8")));
  EXPECT_EQ(guard.allow_list().size(), 2u);
}

TEST(AddressGuard, AllowListOfAnOuterIpv6RangeCoversIt) {
  // A private deployment allow-lists its ULA; a v4-mapped loopback is still denied.
  AddressGuard guard({cidr("fd00:1234::/32")});
  EXPECT_TRUE(guard.allowed(ip("fd00:1234::5")));
  EXPECT_FALSE(guard.allowed(ip("fd00:1235::5")));
  EXPECT_FALSE(guard.allowed(ip("::ffff:127.0.0.1")));
  // Allow-listing the v6 loopback does not open the v4 one, and back.
  AddressGuard v6only({cidr("::1/128")});
  EXPECT_FALSE(v6only.allowed(ip("127.0.0.1")));
  AddressGuard v4only({cidr("127.0.0.0/8")});
  EXPECT_FALSE(v4only.allowed(ip("::1")));
}

}  // namespace
}  // namespace ringcast
