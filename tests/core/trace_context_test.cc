// W3C trace context (core/trace_context.h, docs/tracing.md): what a producer's `traceparent` may
// be (table-driven from the W3C rules), its spelling on the wire, the trace id an event without
// one gets from its message id, the derived span ids, and head sampling by trace id.
#include "core/trace_context.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace ringcast {
namespace {

constexpr const char* kValid = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

TEST(TraceContext, ParsesAValidTraceparent) {
  auto c = parse_traceparent(kValid);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(hex_id(c->trace_id), "4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_EQ(hex_id(c->span_id), "00f067aa0ba902b7");
  EXPECT_EQ(c->flags, 1);
  EXPECT_TRUE(c->sampled());
  EXPECT_EQ(traceparent(*c), kValid);  // written back exactly
  // Not sampled, and optional white space around the field value.
  auto n = parse_traceparent(" \t00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00 ");
  ASSERT_TRUE(n.has_value());
  EXPECT_FALSE(n->sampled());
  // A later version is read by its first four fields (W3C "versioning").
  auto later = parse_traceparent("cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what");
  ASSERT_TRUE(later.has_value());
  EXPECT_EQ(hex_id(later->trace_id), "4bf92f3577b34da6a3ce929d0e0e4736");
}

TEST(TraceContext, RefusesEveryMalformedTraceparent) {
  const char* bad[] = {
      "",
      "00",
      "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0",     // short flags
      "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-011",   // version 00 is 55 chars
      "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",  // ... exactly
      "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",    // upper-case hex
      "00-00000000000000000000000000000000-00f067aa0ba902b7-01",    // zero trace id
      "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",    // zero parent id
      "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",    // version ff
      "0g-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",    // not hex
      "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",    // separators
      "00-4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7-01",
      "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7_01",
      "00-4bf92f3577b34da6a3ce929d0e0e473-600f067aa0ba902b7-01",   // fields shifted
      "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",  // later version, no '-'
      "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-zz",
  };
  for (const char* t : bad) EXPECT_FALSE(parse_traceparent(t).has_value()) << t;
}

TEST(TraceContext, TheTraceIdOfAnEventWithoutOneIsItsMessageIdsBits) {
  // make_message_id: 48 bits of milliseconds, then 80 random bits (16 of random_hi, random_lo).
  const WallTime at = WallTime::from_ms(0x0123456789ab);
  const std::string msg = make_message_id(at, 0xffffffffffffcdefULL, 0x0011223344556677ULL);
  EXPECT_EQ(hex_id(trace_id_of_message(msg)), "0123456789abcdef0011223344556677") << msg;
  // Stable, and another message id names another trace.
  EXPECT_EQ(trace_id_of_message(msg), trace_id_of_message(msg));
  EXPECT_NE(trace_id_of_message(msg), trace_id_of_message(make_message_id(at, 0, 1)));
  // An id of another shape is hashed, never all zero.
  const TraceId other = trace_id_of_message("not-a-message-id");
  EXPECT_EQ(other, trace_id_of_message("not-a-message-id"));
  EXPECT_NE(hex_id(other), std::string(32, '0'));
  EXPECT_NE(hex_id(trace_id_of_message("msg_00000000000000000000000000")), std::string(32, '0'));
}

TEST(TraceContext, DerivedSpanIdsAreStableDistinctAndNeverZero) {
  const TraceId t = parse_traceparent(kValid)->trace_id;
  std::set<std::string> seen;
  for (DeliveryId d = 1; d <= 50; ++d) {
    EXPECT_EQ(delivery_span_id(t, d), delivery_span_id(t, d));
    EXPECT_TRUE(seen.insert(hex_id(delivery_span_id(t, d))).second);
    for (uint16_t a = 1; a <= 5; ++a) {
      EXPECT_EQ(attempt_span_id(t, d, a), attempt_span_id(t, d, a));
      EXPECT_TRUE(seen.insert(hex_id(attempt_span_id(t, d, a))).second);
    }
  }
  EXPECT_TRUE(seen.insert(hex_id(intake_span_id(t, "msg_a"))).second);
  EXPECT_TRUE(seen.insert(hex_id(intake_span_id(t, "msg_b"))).second);  // one per event
  EXPECT_EQ(seen.count(std::string(16, '0')), 0u);
  // Another trace, other ids for the same delivery.
  const TraceId u = trace_id_of_message("msg_x");
  EXPECT_NE(delivery_span_id(t, 7), delivery_span_id(u, 7));
}

TEST(TraceContext, AnEventKeepsItsProducersTraceElseDerivesOne) {
  Event e;
  e.message_id = make_message_id(WallTime::from_ms(1'700'000'000'000), 1, 2);
  // No producer context: derived from the message id, flags 0, nothing to store.
  const TraceContext derived = event_trace(e);
  EXPECT_EQ(derived.trace_id, trace_id_of_message(e.message_id));
  EXPECT_EQ(derived.span_id, intake_span_id(derived.trace_id, e.message_id));
  EXPECT_TRUE(derived.valid());
  EXPECT_FALSE(stored_trace(TraceContext{}, e.message_id).valid());
  // A producer's: its trace id and flags, the event's own intake span.
  const TraceContext parent = *parse_traceparent(kValid);
  e.trace = stored_trace(parent, e.message_id);
  EXPECT_EQ(e.trace.trace_id, parent.trace_id);
  EXPECT_EQ(e.trace.flags, parent.flags);
  EXPECT_NE(e.trace.span_id, parent.span_id);
  EXPECT_EQ(e.trace.span_id, intake_span_id(parent.trace_id, e.message_id));
  EXPECT_EQ(event_trace(e), e.trace);
}

TEST(TraceContext, HeadSamplingByTraceIdHonoursAProducersFlag) {
  const TraceId t = parse_traceparent(kValid)->trace_id;
  EXPECT_TRUE(ratio_sampled(t, 1.0));
  EXPECT_FALSE(ratio_sampled(t, 0.0));
  // About the ratio of many ids, and the same answer for the same id.
  int in = 0;
  for (uint64_t i = 0; i < 20'000; ++i) {
    const TraceId id = trace_id_of_message(make_message_id(WallTime::from_ms(1000), 0, i));
    if (ratio_sampled(id, 0.25)) ++in;
    EXPECT_EQ(ratio_sampled(id, 0.25), ratio_sampled(id, 0.25));
  }
  EXPECT_GT(in, 4'500);
  EXPECT_LT(in, 5'500);
  // A producer's flag decides, whatever the ratio.
  Event e;
  e.message_id = "msg_x";
  TraceContext p = *parse_traceparent(kValid);
  e.trace = stored_trace(p, e.message_id);
  EXPECT_TRUE(event_sampled(e, 0.0));
  p.flags = 0;
  e.trace = stored_trace(p, e.message_id);
  EXPECT_FALSE(event_sampled(e, 1.0));
  e.trace = TraceContext{};
  EXPECT_TRUE(event_sampled(e, 1.0));
  EXPECT_FALSE(event_sampled(e, 0.0));
}

}  // namespace
}  // namespace ringcast
