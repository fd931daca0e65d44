// TLS to Redis (SPEC R14, docs/security.md "Redis"): redis::Connection and redis::ClusterClient
// against real redis-server processes with a tls-port on loopback, certificates from a test CA
// made in the test (IP SANs for 127.0.0.1). Commands, pipelining and deadlines over TLS; a
// server the client does not trust (another CA, another name) is never used; mutual TLS with
// tls-auth-clients yes; AUTH as an ACL user; reconnect after a restart; a cluster with
// tls-cluster yes whose slot map and MOVED name the TLS ports.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "net/tls.h"
#include "redis/cluster.h"
#include "redis/connection.h"
#include "redis/slot.h"
#include "tests/redis/redis_test_util.h"
#include "tests/support/redis_server.h"
#include "tests/support/temp_dir.h"
#include "tests/support/test_ca.h"

namespace ringcast::redis {
namespace {

using test::RedisServer;
using test::RedisServerOptions;
using test::RedisServerTls;
using test::TempDir;
using test::TestCa;
using testing::call;
using testing::run_for;
using testing::run_until;
using testing::show;

class RedisTlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(RedisServer::available())
        << "redis-server is not installed (bash tools/install-deps.sh)";
    loop_ = testing::make_loop();
    server_files_ = ca_.write_localhost(dir_.path());  // ca.pem, cert.pem, key.pem
    // A client certificate of the same CA, and everything of another CA.
    client_files_ = write_leaf(ca_, "client", ca_.issue({"ringcast-client"}));
    other_files_ = write_leaf(other_ca_, "other", other_ca_.issue({"localhost"}, {"127.0.0.1"}));
  }
  test::CertFiles write_leaf(const TestCa& ca, const std::string& name, const test::LeafCert& c) {
    const std::string d = dir_.file(name);
    test::CertFiles f{d + "-ca.pem", d + "-cert.pem", d + "-key.pem"};
    test::write_file(f.ca, ca.ca_pem);
    test::write_file(f.cert, c.cert_pem);
    test::write_file(f.key, c.key_pem);
    return f;
  }
  void start_server(bool auth_clients = false, RedisServerOptions o = {}) {
    RedisServerTls t;
    t.cert_file = server_files_.cert;
    t.key_file = server_files_.key;
    t.ca_file = server_files_.ca;
    t.auth_clients = auth_clients;
    o.tls = t;
    const std::string d = dir_.file("redis");
    if (::mkdir(d.c_str(), 0700) != 0) throw std::runtime_error("cannot create " + d);
    server_ = RedisServer::start(d, o);
  }
  ConnectionOptions tls_options() const {
    ConnectionOptions o;
    o.host = "127.0.0.1";
    o.port = server_->tls_port();
    o.tls.enabled = true;
    o.tls.ca_file = server_files_.ca;
    o.default_timeout = seconds(5);
    return o;
  }
  std::unique_ptr<Connection> connect(ConnectionOptions o) {
    auto c = Connection::create(*loop_, o);
    EXPECT_TRUE(c.ok()) << (c.ok() ? "" : c.error().message);
    return c.ok() ? std::move(c).value() : nullptr;
  }

  TempDir dir_{"ringcast-redis-tls"};
  TestCa ca_ = TestCa::create("ringcast redis test CA");
  TestCa other_ca_ = TestCa::create("some other CA");
  test::CertFiles server_files_, client_files_, other_files_;
  std::unique_ptr<net::Loop> loop_;
  std::unique_ptr<RedisServer> server_;
};

// What a connection reported going down, for the tests that expect it not to come up.
struct Events {
  int ready = 0;
  int down = 0;
  std::string last_reason;
  std::string last_detail;
  std::string last_message;
  void attach(ConnectionOptions& o) {
    o.on_event = [this](const ConnectionEvent& e) {
      if (e.state == ConnState::kReady) ready++;
      if (e.state == ConnState::kBackoff) {
        down++;
        last_reason = e.error.reason ? e.error.reason : "";
        last_message = e.error.message;
        last_detail = e.detail;
      }
    };
  }
};

TEST_F(RedisTlsTest, CommandsAndPipelinesFlowOverTlsVerifiedByTheIpSan) {
  start_server();
  auto c = connect(tls_options());
  ASSERT_NE(c, nullptr);
  auto set = call(*c, {"SET", "greeting", "hello over tls"});
  ASSERT_TRUE(set.ok()) << show(set);
  EXPECT_EQ(*set, Reply::status("OK"));
  auto get = call(*c, {"GET", "greeting"});
  ASSERT_TRUE(get.ok()) << show(get);
  EXPECT_EQ(*get, Reply::string("hello over tls"));
  auto bad = call(*c, {"INCR", "greeting"});
  ASSERT_TRUE(bad.ok());
  EXPECT_TRUE(bad->is_error()) << "a server error stays a reply over TLS";
  EXPECT_EQ(c->stats().tls_handshakes, 1u);
  EXPECT_EQ(server_->clients_on_port(server_->tls_port()), 1) << "it came in on the TLS port";
  EXPECT_EQ(server_->cmd({"GET", "greeting"}).str, "hello over tls");

  // Pipelining and FIFO: a thousand commands queued in one turn leave in one send, replies in
  // order; a value larger than the receive buffer and than one TLS record (16 KiB) arrives whole.
  const auto before = c->stats();
  constexpr int kN = 1000;
  std::vector<long long> got;
  for (int i = 0; i < kN; ++i) {
    c->command({"INCR", "counter"}, [&](Result<Reply> r) {
      got.push_back(r.ok() && r->is_integer() ? r->integer_value() : -1);
    });
  }
  ASSERT_TRUE(run_until(*loop_, [&] { return got.size() == kN; }));
  for (int i = 0; i < kN; ++i) ASSERT_EQ(got[static_cast<size_t>(i)], i + 1) << "reply " << i;
  EXPECT_EQ(c->stats().send_batches - before.send_batches, 1u);
  EXPECT_EQ(c->stats().send_calls - before.send_calls, 1u);
  const std::string big(3u << 20, 'x');
  ASSERT_TRUE(call(*c, {"SET", "big", big}).ok());
  auto back = call(*c, {"GET", "big"});
  ASSERT_TRUE(back.ok()) << show(back);
  EXPECT_EQ(back->str().size(), big.size());
  EXPECT_EQ(back->str(), big);
  EXPECT_EQ(c->stats().tls_failures, 0u);
  EXPECT_EQ(c->stats().disconnects, 0u);
}

TEST_F(RedisTlsTest, ADeadlineOnAStoppedServerKeepsTheFifoAlignedOverTls) {
  start_server();
  auto c = connect(tls_options());
  ASSERT_TRUE(call(*c, {"MSET", "k1", "v1", "k2", "v2"}).ok());
  server_->pause();
  CommandOptions quick;
  quick.timeout = milliseconds(200);
  auto timed_out = call(*c, {"GET", "k1"}, quick);
  ASSERT_FALSE(timed_out.ok()) << show(timed_out);
  EXPECT_STREQ(timed_out.error().reason, kTimeout);
  server_->resume();
  auto next = call(*c, {"GET", "k2"});
  ASSERT_TRUE(next.ok()) << show(next);
  EXPECT_EQ(*next, Reply::string("v2")) << "the late reply to GET k1 was read and dropped";
  EXPECT_EQ(c->stats().late_replies, 1u);
}

TEST_F(RedisTlsTest, AServerNameIsVerifiedInsteadOfTheAddress) {
  start_server();
  ConnectionOptions good = tls_options();
  good.tls.server_name = "localhost";  // a DNS SAN of the server's certificate
  auto c = connect(good);
  auto r = call(*c, {"PING"});
  ASSERT_TRUE(r.ok()) << show(r);
  EXPECT_EQ(*r, Reply::status("PONG"));

  ConnectionOptions wrong = tls_options();
  wrong.tls.server_name = "redis.example.com";  // not in the certificate
  Events ev;
  ev.attach(wrong);
  auto w = connect(wrong);
  CommandOptions quick;
  quick.timeout = milliseconds(500);
  auto refused = call(*w, {"SET", "wrong-name", "1"}, quick);
  ASSERT_FALSE(refused.ok()) << show(refused);
  EXPECT_STREQ(refused.error().reason, kTimeoutUnsent);
  EXPECT_EQ(ev.ready, 0);
  EXPECT_EQ(ev.last_reason, kTlsCert);
  EXPECT_NE(ev.last_detail.find("mismatch"), std::string::npos) << ev.last_detail;
  EXPECT_EQ(server_->cmd({"EXISTS", "wrong-name"}).integer, 0);
}

TEST_F(RedisTlsTest, AClientTrustingAnotherCaFailsWithTheCertErrorAndNeverBecomesReady) {
  start_server();
  ConnectionOptions o = tls_options();
  o.tls.ca_file = other_files_.ca;
  Events ev;
  ev.attach(o);
  auto c = connect(o);
  CommandOptions quick;
  quick.timeout = milliseconds(800);
  auto r = call(*c, {"SET", "untrusted", "1"}, quick);
  ASSERT_FALSE(r.ok()) << show(r);
  EXPECT_STREQ(r.error().reason, kTimeoutUnsent);
  EXPECT_FALSE(may_have_executed(r.error()));
  EXPECT_NE(std::string(r.error().message).find("TLS certificate"), std::string::npos)
      << r.error().message;
  EXPECT_NE(std::string(r.error().message).find("redis_tls_cert"), std::string::npos);
  EXPECT_EQ(ev.ready, 0);
  EXPECT_GE(ev.down, 2) << "it keeps trying, with backoff";
  EXPECT_EQ(ev.last_reason, kTlsCert);
  EXPECT_NE(ev.last_detail.find("certificate"), std::string::npos) << ev.last_detail;
  EXPECT_NE(c->state(), ConnState::kReady);
  EXPECT_GE(c->stats().tls_failures, 2u);
  EXPECT_EQ(c->stats().connects, 0u);
  EXPECT_EQ(server_->cmd({"EXISTS", "untrusted"}).integer, 0);
}

TEST_F(RedisTlsTest, ATlsClientOnThePlainPortFailsTheHandshake) {
  start_server();
  ConnectionOptions o = tls_options();
  o.port = server_->port();  // the plain port: Redis waits for a command, no TLS answer comes
  o.connect_timeout = milliseconds(300);
  Events ev;
  ev.attach(o);
  auto c = connect(o);
  CommandOptions quick;
  quick.timeout = milliseconds(1000);
  auto r = call(*c, {"SET", "plain-port", "1"}, quick);
  ASSERT_FALSE(r.ok()) << show(r);
  EXPECT_STREQ(r.error().reason, kTimeoutUnsent);
  EXPECT_EQ(ev.ready, 0);
  EXPECT_EQ(ev.last_reason, kTlsHandshake) << ev.last_message;
  EXPECT_EQ(server_->cmd({"EXISTS", "plain-port"}).integer, 0);
}

TEST_F(RedisTlsTest, MutualTlsRefusesAClientWithoutACertificateAndAcceptsOneWithIt) {
  start_server(/*auth_clients=*/true);
  CommandOptions quick;
  quick.timeout = milliseconds(800);

  // Refused at the handshake, the server's alert (`alert`) in the detail: the connection
  // never becomes ready and nothing ran (`key` was not set).
  const auto expect_refused = [&](ConnectionOptions o, const std::string& key, const char* alert) {
    Events ev;
    ev.attach(o);
    auto c = connect(o);
    auto r = call(*c, {"SET", key, "1"}, quick);
    ASSERT_FALSE(r.ok()) << show(r);
    EXPECT_STREQ(r.error().reason, kTimeoutUnsent);
    EXPECT_NE(std::string(r.error().message).find("redis_tls_handshake"), std::string::npos)
        << r.error().message;
    EXPECT_EQ(ev.ready, 0);
    EXPECT_GE(ev.down, 1);
    EXPECT_EQ(ev.last_reason, kTlsHandshake) << ev.last_message << " / " << ev.last_detail;
    EXPECT_NE(ev.last_detail.find(alert), std::string::npos) << ev.last_detail;
    EXPECT_EQ(server_->cmd({"EXISTS", key}).integer, 0);
  };
  // No client certificate (TLS 1.3: the server refuses it after the client's Finished, as an
  // alert).
  expect_refused(tls_options(), "no-cert", "CERTIFICATE_REQUIRED");
  // A certificate of another CA.
  ConnectionOptions foreign = tls_options();
  foreign.tls.cert_file = other_files_.cert;
  foreign.tls.key_file = other_files_.key;
  expect_refused(foreign, "foreign-cert", "UNKNOWN_CA");

  // A certificate of the server's CA: in.
  ConnectionOptions mine = tls_options();
  mine.tls.cert_file = client_files_.cert;
  mine.tls.key_file = client_files_.key;
  Events mev;
  mev.attach(mine);
  auto m = connect(mine);
  auto ok = call(*m, {"SET", "with-cert", "1"});
  ASSERT_TRUE(ok.ok()) << show(ok);
  EXPECT_EQ(*ok, Reply::status("OK"));
  EXPECT_EQ(mev.ready, 1);
  EXPECT_EQ(mev.down, 0);
  EXPECT_EQ(server_->cmd({"GET", "with-cert"}).str, "1");
}

TEST_F(RedisTlsTest, AuthAsAnAclUserOverTlsAndAWrongPasswordIsRefused) {
  RedisServerOptions so;
  so.requirepass = "admin-pw";
  so.extra_config = {"user ringcast on >ringcast-pw ~* &* +@all"};
  start_server(false, so);
  ConnectionOptions o = tls_options();
  o.username = "ringcast";
  o.password = "ringcast-pw";
  o.db = 2;
  auto c = connect(o);
  auto r = call(*c, {"SET", "acl-key", "v"});
  ASSERT_TRUE(r.ok()) << show(r);
  auto who = call(*c, {"ACL", "WHOAMI"});
  ASSERT_TRUE(who.ok()) << show(who);
  EXPECT_EQ(who->str(), "ringcast");
  EXPECT_EQ(server_->cmds({{"SELECT", "2"}, {"GET", "acl-key"}})[1].str, "v");
  const std::string list = server_->cmd({"CLIENT", "LIST"}).str;
  EXPECT_EQ(server_->clients_on_port(server_->tls_port()), 1);
  EXPECT_NE(list.find("user=ringcast"), std::string::npos) << list;

  ConnectionOptions wrong = tls_options();
  wrong.username = "ringcast";
  wrong.password = "not-it";
  Events ev;
  ev.attach(wrong);
  auto w = connect(wrong);
  CommandOptions quick;
  quick.timeout = milliseconds(500);
  auto refused = call(*w, {"SET", "wrong-pw", "1"}, quick);
  ASSERT_FALSE(refused.ok());
  EXPECT_STREQ(refused.error().reason, kTimeoutUnsent);
  EXPECT_EQ(ev.ready, 0);
  EXPECT_NE(ev.last_detail.find("WRONGPASS"), std::string::npos) << ev.last_detail;
  EXPECT_GE(w->stats().tls_handshakes, 1u) << "TLS worked; AUTH was refused";
  EXPECT_EQ(server_->cmd({"EXISTS", "wrong-pw"}).integer, 0);
}

TEST_F(RedisTlsTest, ReconnectsAfterARestartOverTls) {
  start_server(/*auth_clients=*/true);
  ConnectionOptions o = tls_options();
  o.tls.cert_file = client_files_.cert;
  o.tls.key_file = client_files_.key;
  o.db = 3;
  Events ev;
  ev.attach(o);
  auto c = connect(o);
  ASSERT_TRUE(call(*c, {"SET", "before", "1"}).ok());
  server_->restart();
  auto first = call(*c, {"SET", "after", "2"});
  if (!first.ok()) {  // the old socket may be found dead by this command: told, never re-sent
    EXPECT_STREQ(first.error().reason, kConnectionLost) << show(first);
    first = call(*c, {"SET", "after", "2"});
  }
  ASSERT_TRUE(first.ok()) << show(first);
  EXPECT_GE(c->stats().reconnects, 1u);
  EXPECT_GE(c->stats().connects, 2u);
  EXPECT_GE(c->stats().tls_handshakes, 2u) << "a new TLS session on the new connection";
  EXPECT_GE(ev.ready, 2);
  EXPECT_EQ(server_->cmds({{"SELECT", "3"}, {"GET", "after"}})[1].str, "2");

  // Commands queued while it is down go out over the next TLS connection.
  testing::expect_queued_while_down_goes_out(*c, *server_, [&] {
    return server_->cmds({{"SELECT", "3"}, {"GET", "queued"}})[1].str;
  });
}

TEST_F(RedisTlsTest, BadTlsFilesAreRefusedAtCreateNamingTheOption) {
  ConnectionOptions o;
  o.tls.enabled = true;
  o.tls.ca_file = dir_.file("missing-ca.pem");
  auto missing = Connection::create(*loop_, o);
  ASSERT_FALSE(missing.ok());
  EXPECT_STREQ(missing.error().field, "tls_ca_file");

  o.tls.ca_file = server_files_.ca;
  o.tls.cert_file = client_files_.cert;  // no key
  auto half = Connection::create(*loop_, o);
  ASSERT_FALSE(half.ok());
  EXPECT_STREQ(half.error().field, "tls_key_file");

  o.tls.key_file = other_files_.key;  // not this certificate's key
  auto mismatch = Connection::create(*loop_, o);
  ASSERT_FALSE(mismatch.ok());
  EXPECT_STREQ(mismatch.error().field, "tls_key_file");

  o.tls.key_file = client_files_.key;
  o.tls.cert_file = server_files_.ca + ".nope";
  auto no_cert = Connection::create(*loop_, o);
  ASSERT_FALSE(no_cert.ok());
  EXPECT_STREQ(no_cert.error().field, "tls_cert_file");

  o.tls.cert_file = client_files_.cert;
  auto fine = make_tls_context(o.tls);
  EXPECT_TRUE(fine.ok()) << fine.error().message;
}

// A Redis Cluster with tls-cluster yes: the client is given the TLS ports as seeds, gets the
// slot map with TLS ports (CLUSTER SLOTS answers a TLS client with them), reaches every
// primary over TLS with one shared context, and follows a MOVED to a TLS port.
TEST_F(RedisTlsTest, AClusterOverTlsRoutesToTlsPortsAndFollowsMoved) {
  RedisServerTls t;
  t.cert_file = server_files_.cert;
  t.key_file = server_files_.key;
  t.ca_file = server_files_.ca;
  t.auth_clients = true;  // the bus and the client both need a certificate
  t.cluster = true;
  t.replication = true;
  const std::string d = dir_.file("cluster");
  ASSERT_EQ(::mkdir(d.c_str(), 0700), 0) << d;
  test::RedisClusterOptions co;
  co.primaries = 3;
  co.tls = t;
  auto cluster = test::RedisCluster::start(d, co);

  ClusterOptions o;
  o.seeds = {cluster->node(1).tls_address()};
  o.connection.tls.enabled = true;
  o.connection.tls.ca_file = server_files_.ca;
  o.connection.tls.cert_file = client_files_.cert;
  o.connection.tls.key_file = client_files_.key;
  o.connection.default_timeout = seconds(5);
  auto created = ClusterClient::create(*loop_, o);
  ASSERT_TRUE(created.ok()) << created.error().message;
  auto c = std::move(created).value();
  ASSERT_TRUE(run_until(*loop_, [&] { return c->map_complete(); }));
  const auto tls_addresses = cluster->tls_addresses();
  for (size_t i = 0; i < cluster->size(); ++i) {
    EXPECT_EQ(c->node_for_slot(static_cast<uint16_t>(16384 * i / cluster->size())),
              tls_addresses[i])
        << "the map names the TLS ports";
  }
  constexpr int kKeys = 90;
  int done = 0, bad = 0;
  for (int i = 0; i < kKeys; ++i) {
    // Piece by piece: `"literal" + std::string` trips GCC 12's false -Wrestrict at -O3.
    std::string k = "tls-spread:";
    k += std::to_string(i);
    c->command({"SET", k, k}, [&](Result<Reply> r) {
      done++;
      if (!r.ok() || !r->is_status()) bad++;
    });
  }
  ASSERT_TRUE(run_until(*loop_, [&] { return done == kKeys; }));
  EXPECT_EQ(bad, 0);
  EXPECT_EQ(c->stats().nodes, 3u);
  for (size_t i = 0; i < cluster->size(); ++i) {
    Connection* conn = c->connection(tls_addresses[i]);
    ASSERT_NE(conn, nullptr) << tls_addresses[i];
    EXPECT_TRUE(conn->ready());
    EXPECT_GE(conn->stats().tls_handshakes, 1u);
    EXPECT_GE(cluster->node(i).clients_on_port(cluster->node(i).tls_port()), 1);
  }

  // Move a key's slot 0 -> 2 behind the client's back: MOVED names node 2's TLS port.
  std::string key;
  for (int i = 0; i < 100000 && key.empty(); ++i) {
    std::string k = "tls-moved:";
    k += std::to_string(i);
    if (cluster->owner_of(key_slot(k)) == 0) key = k;
  }
  ASSERT_FALSE(key.empty());
  const int slot = key_slot(key);
  ASSERT_TRUE(call(*c, {"SET", key, "here"}).ok());
  cluster->begin_migration(slot, 0, 2);
  cluster->migrate_keys(slot, 0, 2, {key});
  cluster->finish_migration(slot, 2);
  auto r = call(*c, {"GET", key});
  ASSERT_TRUE(r.ok()) << show(r);
  EXPECT_EQ(*r, Reply::string("here"));
  EXPECT_EQ(c->stats().moved, 1u);
  EXPECT_EQ(c->node_for_slot(static_cast<uint16_t>(slot)), tls_addresses[2]);
}

}  // namespace
}  // namespace ringcast::redis
