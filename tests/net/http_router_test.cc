// net/http_router: a request goes to the exact mount equal to its path, else to the longest
// prefix that covers it (at a '/' boundary), else to the default; its body limit and its answer
// come from the same handler, and the request reaches it unchanged.
#include "net/http_router.h"

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace ringcast::net {
namespace {

// Answers 200 with its name in X-Handler, limits bodies to `limit`, and keeps what it was given.
class Named final : public HttpHandler {
 public:
  Named(std::string name, size_t limit) : name_(std::move(name)), limit_(limit) {}
  size_t max_body_bytes(const HttpRequest&) override { return limit_; }
  void handle(HttpRequest&& request, Responder responder) override {
    HttpResponse r = HttpResponse::json(200, "{}");
    r.headers.push_back({"X-Handler", name_});
    seen.push_back(std::move(request));
    responder.send(std::move(r));
  }

  std::vector<HttpRequest> seen;

 private:
  std::string name_;
  size_t limit_;
};

HttpRequest request(std::string method, std::string target, std::string body = {}) {
  HttpRequest r;
  r.method = std::move(method);
  r.target = std::move(target);
  r.body = std::move(body);
  r.headers.push_back({"content-type", "application/json"});
  return r;
}

TEST(PrefixRouter, APrefixCoversItselfAndWhatContinuesItPastASlash) {
  EXPECT_TRUE(PrefixRouter::covers("/portal", "/portal"));
  EXPECT_TRUE(PrefixRouter::covers("/portal", "/portal/"));
  EXPECT_TRUE(PrefixRouter::covers("/portal", "/portal/session"));
  EXPECT_TRUE(PrefixRouter::covers("/portal", "/portal/a/b"));
  EXPECT_FALSE(PrefixRouter::covers("/portal", "/portals"));
  EXPECT_FALSE(PrefixRouter::covers("/portal", "/portal.js"));
  EXPECT_FALSE(PrefixRouter::covers("/portal", "/portal%2Fsession"));  // as sent: not decoded
  EXPECT_FALSE(PrefixRouter::covers("/portal", "/port"));
  EXPECT_FALSE(PrefixRouter::covers("/portal", "//portal"));
  EXPECT_FALSE(PrefixRouter::covers("/portal", "/v1/portal"));
  EXPECT_FALSE(PrefixRouter::covers("/portal", ""));
  // A prefix that ends in '/' covers what starts with it, and not the path without the '/'.
  EXPECT_TRUE(PrefixRouter::covers("/portal/", "/portal/"));
  EXPECT_TRUE(PrefixRouter::covers("/portal/", "/portal/x"));
  EXPECT_FALSE(PrefixRouter::covers("/portal/", "/portal"));
}

TEST(PrefixRouter, TheExactMountThenTheLongestPrefixThenTheDefault) {
  Named rest("rest", 1), pages("pages", 2), confirm("confirm", 3), deep("deep", 4);
  // Mounted in both orders: the choice does not depend on it.
  PrefixRouter a(rest);
  a.mount("/portal", pages);
  a.mount("/portal/admin", deep);
  a.mount_exact("/portal/confirm-email", confirm);
  PrefixRouter b(rest);
  b.mount_exact("/portal/confirm-email", confirm);
  b.mount("/portal/admin", deep);
  b.mount("/portal", pages);
  const std::vector<std::pair<std::string, HttpHandler*>> want = {
      {"/portal", &pages},
      {"/portal/", &pages},
      {"/portal/session", &pages},
      {"/portal/index.html", &pages},
      {"/portal/confirm-email", &confirm},
      {"/portal/confirm-email/", &pages},  // exact: what continues it is the prefix's
      {"/portal/confirm-email/x", &pages},
      {"/portal/confirm-emailx", &pages},
      {"/portal/admin", &deep},
      {"/portal/admin/x", &deep},
      {"/portal/adminx", &pages},
      {"/portals", &rest},
      {"/portal%2Fsession", &rest},
      {"//portal/session", &rest},
      {"/v1/tenants/acme/portal-links", &rest},
      {"/healthz", &rest},
      {"/", &rest},
      {"", &rest},
  };
  for (const auto& [path, handler] : want) {
    SCOPED_TRACE(path);
    EXPECT_EQ(&a.route(path), handler);
    EXPECT_EQ(&b.route(path), handler);
  }
}

TEST(PrefixRouter, MountingAgainReplaces) {
  Named rest("rest", 1), first("first", 2), second("second", 3);
  PrefixRouter r(rest);
  r.mount("/portal", first);
  r.mount("/portal", second);
  r.mount_exact("/x", first);
  r.mount_exact("/x", second);
  EXPECT_EQ(&r.route("/portal/a"), &second);
  EXPECT_EQ(&r.route("/x"), &second);
  // An exact mount and a prefix mount of the same path are two mounts; the exact one wins.
  r.mount("/x", first);
  EXPECT_EQ(&r.route("/x"), &second);
  EXPECT_EQ(&r.route("/x/y"), &first);
}

TEST(PrefixRouter, TheBodyLimitAndTheAnswerComeFromTheSameHandler) {
  Named rest("rest", 1000), pages("pages", 64);
  PrefixRouter router(rest);
  router.mount("/portal", pages);
  struct Case {
    const char* target;
    Named* handler;
  };
  for (const Case& c : {Case{"/portal/session?x=1", &pages}, Case{"/portal?a", &pages},
                        Case{"/portals?x", &rest}, Case{"/v1/events/bulk", &rest}}) {
    SCOPED_TRACE(c.target);
    HttpRequest head = request("POST", c.target);
    EXPECT_EQ(router.max_body_bytes(head), c.handler == &pages ? 64u : 1000u);
    const size_t before = c.handler->seen.size();
    std::optional<HttpResponse> out;
    router.handle(request("POST", c.target, R"({"link":"x"})"),
                  Responder::from_function([&](HttpResponse r) { out = std::move(r); }));
    ASSERT_TRUE(out.has_value());
    EXPECT_EQ(out->status, 200);
    ASSERT_EQ(out->headers.size(), 1u);  // nothing added on the way back
    EXPECT_EQ(out->headers[0].value, c.handler == &pages ? "pages" : "rest");
    // The request arrived as it was sent.
    ASSERT_EQ(c.handler->seen.size(), before + 1);
    const HttpRequest& got = c.handler->seen.back();
    EXPECT_EQ(got.method, "POST");
    EXPECT_EQ(got.target, c.target);
    EXPECT_EQ(got.body, R"({"link":"x"})");
    ASSERT_EQ(got.headers.size(), 1u);
    EXPECT_EQ(got.headers[0].name, "content-type");
  }
  EXPECT_EQ(pages.seen.size(), 2u);
  EXPECT_EQ(rest.seen.size(), 2u);
}

}  // namespace
}  // namespace ringcast::net
