#include "portal/portal.h"

#include <openssl/mem.h>

#include <simdjson.h>

#include <charconv>

#include "net/signing.h"
#include "views/records.h"

namespace ringcast::portal {

using net::JsonWriter;
using views::rfc3339;
namespace {

std::string b64url(std::string_view bytes) {
  std::string s = net::base64_encode(bytes);
  while (!s.empty() && s.back() == '=') s.pop_back();
  for (char& c : s) {
    if (c == '+') c = '-';
    if (c == '/') c = '_';
  }
  return s;
}

std::optional<std::string> b64url_decode(std::string_view text) {
  std::string s(text);
  for (char& c : s) {
    if (c == '-') {
      c = '+';
    } else if (c == '_') {
      c = '/';
    } else if (c == '+' || c == '/' || c == '=') {
      return std::nullopt;
    }
  }
  while (s.size() % 4 != 0) s.push_back('=');
  auto bytes = net::base64_decode(s);
  // Only the canonical spelling: the last character's unused low bits must be zero, or one
  // token would have several spellings that all verify.
  if (bytes && b64url(*bytes) != text) return std::nullopt;
  return bytes;
}

std::string digest_text(const net::Sha256Digest& d) {
  return std::string(reinterpret_cast<const char*>(d.data()), d.size());
}

std::vector<std::string_view> split(std::string_view s, char sep, size_t max_parts) {
  std::vector<std::string_view> out;
  while (out.size() + 1 < max_parts) {
    size_t i = s.find(sep);
    if (i == std::string_view::npos) break;
    out.push_back(s.substr(0, i));
    s.remove_prefix(i + 1);
  }
  out.push_back(s);
  return out;
}

net::HttpResponse not_found_page() {
  return net::HttpResponse::error(404, "not_found", "no such portal page");
}

}  // namespace

const char* portal_scope_name(PortalScope s) {
  return s == PortalScope::kManage ? "manage" : "view";
}

std::optional<PortalScope> parse_portal_scope(std::string_view s) {
  if (s == "view") return PortalScope::kView;
  if (s == "manage") return PortalScope::kManage;
  return std::nullopt;
}

Portal::Portal(PortalOptions options) : opt_(std::move(options)) {
  if (!opt_.secret.empty()) {
    key_ = digest_text(net::hmac_sha256(opt_.secret, {"ringcast portal v1"}));
  }
  csp_ =
      "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
      "img-src 'self' data:; base-uri 'none'; form-action 'self'; frame-ancestors";
  if (opt_.frame_ancestors.empty()) {
    csp_ += " 'none'";
  } else {
    for (const auto& o : opt_.frame_ancestors) {
      csp_ += ' ';
      csp_ += o;
    }
  }
}

std::string Portal::sign(std::string_view payload) const {
  std::string token = b64url(payload);
  token += '.';
  token += b64url(digest_text(net::hmac_sha256(key_, {payload})));
  return token;
}

std::optional<std::string> Portal::verify(std::string_view token) const {
  if (key_.empty() || token.size() > 2048) return std::nullopt;
  const size_t dot = token.find('.');
  if (dot == std::string_view::npos) return std::nullopt;
  auto payload = b64url_decode(token.substr(0, dot));
  auto mac = b64url_decode(token.substr(dot + 1));
  if (!payload || !mac) return std::nullopt;
  const std::string want = digest_text(net::hmac_sha256(key_, {*payload}));
  if (mac->size() != want.size() || CRYPTO_memcmp(mac->data(), want.data(), want.size()) != 0)
    return std::nullopt;
  return payload;
}

// Payload: kind ('l' link, 's' session) "2|" scope "|" expiry ms "|" issued ms "|" nonce "|"
// minting key id ("-": the admin) "|" tenant. The key id ties a link, and every session opened
// from it, to the key that minted it: revoking or expiring that key ends them; the issue time
// lets the admin end every link and session of a tenant issued before a moment (SPEC R14.3).
PortalCheck Portal::parse(std::string_view token, char kind, WallTime now, PortalSession& out,
                          std::string* nonce) const {
  auto payload = verify(token);
  if (!payload) return PortalCheck::kInvalid;
  auto parts = split(*payload, '|', 7);
  if (parts.size() != 7 || parts[0].size() != 2 || parts[0][0] != kind || parts[0][1] != '2')
    return PortalCheck::kInvalid;
  auto scope = parse_portal_scope(parts[1]);
  auto number = [](std::string_view t, int64_t& v) {
    auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
    return ec == std::errc() && p == t.data() + t.size();
  };
  int64_t exp_ms = 0, issued_ms = 0;
  if (!scope || !number(parts[2], exp_ms) || !number(parts[3], issued_ms) || parts[5].empty() ||
      parts[6].empty())
    return PortalCheck::kInvalid;
  out.tenant.assign(parts[6]);
  out.scope = *scope;
  out.expires_at = WallTime::from_ms(exp_ms);
  out.issued_at = WallTime::from_ms(issued_ms);
  out.key_id.clear();
  if (parts[5] != "-") out.key_id.assign(parts[5]);
  if (nonce) nonce->assign(parts[4]);
  if (now >= out.expires_at) return PortalCheck::kExpired;
  if (!out.key_id.empty() && opt_.key_alive && !opt_.key_alive(out.key_id, out.tenant, now))
    return PortalCheck::kRevoked;
  if (opt_.cutoff && out.issued_at < opt_.cutoff(out.tenant)) return PortalCheck::kRevoked;
  return PortalCheck::kOk;
}

std::string Portal::payload(char kind, PortalScope scope, WallTime expires_at, WallTime issued_at,
                            std::string_view nonce, std::string_view key_id,
                            std::string_view tenant) {
  std::string out;
  out += kind;
  out += "2|";
  out += portal_scope_name(scope);
  out += '|';
  out += std::to_string(expires_at.ms());
  out += '|';
  out += std::to_string(issued_at.ms());
  out += '|';
  out += nonce;
  out += '|';
  out += key_id.empty() ? std::string_view("-") : key_id;
  out += '|';
  out += tenant;
  return out;
}

std::string Portal::mint_link(std::string_view tenant, PortalScope scope, WallTime expires_at,
                              std::string_view key_id, WallTime issued_at) const {
  return sign(payload('l', scope, expires_at, issued_at, net::random_hex(8), key_id, tenant));
}

// Payload: "e2|" expiry ms "|" nonce "|" tenant "|" address (a tenant has no '|'; the address
// is the rest).
std::string Portal::mint_email_confirmation(std::string_view tenant, std::string_view email,
                                            WallTime expires_at) const {
  std::string p = "e2|";
  p += std::to_string(expires_at.ms());
  p += '|';
  p += net::random_hex(8);
  p += '|';
  p += tenant;
  p += '|';
  p += email;
  return sign(p);
}

std::string Portal::confirmation_url(std::string_view token) const {
  if (opt_.public_url.empty()) return {};
  std::string url = opt_.public_url;
  while (!url.empty() && url.back() == '/') url.pop_back();
  url += "/portal/confirm-email?token=";
  url += token;  // base64url and '.': nothing to escape in a query
  return url;
}

PortalCheck Portal::check_email_confirmation(std::string_view token, WallTime now,
                                             std::string& tenant, std::string& email) const {
  auto payload = verify(token);
  if (!payload) return PortalCheck::kInvalid;
  auto parts = split(*payload, '|', 5);
  int64_t exp_ms = 0;
  if (parts.size() != 5 || parts[0] != "e2" || parts[3].empty() || parts[4].empty())
    return PortalCheck::kInvalid;
  auto [p, ec] = std::from_chars(parts[1].data(), parts[1].data() + parts[1].size(), exp_ms);
  if (ec != std::errc() || p != parts[1].data() + parts[1].size()) return PortalCheck::kInvalid;
  tenant.assign(parts[3]);
  email.assign(parts[4]);
  if (now >= WallTime::from_ms(exp_ms)) return PortalCheck::kExpired;
  return PortalCheck::kOk;
}

std::string Portal::link_url(std::string_view token, std::string_view host, bool https) const {
  std::string url;
  if (!opt_.public_url.empty()) {
    url = opt_.public_url;
    while (!url.empty() && url.back() == '/') url.pop_back();
  } else {
    url = https ? "https://" : "http://";
    url += host;
  }
  url += "/portal/#link=";
  url += token;
  return url;
}

std::string Portal::csrf_for(std::string_view nonce) const {
  return net::hex_encode(digest_text(net::hmac_sha256(key_, {"csrf|", nonce})));
}

PortalCheck Portal::open_link(std::string_view token, WallTime now, PortalSession& out,
                              std::string& cookie_value) const {
  PortalSession link;
  PortalCheck c = parse(token, 'l', now, link, nullptr);
  if (c != PortalCheck::kOk) return c;
  out.tenant = link.tenant;
  out.scope = link.scope;
  out.key_id = link.key_id;
  out.expires_at = now + opt_.session_ttl;
  const std::string nonce = net::random_hex(16);
  out.issued_at = now;
  cookie_value = sign(payload('s', out.scope, out.expires_at, now, nonce, out.key_id, out.tenant));
  out.csrf = csrf_for(nonce);
  return PortalCheck::kOk;
}

PortalCheck Portal::check_session(std::string_view cookie_value, WallTime now,
                                  PortalSession& out) const {
  std::string nonce;
  PortalCheck c = parse(cookie_value, 's', now, out, &nonce);
  if (c == PortalCheck::kOk) out.csrf = csrf_for(nonce);
  return c;
}

bool Portal::csrf_matches(const PortalSession& s, std::string_view header) {
  return !s.csrf.empty() && header.size() == s.csrf.size() &&
         CRYPTO_memcmp(header.data(), s.csrf.data(), header.size()) == 0;
}

std::string_view Portal::session_cookie(const net::HttpRequest& req) {
  const std::string* h = req.header("cookie");
  if (h == nullptr) return {};
  std::string_view rest = *h;
  while (!rest.empty()) {
    size_t semi = rest.find(';');
    std::string_view part = rest.substr(0, semi);
    rest = semi == std::string_view::npos ? std::string_view() : rest.substr(semi + 1);
    while (!part.empty() && part.front() == ' ') part.remove_prefix(1);
    if (part.size() > kCookieName.size() && part.substr(0, kCookieName.size()) == kCookieName &&
        part[kCookieName.size()] == '=')
      return part.substr(kCookieName.size() + 1);
  }
  return {};
}

bool Portal::is_https(const net::HttpRequest& req) const {
  if (!opt_.public_url.empty()) return opt_.public_url.starts_with("https://");
  if (req.tls) return true;
  const std::string* proto = req.header("x-forwarded-proto");
  return proto != nullptr && *proto == "https";
}

void Portal::add_security_headers(net::HttpResponse& r) const {
  r.headers.push_back({"Content-Security-Policy", csp_});
  if (opt_.frame_ancestors.empty()) r.headers.push_back({"X-Frame-Options", "DENY"});
  r.headers.push_back({"X-Content-Type-Options", "nosniff"});
  r.headers.push_back({"Referrer-Policy", "no-referrer"});
  r.headers.push_back({"Cross-Origin-Opener-Policy", "same-origin"});
}

net::HttpResponse Portal::session_answer(uint16_t status, const PortalSession& s,
                                         const std::string& cookie, bool secure,
                                         WallTime now) const {
  net::JsonWriter w;
  w.begin_object()
      .field("tenant", s.tenant)
      .field("scope", portal_scope_name(s.scope))
      .field("expires_at", rfc3339(s.expires_at))
      .field("csrf_token", s.csrf)
      .end_object();
  net::HttpResponse r = net::HttpResponse::json(status, w.str());
  r.headers.push_back({"Cache-Control", "no-store"});
  if (!cookie.empty()) {
    const int64_t max_age = std::max<int64_t>(1, (s.expires_at - now).count() / 1'000'000'000);
    std::string c(kCookieName);
    c += '=';
    c += cookie;
    c += "; Path=/; HttpOnly; SameSite=Strict; Max-Age=";
    c += std::to_string(max_age);
    if (secure) c += "; Secure";
    r.headers.push_back({"Set-Cookie", std::move(c)});
  }
  return r;
}

net::HttpResponse Portal::handle(const net::HttpRequest& req, WallTime now) const {
  net::HttpResponse r = [&]() -> net::HttpResponse {
    std::string_view path = req.path();
    if (!enabled()) return not_found_page();
    if (path == "/portal") {
      net::HttpResponse moved;
      moved.status = 301;
      moved.headers.push_back({"Location", "/portal/"});
      return moved;
    }
    if (path == "/portal/session") {
      if (req.method == "GET") {
        PortalSession s;
        std::string_view cookie = session_cookie(req);
        if (cookie.empty()) {
          return net::HttpResponse::error(401, "no_session", "open the portal from a portal link");
        }
        switch (check_session(cookie, now, s)) {
          case PortalCheck::kOk:
            return session_answer(200, s, std::string(), false, now);
          case PortalCheck::kExpired:
            return net::HttpResponse::error(
                401, "session_expired", "the portal session has expired: open a new portal link");
          case PortalCheck::kRevoked:
            return net::HttpResponse::error(
                401, "session_revoked",
                "the key that made this portal link was revoked or has expired");
          case PortalCheck::kInvalid:
            break;
        }
        return net::HttpResponse::error(401, "no_session", "open the portal from a portal link");
      }
      if (req.method == "DELETE") {
        net::HttpResponse gone;
        gone.status = 204;
        gone.content_type.clear();
        std::string c(kCookieName);
        c += "=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0";
        gone.headers.push_back({"Set-Cookie", std::move(c)});
        return gone;
      }
      if (req.method != "POST") {
        net::HttpResponse bad =
            net::HttpResponse::error(405, "method_not_allowed", "use GET, POST or DELETE");
        bad.headers.push_back({"Allow", "GET, POST, DELETE"});
        return bad;
      }
      // A JSON body only: a cross-site form cannot send one without a CORS preflight, which
      // this server never grants.
      const std::string* ct = req.header("content-type");
      if (ct == nullptr || !ct->starts_with("application/json")) {
        return net::HttpResponse::error(415, "unsupported_media_type",
                                        "send {\"link\": \"<token>\"} as application/json");
      }
      simdjson::dom::parser p;
      simdjson::dom::element el;
      std::string_view link;
      if (p.parse(req.body).get(el) || el["link"].get(link)) {
        return net::HttpResponse::error(400, "invalid_value", "send {\"link\": \"<token>\"}",
                                        "link");
      }
      PortalSession s;
      std::string cookie;
      switch (open_link(link, now, s, cookie)) {
        case PortalCheck::kOk:
          return session_answer(200, s, cookie, is_https(req), now);
        case PortalCheck::kExpired:
          return net::HttpResponse::error(
              401, "link_expired", "this portal link has expired: ask for a new one", "link");
        case PortalCheck::kRevoked:
          return net::HttpResponse::error(
              401, "link_revoked", "the key that made this portal link was revoked or has expired",
              "link");
        case PortalCheck::kInvalid:
          break;
      }
      return net::HttpResponse::error(401, "link_invalid", "this portal link is not valid", "link");
    }
    if (req.method != "GET" && req.method != "HEAD") {
      net::HttpResponse bad = net::HttpResponse::error(405, "method_not_allowed", "use GET");
      bad.headers.push_back({"Allow", "GET"});
      return bad;
    }
    if (!path.starts_with("/portal/")) return not_found_page();
    std::string_view name = path.substr(std::string_view("/portal/").size());
    if (name.empty()) name = "index.html";
    const PortalAsset* a = find_portal_asset(name);
    if (a == nullptr) return not_found_page();
    net::HttpResponse ok;
    ok.content_type = std::string(a->content_type);
    ok.body = std::string(a->body);
    ok.headers.push_back({"Cache-Control", "no-cache"});
    return ok;
  }();
  add_security_headers(r);
  return r;
}

}  // namespace ringcast::portal
