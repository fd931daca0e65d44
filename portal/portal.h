// The merchant portal's server side (docs/operations.md "The portal"): signed portal links,
// sessions, and the assets compiled into the binary (portal/assets, embedded at build time: no
// CDN, no runtime build). Its pages are an HTTP handler of their own, portal::PortalPages
// (portal/pages.h), mounted beside the REST adapter; the adapter uses this class too, to take a
// session as a principal and to mint links (api/rest_auth.cc, api/rest_tenant.cc).
//
// A platform mints a link for one tenant (POST /v1/tenants/{t}/portal-links → an URL ending in
// "/portal/#link=<token>"). The fragment never reaches a server or a Referer; the page POSTs it
// to /portal/session, which answers with a session cookie (HttpOnly, SameSite=Strict, Secure
// behind TLS) and a CSRF token that every state-changing /v1 call must echo in X-CSRF-Token.
// Links and sessions are stateless HMAC-SHA256 tokens under a key derived from portal.secret
// (independent of every other secret: when unset, a random secret kept in the store and shared
// by every node), so every node of a cluster checks them alike; the expiry inside the signed
// payload is enforced here, on the server, at every request, and so is the minting key: a link
// or session whose key was revoked or expired is refused (SPEC R14).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/time.h"
#include "net/http_server.h"

namespace ringcast::portal {

enum class PortalScope : uint8_t { kView, kManage };
const char* portal_scope_name(PortalScope s);
std::optional<PortalScope> parse_portal_scope(std::string_view s);

struct PortalOptions {
  std::string secret;  // HMAC key material; empty: portal off (links 503, /portal/ 404)
  // The URL the portal is reached at from a browser ("https://hooks.example.com"); empty: the
  // request's Host over http (or https when X-Forwarded-Proto says so).
  std::string public_url;
  Duration link_ttl = minutes(10);    // a link's default life
  Duration link_ttl_max = hours(24);  // the longest a link may ask for
  Duration session_ttl = hours(1);    // a session's life from the link's use
  // Whether the key `key_id` of `tenant` still authenticates at `now` (not revoked, not
  // expired); unset: every key does. Called on the HTTP loop: memory only.
  std::function<bool(std::string_view key_id, std::string_view tenant, WallTime now)> key_alive;
  // The tenant's cutoff: links and sessions issued before it are ended (the admin's "end every
  // session"); unset or zero: none. Memory only.
  std::function<WallTime(std::string_view tenant)> cutoff;
  // Origins allowed to frame the portal (CSP frame-ancestors); empty: none (and
  // X-Frame-Options: DENY).
  std::vector<std::string> frame_ancestors;
};

// What a valid session proves.
struct PortalSession {
  std::string tenant;
  PortalScope scope = PortalScope::kView;
  WallTime expires_at;
  std::string csrf;    // the token the page must echo in X-CSRF-Token
  std::string key_id;  // the key that minted the link; empty: the admin did
  WallTime issued_at;  // when the link was minted / the session opened
};

enum class PortalCheck : uint8_t {
  kOk,
  kInvalid,
  kExpired,
  kRevoked,  // the key that minted it was revoked or expired
};

class Portal {
 public:
  explicit Portal(PortalOptions options);

  bool enabled() const { return !key_.empty(); }
  const PortalOptions& options() const { return opt_; }

  // A link token for `tenant`, valid until `expires_at`, minted by the key `key_id` (empty:
  // the admin).
  std::string mint_link(std::string_view tenant, PortalScope scope, WallTime expires_at,
                        std::string_view key_id = {}, WallTime issued_at = WallTime()) const;
  // The portal URL around a link token; `host` and `https` describe the request (used when
  // public_url is empty).
  std::string link_url(std::string_view token, std::string_view host, bool https) const;

  // A link's token → a new session (its expiry: now + session_ttl).
  PortalCheck open_link(std::string_view token, WallTime now, PortalSession& out,
                        std::string& cookie_value) const;
  // The session cookie's value → the session.
  PortalCheck check_session(std::string_view cookie_value, WallTime now, PortalSession& out) const;
  // Constant time.
  static bool csrf_matches(const PortalSession& s, std::string_view header);

  // The owner-address confirmation (SPEC R14, docs/security.md "Owner e-mail"): a token that
  // names the tenant and the address, signed like links (another kind, so neither passes for
  // the other), valid until `expires_at`; the URL a mail carries (public_url +
  // "/portal/confirm-email?token=…"; empty without public_url: a mail has no request host).
  std::string mint_email_confirmation(std::string_view tenant, std::string_view email,
                                      WallTime expires_at) const;
  std::string confirmation_url(std::string_view token) const;
  PortalCheck check_email_confirmation(std::string_view token, WallTime now, std::string& tenant,
                                       std::string& email) const;

  // Everything under /portal: the assets, and /portal/session (POST: open a link, GET: the
  // current session, DELETE: end it). `https`: the request came over TLS (for Secure cookies).
  net::HttpResponse handle(const net::HttpRequest& req, WallTime now) const;

  // The security headers every portal response carries (CSP, frame options, nosniff, referrer).
  void add_security_headers(net::HttpResponse& r) const;

  // The session cookie's value in a Cookie header; empty when none.
  static std::string_view session_cookie(const net::HttpRequest& req);

  static constexpr std::string_view kCookieName = "rc_portal";
  static constexpr std::string_view kCsrfHeader = "x-csrf-token";

 private:
  std::string sign(std::string_view payload) const;
  static std::string payload(char kind, PortalScope scope, WallTime expires_at, WallTime issued_at,
                             std::string_view nonce, std::string_view key_id,
                             std::string_view tenant);
  // The payload of a token whose MAC is good; nullopt otherwise.
  std::optional<std::string> verify(std::string_view token) const;
  PortalCheck parse(std::string_view token, char kind, WallTime now, PortalSession& out,
                    std::string* nonce) const;
  std::string csrf_for(std::string_view nonce) const;
  bool is_https(const net::HttpRequest& req) const;
  net::HttpResponse session_answer(uint16_t status, const PortalSession& s,
                                   const std::string& cookie, bool secure, WallTime now) const;

  PortalOptions opt_;
  std::string key_;
  std::string csp_;
};

// The embedded assets (generated from portal/assets at build time).
struct PortalAsset {
  std::string_view name;  // "index.html", "portal.js", ...
  std::string_view content_type;
  std::string_view body;
};
const PortalAsset* find_portal_asset(std::string_view name);

}  // namespace ringcast::portal
