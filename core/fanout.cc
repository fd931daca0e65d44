#include "core/fanout.h"

namespace ringcast {

bool event_type_matches(std::string_view pattern, std::string_view type) {
  if (pattern == "*") return true;
  if (pattern.size() >= 2 && pattern.ends_with(".*")) {
    std::string_view prefix = pattern.substr(0, pattern.size() - 1);  // keeps the '.'
    return type.size() > prefix.size() && type.starts_with(prefix);
  }
  return pattern == type;
}

bool filter_matches(const std::vector<std::string>& filter, std::string_view type) {
  if (filter.empty()) return true;
  for (const std::string& p : filter) {
    if (event_type_matches(p, type)) return true;
  }
  return false;
}

Result<void> validate_event_filter(const std::vector<std::string>& filter) {
  auto bad = [](const char* msg) {
    return make_error(Errc::kInvalidArgument, msg, "event_types", "invalid_event_type");
  };
  if (filter.size() > kEventFilterMaxEntries) return bad("too many event types");
  for (const std::string& p : filter) {
    if (p.empty()) return bad("empty event type");
    if (p.size() > kEventTypeMaxBytes) return bad("event type too long");
    for (size_t i = 0; i < p.size(); ++i) {
      const unsigned char c = static_cast<unsigned char>(p[i]);
      if (c <= 0x20 || c >= 0x7F) return bad("event type has a space or a non-ASCII byte");
      if (c == '*') {
        const bool whole = p.size() == 1;
        const bool trailing = i == p.size() - 1 && i >= 2 && p[i - 1] == '.';
        if (!whole && !trailing) return bad("'*' only as \"*\" or a trailing \".*\"");
      }
    }
  }
  return ok();
}

}  // namespace ringcast
