// api/front: the API listener's handler. The portal's pages, mounted beside the REST adapter,
// answer /portal and /portal/… as the adapter's Portal does (statuses, headers, bodies) and on
// that same Portal (its key checks); /portal/confirm-email and every other path stay the
// adapter's; and each path keeps the body limit the adapter gave it (SPEC R14, docs/security.md).
#include "api/front.h"

#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "api/keys.h"
#include "api/rest_api.h"
#include "net/system_clock.h"
#include "portal/portal.h"
#include "tests/support/memory_store.h"
#include "tests/support/stub_engine.h"

namespace ringcast::api {
namespace {

constexpr const char* kAdmin = "front-admin-token-0123456789abcdef";
constexpr const char* kPortalSecret = "front-portal-secret-0123456789abcdef";

WallTime now() {
  return net::SystemClock().wall_now();
}

const std::string* header_of(const HttpResponse& r, std::string_view name) {
  for (const auto& h : r.headers) {
    if (h.name == name) return &h.value;
  }
  return nullptr;
}

std::string json_string(const std::string& body, const std::string& name) {
  const std::string marker = "\"" + name + "\":\"";
  const size_t at = body.find(marker);
  if (at == std::string::npos) return "";
  const size_t from = at + marker.size();
  return body.substr(from, body.find('"', from) - from);
}

HttpRequest request(std::string method, std::string target, std::string_view body = {},
                    std::vector<HttpHeader> headers = {}) {
  HttpRequest r;
  r.method = std::move(method);
  r.target = std::move(target);
  r.headers = std::move(headers);
  r.headers.push_back({"host", "front"});
  r.body.reserve(body.size() + net::kBodyPadding);  // as the server hands bodies over
  r.body.assign(body);
  return r;
}

HttpResponse call(HttpHandler& h, HttpRequest req) {
  std::optional<HttpResponse> out;
  h.handle(std::move(req), Responder::from_function([&](HttpResponse r) { out = std::move(r); }));
  EXPECT_TRUE(out.has_value());
  return out ? std::move(*out) : HttpResponse::error(599, "no_answer", "");
}

class FrontTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(keys_.start().ok());
    RestApiOptions o;
    o.api_token = kAdmin;
    o.read_threads = 0;
    o.keys = &keys_;
    o.portal.secret = kPortalSecret;
    o.max_unauthenticated_body_bytes = 1000;
    o.max_body_bytes = 5000;
    o.max_bulk_body_bytes = 9000;
    api_ = std::make_unique<RestApi>(engine_, o);
    front_ = std::make_unique<ApiFront>(*api_);
  }

  test::StubEngine engine_;
  MemoryStore store_;
  KeyRegistry keys_{KeyRegistryOptions{&store_, Duration::zero()}};
  std::unique_ptr<RestApi> api_;
  std::unique_ptr<ApiFront> front_;
};

TEST_F(FrontTest, ThePortalsPagesAnswerAsItsPortalDoes) {
  struct Case {
    const char* method;
    const char* target;
  };
  for (const Case& c :
       {Case{"GET", "/portal"}, Case{"GET", "/portal?x=1"}, Case{"GET", "/portal/"},
        Case{"HEAD", "/portal/"}, Case{"GET", "/portal/nope.js"}, Case{"GET", "/portal/session"},
        Case{"DELETE", "/portal/session"}, Case{"PUT", "/portal/session"}, Case{"POST", "/portal/"},
        Case{"GET", "/portal/confirm-email/"}, Case{"POST", "/portal/confirm-email/x"},
        Case{"GET", "/portal/../v1/tenants/acme/endpoints"}}) {
    SCOPED_TRACE(std::string(c.method) + " " + c.target);
    const HttpResponse want = api_->portal().handle(request(c.method, c.target), now());
    const HttpResponse got = call(*front_, request(c.method, c.target));
    EXPECT_EQ(got.status, want.status);
    EXPECT_EQ(got.content_type, want.content_type);
    EXPECT_EQ(got.body, want.body);
    ASSERT_EQ(got.headers.size(), want.headers.size());
    for (size_t i = 0; i < want.headers.size(); ++i) {
      EXPECT_EQ(got.headers[i].name, want.headers[i].name);
      EXPECT_EQ(got.headers[i].value, want.headers[i].value);
    }
    EXPECT_NE(header_of(got, "Content-Security-Policy"), nullptr);  // a portal answer
  }
  // And the adapter alone no longer serves them.
  const HttpResponse alone = call(*api_, request("GET", "/portal/"));
  EXPECT_EQ(alone.status, 404);
  EXPECT_EQ(header_of(alone, "Content-Security-Policy"), nullptr);
}

TEST_F(FrontTest, TheConfirmationPageAndEveryOtherPathAreTheAdapters) {
  // The owner-address confirmation: the adapter's page (HTML, the portal's headers).
  for (const char* target : {"/portal/confirm-email", "/portal/confirm-email?token=x.y"}) {
    SCOPED_TRACE(target);
    const HttpResponse r = call(*front_, request("GET", target));
    EXPECT_EQ(r.status, 400);
    EXPECT_EQ(r.content_type, "text/html; charset=utf-8");
    EXPECT_NE(r.body.find("This link is not valid"), std::string::npos) << r.body;
    EXPECT_NE(header_of(r, "Content-Security-Policy"), nullptr);
  }
  const HttpResponse put = call(*front_, request("PUT", "/portal/confirm-email"));
  EXPECT_EQ(put.status, 405);
  ASSERT_NE(header_of(put, "Allow"), nullptr);
  EXPECT_EQ(*header_of(put, "Allow"), "GET, POST");
  // A path that only looks like the portal's: the adapter's 404, no portal headers.
  for (const char* target : {"/portals", "/portal%2Fsession", "//portal/session"}) {
    SCOPED_TRACE(target);
    const HttpResponse r = call(*front_, request("GET", target));
    EXPECT_EQ(r.status, 404) << r.body;
    EXPECT_EQ(json_string(r.body, "code"), "not_found") << r.body;
    EXPECT_EQ(header_of(r, "Content-Security-Policy"), nullptr);
  }
  EXPECT_EQ(call(*front_, request("GET", "/healthz")).body, R"({"status":"ok"})");
  EXPECT_EQ(call(*front_, request("GET", "/metrics")).status, 401);
  const HttpResponse metrics =
      call(*front_,
           request("GET", "/metrics", {}, {{"authorization", std::string("Bearer ") + kAdmin}}));
  EXPECT_EQ(metrics.status, 200) << metrics.body;
  EXPECT_NE(metrics.body.find("ringcast_api_auth_failures_total"), std::string::npos);
}

// SPEC R14.1, R14.3: the pages open sessions on the adapter's own Portal, so a session they open
// is a principal to the adapter, and a link whose key is revoked opens nothing there either.
TEST_F(FrontTest, ThePagesOpenSessionsOnTheAdaptersPortal) {
  const std::vector<HttpHeader> admin = {{"authorization", std::string("Bearer ") + kAdmin}};
  const HttpResponse link = call(
      *front_, request("POST", "/v1/tenants/acme/portal-links", R"({"scope":"manage"})", admin));
  ASSERT_EQ(link.status, 201) << link.body;
  const std::string token = json_string(link.body, "token");
  const std::vector<HttpHeader> json = {{"content-type", "application/json"}};
  const HttpResponse opened =
      call(*front_, request("POST", "/portal/session", R"({"link":")" + token + "\"}", json));
  ASSERT_EQ(opened.status, 200) << opened.body;
  const std::string* set_cookie = header_of(opened, "Set-Cookie");
  ASSERT_NE(set_cookie, nullptr);
  const std::string cookie = set_cookie->substr(0, set_cookie->find(';'));  // "rc_portal=…"
  const std::string csrf = json_string(opened.body, "csrf_token");
  ASSERT_FALSE(csrf.empty()) << opened.body;

  // The adapter takes the session: a change without the CSRF token is refused as a session's.
  HttpResponse r =
      call(*front_, request("POST", "/v1/tenants/acme/endpoints", "{}",
                            {{"content-type", "application/json"}, {"cookie", cookie}}));
  EXPECT_EQ(r.status, 403) << r.body;
  EXPECT_EQ(json_string(r.body, "code"), "csrf_failed");
  r = call(*front_, request("POST", "/v1/tenants/acme/endpoints", "{}",
                            {{"content-type", "application/json"},
                             {"cookie", cookie},
                             {std::string(portal::Portal::kCsrfHeader), csrf}}));
  EXPECT_NE(r.status, 401) << r.body;
  EXPECT_NE(r.status, 403) << r.body;
  // The pages read the session back from the same cookie.
  r = call(*front_, request("GET", "/portal/session", {}, {{"cookie", cookie}}));
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json_string(r.body, "tenant"), "acme");

  // A link a key minted ends with the key, at the pages too (the adapter's key check).
  auto key = keys_.create("acme", "front", false, WallTime(), now() - hours(1));
  ASSERT_TRUE(key.ok());
  const std::string by_key = api_->portal().mint_link("acme", portal::PortalScope::kView,
                                                      now() + minutes(10), key->record.id, now());
  r = call(*front_, request("POST", "/portal/session", R"({"link":")" + by_key + "\"}", json));
  EXPECT_EQ(r.status, 200) << r.body;
  ASSERT_TRUE(keys_.revoke("acme", key->record.id).ok());
  r = call(*front_, request("POST", "/portal/session", R"({"link":")" + by_key + "\"}", json));
  EXPECT_EQ(r.status, 401) << r.body;
  EXPECT_EQ(json_string(r.body, "code"), "link_revoked");
}

// One limit for a request without a valid credential however its path is spelled; the portal's
// paths keep it whatever the credential, as when the adapter served them (SPEC R14).
TEST_F(FrontTest, EveryPathKeepsItsBodyLimit) {
  const std::vector<HttpHeader> admin = {{"authorization", std::string("Bearer ") + kAdmin}};
  struct Case {
    const char* target;
    bool with_admin;
    size_t limit;
  };
  for (const Case& c :
       {Case{"/portal/session", false, 1000}, Case{"/portal/session", true, 1000},
        Case{"/portal", true, 1000}, Case{"/portal/", true, 1000},
        Case{"/portal/confirm-email", false, 1000}, Case{"/portal/confirm-email", true, 1000},
        Case{"/portals", true, 1000}, Case{"/v1/tenants/acme/endpoints", false, 1000},
        Case{"/v1/tenants/acme/endpoints", true, 5000}, Case{"/v1/events/bulk", false, 1000},
        Case{"/v1/events/bulk", true, 9000}, Case{"/nowhere", false, 1000}}) {
    SCOPED_TRACE(std::string(c.target) + (c.with_admin ? " as admin" : ""));
    const HttpRequest head =
        request("POST", c.target, {}, c.with_admin ? admin : std::vector<HttpHeader>{});
    EXPECT_EQ(front_->max_body_bytes(head), c.limit);
  }
}

}  // namespace
}  // namespace ringcast::api
