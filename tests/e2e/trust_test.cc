// End to end, SPEC R14 on the real daemon (and on the 3-node cluster with
// RINGCAST_E2E_BACKEND=cluster): the platform's switches refuse merchants; a credential that
// ends takes its portal links and sessions with it on every node; the portal's secret is the
// store's own and outlives a restart; /metrics is the platform's; receiver credentials are
// write-only; the data dir is the service user's alone.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <unistd.h>

#include "core/types.h"
#include "tests/e2e/daemon.h"
#include "tests/support/test_ca.h"

namespace ringcast::e2e {
namespace {

using namespace std::chrono_literals;

std::string error_code(const Reply& r) {
  return r.json()["error"]["code"].str();
}

struct Session {
  std::string cookie;  // "rc_portal=…"
  std::string csrf;
};

std::string link_token(const Daemon& d, const std::string& tenant, const std::string& scope,
                       const std::optional<std::string>& auth) {
  Reply link = d.call_with_auth("POST", "/v1/tenants/" + tenant + "/portal-links",
                                R"({"scope":")" + scope + R"("})", auth);
  EXPECT_EQ(link.status, 201) << link.describe();
  return link.status == 201 ? link.json()["token"].str() : std::string();
}

Reply open_link(const Daemon& d, size_t node, const std::string& token) {
  return http_request(d.port(node), "POST", "/portal/session", R"({"link":")" + token + "\"}",
                      {"Content-Type: application/json"});
}

// Cluster mode: a key made on one node is taken by the others within server.key_refresh.
void wait_for_key_on_every_node(const Daemon& d, const std::string& bearer) {
  for (size_t n = 0; n < d.nodes(); ++n) {
    EXPECT_TRUE(wait_until(
        [&] {
          return d.call_node(n, "GET", "/v1/tenants/acme/settings", "", bearer).status != 401;
        },
        10s))
        << "node " << n << " does not take the new key";
  }
}

Session session_of(const Reply& s) {
  Session out;
  const size_t at = s.headers.find("rc_portal=");
  if (at == std::string::npos) return out;
  out.cookie = s.headers.substr(at, s.headers.find(';', at) - at);
  out.csrf = s.json()["csrf_token"].str();
  return out;
}

TEST(E2eTrust, ALinkAndItsSessionsEndWithTheKeyThatMintedThemOnEveryNode) {
  Daemon d;
  ASSERT_NO_THROW(d.start());
  test::TempDir dir("e2e-trust-revoke");
  test::SinkProcess sink = test::SinkProcess::start({"--quiet"}, dir.path());
  const std::string a = "/v1/tenants/acme";
  ASSERT_FALSE(endpoint_with_policy(d, "acme", sink.base_url() + "/a", "quick").empty());

  Reply made = d.call("POST", a + "/keys", R"({"name":"merchant backend"})");
  ASSERT_EQ(made.status, 201) << made.describe();
  const std::string key = "Bearer " + made.json()["key"].str();
  const std::string key_id = made.json()["record"]["id"].str();
  wait_for_key_on_every_node(d, key);

  const std::string by_key = link_token(d, "acme", "manage", key);
  const std::string spare = link_token(d, "acme", "view", key);  // never opened before revoke
  const std::string by_admin =
      link_token(d, "acme", "manage", std::string("Bearer ") + Daemon::kToken);
  Reply opened = open_link(d, 0, by_key);
  ASSERT_EQ(opened.status, 200) << opened.describe();
  const Session s = session_of(opened);
  const Session admins = session_of(open_link(d, 0, by_admin));
  ASSERT_FALSE(s.cookie.empty());
  for (size_t n = 0; n < d.nodes(); ++n) {
    Reply r = http_request(d.port(n), "GET", a + "/endpoints", "", {"Cookie: " + s.cookie});
    EXPECT_EQ(r.status, 200) << "node " << n << ": " << r.describe();
  }

  ASSERT_EQ(d.call("DELETE", a + "/keys/" + key_id).status, 204);
  // Within server.key_refresh on every node: the session, the link it came from and a link of
  // the same key never opened are all refused (SPEC R14.3).
  for (size_t n = 0; n < d.nodes(); ++n) {
    EXPECT_TRUE(wait_until(
        [&] {
          return http_request(d.port(n), "GET", a + "/endpoints", "", {"Cookie: " + s.cookie})
                     .status == 401;
        },
        10s))
        << "node " << n << " still takes a session of a revoked key's link";
    Reply r = http_request(d.port(n), "GET", a + "/endpoints", "", {"Cookie: " + s.cookie});
    EXPECT_EQ(error_code(r), "session_revoked") << r.describe();
    r = open_link(d, n, by_key);
    EXPECT_EQ(r.status, 401) << r.describe();
    EXPECT_EQ(error_code(r), "link_revoked") << r.describe();
    EXPECT_EQ(open_link(d, n, spare).status, 401);
    // What the admin minted goes on.
    r = http_request(d.port(n), "GET", a + "/endpoints", "", {"Cookie: " + admins.cookie});
    EXPECT_EQ(r.status, 200) << "node " << n << ": " << r.describe();
  }
}

// SPEC R14.3: the admin ends every portal link and session of a tenant at once, on every node
// within server.key_refresh; another tenant's, and a link minted afterwards, work.
TEST(E2eTrust, TheAdminEndsEveryPortalSessionOfATenantAtOnce) {
  Daemon d;
  ASSERT_NO_THROW(d.start());
  test::TempDir dir("e2e-trust-end");
  test::SinkProcess sink = test::SinkProcess::start({"--quiet"}, dir.path());
  ASSERT_FALSE(endpoint_with_policy(d, "acme", sink.base_url() + "/a", "quick").empty());
  ASSERT_FALSE(endpoint_with_policy(d, "zeta", sink.base_url() + "/z", "quick").empty());
  const std::string admin = std::string("Bearer ") + Daemon::kToken;
  const Session acme = session_of(open_link(d, 0, link_token(d, "acme", "view", admin)));
  const std::string pending_link = link_token(d, "acme", "view", admin);
  const Session zeta = session_of(open_link(d, 0, link_token(d, "zeta", "view", admin)));
  ASSERT_FALSE(acme.cookie.empty());
  std::this_thread::sleep_for(std::chrono::milliseconds(5));  // the cutoff is after them
  Reply ended = d.call("POST", "/v1/tenants/acme/portal-sessions/end");
  ASSERT_EQ(ended.status, 200) << ended.describe();
  EXPECT_EQ(ended.json()["tenant"].str(), "acme");
  for (size_t n = 0; n < d.nodes(); ++n) {
    EXPECT_TRUE(wait_until(
        [&] {
          return http_request(d.port(n), "GET", "/v1/tenants/acme/endpoints", "",
                              {"Cookie: " + acme.cookie})
                     .status == 401;
        },
        10s))
        << "node " << n << " still takes an ended session";
    EXPECT_EQ(open_link(d, n, pending_link).status, 401) << "node " << n;
    Reply z = http_request(d.port(n), "GET", "/v1/tenants/zeta/endpoints", "",
                           {"Cookie: " + zeta.cookie});
    EXPECT_EQ(z.status, 200) << "node " << n << ": " << z.describe();
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const Session fresh = session_of(open_link(d, 0, link_token(d, "acme", "view", admin)));
  ASSERT_FALSE(fresh.cookie.empty());
  EXPECT_EQ(
      http_request(d.port(), "GET", "/v1/tenants/acme/endpoints", "", {"Cookie: " + fresh.cookie})
          .status,
      200);
}

TEST(E2eTrust, TheSubscriptionAndTheBreakerResetAreThePlatformsOnly) {
  Daemon d;
  ASSERT_NO_THROW(d.start());
  test::TempDir dir("e2e-trust-platform");
  test::SinkProcess sink = test::SinkProcess::start({"--quiet"}, dir.path());
  const std::string a = "/v1/tenants/acme";
  ASSERT_FALSE(endpoint_with_policy(d, "acme", sink.base_url() + "/a", "quick").empty());
  Reply made = d.call("POST", a + "/keys", "{}");
  ASSERT_EQ(made.status, 201) << made.describe();
  const std::string key = "Bearer " + made.json()["key"].str();
  wait_for_key_on_every_node(d, key);
  const Session manage = session_of(
      open_link(d, 0, link_token(d, "acme", "manage", std::string("Bearer ") + Daemon::kToken)));
  for (size_t n = 0; n < d.nodes(); ++n) {
    Reply r = d.call_node(n, "PUT", a + "/subscription", R"({"active":false})", key);
    EXPECT_EQ(r.status, 403) << r.describe();
    EXPECT_EQ(error_code(r), "admin_only");
    r = d.call_node(n, "POST", a + "/breaker/reset", "", key);
    EXPECT_EQ(r.status, 403) << r.describe();
    EXPECT_EQ(error_code(r), "admin_only");
    r = http_request(d.port(n), "POST", a + "/breaker/reset", "",
                     {"Cookie: " + manage.cookie, "X-CSRF-Token: " + manage.csrf});
    EXPECT_EQ(r.status, 403) << r.describe();
    EXPECT_EQ(error_code(r), "admin_only");
  }
  // The platform can; the subscription was never touched by the refused calls.
  Reply sub = d.call("PUT", a + "/subscription", R"({"active":true})");
  EXPECT_EQ(sub.status, 200) << sub.describe();
  Reply reset = d.call("POST", a + "/breaker/reset");
  EXPECT_EQ(reset.status, 200) << reset.describe();
}

TEST(E2eTrust, ThePortalSecretIsTheStoresOwnAndOutlivesARestart) {
  Daemon d;
  ASSERT_NO_THROW(d.start());
  test::TempDir dir("e2e-trust-secret");
  test::SinkProcess sink = test::SinkProcess::start({"--quiet"}, dir.path());
  ASSERT_FALSE(endpoint_with_policy(d, "acme", sink.base_url() + "/a", "quick").empty());
  // No portal.secret in the config: the daemon made one and kept it in the store.
  ASSERT_EQ(d.config_text().find("[portal]"), std::string::npos);
  const std::string token = link_token(d, "acme", "view", std::string("Bearer ") + Daemon::kToken);
  const Session s = session_of(open_link(d, 0, token));
  ASSERT_FALSE(s.cookie.empty());
  // Every node checks it alike (one secret through Redis in cluster mode).
  for (size_t n = 0; n < d.nodes(); ++n) {
    EXPECT_EQ(open_link(d, n, token).status, 200) << "node " << n;
  }
  ASSERT_TRUE(d.terminate().ok()) << d.output();
  ASSERT_NO_THROW(d.start());
  // Cluster mode: right after the restart a partition may be between owners (503 not_owner).
  Reply r;
  EXPECT_TRUE(wait_until(
      [&] {
        r = http_request(d.port(), "GET", "/v1/tenants/acme/endpoints", "",
                         {"Cookie: " + s.cookie});
        return r.status != 503;
      },
      10s));
  EXPECT_EQ(r.status, 200) << r.describe();
}

TEST(E2eTrust, MetricsAreThePlatformsAndReceiverCredentialsAreWriteOnly) {
  Daemon d;
  ASSERT_NO_THROW(d.start());
  test::TempDir dir("e2e-trust-reads");
  const std::string headers_file = dir.file("headers.jsonl");
  test::SinkProcess sink =
      test::SinkProcess::start({"--headers-file", headers_file, "--quiet"}, dir.path());
  const std::string a = "/v1/tenants/acme";
  Reply ep = d.call(
      "POST", a + "/endpoints",
      R"({"url":")" + sink.base_url() +
          R"(/h","policy":"quick","headers":{"Authorization":"Basic cmVjZWl2ZXI6czNjcjN0","X-Api-Key":"k-9f8e7d","X-Env":"prod"}})");
  ASSERT_EQ(ep.status, 201) << ep.describe();
  const std::string id = ep.json()["id"].str();
  Reply ro = d.call("POST", a + "/keys", R"({"scope":"read_only"})");
  ASSERT_EQ(ro.status, 201) << ro.describe();
  const std::string view = "Bearer " + ro.json()["key"].str();
  wait_for_key_on_every_node(d, view);
  for (const std::optional<std::string>& who :
       {std::optional<std::string>(std::string("Bearer ") + Daemon::kToken),
        std::optional<std::string>(view)}) {
    for (const std::string& path : {a + "/endpoints", a + "/endpoints/" + id}) {
      Reply r = d.call_with_auth("GET", path, "", who);
      ASSERT_EQ(r.status, 200) << r.describe();
      EXPECT_EQ(r.body.find("cmVjZWl2ZXI6czNjcjN0"), std::string::npos) << r.body;
      EXPECT_EQ(r.body.find("k-9f8e7d"), std::string::npos) << r.body;
      EXPECT_NE(r.body.find(R"("Authorization":null)"), std::string::npos) << r.body;
      EXPECT_NE(r.body.find(R"("X-Env":"prod")"), std::string::npos) << r.body;
    }
  }
  // The receiver still gets them.
  ASSERT_EQ(d.call("POST", a + "/events", R"({"id":"w-1","type":"t","payload":{}})").status, 202);
  ASSERT_TRUE(wait_until(
      [&] {
        return test::read_file(headers_file).find("cmVjZWl2ZXI6czNjcjN0") != std::string::npos;
      },
      10s))
      << test::read_file(headers_file);

  // /metrics: the admin token, not a tenant key, not nothing.
  for (size_t n = 0; n < d.nodes(); ++n) {
    EXPECT_EQ(d.call_node(n, "GET", "/metrics", "", std::nullopt).status, 401);
    EXPECT_EQ(d.call_node(n, "GET", "/metrics", "", view).status, 401);
    EXPECT_EQ(d.call_node(n, "GET", "/metrics").status, 200);
  }
  // No value of a receiver credential in a log or a metric.
  const std::string metrics = d.call("GET", "/metrics").body;
  EXPECT_EQ(metrics.find("cmVjZWl2ZXI6czNjcjN0"), std::string::npos);
  EXPECT_EQ(d.output(1 << 20).find("cmVjZWl2ZXI6czNjcjN0"), std::string::npos);
}

TEST(E2eTrust, TheDataDirIsTheServiceUsersAlone) {
  RINGCAST_E2E_SINGLE_NODE_ONLY(
      "the data dir holds RocksDB on one node; Redis keeps the cluster's");
  Daemon d;
  ASSERT_NO_THROW(d.start());
  test::TempDir dir("e2e-trust-files");
  test::SinkProcess sink = test::SinkProcess::start({"--quiet"}, dir.path());
  ASSERT_FALSE(endpoint_with_policy(d, "acme", sink.base_url() + "/a", "quick").empty());
  ASSERT_EQ(
      d.call("POST", "/v1/tenants/acme/events", R"({"id":"f-1","type":"t","payload":{}})").status,
      202);
  ASSERT_TRUE(d.terminate().ok()) << d.output();
  const std::filesystem::path data = d.dir() + "/data";
  size_t files = 0;
  struct stat st {};
  ASSERT_EQ(::stat(data.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u) << data;
  for (const auto& e : std::filesystem::recursive_directory_iterator(data)) {
    ASSERT_EQ(::stat(e.path().c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 077, 0u) << e.path() << " mode " << std::oct << (st.st_mode & 0777);
    ++files;
  }
  EXPECT_GT(files, 5u);  // RocksDB's files and the payload and lease logs were all looked at
}

// SPEC R14 "the listener": one client address cannot hold every connection, and an address
// that keeps failing authentication waits out the minute; other addresses go on.
TEST(E2eTrust, TheListenerCapsConnectionsAndSlowsFailedAuthenticationPerClientAddress) {
  RINGCAST_E2E_SINGLE_NODE_ONLY(
      "one listener's limits; the nodes of a cluster each have their own");
  DaemonOptions o;
  o.env = {"RINGCAST_SERVER_MAX_CONNECTIONS_PER_IP=4",
           "RINGCAST_SERVER_AUTH_FAILURES_PER_MINUTE=5"};
  Daemon d(o);
  ASSERT_NO_THROW(d.start());

  // Four idle connections from 127.0.0.3 are held; a fifth is closed at once, unanswered.
  std::vector<int> held;
  for (int i = 0; i < 4; ++i) {
    held.push_back(open_connection(d.port(), "127.0.0.3"));
    ASSERT_GE(held.back(), 0);
  }
  // The accept of the fourth may still be in flight: the fifth is refused once it is counted.
  EXPECT_TRUE(wait_until(
      [&] {
        return http_request_from("127.0.0.3", d.port(), "GET", "/healthz", "", {}).status == 0;
      },
      5s));
  // Another address is not affected.
  EXPECT_EQ(http_request_from("127.0.0.4", d.port(), "GET", "/healthz", "", {}).status, 200);
  ::close(held.back());
  held.pop_back();
  EXPECT_TRUE(wait_until(
      [&] {
        return http_request_from("127.0.0.3", d.port(), "GET", "/healthz", "", {}).status == 200;
      },
      5s));
  for (int fd : held) ::close(fd);

  // Five wrong tokens from 127.0.0.5 in a minute: 401 each; then 429 for the rest of the
  // minute, even with the right token (a right guess must not show).
  const std::string admin = std::string("Authorization: Bearer ") + Daemon::kToken;
  const std::string eps = "/v1/tenants/acme/endpoints";
  int failed = 0;
  Reply r;
  for (int i = 0; i < 5; ++i) {
    r = http_request_from("127.0.0.5", d.port(), "GET", eps, "",
                          {"Authorization: Bearer guess-" + std::to_string(i)});
    failed += r.status == 401;
  }
  // A minute may turn during the loop and start a new count: then one more failure is needed.
  r = http_request_from("127.0.0.5", d.port(), "GET", eps, "", {admin});
  if (r.status != 429) {
    for (int i = 0; i < 5 && r.status != 429; ++i) {
      (void)http_request_from("127.0.0.5", d.port(), "GET", eps, "", {"Authorization: Bearer x"});
      r = http_request_from("127.0.0.5", d.port(), "GET", eps, "", {admin});
    }
  }
  EXPECT_EQ(failed, 5);
  ASSERT_EQ(r.status, 429) << r.describe();
  EXPECT_EQ(error_code(r), "too_many_auth_failures");
  const size_t ra = r.headers.find("Retry-After: ");
  ASSERT_NE(ra, std::string::npos) << r.headers;
  const int wait_s = std::atoi(r.headers.c_str() + ra + 13);
  EXPECT_GE(wait_s, 1);
  EXPECT_LE(wait_s, 60);
  // Another address still works, with the same token.
  EXPECT_NE(http_request_from("127.0.0.6", d.port(), "GET", eps, "", {admin}).status, 429);
  const std::string metrics = d.call_node(0, "GET", "/metrics").body;
  EXPECT_NE(metrics.find("ringcast_api_auth_throttled_total "), std::string::npos) << metrics;
  EXPECT_EQ(metrics.find("ringcast_api_auth_throttled_total 0\n"), std::string::npos);
}

// One body limit for a request without a valid credential, whatever its path's spelling.
TEST(E2eTrust, AnUnauthenticatedBodyHasOneLimitHoweverThePathIsSpelled) {
  Daemon d;
  ASSERT_NO_THROW(d.start());
  const std::string big(200 * 1024, 'x');  // over the 64 KiB limit, under the bulk one
  for (const char* target :
       {"/v1/events/bulk", "//v1/events/bulk", "/v1//events/bulk", "/portal/session", "/nowhere"}) {
    Reply r = http_request(d.port(), "POST", target, big, {"Content-Type: application/x-ndjson"});
    EXPECT_EQ(r.status, 413) << target << ": " << r.describe();
  }
}

// SPEC R14 quotas: each a 429 naming its limit, with Retry-After; another tenant (another
// endpoint) is not held by it.
TEST(E2eTrust, EndpointsPerTenantAndTestSendsPerMinuteAreBounded) {
  DaemonOptions o;
  o.env = {"RINGCAST_LIMITS_MAX_ENDPOINTS_PER_TENANT=3", "RINGCAST_LIMITS_TEST_SENDS_PER_MINUTE=2"};
  Daemon d(o);
  ASSERT_NO_THROW(d.start());
  test::TempDir dir("e2e-trust-quotas");
  test::SinkProcess sink = test::SinkProcess::start({"--quiet"}, dir.path());
  std::vector<std::string> ids;
  for (int i = 0; i < 3; ++i) {
    const std::string id =
        endpoint_with_policy(d, "acme", sink.base_url() + "/e" + std::to_string(i), "quick");
    ASSERT_FALSE(id.empty());
    ids.push_back(id);
  }
  Reply over = d.call("POST", "/v1/tenants/acme/endpoints",
                      R"({"url":")" + sink.base_url() + R"(/e3","policy":"quick"})");
  EXPECT_EQ(over.status, 429) << over.describe();
  EXPECT_EQ(error_code(over), "too_many_endpoints");
  EXPECT_EQ(over.json()["error"]["field"].str(), "limits.max_endpoints_per_tenant");
  EXPECT_NE(over.headers.find("Retry-After: "), std::string::npos) << over.headers;
  EXPECT_FALSE(endpoint_with_policy(d, "zeta", sink.base_url() + "/z", "quick").empty());
  // One deleted: room for one more.
  ASSERT_EQ(d.call("DELETE", "/v1/tenants/acme/endpoints/" + ids.back()).status, 200);
  ids.pop_back();
  EXPECT_FALSE(endpoint_with_policy(d, "acme", sink.base_url() + "/e4", "quick").empty());

  // Test sends: 2 per endpoint per minute. A minute may turn between the calls; then the count
  // starts again and one more call reaches the limit.
  const std::string test0 = "/v1/tenants/acme/endpoints/" + ids[0] + "/test";
  Reply r;
  int accepted = 0;
  for (int i = 0; i < 5; ++i) {
    r = d.call("POST", test0);
    if (r.status != 202) break;
    ++accepted;
  }
  EXPECT_GE(accepted, 2);
  EXPECT_LE(accepted, 4);
  EXPECT_EQ(r.status, 429) << r.describe();
  EXPECT_EQ(error_code(r), "too_many_test_sends");
  EXPECT_EQ(r.json()["error"]["field"].str(), "limits.test_sends_per_minute");
  // Another endpoint has its own count.
  EXPECT_EQ(d.call("POST", "/v1/tenants/acme/endpoints/" + ids[1] + "/test").status, 202);
}

// SPEC R14 quotas: the attempts chart's scan is bounded by the deliveries it reads, every one
// counted whether it has attempts or not (a tenant whose deliveries are all held still reaches
// the bound), so one tenant's chart cannot hold the read pool every tenant's log reads share.
TEST(E2eTrust, TheAttemptsChartsScanIsBoundedByTheDeliveriesItReads) {
  DaemonOptions o;
  o.env = {"RINGCAST_LIMITS_STATS_MAX_ROWS=5"};
  Daemon d(o);
  ASSERT_NO_THROW(d.start());
  test::TempDir dir("e2e-trust-chart");
  test::SinkProcess sink = test::SinkProcess::start({"--quiet"}, dir.path());
  // "held": 8 deliveries, none attempted (an inactive subscription holds them, SPEC R6).
  const std::string held_ep = endpoint_with_policy(d, "held", sink.base_url() + "/h", "quick");
  ASSERT_FALSE(held_ep.empty());
  ASSERT_EQ(d.call("PUT", "/v1/tenants/held/subscription", R"({"active":false})").status, 200);
  for (int i = 0; i < 8; ++i) {
    ASSERT_EQ(submit_event(d, "held", "h-" + std::to_string(i), "a.b", "{}").status, 202);
  }
  // "few": 3 deliveries, each delivered once.
  const std::string few_ep = endpoint_with_policy(d, "few", sink.base_url() + "/f", "quick");
  ASSERT_FALSE(few_ep.empty());
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(submit_event(d, "few", "f-" + std::to_string(i), "a.b", "{}").status, 202);
  }
  ASSERT_TRUE(wait_until([&] { return list_deliveries(d, "held", held_ep).size() == 8; }, 10s));
  ASSERT_TRUE(wait_until(
      [&] {
        const Json l = list_deliveries(d, "few", few_ep);
        if (l.size() != 3) return false;
        for (const Json& x : l.items())
          if (x["status"].str() != "delivered") return false;
        return true;
      },
      10s));

  Reply held = d.call("GET", "/v1/tenants/held/stats/attempts");
  ASSERT_EQ(held.status, 200) << held.describe();
  const Json held_chart = held.json();  // the loops below read into it: it must outlive them
  EXPECT_TRUE(held_chart["truncated"].boolean()) << held.body;
  int64_t attempts = 0;
  for (const Json& b : held_chart["buckets"].items())
    attempts += b["delivered"].i64() + b["failed"].i64() + b["unknown"].i64();
  EXPECT_EQ(attempts, 0);

  Reply few = d.call("GET", "/v1/tenants/few/stats/attempts");
  ASSERT_EQ(few.status, 200) << few.describe();
  const Json few_chart = few.json();
  EXPECT_FALSE(few_chart["truncated"].boolean()) << few.body;
  int64_t delivered = 0;
  for (const Json& b : few_chart["buckets"].items()) delivered += b["delivered"].i64();
  EXPECT_EQ(delivered, 3) << few.body;
}

// SPEC R14: limits.tenant_events_per_second bounds one tenant's intake on a node, over the
// single and the bulk route; another tenant is not held; a refused event was not taken in.
TEST(E2eTrust, ATenantsIntakeRateIsBoundedPerNode) {
  DaemonOptions o;
  o.env = {"RINGCAST_LIMITS_TENANT_EVENTS_PER_SECOND=2"};
  Daemon d(o);
  ASSERT_NO_THROW(d.start());
  test::TempDir dir("e2e-trust-rate");
  test::SinkProcess sink = test::SinkProcess::start({"--quiet"}, dir.path());
  ASSERT_FALSE(endpoint_with_policy(d, "acme", sink.base_url() + "/a", "quick").empty());
  ASSERT_FALSE(endpoint_with_policy(d, "zeta", sink.base_url() + "/z", "quick").empty());
  // Within one second at most 2 (+ what refills meanwhile) of 6 are taken in.
  int accepted = 0, limited = 0;
  Reply r;
  for (int i = 0; i < 6; ++i) {
    r = d.call_node(0, "POST", "/v1/tenants/acme/events",
                    R"({"id":"r-)" + std::to_string(i) + R"(","type":"t","payload":{}})");
    if (r.status == 202) ++accepted;
    if (r.status == 429) {
      ++limited;
      EXPECT_EQ(error_code(r), "tenant_rate_limited") << r.describe();
      EXPECT_NE(r.headers.find("Retry-After: 1"), std::string::npos) << r.headers;
    }
  }
  EXPECT_GE(accepted, 2);
  EXPECT_LE(accepted, 4);
  EXPECT_EQ(accepted + limited, 6);
  EXPECT_EQ(
      d.call_node(0, "POST", "/v1/tenants/zeta/events", R"({"id":"z-1","type":"t","payload":{}})")
          .status,
      202);
  // A refused event was not taken in: unknown, and accepted once the second has passed.
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  Reply bulk = d.call_node(0, "POST", "/v1/events/bulk",
                           R"({"tenant":"acme","id":"b-1","type":"t","payload":{}})"
                           "\n"
                           R"({"tenant":"acme","id":"b-2","type":"t","payload":{}})"
                           "\n"
                           R"({"tenant":"acme","id":"b-3","type":"t","payload":{}})"
                           "\n");
  ASSERT_EQ(bulk.status, 200) << bulk.describe();
  EXPECT_GE(bulk.json()["accepted"].i64(), 2) << bulk.body;
  EXPECT_LE(bulk.json()["accepted"].i64(), 3) << bulk.body;
}

// `n` tenant names whose recover jobs share one shard: with one shard per node, any names on
// one node; in cluster mode, names whose partitions one node owns (GET /v1/cluster).
std::vector<std::string> tenants_on_one_shard(const Daemon& d, size_t n) {
  std::vector<std::set<int64_t>> owned(d.nodes());
  for (size_t i = 0; i < d.nodes() && cluster_mode(); ++i) {
    Reply c = d.call_node(i, "GET", "/v1/cluster");
    const Json j = c.json();
    for (const Json& o : j["owned"].items()) owned[i].insert(o["partition"].i64());
  }
  std::vector<std::vector<std::string>> by_node(d.nodes());
  for (int k = 0; k < 1000; ++k) {
    const std::string t = "rq-" + std::to_string(k);
    size_t node = 0;
    while (cluster_mode() && node < d.nodes() && !owned[node].count(partition_of(t))) ++node;
    if (node == d.nodes()) continue;
    by_node[node].push_back(t);
    if (by_node[node].size() == n) return by_node[node];
  }
  ADD_FAILURE() << "no node owns " << n << " of the candidate tenants";
  return {};
}

// SPEC R14 quotas: one recover job per tenant (running or queued); past the shard's running
// jobs a bounded FIFO queue (state "queued", started when a running one ends); past the queue
// a 429 naming the limit, with Retry-After.
TEST(E2eTrust, RecoverJobsWaitInABoundedQueuePerShardOnePerTenant) {
  DaemonOptions o;
  o.shards = 1;
  o.env = {"RINGCAST_LIMITS_RECOVER_JOBS_RUNNING=1", "RINGCAST_LIMITS_RECOVER_JOBS_QUEUED=1",
           "RINGCAST_LIMITS_RECOVER_MAX_IN_FLIGHT=1"};
  Daemon d(o);
  ASSERT_NO_THROW(d.start());
  test::TempDir dir("e2e-trust-jobs");
  test::SinkProcess sink =
      test::SinkProcess::start({"--quiet", "--fault", "/bad=status=500"}, dir.path());
  const std::vector<std::string> tenants = tenants_on_one_shard(d, 3);
  ASSERT_EQ(tenants.size(), 3u);
  const std::string since = rfc3339_in(-1000ms);
  // Per tenant: one endpoint whose two deliveries ended dead; then fixed (a new URL), enabled
  // and paused, so a recover job holds its one re-queued delivery live and stays running.
  std::vector<std::string> eps;
  for (const std::string& t : tenants) {
    const std::string ep = endpoint_with_policy(d, t, sink.base_url() + "/bad", "quick");
    ASSERT_FALSE(ep.empty());
    eps.push_back(ep);
    for (const char* id : {"j-1", "j-2"})
      ASSERT_EQ(submit_event(d, t, id, "x.y", "{}").status, 202);
    for (const char* id : {"j-1", "j-2"}) {
      Json j = wait_delivery(d, t, ep, id, delivery_ended, scaled(10s));
      ASSERT_TRUE(delivery_ended(j)) << t << " " << id;
    }
    const std::string base = "/v1/tenants/" + t + "/endpoints/" + ep;
    ASSERT_EQ(d.call("PATCH", base, "{\"url\":" + quote(sink.base_url() + "/good") + "}").status,
              200);
    ASSERT_EQ(d.call("POST", base + "/enable").status, 200);
    ASSERT_EQ(d.call("POST", base + "/pause").status, 200);
  }
  const std::string window =
      "{\"since\":" + quote(since) + ",\"until\":" + quote(rfc3339_in(1000ms)) + "}";
  auto recover = [&](size_t i) {
    return d.call("POST", "/v1/tenants/" + tenants[i] + "/endpoints/" + eps[i] + "/recover",
                  window);
  };
  auto job = [&](size_t i, const std::string& id) {
    Reply g = d.call("GET", "/v1/tenants/" + tenants[i] + "/jobs/" + id);
    return g.status == 200 ? g.json()["job"] : Json();
  };
  Reply first = recover(0);
  ASSERT_EQ(first.status, 202) << first.describe();
  const Json first_job = first.json()["job"];
  EXPECT_EQ(first_job["state"].str(), "running") << first.body;
  EXPECT_FALSE(first_job["started_at"].is_null()) << first.body;
  // The same tenant again: one job per tenant.
  Reply again = recover(0);
  EXPECT_EQ(again.status, 429) << again.describe();
  EXPECT_EQ(error_code(again), "too_many_jobs");
  EXPECT_EQ(again.json()["error"]["field"].str(), "tenant") << again.body;
  // Another tenant: queued behind it.
  Reply second = recover(1);
  ASSERT_EQ(second.status, 202) << second.describe();
  const Json second_job = second.json()["job"];
  EXPECT_EQ(second_job["state"].str(), "queued") << second.body;
  EXPECT_TRUE(second_job["started_at"].is_null()) << second.body;
  const std::string second_id = second_job["id"].str();
  // A queued job is its tenant's one job too.
  Reply second_again = recover(1);
  EXPECT_EQ(second_again.status, 429) << second_again.describe();
  // A third tenant: the queue (1) is full.
  Reply third = recover(2);
  EXPECT_EQ(third.status, 429) << third.describe();
  EXPECT_EQ(error_code(third), "too_many_jobs");
  EXPECT_EQ(third.json()["error"]["field"].str(), "limits.recover_jobs_queued") << third.body;
  EXPECT_NE(third.headers.find("Retry-After: "), std::string::npos) << third.headers;
  // The queued job waits while the first runs (its re-queued delivery is held by the pause).
  std::this_thread::sleep_for(scaled(300ms));
  EXPECT_EQ(job(0, first_job["id"].str())["state"].str(), "running");
  EXPECT_EQ(job(1, second_id)["state"].str(), "queued");
  // The first tenant's receiver resumes: its job ends, the queued one starts by itself.
  ASSERT_EQ(d.call("POST", "/v1/tenants/" + tenants[0] + "/endpoints/" + eps[0] + "/resume").status,
            200);
  Json j;
  EXPECT_TRUE(wait_until(
      [&] {
        j = job(1, second_id);
        return j["state"].str() == "running" && j["requeued"].i64() >= 1;
      },
      scaled(20s)))
      << "the queued job did not start: " << j["state"].str();
  EXPECT_EQ(job(0, first_job["id"].str())["state"].str(), "done");
  EXPECT_FALSE(j["started_at"].is_null());
  // The third tenant now has room in the queue; the second's ends once its receiver resumes.
  Reply third_again = recover(2);
  ASSERT_EQ(third_again.status, 202) << third_again.describe();
  EXPECT_EQ(third_again.json()["job"]["state"].str(), "queued") << third_again.body;
  for (size_t i : {size_t{1}, size_t{2}}) {
    ASSERT_EQ(
        d.call("POST", "/v1/tenants/" + tenants[i] + "/endpoints/" + eps[i] + "/resume").status,
        200);
  }
  const std::string third_id = third_again.json()["job"]["id"].str();
  EXPECT_TRUE(wait_until([&] { return job(2, third_id)["state"].str() == "done"; }, scaled(20s)));
  EXPECT_EQ(job(1, second_id)["state"].str(), "done");
  // Every re-queued delivery was delivered: two per tenant at the good URL.
  for (size_t i = 0; i < tenants.size(); ++i) {
    for (const char* id : {"j-1", "j-2"}) {
      Json x = wait_delivery(
          d, tenants[i], eps[i], id,
          [](const Json& y) { return y["delivery"]["status"].str() == "delivered"; }, scaled(10s));
      EXPECT_EQ(x["delivery"]["status"].str(), "delivered") << tenants[i] << " " << id;
    }
  }
}

// The API listener over TLS (server.tls_cert, server.tls_key): a client that trusts the CA
// gets its answers, one that does not is refused, plain HTTP gets nothing, and a portal session
// opened over TLS gets a Secure cookie. Cluster mode's forwarding over https:// is
// ForwardApi.AnHttpsOwnerIsReachedOverTlsAndVerified (tests/api).
TEST(E2eTrust, TheApiListenerServesTls) {
  RINGCAST_E2E_SINGLE_NODE_ONLY("the fixture's clients speak plain HTTP to every node");
  test::TempDir dir("e2e-trust-tls");
  const test::TestCa ca = test::TestCa::create();
  const test::CertFiles files = ca.write_localhost(dir.path());
  const test::TestCa other = test::TestCa::create("another CA");
  test::write_file(dir.file("other.pem"), other.ca_pem);
  DaemonOptions o;
  o.env = {"RINGCAST_SERVER_TLS_CERT=" + files.cert, "RINGCAST_SERVER_TLS_KEY=" + files.key};
  Daemon d(o);
  ASSERT_NO_THROW(d.start());
  const std::string base = "https://127.0.0.1:" + std::to_string(d.port());
  auto curl = [&](const std::string& args) {
    const std::string out = dir.file("curl.out");
    const int rc = std::system(("curl -s -o " + out + " -w '%{http_code}' " + args + " > " +
                                dir.file("curl.code") + " 2>/dev/null")
                                   .c_str());
    return std::make_pair(rc, test::read_file(dir.file("curl.code")) + " " + test::read_file(out));
  };
  auto [rc, got] = curl("--cacert " + files.ca + " " + base + "/healthz");
  EXPECT_EQ(rc, 0);
  EXPECT_EQ(got.substr(0, 3), "200") << got;
  std::tie(rc, got) =
      curl("--cacert " + files.ca + " -H 'Authorization: Bearer " + std::string(Daemon::kToken) +
           "' " + base + "/v1/tenants/acme/endpoints");
  EXPECT_EQ(got.substr(0, 3), "404") << got;  // no such tenant yet: authenticated, answered
  // A client that trusts another CA refuses the server.
  std::tie(rc, got) = curl("--cacert " + dir.file("other.pem") + " " + base + "/healthz");
  EXPECT_NE(rc, 0) << got;
  // Plain HTTP to the TLS listener: no HTTP answer.
  EXPECT_EQ(http_request(d.port(), "GET", "/healthz", "", {}, 3s).status, 0);
  // A portal session over TLS: its cookie is Secure.
  std::tie(rc, got) =
      curl("--cacert " + files.ca + " -X POST -H 'Content-Type: application/json' -H " +
           "'Authorization: Bearer " + std::string(Daemon::kToken) + "' -d '{}' " + base +
           "/v1/tenants/acme/portal-links");
  ASSERT_EQ(got.substr(0, 3), "201") << got;
  const Json j = Json::parse(got.substr(4));
  const std::string token = j["token"].str();
  std::tie(rc, got) = curl("--cacert " + files.ca + " -D " + dir.file("headers") +
                           " -X POST -H 'Content-Type: application/json' -d '{\"link\":\"" + token +
                           "\"}' " + base + "/portal/session");
  EXPECT_EQ(got.substr(0, 3), "200") << got;
  const std::string headers = test::read_file(dir.file("headers"));
  EXPECT_NE(headers.find("Secure"), std::string::npos) << headers;

  // The CLI over TLS: an https:// --server verified against --cacert; another CA and plain
  // HTTP refused (the token is not sent to an unproven server); from the daemon's own config
  // (server.tls_cert) it pins that certificate, whatever address it reaches it by.
  int runs = 0;
  auto cli = [&](const std::vector<std::string>& args, const std::vector<std::string>& env) {
    const std::string tag = "cli-" + std::to_string(++runs);
    test::ProcessOptions po;
    po.stdout_path = dir.file(tag + ".out");
    po.stderr_path = dir.file(tag + ".err");
    po.env = env;
    std::vector<std::string> argv = {ringcast_binary()};
    argv.insert(argv.end(), args.begin(), args.end());
    test::Process p = test::Process::start(argv, std::move(po));
    auto st = p.wait(30s);
    return std::make_pair(st && st->ok(), test::read_file(dir.file(tag + ".out")) +
                                              test::read_file(dir.file(tag + ".err")));
  };
  const std::vector<std::string> link = {"--json", "portal", "link", "-t", "acme"};
  auto with = [&](std::vector<std::string> head) {
    head.insert(head.end(), link.begin(), link.end());
    return head;
  };
  auto [ok, out] =
      cli(with({"--server", base, "--cacert", files.ca, "--token", Daemon::kToken}), {});
  EXPECT_TRUE(ok) << out;
  EXPECT_NE(out.find("\"token\""), std::string::npos) << out;
  std::tie(ok, out) = cli(
      with({"--server", base, "--cacert", dir.file("other.pem"), "--token", Daemon::kToken}), {});
  EXPECT_FALSE(ok) << out;
  EXPECT_NE(out.find("not trusted"), std::string::npos) << out;
  std::tie(ok, out) = cli(
      with({"--server", "127.0.0.1:" + std::to_string(d.port()), "--token", Daemon::kToken}), {});
  EXPECT_FALSE(ok) << out;
  const std::vector<std::string> daemon_env = {
      "RINGCAST_SERVER_LISTEN=127.0.0.1:" + std::to_string(d.port()),
      "RINGCAST_SERVER_TLS_CERT=" + files.cert, "RINGCAST_SERVER_TLS_KEY=" + files.key,
      std::string("RINGCAST_API_TOKEN=") + Daemon::kToken};
  std::tie(ok, out) = cli(link, daemon_env);
  EXPECT_TRUE(ok) << out;
  EXPECT_NE(out.find("\"token\""), std::string::npos) << out;
  // Another certificate in the config than the one served: refused.
  std::filesystem::create_directories(dir.file("wrong"));
  const test::CertFiles wrong = other.write_localhost(dir.file("wrong"));
  std::tie(ok, out) =
      cli(link, {"RINGCAST_SERVER_LISTEN=127.0.0.1:" + std::to_string(d.port()),
                 "RINGCAST_SERVER_TLS_CERT=" + wrong.cert, "RINGCAST_SERVER_TLS_KEY=" + wrong.key,
                 std::string("RINGCAST_API_TOKEN=") + Daemon::kToken});
  EXPECT_FALSE(ok) << out;
  EXPECT_NE(out.find("is not the one in"), std::string::npos) << out;
}

}  // namespace
}  // namespace ringcast::e2e
