#include "core/event_input.h"

#include <algorithm>

#include "core/input_rules.h"

namespace ringcast {

std::optional<EventInputError> check_tenant_name(std::string_view tenant, size_t max_bytes) {
  if (valid_tenant(tenant, max_bytes)) return std::nullopt;
  return EventInputError{
      "invalid_value", "tenant",
      "tenant must be 1-" + std::to_string(max_bytes) + " characters of A-Z a-z 0-9 - _ . : @ ~ +"};
}

std::optional<EventInputError> check_event_id(std::string_view id, size_t max_bytes) {
  const size_t max = std::min(max_bytes, kMaxEventIdBytes);
  // One pass (the shard runs this for every event): a control character decides at once; a
  // space or a byte outside ASCII only if none follows.
  bool header_unsafe = false;
  bool control = id.empty() || id.size() > max;
  for (size_t i = 0; i < id.size() && !control; ++i) {
    const auto c = static_cast<unsigned char>(id[i]);
    control = c < 0x20 || c == 0x7f;
    header_unsafe = header_unsafe || c == 0x20 || c > 0x7f;
  }
  if (control) {
    return EventInputError{
        "invalid_value", "id",
        "id must be 1-" + std::to_string(max) + " bytes without control characters"};
  }
  if (header_unsafe) {
    return EventInputError{"invalid_event_id", "id",
                           "event id must be printable ASCII without spaces: it travels in "
                           "the webhook's headers"};
  }
  return std::nullopt;
}

std::optional<EventInputError> check_event_names(std::string_view tenant, std::string_view id,
                                                 std::string_view type, const EventLimits& limits) {
  if (auto bad = check_tenant_name(tenant, limits.max_tenant_bytes)) return bad;
  if (auto bad = check_event_id(id, limits.max_id_bytes)) return bad;
  if (type.empty() || type.size() > limits.max_type_bytes || !valid_type(type)) {
    return EventInputError{"invalid_value", "type",
                           "type must be 1-" + std::to_string(limits.max_type_bytes) +
                               " printable characters without spaces"};
  }
  return std::nullopt;
}

std::optional<EventInputError> check_ordering_key(std::string_view key, bool given) {
  bool bad = key.size() > kMaxOrderingKeyBytes || (given && key.empty());
  for (size_t i = 0; i < key.size() && !bad; ++i) {
    const auto c = static_cast<unsigned char>(key[i]);
    bad = c < 0x20 || c > 0x7e;
  }
  if (!bad) return std::nullopt;
  return EventInputError{"invalid_value", "ordering_key",
                         "ordering_key must be 1-" + std::to_string(kMaxOrderingKeyBytes) +
                             " bytes of printable ASCII"};
}

std::optional<EventInputError> check_event_payload_size(size_t bytes, const EventLimits& limits) {
  if (bytes <= limits.max_payload_bytes) return std::nullopt;
  return EventInputError{
      "too_large", "payload",
      "the payload is larger than " + std::to_string(limits.max_payload_bytes) + " bytes"};
}

}  // namespace ringcast
