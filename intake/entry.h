// One Redis Stream entry mapped to an engine EventInput, checked by the same rules as the HTTP
// intake's (core/event_input.h): required fields, tenant / id / type form and length, and a
// payload that is one valid JSON value (SPEC R1), and an ordering key when the entry has one
// (SPEC R13.1). Invariant: map() either fills `out` with a well-formed event or returns the
// reason (a stable code for the dead-letter stream's `error_code`, and a message), never both;
// it allocates only for the event's bytes.
#pragma once

#include "core/event_input.h"

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/engine.h"

namespace simdjson::dom {
class parser;
}

namespace ringcast::intake {

// Which entry fields hold the event's parts (`[[intake.redis]]` *_field keys). The ordering key
// (SPEC R13.1) is optional: an entry without that field has none.
struct FieldNames {
  std::string tenant = "tenant";
  std::string id = "id";
  std::string type = "type";
  std::string payload = "payload";
  std::string ordering_key = "ordering_key";
};

// The HTTP intake's limits (`[limits]`), so both intakes accept the same events.
using EntryLimits = EventLimits;

struct EntryError {
  // missing_field, invalid_value, invalid_event_id, invalid_json, too_large
  const char* code = "";
  std::string message;
};

using Fields = std::vector<std::pair<std::string, std::string>>;

class EntryMapper {
 public:
  EntryMapper(FieldNames names, EntryLimits limits);
  ~EntryMapper();
  EntryMapper(const EntryMapper&) = delete;
  EntryMapper& operator=(const EntryMapper&) = delete;

  // Fields other than these five are ignored (producers may carry their own metadata); the first
  // occurrence of a repeated field wins.
  std::optional<EntryError> map(const Fields& fields, EventInput& out);
  // The same, but a valid entry's payload is moved into `out` (its value in `fields` is left
  // empty): the hot path of the bus intake, which then has one copy of each payload.
  std::optional<EntryError> map_taking_payload(Fields& fields, EventInput& out);

 private:
  std::optional<EntryError> check(const Fields& fields, size_t* payload_at, EventInput& out);
  FieldNames names_;
  EntryLimits limits_;
  std::unique_ptr<simdjson::dom::parser> parser_;
  std::string scratch_;  // a padded copy of a payload that has no room past its end
};

}  // namespace ringcast::intake
