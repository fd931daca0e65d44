// nats::Connection against a real nats-server (tests/support/nats_server.h): publish and
// subscribe with headers and binary payloads byte for byte, request/reply and no responders,
// deadlines, a server restart survived (reconnect and re-subscription), a frozen server noticed by
// the keepalive, token and user/password auth accepted and refused, and TLS with a CA made at test
// time (verified; refused with another CA; refused when only one side speaks TLS).
#include "nats/connection.h"

#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "nats/nkey.h"
#include "net/loop.h"
#include "tests/support/nats_server.h"
#include "tests/support/require.h"
#include "tests/support/temp_dir.h"
#include "tests/support/test_ca.h"

namespace ringcast::nats {
namespace {

using namespace std::chrono_literals;
using test::NatsServer;
using test::NatsServerOptions;
using test::TempDir;

// Runs loop turns until `pred` holds or `limit` passes; returns pred().
bool run_until(net::Loop& loop, const std::function<bool()>& pred,
               std::chrono::milliseconds limit = 10s) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (!pred() && std::chrono::steady_clock::now() < end) loop.run_once(milliseconds(5));
  return pred();
}

class NatsConnectionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!NatsServer::available()) {
      RINGCAST_SKIP_MISSING() << "nats-server is not installed (tools/install-deps.sh)";
    }
    auto l = net::Loop::create({});
    ASSERT_TRUE(l.ok());
    loop_ = std::move(*l);
  }
  void TearDown() override {
    conns_.clear();  // before the loop
  }
  void start_server(const NatsServerOptions& o = {}) {
    server_ = NatsServer::start(dir_.path(), o);
  }

  // A connection to the server (options adjusted by `tweak`), its events recorded.
  Connection& connect(const std::function<void(ConnectionOptions&)>& tweak = {}) {
    ConnectionOptions o;
    o.servers = {server_->address()};
    o.reconnect_min = 20ms;
    o.reconnect_max = 200ms;
    o.on_event = [this](const ConnectionEvent& e) { events_.push_back(e); };
    if (tweak) tweak(o);
    auto c = Connection::create(*loop_, std::move(o));
    EXPECT_TRUE(c.ok()) << (c.ok() ? "" : c.error().message);
    conns_.push_back(std::move(*c));
    return *conns_.back();
  }
  bool ready(Connection& c, std::chrono::milliseconds limit = 10s) {
    return run_until(
        *loop_, [&] { return c.ready(); }, limit);
  }
  // The first kBackoff event's reason ("" when none).
  std::string down_reason() const {
    for (const auto& e : events_)
      if (e.state == ConnState::kBackoff) return e.error.reason_or_code();
    return "";
  }
  std::string down_detail() const {
    for (const auto& e : events_)
      if (e.state == ConnState::kBackoff) return e.detail;
    return "";
  }

  TempDir dir_{"nats-conn"};
  std::unique_ptr<NatsServer> server_;
  std::unique_ptr<net::Loop> loop_;
  std::vector<std::unique_ptr<Connection>> conns_;
  std::vector<ConnectionEvent> events_;
};

TEST_F(NatsConnectionTest, PublishSubscribeAndRequestReplyByteForByte) {
  start_server();
  Connection& c = connect();
  // A request made before the connection is up waits for it (no responder: 503).
  std::optional<Result<Msg>> early;
  c.request("nobody.home", "x", [&](Result<Msg> r) { early = std::move(r); });
  ASSERT_TRUE(ready(c)) << down_reason() << " " << server_->log();
  ASSERT_TRUE(run_until(*loop_, [&] { return early.has_value(); }));
  ASSERT_FALSE(early->ok());
  EXPECT_STREQ(early->error().reason_or_code(), kNoResponders);

  std::vector<Msg> got;
  ASSERT_TRUE(c.subscribe("ev.>", [&](Msg& m) { got.push_back(std::move(m)); }).ok());
  // A responder on the same connection: answers with the request's body reversed.
  ASSERT_TRUE(c.subscribe("svc.echo", [&](Msg& m) {
                 std::string body(m.data.rbegin(), m.data.rend());
                 ASSERT_TRUE(c.publish(m.reply, body).ok());
               }).ok());
  std::string binary;
  for (int i = 0; i < 256; ++i) binary.push_back(static_cast<char>(i));
  binary += "\r\nPUB x 1\r\n";  // protocol-looking bytes inside a payload
  const std::string hdr = encode_headers({{"Ringcast-Tenant", "acme"}, {"K", "v"}});
  bool flushed = false;
  ASSERT_TRUE(c.publish("ev.a", binary).ok());
  ASSERT_TRUE(c.publish("ev.b", "{\"n\":1}", "", hdr).ok());
  ASSERT_TRUE(c.publish("ev.c", "").ok());
  c.flush([&](Result<void> r) { flushed = r.ok(); });
  ASSERT_TRUE(run_until(*loop_, [&] { return got.size() == 3 && flushed; }));
  EXPECT_EQ(got[0].subject, "ev.a");
  EXPECT_EQ(got[0].data, binary);
  EXPECT_TRUE(got[0].headers.empty());
  EXPECT_EQ(got[1].data, "{\"n\":1}");
  EXPECT_EQ(got[1].headers, hdr);
  EXPECT_EQ(got[2].data, "");

  std::optional<Result<Msg>> reply;
  c.request("svc.echo", "abc", [&](Result<Msg> r) { reply = std::move(r); });
  ASSERT_TRUE(run_until(*loop_, [&] { return reply.has_value(); }));
  ASSERT_TRUE(reply->ok()) << reply->error().message;
  EXPECT_EQ((*reply)->data, "cba");

  // A subscriber that never answers: the request ends at its deadline.
  ASSERT_TRUE(c.subscribe("svc.silent", [](Msg&) {}).ok());
  std::optional<Result<Msg>> silent;
  const auto t0 = std::chrono::steady_clock::now();
  c.request(
      "svc.silent", "x", [&](Result<Msg> r) { silent = std::move(r); }, 300ms);
  ASSERT_TRUE(run_until(
      *loop_, [&] { return silent.has_value(); }, 5s));
  EXPECT_STREQ(silent->error().reason_or_code(), kTimeout);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 290ms);

  // Bad subjects are refused before anything is sent.
  EXPECT_FALSE(c.publish("a b", "x").ok());
  EXPECT_FALSE(c.publish("ev.*", "x").ok());
  EXPECT_FALSE(c.subscribe("a..b", [](Msg&) {}).ok());
  EXPECT_EQ(c.stats().connects, 1u);
}

TEST_F(NatsConnectionTest, ARestartedServerIsReconnectedAndTheSubscriptionsComeBack) {
  start_server();
  Connection& c = connect();
  ASSERT_TRUE(ready(c));
  std::vector<std::string> got;
  ASSERT_TRUE(c.subscribe("ev.>", [&](Msg& m) { got.push_back(m.data); }).ok());
  ASSERT_TRUE(c.publish("ev.1", "before").ok());
  ASSERT_TRUE(run_until(*loop_, [&] { return got.size() == 1; }));

  // A request in flight when the server goes: it fails (it may have been acted on).
  ASSERT_TRUE(c.subscribe("svc.silent", [](Msg&) {}).ok());
  std::optional<Result<Msg>> cut;
  c.request(
      "svc.silent", "x", [&](Result<Msg> r) { cut = std::move(r); }, 20s);
  bool flushed = false;
  c.flush([&](Result<void>) { flushed = true; });
  ASSERT_TRUE(run_until(*loop_, [&] { return flushed; }));
  server_->stop();
  ASSERT_TRUE(run_until(*loop_, [&] { return cut.has_value(); }));
  EXPECT_STREQ(cut->error().reason_or_code(), kConnectionLost);
  EXPECT_FALSE(c.ready());
  // While down, publish refuses (the caller keeps what it must send again).
  auto refused = c.publish("ev.2", "while down");
  ASSERT_FALSE(refused.ok());
  EXPECT_STREQ(refused.error().reason_or_code(), kNotConnected);

  server_->restart();
  ASSERT_TRUE(ready(c, 15s)) << server_->log();
  ASSERT_TRUE(c.publish("ev.3", "after").ok());
  ASSERT_TRUE(run_until(*loop_, [&] { return got.size() == 2; }));
  EXPECT_EQ(got[1], "after");
  EXPECT_EQ(c.stats().connects, 2u);
  EXPECT_GE(c.stats().reconnects, 1u);
}

TEST_F(NatsConnectionTest, AFrozenServerIsNoticedByTheKeepalive) {
  start_server();
  Connection& c = connect([](ConnectionOptions& o) {
    o.ping_interval = 100ms;
    o.max_pings_out = 2;
  });
  ASSERT_TRUE(ready(c));
  server_->pause();
  ASSERT_TRUE(run_until(
      *loop_, [&] { return !c.ready(); }, 5s));
  EXPECT_EQ(down_reason(), kStale);
  server_->resume();
  ASSERT_TRUE(ready(c, 10s));
}

TEST_F(NatsConnectionTest, TokenAuthAcceptedAndRefused) {
  NatsServerOptions so;
  so.token = "s3cret-token";
  start_server(so);
  Connection& good = connect([](ConnectionOptions& o) { o.token = "s3cret-token"; });
  ASSERT_TRUE(ready(good)) << down_reason() << " " << down_detail();
  events_.clear();
  Connection& bad = connect([](ConnectionOptions& o) { o.token = "wrong"; });
  ASSERT_TRUE(run_until(*loop_, [&] { return !down_reason().empty(); }));
  EXPECT_EQ(down_reason(), kAuth) << down_detail();
  EXPECT_NE(down_detail().find("Authorization Violation"), std::string::npos) << down_detail();
  EXPECT_EQ(down_detail().find("wrong"), std::string::npos);  // the credential is not repeated
  loop_->run_once(milliseconds(200));
  EXPECT_FALSE(bad.ready());
  events_.clear();
  Connection& none = connect();
  ASSERT_TRUE(run_until(*loop_, [&] { return !down_reason().empty(); }));
  EXPECT_EQ(down_reason(), kAuth);
  EXPECT_FALSE(none.ready());
}

TEST_F(NatsConnectionTest, UserAndPasswordAcceptedAndRefused) {
  NatsServerOptions so;
  so.user = "ringcast";
  so.password = "pa55word";
  start_server(so);
  Connection& good = connect([](ConnectionOptions& o) {
    o.user = "ringcast";
    o.password = "pa55word";
  });
  ASSERT_TRUE(ready(good)) << down_reason() << " " << down_detail();
  events_.clear();
  Connection& bad = connect([](ConnectionOptions& o) {
    o.user = "ringcast";
    o.password = "nope";
  });
  ASSERT_TRUE(run_until(*loop_, [&] { return !down_reason().empty(); }));
  EXPECT_EQ(down_reason(), kAuth) << down_detail();
  EXPECT_FALSE(bad.ready());
  // Both kinds of credential at once is a programming error, refused at create().
  ConnectionOptions both;
  both.servers = {server_->address()};
  both.token = "t";
  both.user = "u";
  EXPECT_FALSE(Connection::create(*loop_, both).ok());
}

TEST_F(NatsConnectionTest, AnNkeyUserSignsTheNonceAndAnotherKeyIsRefused) {
  std::array<uint8_t, 32> raw{};
  for (size_t i = 0; i < raw.size(); ++i) raw[i] = static_cast<uint8_t>(i * 7 + 1);
  const std::string seed = nkey_user_seed(raw);
  auto user = nkey_from_seed(seed);
  ASSERT_TRUE(user.ok()) << user.error().message;
  NatsServerOptions so;
  so.nkey = user->public_key;
  start_server(so);
  Connection& good = connect([&](ConnectionOptions& o) { o.nkey_seed = seed + "\n"; });
  ASSERT_TRUE(ready(good)) << down_reason() << " " << down_detail() << " " << server_->log();
  std::vector<std::string> got;
  ASSERT_TRUE(good.subscribe("k", [&](Msg& m) { got.push_back(m.data); }).ok());
  ASSERT_TRUE(good.publish("k", "signed in").ok());
  ASSERT_TRUE(run_until(*loop_, [&] { return got.size() == 1; }));
  events_.clear();
  raw[0] ^= 1;
  Connection& other = connect([&](ConnectionOptions& o) { o.nkey_seed = nkey_user_seed(raw); });
  ASSERT_TRUE(run_until(*loop_, [&] { return !down_reason().empty(); }));
  EXPECT_EQ(down_reason(), kAuth) << down_detail();
  EXPECT_FALSE(other.ready());
}

TEST(NatsNkey, SeedsDecodeOnlyWithTheirChecksumAndPrefix) {
  std::array<uint8_t, 32> raw{};
  raw.fill(0x42);
  const std::string seed = nkey_user_seed(raw);
  EXPECT_EQ(seed.size(), 58u);
  EXPECT_EQ(seed.substr(0, 2), "SU");
  auto u = nkey_from_seed(seed);
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->public_key.size(), 56u);
  EXPECT_EQ(u->public_key[0], 'U');
  EXPECT_EQ(nkey_from_seed(seed)->public_key, u->public_key);  // deterministic
  const std::string sig = nkey_sign(*u, "nonce-1");
  EXPECT_EQ(sig.size(), 86u);  // 64 bytes, base64url without padding
  EXPECT_EQ(sig.find_first_of("+/="), std::string::npos);
  std::string flipped = seed;
  flipped[10] = flipped[10] == 'A' ? 'B' : 'A';
  EXPECT_FALSE(nkey_from_seed(flipped).ok());  // the CRC-16 catches it
  EXPECT_FALSE(nkey_from_seed("SAAGNWNE5OZJA2EB3NE2HNAZ7LUSFOQUVRN4TG5N7NA3OPYGR2BCU3JZQ").ok());
  EXPECT_FALSE(nkey_from_seed(u->public_key).ok());  // a public key is not a seed
  EXPECT_FALSE(nkey_from_seed("").ok());
  EXPECT_FALSE(nkey_from_seed("su-not-base32!").ok());
}

TEST_F(NatsConnectionTest, TlsWithATestCaVerifiedAndRefusedOtherwise) {
  const test::TestCa ca = test::TestCa::create();
  const test::CertFiles files = ca.write_localhost(dir_.path());
  NatsServerOptions so;
  so.tls = test::NatsServerTls{files.cert, files.key};
  start_server(so);

  Connection& tls = connect([&](ConnectionOptions& o) {
    o.tls.enabled = true;
    o.tls.ca_file = files.ca;
  });
  ASSERT_TRUE(ready(tls)) << down_reason() << " " << down_detail() << " " << server_->log();
  std::vector<std::string> got;
  ASSERT_TRUE(tls.subscribe("t.>", [&](Msg& m) { got.push_back(m.data); }).ok());
  const std::string big(200000, 'x');  // several TLS records
  ASSERT_TRUE(tls.publish("t.a", big).ok());
  ASSERT_TRUE(run_until(*loop_, [&] { return got.size() == 1; }));
  EXPECT_EQ(got[0], big);
  // By name: "localhost" is in the certificate.
  Connection& by_name = connect([&](ConnectionOptions& o) {
    o.tls.enabled = true;
    o.tls.ca_file = files.ca;
    o.tls.server_name = "localhost";
  });
  ASSERT_TRUE(ready(by_name)) << down_reason() << " " << down_detail();

  // Another CA: the certificate does not verify.
  TempDir other_dir("nats-conn-ca2");
  const test::CertFiles other = test::TestCa::create("other CA").write_localhost(other_dir.path());
  events_.clear();
  Connection& untrusted = connect([&](ConnectionOptions& o) {
    o.tls.enabled = true;
    o.tls.ca_file = other.ca;
  });
  ASSERT_TRUE(run_until(*loop_, [&] { return !down_reason().empty(); }));
  EXPECT_EQ(down_reason(), kTlsCert) << down_detail();
  EXPECT_FALSE(untrusted.ready());
  // A name the certificate does not carry.
  events_.clear();
  Connection& wrong_name = connect([&](ConnectionOptions& o) {
    o.tls.enabled = true;
    o.tls.ca_file = files.ca;
    o.tls.server_name = "not-this-host.example";
  });
  ASSERT_TRUE(run_until(*loop_, [&] { return !down_reason().empty(); }));
  EXPECT_EQ(down_reason(), kTlsCert) << down_detail();
  EXPECT_FALSE(wrong_name.ready());
  // Plain TCP to a server that requires TLS: said so, never sent in the clear.
  events_.clear();
  Connection& plain = connect();
  ASSERT_TRUE(run_until(*loop_, [&] { return !down_reason().empty(); }));
  EXPECT_EQ(down_reason(), kTlsRequired);
  EXPECT_FALSE(plain.ready());
}

TEST_F(NatsConnectionTest, TlsAgainstAServerWithoutTlsIsRefused) {
  start_server();
  const test::TestCa ca = test::TestCa::create();
  const test::CertFiles files = ca.write_localhost(dir_.path());
  Connection& c = connect([&](ConnectionOptions& o) {
    o.tls.enabled = true;
    o.tls.ca_file = files.ca;
  });
  ASSERT_TRUE(run_until(*loop_, [&] { return !down_reason().empty(); }));
  EXPECT_EQ(down_reason(), kTlsRequired);
  EXPECT_FALSE(c.ready());
}

TEST(NatsServerAddress, NumericHostsWithOrWithoutAScheme) {
  auto a = parse_server("nats://127.0.0.1:4222");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->host, "127.0.0.1");
  EXPECT_EQ(a->port, 4222);
  a = parse_server("tls://[::1]:7422");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->host, "::1");
  EXPECT_EQ(a->port, 7422);
  for (const char* bad : {"localhost:4222", "127.0.0.1", "127.0.0.1:0", "127.0.0.1:99999", ""}) {
    EXPECT_FALSE(parse_server(bad).ok()) << bad;
  }
}

}  // namespace
}  // namespace ringcast::nats
