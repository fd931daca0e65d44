// SPEC R14 (docs/security.md "Redis"), end to end: `ringcast serve` on a redis-server that
// takes clients on its TLS port only with a client certificate (tls-auth-clients yes). The
// daemon's store, partition leases, cluster inbox and a `[[intake.redis]]` Streams source all
// connect to the TLS port (storage.redis.tls* from RINGCAST_* variables, the source's tls* from
// the file): events posted over HTTP and entries XADDed to the stream are delivered, and every
// connection of the daemon is on the TLS port. A daemon that trusts another CA does not come up,
// with a line that names TLS; `config check` names a client certificate without its key.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/e2e/daemon.h"
#include "tests/support/process.h"
#include "tests/support/redis_server.h"
#include "tests/support/require.h"
#include "tests/support/test_ca.h"

namespace ringcast::e2e {
namespace {

using test::RedisServer;
using test::SinkProcess;
using test::TempDir;
using test::TestCa;

constexpr const char* kTenant = "tls-tenant";

struct ClientCert {
  std::string cert, key;
};

// storage.redis on `address` with TLS (the CA, and the client certificate when given), and
// [cluster] on it with one node (so the leases and the inbox connect too).
std::vector<std::string> tls_env(const std::string& address, const std::string& ca,
                                 const ClientCert& client) {
  return {"RINGCAST_STORAGE_BACKEND=redis",
          "RINGCAST_STORAGE_REDIS_SERVERS=" + address,
          "RINGCAST_STORAGE_REDIS_WAIT_REPLICAS=0",
          "RINGCAST_STORAGE_REDIS_COMMAND_TIMEOUT=500ms",
          "RINGCAST_STORAGE_REDIS_TLS=true",
          "RINGCAST_STORAGE_REDIS_TLS_CA_FILE=" + ca,
          "RINGCAST_STORAGE_REDIS_TLS_CERT_FILE=" + client.cert,
          "RINGCAST_STORAGE_REDIS_TLS_KEY_FILE=" + client.key,
          "RINGCAST_CLUSTER_ENABLED=true",
          std::string("RINGCAST_CLUSTER_SECRET=") + Daemon::kClusterSecret,
          "RINGCAST_CLUSTER_NODE_ID=tls-node",
          "RINGCAST_CLUSTER_LEASE_TTL=1s",
          "RINGCAST_CLUSTER_SAFETY_MARGIN=250ms",
          "RINGCAST_CLUSTER_HEARTBEAT_INTERVAL=200ms",
          "RINGCAST_CLUSTER_MEMBER_TTL=700ms"};
}

std::string intake_toml(const std::string& address, const std::string& ca,
                        const ClientCert& client) {
  // Piece by piece: `"literal" + std::string` trips GCC 12's false -Wrestrict at -O3.
  std::string t = "[[intake.redis]]\nname = \"bus\"\nservers = [\"";
  t += address;
  t += "\"]\nstreams = [\"events\"]\ndead_letter_stream = \"events:dead\"\nblock = \"200ms\"\n";
  t += "tls = true\ntls_ca_file = \"";
  t += ca;
  t += "\"\ntls_cert_file = \"";
  t += client.cert;
  t += "\"\ntls_key_file = \"";
  t += client.key;
  t += "\"\n";
  return t;
}

TEST(E2eRedisTls, StoreLeasesAndStreamsIntakeRunOnTheTlsPortAndAWrongCaDoesNotComeUp) {
  RINGCAST_E2E_SINGLE_NODE_ONLY("starts its own Redis with TLS");
  if (!RedisServer::available()) RINGCAST_SKIP_MISSING() << "redis-server is not installed";
  TempDir dir("e2e-redis-tls");
  TempDir redis_dir("e2e-redis-tls-server");
  const TestCa ca = TestCa::create("e2e redis CA");
  const test::CertFiles server = ca.write_localhost(dir.path());  // IP SAN 127.0.0.1
  const test::LeafCert leaf = ca.issue({"ringcast-node"});
  const ClientCert client{dir.file("client-cert.pem"), dir.file("client-key.pem")};
  test::write_file(client.cert, leaf.cert_pem);
  test::write_file(client.key, leaf.key_pem);

  test::RedisServerOptions ro;
  test::RedisServerTls tls;
  tls.cert_file = server.cert;
  tls.key_file = server.key;
  tls.ca_file = server.ca;
  tls.auth_clients = true;
  ro.tls = tls;
  auto redis = RedisServer::start(redis_dir.path(), ro);
  SinkProcess sink = SinkProcess::start({"--ids-file", dir.file("ids.txt"), "--quiet"}, dir.path());

  DaemonOptions o;
  o.env = tls_env(redis->tls_address(), server.ca, client);
  o.extra_toml = intake_toml(redis->tls_address(), server.ca, client);
  Daemon d(o);
  ASSERT_NO_THROW(d.start());
  // The lease of the tenant's partition comes a moment after "listening on".
  Reply cr;
  ASSERT_TRUE(wait_until(
      [&] {
        cr = create_endpoint(
            d, kTenant, "{\"url\":" + quote(sink.base_url() + "/hooks") + ",\"policy\":\"fast\"}");
        return cr.status == 201;
      },
      scaled(20s), 100ms))
      << cr.describe() << "\n"
      << d.output();
  const std::string endpoint = cr.json()["id"].str();

  constexpr int kEach = 20;
  std::vector<std::string> ids;
  for (int i = 0; i < kEach; ++i) {
    std::string id = "http-";
    id += std::to_string(i);
    Reply r = submit_event(d, kTenant, id, "order.paid", "{\"n\":1}");
    ASSERT_EQ(r.status, 202) << r.describe();
    ids.push_back(id);
  }
  for (int i = 0; i < kEach; ++i) {
    std::string id = "bus-";
    id += std::to_string(i);
    auto rep = redis->cmd({"XADD", "events", "*", "tenant", kTenant, "id", id, "type", "order.paid",
                           "payload", "{\"n\":2}"});
    ASSERT_FALSE(rep.is_error()) << rep.str;
    ids.push_back(id);
  }
  // Every event, from either intake, is delivered.
  std::string last;
  const bool all_delivered = wait_until(
      [&] {
        Json list = list_deliveries(d, kTenant, endpoint);
        int delivered = 0;
        last.clear();
        for (const auto& item : list.items()) {
          if (item["status"].str() == "delivered") {
            delivered++;
          } else {
            last = item["event_id"].str() + " is " + item["status"].str();
          }
        }
        return delivered == 2 * kEach;
      },
      scaled(30s), 100ms);
  EXPECT_TRUE(all_delivered) << last << "\n" << d.output();
  // ... with a 200 at the receiver for each one's webhook id.
  const std::vector<std::string> message_ids = message_ids_of(d, kTenant, ids);
  EXPECT_TRUE(wait_until([&] { return missing_ids(sink, message_ids).empty(); }, scaled(10s)))
      << missing_ids(sink, message_ids).size() << " without a 200";
  // The stream's entries were acknowledged: nothing pending in the group.
  auto pending = redis->cmd({"XPENDING", "events", "ringcast"});
  ASSERT_FALSE(pending.elements.empty()) << pending.str;
  EXPECT_EQ(pending.elements[0].integer, 0);

  // Every connection of the daemon (store, leases, inbox, the source's two) is on the TLS
  // port; on the plain port there is only the oracle's own.
  EXPECT_GE(redis->clients_on_port(redis->tls_port()), 5) << redis->cmd({"CLIENT", "LIST"}).str;
  EXPECT_EQ(redis->clients_on_port(redis->port()), 1) << redis->cmd({"CLIENT", "LIST"}).str;
  EXPECT_EQ(d.terminate().code, 0) << d.output();

  // A Streams source whose tls_ca_file is another CA: the daemon runs (its store connects),
  // and the source says why it cannot, in GET /v1/intake and once in the log.
  const TestCa other = TestCa::create("not the redis CA");
  const std::string other_ca = dir.file("other-ca.pem");
  test::write_file(other_ca, other.ca_pem);
  DaemonOptions io;
  io.env = tls_env(redis->tls_address(), server.ca, client);
  io.extra_toml = intake_toml(redis->tls_address(), other_ca, client);
  Daemon bad_intake(io);
  ASSERT_NO_THROW(bad_intake.start());
  std::string intake;
  EXPECT_TRUE(wait_until(
      [&] {
        intake = bad_intake.call("GET", "/v1/intake").body;
        return intake.find("\"connection_error\":\"redis_tls_cert") != std::string::npos;
      },
      scaled(15s)))
      << intake;
  const std::string logged = bad_intake.output();
  const std::string line = "intake bus: Redis connection down: redis_tls_cert";
  const size_t first = logged.find(line);
  EXPECT_NE(first, std::string::npos) << logged;
  EXPECT_EQ(logged.find(line, first + 1), std::string::npos) << "logged once:\n" << logged;
  EXPECT_EQ(bad_intake.terminate().code, 0) << bad_intake.output();

  // Another CA in storage.redis.tls_ca_file: the server's certificate does not verify, the
  // daemon does not run without its store, and says why.
  DaemonOptions wo;
  wo.env = tls_env(redis->tls_address(), other_ca, client);
  Daemon wrong(wo);
  // The store asks 21 times (command_timeout 500 ms each) before it gives up: about 13 s.
  EXPECT_THROW(wrong.start(scaled(60s)), std::runtime_error);
  EXPECT_FALSE(wrong.running());
  const std::string out = wrong.output();
  EXPECT_NE(out.find("cannot start on the store"), std::string::npos) << out;
  EXPECT_NE(out.find("over TLS"), std::string::npos) << out;
  EXPECT_NE(out.find("TLS certificate did not verify"), std::string::npos) << out;
  EXPECT_NE(out.find("redis_tls_cert"), std::string::npos) << out;
}

TEST(E2eRedisTls, ConfigCheckNamesAClientCertificateWithoutItsKey) {
  TempDir dir("e2e-redis-tls-check");
  const TestCa ca = TestCa::create();
  const test::CertFiles files = ca.write_localhost(dir.path());
  DaemonOptions o;
  o.env = {"RINGCAST_STORAGE_BACKEND=redis", "RINGCAST_STORAGE_REDIS_TLS=true",
           "RINGCAST_STORAGE_REDIS_TLS_CA_FILE=" + files.ca,
           "RINGCAST_STORAGE_REDIS_TLS_CERT_FILE=" + files.cert};
  Daemon d(o);  // writes the config only
  test::ProcessOptions po;
  po.stdout_path = dir.file("check.out");
  po.stderr_path = dir.file("check.err");
  po.env = o.env;
  po.cwd = dir.path();
  test::Process p =
      test::Process::start({ringcast_binary(), "--config", d.config_path(), "config", "check"}, po);
  auto st = p.wait(scaled(10s));
  ASSERT_TRUE(st.has_value());
  EXPECT_FALSE(st->ok());
  const std::string err = test::read_file(dir.file("check.err"));
  EXPECT_NE(err.find("storage.redis.tls_key_file"), std::string::npos) << err;

  // With the key it passes.
  po.env.push_back("RINGCAST_STORAGE_REDIS_TLS_KEY_FILE=" + files.key);
  po.stdout_path = dir.file("check-ok.out");
  po.stderr_path = dir.file("check-ok.err");
  test::Process ok =
      test::Process::start({ringcast_binary(), "--config", d.config_path(), "config", "check"}, po);
  auto ok_st = ok.wait(scaled(10s));
  ASSERT_TRUE(ok_st.has_value());
  EXPECT_TRUE(ok_st->ok()) << test::read_file(dir.file("check-ok.err"));
}

}  // namespace
}  // namespace ringcast::e2e
