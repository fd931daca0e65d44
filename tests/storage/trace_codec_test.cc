// docs/tracing.md in the store (docs/storage-schema.md): a producer's trace context round-trips in
// both event forms — the RocksDB store's (payload in the log, tag 15) and the Redis store's
// (payload inline, tag 16) — with and without an ordering key, and send_traceparent in the
// endpoint record (tag 17); records without them keep their older tags, and a truncated or
// zeroed context is corrupt, never a crash.
#include <gtest/gtest.h>

#include <string>

#include "core/trace_context.h"
#include "storage/codec.h"
#include "tests/storage/store_test_util.h"

namespace ringcast::storage::test {
namespace {

constexpr const char* kParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

Event traced_event(std::string ordering_key) {
  Event e = make_event("acme", "evt-t", 91, "{\"a\":1}");
  e.message_id = make_message_id(e.created_at, 3, 4);
  e.ordering_key = std::move(ordering_key);
  e.trace = stored_trace(*parse_traceparent(kParent), e.message_id);
  return e;
}

// Every shorter prefix of `v` fails to decode.
template <class F>
void expect_truncations_fail(const std::string& v, F decode) {
  for (size_t n = 0; n < v.size(); ++n) {
    EXPECT_FALSE(decode(std::string_view(v.data(), n))) << "prefix of " << n << " bytes decoded";
  }
}

TEST(StorageTraceCodec, TheRedisFormKeepsAProducersTrace) {
  for (const std::string key : {"", "order 7"}) {
    const Event e = traced_event(key);
    std::string v;
    encode_event_inline(e, v);
    EXPECT_EQ(static_cast<uint8_t>(v[0]), kEventInlineWithTrace);
    auto back = decode_event(e.seq, v);
    ASSERT_TRUE(back.ok()) << back.error().message;
    EXPECT_EQ(back->trace, e.trace);
    EXPECT_EQ(back->ordering_key, key);
    EXPECT_EQ(back->message_id, e.message_id);
    EXPECT_EQ(back->payload, e.payload);
    expect_truncations_fail(v, [&](std::string_view x) { return decode_event(e.seq, x).ok(); });
  }
}

TEST(StorageTraceCodec, TheRocksFormKeepsAProducersTrace) {
  for (const std::string key : {"", "order 7"}) {
    const Event e = traced_event(key);
    const PayloadRef ref{2, 4096, 7};
    std::string v;
    encode_event_logged(e, ref, v);
    EXPECT_EQ(static_cast<uint8_t>(v[0]), kEventInLogWithTrace);
    auto back = decode_stored_event(e.seq, v);
    ASSERT_TRUE(back.ok()) << back.error().message;
    EXPECT_EQ(back->event.trace, e.trace);
    EXPECT_EQ(back->event.ordering_key, key);
    EXPECT_EQ(back->event.message_id, e.message_id);
    ASSERT_TRUE(back->ref.has_value());
    EXPECT_EQ(*back->ref, ref);
    expect_truncations_fail(v,
                            [&](std::string_view x) { return decode_stored_event(e.seq, x).ok(); });
  }
}

TEST(StorageTraceCodec, AnEventWithoutATraceKeepsItsOlderTag) {
  Event e = traced_event("");
  e.trace = TraceContext{};
  std::string inl, logged;
  encode_event_inline(e, inl);
  encode_event_logged(e, PayloadRef{1, 0, 7}, logged);
  EXPECT_EQ(static_cast<uint8_t>(inl[0]), kEventInlineWithMessageId);
  EXPECT_EQ(static_cast<uint8_t>(logged[0]), kEventInLogWithMessageId);
  EXPECT_FALSE(decode_event(e.seq, inl)->trace.valid());
  EXPECT_FALSE(decode_stored_event(e.seq, logged)->event.trace.valid());
}

TEST(StorageTraceCodec, AZeroedTraceContextIsCorrupt) {
  const Event e = traced_event("");
  std::string v;
  encode_event_inline(e, v);
  // The last 25 bytes are the context: a zero trace id is none a writer stores.
  for (size_t i = v.size() - kTraceContextBytes; i < v.size() - 9; ++i) v[i] = 0;
  auto back = decode_event(e.seq, v);
  ASSERT_FALSE(back.ok());
  EXPECT_EQ(back.error().code, Errc::kCorruption);
}

TEST(StorageTraceCodec, SendTraceparentRoundTripsUnderItsOwnTag) {
  Endpoint ep = make_endpoint("acme", 5);
  ep.send_traceparent = true;
  ep.ordering = Ordering::kPerKey;
  std::string v;
  encode_endpoint(ep, v);
  EXPECT_EQ(static_cast<uint8_t>(v[0]), kEndpointWithTraceparent);
  auto back = decode_endpoint(ep.id, v);
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_TRUE(back->send_traceparent);
  EXPECT_EQ(back->ordering, Ordering::kPerKey);
  EXPECT_TRUE(same_endpoint(*back, ep));
  expect_truncations_fail(v, [&](std::string_view x) { return decode_endpoint(ep.id, x).ok(); });
  ep.send_traceparent = false;
  std::string off;
  encode_endpoint(ep, off);
  EXPECT_EQ(static_cast<uint8_t>(off[0]), kEndpointWithOrdering);
  EXPECT_FALSE(decode_endpoint(ep.id, off)->send_traceparent);
}

}  // namespace
}  // namespace ringcast::storage::test
