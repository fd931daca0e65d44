// The REST adapter's JSON body reading: one object field by field, the typed getters, a
// repeated name refused at any depth, an event payload's exact bytes (SPEC R1).
#include <simdjson.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "api/rest_internal.h"
#include "core/event_input.h"
#include "net/http_server.h"

namespace ringcast::api {

static_assert(net::kBodyPadding >= simdjson::SIMDJSON_PADDING,
              "request bodies must carry simdjson's padding");

namespace rest {

// --- JSON body reading ------------------------------------------------------------------------

// The [limits] every intake applies to an event's names (core/event_input.h).
EventLimits event_limits(const RestApiOptions& opt) {
  EventLimits l;
  l.max_tenant_bytes = opt.max_tenant_bytes;
  l.max_id_bytes = opt.max_id_bytes;
  l.max_type_bytes = opt.max_type_bytes;
  l.max_payload_bytes = opt.max_body_bytes;
  return l;
}

Bad json_error(simdjson::error_code e, std::string_view field) {
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

std::optional<Bad> read_object(od::parser& parser, const char* data, size_t len, size_t capacity,
                               const FieldFn& on_field, bool empty_is_object) {
  if (empty_is_object && std::all_of(data, data + len, [](char ch) {
        return ch == ' ' || ch == '\t' || ch == '\r' || ch == '\n';
      })) {
    return std::nullopt;
  }
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

namespace {

// The path below `el` of the first repeated object name at any depth (".a[2].b"), or nullopt
// when every object's names are unique. Depth is bounded by the DOM parser's (it refused
// anything deeper), so the recursion is too. Paths are built by appends: GCC 12 at -O3 reports a
// false -Wrestrict on "literal" + std::string&& once this is inlined into itself.
std::string path_step(std::string_view open, std::string_view name, std::string_view close,
                      const std::string& rest) {
  std::string out;
  out.reserve(open.size() + name.size() + close.size() + rest.size());
  out.append(open);
  out.append(name);
  out.append(close);
  out.append(rest);
  return out;
}

std::optional<std::string> duplicate_below(simdjson::dom::element el) {
  simdjson::dom::array arr;
  if (!el.get_array().get(arr)) {
    size_t i = 0;
    for (simdjson::dom::element item : arr) {
      if (auto dup = duplicate_below(item)) return path_step("[", std::to_string(i), "]", *dup);
      ++i;
    }
    return std::nullopt;
  }
  simdjson::dom::object obj;
  if (el.get_object().get(obj)) return std::nullopt;  // a scalar
  KeySet seen;
  for (simdjson::dom::key_value_pair kv : obj) {
    if (!seen.insert(kv.key)) return path_step(".", kv.key, "", {});
  }
  for (simdjson::dom::key_value_pair kv : obj) {
    if (auto dup = duplicate_below(kv.value)) return path_step(".", kv.key, "", *dup);
  }
  return std::nullopt;
}

}  // namespace

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

}  // namespace rest

}  // namespace ringcast::api
