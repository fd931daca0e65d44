// W3C trace context for ringcast's spans (docs/tracing.md): the `traceparent` header read from a
// producer and written to a receiver, and the ids of an event's spans. Pure. Invariant: every id
// here is a pure function of what the event record keeps (its message id, its stored trace
// context) and of delivery ids and attempt numbers, so a restart names the same spans without
// keeping any per-delivery state, and a derived id is never all zero (W3C: invalid).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/types.h"

namespace ringcast {

inline constexpr size_t kTraceparentChars = 55;  // "00-" 32 hex "-" 16 hex "-" 2 hex

// A W3C `traceparent` value: `00-<32 lower-case hex>-<16 lower-case hex>-<2 hex>`, trace id and
// parent id not all zero. A later version (01..fe) is read by its first four fields when what
// follows them is nothing or starts with '-'; version ff and anything else is nullopt (the
// caller ignores it: never a reason to refuse an event). Leading and trailing spaces and tabs
// (an HTTP field value's optional white space) are ignored.
std::optional<TraceContext> parse_traceparent(std::string_view text);

// Appends "00-<trace id>-<span id>-<flags>" (kTraceparentChars, lower-case hex).
void append_traceparent(std::string& out, const TraceId& trace_id, const SpanId& span_id,
                        uint8_t flags);
std::string traceparent(const TraceContext& c);

// Lower-case hex of an id (OTLP/JSON writes ids so).
std::string hex_id(const TraceId& id);
std::string hex_id(const SpanId& id);

// The trace id of an event whose producer sent no traceparent: the 128 bits its message id
// stands for ("msg_" + 26 Crockford base32 digits: 48 bits of milliseconds, 80 random bits), so
// the webhook id a receiver logs names the trace; a message id of another shape is hashed.
TraceId trace_id_of_message(std::string_view message_id);
// The span ids ringcast derives: the intake span of an event (from its message id, unique per
// event even when many events share a producer's trace), a delivery's span, and an attempt's.
SpanId intake_span_id(const TraceId& trace, std::string_view message_id);
SpanId delivery_span_id(const TraceId& trace, DeliveryId delivery);
SpanId attempt_span_id(const TraceId& trace, DeliveryId delivery, uint16_t attempt);

// The event's trace: its stored context (a producer's), else the one derived from its message
// id (trace_id_of_message, intake_span_id; flags 0).
TraceContext event_trace(const Event& e);
// What intake stores for a producer's context `parent`: its trace id and flags, and the event's
// intake span id. All zero when `parent` is not valid.
TraceContext stored_trace(const TraceContext& parent, std::string_view message_id);

// Head sampling by trace id (docs/tracing.md "Sampling"): true for a share `ratio` of all trace
// ids (0: none, 1: all), the same answer on every node for the same id.
bool ratio_sampled(const TraceId& trace, double ratio);
// Whether the event's spans are recorded: a producer's sampled flag when it sent one (honoured
// either way), else ratio_sampled of the derived trace id.
bool event_sampled(const Event& e, double ratio);

}  // namespace ringcast
