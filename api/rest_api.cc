#include "api/rest_api.h"

#include "core/endpoint_headers.h"
#include "core/event_input.h"
#include "core/input_rules.h"

#include <openssl/mem.h>
#include <openssl/sha.h>

#include <simdjson.h>
#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <chrono>
#include <cmath>
#include <functional>
#include <future>
#include <iterator>
#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <variant>
#include <vector>

#include "api/auth_throttle.h"
#include "api/keys.h"
#include "api/portal.h"
#include "api/read_pool.h"
#include "api/routes.h"
#include "net/json_writer.h"
#include "net/system_clock.h"
#include "views/records.h"

namespace ringcast::api {

using net::JsonWriter;
using views::id_text;
using views::rfc3339;
using views::write_breaker;
using views::write_delivery;
using views::write_endpoint;
using views::write_event;
using views::write_history;
using views::write_notification;

static_assert(net::kBodyPadding >= simdjson::SIMDJSON_PADDING,
              "request bodies must carry simdjson's padding");

namespace od = simdjson::ondemand;

struct RestApi::Parsers {
  od::parser ondemand;
  simdjson::dom::parser dom;  // validates a payload's every byte (ondemand skips lazily)
};

// ---------------------------------------------------------------------------------------------
// Small helpers

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

namespace {

using Writer = JsonWriter;

HttpResponse ok_json(uint16_t status, Writer& w) {
  return HttpResponse::json(status, w.take());
}

HttpResponse bad_request(std::string_view code, std::string_view message,
                         std::string_view field = {}) {
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

// A copyable handle on a move-only Responder, for std::function callbacks.
using SharedResponder = std::shared_ptr<Responder>;
SharedResponder share(Responder r) {
  return std::make_shared<Responder>(std::move(r));
}

// The delivery log is read from the store, which keeps no list of tenants: the shard owning a
// tenant knows whether it exists. A collection read (deliveries, deliveries/recent,
// notifications) that found nothing asks it, so that a tenant that never had an endpoint is
// 404 unknown_tenant there too, as on the endpoint list, intake, breaker and subscription
// routes (and not 200 with an empty list, which hides a misspelt tenant). One hop to the shard,
// only for empty answers; it blocks the read thread (the HTTP loop when read_threads is 0),
// bounded by kTenantCheckWait. Shard threads never wait for either, so this cannot deadlock.
constexpr auto kTenantCheckWait = std::chrono::seconds(5);

Result<void> check_tenant(Engine& engine, const std::string& tenant) {
  auto answer = std::make_shared<std::promise<Result<void>>>();
  std::future<Result<void>> known = answer->get_future();
  engine.list_endpoints(tenant, [answer](Result<std::vector<Endpoint>> r) {
    answer->set_value(r.ok() ? ok() : Result<void>(r.error()));
  });
  if (known.wait_for(kTenantCheckWait) != std::future_status::ready) {
    return make_error(Errc::kUnavailable, "the engine did not answer in time", nullptr,
                      "overloaded");
  }
  return known.get();
}

std::optional<uint64_t> parse_u64(std::string_view s) {
  if (s.empty() || s.size() > 20) return std::nullopt;
  uint64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
  return v;
}

std::optional<DeliveryStatus> parse_status(std::string_view s) {
  for (auto st : {DeliveryStatus::kPending, DeliveryStatus::kInFlight, DeliveryStatus::kDelivered,
                  DeliveryStatus::kFailed, DeliveryStatus::kDead, DeliveryStatus::kUnknown}) {
    if (s == delivery_status_name(st)) return st;
  }
  return std::nullopt;
}

std::optional<SignatureProfile> parse_profile(std::string_view s) {
  for (auto p : {SignatureProfile::kStandard, SignatureProfile::kXhub, SignatureProfile::kSmengo}) {
    if (s == signature_profile_name(p)) return p;
  }
  return std::nullopt;
}

std::string_view trim_ws(std::string_view s) {
  auto ws = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
  while (!s.empty() && ws(s.front())) s.remove_prefix(1);
  while (!s.empty() && ws(s.back())) s.remove_suffix(1);
  return s;
}

// --- JSON body reading ------------------------------------------------------------------------

// An error while reading a body; converted to a 400 answer.
struct Bad {
  std::string code;
  std::string message;
  std::string field;
};

// The [limits] every intake applies to an event's names (core/event_input.h).
EventLimits event_limits(const RestApiOptions& opt) {
  EventLimits l;
  l.max_tenant_bytes = opt.max_tenant_bytes;
  l.max_id_bytes = opt.max_id_bytes;
  l.max_type_bytes = opt.max_type_bytes;
  l.max_payload_bytes = opt.max_body_bytes;
  return l;
}

Bad json_error(simdjson::error_code e, std::string_view field = {}) {
  if (e == simdjson::INCORRECT_TYPE || e == simdjson::NUMBER_OUT_OF_RANGE) {
    return Bad{"invalid_type", std::string(field) + " has the wrong type", std::string(field)};
  }
  if (e == simdjson::EMPTY) return Bad{"invalid_json", "the request body is empty", ""};
  return Bad{"invalid_json", std::string("malformed JSON: ") + simdjson::error_message(e),
             std::string(field)};
}

Bad wrong_type(std::string_view field, std::string_view want) {
  return Bad{"invalid_type", std::string(field) + " must be " + std::string(want),
             std::string(field)};
}

Bad duplicate(std::string_view path) {
  return Bad{"duplicate_field", "field \"" + std::string(path) + "\" appears twice",
             std::string(path)};
}

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

std::optional<Bad> read_object(od::parser& parser, const char* data, size_t len, size_t capacity,
                               const FieldFn& on_field) {
  od::document doc;
  if (auto e = parser.iterate(data, len, capacity).get(doc)) return json_error(e);
  od::object obj;
  if (auto e = doc.get_object().get(obj)) {
    if (e == simdjson::INCORRECT_TYPE) {
      return Bad{"invalid_json", "the request body must be a JSON object", ""};
    }
    return json_error(e);
  }
  KeySet seen;
  for (auto field : obj) {
    std::string_view key;
    if (auto e = field.unescaped_key().get(key)) return json_error(e);
    if (!seen.insert(key)) return duplicate(key);
    od::value v;
    if (auto e = field.value().get(v)) return json_error(e, key);
    if (auto bad = on_field(key, v)) return bad;
  }
  // At the end of the document current_location() fails; a location means trailing bytes.
  const char* trailing = nullptr;
  if (!doc.current_location().get(trailing)) {
    return Bad{"invalid_json", "trailing content after the JSON object", ""};
  }
  return std::nullopt;
}

std::optional<Bad> get_string(od::value& v, std::string_view field, std::string& out) {
  std::string_view s;
  auto e = v.get_string().get(s);
  if (e == simdjson::INCORRECT_TYPE) return wrong_type(field, "a string");
  if (e) return json_error(e, field);
  out.assign(s);
  return std::nullopt;
}

std::optional<Bad> get_uint(od::value& v, std::string_view field, uint64_t max, uint64_t& out) {
  auto e = v.get_uint64().get(out);
  if (e == simdjson::INCORRECT_TYPE || e == simdjson::NUMBER_OUT_OF_RANGE || (!e && out > max)) {
    return wrong_type(field, "an integer in 0.." + std::to_string(max));
  }
  if (e) return json_error(e, field);
  return std::nullopt;
}

std::optional<Bad> get_bool(od::value& v, std::string_view field, bool& out) {
  auto e = v.get_bool().get(out);
  if (e == simdjson::INCORRECT_TYPE) return wrong_type(field, "true or false");
  if (e) return json_error(e, field);
  return std::nullopt;
}

bool is_null(od::value& v) {
  od::json_type t;
  return !v.type().get(t) && t == od::json_type::null;
}

// The path below `el` of the first repeated object name at any depth (".a[2].b"), or nullopt
// when every object's names are unique. Depth is bounded by the DOM parser's (it refused
// anything deeper), so the recursion is too.
std::optional<std::string> duplicate_below(simdjson::dom::element el) {
  simdjson::dom::array arr;
  if (!el.get_array().get(arr)) {
    size_t i = 0;
    for (simdjson::dom::element item : arr) {
      if (auto dup = duplicate_below(item)) return "[" + std::to_string(i) + "]" + *dup;
      ++i;
    }
    return std::nullopt;
  }
  simdjson::dom::object obj;
  if (el.get_object().get(obj)) return std::nullopt;  // a scalar
  KeySet seen;
  for (simdjson::dom::key_value_pair kv : obj) {
    if (!seen.insert(kv.key)) return "." + std::string(kv.key);
  }
  for (simdjson::dom::key_value_pair kv : obj) {
    if (auto dup = duplicate_below(kv.value)) return "." + std::string(kv.key) + *dup;
  }
  return std::nullopt;
}

// The exact bytes of a JSON value in the request (SPEC R1: delivered byte-for-byte), after a
// full validation of those bytes (and no repeated name at any depth: KeySet).
std::optional<Bad> raw_value(od::value& v, simdjson::dom::parser& dom, std::string_view field,
                             std::string_view& out) {
  od::json_type t;
  if (auto e = v.type().get(t)) return json_error(e, field);
  simdjson::error_code e = simdjson::SUCCESS;
  if (t == od::json_type::object) {
    od::object o;
    e = v.get_object().get(o);
    if (!e) e = o.raw_json().get(out);
  } else if (t == od::json_type::array) {
    od::array a;
    e = v.get_array().get(a);
    if (!e) e = a.raw_json().get(out);
  } else {
    out = trim_ws(v.raw_json_token());
  }
  if (e) return json_error(e, field);
  out = trim_ws(out);  // raw_json() keeps the whitespace up to the next token
  // ondemand skips lazily; validate every byte once (the body's padding covers the slice).
  simdjson::dom::element el;
  if (auto ve = dom.parse(out.data(), out.size(), false).get(el)) {
    return Bad{"invalid_json",
               std::string(field) + " is not valid JSON: " + simdjson::error_message(ve),
               std::string(field)};
  }
  if (auto dup = duplicate_below(el)) return duplicate(std::string(field) + *dup);
  return std::nullopt;
}

// --- routing ----------------------------------------------------------------------------------

struct Query {
  std::vector<std::pair<std::string, std::string>> params;
  const std::string* get(std::string_view k) const {
    for (const auto& [pk, pv] : params) {
      if (pk == k) return &pv;
    }
    return nullptr;
  }
};

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

}  // namespace

// ---------------------------------------------------------------------------------------------
// The adapter

namespace {

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

// -- endpoints --

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
          std::string s;
          if (auto bad = get_string(v, "on_unknown", s)) return bad;
          for (OnUnknown o : {OnUnknown::kRetry, OnUnknown::kReconcile, OnUnknown::kReview})
            if (s == on_unknown_name(o)) f.on_unknown = o;
          if (!f.on_unknown) {
            return Bad{"invalid_value", "on_unknown must be \"retry\", \"reconcile\" or \"review\"",
                       "on_unknown"};
          }
        } else if (key == "status_url") {
          std::string s;
          if (!is_null(v)) {
            if (auto bad = get_string(v, "status_url", s)) return bad;
          }
          f.status_url = std::move(s);  // null or "": none
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
  c.engine.rotate_secret(tenant, id, std::move(secret),
                         endpoint_answer(share(std::move(c.responder)), 200, true));
}

void recover_endpoint(Call& c, const std::string& tenant, EndpointId id);  // replay, below

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
  if (act) {
    if (m != "POST") return c.answer(method_not_allowed("POST"));
    return c.engine.endpoint_action(tenant, *id, *act,
                                    endpoint_answer(share(std::move(c.responder)), 200, false));
  }
  if (action == "recover") {
    if (m != "POST") return c.answer(method_not_allowed("POST"));
    return recover_endpoint(c, tenant, *id);
  }
  if (action == "test") {
    if (m != "POST") return c.answer(method_not_allowed("POST"));
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

// -- events --

struct ParsedEvent {
  EventInput input;
};

// Reads one event object. `tenant` is the path's (single form) or nullptr (bulk: each line
// names its own).
std::optional<Bad> read_event(RestApi::Parsers& p, const RestApiOptions& opt, const char* data,
                              size_t len, size_t capacity, const std::string* tenant,
                              EventInput& ev) {
  bool have_payload = false;
  bool have_id = false;
  bool have_type = false;
  bool have_tenant = tenant != nullptr;
  if (tenant) ev.tenant = *tenant;
  auto bad = read_object(
      p.ondemand, data, len, capacity,
      [&](std::string_view key, od::value& v) -> std::optional<Bad> {
        if (key == "id") {
          if (auto b = get_string(v, "id", ev.id)) return b;
          have_id = true;
        } else if (key == "type") {
          if (auto b = get_string(v, "type", ev.type)) return b;
          have_type = true;
        } else if (key == "payload") {
          std::string_view raw;
          if (auto b = raw_value(v, p.dom, "payload", raw)) return b;
          ev.payload.assign(raw);
          have_payload = true;
        } else if (key == "tenant" && tenant == nullptr) {
          if (auto b = get_string(v, "tenant", ev.tenant)) return b;
          have_tenant = true;
        } else {
          return Bad{"unknown_field", "unknown field " + std::string(key), std::string(key)};
        }
        return std::nullopt;
      });
  if (bad) return bad;
  if (!have_tenant) return Bad{"missing_field", "tenant is required on every line", "tenant"};
  if (!have_id) return Bad{"missing_field", "id is required", "id"};
  if (!have_type) return Bad{"missing_field", "type is required", "type"};
  if (!have_payload) return Bad{"missing_field", "payload is required", "payload"};
  if (auto e = check_event_names(ev.tenant, ev.id, ev.type, event_limits(opt))) {
    return Bad{e->code, std::move(e->message), e->field};
  }
  return std::nullopt;
}

void write_submit_body(Writer& w, std::string_view event_id, const SubmitResult& s) {
  w.begin_object().field("event_id", event_id).field("deliveries", s.deliveries);
  // Cluster mode: taken by a node that does not own the tenant's partition; its owner fans it
  // out (deliveries not known here).
  if (s.queued) w.field("queued", true);
  w.end_object();
}

void submit_event(Call& c, const std::string& tenant) {
  EventInput ev;
  if (auto bad = read_event(c.parsers, c.opt, c.req.body.data(), c.req.body.size(), c.capacity(),
                            &tenant, ev)) {
    return c.answer(*bad);
  }
  auto r = share(std::move(c.responder));
  std::string id = ev.id;
  c.engine.submit(std::move(ev), [r, id = std::move(id)](Result<SubmitResult> res) {
    if (!res) return r->send(error_response(res.error()));
    Writer w;
    write_submit_body(w, id, *res);
    // SPEC R12.5: a repeat of the same event is answered like the first time, but 200.
    r->send(ok_json(res->kind == SubmitResult::Kind::kAccepted ? 202 : 200, w));
  });
}

// Per-line result of a bulk request.
struct LineResult {
  uint32_t line = 0;  // 1-based
  std::string event_id;
  std::optional<Bad> bad;                      // rejected before the engine
  std::optional<Result<SubmitResult>> result;  // the engine's answer
};

HttpResponse bulk_response(std::vector<LineResult>& lines) {
  uint64_t accepted = 0, duplicates = 0, conflicts = 0, errors = 0;
  Writer items;
  items.begin_array();
  for (auto& l : lines) {
    items.begin_object().field("line", l.line);
    if (!l.event_id.empty()) items.field("event_id", l.event_id);
    if (l.bad) {
      errors++;
      items.field("status", 400).key("error").begin_object();
      items.field("code", l.bad->code).field("message", l.bad->message);
      if (!l.bad->field.empty()) items.field("field", l.bad->field);
      items.end_object();
    } else if (l.result && l.result->ok()) {
      const SubmitResult& s = l.result->value();
      bool dup = s.kind == SubmitResult::Kind::kDuplicate;
      (dup ? duplicates : accepted)++;
      items.field("status", dup ? 200 : 202).field("deliveries", s.deliveries);
      if (s.queued) items.field("queued", true);
    } else {
      Error e = l.result ? l.result->error()
                         : make_error(Errc::kInternal, "the engine gave no result for this line");
      if (e.code == Errc::kConflict) {
        conflicts++;
      } else {
        errors++;
      }
      items.field("status", static_cast<unsigned>(http_status_for(e))).key("error").begin_object();
      items.field("code", e.reason_or_code()).field("message", e.message ? e.message : "");
      if (e.field) items.field("field", e.field);
      items.end_object();
    }
    items.end_object();
  }
  items.end_array();
  Writer w;
  w.begin_object();
  w.field("lines", static_cast<uint64_t>(lines.size()));
  w.field("accepted", accepted).field("duplicates", duplicates);
  w.field("conflicts", conflicts).field("errors", errors);
  w.key("results").raw(items.str());
  w.end_object();
  return ok_json(200, w);
}

void submit_bulk(Call& c) {
  const std::string& body = c.req.body;
  auto lines = std::make_shared<std::vector<LineResult>>();
  std::vector<EventInput> batch;
  std::vector<size_t> batch_line;  // index into *lines for each batch entry
  size_t pos = 0;
  uint32_t line_no = 0;
  while (pos < body.size()) {
    size_t nl = body.find('\n', pos);
    size_t end = nl == std::string::npos ? body.size() : nl;
    line_no++;
    std::string_view line(body.data() + pos, end - pos);
    size_t start = pos;
    pos = end + 1;
    if (trim_ws(line).empty()) continue;
    if (lines->size() >= c.opt.max_bulk_events) {
      return c.answer(HttpResponse::error(
          413, "too_many_events",
          "a bulk request holds at most " + std::to_string(c.opt.max_bulk_events) + " events",
          "body"));
    }
    LineResult lr;
    lr.line = line_no;
    EventInput ev;
    lr.bad = read_event(c.parsers, c.opt, body.data() + start, line.size(), body.capacity() - start,
                        nullptr, ev);
    lr.event_id = ev.id;
    if (!lr.bad && !c.who.admin() && ev.tenant != c.who.tenant) {
      // A tenant key reaches its own tenant only, and says nothing of another's existence.
      lr.result = Result<SubmitResult>(make_error(
          Errc::kNotFound, "unknown tenant: create an endpoint first", "tenant", "unknown_tenant"));
    } else if (!lr.bad) {
      batch_line.push_back(lines->size());
      batch.push_back(std::move(ev));
    }
    lines->push_back(std::move(lr));
  }
  if (lines->empty()) {
    return c.answer(
        Bad{"invalid_json", "the bulk body holds no event (NDJSON: one per line)", "body"});
  }
  if (batch.empty()) return c.answer(bulk_response(*lines));
  auto r = share(std::move(c.responder));
  c.engine.submit_batch(std::move(batch), [r, lines, batch_line = std::move(batch_line)](
                                              std::vector<Result<SubmitResult>> results) {
    for (size_t i = 0; i < batch_line.size(); ++i) {
      if (i < results.size()) (*lines)[batch_line[i]].result = std::move(results[i]);
    }
    r->send(bulk_response(*lines));
  });
}

// -- deliveries, tenant state --

// The events `items` carry, by seq, read together (one store call; absent ones map to nullopt,
// and a failed read leaves the items without their event rather than failing the page).
std::unordered_map<EventSeq, std::optional<Event>> events_of(Engine& engine,
                                                             std::string_view tenant,
                                                             const std::vector<Delivery>& items) {
  std::unordered_map<EventSeq, std::optional<Event>> events;
  std::vector<EventSeq> seqs;
  for (const Delivery& d : items) {
    if (events.emplace(d.event, std::nullopt).second) seqs.push_back(d.event);
  }
  auto read = engine.get_events_by_seq(tenant, seqs);
  if (!read) return events;
  for (size_t i = 0; i < seqs.size() && i < read->size(); ++i) {
    events[seqs[i]] = std::move((*read)[i]);
  }
  return events;
}

void list_deliveries(Call& c, const std::string& tenant) {
  auto q = parse_query(c.req.query());
  if (!q) return c.answer(bad_request("invalid_query", "malformed query string"));
  std::optional<EndpointId> endpoint;
  std::optional<DeliveryStatus> status;
  size_t limit = c.opt.default_list_limit;
  std::string cursor;
  for (const auto& [k, v] : q->params) {
    if (k == "endpoint") {
      if (v.empty()) continue;
      endpoint = parse_u64(v);
      if (!endpoint)
        return c.answer(bad_request("invalid_value", "endpoint must be an id", "endpoint"));
    } else if (k == "state" || k == "status") {
      if (v.empty()) continue;
      status = parse_status(v);
      if (!status) {
        return c.answer(
            bad_request("invalid_value",
                        "state must be pending, in_flight, delivered, failed, dead or unknown", k));
      }
    } else if (k == "limit") {
      auto n = parse_u64(v);
      if (!n || *n < 1 || *n > c.opt.max_list_limit) {
        return c.answer(bad_request(
            "invalid_value", "limit must be 1.." + std::to_string(c.opt.max_list_limit), "limit"));
      }
      limit = *n;
    } else if (k == "cursor") {
      cursor = v;
    } else {
      return c.answer(bad_request("unknown_field", "unknown query parameter " + k, k));
    }
  }
  c.read([&engine = c.engine, tenant, endpoint, status, limit,
          cursor = std::move(cursor)]() -> HttpResponse {
    auto page = engine.list_deliveries(tenant, endpoint, status, limit, cursor);
    if (!page) return error_response(page.error());
    if (page->items.empty()) {
      if (auto known = check_tenant(engine, tenant); !known) return error_response(known.error());
    }
    // Each item names its event (producer id and type); a page often shares events (fan-out).
    // Read together: on Redis one round trip per page, not one per event.
    auto events = events_of(engine, tenant, page->items);
    Writer w;
    w.begin_object().key("deliveries").begin_array();
    for (const auto& d : page->items) {
      auto it = events.find(d.event);
      write_delivery(w, d, it != events.end() && it->second ? &*it->second : nullptr);
    }
    w.end_array();
    w.key("next_cursor");
    if (page->next_cursor.empty()) {
      w.null();
    } else {
      w.value(page->next_cursor);
    }
    w.end_object();
    return ok_json(200, w);
  });
}

// A delivery with its attempts and, when the engine has it, its event (SPEC R10.2: type, body).
void write_delivery_full(Writer& w, const DeliveryDetail& d, const Event* ev) {
  w.begin_object();
  w.key("delivery");
  write_delivery(w, d.delivery);
  w.key("attempts");
  write_history(w, d.attempts);
  w.key("event");
  if (ev != nullptr) {
    write_event(w, *ev);
  } else {
    w.null();
  }
  w.end_object();
}
void write_delivery_full(Writer& w, Engine& engine, std::string_view tenant,
                         const DeliveryDetail& d) {
  auto ev = engine.get_event_by_seq(tenant, d.delivery.event);
  write_delivery_full(w, d, ev && ev->has_value() ? &**ev : nullptr);
}

void recent_deliveries(Call& c, const std::string& tenant) {
  c.read([&engine = c.engine, tenant]() -> HttpResponse {
    auto recent = engine.recent_deliveries(tenant);
    if (!recent) return error_response(recent.error());
    if (recent->empty()) {
      if (auto known = check_tenant(engine, tenant); !known) return error_response(known.error());
    }
    // Their attempts and events read together (one round trip each on Redis).
    std::vector<DeliveryId> ids;
    ids.reserve(recent->size());
    for (const auto& d : *recent) ids.push_back(d.id);
    auto details = engine.get_deliveries(tenant, ids);
    if (!details) return error_response(details.error());
    auto events = events_of(engine, tenant, *recent);
    Writer w;
    w.begin_object().key("deliveries").begin_array();
    for (size_t i = 0; i < recent->size(); ++i) {
      DeliveryDetail bare;
      const DeliveryDetail* d = &bare;
      if ((*details)[i]) {
        d = &*(*details)[i];
      } else {
        bare.delivery = (*recent)[i];
      }
      auto it = events.find(d->delivery.event);
      write_delivery_full(w, *d, it != events.end() && it->second ? &*it->second : nullptr);
    }
    w.end_array().end_object();
    return ok_json(200, w);
  });
}

void get_delivery(Call& c, const std::string& tenant, std::string_view id_text_in) {
  auto id = parse_u64(id_text_in);
  if (!id) return c.answer(unknown("delivery", id_text_in));
  c.read(
      [&engine = c.engine, tenant, id = *id, id_text = std::string(id_text_in)]() -> HttpResponse {
        auto d = engine.get_delivery(tenant, id);
        if (!d) return error_response(d.error());
        if (!d->has_value() || (*d)->tenant != tenant) return unknown("delivery", id_text);
        Writer w;
        write_delivery_full(w, engine, tenant, **d);
        return ok_json(200, w);
      });
}

// An operator's change of one delivery (resolve, resend), run on a read thread: `start` asks
// the engine, this waits (bounded) for the owning shard's answer, then answers the delivery as
// the store has it now, with its history.
HttpResponse changed_delivery(Engine& engine, const std::string& tenant, DeliveryId id, int status,
                              const char* timeout_message,
                              const std::function<void(Callback<Delivery>)>& start) {
  auto answer = std::make_shared<std::promise<Result<Delivery>>>();
  auto got = answer->get_future();
  start([answer](Result<Delivery> r) { answer->set_value(std::move(r)); });
  if (got.wait_for(std::chrono::seconds(30)) != std::future_status::ready) {
    return HttpResponse::error(503, "timeout", timeout_message);
  }
  Result<Delivery> r = got.get();
  if (!r) return error_response(r.error());
  auto detail = engine.get_delivery(tenant, id);
  Writer w;
  if (detail && detail->has_value()) {
    write_delivery_full(w, engine, tenant, **detail);
  } else {
    DeliveryDetail bare;
    bare.delivery = *r;
    write_delivery_full(w, engine, tenant, bare);
  }
  return ok_json(status, w);
}

// POST .../deliveries/{id}/resolve {"outcome": "delivered" | "failed", "note"?} (R12.10): an
// operator's verdict on a delivery that ended `unknown`. The engine reads the delivery from the
// store (so this runs on a read thread) and the owning shard records the verdict.
void resolve_delivery(Call& c, const std::string& tenant, std::string_view id_text_in) {
  auto id = parse_u64(id_text_in);
  if (!id) return c.answer(unknown("delivery", id_text_in));
  std::optional<Resolution> verdict;
  std::string note;
  auto bad = read_object(
      c.parsers.ondemand, c.req.body.data(), c.req.body.size(), c.capacity(),
      [&](std::string_view key, od::value& v) -> std::optional<Bad> {
        if (key == "outcome") {
          std::string o;
          if (auto b = get_string(v, "outcome", o)) return b;
          if (o == "delivered") verdict = Resolution::kDelivered;
          if (o == "failed") verdict = Resolution::kFailed;
          if (!verdict) {
            return Bad{"invalid_value", "outcome must be delivered or failed", "outcome"};
          }
        } else if (key == "note") {
          if (auto b = get_string(v, "note", note)) return b;
          if (note.size() > kResolutionNoteBytes) {
            return Bad{"invalid_value", "note must be at most 512 bytes", "note"};
          }
        } else {
          return Bad{"unknown_field", "unknown field " + std::string(key), std::string(key)};
        }
        return std::nullopt;
      });
  if (bad) return c.answer(*bad);
  if (!verdict) {
    return c.answer(
        bad_request("missing_field", "outcome is required (delivered or failed)", "outcome"));
  }
  c.read([&engine = c.engine, tenant, id = *id, verdict = *verdict,
          note = std::move(note)]() mutable -> HttpResponse {
    return changed_delivery(engine, tenant, id, 200, "the resolution was not confirmed in time",
                            [&](Callback<Delivery> cb) {
                              engine.resolve_delivery(tenant, id, verdict, std::move(note),
                                                      std::move(cb));
                            });
  });
}

// -- replay (docs/operations.md "Delivery log") --

// RFC 3339 ("2026-01-02T03:04:05Z", fractions of a second and a ±hh:mm offset allowed).
std::optional<WallTime> parse_rfc3339(std::string_view s) {
  auto digits = [&](size_t at, size_t n, int& out) {
    if (at + n > s.size()) return false;
    out = 0;
    for (size_t i = at; i < at + n; ++i) {
      if (s[i] < '0' || s[i] > '9') return false;
      out = out * 10 + (s[i] - '0');
    }
    return true;
  };
  int y, mo, d, h, mi, sec;
  if (!digits(0, 4, y) || s.size() < 19 || s[4] != '-' || !digits(5, 2, mo) || s[7] != '-' ||
      !digits(8, 2, d) || (s[10] != 'T' && s[10] != 't' && s[10] != ' ') || !digits(11, 2, h) ||
      s[13] != ':' || !digits(14, 2, mi) || s[16] != ':' || !digits(17, 2, sec)) {
    return std::nullopt;
  }
  if (mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || sec > 60) return std::nullopt;
  size_t i = 19;
  int64_t frac_ms = 0;
  if (i < s.size() && s[i] == '.') {
    ++i;
    size_t n = 0;
    for (; i < s.size() && s[i] >= '0' && s[i] <= '9'; ++i, ++n) {
      if (n < 3) frac_ms = frac_ms * 10 + (s[i] - '0');
    }
    if (n == 0) return std::nullopt;
    for (; n < 3; ++n) frac_ms *= 10;
  }
  int64_t offset_min = 0;
  if (i < s.size() && (s[i] == 'Z' || s[i] == 'z')) {
    ++i;
  } else if (i < s.size() && (s[i] == '+' || s[i] == '-')) {
    int oh, om;
    if (!digits(i + 1, 2, oh) || i + 3 >= s.size() || s[i + 3] != ':' || !digits(i + 4, 2, om))
      return std::nullopt;
    offset_min = (s[i] == '-' ? -1 : 1) * (oh * 60 + om);
    i += 6;
  } else {
    return std::nullopt;
  }
  if (i != s.size()) return std::nullopt;
  // Days from the civil date (H. Hinnant's algorithm).
  const int yy = y - (mo <= 2 ? 1 : 0);
  const int era = (yy >= 0 ? yy : yy - 399) / 400;
  const int yoe = yy - era * 400;
  const int doy = (153 * (mo + (mo > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const int doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  const int64_t days = static_cast<int64_t>(era) * 146097 + doe - 719468;
  const int64_t secs = days * 86400 + h * 3600 + mi * 60 + sec - offset_min * 60;
  return WallTime::from_ms(secs * 1000 + frac_ms);
}

// POST .../deliveries/{id}/resend {"note"?}: the same delivery goes out again (202).
void resend_delivery(Call& c, const std::string& tenant, std::string_view id_text_in) {
  auto id = parse_u64(id_text_in);
  if (!id) return c.answer(unknown("delivery", id_text_in));
  std::string note;
  if (!c.req.body.empty()) {
    auto bad = read_object(
        c.parsers.ondemand, c.req.body.data(), c.req.body.size(), c.capacity(),
        [&](std::string_view key, od::value& v) -> std::optional<Bad> {
          if (key == "note") {
            if (auto b = get_string(v, "note", note)) return b;
            if (note.size() > kResolutionNoteBytes) {
              return Bad{"invalid_value", "note must be at most 512 bytes", "note"};
            }
            return std::nullopt;
          }
          return Bad{"unknown_field", "unknown field " + std::string(key), std::string(key)};
        });
    if (bad) return c.answer(*bad);
  }
  if (note.empty()) note = "resend";
  c.read([&engine = c.engine, tenant, id = *id, note = std::move(note)]() mutable -> HttpResponse {
    return changed_delivery(engine, tenant, id, 202, "the resend was not confirmed in time",
                            [&](Callback<Delivery> cb) {
                              engine.resend_delivery(tenant, id, std::move(note), std::move(cb));
                            });
  });
}

// POST .../events/{event_id}/replay: "replay missing" (202 {"event_id", "deliveries"}).
void replay_event(Call& c, const std::string& tenant, const std::string& event_id) {
  c.read([&engine = c.engine, tenant, event_id]() mutable -> HttpResponse {
    auto answer = std::make_shared<std::promise<Result<uint32_t>>>();
    auto got = answer->get_future();
    engine.replay_event(tenant, event_id,
                        [answer](Result<uint32_t> r) { answer->set_value(std::move(r)); });
    if (got.wait_for(std::chrono::seconds(30)) != std::future_status::ready) {
      return HttpResponse::error(503, "timeout", "the replay was not confirmed in time");
    }
    Result<uint32_t> r = got.get();
    if (!r) return error_response(r.error());
    Writer w;
    w.begin_object().field("event_id", event_id).field("deliveries", *r).end_object();
    return ok_json(202, w);
  });
}

void write_job(Writer& w, const JobView& j) {
  w.begin_object();
  w.field("id", id_text(j.id));
  w.field("kind", "recover");
  w.field("endpoint", id_text(j.endpoint));
  w.field("state", job_state_name(j.state));
  w.field("since", rfc3339(j.since));
  w.field("until", rfc3339(j.until));
  w.field("total", j.total);
  w.field("scanned", j.scanned);
  w.field("requeued", j.requeued);
  w.field("skipped", j.skipped);
  w.field("in_flight", static_cast<uint64_t>(j.in_flight));
  w.field("scan_done", j.scan_done);
  w.field("queued_at", rfc3339(j.queued_at));
  w.key("started_at");  // null while the job waits queued (SPEC R14 quotas)
  if (j.started_at == WallTime()) {
    w.null();
  } else {
    w.value(rfc3339(j.started_at));
  }
  w.key("finished_at");
  if (j.finished_at == WallTime()) {
    w.null();
  } else {
    w.value(rfc3339(j.finished_at));
  }
  w.key("error");
  if (j.error.empty()) {
    w.null();
  } else {
    w.value(j.error);
  }
  w.end_object();
}

auto job_answer(SharedResponder r, uint16_t status) {
  return [r, status](Result<JobView> res) {
    if (!res) return r->send(error_response(res.error()));
    Writer w;
    w.begin_object().key("job");
    write_job(w, *res);
    w.end_object();
    r->send(ok_json(status, w));
  };
}

// POST .../endpoints/{id}/recover {"since", "until"?}: a recover job (202 {"job"}).
void recover_endpoint(Call& c, const std::string& tenant, EndpointId id) {
  std::optional<WallTime> since, until;
  auto bad = read_object(
      c.parsers.ondemand, c.req.body.data(), c.req.body.size(), c.capacity(),
      [&](std::string_view key, od::value& v) -> std::optional<Bad> {
        if (key != "since" && key != "until") {
          return Bad{"unknown_field", "unknown field " + std::string(key), std::string(key)};
        }
        std::string text;
        if (auto b = get_string(v, std::string(key).c_str(), text)) return b;
        auto t = parse_rfc3339(text);
        if (!t) {
          return Bad{"invalid_value",
                     std::string(key) + " must be an RFC 3339 time (2026-01-02T03:04:05Z)",
                     std::string(key)};
        }
        (key == "since" ? since : until) = *t;
        return std::nullopt;
      });
  if (bad) return c.answer(*bad);
  if (!since) return c.answer(bad_request("missing_field", "since is required", "since"));
  if (!until) until = WallTime::max();
  if (*until < *since) {
    return c.answer(bad_request("invalid_value", "until must not be before since", "until"));
  }
  c.engine.recover_endpoint(tenant, id, *since, *until,
                            job_answer(share(std::move(c.responder)), 202));
}

// -- SPEC R14: keys, portal links, the attempts chart --

WallTime wall_now() {
  return net::SystemClock().wall_now();
}

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
      });
  if (bad) return c.answer(*bad);
  c.read([keys, tenant, name = std::move(name), read_only, expires_at]() mutable -> HttpResponse {
    const WallTime now = wall_now();
    if (expires_at != WallTime() && expires_at <= now) {
      return HttpResponse::error(400, "invalid_value", "expires_at is in the past", "expires_at");
    }
    auto made = keys->create(tenant, std::move(name), read_only, expires_at, now);
    if (!made) return error_response(made.error());
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
      });
  if (bad) return c.answer(*bad);
  if (scope == PortalScope::kManage && c.who.read_only) {
    return c.answer(
        HttpResponse::error(403, "read_only", "a read-only key mints view links only", "scope"));
  }
  const WallTime now = wall_now();
  const WallTime expires = now + std::chrono::seconds(ttl_s);
  const std::string token = c.portal->mint_link(tenant, scope, expires, c.who.key_id, now);
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

// What a principal may reach (SPEC R14, the route classes of api/routes.h); nullopt: go on.
std::optional<HttpResponse> authorize(const Principal& who, const std::vector<std::string>& segs,
                                      const std::string& method, std::string_view path) {
  const RouteSpec* route = find_route(method, segs);
  if (route == nullptr) return no_route(segs, path);
  if (who.admin()) return std::nullopt;
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

}  // namespace

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
    if (r.status == 401) throttle_->failed(request.peer, now);
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
  if (path == "/portal/confirm-email") {
    return confirm_email_page(std::move(request), std::move(responder), now);
  }
  if (path == "/portal" || path.starts_with("/portal/")) {
    return responder.send(portal_->handle(request, wall_now()));
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
