// End to end, SPEC R14.1: tenant-scoped API keys on the real daemon (and on a 3-node
// cluster with RINGCAST_E2E_BACKEND=cluster). The admin token makes, lists and revokes them; a
// key reaches its own tenant only. Every /v1 route is tried with a foreign key, an expired key,
// a revoked key, and a read-only key; a key's text never shows in the daemon's logs or
// /metrics; in cluster mode a key made on one node works on the others, and a revocation
// reaches them.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <thread>

#include "tests/e2e/daemon.h"

namespace ringcast::e2e {
namespace {

struct Key {
  std::string text, id;
};

Key make_key(const Daemon& d, const std::string& tenant, const std::string& body) {
  Reply r = d.call("POST", "/v1/tenants/" + tenant + "/keys", body);
  EXPECT_EQ(r.status, 201) << r.describe();
  Json j = r.json();
  return Key{j["key"].str(), j["record"]["id"].str()};
}

std::string bearer(const Key& k) {
  return "Bearer " + k.text;
}

std::string error_code(const Reply& r) {
  return r.json()["error"]["code"].str();
}

struct Route {
  const char* method;
  std::string path;
  bool write;
  std::string body;
};

TEST(E2eKeys, EveryRouteWithAForeignExpiredRevokedAndReadOnlyKey) {
  Daemon d;
  ASSERT_NO_THROW(d.start());
  test::TempDir dir("e2e-keys");
  test::SinkProcess sink = test::SinkProcess::start({"--quiet"}, dir.path());
  const std::string t = "acme";
  const std::string ep = endpoint_with_policy(d, t, sink.base_url() + "/a", "quick");
  ASSERT_FALSE(ep.empty());
  ASSERT_FALSE(endpoint_with_policy(d, "zeta", sink.base_url() + "/z", "quick").empty());

  // The admin makes them; the key itself is in the answer once, the list shows prefixes.
  Key own = make_key(d, t, R"({"name":"backend"})");
  Key ro = make_key(d, t, R"({"name":"dashboard","scope":"read_only"})");
  Key foreign = make_key(d, "zeta", "{}");
  Key revoked = make_key(d, t, R"({"name":"old"})");
  Key expiring = make_key(d, t, R"({"expires_at":")" + rfc3339_in(1500ms) + R"("})");
  ASSERT_EQ(own.text.size(), 4u + 16 + 1 + 64) << own.text;
  ASSERT_EQ(own.text.substr(0, 4), "rck_");
  Reply list = d.call("GET", "/v1/tenants/acme/keys");
  ASSERT_EQ(list.status, 200) << list.describe();
  EXPECT_EQ(list.json()["keys"].size(), 4u) << list.body;
  EXPECT_EQ(list.body.find(own.text.substr(21)), std::string::npos) << "a secret in the list";
  EXPECT_NE(list.body.find("rck_" + own.id), std::string::npos) << list.body;
  Reply gone = d.call("DELETE", "/v1/tenants/acme/keys/" + revoked.id);
  ASSERT_EQ(gone.status, 204) << gone.describe();
  EXPECT_EQ(d.call("DELETE", "/v1/tenants/acme/keys/" + revoked.id).status, 404);
  EXPECT_EQ(d.call("DELETE", "/v1/tenants/zeta/keys/" + own.id).status, 404)  // not zeta's
      << "a key is revoked through its own tenant only";

  // Cluster mode: every node knows the keys (the others within server.key_refresh).
  for (size_t n = 0; n < d.nodes(); ++n) {
    EXPECT_TRUE(wait_until(
        [&] {
          return d.call_node(n, "GET", "/v1/tenants/acme/endpoints", "", bearer(own)).status == 200;
        },
        10s))
        << "node " << n << " never took the key";
  }
  // The expiring key works, then stops at its expires_at.
  EXPECT_EQ(d.call_with_auth("GET", "/v1/tenants/acme/endpoints", "", bearer(expiring)).status,
            200);
  ASSERT_TRUE(wait_until(
      [&] {
        return d.call_with_auth("GET", "/v1/tenants/acme/endpoints", "", bearer(expiring)).status ==
               401;
      },
      10s));

  const std::string a = "/v1/tenants/acme";
  const std::vector<Route> routes = {
      {"GET", a + "/endpoints", false, ""},
      {"POST", a + "/endpoints", true, R"({"url":"https://example.com/x"})"},
      {"GET", a + "/endpoints/" + ep, false, ""},
      {"PATCH", a + "/endpoints/" + ep, true, R"({"description":"x"})"},
      {"DELETE", a + "/endpoints/999", true, ""},
      {"POST", a + "/endpoints/" + ep + "/pause", true, ""},
      {"POST", a + "/endpoints/" + ep + "/resume", true, ""},
      {"POST", a + "/endpoints/" + ep + "/enable", true, ""},
      {"POST", a + "/endpoints/" + ep + "/test", true, ""},
      {"POST", a + "/endpoints/" + ep + "/secret/rotate", true, "{}"},
      {"POST", a + "/endpoints/" + ep + "/recover", true, R"({"since":"2026-01-01T00:00:00Z"})"},
      {"POST", a + "/events", true, R"({"id":"k-1","type":"t","payload":{}})"},
      {"GET", a + "/events/k-0", false, ""},
      {"POST", a + "/events/k-0/replay", true, ""},
      {"GET", a + "/deliveries", false, ""},
      {"GET", a + "/deliveries/recent", false, ""},
      {"GET", a + "/deliveries/1", false, ""},
      {"POST", a + "/deliveries/1/resolve", true, R"({"outcome":"delivered"})"},
      {"POST", a + "/deliveries/1/resend", true, ""},
      {"GET", a + "/jobs/1", false, ""},
      {"GET", a + "/breaker", false, ""},
      {"POST", a + "/breaker/reset", true, ""},
      {"PUT", a + "/subscription", true, R"({"active":true})"},
      {"GET", a + "/notifications", false, ""},
      {"GET", a + "/settings", false, ""},
      {"PUT", a + "/settings", true, R"({"owner_email":null})"},
      {"GET", a + "/stats/attempts", false, ""},
      {"POST", a + "/portal-links", true, R"({"scope":"view"})"},
      {"GET", a + "/keys", false, ""},
      {"POST", a + "/keys", true, "{}"},
      {"DELETE", a + "/keys/" + own.id, true, ""},
      {"POST", "/v1/events/bulk", true, R"({"tenant":"acme","id":"k-2","type":"t","payload":{}})"},
      {"GET", "/v1/cluster", false, ""},
      {"GET", "/v1/intake", false, ""},
  };
  for (const Route& r : routes) {
    SCOPED_TRACE(std::string(r.method) + " " + r.path);
    const bool tenant_route = r.path.starts_with(a);
    // SPEC R14.2: the keys, the subscription (billing) and the breaker reset (an operator's
    // control) are the platform's.
    const bool key_route = r.path.starts_with(a + "/keys") || r.path == a + "/subscription" ||
                           r.path == a + "/breaker/reset";

    // Revoked and expired: 401 on every route, whatever the route.
    Reply x = d.call_with_auth(r.method, r.path, r.body, bearer(revoked));
    EXPECT_EQ(x.status, 401) << x.describe();
    EXPECT_EQ(error_code(x), "unauthorized") << x.describe();
    x = d.call_with_auth(r.method, r.path, r.body, bearer(expiring));
    EXPECT_EQ(x.status, 401) << x.describe();
    EXPECT_EQ(error_code(x), "key_expired") << x.describe();

    // Foreign (zeta's key): acme's routes are 404 unknown_tenant, exactly as for a tenant that
    // does not exist; the bulk route refuses the acme line; the rest is admin only.
    x = d.call_with_auth(r.method, r.path, r.body, bearer(foreign));
    if (tenant_route) {
      EXPECT_EQ(x.status, 404) << x.describe();
      EXPECT_EQ(error_code(x), "unknown_tenant") << x.describe();
      Reply ghost = d.call_with_auth(r.method, "/v1/tenants/zz-ghost" + r.path.substr(a.size()),
                                     r.body, bearer(foreign));
      EXPECT_EQ(ghost.status, 404) << ghost.describe();
    } else if (r.path == "/v1/events/bulk") {
      ASSERT_EQ(x.status, 200) << x.describe();
      EXPECT_EQ(x.json()["results"][0]["status"].i64(), 404) << x.body;
      EXPECT_EQ(x.json()["results"][0]["error"]["code"].str(), "unknown_tenant") << x.body;
      EXPECT_EQ(x.json()["accepted"].i64(), 0) << x.body;
    } else {
      EXPECT_EQ(x.status, 403) << x.describe();
      EXPECT_EQ(error_code(x), "admin_only") << x.describe();
    }

    // Read-only (acme's): every write is 403 read_only but a view link; reads go through.
    x = d.call_with_auth(r.method, r.path, r.body, bearer(ro));
    if (key_route || (!tenant_route && r.path != "/v1/events/bulk")) {
      EXPECT_EQ(x.status, 403) << x.describe();
      EXPECT_EQ(error_code(x), "admin_only") << x.describe();
    } else if (r.path == a + "/portal-links") {
      EXPECT_EQ(x.status, 201) << x.describe();
      EXPECT_EQ(x.json()["scope"].str(), "view") << x.body;
    } else if (r.write) {
      EXPECT_EQ(x.status, 403) << x.describe();
      EXPECT_EQ(error_code(x), "read_only") << x.describe();
    } else {
      EXPECT_NE(x.status, 401) << x.describe();
      EXPECT_NE(x.status, 403) << x.describe();
    }
  }
  // A read-only key asking for a manage link is refused.
  Reply manage = d.call_with_auth("POST", a + "/portal-links", R"({"scope":"manage"})", bearer(ro));
  EXPECT_EQ(manage.status, 403) << manage.describe();

  // The tenant's own read-write key works on its routes (not the key routes).
  Reply created =
      d.call_with_auth("POST", a + "/endpoints",
                       R"({"url":")" + sink.base_url() + R"(/own","policy":"quick"})", bearer(own));
  EXPECT_EQ(created.status, 201) << created.describe();
  Reply in = d.call_with_auth("POST", a + "/events", R"({"id":"own-1","type":"t","payload":{}})",
                              bearer(own));
  EXPECT_EQ(in.status, 202) << in.describe();
  Reply bulk =
      d.call_with_auth("POST", "/v1/events/bulk",
                       "{\"tenant\":\"acme\",\"id\":\"own-2\",\"type\":\"t\",\"payload\":{}}\n"
                       "{\"tenant\":\"zeta\",\"id\":\"own-3\",\"type\":\"t\",\"payload\":{}}\n",
                       bearer(own));
  ASSERT_EQ(bulk.status, 200) << bulk.describe();
  EXPECT_EQ(bulk.json()["accepted"].i64(), 1) << bulk.body;
  EXPECT_EQ(bulk.json()["results"][1]["status"].i64(), 404) << bulk.body;
  EXPECT_EQ(d.call_with_auth("GET", a + "/keys", "", bearer(own)).status, 403);

  // Cluster mode: a revocation reaches every node.
  ASSERT_EQ(d.call("DELETE", a + "/keys/" + own.id).status, 204);
  for (size_t n = 0; n < d.nodes(); ++n) {
    EXPECT_TRUE(wait_until(
        [&] { return d.call_node(n, "GET", a + "/endpoints", "", bearer(own)).status == 401; },
        10s))
        << "node " << n << " still takes a revoked key";
  }

  // No key text in the logs or /metrics.
  const std::string metrics =
      d.call_node(0, "GET", "/metrics", "", std::string("Bearer ") + Daemon::kToken).body;
  for (const Key* k : {&own, &ro, &foreign, &revoked, &expiring}) {
    const std::string secret = k->text.substr(21);
    EXPECT_EQ(metrics.find(secret), std::string::npos);
    EXPECT_EQ(d.output(1 << 20).find(secret), std::string::npos) << "a key in the daemon's log";
  }
}

TEST(E2eKeys, KeysSurviveARestartAndBadRequestsNameTheField) {
  Daemon d;
  ASSERT_NO_THROW(d.start());
  const std::string a = "/v1/tenants/acme";
  Key k = make_key(d, "acme", R"({"name":"ci"})");
  for (const auto& [body, field] : std::vector<std::pair<std::string, std::string>>{
           {R"({"scope":"all"})", "scope"},
           {R"({"expires_at":"soon"})", "expires_at"},
           {R"({"expires_at":"2001-01-01T00:00:00Z"})", "expires_at"},
           {R"({"name":1})", "name"},
           {R"({"color":"red"})", "color"}}) {
    SCOPED_TRACE(body);
    Reply r = d.call("POST", a + "/keys", body);
    EXPECT_EQ(r.status, 400) << r.describe();
    EXPECT_EQ(r.json()["error"]["field"].str(), field) << r.body;
  }
  d.kill9();
  ASSERT_NO_THROW(d.start());
  EXPECT_TRUE(wait_until(
      [&] {
        return d.call_with_auth("GET", a + "/keys", "", std::string("Bearer ") + Daemon::kToken)
                       .json()["keys"]
                       .size() == 1 &&
               d.call_with_auth("GET", a + "/settings", "", bearer(k)).status != 401;
      },
      10s))
      << "the key did not survive the restart";
}

// The portal's session (operations.md "The portal") on the REST API: a link becomes a cookie that
// reaches its tenant only, on every node (stateless, signed with the shared secret); a change needs
// the CSRF token; a view link cannot change anything; an expired link is refused.
TEST(E2eKeys, APortalSessionReachesItsTenantWithTheCsrfToken) {
  Daemon d;
  ASSERT_NO_THROW(d.start());
  test::TempDir dir("e2e-portal-session");
  test::SinkProcess sink = test::SinkProcess::start({"--quiet"}, dir.path());
  const std::string a = "/v1/tenants/acme";
  const std::string ep = endpoint_with_policy(d, "acme", sink.base_url() + "/a", "quick");
  ASSERT_FALSE(ep.empty());
  ASSERT_FALSE(endpoint_with_policy(d, "zeta", sink.base_url() + "/z", "quick").empty());

  auto open_session = [&](const std::string& scope, std::string& cookie, std::string& csrf) {
    Reply link = d.call("POST", a + "/portal-links", R"({"scope":")" + scope + R"("})");
    ASSERT_EQ(link.status, 201) << link.describe();
    const std::string url = link.json()["url"].str();
    ASSERT_NE(url.find("/portal/#link="), std::string::npos) << url;
    const std::string token = link.json()["token"].str();
    Reply s = http_request(d.port(), "POST", "/portal/session", R"({"link":")" + token + "\"}",
                           {"Content-Type: application/json"});
    ASSERT_EQ(s.status, 200) << s.describe();
    const size_t at = s.headers.find("rc_portal=");
    ASSERT_NE(at, std::string::npos) << s.headers;
    cookie = s.headers.substr(at, s.headers.find(';', at) - at);
    EXPECT_NE(s.headers.find("HttpOnly"), std::string::npos) << s.headers;
    EXPECT_NE(s.headers.find("SameSite=Strict"), std::string::npos) << s.headers;
    csrf = s.json()["csrf_token"].str();
    EXPECT_EQ(s.json()["tenant"].str(), "acme");
  };
  std::string cookie, csrf;
  ASSERT_NO_FATAL_FAILURE(open_session("manage", cookie, csrf));
  const std::string c = "Cookie: " + cookie;
  for (size_t n = 0; n < d.nodes(); ++n) {
    Reply r = http_request(d.port(n), "GET", a + "/endpoints", "", {c});
    EXPECT_EQ(r.status, 200) << "node " << n << ": " << r.describe();
  }
  EXPECT_EQ(http_request(d.port(), "GET", "/v1/tenants/zeta/endpoints", "", {c}).status, 404);
  EXPECT_EQ(http_request(d.port(), "GET", "/v1/cluster", "", {c}).status, 403);
  // A change: 403 without the token (or with a wrong one), done with it.
  Reply r = http_request(d.port(), "POST", a + "/endpoints/" + ep + "/pause", "", {c});
  EXPECT_EQ(r.status, 403) << r.describe();
  EXPECT_EQ(r.json()["error"]["code"].str(), "csrf_failed");
  r = http_request(d.port(), "POST", a + "/endpoints/" + ep + "/pause", "",
                   {c, "X-CSRF-Token: " + std::string(64, '0')});
  EXPECT_EQ(r.status, 403) << r.describe();
  r = http_request(d.port(d.nodes() - 1), "POST", a + "/endpoints/" + ep + "/pause", "",
                   {c, "X-CSRF-Token: " + csrf});
  EXPECT_EQ(r.status, 200) << r.describe();
  EXPECT_EQ(get_endpoint(d, "acme", ep)["state"].str(), "paused");
  // A session cannot mint links or send events.
  r = http_request(d.port(), "POST", a + "/events", R"({"id":"p-1","type":"t","payload":{}})",
                   {c, "X-CSRF-Token: " + csrf, "Content-Type: application/json"});
  EXPECT_EQ(r.status, 403) << r.describe();

  // A view session reads, and changes nothing even with its token.
  std::string vcookie, vcsrf;
  ASSERT_NO_FATAL_FAILURE(open_session("view", vcookie, vcsrf));
  EXPECT_EQ(
      http_request(d.port(), "GET", a + "/deliveries/recent", "", {"Cookie: " + vcookie}).status,
      200);
  r = http_request(d.port(), "POST", a + "/endpoints/" + ep + "/resume", "",
                   {"Cookie: " + vcookie, "X-CSRF-Token: " + vcsrf});
  EXPECT_EQ(r.status, 403) << r.describe();
  EXPECT_EQ(r.json()["error"]["code"].str(), "read_only");

  // A link that expired is refused; so is a tampered one.
  Reply link = d.call("POST", a + "/portal-links", R"({"ttl_seconds":1})");
  ASSERT_EQ(link.status, 201) << link.describe();
  const std::string token = link.json()["token"].str();
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  r = http_request(d.port(), "POST", "/portal/session", R"({"link":")" + token + "\"}",
                   {"Content-Type: application/json"});
  EXPECT_EQ(r.status, 401) << r.describe();
  EXPECT_EQ(r.json()["error"]["code"].str(), "link_expired");
  std::string bad = token;
  bad[3] = bad[3] == 'x' ? 'y' : 'x';
  r = http_request(d.port(), "POST", "/portal/session", R"({"link":")" + bad + "\"}",
                   {"Content-Type: application/json"});
  EXPECT_EQ(r.status, 401) << r.describe();
}

// GET /v1/tenants/{t}/stats/attempts: 24 hourly buckets; the attempts made now are in the last
// (or the one before, when the hour turns during the test).
TEST(E2eKeys, TheAttemptsChartCountsTodaysAttemptsByOutcome) {
  Daemon d;
  ASSERT_NO_THROW(d.start());
  test::TempDir dir("e2e-stats");
  test::SinkProcess sink =
      test::SinkProcess::start({"--quiet", "--fault", "/f=status=500;limit=2"}, dir.path());
  const std::string ok = endpoint_with_policy(d, "acme", sink.base_url() + "/ok", "quick");
  const std::string f = endpoint_with_policy(d, "acme", sink.base_url() + "/f", "quick");
  ASSERT_FALSE(ok.empty() || f.empty());
  ASSERT_EQ(submit_event(d, "acme", "s-1", "order.paid", "{}").status, 202);
  ASSERT_TRUE(delivery_ended(wait_delivery(d, "acme", ok, "s-1", delivery_ended, 10s)));
  ASSERT_TRUE(delivery_ended(wait_delivery(d, "acme", f, "s-1", delivery_ended, 10s)));
  Json j;
  ASSERT_TRUE(wait_until(
      [&] {
        Reply r = d.call("GET", "/v1/tenants/acme/stats/attempts");
        if (r.status != 200) return false;
        j = r.json();
        // In the last bucket, or the one before when the hour turned in between.
        int64_t delivered = 0, failed = 0;
        for (size_t i = 22; i < 24; ++i) {
          delivered += j["buckets"][i]["delivered"].i64();
          failed += j["buckets"][i]["failed"].i64();
        }
        return delivered == 2 && failed == 2;
      },
      10s))
      << d.call("GET", "/v1/tenants/acme/stats/attempts").body;
  EXPECT_EQ(j["buckets"].size(), 24u);
  EXPECT_EQ(j["bucket_seconds"].i64(), 3600);
  EXPECT_FALSE(j["truncated"].boolean());
  EXPECT_EQ(j["buckets"][0]["delivered"].i64(), 0);
  EXPECT_EQ(d.call("GET", "/v1/tenants/ghost/stats/attempts").status, 404);
}

}  // namespace
}  // namespace ringcast::e2e
