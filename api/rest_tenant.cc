// The REST adapter's tenant-scoped resources (SPEC R14, R8.4): tenant keys, portal links, the
// attempts chart, settings and the owner e-mail's confirmation (docs/security.md "Owner e-mail").
#include <simdjson.h>

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "api/keys.h"
#include "api/rest_internal.h"
#include "core/engine.h"
#include "core/input_rules.h"
#include "core/time.h"
#include "core/types.h"
#include "net/http_server.h"
#include "portal/portal.h"
#include "views/records.h"

namespace ringcast::api {

using views::rfc3339;

namespace rest {

// -- SPEC R14: keys, portal links, the attempts chart --

namespace {

void write_key(Writer& w, const ApiKey& k, WallTime now) {
  w.begin_object()
      .field("id", k.id)
      .field("prefix", KeyRegistry::prefix_of(k))
      .field("tenant", k.tenant)
      .field("name", k.name)
      .field("scope", k.read_only ? "read_only" : "read_write")
      .field("created_at", rfc3339(k.created_at))
      .key("expires_at");
  if (k.expires_at == WallTime()) {
    w.null();
  } else {
    w.value(rfc3339(k.expires_at));
  }
  w.field("expired", k.expires_at != WallTime() && now >= k.expires_at);
  w.end_object();
}

}  // namespace

// GET|POST /v1/tenants/{t}/keys, DELETE /v1/tenants/{t}/keys/{id} (admin only: handle()).
// POST {"name"?, "scope"?: "read_write"|"read_only", "expires_at"?: RFC 3339} → 201 with the
// key itself ("key"), shown this once.
void key_routes(Call& c, const std::string& tenant) {
  KeyRegistry* keys = c.opt.keys;
  if (keys == nullptr) {
    return c.answer(HttpResponse::error(404, "keys_off", "this server keeps no tenant keys"));
  }
  const std::string& m = c.req.method;
  if (c.segs.size() == 5) {
    if (m != "DELETE") return c.answer(method_not_allowed("DELETE"));
    return c.read([keys, tenant, id = c.segs[4]]() -> HttpResponse {
      if (auto r = keys->revoke(tenant, id); !r) return error_response(r.error());
      log::info("api_key_revoked", {{"tenant", tenant}, {"key_id", id}},
                "tenant {}: API key {} revoked", tenant, id);
      HttpResponse gone;
      gone.status = 204;
      gone.content_type.clear();
      return gone;
    });
  }
  if (m == "GET") {
    Writer w;
    const WallTime now = wall_now();
    w.begin_object().key("keys").begin_array();
    for (const ApiKey& k : keys->list(tenant)) write_key(w, k, now);
    w.end_array().end_object();
    return c.answer(ok_json(200, w));
  }
  if (m != "POST") return c.answer(method_not_allowed("GET, POST"));
  std::string name;
  bool read_only = false;
  WallTime expires_at;
  auto bad = read_object(
      c.parsers.ondemand, c.req.body.data(), c.req.body.size(), c.capacity(),
      [&](std::string_view key, od::value& v) -> std::optional<Bad> {
        if (key == "name") {
          if (auto e = get_string(v, "name", name)) return e;
          if (name.size() > kMaxKeyNameBytes || !printable_text(name)) {
            return Bad{"invalid_value",
                       "name is at most " + std::to_string(kMaxKeyNameBytes) +
                           " bytes without control characters",
                       "name"};
          }
          return std::nullopt;
        }
        if (key == "scope") {
          std::string s;
          if (auto e = get_string(v, "scope", s)) return e;
          if (s != "read_write" && s != "read_only") {
            return Bad{"invalid_value", "scope is read_write or read_only", "scope"};
          }
          read_only = s == "read_only";
          return std::nullopt;
        }
        if (key == "expires_at") {
          if (is_null(v)) return std::nullopt;
          std::string s;
          if (auto e = get_string(v, "expires_at", s)) return e;
          auto t = parse_rfc3339(s);
          if (!t) return Bad{"invalid_value", "expires_at is an RFC 3339 time", "expires_at"};
          expires_at = *t;
          return std::nullopt;
        }
        return Bad{"unknown_field", "unknown field " + std::string(key), std::string(key)};
      },
      /*empty_is_object=*/true);  // every field is optional: no body is {}
  if (bad) return c.answer(*bad);
  c.read([keys, tenant, name = std::move(name), read_only, expires_at]() mutable -> HttpResponse {
    const WallTime now = wall_now();
    if (expires_at != WallTime() && expires_at <= now) {
      return HttpResponse::error(400, "invalid_value", "expires_at is in the past", "expires_at");
    }
    auto made = keys->create(tenant, std::move(name), read_only, expires_at, now);
    if (!made) return error_response(made.error());
    log::info("api_key_created",  // its id (public), never its text (SPEC R14)
              {{"tenant", tenant}, {"key_id", made->record.id}, {"read_only", read_only}},
              "tenant {}: API key {} created", tenant, made->record.id);
    Writer w;
    w.begin_object().field("key", made->text).key("record");
    write_key(w, made->record, now);
    w.end_object();
    return ok_json(201, w);
  });
}

// POST /v1/tenants/{t}/portal-links {"scope"?: "manage"|"view", "ttl_seconds"?} → 201
// {"url", "token", "scope", "expires_at"}. A read-only key or view session mints view links.
void portal_links(Call& c, const std::string& tenant) {
  if (c.req.method != "POST") return c.answer(method_not_allowed("POST"));
  if (c.portal == nullptr || !c.portal->enabled()) {
    return c.answer(HttpResponse::error(503, "portal_off",
                                        "the portal is off on this node (no portal.secret)"));
  }
  const PortalOptions& po = c.portal->options();
  PortalScope scope = c.who.read_only ? PortalScope::kView : PortalScope::kManage;
  uint64_t ttl_s = static_cast<uint64_t>(po.link_ttl.count() / 1'000'000'000);
  const uint64_t ttl_max = static_cast<uint64_t>(po.link_ttl_max.count() / 1'000'000'000);
  auto bad = read_object(
      c.parsers.ondemand, c.req.body.data(), c.req.body.size(), c.capacity(),
      [&](std::string_view key, od::value& v) -> std::optional<Bad> {
        if (key == "scope") {
          std::string s;
          if (auto e = get_string(v, "scope", s)) return e;
          auto sc = parse_portal_scope(s);
          if (!sc) return Bad{"invalid_value", "scope is manage or view", "scope"};
          scope = *sc;
          return std::nullopt;
        }
        if (key == "ttl_seconds") {
          if (auto e = get_uint(v, "ttl_seconds", ttl_max, ttl_s)) return e;
          if (ttl_s == 0) return Bad{"invalid_value", "ttl_seconds is at least 1", "ttl_seconds"};
          return std::nullopt;
        }
        return Bad{"unknown_field", "unknown field " + std::string(key), std::string(key)};
      },
      /*empty_is_object=*/true);  // every field is optional: no body is {}
  if (bad) return c.answer(*bad);
  if (scope == PortalScope::kManage && c.who.read_only) {
    return c.answer(
        HttpResponse::error(403, "read_only", "a read-only key mints view links only", "scope"));
  }
  const WallTime now = wall_now();
  const WallTime expires = now + std::chrono::seconds(ttl_s);
  const std::string token = c.portal->mint_link(tenant, scope, expires, c.who.key_id, now);
  log::info("portal_link_created",  // never the link's token (SPEC R14)
            {{"tenant", tenant}, {"scope", portal_scope_name(scope)}, {"ttl_seconds", ttl_s}},
            "tenant {}: portal link ({}) for {} s", tenant, portal_scope_name(scope), ttl_s);
  const std::string* host = c.req.header("host");
  const std::string* proto = c.req.header("x-forwarded-proto");
  Writer w;
  w.begin_object()
      .field("url", c.portal->link_url(token, host ? *host : "localhost",
                                       proto != nullptr && *proto == "https"))
      .field("token", token)
      .field("scope", portal_scope_name(scope))
      .field("expires_at", rfc3339(expires))
      .end_object();
  c.answer(ok_json(201, w));
}

// GET /v1/tenants/{t}/stats/attempts: the last 24 hours of the tenant's attempts by outcome, in
// hourly buckets (oldest first), read from the delivery log: the newest
// stats_max_deliveries deliveries created in the window and every attempt of theirs.
void attempt_stats(Call& c, const std::string& tenant) {
  if (c.req.method != "GET") return c.answer(method_not_allowed("GET"));
  c.read([&engine = c.engine, tenant, cap = c.opt.stats_max_deliveries,
          max_rows = c.opt.stats_max_rows, max_time = c.opt.stats_max_time]() -> HttpResponse {
    // SPEC R14: one tenant's chart shares the read pool with every tenant's log reads, so its
    // scan is bounded by rows read (every delivery counts, with attempts or not) and by time.
    const auto started = std::chrono::steady_clock::now();
    size_t rows = 0;
    constexpr int kBuckets = 24;
    constexpr int64_t kBucketMs = 3'600'000;
    const int64_t now_ms = wall_now().ms();
    const int64_t to_ms = (now_ms / kBucketMs + 1) * kBucketMs;  // the current hour's end
    const int64_t from_ms = to_ms - kBuckets * kBucketMs;
    struct Bucket {
      uint64_t delivered = 0, failed = 0, unknown = 0;
    };
    std::array<Bucket, kBuckets> b{};
    bool truncated = false;
    size_t seen = 0;
    std::string cursor;
    bool done = false;
    while (!done) {
      auto page = engine.list_deliveries(tenant, std::nullopt, std::nullopt, 200, cursor);
      if (!page) return error_response(page.error());
      if (page->items.empty() && cursor.empty()) {
        if (auto known = check_tenant(engine, tenant); !known) return error_response(known.error());
      }
      std::vector<DeliveryId> ids;  // the page's deliveries to count, read together
      for (const Delivery& d : page->items) {
        // Attempts can come later than their delivery's creation, never earlier.
        if (d.created_at.ms() < from_ms - 7 * 24 * kBucketMs) {
          done = true;
          break;
        }
        if (rows++ >= max_rows) {
          truncated = true;
          done = true;
          break;
        }
        if (d.attempts == 0) continue;
        if (seen++ >= cap) {
          truncated = true;
          done = true;
          break;
        }
        ids.push_back(d.id);
      }
      auto details = engine.get_deliveries(tenant, ids);
      if (!details) return error_response(details.error());
      for (const auto& detail : *details) {
        if (!detail) continue;
        for (const Attempt& a : detail->attempts) {
          if (is_history_record(a.number) || is_check_record(a.number)) continue;
          const int64_t at = a.started_at.ms();
          if (at < from_ms || at >= to_ms) continue;
          Bucket& x = b[static_cast<size_t>((at - from_ms) / kBucketMs)];
          switch (a.outcome) {
            case Outcome::kSuccess:
              x.delivered++;
              break;
            case Outcome::kUnknown:
              x.unknown++;
              break;
            default:
              x.failed++;
          }
        }
      }
      if (page->next_cursor.empty()) break;
      cursor = page->next_cursor;
      if (std::chrono::steady_clock::now() - started >= max_time) {
        truncated = true;
        break;
      }
    }
    Writer w;
    w.begin_object()
        .field("tenant", tenant)
        .field("from", rfc3339(WallTime::from_ns(from_ms * 1'000'000)))
        .field("to", rfc3339(WallTime::from_ns(to_ms * 1'000'000)))
        .field("bucket_seconds", static_cast<uint64_t>(kBucketMs / 1000))
        .key("buckets")
        .begin_array();
    for (int i = 0; i < kBuckets; ++i) {
      w.begin_object()
          .field("start", rfc3339(WallTime::from_ns((from_ms + i * kBucketMs) * 1'000'000)))
          .field("delivered", b[i].delivered)
          .field("failed", b[i].failed)
          .field("unknown", b[i].unknown)
          .end_object();
    }
    w.end_array().field("truncated", truncated).end_object();
    return ok_json(200, w);
  });
}

namespace {

// GET|PUT /v1/tenants/{t}/settings {"owner_email": "a@b.example" | null} (SPEC R8.4). An
// address the platform sets is confirmed at once; one a merchant sets gets a confirmation link
// by e-mail and no notice until it is followed (SPEC R14, docs/security.md "Owner e-mail").
HttpResponse settings_answer(const std::string& tenant, const TenantSettings& s, bool put) {
  Writer w;
  w.begin_object().field("tenant", tenant).key("owner_email");
  if (s.owner_email.empty()) {
    w.null();
  } else {
    w.value(s.owner_email);
  }
  w.field("owner_email_confirmed", s.owner_email_confirmed);
  w.key("confirmation_sent_at");
  if (s.confirmation_sent_at == WallTime()) {
    w.null();
  } else {
    w.value(rfc3339(s.confirmation_sent_at));
  }
  if (put) w.field("confirmation_sent", s.confirmation_sent);
  w.end_object();
  return ok_json(200, w);
}

// {"owner_email": "<address>"} → the address; a Bad naming the field otherwise. `nullable`:
// null reads as "" (clears it).
std::variant<std::string, Bad> read_owner_email(Call& c, bool nullable) {
  std::optional<std::string> email;
  auto bad = read_object(
      c.parsers.ondemand, c.req.body.data(), c.req.body.size(), c.capacity(),
      [&](std::string_view key, od::value& v) -> std::optional<Bad> {
        if (key != "owner_email") {
          return Bad{"unknown_field", "unknown field " + std::string(key), std::string(key)};
        }
        if (nullable && is_null(v)) {
          email = std::string();
          return std::nullopt;
        }
        std::string s;
        if (auto e = get_string(v, "owner_email", s)) return e;
        if (!valid_email(s)) {
          return Bad{"invalid_value", "owner_email must be an address like owner@example.com",
                     "owner_email"};
        }
        email = std::move(s);
        return std::nullopt;
      });
  if (bad) return *bad;
  if (!email) {
    return Bad{"missing_field",
               nullable ? "owner_email is required (null clears it)" : "owner_email is required",
               "owner_email"};
  }
  return std::move(*email);
}

}  // namespace

void tenant_settings(Call& c, const std::string& tenant) {
  auto r = share(std::move(c.responder));
  const std::string& m = c.req.method;
  if (m == "GET") {
    return c.engine.get_tenant_settings(tenant, [r, tenant](Result<TenantSettings> res) {
      r->send(res ? settings_answer(tenant, *res, false) : error_response(res.error()));
    });
  }
  if (m != "PUT") return r->send(method_not_allowed("GET, PUT"));
  auto email = read_owner_email(c, true);
  if (auto* bad = std::get_if<Bad>(&email)) {
    return r->send(HttpResponse::error(400, bad->code, bad->message, bad->field));
  }
  TenantSettings in;
  in.owner_email = std::move(std::get<std::string>(email));
  in.by_platform = c.who.admin();
  c.engine.set_tenant_settings(tenant, std::move(in), [r, tenant](Result<TenantSettings> res) {
    if (!res) {
      HttpResponse e = error_response(res.error());
      return r->send(std::move(e));
    }
    r->send(settings_answer(tenant, *res, true));
  });
}

// POST /v1/tenants/{t}/settings/owner-email/confirm {"owner_email"}: the platform (or a
// confirmation link it signed, /portal/confirm-email) confirms the address if it is still the
// tenant's; 409 owner_email_changed otherwise.
void confirm_owner_email(Call& c, const std::string& tenant) {
  if (c.req.method != "POST") return c.answer(method_not_allowed("POST"));
  auto email = read_owner_email(c, false);
  if (auto* bad = std::get_if<Bad>(&email)) return c.answer(*bad);
  auto r = share(std::move(c.responder));
  c.engine.confirm_owner_email(
      tenant, std::move(std::get<std::string>(email)), [r, tenant](Result<TenantSettings> res) {
        r->send(res ? settings_answer(tenant, *res, false) : error_response(res.error()));
      });
}

}  // namespace rest

using namespace rest;  // RestApi's member below uses the parts' shared names (rest_internal.h)

namespace {

std::string html_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char ch : s) {
    switch (ch) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += ch;
    }
  }
  return out;
}

// A plain page (no script, no inline style: the portal's CSP) with an optional form that POSTs
// `token` back.
HttpResponse confirm_page(const Portal& portal, uint16_t status, std::string_view title,
                          std::string_view text, std::string_view token = {}) {
  std::string b = "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>";
  b += html_escape(title);
  b += "</title></head><body><main><h1>";
  b += html_escape(title);
  b += "</h1><p id=\"message\">";
  b += html_escape(text);
  b += "</p>";
  if (!token.empty()) {
    b += "<form method=\"post\" action=\"/portal/confirm-email\"><input type=\"hidden\" "
         "name=\"token\" value=\"";
    b += html_escape(token);
    b += "\"><button type=\"submit\" id=\"confirm\">Confirm this address</button></form>";
  }
  b += "</main></body></html>\n";
  HttpResponse r;
  r.status = status;
  r.content_type = "text/html; charset=utf-8";
  r.body = std::move(b);
  r.headers.push_back({"Cache-Control", "no-store"});
  portal.add_security_headers(r);
  return r;
}

}  // namespace

void RestApi::confirm_email_page(HttpRequest&& request, Responder responder, WallTime now) {
  const Portal& portal = *portal_;
  if (!portal.enabled()) return responder.send(not_found("route /portal/confirm-email"));
  const std::string& m = request.method;
  std::optional<Query> q;
  if (m == "GET" || m == "HEAD") {
    q = parse_query(request.query());
  } else if (m == "POST") {
    // The page's form (application/x-www-form-urlencoded): the token is the credential, so a
    // cross-site form can only confirm an address whose link it already holds.
    const std::string* ct = request.header("content-type");
    if (ct == nullptr || !ct->starts_with("application/x-www-form-urlencoded")) {
      return responder.send(HttpResponse::error(415, "unsupported_media_type",
                                                "send token=<token> as a form", "token"));
    }
    q = parse_query(request.body);
  } else {
    HttpResponse bad = method_not_allowed("GET, POST");
    return responder.send(std::move(bad));
  }
  const std::string* token = q ? q->get("token") : nullptr;
  std::string tenant, email;
  const PortalCheck check = token != nullptr
                                ? portal.check_email_confirmation(*token, now, tenant, email)
                                : PortalCheck::kInvalid;
  if (check == PortalCheck::kExpired) {
    return responder.send(confirm_page(
        portal, 410, "This link has expired",
        "Set the owner address again where you manage your webhooks to get a new link."));
  }
  if (check != PortalCheck::kOk || !valid_tenant(tenant, options_.max_tenant_bytes)) {
    return responder.send(
        confirm_page(portal, 400, "This link is not valid",
                     "Open the link exactly as the e-mail gave it, or ask for a new one."));
  }
  if (m != "POST") {
    return responder.send(
        confirm_page(portal, 200, "Confirm your address",
                     "Confirm " + email + " as the owner address for the webhooks of " + tenant +
                         ": it then gets notices, for instance when an endpoint is disabled.",
                     *token));
  }
  // The link is the platform's word (signed under the portal's key): its confirm route, as the
  // platform, on the tenant's owner (forwarded in cluster mode).
  HttpRequest inner;
  inner.method = "POST";
  inner.target = "/v1/tenants/" + tenant + "/settings/owner-email/confirm";
  inner.headers.push_back({"content-type", "application/json"});
  if (const std::string* host = request.header("host")) inner.headers.push_back({"host", *host});
  Writer w;
  w.begin_object().field("owner_email", email).end_object();
  std::string body = w.take();
  inner.body.reserve(body.size() + net::kBodyPadding);
  inner.body.assign(body);
  inner.peer = request.peer;
  inner.tls = request.tls;
  auto outer = share(std::move(responder));
  Responder translated = Responder::from_function([outer, &portal, email, tenant](HttpResponse r) {
    if (r.status == 200) {
      return outer->send(confirm_page(portal, 200, "Address confirmed",
                                      email + " now gets the webhook notices of " + tenant + "."));
    }
    if (r.status == 409) {
      return outer->send(confirm_page(
          portal, 409, "The address has changed",
          "The owner address of " + tenant +
              " is no longer this one: this link confirms nothing. Use the newest link."));
    }
    outer->send(confirm_page(portal, r.status >= 500 ? 503 : r.status, "Not confirmed yet",
                             "Try the link again in a moment."));
  });
  auto segs = split_path(inner.path());
  Principal platform;  // Kind::kAdmin
  tenant_call(std::move(inner), *segs, platform, false, std::move(translated));
}

}  // namespace ringcast::api
