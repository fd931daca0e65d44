// Money-event rules (SPEC R3.5) as configuration, and the tiny JSON string-field scanner they
// run on. Invariant: evaluation is pure and reads only the raw payload bytes; a payload that
// is not a JSON object, or lacks the field, never matches a rule that names a field.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ringcast {

// Finds the string value at `path` ("status", or dot-separated "data.object.status") inside
// the JSON object `json`, walking nested objects. Returns the unescaped value, or nullopt
// when the payload is malformed, the path is missing, or the value is not a string. Keys are
// compared after unescaping; the first occurrence of a duplicate key wins. Nesting deeper
// than kMaxJsonDepth is treated as malformed (bounded work, no recursion blow-up).
inline constexpr int kMaxJsonDepth = 64;
std::optional<std::string> json_string_field(std::string_view json, std::string_view path);

// One rule: the event type matches exactly and, when `field_path` is not empty, the string
// at that path is one of `values`.
struct MoneyRule {
  std::string event_type;
  std::string field_path;           // empty: the type alone decides
  std::vector<std::string> values;  // allowed values when field_path is set
};

struct MoneyRules {
  std::vector<MoneyRule> rules;

  // True when any rule matches the event (SPEC R3.5).
  bool is_money(std::string_view event_type, std::string_view payload) const;

  // The seed's set, the `xhub` preset default (SPEC R3.5):
  //   payment.status_changed status ∈ {paid, settled, refunded}
  //   withdrawal.status_changed status = completed
  //   exchange.status_changed status = completed
  //   refund.completed, refund.reversed (any payload)
  static MoneyRules xhub_default();
};

}  // namespace ringcast
