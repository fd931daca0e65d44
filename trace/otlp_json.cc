#include "trace/otlp_json.h"

#include <string_view>

#include "core/trace_context.h"
#include "net/json_writer.h"

namespace ringcast::trace {

namespace {

bool any_set(const SpanId& id) {
  for (uint8_t b : id) {
    if (b != 0) return true;
  }
  return false;
}

void string_attribute(net::JsonWriter& w, std::string_view key, std::string_view value) {
  w.begin_object().field("key", key).key("value").begin_object();
  w.field("stringValue", value).end_object().end_object();
}

void write_span(net::JsonWriter& w, const Span& s) {
  w.begin_object();
  w.field("traceId", hex_id(s.trace_id));
  w.field("spanId", hex_id(s.span_id));
  if (any_set(s.parent_span_id)) w.field("parentSpanId", hex_id(s.parent_span_id));
  w.field("name", s.name);
  w.field("kind", static_cast<unsigned>(s.kind));
  w.field("startTimeUnixNano", std::to_string(s.start_unix_ns));
  w.field("endTimeUnixNano", std::to_string(s.end_unix_ns));
  w.key("attributes").begin_array();
  for (const Attribute& a : s.attributes) {
    if (!a.is_int) {
      string_attribute(w, a.key, a.text);
      continue;
    }
    w.begin_object().field("key", a.key).key("value").begin_object();
    w.field("intValue", std::to_string(a.number)).end_object().end_object();
  }
  w.end_array();
  if (s.status != SpanStatus::kUnset) {
    w.key("status").begin_object().field("code", static_cast<unsigned>(s.status));
    if (!s.status_message.empty()) w.field("message", s.status_message);
    w.end_object();
  }
  w.end_object();
}

}  // namespace

std::string encode_otlp_json(const Resource& resource, const Span* spans, size_t count) {
  net::JsonWriter w;
  w.begin_object().key("resourceSpans").begin_array().begin_object();
  w.key("resource").begin_object().key("attributes").begin_array();
  string_attribute(w, "service.name", resource.service_name);
  if (!resource.service_version.empty())
    string_attribute(w, "service.version", resource.service_version);
  if (!resource.service_instance.empty())
    string_attribute(w, "service.instance.id", resource.service_instance);
  w.end_array().end_object();
  w.key("scopeSpans").begin_array().begin_object();
  w.key("scope").begin_object().field("name", "ringcast");
  if (!resource.service_version.empty()) w.field("version", resource.service_version);
  w.end_object();
  w.key("spans").begin_array();
  for (size_t i = 0; i < count; ++i) write_span(w, spans[i]);
  w.end_array();
  w.end_object().end_array();  // scopeSpans
  w.end_object().end_array();  // resourceSpans
  w.end_object();
  return w.take();
}

}  // namespace ringcast::trace
