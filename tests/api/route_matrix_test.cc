// The route × principal matrix (SPEC R14): every row of the route table in code (api/routes.h)
// is called by every kind of principal, and each cell's status is asserted. The rows come from
// route_table() itself, so a new route cannot skip the matrix; a handler route without a row is
// not served at all (RouteTable.ARouteTheTableDoesNotNameIsNotServed); a public row answers every
// principal and no principal alike. Every call goes through the front the API listener serves
// (api/front.h), so the portal sessions the tenant rows are called with are opened at
// /portal/session beside the adapter, as in production.
#include "api/routes.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "api/forward_auth.h"
#include "api/front.h"
#include "api/keys.h"
#include "api/rest_api.h"
#include "net/system_clock.h"
#include "portal/portal.h"
#include "tests/support/memory_store.h"
#include "tests/support/stub_engine.h"

namespace ringcast::api {
namespace {

constexpr const char* kAdmin = "matrix-admin-token-0123456789abcdef";
constexpr const char* kPortalSecret = "matrix-portal-secret-0123456789abcdef";
constexpr const char* kClusterSecret = "matrix-cluster-secret-0123456789abcdef";

WallTime now() {
  return net::SystemClock().wall_now();
}

// The error code of an error answer ("" for a success, whose body may hold per-line errors).
std::string code_of(const HttpResponse& r) {
  if (r.status < 400) return "";
  const std::string marker = "\"code\":\"";
  const size_t at = r.body.find(marker);
  if (at == std::string::npos) return "";
  const size_t end = r.body.find('"', at + marker.size());
  return r.body.substr(at + marker.size(), end - at - marker.size());
}

std::string header_of(const HttpResponse& r, std::string_view name) {
  for (const auto& h : r.headers)
    if (h.name == name) return h.value;
  return "";
}

// How a principal shows itself on a request.
struct Credential {
  std::string name;
  std::string authorization;  // "Bearer …"; empty: none
  std::string cookie;         // the portal session cookie; empty: none
  std::string csrf;
  bool forged_forward = false;  // a forwarded call with a bad signature
};

Credential bearer(std::string name, const std::string& token) {
  Credential c;
  c.name = std::move(name);
  if (!token.empty()) c.authorization = "Bearer " + token;
  return c;
}

// What a cell must answer.
enum class Expect {
  kAllowed,        // neither 401 nor 403, nor 404 unknown_tenant
  kUnauthorized,   // 401
  kAdminOnly,      // 403 admin_only
  kReadOnly,       // 403 read_only
  kNotInPortal,    // 403 not_in_portal
  kUnknownTenant,  // 404 unknown_tenant (another tenant's: nothing tells it from a missing one)
};

const char* expect_name(Expect e) {
  switch (e) {
    case Expect::kAllowed:
      return "allowed";
    case Expect::kUnauthorized:
      return "401";
    case Expect::kAdminOnly:
      return "403 admin_only";
    case Expect::kReadOnly:
      return "403 read_only";
    case Expect::kNotInPortal:
      return "403 not_in_portal";
    case Expect::kUnknownTenant:
      return "404 unknown_tenant";
  }
  return "?";
}

class RouteMatrix : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(keys_.start().ok());
    RestApiOptions o;
    o.api_token = kAdmin;
    o.read_threads = 0;
    o.keys = &keys_;
    o.portal.secret = kPortalSecret;
    o.intake_status = [] { return std::string("{\"sources\":[]}"); };
    o.cluster_status = [] { return std::string("{}"); };
    // Cluster mode's forwarding on (the owner lookup is never reached: the stub engine owns
    // every tenant), so that a forwarded call's signature is checked.
    o.forward.node_id = "node-a";
    o.forward.secret = kClusterSecret;
    o.forward.find_owner = [](Partition, Duration) -> Result<ForwardTarget> {
      return ForwardTarget{};
    };
    api_ = std::make_unique<RestApi>(engine_, o);
    front_ = std::make_unique<ApiFront>(*api_);
  }

  HttpResponse call(const std::string& method, const std::string& target, std::string body,
                    const Credential& who, const std::string& content_type = "application/json") {
    HttpRequest req;
    req.method = method;
    req.target = target;
    req.headers.push_back({"host", "matrix"});
    if (!body.empty()) req.headers.push_back({"content-type", content_type});
    if (!who.authorization.empty()) req.headers.push_back({"authorization", who.authorization});
    if (!who.cookie.empty()) {
      req.headers.push_back(
          {"cookie", std::string(portal::Portal::kCookieName) + "=" + who.cookie});
    }
    if (!who.csrf.empty())
      req.headers.push_back({std::string(portal::Portal::kCsrfHeader), who.csrf});
    if (who.forged_forward) {
      // Signed under another secret: what a node without cluster.secret, or someone who saw
      // one forwarded call and changed it, could send.
      ForwardAuth other("not-the-cluster-secret-0123456789abcdef");
      Principal admin;
      SignedHeaders h = other.sign(admin, "node-b", method, target, body, now());
      req.headers.push_back({std::string(kForwardedHeader), "node-b"});
      req.headers.push_back({std::string(kPrincipalHeader), h.principal});
      req.headers.push_back({std::string(kForwardSignatureHeader), h.signature});
    }
    req.body.reserve(body.size() + net::kBodyPadding);
    req.body.assign(body);
    std::optional<HttpResponse> out;
    front_->handle(std::move(req),
                   Responder::from_function([&](HttpResponse r) { out = std::move(r); }));
    EXPECT_TRUE(out.has_value()) << method << " " << target;
    return out ? std::move(*out) : HttpResponse::error(599, "no_answer", "");
  }

  std::string mint_key(const std::string& tenant, bool read_only, WallTime expires = WallTime()) {
    auto k = keys_.create(tenant, "matrix", read_only, expires, now() - hours(2));
    EXPECT_TRUE(k.ok());
    return k.ok() ? k->text : std::string();
  }

  // A portal session opened from a link minted by `by` (a credential that may mint links).
  Credential open_session(const std::string& name, const Credential& by, const char* scope) {
    HttpResponse link = call("POST", "/v1/tenants/acme/portal-links",
                             std::string("{\"scope\":\"") + scope + "\"}", by);
    EXPECT_EQ(link.status, 201) << link.body;
    const std::string marker = "\"token\":\"";
    const size_t at = link.body.find(marker);
    const std::string token = link.body.substr(
        at + marker.size(), link.body.find('"', at + marker.size()) - at - marker.size());
    HttpResponse s = call("POST", "/portal/session", "{\"link\":\"" + token + "\"}", Credential{});
    EXPECT_EQ(s.status, 200) << s.body;
    Credential c;
    c.name = name;
    const std::string set_cookie = header_of(s, "Set-Cookie");
    const size_t eq = set_cookie.find('=');
    c.cookie = set_cookie.substr(eq + 1, set_cookie.find(';') - eq - 1);
    const std::string csrf_marker = "\"csrf_token\":\"";
    const size_t ca = s.body.find(csrf_marker);
    c.csrf = s.body.substr(ca + csrf_marker.size(),
                           s.body.find('"', ca + csrf_marker.size()) - ca - csrf_marker.size());
    return c;
  }

  // Fills a pattern's parameters: the tenant is acme, ids are 1, an event is ev-1.
  static std::string target_of(std::string_view pattern) {
    std::string out;
    for (std::string_view seg : pattern_segments(pattern)) {
      out += '/';
      if (seg == "{t}") {
        out += "acme";
      } else if (seg == "{event}") {
        out += "ev-1";
      } else if (seg.starts_with('{')) {
        out += "1";
      } else {
        out += seg;
      }
    }
    return out;
  }

  static std::string body_of(const RouteSpec& r) {
    if (r.pattern == "/v1/events/bulk")
      return "{\"tenant\":\"acme\",\"id\":\"b-1\",\"type\":\"t\",\"payload\":{}}\n";
    if (r.method == "GET" || r.method == "DELETE") return "";
    return "{}";
  }

  test::StubEngine engine_;
  MemoryStore store_;
  KeyRegistry keys_{KeyRegistryOptions{&store_, Duration::zero()}};
  std::unique_ptr<RestApi> api_;
  std::unique_ptr<ApiFront> front_;
};

// The expected answer of one cell (SPEC R14.1, R14.2).
Expect expected(const RouteSpec& r, const std::string& principal) {
  const bool tenant_route = r.pattern.starts_with("/v1/tenants/");
  // A public route answers every principal and none alike: no credential is looked at, a
  // revoked, expired or forged one included.
  if (principal == "admin" || r.who == RouteClass::kPublic) return Expect::kAllowed;
  if (principal == "none" || principal == "revoked key" || principal == "expired key" ||
      principal == "session of a revoked key's link" || principal == "forged forward")
    return Expect::kUnauthorized;
  if (principal == "other tenant's key") {
    if (tenant_route) return Expect::kUnknownTenant;
    return r.who == RouteClass::kPlatform ? Expect::kAdminOnly : Expect::kAllowed;
  }
  if (r.who == RouteClass::kPlatform) return Expect::kAdminOnly;
  const bool session = principal == "manage session" || principal == "view session";
  const bool read_only = principal == "read-only key" || principal == "view session";
  if (session && !r.sessions) return Expect::kNotInPortal;
  if (read_only && r.who == RouteClass::kMerchant && !r.any_key_scope) return Expect::kReadOnly;
  return Expect::kAllowed;
}

TEST_F(RouteMatrix, EveryRouteAnswersEveryPrincipalAsItsClassSays) {
  std::vector<Credential> who;
  who.push_back(bearer("admin", kAdmin));
  const std::string rw = mint_key("acme", false);
  who.push_back(bearer("read-write key", rw));
  who.push_back(bearer("read-only key", mint_key("acme", true)));
  who.push_back(bearer("other tenant's key", mint_key("zeta", false)));
  who.push_back(open_session("manage session", who[0], "manage"));
  who.push_back(open_session("view session", who[0], "view"));
  const std::string doomed = mint_key("acme", false);
  const Credential doomed_cred = bearer("minting key", doomed);
  Credential revoked_link_session =
      open_session("session of a revoked key's link", doomed_cred, "manage");
  const std::string revoked = mint_key("acme", false);
  who.push_back(bearer("revoked key", revoked));
  who.push_back(bearer("expired key", mint_key("acme", false, now() - hours(1))));
  for (const std::string& id : {revoked, doomed}) {
    // "rck_<16 hex id>_<secret>"
    ASSERT_TRUE(keys_.revoke("acme", id.substr(4, kKeyIdHex)).ok());
  }
  who.push_back(revoked_link_session);
  who.push_back(bearer("none", ""));
  Credential forged = bearer("forged forward", kAdmin);
  forged.forged_forward = true;
  who.push_back(forged);

  size_t cells = 0;
  std::map<std::string, size_t> allowed_by;
  // Ending the tenant's portal sessions ends the session principals: that row goes last, and
  // its admin cell after the others.
  std::vector<const RouteSpec*> rows;
  for (const RouteSpec& r : route_table()) rows.push_back(&r);
  std::stable_partition(rows.begin(), rows.end(), [](const RouteSpec* r) {
    return !r->pattern.ends_with("/portal-sessions/end");
  });
  for (const RouteSpec* row : rows) {
    const RouteSpec& r = *row;
    std::vector<Credential> order = who;
    if (r.pattern.ends_with("/portal-sessions/end"))
      std::rotate(order.begin(), order.begin() + 1, order.end());
    int admin_status = 0;  // the admin: what the route answers when allowed
    for (const Credential& c : order) {
      const std::string target = target_of(r.pattern);
      const std::string ct =
          r.pattern == "/v1/events/bulk" ? "application/x-ndjson" : "application/json";
      HttpResponse a = call(std::string(r.method), target, body_of(r), c, ct);
      const Expect want = expected(r, c.name);
      const std::string code = code_of(a);
      SCOPED_TRACE(std::string(r.method) + " " + std::string(r.pattern) + " as " + c.name +
                   ": want " + expect_name(want) + ", got " + std::to_string(a.status) + " " +
                   a.body);
      switch (want) {
        case Expect::kAllowed:
          EXPECT_NE(a.status, 401);
          EXPECT_NE(a.status, 403);
          // What the platform gets: the handler's answer, not a refusal of the principal (the
          // stub engine answers some reads 404 unknown_tenant for everyone alike).
          if (c.name == "admin") admin_status = a.status;
          if (admin_status != 0) {
            EXPECT_EQ(a.status, admin_status);
          }
          // The route is served: a table row is never a 404 "no such route" or a 405.
          EXPECT_EQ(a.body.find("\"message\":\"route "), std::string::npos);
          EXPECT_NE(a.status, 405);
          ++allowed_by[c.name];
          break;
        case Expect::kUnauthorized:
          EXPECT_EQ(a.status, 401);
          break;
        case Expect::kAdminOnly:
          EXPECT_EQ(a.status, 403);
          EXPECT_EQ(code, "admin_only");
          break;
        case Expect::kReadOnly:
          EXPECT_EQ(a.status, 403);
          EXPECT_EQ(code, "read_only");
          break;
        case Expect::kNotInPortal:
          EXPECT_EQ(a.status, 403);
          EXPECT_EQ(code, "not_in_portal");
          break;
        case Expect::kUnknownTenant:
          EXPECT_EQ(a.status, 404);
          EXPECT_EQ(code, "unknown_tenant");
          break;
      }
      ++cells;
    }
  }
  EXPECT_EQ(cells, route_table().size() * who.size());
  // Each principal that may call anything did (the matrix did not pass by refusing everyone).
  EXPECT_EQ(allowed_by["admin"], route_table().size());
  EXPECT_GT(allowed_by["view session"], 0u);
  EXPECT_GT(allowed_by["read-only key"], allowed_by["view session"]);
}

TEST_F(RouteMatrix, APublicRouteAnswersWithoutACredentialAndEveryPublicRowIsAGet) {
  // docs/security.md "Route classes": a public row describes and never reveals, so it is a read
  // of no tenant; the same answer with a credential, without one and with a wrong one.
  size_t public_rows = 0;
  for (const RouteSpec& r : route_table()) {
    if (r.who != RouteClass::kPublic) continue;
    ++public_rows;
    EXPECT_EQ(r.method, "GET") << r.pattern;
    EXPECT_FALSE(r.pattern.starts_with("/v1/tenants/")) << r.pattern;
    EXPECT_EQ(r.pattern.find('{'), std::string_view::npos) << r.pattern;
    const std::string target(r.pattern);
    HttpResponse none = call("GET", target, "", Credential{});
    HttpResponse admin = call("GET", target, "", bearer("admin", kAdmin));
    HttpResponse wrong = call("GET", target, "", bearer("wrong", "rck_0000000000000000_00"));
    EXPECT_EQ(none.status, 200) << r.pattern << " " << none.body;
    EXPECT_EQ(admin.status, 200) << r.pattern;
    EXPECT_EQ(wrong.status, 200) << r.pattern;
    EXPECT_EQ(none.body, admin.body) << r.pattern;
    EXPECT_EQ(none.body, wrong.body) << r.pattern;
    HttpResponse post = call("POST", target, "{}", Credential{});
    EXPECT_EQ(post.status, 405) << r.pattern;
    EXPECT_EQ(header_of(post, "Allow"), "GET") << r.pattern;
  }
  EXPECT_EQ(public_rows, 1u);  // GET /v1/openapi.json; a new one is a decision to name here
}

TEST_F(RouteMatrix, SubscriptionAndBreakerResetArePlatformOnly) {
  // SPEC R14.2, named once more so that a change to the table shows here too.
  const Credential rw = bearer("rw", mint_key("acme", false));
  const Credential manage = open_session("manage", bearer("admin", kAdmin), "manage");
  for (const Credential& c : {rw, manage}) {
    HttpResponse sub = call("PUT", "/v1/tenants/acme/subscription", "{\"active\":false}", c);
    EXPECT_EQ(sub.status, 403) << sub.body;
    EXPECT_EQ(code_of(sub), "admin_only");
    HttpResponse reset = call("POST", "/v1/tenants/acme/breaker/reset", "{}", c);
    EXPECT_EQ(reset.status, 403) << reset.body;
    EXPECT_EQ(code_of(reset), "admin_only");
  }
  EXPECT_TRUE(engine_.subscriptions.empty());
  HttpResponse sub =
      call("PUT", "/v1/tenants/acme/subscription", "{\"active\":false}", bearer("admin", kAdmin));
  EXPECT_EQ(sub.status, 200) << sub.body;
  EXPECT_EQ(engine_.subscriptions.size(), 1u);
}

TEST_F(RouteMatrix, ARouteTheTableDoesNotNameIsNotServedToAnyone) {
  const Credential admin = bearer("admin", kAdmin);
  HttpResponse a = call("POST", "/v1/tenants/acme/endpoints/1/explode", "{}", admin);
  EXPECT_EQ(a.status, 404);
  HttpResponse b = call("DELETE", "/v1/tenants/acme/breaker", "", admin);
  EXPECT_EQ(b.status, 405);
  EXPECT_EQ(header_of(b, "Allow"), "GET");
  HttpResponse c = call("PUT", "/v1/tenants/acme/endpoints/1", "{}", admin);
  EXPECT_EQ(c.status, 405);
  EXPECT_EQ(header_of(c, "Allow"), "GET, PATCH, DELETE");
}

TEST(RouteTable, LiteralSegmentsWinAndEveryMethodAndPatternIsUnique) {
  std::vector<std::string> segs = {"v1", "tenants", "acme", "deliveries", "recent"};
  const RouteSpec* r = find_route("GET", segs);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->pattern, "/v1/tenants/{t}/deliveries/recent");
  segs.back() = "42";
  r = find_route("GET", segs);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->pattern, "/v1/tenants/{t}/deliveries/{id}");
  std::set<std::pair<std::string_view, std::string_view>> seen;
  for (const RouteSpec& row : route_table()) {
    EXPECT_TRUE(seen.emplace(row.method, row.pattern).second) << row.method << " " << row.pattern;
  }
}

// SPEC R13: an endpoint's ordering keys are read by whoever may read the endpoint (platform,
// merchant, viewer; portal sessions too).
TEST(RouteTable, TheOrderingKeysAreReadLikeTheirEndpoint) {
  const RouteSpec* ep = find_route("GET", {"v1", "tenants", "acme", "endpoints", "1"});
  const RouteSpec* keys =
      find_route("GET", {"v1", "tenants", "acme", "endpoints", "1", "ordering"});
  ASSERT_NE(ep, nullptr);
  ASSERT_NE(keys, nullptr);
  EXPECT_EQ(keys->pattern, "/v1/tenants/{t}/endpoints/{id}/ordering");
  EXPECT_EQ(keys->who, RouteClass::kViewer);
  EXPECT_EQ(keys->who, ep->who);
  EXPECT_EQ(keys->sessions, ep->sessions);
  EXPECT_EQ(find_route("POST", {"v1", "tenants", "acme", "endpoints", "1", "ordering"}), nullptr);
}

}  // namespace
}  // namespace ringcast::api
