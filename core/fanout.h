// Fan-out matching (SPEC R1 "Endpoint"): which endpoints of a tenant receive an event type.
// A filter entry is an exact type, "*" (everything) or a prefix wildcard "payment.*"; an empty
// filter takes everything. Invariant: matching is pure and allocation-free.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"

namespace ringcast {

inline constexpr size_t kEventTypeMaxBytes = 256;
inline constexpr size_t kEventFilterMaxEntries = 256;

// "payment.*" matches "payment.status_changed" and "payment.a.b", not "payment" nor
// "payments.x"; "*" matches every type; anything else matches exactly.
bool event_type_matches(std::string_view pattern, std::string_view type);

// True when `filter` is empty or any entry matches.
bool filter_matches(const std::vector<std::string>& filter, std::string_view type);

// A filter entry is non-empty, at most kEventTypeMaxBytes, printable ASCII without spaces,
// and holds '*' only as the whole entry or as a trailing ".*". Error field "event_types",
// reason "invalid_event_type".
Result<void> validate_event_filter(const std::vector<std::string>& filter);

}  // namespace ringcast
