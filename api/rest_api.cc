// The REST adapter's dispatch (api/rest_api.h): health, the public OpenAPI document, /metrics,
// authentication then the /v1 routes, a tenant's call on its owner (cluster mode); the
// per-resource handlers are in the api/rest_*.cc files (rest_internal.h).
#include "api/rest_api.h"

#include <simdjson.h>

#include <charconv>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "api/auth_throttle.h"
#include "api/forward.h"
#include "api/forward_auth.h"
#include "api/keys.h"
#include "api/openapi.h"
#include "api/read_pool.h"
#include "api/rest_internal.h"
#include "api/routes.h"
#include "core/event_input.h"
#include "core/types.h"
#include "net/json_writer.h"
#include "net/system_clock.h"
#include "portal/portal.h"
#include "views/records.h"

namespace ringcast::api {

using views::rfc3339;
using views::write_breaker;
using views::write_event;
using views::write_notification;

// ---------------------------------------------------------------------------------------------
// Small helpers

bool is_url_form_code(std::string_view code) {
  return code == "not_https" || code == "port_not_allowed" || code == "userinfo_not_allowed" ||
         code == "fragment_not_allowed" || code == "invalid_url" || code == "url_too_long" ||
         code == "url_too_short";
}

uint16_t http_status_for(const Error& e) {
  switch (e.code) {
    case Errc::kInvalidArgument:
      return e.reason && is_url_form_code(e.reason) ? 422 : 400;
    case Errc::kNotFound:
      return 404;
    case Errc::kConflict:
      return 409;
    case Errc::kLimitExceeded:
      return 429;
    case Errc::kUnavailable:
      return 503;
    default:
      return 500;
  }
}

HttpResponse error_response(const Error& e) {
  HttpResponse r = HttpResponse::error(http_status_for(e), e.reason_or_code(),
                                       e.message ? e.message : "", e.field ? e.field : "");
  // Every 503 is worth retrying soon: shutting down (another node or the restart answers),
  // not_owner (cluster mode: the partition is between owners or owned by another node), the
  // store unreachable.
  // A full disk is freed by an operator, not in a second: 5 s.
  if (r.status == 503)
    r.headers.push_back(
        {"Retry-After", e.reason_or_code() == std::string_view("storage_full") ? "5" : "1"});
  // A quota (SPEC R14): the per-minute ones renew within a minute; the others when something
  // ends (a job) or is removed (an endpoint, a key): a minute is the least worth waiting.
  if (r.status == 429) {
    const bool per_second = std::string_view(e.reason_or_code()) == "tenant_rate_limited";
    r.headers.push_back({"Retry-After", per_second ? "1" : "60"});
  }
  return r;
}

std::optional<std::string> percent_decode(std::string_view s, bool plus_is_space) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (c == '%') {
      if (i + 2 >= s.size()) return std::nullopt;
      auto hex = [](char h) -> int {
        if (h >= '0' && h <= '9') return h - '0';
        if (h >= 'a' && h <= 'f') return h - 'a' + 10;
        if (h >= 'A' && h <= 'F') return h - 'A' + 10;
        return -1;
      };
      int hi = hex(s[i + 1]);
      int lo = hex(s[i + 2]);
      if (hi < 0 || lo < 0) return std::nullopt;
      out += static_cast<char>(hi * 16 + lo);
      i += 2;
    } else if (c == '+' && plus_is_space) {
      out += ' ';
    } else {
      out += c;
    }
  }
  return out;
}

namespace rest {

HttpResponse ok_json(uint16_t status, Writer& w) {
  return HttpResponse::json(status, w.take());
}

HttpResponse bad_request(std::string_view code, std::string_view message, std::string_view field) {
  return HttpResponse::error(400, code, message, field);
}

// 404 answers name what was not found (docs/operations.md, "Errors"): `not_found` only for a
// route that does not exist; a tenant, endpoint, delivery or event that does not exist is
// `unknown_<thing>` with `field` = <thing>, the codes the engine answers with for tenants and
// endpoints (engine/shard.cc), so that one route never answers one thing in two ways.
HttpResponse not_found(std::string_view what) {
  return HttpResponse::error(404, "not_found", std::string(what) + " not found");
}

HttpResponse unknown(std::string_view thing, std::string_view id) {
  return HttpResponse::error(
      404, "unknown_" + std::string(thing),
      "no " + std::string(thing) + " " + std::string(id) + " for this tenant", thing);
}

SharedResponder share(Responder r) {
  return std::make_shared<Responder>(std::move(r));
}

std::optional<uint64_t> parse_u64(std::string_view s) {
  if (s.empty() || s.size() > 20) return std::nullopt;
  uint64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
  return v;
}

std::optional<size_t> parse_limit(std::string_view s, size_t max) {
  auto n = parse_u64(s);
  if (!n || *n < 1 || *n > max) return std::nullopt;
  return static_cast<size_t>(*n);
}

HttpResponse limit_error(size_t max) {
  return bad_request("invalid_value", "limit must be 1.." + std::to_string(max), "limit");
}

std::string_view trim_ws(std::string_view s) {
  auto ws = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
  while (!s.empty() && ws(s.front())) s.remove_prefix(1);
  while (!s.empty() && ws(s.back())) s.remove_suffix(1);
  return s;
}

WallTime wall_now() {
  return net::SystemClock().wall_now();
}

// --- routing ----------------------------------------------------------------------------------

std::optional<Query> parse_query(std::string_view q) {
  Query out;
  while (!q.empty()) {
    size_t amp = q.find('&');
    std::string_view part = q.substr(0, amp);
    q = amp == std::string_view::npos ? std::string_view() : q.substr(amp + 1);
    if (part.empty()) continue;
    size_t eq = part.find('=');
    auto k = percent_decode(part.substr(0, eq), true);
    auto v = percent_decode(eq == std::string_view::npos ? std::string_view() : part.substr(eq + 1),
                            true);
    if (!k || !v) return std::nullopt;
    out.params.emplace_back(std::move(*k), std::move(*v));
  }
  return out;
}

std::optional<std::vector<std::string>> split_path(std::string_view path) {
  std::vector<std::string> segs;
  if (path.empty() || path.front() != '/') return std::nullopt;
  path.remove_prefix(1);
  while (true) {
    size_t slash = path.find('/');
    auto seg = percent_decode(path.substr(0, slash), false);
    if (!seg) return std::nullopt;
    segs.push_back(std::move(*seg));
    if (slash == std::string_view::npos) break;
    path.remove_prefix(slash + 1);
  }
  if (!segs.empty() && segs.back().empty()) segs.pop_back();  // trailing slash
  return segs;
}

HttpResponse method_not_allowed(std::string_view allow) {
  HttpResponse r = HttpResponse::error(405, "method_not_allowed",
                                       "method not allowed here; allowed: " + std::string(allow));
  r.headers.push_back({"Allow", std::string(allow)});
  return r;
}

namespace {

void tenant_routes(Call& c) {
  const auto& segs = c.segs;  // v1 tenants T ...
  const std::string& tenant = segs[2];
  if (auto e = check_tenant_name(tenant, c.opt.max_tenant_bytes)) {
    return c.answer(bad_request(e->code, e->message, e->field));
  }
  if (segs.size() < 4) return c.answer(not_found("route"));
  const std::string& what = segs[3];
  const std::string& m = c.req.method;
  if (what == "endpoints") return endpoint_routes(c, tenant);
  if (what == "events") {
    if (segs.size() == 4) {
      if (m != "POST") return c.answer(method_not_allowed("POST"));
      return submit_event(c, tenant);
    }
    if (segs.size() == 5) {
      if (m != "GET") return c.answer(method_not_allowed("GET"));
      return c.read([&engine = c.engine, tenant, event_id = segs[4]]() -> HttpResponse {
        auto ev = engine.get_event(tenant, event_id);
        if (!ev) return error_response(ev.error());
        if (!ev->has_value()) return unknown("event", event_id);
        Writer w;
        write_event(w, **ev);
        return ok_json(200, w);
      });
    }
    if (segs.size() == 6 && segs[5] == "replay") {
      if (m != "POST") return c.answer(method_not_allowed("POST"));
      return replay_event(c, tenant, segs[4]);
    }
    return c.answer(not_found("route"));
  }
  if (what == "jobs" && segs.size() == 5) {
    if (m != "GET") return c.answer(method_not_allowed("GET"));
    auto id = parse_u64(segs[4]);
    if (!id) return c.answer(unknown("job", segs[4]));
    return c.engine.get_job(tenant, *id, job_answer(share(std::move(c.responder)), 200));
  }
  if (what == "deliveries") {
    if (segs.size() == 6 && segs[5] == "resolve") {
      if (m != "POST") return c.answer(method_not_allowed("POST"));
      return resolve_delivery(c, tenant, segs[4]);
    }
    if (segs.size() == 6 && segs[5] == "resend") {
      if (m != "POST") return c.answer(method_not_allowed("POST"));
      return resend_delivery(c, tenant, segs[4]);
    }
    if (m != "GET") return c.answer(method_not_allowed("GET"));
    if (segs.size() == 4) return list_deliveries(c, tenant);
    if (segs.size() == 5 && segs[4] == "recent") return recent_deliveries(c, tenant);
    if (segs.size() == 5) return get_delivery(c, tenant, segs[4]);
    return c.answer(not_found("route"));
  }
  if (what == "breaker") {
    auto answer = [](SharedResponder r, std::string t) {
      return [r, t = std::move(t)](Result<BreakerView> res) {
        if (!res) return r->send(error_response(res.error()));
        Writer w;
        write_breaker(w, t, *res);
        r->send(ok_json(200, w));
      };
    };
    if (segs.size() == 4) {
      if (m != "GET") return c.answer(method_not_allowed("GET"));
      return c.engine.get_breaker(tenant, answer(share(std::move(c.responder)), tenant));
    }
    if (segs.size() == 5 && segs[4] == "reset") {
      if (m != "POST") return c.answer(method_not_allowed("POST"));
      return c.engine.reset_breaker(tenant, answer(share(std::move(c.responder)), tenant));
    }
    return c.answer(not_found("route"));
  }
  if (what == "subscription" && segs.size() == 4) {
    if (m != "PUT") return c.answer(method_not_allowed("PUT"));
    std::optional<bool> active;
    auto bad = read_object(
        c.parsers.ondemand, c.req.body.data(), c.req.body.size(), c.capacity(),
        [&](std::string_view key, od::value& v) -> std::optional<Bad> {
          if (key != "active") {
            return Bad{"unknown_field", "unknown field " + std::string(key), std::string(key)};
          }
          bool b = false;
          if (auto e = get_bool(v, "active", b)) return e;
          active = b;
          return std::nullopt;
        });
    if (bad) return c.answer(*bad);
    if (!active) return c.answer(Bad{"missing_field", "active is required", "active"});
    auto r = share(std::move(c.responder));
    bool want = *active;
    c.engine.set_subscription(tenant, want, [r, tenant, want](Result<bool> res) {
      if (!res) return r->send(error_response(res.error()));
      Writer w;
      w.begin_object().field("tenant", tenant).field("active", want).end_object();
      r->send(ok_json(200, w));
    });
    return;
  }
  if (what == "settings" && segs.size() == 4) return tenant_settings(c, tenant);
  if (what == "settings" && segs.size() == 6 && segs[4] == "owner-email" && segs[5] == "confirm")
    return confirm_owner_email(c, tenant);
  if (what == "keys" && (segs.size() == 4 || segs.size() == 5)) return key_routes(c, tenant);
  if (what == "portal-links" && segs.size() == 4) return portal_links(c, tenant);
  if (what == "portal-sessions" && segs.size() == 5 && segs[4] == "end") {
    // The admin ends every portal link and session of the tenant at once (SPEC R14.3).
    if (m != "POST") return c.answer(method_not_allowed("POST"));
    KeyRegistry* keys = c.opt.keys;
    if (keys == nullptr) {
      return c.answer(HttpResponse::error(503, "not_supported", "no key store on this node"));
    }
    return c.read([keys, tenant]() -> HttpResponse {
      const WallTime now = wall_now();
      if (auto r = keys->end_portal_sessions(tenant, now); !r) return error_response(r.error());
      Writer w;
      w.begin_object()
          .field("tenant", tenant)
          .field("sessions_ended_before", rfc3339(now))
          .end_object();
      return ok_json(200, w);
    });
  }
  if (what == "stats" && segs.size() == 5 && segs[4] == "attempts") return attempt_stats(c, tenant);
  if (what == "notifications" && segs.size() == 4) {
    if (m != "GET") return c.answer(method_not_allowed("GET"));
    return c.read([&engine = c.engine, tenant]() -> HttpResponse {
      auto list = engine.notifications(tenant);
      if (!list) return error_response(list.error());
      if (list->empty()) {
        if (auto known = check_tenant(engine, tenant); !known) return error_response(known.error());
      }
      Writer w;
      w.begin_object().key("notifications").begin_array();
      for (const auto& n : *list) write_notification(w, n);
      w.end_array().end_object();
      return ok_json(200, w);
    });
  }
  c.answer(not_found("route"));
}

bool is_bulk_route(std::string_view path) {
  return path == "/v1/events/bulk" || path == "/v1/events/bulk/";
}

bool is_openapi_route(std::string_view path) {
  if (path.ends_with('/')) path.remove_suffix(1);  // as split_path() reads a trailing slash
  return path == kOpenApiPath;
}

}  // namespace

}  // namespace rest

// ---------------------------------------------------------------------------------------------
// The adapter

using namespace rest;  // the parts' shared names (rest_internal.h)

RestApi::RestApi(Engine& engine, RestApiOptions options)
    : engine_(engine), options_(std::move(options)), parsers_(std::make_unique<Parsers>()) {
  PortalOptions po = options_.portal;
  // A link or session a key minted ends with the key (SPEC R14).
  if (options_.keys != nullptr && !po.key_alive) {
    po.key_alive = [keys = options_.keys](std::string_view id, std::string_view tenant,
                                          WallTime now) { return keys->active(id, tenant, now); };
  }
  if (options_.keys != nullptr && !po.cutoff) {
    po.cutoff = [keys = options_.keys](std::string_view tenant) {
      return keys->portal_cutoff(tenant);
    };
  }
  portal_ = std::make_unique<Portal>(std::move(po));
  throttle_ = std::make_unique<AuthThrottle>(options_.auth_failures_per_minute);
  if (options_.read_threads > 0) {
    reads_ = std::make_unique<ReadPool>(
        ReadPoolOptions{options_.read_threads, options_.max_queued_reads});
  }
  if (options_.forward.find_owner) forwarder_ = Forwarder::create(options_.forward);
}

HttpResponse RestApi::metrics_response() const {
  HttpResponse r;
  r.content_type = "text/plain; version=0.0.4; charset=utf-8";
  r.body = engine_.metrics_text();
  if (forwarder_) r.body += forwarder_->metrics_text();
  r.body +=
      "# HELP ringcast_api_auth_failures_total Requests refused 401 (a missing, wrong, revoked "
      "or expired credential, or a bad forwarded signature).\n"
      "# TYPE ringcast_api_auth_failures_total counter\nringcast_api_auth_failures_total " +
      std::to_string(throttle_->failures()) +
      "\n# HELP ringcast_api_auth_throttled_total Requests answered 429 because their address "
      "failed authentication too often that minute.\n"
      "# TYPE ringcast_api_auth_throttled_total counter\nringcast_api_auth_throttled_total " +
      std::to_string(throttle_->refused()) + "\n";
  return r;
}

RestApi::~RestApi() {
  stop_reads();
}

void RestApi::stop_reads() {
  if (reads_) reads_->stop();
  if (forwarder_) forwarder_->stop();
}

size_t RestApi::queued_reads() const {
  return reads_ ? reads_->queued() : 0;
}

size_t RestApi::max_body_bytes(const HttpRequest& head) {
  // One limit for every request that carries no valid credential, however its path is spelled
  // ("/v1/…", "//v1/…", "/portal/…", an unknown path): only an authenticated call earns more.
  // The portal's pages hold their requests to it too (portal::PortalPages, api/front.h); what
  // still reaches here under "/portal" (the confirmation page, "/portals…") keeps it whatever
  // the credential.
  std::string_view path = head.path();
  if (forwarder_ && head.header(kForwardedHeader) != nullptr &&
      head.header(kPrincipalHeader) != nullptr) {
    // A forwarded call's signature covers its body, so it is checked once the body is in; a
    // forwarded call is never a bulk call (forwardable_route()).
    return options_.max_body_bytes;
  }
  if (path.starts_with("/portal")) return options_.max_unauthenticated_body_bytes;
  auto who = authenticate(head, options_, portal_.get(), wall_now());
  if (!std::holds_alternative<Principal>(who)) return options_.max_unauthenticated_body_bytes;
  return is_bulk_route(path) ? options_.max_bulk_body_bytes : options_.max_body_bytes;
}

void RestApi::handle(HttpRequest&& request, Responder responder) {
  std::string_view path = request.path();
  const std::string& m = request.method;
  // A disk that refuses writes (or a store that failed) leaves the process alive and serving
  // reads: /healthz stays 200 (restarting does not free space; docs/operations.md "Disk full,
  // read-only and failed syncs") and says why it is degraded; /readyz is 503 (no intake now).
  const char* storage_problem = engine_.storage_problem();
  if (path == "/healthz") {
    if (storage_problem != nullptr)
      return responder.send(HttpResponse::json(
          200, std::string(R"({"status":"degraded","reason":")") + storage_problem + "\"}"));
    return responder.send(HttpResponse::json(200, R"({"status":"ok"})"));
  }
  if (path == "/readyz") {
    bool ready = engine_.ready();
    if (ready && storage_problem != nullptr)
      return responder.send(HttpResponse::json(
          503, std::string(R"({"status":"not_ready","reason":")") + storage_problem + "\"}"));
    return responder.send(HttpResponse::json(
        ready ? 200 : 503, ready ? R"({"status":"ready"})" : R"({"status":"not_ready"})"));
  }
  // A public route (RouteClass::kPublic, docs/security.md "Route classes") describes the API
  // and reveals nothing: answered before any credential is looked at (a forwarded call's
  // signature too) and before the throttle, which guards credentials.
  if (is_openapi_route(path)) {
    if (m != "GET") return responder.send(method_not_allowed("GET"));
    return responder.send(HttpResponse::json(200, std::string(openapi_document())));
  }
  const WallTime now = wall_now();
  const bool guarded = path == "/metrics" || path.starts_with("/v1") || path.starts_with("//");
  if (guarded) {
    // SPEC R14: an address that failed authentication too often this minute waits it out.
    if (const int64_t wait_s = throttle_->blocked_for(request.peer, now); wait_s > 0) {
      HttpResponse r = HttpResponse::error(
          429, "too_many_auth_failures",
          "too many failed authentications from this address: retry after the minute");
      r.headers.push_back({"Retry-After", std::to_string(wait_s)});
      return responder.send(std::move(r));
    }
  }
  // A 401 counts against the client's address (AuthThrottle).
  auto refuse = [&](HttpResponse r) {
    if (r.status == 401) {
      throttle_->failed(request.peer, now);
      // Who and where, never what was presented (SPEC R14).
      if (log::enabled(log::Level::kInfo)) {
        const std::string client = to_string(request.peer);
        log::info("auth_failed", {{"client", client}, {"method", m}, {"path", path}},
                  "{} {}: authentication failed from {}", m, path, client);
      }
    }
    responder.send(std::move(r));
  };
  if (path == "/metrics") {
    if (m != "GET" && m != "HEAD") return responder.send(method_not_allowed("GET"));
    // SPEC R14: the figures name tenants and hosts; they are the platform's unless
    // server.metrics_public says otherwise (or they have a listener of their own).
    if (!options_.metrics_public) {
      const std::string* auth = request.header("authorization");
      if (auth == nullptr || !bearer_token_matches(*auth, options_.api_token)) {
        return refuse(unauthorized("unauthorized",
                                   "/metrics needs the admin token (or server.metrics_listen)"));
      }
    }
    return responder.send(metrics_response());
  }
  // The portal's other pages are not this adapter's: api::ApiFront mounts them beside it.
  if (path == "/portal/confirm-email") {
    return confirm_email_page(std::move(request), std::move(responder), now);
  }
  auto segs = split_path(path);
  if (!segs)
    return responder.send(bad_request("invalid_path", "malformed percent-encoding in path"));
  if (segs->empty() || (*segs)[0] != "v1") {
    return responder.send(not_found("route " + std::string(path)));
  }
  const bool forwarded = forwarder_ != nullptr && request.header(kForwardedHeader) != nullptr;
  Principal who;
  if (forwarded) {
    // Cluster mode: a call another node forwarded carries the principal that node
    // authenticated, signed under cluster.secret (api/forward_auth.h); no credential.
    forwarder_->count_received();
    const ForwardVerdict v =
        forwarder_->auth().verify(*request.header(kForwardedHeader), request, now, who);
    if (v != ForwardVerdict::kOk) {
      if (v == ForwardVerdict::kBusy) {
        HttpResponse busy =
            HttpResponse::error(503, "overloaded", "too many forwarded calls; retry in a moment");
        busy.headers.push_back({"Retry-After", "1"});
        return responder.send(std::move(busy));
      }
      return refuse(
          unauthorized(forward_verdict_code(v), "a forwarded call needs a valid, fresh signature"));
    }
  } else {
    auto authenticated = authenticate(request, options_, portal_.get(), now);
    if (auto* refused = std::get_if<HttpResponse>(&authenticated)) {
      return refuse(std::move(*refused));
    }
    who = std::get<Principal>(std::move(authenticated));
  }
  if (auto refused = authorize(who, *segs, m, path)) return responder.send(std::move(*refused));
  // The node that authenticated a forwarded call checked its key; the owner's view of the keys
  // may be a refresh behind (a key made a moment ago), so it does not ask again.
  if (!forwarded) {
    if (auto refused = still_valid(who, options_.keys, now)) return refuse(std::move(*refused));
  }
  if (segs->size() >= 3 && (*segs)[1] == "tenants") {
    return tenant_call(std::move(request), *segs, who, forwarded, std::move(responder));
  }
  Call c{engine_, options_, *parsers_, request, responder, *segs, reads_.get(), who, portal_.get()};
  if (segs->size() == 3 && (*segs)[1] == "events" && (*segs)[2] == "bulk") {
    if (m != "POST") return c.answer(method_not_allowed("POST"));
    return submit_bulk(c);
  }
  if (segs->size() == 2 && (*segs)[1] == "cluster") {
    if (m != "GET") return c.answer(method_not_allowed("GET"));
    if (!options_.cluster_status) {
      return c.answer(HttpResponse::error(404, "not_cluster",
                                          "this node does not run in cluster mode "
                                          "(storage.backend = \"redis\" and cluster.enabled = "
                                          "true)"));
    }
    return c.answer(HttpResponse::json(200, options_.cluster_status()));
  }
  if (segs->size() == 2 && (*segs)[1] == "intake" && options_.intake_status) {
    if (m != "GET") return c.answer(method_not_allowed("GET"));
    return c.answer(HttpResponse::json(200, options_.intake_status()));
  }
  c.answer(not_found("route " + std::string(path)));
}

void RestApi::tenant_call(HttpRequest&& request, std::vector<std::string>& segs,
                          const Principal& who, bool forwarded, Responder responder) {
  if (forwarder_ && !forwarded && forwardable_route(segs)) {
    // Cluster mode: kept whole, so that a not_owner answer can send it on to the owner.
    // A forwarded request is answered here, whatever the answer (one hop).
    auto saved = std::make_shared<HttpRequest>(std::move(request));
    Responder wrapped = forwarder_->wrap(saved, partition_of(segs[2]), who, std::move(responder));
    Call c{engine_, options_, *parsers_, *saved, wrapped, segs, reads_.get(), who, portal_.get()};
    return tenant_routes(c);
  }
  Call c{engine_, options_, *parsers_, request, responder, segs, reads_.get(), who, portal_.get()};
  tenant_routes(c);
}

}  // namespace ringcast::api
