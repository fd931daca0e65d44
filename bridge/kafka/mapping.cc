#include "bridge/kafka/mapping.h"

#include <cctype>
#include <limits>

namespace ringcast::kafka_bridge {
namespace {

namespace od = simdjson::ondemand;

// The bridge applies the forms of SPEC R1 (alphabets, printable ASCII, valid JSON); the daemon's
// own [limits] (lengths, payload size) are its to apply: a line it refuses for them comes back
// 400 and is dead-lettered with its code (docs/operations.md §6, "Kafka bridge").
intake::EntryLimits bridge_limits() {
  intake::EntryLimits l;
  l.max_tenant_bytes = 4096;
  l.max_id_bytes = kMaxEventIdBytes;
  l.max_type_bytes = 4096;
  l.max_payload_bytes = std::numeric_limits<size_t>::max();
  return l;
}

std::string_view trim_ws(std::string_view s) {
  while (!s.empty() &&
         (s.front() == ' ' || s.front() == '\t' || s.front() == '\n' || s.front() == '\r')) {
    s.remove_prefix(1);
  }
  while (!s.empty() &&
         (s.back() == ' ' || s.back() == '\t' || s.back() == '\n' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

intake::EntryError json_error(const char* what, simdjson::error_code e) {
  std::string m = what;
  m += " is not a JSON object: ";
  m += simdjson::error_message(e);
  return intake::EntryError{"invalid_json", std::move(m)};
}

}  // namespace

std::string topic_partition_offset_id(std::string_view topic, int32_t partition, int64_t offset) {
  std::string id(topic);
  id += '-';
  id += std::to_string(partition);
  id += '-';
  id += std::to_string(offset);
  return id;
}

RecordMapper::RecordMapper(const MappingSection& mapping)
    : mapping_(mapping), entries_(mapping.fields, bridge_limits()) {}

std::optional<intake::EntryError> RecordMapper::from_object(std::string_view json, const char* what,
                                                            bool take_payload) {
  const auto& names = mapping_.fields;
  padded_.reserve(json.size() + simdjson::SIMDJSON_PADDING);
  padded_.assign(json);
  od::document doc;
  if (auto e = parser_.iterate(padded_.data(), json.size(), padded_.capacity()).get(doc)) {
    return json_error(what, e);
  }
  od::object obj;
  if (auto e = doc.get_object().get(obj)) return json_error(what, e);
  for (auto field : obj) {
    std::string_view key;
    if (auto e = field.unescaped_key().get(key)) return json_error(what, e);
    od::value v;
    if (auto e = field.value().get(v)) return json_error(what, e);
    const bool named =
        key == names.tenant || key == names.id || key == names.type || key == names.ordering_key;
    if (take_payload && key == names.payload) {
      od::json_type t;
      if (auto e = v.type().get(t)) return json_error(what, e);
      std::string_view raw;
      simdjson::error_code e = simdjson::SUCCESS;
      if (t == od::json_type::object) {
        od::object o;
        e = v.get_object().get(o);
        if (!e) e = o.raw_json().get(raw);
      } else if (t == od::json_type::array) {
        od::array a;
        e = v.get_array().get(a);
        if (!e) e = a.raw_json().get(raw);
      } else {
        raw = v.raw_json_token();
      }
      if (e) return json_error(what, e);
      // The payload's bytes as the producer wrote them (SPEC R1), whitespace around them aside;
      // EntryMapper validates every byte of them.
      fields_.emplace_back(names.payload, std::string(trim_ws(raw)));
    } else if (named) {
      std::string_view s;
      if (v.get_string().get(s)) {
        std::string m(key);
        m += " in ";
        m += what;
        m += " must be a string";
        return intake::EntryError{"invalid_value", std::move(m)};
      }
      fields_.emplace_back(std::string(key), std::string(s));
    }
    // Other members are the producer's own metadata: skipped (ondemand checks their structure).
  }
  const char* rest = nullptr;
  if (doc.current_location().get(rest) == simdjson::SUCCESS) {  // OUT_OF_BOUNDS at the end
    std::string m = what;
    m += " has bytes after its JSON object";
    return intake::EntryError{"invalid_json", std::move(m)};
  }
  return std::nullopt;
}

std::optional<intake::EntryError> RecordMapper::map(const RecordView& r, EventInput& out) {
  fields_.clear();
  // topic-partition-offset: this id first, so it wins over a field of the same name (the mapper
  // takes a field's first occurrence).
  if (mapping_.id_from == IdFrom::kTopicPartitionOffset) {
    fields_.emplace_back(mapping_.fields.id,
                         topic_partition_offset_id(r.topic, r.partition, r.offset));
  }
  const auto& names = mapping_.fields;
  switch (mapping_.source) {
    case MappingSource::kHeaders:
      for (const auto& [name, value] : r.headers) {
        if (name == names.tenant || name == names.id || name == names.type ||
            name == names.ordering_key) {
          fields_.emplace_back(std::string(name), value ? std::string(*value) : std::string());
        }
      }
      break;
    case MappingSource::kJson:
      if (!r.value) {
        return intake::EntryError{"missing_field", "the record has no value (a tombstone)"};
      }
      if (auto e = from_object(*r.value, "the record's value", /*take_payload=*/true)) return e;
      break;
    case MappingSource::kKey:
      if (!r.key) return intake::EntryError{"missing_field", "the record has no key"};
      if (auto e = from_object(*r.key, "the record key", /*take_payload=*/false)) return e;
      break;
  }
  if (mapping_.source != MappingSource::kJson) {
    if (!r.value) {
      return intake::EntryError{"missing_field", "the record has no value (a tombstone)"};
    }
    fields_.emplace_back(names.payload, std::string(*r.value));
  }
  if (!mapping_.default_tenant.empty()) {
    fields_.emplace_back(names.tenant, mapping_.default_tenant);  // only when none came before
  }
  return entries_.map_taking_payload(fields_, out);
}

void append_json_string(std::string_view s, std::string& out) {
  static constexpr char kHex[] = "0123456789abcdef";
  out += '"';
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (u < 0x20) {
      out += "\\u00";
      out += kHex[u >> 4];
      out += kHex[u & 15];
    } else {
      out += c;
    }
  }
  out += '"';
}

namespace {

void append_event_fields(const EventInput& ev, std::string& out) {
  out += "\"id\":";
  append_json_string(ev.id, out);
  out += ",\"type\":";
  append_json_string(ev.type, out);
  if (!ev.ordering_key.empty()) {
    out += ",\"ordering_key\":";
    append_json_string(ev.ordering_key, out);
  }
  out += ",\"payload\":";
  out += ev.payload;  // one JSON value, checked by the mapper
}

}  // namespace

void append_bulk_line(const EventInput& ev, std::string& out) {
  out += "{\"tenant\":";
  append_json_string(ev.tenant, out);
  out += ',';
  append_event_fields(ev, out);
  out += "}\n";
}

std::string single_body(const EventInput& ev) {
  std::string out = "{";
  append_event_fields(ev, out);
  out += '}';
  return out;
}

}  // namespace ringcast::kafka_bridge
