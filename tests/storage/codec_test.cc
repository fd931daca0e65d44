// The binary codec: exact round trips of every record type, and every truncated, extended or
// garbled value is a kCorruption error (never a crash; ASan/UBSan builds check the "never").
#include "storage/codec.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>

#include <functional>
#include <optional>
#include <random>

#include "tests/storage/store_test_util.h"

namespace ringcast::storage::test {
namespace {

// Every strict prefix and the value plus a trailing byte must fail with kCorruption.
void expect_truncations_fail(const std::string& value,
                             const std::function<Result<void>(std::string_view)>& decode) {
  ASSERT_TRUE(decode(value).ok());
  for (size_t n = 0; n < value.size(); ++n) {
    auto r = decode(std::string_view(value).substr(0, n));
    ASSERT_FALSE(r.ok()) << "prefix of " << n << " of " << value.size() << " bytes decoded";
    EXPECT_EQ(r.error().code, Errc::kCorruption);
  }
  auto r = decode(value + "x");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::kCorruption);
  std::string bad_version = value;
  bad_version[0] = static_cast<char>(kValueVersion + 1);
  EXPECT_FALSE(decode(bad_version).ok());
}

// Random byte flips: decoding may succeed or fail, but must not crash or read out of bounds.
void fuzz(const std::string& value, const std::function<Result<void>(std::string_view)>& decode) {
  std::mt19937_64 rng(7);
  for (int i = 0; i < 2000; ++i) {
    std::string v = value;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int f = 0; f < flips; ++f) v[rng() % v.size()] = static_cast<char>(rng());
    if (rng() % 3 == 0) v.resize(rng() % (v.size() + 1));
    (void)decode(v);
  }
  for (int i = 0; i < 500; ++i) {
    std::string v(rng() % 64, '\0');
    for (auto& c : v) c = static_cast<char>(rng());
    if (!v.empty()) v[0] = static_cast<char>(kValueVersion);
    (void)decode(v);
  }
}

template <class T>
Result<void> as_void(const Result<T>& r) {
  if (!r) return r.error();
  return ok();
}

TEST(StorageCodec, VarintAndZigzagEdges) {
  for (uint64_t v :
       {uint64_t{0}, uint64_t{1}, uint64_t{127}, uint64_t{128}, uint64_t{1} << 35, ~uint64_t{0}}) {
    std::string s;
    put_varint(s, v);
    Reader r(s);
    EXPECT_EQ(r.varint(), v);
    EXPECT_TRUE(r.done());
  }
  for (int64_t v : {int64_t{0}, int64_t{-1}, int64_t{1}, INT64_MIN, INT64_MAX}) {
    EXPECT_EQ(unzigzag(zigzag(v)), v);
  }
  std::string overlong(11, '\xff');  // more than 10 bytes of continuation
  Reader r(overlong);
  r.varint();
  EXPECT_FALSE(r.ok());
  std::string too_big = "\xff\xff\xff\xff\xff\xff\xff\xff\xff\x02";  // > 64 bits
  Reader r2(too_big);
  r2.varint();
  EXPECT_FALSE(r2.ok());
}

TEST(StorageCodec, EventRoundTripAndCorruption) {
  Event e = make_event("acme", "evt-1", 77, std::string("{\"a\":1,\"bin\":\"\0\xff\"}", 19));
  std::string v;
  encode_event(e, v);
  auto back = decode_event(e.seq, v);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(fields(*back), fields(e));
  expect_truncations_fail(v, [&](std::string_view x) { return as_void(decode_event(e.seq, x)); });
  fuzz(v, [&](std::string_view x) { return as_void(decode_event(e.seq, x)); });
  // A flipped payload byte is caught by the payload hash.
  std::string flipped = v;
  flipped[flipped.size() - 2] ^= 0x20;
  auto r = decode_event(e.seq, flipped);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::kCorruption);
}

TEST(StorageCodec, InlineEventWithMessageIdRoundTrips) {
  Event e = make_event("acme", "evt-1", 77, "{\"a\":1}");
  e.payload_hash = payload_hash(e.payload);
  e.message_id = "msg_01TESTMESSAGEID000000000";
  std::string v;
  encode_event_inline(e, v);
  auto back = decode_event(e.seq, v);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(fields(*back), fields(e));
  EXPECT_EQ(back->message_id, e.message_id);
  expect_truncations_fail(v, [&](std::string_view x) { return as_void(decode_event(e.seq, x)); });
  // Version 1 (no message id) still reads, with the derived id.
  std::string old;
  encode_event(e, old);
  auto legacy = decode_event(e.seq, old);
  ASSERT_TRUE(legacy.ok());
  EXPECT_EQ(legacy->message_id, legacy_message_id(e.created_at, e.seq));
}

TEST(StorageCodec, LoggedEventHeadAndArchivedDeliveryRoundTrip) {
  Event e = make_event("acme", "evt-1", 77, "{\"a\":1}");
  e.payload_hash = payload_hash(e.payload);
  const PayloadRef ref{3, 1 << 20, 9};
  std::string v;
  encode_event_logged(e, ref, v);
  auto back = decode_stored_event(e.seq, v);
  ASSERT_TRUE(back.ok());
  ASSERT_TRUE(back->ref.has_value());
  EXPECT_EQ(*back->ref, ref);
  EXPECT_EQ(back->event.tenant, e.tenant);
  EXPECT_EQ(back->event.id, e.id);
  EXPECT_EQ(back->event.payload_hash, e.payload_hash);
  EXPECT_TRUE(back->event.payload.empty());
  // No message id given (a writer that had none): a stable one derived from the sequence.
  EXPECT_EQ(back->event.message_id, legacy_message_id(e.created_at, e.seq));
  Event with_id = e;
  with_id.message_id = make_message_id(e.created_at, 7, 9);
  std::string v2;
  encode_event_logged(with_id, ref, v2);
  auto back2 = decode_stored_event(e.seq, v2);
  ASSERT_TRUE(back2.ok());
  EXPECT_EQ(back2->event.message_id, with_id.message_id);
  // (its version byte is kEventInLog, so the shared helper's "bad version" case does not apply)
  for (size_t n = 0; n < v.size(); ++n)
    EXPECT_FALSE(decode_stored_event(e.seq, std::string_view(v).substr(0, n)).ok()) << n;
  EXPECT_FALSE(decode_stored_event(e.seq, v + "x").ok());
  fuzz(v, [&](std::string_view x) { return as_void(decode_stored_event(e.seq, x)); });
  // A value written before the payload log holds the bytes and still reads.
  std::string inline_value;
  encode_event(e, inline_value);
  auto old = decode_stored_event(e.seq, inline_value);
  ASSERT_TRUE(old.ok());
  EXPECT_FALSE(old->ref.has_value());
  EXPECT_EQ(old->event.payload, e.payload);
  EXPECT_EQ(old->event.message_id, legacy_message_id(e.created_at, e.seq));

  Delivery d = make_delivery(e, 5, 78, DeliveryStatus::kDelivered);
  Attempt a = make_attempt(d.id, 7, Outcome::kSuccess);
  std::string plain, archived;
  encode_delivery(d, plain);
  encode_archived(d, a, archived);
  Delivery got;
  std::optional<Attempt> last;
  ASSERT_TRUE(decode_archived(d.id, archived, got, &last).ok());
  EXPECT_EQ(fields(got), fields(d));
  ASSERT_TRUE(last.has_value());
  EXPECT_EQ(fields(*last), fields(a));
  last.reset();
  ASSERT_TRUE(decode_archived(d.id, plain, got, &last).ok());
  EXPECT_FALSE(last.has_value());
  EXPECT_FALSE(decode_delivery(d.id, archived).ok()) << "an active record never carries one";
  // Every cut but the one right after the delivery (a plain record) is an error.
  for (size_t n = 0; n < archived.size(); ++n) {
    if (n == plain.size()) continue;
    EXPECT_FALSE(decode_archived(d.id, std::string_view(archived).substr(0, n), got, &last).ok())
        << n;
  }
  fuzz(archived, [&](std::string_view x) { return decode_archived(d.id, x, got, &last); });
}

TEST(StorageCodec, DeliveryRoundTripIncludingExtremeTimes) {
  Event e = make_event("acme", "evt-1", 77, "{}");
  Delivery d = make_delivery(e, make_id(id_partition(e.seq), 3), 78, DeliveryStatus::kInFlight);
  for (WallTime next : {WallTime(), WallTime::max(), WallTime::from_ns(INT64_MIN), kT0}) {
    d.next_attempt_at = next;
    d.first_slow_at = kT0 + hours(2);
    std::string v;
    encode_delivery(d, v);
    auto back = decode_delivery(d.id, v);
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(fields(*back), fields(d));
    expect_truncations_fail(v,
                            [&](std::string_view x) { return as_void(decode_delivery(d.id, x)); });
  }
  std::string v;
  encode_delivery(d, v);
  fuzz(v, [&](std::string_view x) { return as_void(decode_delivery(d.id, x)); });
  std::string bad_status = v;
  bad_status[bad_status.size() - 2] = 9;  // status byte out of range
  EXPECT_FALSE(decode_delivery(d.id, bad_status).ok());
}

// A delivery a crash left in flight keeps its lease_expiries under tag 9; without any it is
// written exactly as version 1 (what a binary from before reads).
TEST(StorageCodec, DeliveryWithLeaseExpiriesRoundTripsAndWithoutThemStaysVersionOne) {
  Event e = make_event("acme", "evt-1", 77, "{}");
  Delivery d = make_delivery(e, make_id(id_partition(e.seq), 3), 78, DeliveryStatus::kPending);
  std::string plain;
  encode_delivery(d, plain);
  EXPECT_EQ(static_cast<uint8_t>(plain[0]), kValueVersion);
  for (uint8_t n : {1, 7, 255}) {
    d.lease_expiries = n;
    std::string v;
    encode_delivery(d, v);
    EXPECT_EQ(static_cast<uint8_t>(v[0]), kDeliveryWithLeaseExpiries);
    EXPECT_EQ(v.size(), plain.size() + 1);
    auto back = decode_delivery(d.id, v);
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(back->lease_expiries, n);
    EXPECT_EQ(fields(*back), fields(d));
    expect_truncations_fail(v,
                            [&](std::string_view x) { return as_void(decode_delivery(d.id, x)); });
    // In an archived record too (the attempt that ended it follows the delivery's fields).
    Attempt last;
    last.delivery = d.id;
    last.number = 3;
    last.code = ErrorCode::of(ErrorCode::Kind::kLeaseExpired);
    std::string arch;
    encode_archived(d, last, arch);
    Delivery ad;
    std::optional<Attempt> al;
    ASSERT_TRUE(decode_archived(d.id, arch, ad, &al).ok());
    EXPECT_EQ(ad.lease_expiries, n);
    ASSERT_TRUE(al.has_value());
    EXPECT_EQ(al->number, 3u);
  }
}

TEST(StorageCodec, AttemptRoundTrip) {
  Attempt a = make_attempt(make_id(5, 9), 3, Outcome::kUnknown);
  a.code = ErrorCode::network(111);
  a.response_prefix.assign(kResponsePrefixBytes, 'r');
  std::string v;
  encode_attempt(a, v);
  const auto key = attempt_key(a.delivery, a.number);
  auto back = decode_attempt(key.view(), v);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(fields(*back), fields(a));
  expect_truncations_fail(
      v, [&](std::string_view x) { return as_void(decode_attempt(key.view(), x)); });
  fuzz(v, [&](std::string_view x) { return as_void(decode_attempt(key.view(), x)); });
  EXPECT_FALSE(decode_attempt("short", v).ok());
}

TEST(StorageCodec, EndpointRoundTrip) {
  Endpoint e = make_endpoint("acme", 4);
  std::string v;
  encode_endpoint(e, v);
  auto back = decode_endpoint(e.id, v);
  ASSERT_TRUE(back.ok());
  EXPECT_TRUE(same_endpoint(*back, e));
  expect_truncations_fail(v, [&](std::string_view x) { return as_void(decode_endpoint(e.id, x)); });
  fuzz(v, [&](std::string_view x) { return as_void(decode_endpoint(e.id, x)); });
  // A huge element count must not turn into a huge allocation.
  std::string huge;
  put_u8(huge, kValueVersion);
  put_bytes(huge, "acme");
  put_bytes(huge, "https://x");
  put_varint(huge, uint64_t{1} << 60);
  EXPECT_FALSE(decode_endpoint(e.id, huge).ok());
  // A rate the API never accepts decodes as corrupt, not into the scheduler's arithmetic.
  for (double bad : {std::nan(""), HUGE_VAL, -1.0}) {
    Endpoint b = e;
    b.rate_limit.per_second = bad;
    std::string bv;
    encode_endpoint(b, bv);
    auto r = decode_endpoint(b.id, bv);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.error().code, Errc::kCorruption);
  }
}

// Extra headers and the Idempotency-Key option round-trip under their own tag.
TEST(StorageCodec, EndpointWithHeadersRoundTrip) {
  Endpoint e = make_endpoint("acme", 5);
  e.headers = {{"X-Tenant", "acme"}, {"Authorization", "Bearer a\tb"}, {"X-Empty", ""}};
  e.idempotency_key = true;
  std::string v;
  encode_endpoint(e, v);
  ASSERT_FALSE(v.empty());
  EXPECT_EQ(static_cast<uint8_t>(v[0]), kEndpointWithHeaders);
  auto back = decode_endpoint(e.id, v);
  ASSERT_TRUE(back.ok());
  EXPECT_TRUE(same_endpoint(*back, e));
  EXPECT_EQ(back->headers, e.headers);  // the order kept
  EXPECT_TRUE(back->idempotency_key);
  expect_truncations_fail(v, [&](std::string_view x) { return as_void(decode_endpoint(e.id, x)); });
  fuzz(v, [&](std::string_view x) { return as_void(decode_endpoint(e.id, x)); });

  // Either field alone needs the new tag.
  for (int which = 0; which < 2; ++which) {
    Endpoint one = make_endpoint("acme", 6);
    if (which == 0) one.idempotency_key = true;
    if (which == 1) one.headers = {{"X-A", "1"}};
    std::string ov;
    encode_endpoint(one, ov);
    EXPECT_EQ(static_cast<uint8_t>(ov[0]), kEndpointWithHeaders) << which;
    auto ob = decode_endpoint(one.id, ov);
    ASSERT_TRUE(ob.ok()) << which;
    EXPECT_TRUE(same_endpoint(*ob, one)) << which;
  }
  // A header count above what the bytes can hold is corrupt, not a huge reserve.
  Endpoint plain = e;
  plain.headers.clear();
  std::string pv;
  encode_endpoint(plain, pv);  // flags byte, count 0 at the end
  ASSERT_EQ(pv.back(), 0);
  pv.pop_back();
  put_varint(pv, uint64_t{1} << 60);
  EXPECT_FALSE(decode_endpoint(e.id, pv).ok());
  // A flags byte other than 0/1 is corrupt.
  pv.clear();
  encode_endpoint(plain, pv);
  pv[pv.size() - 2] = 2;
  EXPECT_FALSE(decode_endpoint(e.id, pv).ok());
}

// A record written before extra headers existed (version 1, the layout by hand) decodes with no
// headers and the option off; an endpoint that uses neither is still written that way, so an
// older binary reads it.
TEST(StorageCodec, OldEndpointRecordDecodesWithoutHeaders) {
  std::string old;
  put_u8(old, kValueVersion);
  put_bytes(old, "acme");
  put_bytes(old, "https://hooks.example.com/old");
  put_varint(old, 1);
  put_bytes(old, "payment.*");
  put_bytes(old, "smengo");
  put_u8(old, static_cast<uint8_t>(SignatureProfile::kStandard));
  put_varint(old, 1);
  put_bytes(old, "key");
  put_zigzag(old, WallTime::max().ns());
  put_fixed64(old, std::bit_cast<uint64_t>(2.5));
  put_varint(old, 3);  // burst
  put_varint(old, 4);  // max_in_flight
  put_u8(old, 0);      // enabled
  put_u8(old, 0);      // disabled reason: kind none,
  put_zigzag(old, 0);  // detail 0
  put_zigzag(old, kT0.ns());
  put_zigzag(old, kT0.ns() + 1);
  auto e = decode_endpoint(77, old);
  ASSERT_TRUE(e.ok()) << e.error().message;
  EXPECT_EQ(e->url, "https://hooks.example.com/old");
  EXPECT_EQ(e->max_in_flight, 4u);
  EXPECT_EQ(e->updated_at.ns(), kT0.ns() + 1);
  EXPECT_TRUE(e->headers.empty());
  EXPECT_FALSE(e->idempotency_key);
  std::string again;
  encode_endpoint(*e, again);
  EXPECT_EQ(again, old);  // re-encoded byte for byte as version 1
}

TEST(StorageCodec, TenantEventKeyNotificationRoundTrip) {
  Tenant t{"acme", false, {BreakerSnapshot::State::kOpen, 3, kT0, kT0 + minutes(20)}, kT0, "",
           false,  {}};
  std::string v;
  encode_tenant(t, v);
  EXPECT_EQ(static_cast<uint8_t>(v[0]), kValueVersion);  // no settings: the version-1 bytes
  const std::string tk = tenant_key(t.name);
  auto tb = decode_tenant(tk, v);
  ASSERT_TRUE(tb.ok());
  EXPECT_EQ(fields(*tb), fields(t));
  expect_truncations_fail(v, [&](std::string_view x) { return as_void(decode_tenant(tk, x)); });
  fuzz(v, [&](std::string_view x) { return as_void(decode_tenant(tk, x)); });
  // The owner's e-mail address, whether it is confirmed and when a confirmation was asked for
  // (SPEC R8.4, R14) ride after the version-1 fields.
  t.owner_email = "owner@acme.example";
  t.owner_email_confirmed = false;
  t.owner_email_asked_at = kT0 + seconds(5);
  v.clear();
  encode_tenant(t, v);
  EXPECT_EQ(static_cast<uint8_t>(v[0]), kTenantWithConfirmation);
  tb = decode_tenant(tk, v);
  ASSERT_TRUE(tb.ok());
  EXPECT_EQ(fields(*tb), fields(t));
  expect_truncations_fail(v, [&](std::string_view x) { return as_void(decode_tenant(tk, x)); });
  fuzz(v, [&](std::string_view x) { return as_void(decode_tenant(tk, x)); });
  t.owner_email_confirmed = true;
  v.clear();
  encode_tenant(t, v);
  tb = decode_tenant(tk, v);
  ASSERT_TRUE(tb.ok());
  EXPECT_TRUE(tb->owner_email_confirmed);
  // A version-7 value (from before confirmation): its address reads back confirmed, as it
  // was trusted then.
  {
    // The version-7 layout: version-1 fields, then the address; rebuilt from the same record.
    Tenant plain = t;
    plain.owner_email.clear();
    plain.owner_email_asked_at = WallTime();
    std::string base;
    encode_tenant(plain, base);  // version 1
    base[0] = static_cast<char>(kTenantWithSettings);
    base.push_back(static_cast<char>(t.owner_email.size()));
    base += t.owner_email;
    auto t7 = decode_tenant(tk, base);
    ASSERT_TRUE(t7.ok()) << t7.error().message;
    EXPECT_EQ(t7->owner_email, t.owner_email);
    EXPECT_TRUE(t7->owner_email_confirmed);
    EXPECT_EQ(t7->owner_email_asked_at, WallTime());
  }

  EventKeyRecord k{make_id(9, 1234), 0xdeadbeefcafef00dULL, 3};
  v.clear();
  encode_event_key(k, v);
  auto kb = decode_event_key(v);
  ASSERT_TRUE(kb.ok());
  EXPECT_EQ(kb->seq, k.seq);
  EXPECT_EQ(kb->payload_hash, k.payload_hash);
  EXPECT_EQ(kb->deliveries, k.deliveries);
  EXPECT_TRUE(kb->message.empty());
  expect_truncations_fail(v, [&](std::string_view x) { return as_void(decode_event_key(x)); });
  // With the message id (the 202 and a repeat's 200 name it): its 16 bytes follow; a record
  // that ends before them (written before they were kept) still reads, with none.
  const size_t old_size = v.size();
  EventKeyRecord km = k;
  km.message = message_id_bits(make_message_id(kT0, 0xbeef, 0x0123456789abcdefULL));
  ASSERT_FALSE(km.message.empty());
  v.clear();
  encode_event_key(km, v);
  ASSERT_EQ(v.size(), old_size + 16);
  auto kmb = decode_event_key(v);
  ASSERT_TRUE(kmb.ok());
  EXPECT_EQ(kmb->message, km.message);
  EXPECT_EQ(message_id_of(kmb->message), make_message_id(kT0, 0xbeef, 0x0123456789abcdefULL));
  EXPECT_EQ(kmb->deliveries, k.deliveries);
  for (size_t cut = old_size + 1; cut < v.size(); ++cut) {
    EXPECT_FALSE(decode_event_key(std::string_view(v).substr(0, cut)).ok()) << cut;
  }

  Notification n{make_id(partition_of("acme"), 50),     "acme",
                 make_id(partition_of("acme"), 2),      "endpoint_disabled",
                 ErrorCode::of(ErrorCode::Kind::kGone), kT0,
                 "endpoint disabled: 410 Gone"};
  v.clear();
  encode_notification(n, v);
  const auto nk = notification_key(tenant_hash(n.tenant), n.seq);
  auto nb = decode_notification(nk.view(), v);
  ASSERT_TRUE(nb.ok());
  EXPECT_EQ(fields(*nb), fields(n));
  expect_truncations_fail(
      v, [&](std::string_view x) { return as_void(decode_notification(nk.view(), x)); });
  fuzz(v, [&](std::string_view x) { return as_void(decode_notification(nk.view(), x)); });

  // SPEC R8.4: with what the owner's e-mail needs, version 8; the version 1 value above still
  // decodes (with those fields empty).
  const std::string v1 = v;
  n.owner_email = "owner@shop.example";
  n.endpoint_url = "https://hooks.shop.example/in";
  n.trigger = make_id(partition_of("acme"), 3);
  n.attempts = 8;
  n.last_http_status = 503;
  v.clear();
  encode_notification(n, v);
  ASSERT_EQ(static_cast<uint8_t>(v[0]), kNotificationWithEmail);
  auto nv = decode_notification(nk.view(), v);
  ASSERT_TRUE(nv.ok());
  EXPECT_EQ(fields(*nv), fields(n));
  EXPECT_EQ(nv->owner_email, n.owner_email);
  EXPECT_EQ(nv->endpoint_url, n.endpoint_url);
  EXPECT_EQ(nv->trigger, n.trigger);
  EXPECT_EQ(nv->attempts, 8);
  EXPECT_EQ(nv->last_http_status, 503);
  expect_truncations_fail(
      v, [&](std::string_view x) { return as_void(decode_notification(nk.view(), x)); });
  fuzz(v, [&](std::string_view x) { return as_void(decode_notification(nk.view(), x)); });
  auto old = decode_notification(nk.view(), v1);
  ASSERT_TRUE(old.ok());
  EXPECT_TRUE(old->owner_email.empty());
  EXPECT_EQ(old->trigger, 0u);
}

TEST(StorageCodec, IdGroupRoundTripAndCorruption) {
  const Partition p = 7;
  const std::vector<uint64_t> ids = {make_id(p, 1), make_id(p, 2), make_id(p, 300),
                                     make_id(p, (uint64_t{1} << 48) - 1)};
  std::string v;
  encode_id_group(ids.data(), ids.size(), v);
  auto back = decode_id_group(p, v);
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(*back, ids);
  // Dense ids cost about one byte each after the first.
  EXPECT_LE(v.size(), 2u + 8u + 2u + 3u + 8u);

  EXPECT_FALSE(decode_id_group(8, v).ok());  // another partition's ids
  std::string trailing = v + "x";
  EXPECT_FALSE(decode_id_group(p, trailing).ok());
  for (size_t cut = 0; cut < v.size(); ++cut) {
    EXPECT_FALSE(decode_id_group(p, v.substr(0, cut)).ok()) << "cut at " << cut;
  }
  const std::vector<uint64_t> dup = {make_id(p, 5), make_id(p, 5)};
  std::string d;
  encode_id_group(dup.data(), dup.size(), d);
  EXPECT_FALSE(decode_id_group(p, d).ok());  // not strictly increasing
  std::string huge;
  huge.push_back(1);
  put_varint(huge, uint64_t{1} << 40);  // a count the value cannot hold
  EXPECT_FALSE(decode_id_group(p, huge).ok());
}

TEST(StorageCodec, KeysSortByPartitionThenNewestFirst) {
  // Index keys: a newer delivery (higher id) sorts first within a tenant.
  const uint64_t th = tenant_hash("acme");
  const Partition p = partition_of("acme");
  EXPECT_LT(tenant_index_key(th, make_id(p, 10)).view(),
            tenant_index_key(th, make_id(p, 9)).view());
  EXPECT_LT(id_key(make_id(1, 999)).view(), id_key(make_id(2, 0)).view());
  EXPECT_EQ(tenant_key("acme").substr(0, 2),
            std::string(id_key(make_id(p, 0)).view().substr(0, 2)));
  // The idempotency key cannot be confused across tenant/id splits.
  EXPECT_NE(idempotency_key("ab", "c"), idempotency_key("a", "bc"));
}

TEST(StorageCodec, CursorRoundTripAndGarbage) {
  auto c = encode_cursor(make_id(7, 123456));
  auto back = decode_cursor(c);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, make_id(7, 123456));
  for (std::string_view bad :
       {"", "x", "d1", "d10000000000000000z", "e1000000000000000000", "d1000000000000000G"}) {
    auto r = decode_cursor(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.error().code, Errc::kInvalidArgument);
  }
}

}  // namespace
}  // namespace ringcast::storage::test

namespace ringcast::storage::test {
namespace {

// SPEC R13: the event's ordering key in both event forms, the endpoint's ordering settings and
// the delivery's order key under their own tags; a record without them keeps its older tag.
TEST(StorageCodec, OrderingFieldsRoundTripUnderTheirOwnTags) {
  Event e = make_event("acme", "evt-1", 77, "{\"a\":1}");
  e.payload_hash = payload_hash(e.payload);
  e.message_id = make_message_id(e.created_at, 7, 9);
  e.ordering_key = "order 42";
  std::string inl;
  encode_event_inline(e, inl);
  EXPECT_EQ(static_cast<uint8_t>(inl[0]), kEventInlineWithOrderingKey);
  auto back = decode_event(e.seq, inl);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->ordering_key, "order 42");
  EXPECT_EQ(back->payload, e.payload);
  expect_truncations_fail(inl, [&](std::string_view x) { return as_void(decode_event(e.seq, x)); });
  const PayloadRef ref{3, 1 << 20, 9};
  std::string logged;
  encode_event_logged(e, ref, logged);
  EXPECT_EQ(static_cast<uint8_t>(logged[0]), kEventInLogWithOrderingKey);
  auto lb = decode_stored_event(e.seq, logged);
  ASSERT_TRUE(lb.ok());
  EXPECT_EQ(lb->event.ordering_key, "order 42");
  EXPECT_EQ(lb->event.message_id, e.message_id);
  ASSERT_TRUE(lb->ref.has_value());
  EXPECT_EQ(*lb->ref, ref);
  e.ordering_key.clear();
  std::string plain;
  encode_event_inline(e, plain);
  EXPECT_EQ(static_cast<uint8_t>(plain[0]), kEventInlineWithMessageId);

  Delivery d = make_delivery(e, make_id(id_partition(e.seq), 3), 78, DeliveryStatus::kSuperseded);
  d.set_order_key(ordering_key_hash("order 42"));
  d.flags |= Delivery::kFlagKeyBlocked;
  std::string dv;
  encode_delivery(d, dv);
  EXPECT_EQ(static_cast<uint8_t>(dv[0]), kDeliveryWithOrderKey);
  auto db = decode_delivery(d.id, dv);
  ASSERT_TRUE(db.ok());
  EXPECT_EQ(db->order_key(), ordering_key_hash("order 42"));
  EXPECT_EQ(db->status, DeliveryStatus::kSuperseded);
  EXPECT_TRUE(db->flags & Delivery::kFlagKeyBlocked);
  EXPECT_EQ(fields(*db), fields(d));
  expect_truncations_fail(dv,
                          [&](std::string_view x) { return as_void(decode_delivery(d.id, x)); });
  EXPECT_NE(ordering_key_hash("a"), ordering_key_hash("b"));
  EXPECT_GT(ordering_key_hash(""), kEndpointOrderKey);
  EXPECT_EQ(ordering_key_hash("a") & ~kOrderKeyMask, 0u);

  Endpoint ep = make_endpoint("acme", 4);
  ep.ordering = Ordering::kPerKey;
  ep.on_head_failure = OnHeadFailure::kSkip;
  ep.supersede = true;
  std::string ev;
  encode_endpoint(ep, ev);
  EXPECT_EQ(static_cast<uint8_t>(ev[0]), kEndpointWithOrdering);
  auto eb = decode_endpoint(ep.id, ev);
  ASSERT_TRUE(eb.ok());
  EXPECT_EQ(eb->ordering, Ordering::kPerKey);
  EXPECT_EQ(eb->on_head_failure, OnHeadFailure::kSkip);
  EXPECT_TRUE(eb->supersede);
  EXPECT_TRUE(same_endpoint(*eb, ep));
  expect_truncations_fail(ev,
                          [&](std::string_view x) { return as_void(decode_endpoint(ep.id, x)); });
  ep.ordering = Ordering::kNone;
  ep.on_head_failure = OnHeadFailure::kBlock;
  ep.supersede = false;
  std::string ev2;
  encode_endpoint(ep, ev2);
  EXPECT_NE(static_cast<uint8_t>(ev2[0]), kEndpointWithOrdering);
}

}  // namespace
}  // namespace ringcast::storage::test
