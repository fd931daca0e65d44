// The REST adapter (docs/operations.md "HTTP API"): routes HTTP requests onto ringcast::Engine and
// turns its answers into JSON. Invariants: every /v1 route but the public GET /v1/openapi.json
// requires a credential (compared in constant time; no token configured → every such request is
// refused); an event's `payload` reaches the engine as the exact bytes of the request; every
// error answer is {"error": {"code", "message", "field"?}} with a 4xx/5xx status.
//
// Routes (ids are decimal strings; see the handlers in api/rest_*.cc for bodies):
//   GET  /healthz  /readyz                                   (no auth)
//   GET  /metrics                                            (the admin token, unless public)
//   GET  /v1/openapi.json                  this API as OpenAPI 3.1 (docs/openapi.yaml; public)
//   POST /v1/tenants/{t}/endpoints            → 201 endpoint + "secret"
//   GET  /v1/tenants/{t}/endpoints            → {"endpoints": [...]}
//   GET|PATCH|DELETE /v1/tenants/{t}/endpoints/{id}
//   POST /v1/tenants/{t}/endpoints/{id}/pause|resume|enable|test|secret/rotate
//   GET  /v1/tenants/{t}/endpoints/{id}/ordering?limit=   blocked / backlogged keys (SPEC R13)
//   POST /v1/tenants/{t}/events               → 202 {"event_id","deliveries"} | 200 repeat | 409
//                                             ("ordering_key"? SPEC R13.1)
//   GET  /v1/tenants/{t}/events/{event_id}
//   POST /v1/events/bulk  (NDJSON, one {"tenant","id","type","payload"} per line) → per-line
//   GET  /v1/tenants/{t}/deliveries?endpoint=&state=&limit=&cursor=
//   GET  /v1/tenants/{t}/deliveries/recent    (SPEC R10.2)
//   GET  /v1/tenants/{t}/deliveries/{id}      (with every attempt)
//   GET  /v1/tenants/{t}/breaker,  POST /v1/tenants/{t}/breaker/reset   (SPEC R4.8)
//   PUT  /v1/tenants/{t}/subscription {"active": bool}
//   GET  /v1/tenants/{t}/notifications        (SPEC R8.4)
//   GET  /v1/intake                           the bus intake sources (when configured)
//   GET  /v1/cluster                          cluster mode: this node's view (docs/cluster.md);
//                                             404 not_cluster on a single node
//   GET|PUT /v1/tenants/{t}/settings          {"owner_email"} (SPEC R8.4)
//   GET|POST /v1/tenants/{t}/keys, DELETE /v1/tenants/{t}/keys/{id}   tenant keys (admin only)
//   POST /v1/tenants/{t}/portal-links         {"scope","ttl_seconds"} → a portal URL (R14.3)
//   GET  /v1/tenants/{t}/stats/attempts       the last 24 h of attempts by outcome, per hour
//   GET|POST /portal/confirm-email            the owner-address confirmation page (SPEC R14)
// The portal's other pages (/portal, /portal/…) are portal::PortalPages, mounted beside this
// adapter by api::ApiFront (api/front.h), the handler the API listener serves; given one of
// those paths directly, the adapter answers 404 not_found.
// Authentication (SPEC R14.1): `Authorization: Bearer <admin token>` reaches everything;
// `Bearer rck_…` (a tenant key) or the portal's session cookie (+ X-CSRF-Token on every
// method but GET/HEAD) reach their tenant's routes only: another tenant's are 404
// unknown_tenant (no existence leak), admin routes 403 admin_only, writes with a read-only key
// or a view session 403 read_only, bulk lines naming another tenant 404 per line.
// In cluster mode a tenant route this node does not own is forwarded to the owner (forward.h).
// Status codes: 400 bad JSON / wrong type / missing or unknown field (the field is named),
// 401 auth, 404 not_found (route) / unknown_tenant / unknown_endpoint / unknown_delivery /
// unknown_event (with the field naming it; a tenant that never had an endpoint is
// unknown_tenant on every collection route), 405 wrong method, 409 conflict,
// 413 body or bulk too large, 422 URL form errors (code = the SPEC R6 code: not_https, ...),
// 429 engine limit, 503 engine unavailable, read queue full ("overloaded", Retry-After: 1) or
// shutting down.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "api/forward.h"
#include "api/keys.h"
#include "api/principal.h"
#include "core/engine.h"
#include "core/result.h"
#include "net/http_server.h"
#include "portal/portal.h"

namespace ringcast::api {

struct RestApiOptions {
  std::string api_token;                              // empty: every /v1 request gets 401
  size_t max_body_bytes = 1024 * 1024;                // JSON bodies
  size_t max_bulk_body_bytes = 64 * 1024 * 1024;      // NDJSON bulk bodies
  size_t max_unauthenticated_body_bytes = 64 * 1024;  // before the token is checked
  uint32_t max_bulk_events = 100'000;
  uint32_t max_id_bytes = 256;
  uint32_t max_tenant_bytes = 128;
  uint32_t max_type_bytes = 256;
  uint32_t max_event_types = 64;
  uint32_t default_list_limit = 50;
  uint32_t max_list_limit = 1000;
  // Delivery-log reads (GET deliveries, deliveries/recent, deliveries/{id}, events/{id},
  // notifications) block on the store, so they run on a read pool of this many threads, never
  // on the HTTP loop; 0 runs them inline on the loop thread (embedding, sans-I/O tests).
  uint32_t read_threads = 2;
  uint32_t max_queued_reads = 64;  // waiting for a read thread; beyond: 503 + Retry-After: 1
  // GET /v1/intake: the message-bus intake sources' state as JSON (operations.md §6); unset: 404.
  // Called on the HTTP loop thread; it must not block.
  std::function<std::string()> intake_status;
  // GET /v1/cluster: this node's cluster view as JSON (cluster/status_json.h, operations.md §7);
  // unset (single-node mode): 404 not_cluster. Called on the HTTP loop thread; it must not
  // block.
  std::function<std::string()> cluster_status;
  // SPEC R14.1: tenant-scoped API keys (null: only the admin token authenticates). Not owned;
  // must outlive the RestApi. The admin token manages them (/v1/tenants/{t}/keys).
  KeyRegistry* keys = nullptr;
  // The merchant portal (/portal/…, portal links, sessions). Its secret is independent of the
  // admin token (SPEC R14); empty: the portal is off.
  ringcast::portal::PortalOptions portal;
  // The portal's 24-hour attempts chart reads at most this many of the tenant's deliveries
  // (newest first); beyond, its answer says "truncated": true.
  uint32_t stats_max_deliveries = 2000;
  // And it reads at most this many deliveries in all (with attempts or not) and stops after
  // this long (a "truncated" answer either way), so that one tenant's chart cannot hold a read
  // thread every tenant's log reads share.
  uint32_t stats_max_rows = 20'000;
  std::chrono::milliseconds stats_max_time{500};
  // Cluster mode (api/forward.h, docs/cluster.md "How a non-owner reaches the owner"): a tenant
  // call this node's engine answers not_owner (every tenant route but event intake) is forwarded to
  // the partition's owner and its answer relayed. Off while forward.find_owner is unset.
  ForwardOptions forward;
  // GET /metrics without the admin token (server.metrics_public); false: the admin token, or
  // the figures on a listener of their own (server.metrics_listen, metrics_response()).
  bool metrics_public = false;
  // Failed authentications (401) from one client address in a minute before every /v1 call
  // from it is answered 429 for the rest of that minute (api/auth_throttle.h); 0: off.
  uint32_t auth_failures_per_minute = 0;
};

class ReadPool;
class AuthThrottle;

// handle() and max_body_bytes() run on the HTTP server's loop thread (one thread: the JSON
// parsers are reused); engine callbacks and the read pool answer from their own threads.
// The engine must outlive the read pool: call stop_reads() (or destroy the RestApi) before it
// goes away.
class RestApi final : public HttpHandler {
 public:
  RestApi(Engine& engine, RestApiOptions options);
  ~RestApi() override;
  RestApi(const RestApi&) = delete;
  RestApi& operator=(const RestApi&) = delete;

  size_t max_body_bytes(const HttpRequest& head) override;
  void handle(HttpRequest&& request, Responder responder) override;

  // Stops the read pool (and the forward threads): queued reads are answered 503
  // shutting_down, running ones finish, later ones get 503. Idempotent; call from any thread
  // but a read thread.
  void stop_reads();
  // Reads waiting for a read thread (running ones not counted); 0 when reads run inline.
  size_t queued_reads() const;
  // What GET /metrics answers (the engine's figures and the forwarder's), for a metrics
  // listener of its own. Any thread.
  HttpResponse metrics_response() const;
  // The forwarder (cluster mode), for its counters; null when forwarding is off.
  const Forwarder* forwarder() const { return forwarder_.get(); }
  // The portal this adapter checks sessions and mints links with (its options plus the keys'
  // checks, SPEC R14.1, R14.3): the portal's pages are served on the same one (api/front.h).
  const ringcast::portal::Portal& portal() const { return *portal_; }
  const RestApiOptions& options() const { return options_; }

  struct Parsers;  // simdjson state (kept out of this header)

 private:
  Engine& engine_;
  RestApiOptions options_;
  std::unique_ptr<Parsers> parsers_;
  std::unique_ptr<ReadPool> reads_;       // null when options_.read_threads == 0
  std::shared_ptr<Forwarder> forwarder_;  // null unless options_.forward.find_owner is set
  std::unique_ptr<ringcast::portal::Portal> portal_;
  std::unique_ptr<AuthThrottle> throttle_;

  // A /v1/tenants/{t}/… call by `who` (authorized already): on the owner, or forwarded to it
  // (cluster mode) unless it was forwarded here.
  void tenant_call(HttpRequest&& request, std::vector<std::string>& segs, const Principal& who,
                   bool forwarded, Responder responder);
  // /portal/confirm-email (SPEC R14, docs/security.md "Owner e-mail"): GET shows what the
  // signed link confirms and a button; its POST confirms through the platform's confirm route.
  void confirm_email_page(HttpRequest&& request, Responder responder, WallTime now);
};

// "Bearer <token>" against `token`, in time independent of where they differ. An empty
// `token` matches nothing.
bool bearer_token_matches(std::string_view authorization, std::string_view token);

// HTTP status for an engine error: kInvalidArgument → 400 (422 for the SPEC R6 URL form
// codes), kNotFound → 404, kConflict → 409, kLimitExceeded → 429, kUnavailable → 503, else 500.
uint16_t http_status_for(const Error& e);
HttpResponse error_response(const Error& e);

// True for the SPEC R6 URL form codes (not_https, port_not_allowed, ...).
bool is_url_form_code(std::string_view code);

// Percent-decodes one path segment or query value ("+" is a space only in queries); nullopt
// on a bad escape.
std::optional<std::string> percent_decode(std::string_view s, bool plus_is_space);

}  // namespace ringcast::api
