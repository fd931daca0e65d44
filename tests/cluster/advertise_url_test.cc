// Where a node's API is reached by the others (cluster/advertise_url.h): the URL each node
// publishes, parsed, and derived from its listener.
#include "cluster/advertise_url.h"

#include <gtest/gtest.h>

#include <array>

namespace ringcast::cluster {
namespace {

TEST(AdvertiseUrl, ParsesOnlyHttpOrHttpsWithAnIpAndAPort) {
  auto v4 = parse_advertise_url("http://10.0.0.7:8080");
  ASSERT_TRUE(v4);
  EXPECT_EQ(to_string(v4->ip), "10.0.0.7");
  EXPECT_EQ(v4->port, 8080);
  EXPECT_FALSE(v4->tls);
  auto tls = parse_advertise_url("https://10.0.0.7:8443");
  ASSERT_TRUE(tls);
  EXPECT_TRUE(tls->tls);
  EXPECT_EQ(tls->port, 8443);
  auto v6 = parse_advertise_url("http://[fd00::7]:80/");
  ASSERT_TRUE(v6);
  EXPECT_FALSE(v6->ip.is_v4());
  EXPECT_EQ(v6->port, 80);
  EXPECT_TRUE(parse_advertise_url("HTTP://127.0.0.1:1"));
  for (const char* bad :
       {"", "http://", "https://", "ftp://10.0.0.7:8080", "10.0.0.7:8080", "http://node-a:8080",
        "http://10.0.0.7", "http://10.0.0.7:0", "http://10.0.0.7:65536", "http://10.0.0.7:80/v1",
        "http://10.0.0.7:80?x", "http://u@10.0.0.7:80", "http://fd00::7:80", "http://[10.0.0.7]:80",
        "http://10.0.0.7:8x", "http://10.0.0.7:-1"}) {
    EXPECT_FALSE(parse_advertise_url(bad)) << bad;
  }
}

TEST(AdvertiseUrl, DerivedFromAConcreteListenerOnly) {
  EXPECT_EQ(derive_advertise_url(IpAddress::v4(127, 0, 0, 1), 8080), "http://127.0.0.1:8080");
  std::array<uint8_t, 16> loop6{};
  loop6[15] = 1;
  EXPECT_EQ(derive_advertise_url(IpAddress::v6(loop6), 9), "http://[::1]:9");
  // Every address (0.0.0.0, ::) names none; port 0 is not bound yet.
  EXPECT_FALSE(derive_advertise_url(IpAddress::v4(0, 0, 0, 0), 8080));
  EXPECT_FALSE(derive_advertise_url(IpAddress::v6({}), 8080));
  EXPECT_FALSE(derive_advertise_url(IpAddress::v4(127, 0, 0, 1), 0));
  // What is derived parses back.
  auto back = parse_advertise_url(*derive_advertise_url(IpAddress::v6(loop6), 9));
  ASSERT_TRUE(back);
  EXPECT_EQ(back->ip, IpAddress::v6(loop6));
}

}  // namespace
}  // namespace ringcast::cluster
