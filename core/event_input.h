// What a producer names when it submits an event (SPEC R1: tenant, id, type, payload), checked
// by one rule for every way in: the HTTP route, the NDJSON bulk route, the bus intakes, and the
// shard itself for events an embedder submits through the C++ API. Pure.
// Invariant: an id that passes travels as it is in the webhook headers (SPEC R11: webhook-id,
// X-Webhook-Id): 1..max bytes of printable ASCII without spaces.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace ringcast {

// The most an event id may have, whatever limits.max_id_bytes says (it is capped here).
inline constexpr size_t kMaxEventIdBytes = 256;

// The [limits] an intake applies (limits.max_tenant_bytes, max_id_bytes, max_type_bytes; the
// payload's bound is limits.max_body_bytes).
struct EventLimits {
  size_t max_tenant_bytes = 128;
  size_t max_id_bytes = kMaxEventIdBytes;
  size_t max_type_bytes = 256;
  size_t max_payload_bytes = 1u << 20;
};

struct EventInputError {
  // invalid_value (empty, too long, a control character, a tenant outside its alphabet);
  // invalid_event_id (an id that could not travel in a header: a space, a byte outside ASCII);
  // too_large (the payload).
  const char* code = "";
  const char* field = "";  // tenant, id, type, payload
  std::string message;
};

// The tenant alone (a route's path names it).
std::optional<EventInputError> check_tenant_name(std::string_view tenant, size_t max_bytes);

// The id alone: the shard's check (the intakes check it with the rest).
std::optional<EventInputError> check_event_id(std::string_view id,
                                              size_t max_bytes = kMaxEventIdBytes);

// Tenant, id and type, in that order (the first that fails is the answer).
std::optional<EventInputError> check_event_names(std::string_view tenant, std::string_view id,
                                                 std::string_view type, const EventLimits& limits);

// SPEC R13.1: an ordering key, when given (empty: none): 1..kMaxOrderingKeyBytes bytes of
// printable ASCII (0x20..0x7e). Field "ordering_key". `given`: the producer named the field,
// so an empty one is an error too.
inline constexpr size_t kMaxOrderingKeyBytes = 256;
std::optional<EventInputError> check_ordering_key(std::string_view key, bool given = false);

// The payload's size (its JSON is each intake's parser's to check).
std::optional<EventInputError> check_event_payload_size(size_t bytes, const EventLimits& limits);

}  // namespace ringcast
