// CaresResolver against a tiny UDP DNS server on 127.0.0.1 (no traffic leaves loopback).
#include "net/dns.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <thread>

namespace ringcast::net {
namespace {

// Answers A queries for any name with `answer` (TTL `ttl_s`); AAAA gets an empty answer.
// silent: never answers.
class FakeDnsServer {
 public:
  FakeDnsServer(std::array<uint8_t, 4> answer, uint32_t ttl_s, bool silent = false)
      : answer_(answer), ttl_s_(ttl_s), silent_(silent) {
    fd_ = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a));
    socklen_t len = sizeof(a);
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  ~FakeDnsServer() {
    stop_ = true;
    thread_.join();
    ::close(fd_);
  }
  std::string server() const { return "127.0.0.1:" + std::to_string(port_); }
  int a_queries() const { return a_queries_.load(); }
  void set_answer(std::array<uint8_t, 4> a) {
    std::lock_guard<std::mutex> g(mu_);
    answer_ = a;
  }

 private:
  void serve() {
    while (!stop_) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      uint8_t buf[512];
      sockaddr_in from{};
      socklen_t flen = sizeof(from);
      ssize_t n = ::recvfrom(fd_, buf, sizeof(buf), 0, reinterpret_cast<sockaddr*>(&from), &flen);
      if (n < 12) continue;
      size_t i = 12;
      while (i < static_cast<size_t>(n) && buf[i] != 0) i += buf[i] + 1;
      i++;  // the root label
      if (i + 4 > static_cast<size_t>(n)) continue;
      const uint16_t qtype = static_cast<uint16_t>(buf[i] << 8 | buf[i + 1]);
      const size_t qend = i + 4;
      if (qtype == 1) a_queries_++;
      if (silent_) continue;
      uint8_t out[512];
      std::memcpy(out, buf, qend);
      out[2] = 0x81;  // QR, RD
      out[3] = 0x80;  // RA, NOERROR
      out[6] = 0;
      out[7] = qtype == 1 ? 1 : 0;  // ANCOUNT
      out[8] = out[9] = out[10] = out[11] = 0;
      size_t o = qend;
      if (qtype == 1) {
        const uint8_t rr[] = {0xc0, 0x0c, 0, 1, 0, 1};
        std::memcpy(out + o, rr, sizeof(rr));
        o += sizeof(rr);
        out[o++] = static_cast<uint8_t>(ttl_s_ >> 24);
        out[o++] = static_cast<uint8_t>(ttl_s_ >> 16);
        out[o++] = static_cast<uint8_t>(ttl_s_ >> 8);
        out[o++] = static_cast<uint8_t>(ttl_s_);
        out[o++] = 0;
        out[o++] = 4;
        std::lock_guard<std::mutex> g(mu_);
        std::memcpy(out + o, answer_.data(), 4);
        o += 4;
      }
      ::sendto(fd_, out, o, 0, reinterpret_cast<sockaddr*>(&from), flen);
    }
  }

  std::mutex mu_;
  std::array<uint8_t, 4> answer_;
  uint32_t ttl_s_;
  bool silent_;
  int fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> a_queries_{0};
  std::thread thread_;
};

struct Op final : ResolveOp {
  bool done = false;
  int completions = 0;
  void on_complete() override {
    done = true;
    completions++;
  }
};

template <class Pred>
bool run_until(Loop& loop, Pred p, int turns = 3000) {
  for (int i = 0; i < turns && !p(); ++i) loop.run_once(milliseconds(5));
  return p();
}

TEST(DnsTest, ResolvesCachesForTheTtlAndCoalesces) {
  FakeDnsServer server({127, 0, 0, 7}, 30);
  ManualClock clock;
  LoopOptions lo;
  lo.clock = &clock;
  auto loop = std::move(Loop::create(lo)).value();
  DnsOptions o;
  o.servers = server.server();
  o.lookups = std::string("b");
  auto r = std::move(CaresResolver::create(*loop, o)).value();

  Op a, b;
  a.host = b.host = "hook.example";
  r->resolve(&a);
  r->resolve(&b);
  EXPECT_FALSE(a.done);  // never inline
  ASSERT_TRUE(run_until(*loop, [&] { return a.done && b.done; }));
  EXPECT_FALSE(a.failed);
  ASSERT_EQ(a.addresses.size(), 1u);
  EXPECT_EQ(a.addresses[0], IpAddress::v4(127, 0, 0, 7));
  EXPECT_EQ(b.addresses, a.addresses);
  EXPECT_EQ(a.ttl, seconds(30));
  EXPECT_EQ(server.a_queries(), 1);
  EXPECT_EQ(r->stats().queries, 1u);

  // Cached: no new query, still not inline.
  server.set_answer({127, 0, 0, 8});
  Op c;
  c.host = "hook.example";
  r->resolve(&c);
  EXPECT_FALSE(c.done);
  ASSERT_TRUE(run_until(*loop, [&] { return c.done; }));
  EXPECT_EQ(c.addresses[0], IpAddress::v4(127, 0, 0, 7));
  EXPECT_EQ(server.a_queries(), 1);
  EXPECT_EQ(r->stats().cache_hits, 1u);

  // After the TTL the name is asked again and the new answer is seen.
  clock.advance(seconds(31));
  loop->refresh_now();
  Op d;
  d.host = "hook.example";
  r->resolve(&d);
  ASSERT_TRUE(run_until(*loop, [&] { return d.done; }));
  EXPECT_EQ(d.addresses[0], IpAddress::v4(127, 0, 0, 8));
  EXPECT_EQ(server.a_queries(), 2);
  EXPECT_EQ(a.completions + b.completions + c.completions + d.completions, 4);
}

TEST(DnsTest, TtlIsCapped) {
  FakeDnsServer server({127, 0, 0, 9}, 86400);
  auto loop = std::move(Loop::create({})).value();
  DnsOptions o;
  o.servers = server.server();
  o.lookups = std::string("b");
  o.ttl_max = seconds(60);
  auto r = std::move(CaresResolver::create(*loop, o)).value();
  Op a;
  a.host = "capped.example";
  r->resolve(&a);
  ASSERT_TRUE(run_until(*loop, [&] { return a.done; }));
  EXPECT_EQ(a.ttl, seconds(60));
}

TEST(DnsTest, SilentServerFailsAtTheDeadline) {
  FakeDnsServer server({127, 0, 0, 1}, 30, /*silent=*/true);
  auto loop = std::move(Loop::create({})).value();
  DnsOptions o;
  o.servers = server.server();
  o.lookups = std::string("b");
  o.deadline = milliseconds(200);
  o.try_timeout_ms = 5000;  // c-ares alone would wait much longer
  auto r = std::move(CaresResolver::create(*loop, o)).value();
  Op a;
  a.host = "slow.example";
  const MonoTime start = loop->now();
  r->resolve(&a);
  ASSERT_TRUE(run_until(*loop, [&] { return a.done; }));
  EXPECT_TRUE(a.failed);
  EXPECT_TRUE(a.addresses.empty());
  EXPECT_GE(loop->now() - start, milliseconds(190));
  EXPECT_EQ(r->stats().deadline_expired, 1u);
  EXPECT_EQ(a.completions, 1);
  // Destroying the resolver with c-ares still waiting is clean (ASan checks it).
  r.reset();
}

TEST(DnsTest, HostsFileAndLiterals) {
  auto loop = std::move(Loop::create({})).value();
  DnsOptions o;
  o.lookups = "f";  // hosts file only: nothing leaves the machine
  auto r = std::move(CaresResolver::create(*loop, o)).value();
  Op a, b, c;
  a.host = "localhost";
  b.host = "::1";
  c.host = "no-such-name.invalid";
  r->resolve(&a);
  r->resolve(&b);
  r->resolve(&c);
  ASSERT_TRUE(run_until(*loop, [&] { return a.done && b.done && c.done; }));
  EXPECT_FALSE(a.failed);
  ASSERT_FALSE(a.addresses.empty());
  bool loopback = false;
  for (auto& ip : a.addresses) {
    loopback |= ip == IpAddress::v4(127, 0, 0, 1) || (!ip.is_v4() && ip.bytes[15] == 1);
  }
  EXPECT_TRUE(loopback);
  ASSERT_EQ(b.addresses.size(), 1u);
  EXPECT_FALSE(b.addresses[0].is_v4());
  EXPECT_TRUE(c.failed);
}

}  // namespace
}  // namespace ringcast::net
