// portal/portal: links and sessions are signed, expire on the server's clock, cannot be moved to
// another tenant or turned from one kind into the other; the session cookie's attributes, the
// CSRF token, and the security headers on every portal answer (docs/operations.md "The portal");
// portal/pages: the pages as an HTTP handler, on its clock's time, with one body limit.
#include "portal/portal.h"
#include "portal/pages.h"
#include "tests/support/require.h"

#include <gtest/gtest.h>

#include <optional>
#include <set>
#include <string>
#include <utility>

namespace ringcast::portal {
namespace {

const WallTime kT0 = WallTime::from_ns(1'800'000'000'000'000'000);

PortalOptions options() {
  PortalOptions o;
  o.secret = "admin-token";
  o.session_ttl = minutes(30);
  return o;
}

net::HttpRequest request(std::string method, std::string target, std::string body = "",
                         std::vector<net::HttpHeader> headers = {}) {
  net::HttpRequest r;
  r.method = std::move(method);
  r.target = std::move(target);
  r.body = std::move(body);
  r.headers = std::move(headers);
  return r;
}

const std::string* header(const net::HttpResponse& r, std::string_view name) {
  for (const auto& h : r.headers) {
    if (h.name == name) return &h.value;
  }
  return nullptr;
}

std::string cookie_of(const net::HttpResponse& r) {
  const std::string* c = header(r, "Set-Cookie");
  if (c == nullptr) return {};
  const size_t eq = c->find('='), semi = c->find(';');
  return c->substr(eq + 1, semi - eq - 1);
}

TEST(PortalTokens, ALinkOpensASessionForItsTenantAndScopeOnly) {
  Portal p(options());
  ASSERT_TRUE(p.enabled());
  const std::string link = p.mint_link("acme", PortalScope::kView, kT0 + minutes(10));
  PortalSession s;
  std::string cookie;
  ASSERT_EQ(p.open_link(link, kT0, s, cookie), PortalCheck::kOk);
  EXPECT_EQ(s.tenant, "acme");
  EXPECT_EQ(s.scope, PortalScope::kView);
  EXPECT_EQ(s.expires_at, kT0 + minutes(30));
  EXPECT_EQ(s.csrf.size(), 64u);
  PortalSession back;
  ASSERT_EQ(p.check_session(cookie, kT0 + minutes(29), back), PortalCheck::kOk);
  EXPECT_EQ(back.tenant, "acme");
  EXPECT_EQ(back.csrf, s.csrf);
  EXPECT_TRUE(Portal::csrf_matches(back, s.csrf));
  EXPECT_FALSE(Portal::csrf_matches(back, s.csrf.substr(1) + "0"));
  EXPECT_FALSE(Portal::csrf_matches(back, ""));
  // Expiry is the server's: past it, both are refused.
  EXPECT_EQ(p.check_session(cookie, kT0 + minutes(30), back), PortalCheck::kExpired);
  EXPECT_EQ(p.open_link(link, kT0 + minutes(10), s, cookie), PortalCheck::kExpired);
  // A link is not a session and a session is not a link.
  EXPECT_EQ(p.check_session(link, kT0, back), PortalCheck::kInvalid);
  std::string c2;
  EXPECT_EQ(p.open_link(cookie, kT0, s, c2), PortalCheck::kInvalid);
}

TEST(PortalTokens, TamperedOrForeignTokensAreRefused) {
  Portal p(options());
  const std::string link = p.mint_link("acme", PortalScope::kManage, kT0 + minutes(10));
  PortalSession s;
  std::string cookie;
  // Every single-character change of the token fails (payload or MAC).
  for (size_t i = 0; i < link.size(); ++i) {
    std::string t = link;
    t[i] = t[i] == 'A' ? 'B' : 'A';
    if (t == link) continue;
    EXPECT_NE(p.open_link(t, kT0, s, cookie), PortalCheck::kOk) << i;
  }
  // The MAC's last character carries 2 unused bits (32 bytes in 43 characters): a spelling with
  // them set decodes to the same bytes and must still be refused (one token, one spelling).
  {
    static constexpr std::string_view kAlphabet =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    const size_t at = kAlphabet.find(link.back());
    ASSERT_NE(at, std::string_view::npos);
    ASSERT_EQ(at % 4, 0u) << "a canonical last character has its two low bits clear";
    for (size_t low = 1; low < 4; ++low) {
      std::string t = link;
      t.back() = kAlphabet[at + low];
      EXPECT_EQ(p.open_link(t, kT0, s, cookie), PortalCheck::kInvalid) << t.back();
    }
  }
  // Another server secret (another deployment) does not take it.
  PortalOptions other = options();
  other.secret = "another-token";
  EXPECT_EQ(Portal(other).open_link(link, kT0, s, cookie), PortalCheck::kInvalid);
  EXPECT_EQ(p.open_link("", kT0, s, cookie), PortalCheck::kInvalid);
  EXPECT_EQ(p.open_link("abc.def", kT0, s, cookie), PortalCheck::kInvalid);
  // No secret: no portal.
  EXPECT_FALSE(Portal(PortalOptions{}).enabled());
  EXPECT_EQ(Portal(PortalOptions{}).open_link(link, kT0, s, cookie), PortalCheck::kInvalid);
}

TEST(PortalRoutes, SessionCookieAttributesAndErrors) {
  Portal p(options());
  const std::string link = p.mint_link("acme", PortalScope::kManage, kT0 + minutes(10));
  net::HttpResponse r = p.handle(request("POST", "/portal/session", R"({"link":")" + link + "\"}",
                                         {{"content-type", "application/json"}}),
                                 kT0);
  ASSERT_EQ(r.status, 200) << r.body;
  const std::string* set = header(r, "Set-Cookie");
  ASSERT_NE(set, nullptr);
  EXPECT_NE(set->find("rc_portal="), std::string::npos);
  EXPECT_NE(set->find("HttpOnly"), std::string::npos);
  EXPECT_NE(set->find("SameSite=Strict"), std::string::npos);
  EXPECT_NE(set->find("Max-Age=1800"), std::string::npos) << *set;
  EXPECT_EQ(set->find("Secure"), std::string::npos) << "plain http: no Secure";
  EXPECT_NE(r.body.find(R"("scope":"manage")"), std::string::npos) << r.body;
  EXPECT_NE(r.body.find(R"("csrf_token":")"), std::string::npos) << r.body;

  // Behind TLS (the platform's https public_url): Secure.
  PortalOptions tls = options();
  tls.public_url = "https://hooks.example.com";
  r = Portal(tls).handle(request("POST", "/portal/session", R"({"link":")" + link + "\"}",
                                 {{"content-type", "application/json"}}),
                         kT0);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_NE(header(r, "Set-Cookie")->find("; Secure"), std::string::npos);

  // GET /portal/session resumes from the cookie.
  const std::string cookie = cookie_of(r);
  r = p.handle(request("GET", "/portal/session", "", {{"cookie", "x=1; rc_portal=" + cookie}}),
               kT0);
  EXPECT_EQ(r.status, 200) << r.body;
  r = p.handle(request("GET", "/portal/session", "", {{"cookie", "rc_portal=" + cookie}}),
               kT0 + hours(2));
  EXPECT_EQ(r.status, 401);
  EXPECT_NE(r.body.find("session_expired"), std::string::npos) << r.body;
  r = p.handle(request("GET", "/portal/session"), kT0);
  EXPECT_EQ(r.status, 401);
  EXPECT_NE(r.body.find("no_session"), std::string::npos) << r.body;

  // An expired or broken link; a form post (no JSON) is refused before any check.
  r = p.handle(request("POST", "/portal/session", R"({"link":")" + link + "\"}",
                       {{"content-type", "application/json"}}),
               kT0 + hours(1));
  EXPECT_EQ(r.status, 401);
  EXPECT_NE(r.body.find("link_expired"), std::string::npos) << r.body;
  r = p.handle(request("POST", "/portal/session", R"({"link":"x.y"})",
                       {{"content-type", "application/json"}}),
               kT0);
  EXPECT_NE(r.body.find("link_invalid"), std::string::npos) << r.body;
  r = p.handle(request("POST", "/portal/session", "link=" + link,
                       {{"content-type", "application/x-www-form-urlencoded"}}),
               kT0);
  EXPECT_EQ(r.status, 415);
  r = p.handle(request("DELETE", "/portal/session"), kT0);
  EXPECT_EQ(r.status, 204);
  EXPECT_NE(header(r, "Set-Cookie")->find("Max-Age=0"), std::string::npos);
}

TEST(PortalRoutes, EveryAnswerCarriesTheSecurityHeaders) {
  Portal p(options());
  for (const char* path : {"/portal/", "/portal/nope.js", "/portal/session", "/portal"}) {
    SCOPED_TRACE(path);
    net::HttpResponse r = p.handle(request("GET", path), kT0);
    const std::string* csp = header(r, "Content-Security-Policy");
    ASSERT_NE(csp, nullptr);
    EXPECT_NE(csp->find("script-src 'self'"), std::string::npos);
    EXPECT_NE(csp->find("default-src 'none'"), std::string::npos);
    EXPECT_EQ(csp->find("unsafe-inline"), std::string::npos);
    EXPECT_NE(csp->find("frame-ancestors 'none'"), std::string::npos);
    ASSERT_NE(header(r, "X-Frame-Options"), nullptr);
    EXPECT_EQ(*header(r, "X-Frame-Options"), "DENY");
    ASSERT_NE(header(r, "X-Content-Type-Options"), nullptr);
  }
  EXPECT_EQ(p.handle(request("GET", "/portal/nope.js"), kT0).status, 404);
  EXPECT_EQ(p.handle(request("GET", "/portal/../keys"), kT0).status, 404);
  EXPECT_EQ(p.handle(request("POST", "/portal/"), kT0).status, 405);

  // An embedding platform's origin: frame-ancestors names it, no X-Frame-Options.
  PortalOptions o = options();
  o.frame_ancestors = {"https://dashboard.platform.example"};
  net::HttpResponse r = Portal(o).handle(request("GET", "/portal/"), kT0);
  EXPECT_NE(header(r, "Content-Security-Policy")
                ->find("frame-ancestors https://dashboard.platform.example"),
            std::string::npos);
  EXPECT_EQ(header(r, "X-Frame-Options"), nullptr);
}

TEST(PortalRoutes, TheAssetsAreServedFromTheBinary) {
  Portal p(options());
  const PortalAsset* index = find_portal_asset("index.html");
  if (index == nullptr) RINGCAST_SKIP_MISSING() << "no assets in portal/assets in this tree";
  net::HttpResponse r = p.handle(request("GET", "/portal/"), kT0);
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.content_type, "text/html; charset=utf-8");
  EXPECT_EQ(r.body, index->body);
  // No inline script: every script is a file of its own, allowed by script-src 'self'.
  EXPECT_EQ(r.body.find("<script>"), std::string::npos);
  EXPECT_EQ(r.body.find(" onclick="), std::string::npos);
}

// The pages as a handler of their own (mounted beside the REST adapter, api/front.h): each
// request is the Portal's answer at the clock's wall time; every path has the one body limit.
TEST(PortalPages, AnswerOnTheClocksTimeWithOneBodyLimit) {
  Portal p(options());
  ManualClock clock(kT0);
  PortalPages pages(p, 777, clock);
  for (const char* path : {"/portal", "/portal/", "/portal/session", "/portal/portal.js"}) {
    EXPECT_EQ(pages.max_body_bytes(request("POST", path)), 777u) << path;
  }
  auto call = [&pages](net::HttpRequest req) {
    std::optional<net::HttpResponse> out;
    pages.handle(std::move(req), net::Responder::from_function(
                                     [&out](net::HttpResponse r) { out = std::move(r); }));
    EXPECT_TRUE(out.has_value());
    return out ? std::move(*out) : net::HttpResponse{};
  };
  const std::string link = p.mint_link("acme", PortalScope::kView, kT0 + minutes(10));
  const std::string body = R"({"link":")" + link + "\"}";
  net::HttpResponse r =
      call(request("POST", "/portal/session", body, {{"content-type", "application/json"}}));
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_FALSE(cookie_of(r).empty());
  clock.advance(minutes(10));  // the link's end, on the pages' clock
  r = call(request("POST", "/portal/session", body, {{"content-type", "application/json"}}));
  EXPECT_EQ(r.status, 401);
  EXPECT_NE(r.body.find("link_expired"), std::string::npos) << r.body;
  r = call(request("GET", "/portal"));
  EXPECT_EQ(r.status, 301);
  ASSERT_NE(header(r, "Location"), nullptr);
  EXPECT_EQ(*header(r, "Location"), "/portal/");
  EXPECT_NE(header(r, "Content-Security-Policy"), nullptr);
}

// SPEC R14.3: a link names the key that minted it, and so does every session opened from it;
// once the key is revoked or expired, neither the link nor the session works, while what the
// admin minted (no key) and what other keys minted go on.
TEST(PortalTokens, ALinkAndItsSessionsEndWithTheKeyThatMintedThem) {
  std::set<std::string> alive = {"aaaa000000000001", "aaaa000000000002"};
  PortalOptions o = options();
  o.key_alive = [&alive](std::string_view id, std::string_view tenant, WallTime) {
    return tenant == "acme" && alive.count(std::string(id)) > 0;
  };
  Portal p(o);
  const std::string by_key =
      p.mint_link("acme", PortalScope::kManage, kT0 + minutes(10), "aaaa000000000001");
  const std::string by_other =
      p.mint_link("acme", PortalScope::kView, kT0 + minutes(10), "aaaa000000000002");
  const std::string by_admin = p.mint_link("acme", PortalScope::kManage, kT0 + minutes(10));
  PortalSession s;
  std::string key_cookie, other_cookie, admin_cookie;
  ASSERT_EQ(p.open_link(by_key, kT0, s, key_cookie), PortalCheck::kOk);
  EXPECT_EQ(s.key_id, "aaaa000000000001");
  ASSERT_EQ(p.open_link(by_other, kT0, s, other_cookie), PortalCheck::kOk);
  ASSERT_EQ(p.open_link(by_admin, kT0, s, admin_cookie), PortalCheck::kOk);
  EXPECT_EQ(s.key_id, "");
  PortalSession back;
  ASSERT_EQ(p.check_session(key_cookie, kT0 + minutes(1), back), PortalCheck::kOk);
  EXPECT_EQ(back.key_id, "aaaa000000000001");

  alive.erase("aaaa000000000001");  // revoked (or expired: key_alive says which keys still hold)
  EXPECT_EQ(p.check_session(key_cookie, kT0 + minutes(1), back), PortalCheck::kRevoked);
  std::string again;
  EXPECT_EQ(p.open_link(by_key, kT0 + minutes(1), s, again), PortalCheck::kRevoked);
  EXPECT_EQ(p.check_session(other_cookie, kT0 + minutes(1), back), PortalCheck::kOk);
  EXPECT_EQ(p.check_session(admin_cookie, kT0 + minutes(1), back), PortalCheck::kOk);
  // Over HTTP: 401 with the reason.
  net::HttpResponse r =
      p.handle(request("GET", "/portal/session", "",
                       {{"cookie", std::string(Portal::kCookieName) + "=" + key_cookie}}),
               kT0 + minutes(1));
  EXPECT_EQ(r.status, 401);
  EXPECT_NE(r.body.find("session_revoked"), std::string::npos) << r.body;
}

// SPEC R14.3: the admin's "end every session" of a tenant: links minted and sessions opened
// before the cutoff are refused; those after it, and other tenants', work.
TEST(PortalTokens, ACutoffEndsTheTenantsLinksAndSessionsIssuedBeforeIt) {
  WallTime cutoff;
  PortalOptions o = options();
  o.cutoff = [&cutoff](std::string_view tenant) { return tenant == "acme" ? cutoff : WallTime(); };
  Portal p(o);
  const std::string old_link = p.mint_link("acme", PortalScope::kView, kT0 + minutes(20), "", kT0);
  const std::string zeta_link = p.mint_link("zeta", PortalScope::kView, kT0 + minutes(20), "", kT0);
  PortalSession s;
  std::string old_cookie, zeta_cookie, again;
  ASSERT_EQ(p.open_link(old_link, kT0 + minutes(1), s, old_cookie), PortalCheck::kOk);
  EXPECT_EQ(s.issued_at, kT0 + minutes(1));
  ASSERT_EQ(p.open_link(zeta_link, kT0 + minutes(1), s, zeta_cookie), PortalCheck::kOk);
  cutoff = kT0 + minutes(2);
  PortalSession back;
  EXPECT_EQ(p.check_session(old_cookie, kT0 + minutes(3), back), PortalCheck::kRevoked);
  EXPECT_EQ(p.open_link(old_link, kT0 + minutes(3), s, again), PortalCheck::kRevoked);
  EXPECT_EQ(p.check_session(zeta_cookie, kT0 + minutes(3), back), PortalCheck::kOk);
  const std::string new_link =
      p.mint_link("acme", PortalScope::kView, kT0 + minutes(20), "", kT0 + minutes(3));
  std::string new_cookie;
  ASSERT_EQ(p.open_link(new_link, kT0 + minutes(4), s, new_cookie), PortalCheck::kOk);
  EXPECT_EQ(p.check_session(new_cookie, kT0 + minutes(5), back), PortalCheck::kOk);
}

// SPEC R14 (docs/security.md "Owner e-mail"): a confirmation token names its tenant and
// address, expires on the server's clock, cannot be altered, and is neither a link nor a
// session (nor are they one); its URL is the portal's public URL.
TEST(PortalTokens, AnAddressConfirmationTokenIsItsOwnKind) {
  PortalOptions o = options();
  o.public_url = "https://hooks.example.com/";
  Portal p(o);
  const std::string tok = p.mint_email_confirmation("acme", "a|b@shop.example", kT0 + hours(72));
  std::string tenant, email;
  ASSERT_EQ(p.check_email_confirmation(tok, kT0, tenant, email), PortalCheck::kOk);
  EXPECT_EQ(tenant, "acme");
  EXPECT_EQ(email, "a|b@shop.example");
  EXPECT_EQ(p.check_email_confirmation(tok, kT0 + hours(72), tenant, email), PortalCheck::kExpired);
  EXPECT_EQ(p.confirmation_url(tok), "https://hooks.example.com/portal/confirm-email?token=" + tok);
  for (size_t i = 0; i < tok.size(); ++i) {
    std::string t = tok;
    t[i] = t[i] == 'A' ? 'B' : 'A';
    if (t == tok) continue;
    EXPECT_NE(p.check_email_confirmation(t, kT0, tenant, email), PortalCheck::kOk) << i;
  }
  PortalSession s;
  std::string cookie;
  EXPECT_EQ(p.open_link(tok, kT0, s, cookie), PortalCheck::kInvalid);
  EXPECT_EQ(p.check_session(tok, kT0, s), PortalCheck::kInvalid);
  const std::string link = p.mint_link("acme", PortalScope::kManage, kT0 + minutes(10));
  EXPECT_EQ(p.check_email_confirmation(link, kT0, tenant, email), PortalCheck::kInvalid);
  ASSERT_EQ(p.open_link(link, kT0, s, cookie), PortalCheck::kOk);
  EXPECT_EQ(p.check_email_confirmation(cookie, kT0, tenant, email), PortalCheck::kInvalid);
  PortalOptions other = options();
  other.secret = "another-token";
  EXPECT_EQ(Portal(other).check_email_confirmation(tok, kT0, tenant, email), PortalCheck::kInvalid);
  // Without a public URL a mail cannot carry a link.
  EXPECT_EQ(Portal(options()).confirmation_url(tok), "");
}

}  // namespace
}  // namespace ringcast::portal
