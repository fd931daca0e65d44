#include "intake/entry.h"

#include <simdjson.h>

#include <cctype>

namespace ringcast::intake {

EntryMapper::EntryMapper(FieldNames names, EntryLimits limits)
    : names_(std::move(names)),
      limits_(limits),
      parser_(std::make_unique<simdjson::dom::parser>()) {}

EntryMapper::~EntryMapper() = default;

std::optional<EntryError> EntryMapper::map(const Fields& fields, EventInput& out) {
  size_t at = 0;
  auto bad = check(fields, &at, out);
  if (!bad) out.payload = fields[at].second;
  return bad;
}

std::optional<EntryError> EntryMapper::map_taking_payload(Fields& fields, EventInput& out) {
  size_t at = 0;
  auto bad = check(fields, &at, out);
  if (!bad) out.payload = std::move(fields[at].second);
  return bad;
}

// Checks the entry and fills `out` but for the payload, whose field index goes to payload_at.
std::optional<EntryError> EntryMapper::check(const Fields& fields, size_t* payload_at,
                                             EventInput& out) {
  const std::string* tenant = nullptr;
  const std::string* id = nullptr;
  const std::string* type = nullptr;
  const std::string* payload = nullptr;
  const std::string* ordering_key = nullptr;
  for (size_t i = 0; i < fields.size(); ++i) {
    const auto& [k, v] = fields[i];
    if (!tenant && k == names_.tenant) {
      tenant = &v;
    } else if (!id && k == names_.id) {
      id = &v;
    } else if (!type && k == names_.type) {
      type = &v;
    } else if (!payload && k == names_.payload) {
      payload = &v;
      *payload_at = i;
    } else if (!ordering_key && k == names_.ordering_key) {
      ordering_key = &v;
    }
  }
  auto missing = [](const std::string& name) {
    return EntryError{"missing_field", "the entry has no field " + name};
  };
  if (!tenant) return missing(names_.tenant);
  if (!id) return missing(names_.id);
  if (!type) return missing(names_.type);
  if (!payload) return missing(names_.payload);
  if (auto e = check_event_names(*tenant, *id, *type, limits_)) {
    return EntryError{e->code, std::move(e->message)};
  }
  // SPEC R13.1: a named key is 1..256 bytes of printable ASCII (an empty one is refused too).
  if (ordering_key) {
    if (auto e = check_ordering_key(*ordering_key, /*given=*/true)) {
      return EntryError{e->code, std::move(e->message)};
    }
  }
  if (auto e = check_event_payload_size(payload->size(), limits_)) {
    return EntryError{e->code, std::move(e->message)};
  }
  // One whole JSON value (the HTTP intake's payload is one value inside its body).
  // In place when the string has simdjson's padding past its end (a Redis bulk string of this
  // size has: redis::Reply::kStringSlack), else through a reused padded copy (the parser's
  // own copy would allocate each time).
  simdjson::dom::element doc;
  const char* json = payload->data();
  if (payload->capacity() - payload->size() < simdjson::SIMDJSON_PADDING) {
    scratch_.reserve(payload->size() + simdjson::SIMDJSON_PADDING);
    scratch_.assign(*payload);
    json = scratch_.data();
  }
  if (auto err = parser_->parse(json, payload->size(), false).get(doc)) {
    return EntryError{"invalid_json", std::string("the payload is not valid JSON: ") +
                                          simdjson::error_message(err)};
  }
  out.tenant = *tenant;
  out.id = *id;
  out.type = *type;
  if (ordering_key) {
    out.ordering_key = *ordering_key;
  } else {
    out.ordering_key.clear();
  }
  return std::nullopt;
}

}  // namespace ringcast::intake
