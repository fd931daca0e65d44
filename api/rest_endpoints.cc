// The REST adapter's endpoint routes (docs/operations.md "Endpoints"): create, PATCH, delete,
// pause/resume/enable, test, secret rotation, the ordering keys (SPEC R13); the fields create and
// PATCH share.
#include <simdjson.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "api/rest_internal.h"
#include "core/endpoint_headers.h"
#include "core/engine.h"
#include "core/input_rules.h"
#include "core/types.h"
#include "views/records.h"

namespace ringcast::api {

using views::id_text;
using views::write_endpoint;

namespace rest {

// -- endpoints --

namespace {

std::optional<SignatureProfile> parse_profile(std::string_view s) {
  for (auto p : {SignatureProfile::kStandard, SignatureProfile::kXhub, SignatureProfile::kSmengo}) {
    if (s == signature_profile_name(p)) return p;
  }
  return std::nullopt;
}

std::optional<Bad> read_rate_limit(od::value& v, RateLimit& out) {
  od::object o;
  auto e = v.get_object().get(o);
  if (e == simdjson::INCORRECT_TYPE)
    return wrong_type("rate_limit", "an object {per_second, burst}");
  if (e) return json_error(e, "rate_limit");
  KeySet seen;
  for (auto f : o) {
    std::string_view key;
    if (auto ke = f.unescaped_key().get(key)) return json_error(ke, "rate_limit");
    if (!seen.insert(key)) return duplicate("rate_limit." + std::string(key));
    od::value fv;
    if (auto ve = f.value().get(fv)) return json_error(ve, "rate_limit");
    if (key == "per_second") {
      double d = 0;
      auto de = fv.get_double().get(d);
      if (de || !std::isfinite(d) || d < 0) {
        return wrong_type("rate_limit.per_second", "a number >= 0");
      }
      out.per_second = d;
    } else if (key == "burst") {
      uint64_t b = 0;
      if (auto bad = get_uint(fv, "rate_limit.burst", 1'000'000'000, b)) return bad;
      out.burst = static_cast<uint32_t>(b);
    } else {
      return Bad{"unknown_field", "unknown field rate_limit." + std::string(key),
                 "rate_limit." + std::string(key)};
    }
  }
  return std::nullopt;
}

std::optional<Bad> read_event_types(od::value& v, const RestApiOptions& opt,
                                    std::vector<std::string>& out) {
  od::array a;
  auto e = v.get_array().get(a);
  if (e == simdjson::INCORRECT_TYPE) return wrong_type("event_types", "a list of strings");
  if (e) return json_error(e, "event_types");
  out.clear();
  for (auto el : a) {
    od::value ev;
    if (auto ee = el.get(ev)) return json_error(ee, "event_types");
    std::string s;
    if (auto bad = get_string(ev, "event_types", s))
      return wrong_type("event_types", "a list of strings");
    if (s.empty() || s.size() > opt.max_type_bytes || !valid_type(s)) {
      return Bad{"invalid_value",
                 "event_types entries are 1-" + std::to_string(opt.max_type_bytes) +
                     " printable characters without spaces (\"payment.*\" matches a prefix)",
                 "event_types"};
    }
    out.push_back(std::move(s));
    if (out.size() > opt.max_event_types) {
      return Bad{"invalid_value", "at most " + std::to_string(opt.max_event_types) + " event_types",
                 "event_types"};
    }
  }
  return std::nullopt;
}

// A refused header set as the API's 400, naming the header at fault: field "headers.<Name>"
// (the name as given, cut to 100 bytes) for a bad, reserved or repeated one, "headers" for the
// limits.
Bad header_bad(const std::vector<EndpointHeader>& hs, const HeaderProblem& p) {
  if (p.index >= hs.size() || std::string_view(p.reason) == "too_many_headers") {
    return Bad{p.reason,
               "headers: at most " + std::to_string(kMaxEndpointHeaders) + " headers per endpoint",
               "headers"};
  }
  const std::string name = hs[p.index].name.substr(0, 100);
  std::string msg = "header \"";
  msg += name;
  msg += "\": ";
  msg += p.message;
  if (std::string_view(p.reason) == "headers_too_large") return Bad{p.reason, msg, "headers"};
  std::string field = "headers.";
  field += name;
  return Bad{p.reason, std::move(msg), std::move(field)};
}

// "headers": {"Name": "value", ...}, kept in the order given (operations.md "Endpoints"); checked
// and trimmed by core/endpoint_headers.h. null: no headers.
std::optional<Bad> read_headers(od::value& v, std::vector<EndpointHeader>& out) {
  out.clear();
  if (is_null(v)) return std::nullopt;
  od::object o;
  auto e = v.get_object().get(o);
  if (e == simdjson::INCORRECT_TYPE)
    return wrong_type("headers", "an object {\"Name\": \"value\", ...}");
  if (e) return json_error(e, "headers");
  for (auto f : o) {
    std::string_view key;
    if (auto ke = f.unescaped_key().get(key)) return json_error(ke, "headers");
    od::value fv;
    if (auto ve = f.value().get(fv)) return json_error(ve, "headers");
    std::string field = "headers.";
    field.append(key.substr(0, 100));
    std::string value;
    if (auto bad = get_string(fv, field, value)) return bad;
    if (out.size() == kMaxEndpointHeaders) {  // read no further than one over the limit
      out.push_back(EndpointHeader{std::string(key), std::move(value)});
      break;
    }
    out.push_back(EndpointHeader{std::string(key), std::move(value)});
  }
  if (auto p = normalize_endpoint_headers(out)) return header_bad(out, *p);
  return std::nullopt;
}

// Fields shared by create (EndpointSpec) and PATCH (EndpointPatch).
struct EndpointFields {
  std::optional<std::string> url;
  std::optional<std::vector<std::string>> event_types;
  std::optional<std::string> policy;
  std::optional<SignatureProfile> signature;
  std::optional<std::string> secret;
  std::optional<RateLimit> rate_limit;
  std::optional<uint32_t> max_in_flight;
  std::optional<std::vector<EndpointHeader>> headers;
  std::optional<bool> idempotency_key;
  std::optional<OnUnknown> on_unknown;
  std::optional<std::string> status_url;
  std::optional<Ordering> ordering;  // SPEC R13
  std::optional<OnHeadFailure> on_head_failure;
  std::optional<bool> supersede;
  std::optional<bool> send_traceparent;  // docs/tracing.md "Propagation"
};

std::optional<Bad> read_endpoint_fields(Call& c, bool allow_secret, EndpointFields& f) {
  return read_object(
      c.parsers.ondemand, c.req.body.data(), c.req.body.size(), c.capacity(),
      [&](std::string_view key, od::value& v) -> std::optional<Bad> {
        if (key == "url") {
          std::string s;
          if (auto bad = get_string(v, "url", s)) return bad;
          f.url = std::move(s);
        } else if (key == "event_types") {
          if (is_null(v)) return std::nullopt;
          std::vector<std::string> types;
          if (auto bad = read_event_types(v, c.opt, types)) return bad;
          f.event_types = std::move(types);
        } else if (key == "policy") {
          std::string s;
          if (auto bad = get_string(v, "policy", s)) return bad;
          if (s.empty()) return Bad{"invalid_value", "policy must not be empty", "policy"};
          f.policy = std::move(s);
        } else if (key == "signature") {
          std::string s;
          if (auto bad = get_string(v, "signature", s)) return bad;
          auto p = parse_profile(s);
          if (!p) {
            return Bad{"invalid_value", "signature must be \"standard\", \"xhub\" or \"smengo\"",
                       "signature"};
          }
          f.signature = *p;
        } else if (key == "secret" && allow_secret) {
          if (is_null(v)) return std::nullopt;
          std::string s;
          if (auto bad = get_string(v, "secret", s)) return bad;
          if (s.empty()) return Bad{"invalid_value", "secret must not be empty", "secret"};
          f.secret = std::move(s);
        } else if (key == "secret") {
          return Bad{"unknown_field",
                     "secret cannot be patched; use POST .../secret/rotate (old and new sign "
                     "during the overlap)",
                     "secret"};
        } else if (key == "rate_limit") {
          RateLimit rl;
          if (auto bad = read_rate_limit(v, rl)) return bad;
          f.rate_limit = rl;
        } else if (key == "max_in_flight") {
          uint64_t n = 0;
          if (auto bad = get_uint(v, "max_in_flight", 1'000'000, n)) return bad;
          f.max_in_flight = static_cast<uint32_t>(n);
        } else if (key == "headers") {
          std::vector<EndpointHeader> hs;
          if (auto bad = read_headers(v, hs)) return bad;
          f.headers = std::move(hs);
        } else if (key == "idempotency_key") {
          bool b = false;
          if (auto bad = get_bool(v, "idempotency_key", b)) return bad;
          f.idempotency_key = b;
        } else if (key == "on_unknown") {
          if (auto bad = get_named(v, "on_unknown",
                                   {OnUnknown::kRetry, OnUnknown::kReconcile, OnUnknown::kReview},
                                   on_unknown_name, f.on_unknown))
            return bad;
        } else if (key == "status_url") {
          std::string s;
          if (!is_null(v)) {
            if (auto bad = get_string(v, "status_url", s)) return bad;
          }
          f.status_url = std::move(s);  // null or "": none
        } else if (key == "ordering") {
          // SPEC R13: what the endpoint keeps in order; R13.2 and R13.3 below.
          if (auto bad = get_named(v, "ordering",
                                   {Ordering::kNone, Ordering::kPerKey, Ordering::kEndpoint},
                                   ordering_name, f.ordering))
            return bad;
        } else if (key == "on_head_failure") {
          if (auto bad =
                  get_named(v, "on_head_failure", {OnHeadFailure::kBlock, OnHeadFailure::kSkip},
                            on_head_failure_name, f.on_head_failure))
            return bad;
        } else if (key == "supersede") {
          bool b = false;
          if (auto bad = get_bool(v, "supersede", b)) return bad;
          f.supersede = b;
        } else if (key == "send_traceparent") {
          bool b = false;
          if (auto bad = get_bool(v, "send_traceparent", b)) return bad;
          f.send_traceparent = b;
        } else {
          return Bad{"unknown_field", "unknown field " + std::string(key), std::string(key)};
        }
        return std::nullopt;
      });
}

void create_endpoint(Call& c, const std::string& tenant) {
  EndpointFields f;
  if (auto bad = read_endpoint_fields(c, true, f)) return c.answer(*bad);
  if (!f.url) return c.answer(Bad{"missing_field", "url is required", "url"});
  EndpointSpec spec;
  spec.url = std::move(*f.url);
  if (f.event_types) spec.event_types = std::move(*f.event_types);
  if (f.policy) spec.policy = std::move(*f.policy);
  if (f.signature) spec.signature = *f.signature;
  spec.secret = std::move(f.secret);
  if (f.rate_limit) spec.rate_limit = *f.rate_limit;
  if (f.max_in_flight) spec.max_in_flight = *f.max_in_flight;
  if (f.headers) spec.headers = std::move(*f.headers);
  if (f.idempotency_key) spec.idempotency_key = *f.idempotency_key;
  if (f.on_unknown) spec.on_unknown = *f.on_unknown;
  if (f.status_url) spec.status_url = std::move(*f.status_url);
  if (f.ordering) spec.ordering = *f.ordering;
  if (f.on_head_failure) spec.on_head_failure = *f.on_head_failure;
  if (f.supersede) spec.supersede = *f.supersede;
  if (f.send_traceparent) spec.send_traceparent = *f.send_traceparent;
  auto r = share(std::move(c.responder));
  c.engine.create_endpoint(tenant, std::move(spec), [r](Result<Endpoint> res) {
    if (!res) return r->send(error_response(res.error()));
    Writer w;
    write_endpoint(w, *res, true);
    r->send(ok_json(201, w));
  });
}

void patch_endpoint(Call& c, const std::string& tenant, EndpointId id) {
  EndpointFields f;
  if (auto bad = read_endpoint_fields(c, false, f)) return c.answer(*bad);
  EndpointPatch patch;
  patch.url = std::move(f.url);
  patch.event_types = std::move(f.event_types);
  patch.policy = std::move(f.policy);
  patch.signature = f.signature;
  patch.rate_limit = f.rate_limit;
  patch.max_in_flight = f.max_in_flight;
  patch.headers = std::move(f.headers);
  patch.idempotency_key = f.idempotency_key;
  patch.on_unknown = f.on_unknown;
  patch.status_url = std::move(f.status_url);
  patch.ordering = f.ordering;
  patch.on_head_failure = f.on_head_failure;
  patch.supersede = f.supersede;
  patch.send_traceparent = f.send_traceparent;
  auto r = share(std::move(c.responder));
  c.engine.update_endpoint(tenant, id, std::move(patch), [r](Result<Endpoint> res) {
    if (!res) return r->send(error_response(res.error()));
    Writer w;
    write_endpoint(w, *res, false);
    r->send(ok_json(200, w));
  });
}

Callback<Endpoint> endpoint_answer(SharedResponder r, uint16_t status, bool with_secret) {
  return [r, status, with_secret](Result<Endpoint> res) {
    if (!res) return r->send(error_response(res.error()));
    Writer w;
    write_endpoint(w, *res, with_secret);
    r->send(ok_json(status, w));
  };
}

void rotate_secret(Call& c, const std::string& tenant, EndpointId id) {
  std::optional<std::string> secret;
  if (!trim_ws(c.req.body).empty()) {
    auto bad = read_object(
        c.parsers.ondemand, c.req.body.data(), c.req.body.size(), c.capacity(),
        [&](std::string_view key, od::value& v) -> std::optional<Bad> {
          if (key != "secret") {
            return Bad{"unknown_field", "unknown field " + std::string(key), std::string(key)};
          }
          if (is_null(v)) return std::nullopt;
          std::string s;
          if (auto b = get_string(v, "secret", s)) return b;
          if (s.empty()) {
            return Bad{"invalid_value", "secret must not be empty", "secret"};
          }
          secret = std::move(s);
          return std::nullopt;
        });
    if (bad) return c.answer(*bad);
  }
  c.engine.rotate_secret(
      tenant, id, std::move(secret),
      [answer = endpoint_answer(share(std::move(c.responder)), 200, true), tenant,
       id](Result<Endpoint> res) {
        if (res) {  // which endpoint, never the secret (SPEC R14)
          log::info("endpoint_secret_rotated", {{"tenant", tenant}, log::Field::id("endpoint", id)},
                    "tenant {}: endpoint {}: signing secret rotated", tenant, id);
        }
        answer(std::move(res));
      });
}

// An id, or null when 0 (none).
void id_or_null(Writer& w, std::string_view key, uint64_t id) {
  w.key(key);
  if (id == 0) {
    w.null();
  } else {
    w.value(id_text(id));
  }
}

// GET .../endpoints/{id}/ordering?limit= (SPEC R13, docs/operations.md "Ordered delivery"): the
// endpoint's ordering keys that are blocked or have deliveries waiting, by their hash (the key's
// text is not kept where the scheduler keeps them).
constexpr size_t kDefaultOrderKeysLimit = 100;
constexpr size_t kMaxOrderKeysLimit = 1000;

void list_order_keys(Call& c, const std::string& tenant, EndpointId id) {
  auto q = parse_query(c.req.query());
  if (!q) return c.answer(bad_request("invalid_query", "malformed query string"));
  size_t limit = kDefaultOrderKeysLimit;
  for (const auto& [k, v] : q->params) {
    if (k == "limit") {
      auto n = parse_limit(v, kMaxOrderKeysLimit);
      if (!n) return c.answer(limit_error(kMaxOrderKeysLimit));
      limit = *n;
    } else {
      return c.answer(bad_request("unknown_field", "unknown query parameter " + k, k));
    }
  }
  auto r = share(std::move(c.responder));
  c.engine.order_keys(tenant, id, limit, [r](Result<std::vector<OrderKeyView>> res) {
    if (!res) return r->send(error_response(res.error()));
    const WallTime now = wall_now();
    Writer w;
    w.begin_object().key("keys").begin_array();
    for (const OrderKeyView& k : *res) {
      char hex[17];
      std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(k.order_key));
      w.begin_object();
      w.field("order_key", std::string_view(hex, 16));
      id_or_null(w, "head", k.head);
      w.field("blocked", k.blocked);
      id_or_null(w, "blocked_by", k.blocked_by);
      w.key("head_age_seconds");
      if (k.since == WallTime()) {
        w.null();  // not known (a block found at recovery)
      } else {
        const Duration age = now - k.since;
        w.value(age.count() > 0 ? static_cast<double>(age.count()) / 1e9 : 0.0);
      }
      w.field("waiting", static_cast<uint64_t>(k.waiting));
      id_or_null(w, "first_waiting", k.first_waiting);
      w.end_object();
    }
    w.end_array().end_object();
    r->send(ok_json(200, w));
  });
}

}  // namespace

void endpoint_routes(Call& c, const std::string& tenant) {
  const auto& segs = c.segs;  // v1 tenants T endpoints [id [action [rotate]]]
  const std::string& m = c.req.method;
  if (segs.size() == 4) {
    if (m == "POST") return create_endpoint(c, tenant);
    if (m == "GET") {
      auto r = share(std::move(c.responder));
      c.engine.list_endpoints(tenant, [r](Result<std::vector<Endpoint>> res) {
        if (!res) return r->send(error_response(res.error()));
        Writer w;
        w.begin_object().key("endpoints").begin_array();
        for (const auto& e : *res) write_endpoint(w, e, false);
        w.end_array().end_object();
        r->send(ok_json(200, w));
      });
      return;
    }
    return c.answer(method_not_allowed("GET, POST"));
  }
  auto id = parse_u64(segs[4]);
  if (!id) return c.answer(unknown("endpoint", segs[4]));
  if (segs.size() == 5) {
    if (m == "GET") {
      return c.engine.get_endpoint(tenant, *id,
                                   endpoint_answer(share(std::move(c.responder)), 200, false));
    }
    if (m == "PATCH") return patch_endpoint(c, tenant, *id);
    if (m == "DELETE") {
      auto r = share(std::move(c.responder));
      EndpointId eid = *id;
      c.engine.delete_endpoint(tenant, eid, [r, eid](Result<bool> res) {
        if (!res) return r->send(error_response(res.error()));
        if (!*res) return r->send(unknown("endpoint", id_text(eid)));
        Writer w;
        w.begin_object().field("id", id_text(eid)).field("deleted", true).end_object();
        r->send(ok_json(200, w));
      });
      return;
    }
    return c.answer(method_not_allowed("GET, PATCH, DELETE"));
  }
  const std::string& action = segs[5];
  if (segs.size() == 7 && action == "secret" && segs[6] == "rotate") {
    if (m != "POST") return c.answer(method_not_allowed("POST"));
    return rotate_secret(c, tenant, *id);
  }
  if (segs.size() != 6) return c.answer(not_found("route"));
  std::optional<EndpointAction> act;
  if (action == "pause") act = EndpointAction::kPause;
  if (action == "resume") act = EndpointAction::kResume;
  if (action == "enable") act = EndpointAction::kEnable;
  // The actions take no field: no body or {} (docs/operations.md §1 Conventions: an unknown
  // field is refused, not ignored).
  auto no_fields = [&c]() -> std::optional<Bad> {
    return read_object(
        c.parsers.ondemand, c.req.body.data(), c.req.body.size(), c.capacity(),
        [](std::string_view key, od::value&) -> std::optional<Bad> {
          return Bad{"unknown_field", "unknown field " + std::string(key), std::string(key)};
        },
        /*empty_is_object=*/true);
  };
  if (act) {
    if (m != "POST") return c.answer(method_not_allowed("POST"));
    if (auto bad = no_fields()) return c.answer(*bad);
    return c.engine.endpoint_action(tenant, *id, *act,
                                    endpoint_answer(share(std::move(c.responder)), 200, false));
  }
  if (action == "recover") {  // the path keeps /recover; the code calls the job a requeue
    if (m != "POST") return c.answer(method_not_allowed("POST"));
    return requeue_endpoint(c, tenant, *id);
  }
  if (action == "ordering") {  // SPEC R13
    if (m != "GET") return c.answer(method_not_allowed("GET"));
    return list_order_keys(c, tenant, *id);
  }
  if (action == "test") {
    if (m != "POST") return c.answer(method_not_allowed("POST"));
    if (auto bad = no_fields()) return c.answer(*bad);
    auto r = share(std::move(c.responder));
    c.engine.test_endpoint(tenant, *id, [r](Result<DeliveryId> res) {
      if (!res) return r->send(error_response(res.error()));
      Writer w;
      w.begin_object().field("delivery_id", id_text(*res)).end_object();
      r->send(ok_json(202, w));
    });
    return;
  }
  c.answer(not_found("route"));
}

}  // namespace rest

}  // namespace ringcast::api
