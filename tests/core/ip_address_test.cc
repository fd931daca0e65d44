// core/ip_address: strict parsing (no octal or short forms), RFC 5952 output, CIDR matching.
#include "core/ip_address.h"

#include <gtest/gtest.h>

#include <string>

namespace ringcast {
namespace {

struct RoundTrip {
  const char* in;
  const char* out;  // RFC 5952 canonical form
};

TEST(IpAddress, ParsesAndPrintsCanonically) {
  const RoundTrip kCases[] = {
      {"0.0.0.0", "0.0.0.0"},
      {"127.0.0.1", "127.0.0.1"},
      {"255.255.255.255", "255.255.255.255"},
      {"8.8.8.8", "8.8.8.8"},
      {"::", "::"},
      {"::1", "::1"},
      {"1::", "1::"},
      {"2001:DB8::1", "2001:db8::1"},
      {"2001:0db8:0000:0000:0000:0000:0000:0001", "2001:db8::1"},
      {"2001:db8:0:0:1:0:0:1", "2001:db8::1:0:0:1"},     // first of two equal runs
      {"2001:db8:0:1:1:1:1:1", "2001:db8:0:1:1:1:1:1"},  // a single zero is not compressed
      {"2001:0:0:1:0:0:0:1", "2001:0:0:1::1"},           // the longest run wins
      {"fe80::1:2", "fe80::1:2"},
      {"::ffff:127.0.0.1", "::ffff:127.0.0.1"},
      {"::ffff:7f00:1", "::ffff:127.0.0.1"},
      {"64:ff9b::a9fe:a9fe", "64:ff9b::a9fe:a9fe"},
      {"64:ff9b::169.254.169.254", "64:ff9b::a9fe:a9fe"},
      {"1:2:3:4:5:6:7:8", "1:2:3:4:5:6:7:8"},
      {"1:2:3:4:5:6:1.2.3.4", "1:2:3:4:5:6:102:304"},
      {"::2:3:4:5:6:7:8", "0:2:3:4:5:6:7:8"},
  };
  for (const auto& c : kCases) {
    SCOPED_TRACE(c.in);
    auto ip = parse_ip(c.in);
    ASSERT_TRUE(ip.has_value());
    EXPECT_EQ(to_string(*ip), c.out);
    // The canonical form parses back to the same bytes.
    auto again = parse_ip(to_string(*ip));
    ASSERT_TRUE(again.has_value());
    EXPECT_EQ(*again, *ip);
  }
}

TEST(IpAddress, BytesAreNetworkOrder) {
  auto v4 = parse_ip("192.168.1.2");
  ASSERT_TRUE(v4);
  EXPECT_TRUE(v4->is_v4());
  EXPECT_EQ(*v4, IpAddress::v4(192, 168, 1, 2));
  auto v6 = parse_ip("2001:db8::102:304");
  ASSERT_TRUE(v6);
  EXPECT_FALSE(v6->is_v4());
  EXPECT_EQ(v6->bytes[0], 0x20);
  EXPECT_EQ(v6->bytes[1], 0x01);
  EXPECT_EQ(v6->bytes[2], 0x0d);
  EXPECT_EQ(v6->bytes[3], 0xb8);
  EXPECT_EQ(v6->bytes[12], 1);
  EXPECT_EQ(v6->bytes[13], 2);
  EXPECT_EQ(v6->bytes[14], 3);
  EXPECT_EQ(v6->bytes[15], 4);
}

TEST(IpAddress, RejectsMalformedAndAmbiguousForms) {
  const char* kBad[] = {
      "",
      "1.2.3",
      "1.2.3.4.5",
      "256.1.1.1",
      "1.2.3.-1",
      "0127.0.0.1",  // octal trick
      "01.2.3.4",
      "127.1",
      "2130706433",
      "0x7f.0.0.1",
      "1.2.3.4 ",
      " 1.2.3.4",
      "1..2.3",
      "1.2.3.",
      ".1.2.3",
      "1.2.3.1234",
      ":",
      ":::",
      "1:::2",
      "1::2::3",
      ":1::",
      "1::2:",
      "1:2:3:4:5:6:7",
      "1:2:3:4:5:6:7:8:9",
      "12345::",
      "g::1",
      "::1%eth0",
      "fe80::1%25en0",
      "[::1]",
      "1:2:3:4:5:6:7:1.2.3.4",
      "::1.2.3",
      "::1.2.3.4:5",
      "1:2:3:4:5:6:7:8::",
      "::ffff:0127.0.0.1",
  };
  for (const char* s : kBad) {
    EXPECT_FALSE(parse_ip(s).has_value()) << "accepted: '" << s << "'";
  }
}

struct ContainsCase {
  const char* cidr;
  const char* ip;
  bool in;
};

TEST(Cidr, Contains) {
  const ContainsCase kCases[] = {
      {"127.0.0.0/8", "127.0.0.1", true},
      {"127.0.0.0/8", "127.255.255.255", true},
      {"127.0.0.0/8", "128.0.0.0", false},
      {"127.0.0.0/8", "126.255.255.255", false},
      {"100.64.0.0/10", "100.127.255.255", true},
      {"100.64.0.0/10", "100.128.0.0", false},
      {"100.64.0.0/10", "100.63.255.255", false},
      {"172.16.0.0/12", "172.31.0.1", true},
      {"172.16.0.0/12", "172.32.0.1", false},
      {"0.0.0.0/0", "1.2.3.4", true},
      {"0.0.0.0/0", "::1", false},  // never across families
      {"::/0", "1.2.3.4", false},
      {"::/0", "2001:db8::1", true},
      {"10.1.2.3/32", "10.1.2.3", true},
      {"10.1.2.3/32", "10.1.2.4", false},
      {"10.1.2.3", "10.1.2.3", true},  // a bare address is a host route
      {"10.1.2.3", "10.1.2.4", false},
      {"fe80::/10", "febf:ffff::1", true},
      {"fe80::/10", "fec0::1", false},
      {"3fff::/20", "3fff:0fff:ffff::1", true},
      {"3fff::/20", "3fff:1000::1", false},
      {"::1/128", "::1", true},
      {"::1/128", "::2", false},
      {"10.1.2.3/8", "10.200.0.1", true},  // host bits are cleared
  };
  for (const auto& c : kCases) {
    SCOPED_TRACE(std::string(c.cidr) + " ∋ " + c.ip);
    auto cidr = parse_cidr(c.cidr);
    auto ip = parse_ip(c.ip);
    ASSERT_TRUE(cidr);
    ASSERT_TRUE(ip);
    EXPECT_EQ(cidr->contains(*ip), c.in);
  }
}

TEST(Cidr, ParseClearsHostBitsAndRejectsJunk) {
  auto c = parse_cidr("10.1.2.3/8");
  ASSERT_TRUE(c);
  EXPECT_EQ(c->prefix_len, 8);
  EXPECT_EQ(c->base, IpAddress::v4(10, 0, 0, 0));
  auto c6 = parse_cidr("2001:db8:ffff::1/33");
  ASSERT_TRUE(c6);
  EXPECT_EQ(to_string(c6->base), "2001:db8:8000::");

  const char* kBad[] = {"10.0.0.0/33",  "::/129", "10.0.0.0/", "10.0.0.0/08", "10.0.0.0/-1",
                        "10.0.0.0/8/8", "/8",     "10.0.0/8",  "10.0.0.0/ 8", "10.0.0.0/1000"};
  for (const char* s : kBad) {
    EXPECT_FALSE(parse_cidr(s).has_value()) << "accepted: '" << s << "'";
  }
}

}  // namespace
}  // namespace ringcast
