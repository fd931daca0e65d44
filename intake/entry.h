// One Redis Stream entry mapped to an engine EventInput, checked by the same rules as the HTTP
// intake's (api/rest_api.cc read_event): required fields, tenant / id / type form and
// length, and a payload that is one valid JSON value (SPEC R1). Invariant: map() either fills
// `out` with a well-formed event or returns the reason (a stable code for the dead-letter
// stream's `error_code`, and a message), never both; it allocates only for the event's bytes.
#pragma once

#include "core/input_rules.h"

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

// Which entry fields hold the event's parts (`[[intake.redis]]` *_field keys).
struct FieldNames {
  std::string tenant = "tenant";
  std::string id = "id";
  std::string type = "type";
  std::string payload = "payload";
};

// The HTTP intake's limits (`[limits]`), so both intakes accept the same events.
struct EntryLimits {
  size_t max_tenant_bytes = 128;
  size_t max_id_bytes = 256;
  size_t max_type_bytes = 256;
  size_t max_payload_bytes = 1u << 20;
};

struct EntryError {
  const char* code = "";  // missing_field, invalid_value, invalid_json, too_large
  std::string message;
};

using Fields = std::vector<std::pair<std::string, std::string>>;

class EntryMapper {
 public:
  EntryMapper(FieldNames names, EntryLimits limits);
  ~EntryMapper();
  EntryMapper(const EntryMapper&) = delete;
  EntryMapper& operator=(const EntryMapper&) = delete;

  // Fields other than the four are ignored (producers may carry their own metadata); the first
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
