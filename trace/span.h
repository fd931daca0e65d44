// One finished span as the shards hand it to the exporter (trace/tracer.h) and as the OTLP/JSON
// encoder writes it (trace/otlp_json.h; docs/tracing.md "Spans"). A plain value: made on a
// shard thread only when tracing is on and the trace is sampled, moved to the exporter's queue.
// Invariant: attribute keys are static text (string literals); no attribute carries a header
// value, a secret or a full URL (docs/tracing.md "Attributes").
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/types.h"

namespace ringcast::trace {

// OTLP's SpanKind and Status.code numbers (opentelemetry/proto/trace/v1/trace.proto).
enum class SpanKind : uint8_t { kInternal = 1, kServer = 2, kClient = 3 };
enum class SpanStatus : uint8_t { kUnset = 0, kOk = 1, kError = 2 };

struct Attribute {
  std::string_view key;  // a string literal
  std::string text{};    // the value when !is_int
  int64_t number = 0;    // the value when is_int
  bool is_int = false;
};

struct Span {
  TraceId trace_id{};
  SpanId span_id{};
  SpanId parent_span_id{};  // all zero: a root span
  const char* name = "";    // a string literal: "intake", "delivery", "attempt"
  SpanKind kind = SpanKind::kInternal;
  int64_t start_unix_ns = 0;
  int64_t end_unix_ns = 0;
  SpanStatus status = SpanStatus::kUnset;
  std::string status_message{};  // with kError: the reason (a SPEC R6 code, a status name)
  std::vector<Attribute> attributes{};

  Span& add(std::string_view key, std::string value) {
    attributes.push_back(Attribute{key, std::move(value), 0, false});
    return *this;
  }
  Span& add(std::string_view key, int64_t value) {
    attributes.push_back(Attribute{key, std::string(), value, true});
    return *this;
  }
};

}  // namespace ringcast::trace
