// OTLP/HTTP's JSON encoding of a batch of spans (the ExportTraceServiceRequest of
// opentelemetry/proto/collector/trace/v1, as the OTLP specification's "JSON Protobuf Encoding"
// writes it: ids as lower-case hex, times as decimal strings of Unix nanoseconds, enums as
// numbers, int64 attribute values as decimal strings). Pure. Invariant: the output is valid JSON
// whatever the strings hold (net::JsonWriter).
#pragma once

#include <cstddef>
#include <string>

#include "trace/span.h"

namespace ringcast::trace {

// What every span of a node shares (the OTLP Resource and InstrumentationScope).
struct Resource {
  std::string service_name = "ringcast";  // resource attribute service.name
  std::string service_version{};          // service.version; empty: left out
  std::string service_instance{};         // service.instance.id; empty: left out
};

// {"resourceSpans":[{"resource":{"attributes":[...]},"scopeSpans":[{"scope":{"name":"ringcast",
// ...},"spans":[...]}]}]}
std::string encode_otlp_json(const Resource& resource, const Span* spans, size_t count);

}  // namespace ringcast::trace
