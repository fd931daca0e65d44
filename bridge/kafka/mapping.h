// One Kafka record mapped to a ringcast event (docs/operations.md §6, "Kafka bridge"), and the
// event written as a line of the bulk route's NDJSON (or the single route's body). The checks are
// the bus intake's (intake/entry.h: the SPEC R1 names, a payload that is one JSON value, SPEC
// R13.1's ordering key), so the bridge refuses what ringcast would and never writes a line whose
// payload could spill into the line's own fields. Invariant: map() either fills `out` with a
// well-formed event or returns the reason (a stable code for the dead-letter header
// ringcast-error-code, and a message naming the field), never both.
#pragma once

#include <simdjson.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "bridge/kafka/config.h"
#include "core/engine.h"
#include "intake/entry.h"

namespace ringcast::kafka_bridge {

// What the mapper reads of a record (a view: the bytes stay librdkafka's).
struct RecordView {
  std::string_view topic;
  int32_t partition = 0;
  int64_t offset = 0;
  std::optional<std::string_view> key;    // nullopt: the record has no key
  std::optional<std::string_view> value;  // nullopt: no value (a tombstone)
  // In record order; a header without a value has nullopt.
  std::vector<std::pair<std::string_view, std::optional<std::string_view>>> headers;
};

class RecordMapper {
 public:
  explicit RecordMapper(const MappingSection& mapping);
  RecordMapper(const RecordMapper&) = delete;
  RecordMapper& operator=(const RecordMapper&) = delete;

  std::optional<intake::EntryError> map(const RecordView& record, EventInput& out);

 private:
  // Reads the string members named like the event's fields out of a JSON object (`what`: "the
  // record's value", "the record key"); json mode also takes the payload member's raw bytes.
  std::optional<intake::EntryError> from_object(std::string_view json, const char* what,
                                                bool take_payload);

  MappingSection mapping_;
  intake::EntryMapper entries_;
  intake::Fields fields_;
  simdjson::ondemand::parser parser_;
  std::string padded_;
};

// The id of a record under id_from = "topic-partition-offset".
std::string topic_partition_offset_id(std::string_view topic, int32_t partition, int64_t offset);

// True when the event cannot travel as one NDJSON line: its payload holds a newline (JSON allows
// one between tokens) and SPEC R1 keeps the payload's bytes as they are, so it goes alone to
// POST /v1/tenants/{t}/events instead.
inline bool needs_single_route(const EventInput& ev) {
  return ev.payload.find('\n') != std::string::npos;
}

// Appends {"tenant","id","type"[,"ordering_key"],"payload"} and a newline.
void append_bulk_line(const EventInput& ev, std::string& out);
// The single route's body: {"id","type"[,"ordering_key"],"payload"} (the tenant is in the path).
std::string single_body(const EventInput& ev);
// Appends `s` as a JSON string literal.
void append_json_string(std::string_view s, std::string& out);

}  // namespace ringcast::kafka_bridge
