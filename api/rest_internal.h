// Internal to the REST adapter's files (api/rest_*.cc): what they share — the per-request
// context (Call), the small answer helpers, the JSON body readers and each resource's handlers
// that the dispatch (rest_api.cc) calls. Not part of the api module's interface.
#pragma once

#include <simdjson.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_set>
#include <utility>
#include <variant>
#include <vector>

#include "api/http_names.h"
#include "api/keys.h"
#include "api/principal.h"
#include "api/read_pool.h"
#include "api/rest_api.h"
#include "core/engine.h"
#include "core/event_input.h"
#include "core/result.h"
#include "core/time.h"
#include "core/types.h"
#include "log/log.h"
#include "net/json_writer.h"
#include "portal/portal.h"

namespace ringcast::api {

using net::JsonWriter;
// The merchant portal (portal/portal.h): its sessions are principals (SPEC R14.1), its links
// are minted here (SPEC R14.3), and its key signs the address confirmation (SPEC R14).
using portal::parse_portal_scope;
using portal::Portal;
using portal::portal_scope_name;
using portal::PortalCheck;
using portal::PortalOptions;
using portal::PortalScope;
using portal::PortalSession;

namespace od = simdjson::ondemand;

struct RestApi::Parsers {
  od::parser ondemand;
  simdjson::dom::parser dom;  // validates a payload's every byte (ondemand skips lazily)
};

namespace rest {

using Writer = JsonWriter;

// --- Small helpers (rest_api.cc; check_tenant in rest_deliveries.cc) -------------------------

HttpResponse ok_json(uint16_t status, Writer& w);
HttpResponse bad_request(std::string_view code, std::string_view message,
                         std::string_view field = {});
// 404 not_found (a route) and 404 unknown_<thing> (a tenant, endpoint, delivery, event or job
// that does not exist; docs/operations.md, "Errors").
HttpResponse not_found(std::string_view what);
HttpResponse unknown(std::string_view thing, std::string_view id);

// A copyable handle on a move-only Responder, for std::function callbacks.
using SharedResponder = std::shared_ptr<Responder>;
SharedResponder share(Responder r);

std::optional<uint64_t> parse_u64(std::string_view s);
// A `?limit=` value: 1..max, or nullopt (answer limit_error(max): 400 naming `limit`).
std::optional<size_t> parse_limit(std::string_view s, size_t max);
HttpResponse limit_error(size_t max);
std::string_view trim_ws(std::string_view s);
WallTime wall_now();

// A collection read of the delivery log that found nothing asks the owning shard whether the
// tenant exists (404 unknown_tenant otherwise); blocks, bounded.
Result<void> check_tenant(Engine& engine, const std::string& tenant);

// --- JSON body reading (rest_json_input.cc) ----------------------------------------------------

// An error while reading a body; converted to a 400 answer.
struct Bad {
  std::string code;
  std::string message;
  std::string field;
};

// The options' [limits] as core/event_input.h's EventLimits.
EventLimits event_limits(const RestApiOptions& opt);

Bad json_error(simdjson::error_code e, std::string_view field = {});
Bad wrong_type(std::string_view field, std::string_view want);
Bad duplicate(std::string_view path);

// The names of one JSON object seen so far. A repeated name is refused at every depth, never
// resolved: RFC 8259 4 leaves duplicates to the implementation and parsers disagree on which
// one wins (ringcast's money scanner takes the first, JSON.parse the last), so accepting one
// would let ringcast and a receiver read different values from the same bytes. The views must
// outlive the set (they point into the parser's string buffer, valid for the document).
class KeySet {
 public:
  // False when `key` was seen before; remembers it otherwise.
  bool insert(std::string_view key) {
    if (n_few_ == kFew) return many_.insert(key).second;
    for (size_t i = 0; i < n_few_; ++i) {
      if (few_[i] == key) return false;
    }
    few_[n_few_++] = key;
    if (n_few_ == kFew) many_.insert(few_.begin(), few_.end());
    return true;
  }

 private:
  static constexpr size_t kFew = 16;  // up to here: a scan, no allocation
  std::array<std::string_view, kFew> few_;
  size_t n_few_ = 0;
  std::unordered_set<std::string_view> many_;  // from kFew names on: O(1) per name
};

// Reads one JSON object field by field. `on_field(key, value)` returns nullopt or a Bad.
using FieldFn = std::function<std::optional<Bad>(std::string_view, od::value&)>;

// `empty_is_object`: a body of only whitespace reads as {} (routes whose fields are all optional).
std::optional<Bad> read_object(od::parser& parser, const char* data, size_t len, size_t capacity,
                               const FieldFn& on_field, bool empty_is_object = false);
std::optional<Bad> get_string(od::value& v, std::string_view field, std::string& out);
std::optional<Bad> get_uint(od::value& v, std::string_view field, uint64_t max, uint64_t& out);
std::optional<Bad> get_bool(od::value& v, std::string_view field, bool& out);
// A string that names one of `values` (`name(value)`); else 400 invalid_value
// "<field> must be "a", "b" or "c"".
template <class E, class NameFn>
std::optional<Bad> get_named(od::value& v, std::string_view field, std::initializer_list<E> values,
                             NameFn name, std::optional<E>& out) {
  std::string s;
  if (auto bad = get_string(v, field, s)) return bad;
  std::string must(field);
  must += " must be ";
  size_t k = 0;
  for (E e : values) {
    if (s == name(e)) {
      out = e;
      return std::nullopt;
    }
    if (k > 0) must += k + 1 == values.size() ? " or " : ", ";
    ++k;
    must += '"';
    must += name(e);
    must += '"';
  }
  return Bad{"invalid_value", must, std::string(field)};
}
bool is_null(od::value& v);

// The exact bytes of a JSON value in the request (SPEC R1), fully validated.
std::optional<Bad> raw_value(od::value& v, simdjson::dom::parser& dom, std::string_view field,
                             std::string_view& out);

// --- routing (rest_api.cc) ---------------------------------------------------------------------

struct Query {
  std::vector<std::pair<std::string, std::string>> params;
  const std::string* get(std::string_view k) const {
    for (const auto& [pk, pv] : params) {
      if (pk == k) return &pv;
    }
    return nullptr;
  }
};

std::optional<Query> parse_query(std::string_view q);
std::optional<std::vector<std::string>> split_path(std::string_view path);
HttpResponse method_not_allowed(std::string_view allow);

// --- The adapter -------------------------------------------------------------------------------

// Everything one request needs while it is routed.
struct Call {
  Engine& engine;
  const RestApiOptions& opt;
  RestApi::Parsers& parsers;
  HttpRequest& req;
  Responder& responder;
  std::vector<std::string>& segs;
  ReadPool* reads;  // null: delivery-log reads run inline
  const Principal& who;
  const Portal* portal;

  void answer(HttpResponse r) { responder.send(std::move(r)); }
  void answer(const Bad& b) {
    // The code and field only: a message may quote the input, a header value say (SPEC R14).
    log::debug("request_rejected",
               {{"method", req.method}, {"path", req.path()}, {"code", b.code}, {"field", b.field}},
               "{} {}: 400 {} ({})", req.method, req.path(), b.code, b.field);
    responder.send(HttpResponse::error(400, b.code, b.message, b.field));
  }
  size_t capacity() const { return req.body.capacity(); }

  // A delivery-log read: it blocks on the store, so it runs on the read pool and answers from
  // there. `work` must not touch the Call (it is gone by then); it captures what it needs.
  void read(ReadPool::Work work) {
    if (!reads) return answer(work());
    switch (reads->submit(std::move(work), responder)) {
      case ReadPool::Submit::kQueued:
        return;
      case ReadPool::Submit::kFull:
        return answer(ReadPool::overloaded_response());
      case ReadPool::Submit::kStopped:
        return answer(ReadPool::stopped_response());
    }
  }
};

// The handlers the dispatch (rest_api.cc: tenant_routes, RestApi::handle) calls, by file.

// rest_endpoints.cc: /v1/tenants/{t}/endpoints[/{id}[/...]]
void endpoint_routes(Call& c, const std::string& tenant);

// rest_events.cc: intake (single, bulk NDJSON) and replay
void submit_event(Call& c, const std::string& tenant);
void submit_bulk(Call& c);
void replay_event(Call& c, const std::string& tenant, const std::string& event_id);

// rest_deliveries.cc: the delivery log, an operator's changes, requeue jobs
void list_deliveries(Call& c, const std::string& tenant);
void recent_deliveries(Call& c, const std::string& tenant);
void get_delivery(Call& c, const std::string& tenant, std::string_view id_text_in);
void resolve_delivery(Call& c, const std::string& tenant, std::string_view id_text_in);
void resend_delivery(Call& c, const std::string& tenant, std::string_view id_text_in);
void requeue_endpoint(Call& c, const std::string& tenant, EndpointId id);
Callback<JobView> job_answer(SharedResponder r, uint16_t status);
std::optional<WallTime> parse_rfc3339(std::string_view s);

// rest_tenant.cc: SPEC R14 keys, portal links, the attempts chart; settings (SPEC R8.4)
void key_routes(Call& c, const std::string& tenant);
void portal_links(Call& c, const std::string& tenant);
void attempt_stats(Call& c, const std::string& tenant);
void tenant_settings(Call& c, const std::string& tenant);
void confirm_owner_email(Call& c, const std::string& tenant);

// rest_auth.cc: who a /v1 request is and what it may reach (SPEC R14.1)
HttpResponse unauthorized(std::string_view code, std::string_view message);
std::variant<Principal, HttpResponse> authenticate(const HttpRequest& req,
                                                   const RestApiOptions& opt, const Portal* portal,
                                                   WallTime now);
std::optional<HttpResponse> authorize(const Principal& who, const std::vector<std::string>& segs,
                                      const std::string& method, std::string_view path);
std::optional<HttpResponse> still_valid(const Principal& who, const KeyRegistry* keys,
                                        WallTime now);

}  // namespace rest

}  // namespace ringcast::api
