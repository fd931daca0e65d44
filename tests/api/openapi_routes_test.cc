// The OpenAPI document (docs/openapi.yaml, compiled in as JSON: api/openapi.h) against the code: it
// names exactly the routes the REST adapter answers — every row of route_table() and every
// other_routes() entry, no more — and each operation's `security` is its route class (SPEC R14;
// docs/security.md "Route classes"), so the document cannot drift from who may call what.
// GET /v1/openapi.json through the API listener's front answers it to anyone, the throttled too.
#include "api/openapi.h"

#include <gtest/gtest.h>
#include <simdjson.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "api/front.h"
#include "api/rest_api.h"
#include "api/routes.h"
#include "core/ip_address.h"
#include "portal/portal.h"
#include "tests/support/stub_engine.h"

namespace ringcast::api {
namespace {

using simdjson::dom::array;
using simdjson::dom::element;
using simdjson::dom::object;

constexpr std::array<std::string_view, 8> kOperationKeys = {"get",     "put",  "post",  "delete",
                                                            "options", "head", "patch", "trace"};

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string upper(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

using Route = std::pair<std::string, std::string>;  // (METHOD, path)

// One security requirement object as text: its schemes sorted, each with its roles
// ("portalCsrf+portalSession:manage", "tenantKey:read_only", "adminToken").
std::optional<std::string> requirement_text(element req) {
  object o;
  if (req.get(o)) return std::nullopt;
  std::vector<std::string> parts;
  for (auto [scheme, roles_el] : o) {
    array roles;
    if (roles_el.get(roles)) return std::nullopt;
    std::string part(scheme);
    std::vector<std::string> names;
    for (element r : roles) {
      std::string_view name;
      if (r.get(name)) return std::nullopt;
      names.emplace_back(name);
    }
    std::sort(names.begin(), names.end());
    for (size_t i = 0; i < names.size(); ++i) {
      part += i == 0 ? ':' : ',';
      part += names[i];
    }
    parts.push_back(std::move(part));
  }
  std::sort(parts.begin(), parts.end());
  std::string out;
  for (const std::string& p : parts) {
    if (!out.empty()) out += '+';
    out += p;
  }
  return out;
}

// What `security` a route of this class must list (docs/openapi.yaml "x-route-classes"): the
// admin token always; a merchant row the read-write key (and the read-only one when the handler
// checks the scope itself) and a manage session; a viewer row both key scopes and both session
// scopes. A session's change (every method but GET and HEAD) also needs its CSRF token.
std::set<std::string> expected_security(RouteClass who, std::string_view method, bool sessions,
                                        bool any_key_scope) {
  std::set<std::string> out;
  if (who == RouteClass::kPublic) return out;
  out.insert("adminToken");
  if (who == RouteClass::kPlatform) return out;
  out.insert("tenantKey:read_write");
  if (who == RouteClass::kViewer || any_key_scope) out.insert("tenantKey:read_only");
  if (!sessions) return out;
  const std::string csrf = method == "GET" || method == "HEAD" ? "" : "portalCsrf+";
  out.insert(csrf + "portalSession:manage");
  if (who == RouteClass::kViewer) out.insert(csrf + "portalSession:view");
  return out;
}

class OpenApiDocument : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(openapi_document().empty());
    ASSERT_EQ(parser_.parse(openapi_document()).get(doc_), simdjson::SUCCESS)
        << "the embedded document is not JSON";
    ASSERT_EQ(doc_["paths"].get(paths_), simdjson::SUCCESS) << "no paths";
  }

  // The operation object for (METHOD, path), or nullopt.
  std::optional<object> operation(std::string_view method, std::string_view path) {
    object item, op;
    if (paths_[path].get(item) || item[lower(method)].get(op)) return std::nullopt;
    return op;
  }

  // Checks one operation's security and route class against what `who` says.
  void check_class(const Route& route, RouteClass who, bool sessions, bool any_key_scope) {
    SCOPED_TRACE(route.first + " " + route.second);
    auto op = operation(route.first, route.second);
    if (!op) return;  // reported by the route-set test
    std::string_view cls;
    EXPECT_EQ((*op)["x-route-class"].get(cls), simdjson::SUCCESS);
    EXPECT_EQ(cls, route_class_name(who));
    array security;
    ASSERT_EQ((*op)["security"].get(security), simdjson::SUCCESS)
        << "every operation states its security (an empty list for a public route)";
    std::set<std::string> got;
    for (element req : security) {
      auto text = requirement_text(req);
      ASSERT_TRUE(text.has_value()) << "a security requirement is not {scheme: [roles]}";
      EXPECT_TRUE(got.insert(*text).second) << "listed twice: " << *text;
    }
    EXPECT_EQ(got, expected_security(who, route.first, sessions, any_key_scope));
    // Every route that takes a credential says what refusing one looks like; a public one
    // never refuses.
    object responses;
    ASSERT_EQ((*op)["responses"].get(responses), simdjson::SUCCESS);
    element unauthorized;
    const bool has_401 = responses["401"].get(unauthorized) == simdjson::SUCCESS;
    EXPECT_EQ(has_401, who != RouteClass::kPublic);
  }

  simdjson::dom::parser parser_;
  element doc_;
  object paths_;
};

TEST_F(OpenApiDocument, IsOpenApi31AndNamesEveryRouteTheAdapterAnswersAndNoOther) {
  std::string_view version;
  ASSERT_EQ(doc_["openapi"].get(version), simdjson::SUCCESS);
  EXPECT_TRUE(version.starts_with("3.1.")) << version;

  std::set<Route> documented;
  for (auto [path, item_el] : paths_) {
    object item;
    ASSERT_EQ(item_el.get(item), simdjson::SUCCESS) << path;
    for (auto [key, value] : item) {
      if (std::find(kOperationKeys.begin(), kOperationKeys.end(), key) == kOperationKeys.end())
        continue;  // parameters, summary, ...
      EXPECT_TRUE(documented.emplace(upper(key), std::string(path)).second);
    }
  }
  std::set<Route> served;
  for (const RouteSpec& r : route_table()) served.emplace(r.method, r.pattern);
  for (const OtherRoute& r : other_routes()) served.emplace(r.method, r.path);

  for (const Route& r : served) {
    EXPECT_TRUE(documented.count(r))
        << r.first << " " << r.second << " is served but not in docs/openapi.yaml";
  }
  for (const Route& r : documented) {
    EXPECT_TRUE(served.count(r)) << r.first << " " << r.second
                                 << " is in docs/openapi.yaml but the adapter has no such route "
                                    "(api/routes.cc route_table(), other_routes())";
  }
  EXPECT_EQ(documented.size(), served.size());
  EXPECT_GT(served.size(), 40u);  // the comparison ran over the real tables
}

TEST_F(OpenApiDocument, EveryOperationsSecurityIsItsRouteClass) {
  size_t checked = 0;
  for (const RouteSpec& r : route_table()) {
    check_class({std::string(r.method), std::string(r.pattern)}, r.who, r.sessions,
                r.any_key_scope);
    ++checked;
  }
  for (const OtherRoute& r : other_routes()) {
    check_class({std::string(r.method), std::string(r.path)}, r.who, false, false);
    ++checked;
  }
  EXPECT_EQ(checked, route_table().size() + other_routes().size());

  // The schemes the requirements name exist, of the kind docs/security.md describes.
  object schemes;
  ASSERT_EQ(doc_["components"]["securitySchemes"].get(schemes), simdjson::SUCCESS);
  std::string_view type, scheme, in, name;
  EXPECT_EQ(schemes["adminToken"]["type"].get(type), simdjson::SUCCESS);
  EXPECT_EQ(type, "http");
  EXPECT_EQ(schemes["adminToken"]["scheme"].get(scheme), simdjson::SUCCESS);
  EXPECT_EQ(scheme, "bearer");
  EXPECT_EQ(schemes["tenantKey"]["scheme"].get(scheme), simdjson::SUCCESS);
  EXPECT_EQ(scheme, "bearer");
  EXPECT_EQ(schemes["portalSession"]["in"].get(in), simdjson::SUCCESS);
  EXPECT_EQ(in, "cookie");
  EXPECT_EQ(schemes["portalSession"]["name"].get(name), simdjson::SUCCESS);
  EXPECT_EQ(name, portal::Portal::kCookieName);
  EXPECT_EQ(schemes["portalCsrf"]["in"].get(in), simdjson::SUCCESS);
  EXPECT_EQ(in, "header");
  EXPECT_EQ(schemes["portalCsrf"]["name"].get(name), simdjson::SUCCESS);
  EXPECT_EQ(lower(name), portal::Portal::kCsrfHeader);
}

TEST_F(OpenApiDocument, ThePlatformRowsListTheAdminTokenOnly) {
  // Named once more (SPEC R14.2): a platform route that listed a key or a session would tell a
  // client generated from the document that a merchant may call it.
  size_t platform = 0;
  for (const RouteSpec& r : route_table()) {
    if (r.who != RouteClass::kPlatform) continue;
    ++platform;
    auto op = operation(r.method, r.pattern);
    ASSERT_TRUE(op.has_value()) << r.method << " " << r.pattern;
    array security;
    ASSERT_EQ((*op)["security"].get(security), simdjson::SUCCESS);
    ASSERT_EQ(security.size(), 1u) << r.method << " " << r.pattern;
    element only;
    ASSERT_EQ(security.at(0).get(only), simdjson::SUCCESS);
    EXPECT_EQ(requirement_text(only), "adminToken");
  }
  EXPECT_GE(platform, 8u);
}

// GET /v1/openapi.json through the front the API listener serves (api/front.h), as production.
class OpenApiRoute : public ::testing::Test {
 protected:
  void SetUp() override {
    RestApiOptions o;
    o.api_token = "openapi-admin-token-0123456789abcdef";
    o.read_threads = 0;
    o.auth_failures_per_minute = 1;  // one failure and the address waits out its minute
    o.portal.secret = "openapi-portal-secret-0123456789abcdef";  // /portal/confirm-email is on
    api_ = std::make_unique<RestApi>(engine_, o);
    front_ = std::make_unique<ApiFront>(*api_);
  }

  HttpResponse call(const std::string& method, const std::string& target,
                    const std::string& authorization = "") {
    HttpRequest req;
    req.method = method;
    req.target = target;
    req.peer = IpAddress::v4(10, 0, 0, 7);
    req.headers.push_back({"host", "openapi"});
    if (!authorization.empty()) req.headers.push_back({"authorization", authorization});
    req.body.reserve(net::kBodyPadding);
    std::optional<HttpResponse> out;
    front_->handle(std::move(req),
                   Responder::from_function([&](HttpResponse r) { out = std::move(r); }));
    EXPECT_TRUE(out.has_value()) << method << " " << target;
    return out ? std::move(*out) : HttpResponse::error(599, "no_answer", "");
  }

  test::StubEngine engine_;
  std::unique_ptr<RestApi> api_;
  std::unique_ptr<ApiFront> front_;
};

TEST_F(OpenApiRoute, AnswersTheEmbeddedDocumentToAnyoneAndTheThrottledToo) {
  HttpResponse doc = call("GET", std::string(kOpenApiPath));
  ASSERT_EQ(doc.status, 200) << doc.body.substr(0, 200);
  EXPECT_EQ(doc.content_type, "application/json");
  EXPECT_EQ(doc.body, openapi_document());
  simdjson::dom::parser p;
  element el;
  EXPECT_EQ(p.parse(doc.body).get(el), simdjson::SUCCESS);

  // This address fails authentication once: the throttle holds every credentialed route from
  // it for the rest of the minute, the admin token's too ... (minutes are fixed windows of the
  // wall clock: when one ended between the two calls, fail once more)
  const std::string admin = "Bearer openapi-admin-token-0123456789abcdef";
  int held = 0;
  for (int i = 0; i < 2 && held != 429; ++i) {
    EXPECT_EQ(call("GET", "/v1/tenants/acme/endpoints").status, 401);
    held = call("GET", "/v1/tenants/acme/endpoints", admin).status;
  }
  EXPECT_EQ(held, 429);
  // ... but not the description, which checks no credential (a wrong one is not looked at).
  HttpResponse again = call("GET", std::string(kOpenApiPath), "Bearer wrong");
  EXPECT_EQ(again.status, 200) << again.body.substr(0, 200);
  EXPECT_EQ(again.body, openapi_document());
  HttpResponse slash = call("GET", std::string(kOpenApiPath) + "/");
  EXPECT_EQ(slash.status, 200);

  HttpResponse post = call("POST", std::string(kOpenApiPath));
  EXPECT_EQ(post.status, 405);
  bool allow_get = false;
  for (const auto& h : post.headers) allow_get |= h.name == "Allow" && h.value == "GET";
  EXPECT_TRUE(allow_get);
}

TEST_F(OpenApiRoute, EveryOtherRouteIsAnsweredByTheAdapter) {
  // other_routes() is what the document lists beside the table: each is answered (not the 404
  // of a route that does not exist). /metrics without its token is the 401 of a served route.
  for (const OtherRoute& r : other_routes()) {
    SCOPED_TRACE(std::string(r.method) + " " + std::string(r.path));
    const std::string authorization =
        r.who == RouteClass::kPlatform ? "Bearer openapi-admin-token-0123456789abcdef" : "";
    HttpResponse a = call(std::string(r.method), std::string(r.path), authorization);
    EXPECT_NE(a.status, 405);
    EXPECT_EQ(a.body.find("\"message\":\"route "), std::string::npos) << a.body;
  }
}

}  // namespace
}  // namespace ringcast::api
