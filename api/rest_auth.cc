// The REST adapter's authentication and authorization (SPEC R14.1, R14.3; docs/security.md
// "Route classes"): the principal of a /v1 request, 405 vs 404, what a principal may reach.
#include <openssl/mem.h>
#include <openssl/sha.h>

#include <cctype>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "api/keys.h"
#include "api/principal.h"
#include "api/rest_internal.h"
#include "api/routes.h"
#include "core/time.h"
#include "portal/portal.h"

namespace ringcast::api {

bool bearer_token_matches(std::string_view authorization, std::string_view token) {
  if (token.empty()) return false;
  constexpr std::string_view kPrefix = "Bearer ";
  if (authorization.size() < kPrefix.size()) return false;
  for (size_t i = 0; i < kPrefix.size(); ++i) {
    char a = static_cast<char>(std::tolower(static_cast<unsigned char>(authorization[i])));
    char b = static_cast<char>(std::tolower(static_cast<unsigned char>(kPrefix[i])));
    if (a != b) return false;
  }
  std::string_view given = authorization.substr(kPrefix.size());
  while (!given.empty() && given.front() == ' ') given.remove_prefix(1);
  while (!given.empty() && (given.back() == ' ' || given.back() == '\t')) given.remove_suffix(1);
  // Compare digests: the time depends on neither the position of a difference nor the length.
  uint8_t a[SHA256_DIGEST_LENGTH];
  uint8_t b[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const uint8_t*>(given.data()), given.size(), a);
  SHA256(reinterpret_cast<const uint8_t*>(token.data()), token.size(), b);
  return CRYPTO_memcmp(a, b, sizeof a) == 0;
}

namespace rest {

HttpResponse unauthorized(std::string_view code, std::string_view message) {
  HttpResponse r = HttpResponse::error(401, code, message);
  r.headers.push_back({"WWW-Authenticate", "Bearer"});
  return r;
}

// SPEC R14.1: the principal of a /v1 request, or the 401 / 403 that refuses it.
std::variant<Principal, HttpResponse> authenticate(const HttpRequest& req,
                                                   const RestApiOptions& opt, const Portal* portal,
                                                   WallTime now) {
  const std::string* auth = req.header("authorization");
  if (auth != nullptr) {
    if (bearer_token_matches(*auth, opt.api_token)) return Principal{};
    std::string_view v = trim_ws(*auth);
    if (v.size() > 7 && (v.substr(0, 7) == "Bearer " || v.substr(0, 7) == "bearer ") &&
        opt.keys != nullptr) {
      KeyCheckResult k = opt.keys->check(trim_ws(v.substr(7)), now);
      switch (k.check) {
        case KeyCheck::kOk:
          return Principal{Principal::Kind::kKey, std::move(k.who.tenant), k.who.read_only,
                           std::move(k.who.id)};
        case KeyCheck::kExpired:
          return unauthorized("key_expired", "this API key has expired");
        case KeyCheck::kUnknown:
          return unauthorized("unauthorized", "unknown or revoked API key");
        case KeyCheck::kNotAKey:
          break;
      }
    }
    return unauthorized("unauthorized", opt.api_token.empty() && opt.keys == nullptr
                                            ? "no API token is configured on the server "
                                              "(server.api_token / RINGCAST_API_TOKEN)"
                                            : "wrong bearer token");
  }
  std::string_view cookie = Portal::session_cookie(req);
  if (!cookie.empty() && portal != nullptr && portal->enabled()) {
    PortalSession s;
    switch (portal->check_session(cookie, now, s)) {
      case PortalCheck::kOk: {
        if (req.method != "GET" && req.method != "HEAD") {
          const std::string* csrf = req.header(Portal::kCsrfHeader);
          if (csrf == nullptr || !Portal::csrf_matches(s, *csrf)) {
            return HttpResponse::error(403, "csrf_failed",
                                       "a portal session's change needs its X-CSRF-Token");
          }
        }
        return Principal{Principal::Kind::kSession, std::move(s.tenant),
                         s.scope == PortalScope::kView, std::move(s.key_id)};
      }
      case PortalCheck::kRevoked:
        return unauthorized("session_revoked",
                            "the key that made this portal link was revoked or has expired");
      case PortalCheck::kExpired:
        return unauthorized("session_expired",
                            "the portal session has expired: open a new portal link");
      case PortalCheck::kInvalid:
        return unauthorized("unauthorized", "invalid portal session");
    }
  }
  return unauthorized("unauthorized",
                      opt.api_token.empty()
                          ? "no API token is configured on the server (server.api_token / "
                            "RINGCAST_API_TOKEN)"
                          : "missing Authorization: Bearer <token>");
}

namespace {

// No row in the route table for this method and path: 405 when another method has one, else
// 404. For every principal, the admin too, so a route the table does not name is not served.
HttpResponse no_route(const std::vector<std::string>& segs, std::string_view path) {
  std::string allow;
  for (const RouteSpec& r : route_table()) {
    if (!route_path_matches(r.pattern, segs) || allow.find(r.method) != std::string::npos) continue;
    if (!allow.empty()) allow += ", ";
    allow += r.method;
  }
  if (!allow.empty()) return method_not_allowed(allow);
  return not_found("route " + std::string(path));
}

}  // namespace

// What a principal may reach (SPEC R14, the route classes of api/routes.h); nullopt: go on.
std::optional<HttpResponse> authorize(const Principal& who, const std::vector<std::string>& segs,
                                      const std::string& method, std::string_view path) {
  const RouteSpec* route = find_route(method, segs);
  if (route == nullptr) return no_route(segs, path);
  // A public route (the adapter answers it before authenticating) admits every principal too.
  if (who.admin() || route->who == RouteClass::kPublic) return std::nullopt;
  const bool tenant_route = segs.size() >= 3 && segs[1] == "tenants";
  if (tenant_route && segs[2] != who.tenant) {
    // Exactly what a tenant that does not exist gets: nothing tells the two apart.
    return HttpResponse::error(404, "unknown_tenant", "unknown tenant: create an endpoint first",
                               "tenant");
  }
  if (route->who == RouteClass::kPlatform) {
    return HttpResponse::error(403, "admin_only",
                               "this route is the platform's: it needs the admin token");
  }
  const bool session = who.kind == Principal::Kind::kSession;
  if (session && !route->sessions) {
    return HttpResponse::error(403, "not_in_portal", "a portal session cannot do this");
  }
  if (who.read_only && route->who == RouteClass::kMerchant && !route->any_key_scope) {
    return HttpResponse::error(
        403, "read_only",
        session ? "this portal link is for viewing only" : "this API key is read-only");
  }
  return std::nullopt;
}

// A principal that rests on a key (a key, or a session of a key's link) is refused once the key
// is revoked or expired (SPEC R14.3), by the node that authenticates it: every node sees a
// revocation within server.key_refresh.
std::optional<HttpResponse> still_valid(const Principal& who, const KeyRegistry* keys,
                                        WallTime now) {
  if (who.admin() || who.key_id.empty()) return std::nullopt;
  if (keys != nullptr && keys->active(who.key_id, who.tenant, now)) return std::nullopt;
  return who.kind == Principal::Kind::kKey
             ? unauthorized("unauthorized", "unknown or revoked API key")
             : unauthorized("session_revoked",
                            "the key that made this portal link was revoked or has expired");
}

}  // namespace rest

}  // namespace ringcast::api
