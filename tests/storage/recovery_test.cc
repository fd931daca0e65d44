// Recovery (SPEC R6 lease_expired, R12.2): non-terminal deliveries come back, an open lease becomes
// exactly one lease_expired attempt (also across a second restart), ids are never reused, and
// partitions do not leak into each other.
#include <gtest/gtest.h>

#include <algorithm>

#include "storage/rocks_store.h"
#include "tests/storage/store_test_util.h"

namespace ringcast::storage::test {
namespace {

int count_code(const std::vector<Attempt>& as, ErrorCode::Kind k) {
  return static_cast<int>(
      std::count_if(as.begin(), as.end(), [&](const Attempt& a) { return a.code.kind == k; }));
}

TEST(StoreRecovery, InFlightLeaseBecomesExactlyOneLeaseExpiredAttempt) {
  ringcast::test::TempDir dir("ringcast-recovery");
  const std::string tenant = "acme";
  const Partition p = partition_of(tenant);
  Event ev = make_event(tenant, "e1", 10, "{}");
  // a: in flight on its 3rd attempt (2 recorded); b: in flight, engine bumped attempts only on
  // completion (attempts == last recorded); c: pending; d: terminal (not streamed).
  Delivery a = make_delivery(ev, make_id(p, 1), 11, DeliveryStatus::kInFlight);
  a.attempts = 3;
  Delivery b = make_delivery(ev, make_id(p, 1), 12, DeliveryStatus::kInFlight);
  b.attempts = 1;
  Delivery c = make_delivery(ev, make_id(p, 2), 13, DeliveryStatus::kPending);
  Delivery d = make_delivery(ev, make_id(p, 2), 14, DeliveryStatus::kDelivered);
  {
    auto s = open_store(options_for(dir.path()));
    ASSERT_NE(s, nullptr);
    Mutations m;
    m.events.push_back(ev);
    for (auto* x : {&a, &b, &c, &d}) m.deliveries.push_back(put_new(*x, tenant));
    m.attempts = {make_attempt(a.id, 1), make_attempt(a.id, 2), make_attempt(b.id, 1)};
    write_durable(*s, m);
  }
  const WallTime restart = kT0 + hours(1);
  {
    auto s = open_store(options_for(dir.path()));
    ASSERT_NE(s, nullptr);
    CollectingVisitor v;
    auto st = s->recover(p, restart, v);
    ASSERT_TRUE(st.ok());
    EXPECT_EQ(st->leases_expired, 2u);
    EXPECT_EQ(st->pending, 3u);
    ASSERT_EQ(v.deliveries.size(), 3u);  // key order: a, b, c
    EXPECT_EQ(v.deliveries[0].id, a.id);
    EXPECT_EQ(v.deliveries[1].id, b.id);
    EXPECT_EQ(v.deliveries[2].id, c.id);
    for (int i = 0; i < 2; ++i) {
      const Delivery& r = v.deliveries[i];
      EXPECT_EQ(r.status, DeliveryStatus::kPending);
      EXPECT_EQ(r.next_attempt_at, restart);  // retried at once, with the same id
      EXPECT_EQ(r.last_code.kind, ErrorCode::Kind::kLeaseExpired);
    }
    EXPECT_EQ(v.deliveries[0].attempts, 3);
    EXPECT_EQ(v.deliveries[1].attempts, 2);
    EXPECT_EQ(fields(v.deliveries[2]), fields(c));

    auto da = s->get_delivery(a.id);
    ASSERT_TRUE(da.ok() && da->has_value());
    ASSERT_EQ((*da)->attempts.size(), 3u);
    const Attempt& lease = (*da)->attempts[2];
    EXPECT_EQ(lease.number, 3);
    EXPECT_EQ(lease.code.str(), "lease_expired");
    EXPECT_EQ(lease.outcome, Outcome::kUnknown);  // the receiver may have acted
    EXPECT_EQ(lease.started_at, restart);
    auto db = s->get_delivery(b.id);
    ASSERT_TRUE(db.ok() && db->has_value());
    ASSERT_EQ((*db)->attempts.size(), 2u);  // the recorded #1 is not overwritten
    EXPECT_EQ((*db)->attempts[0].code.kind, ErrorCode::Kind::kHttp);
    EXPECT_EQ((*db)->attempts[1].number, 2);
    EXPECT_EQ((*db)->attempts[1].code.kind, ErrorCode::Kind::kLeaseExpired);
  }
  // Second restart (nothing happened in between): no second lease_expired.
  {
    auto s = open_store(options_for(dir.path()));
    ASSERT_NE(s, nullptr);
    CollectingVisitor v;
    auto st = s->recover(p, restart + hours(1), v);
    ASSERT_TRUE(st.ok());
    EXPECT_EQ(st->leases_expired, 0u);
    EXPECT_EQ(st->pending, 3u);
    for (DeliveryId id : {a.id, b.id}) {
      auto det = s->get_delivery(id);
      ASSERT_TRUE(det.ok() && det->has_value());
      EXPECT_EQ(count_code((*det)->attempts, ErrorCode::Kind::kLeaseExpired), 1);
      EXPECT_EQ((*det)->delivery.next_attempt_at, restart);
    }
  }
}

TEST(StoreRecovery, PartitionsAreSeparateAndNextSequenceCoversEveryKind) {
  ringcast::test::TempDir dir("ringcast-recovery");
  // Two tenants in different partitions.
  std::string t1 = "tenant-a", t2 = "tenant-b";
  for (int i = 0; partition_of(t1) == partition_of(t2); ++i) t2 = "tenant-b" + std::to_string(i);
  const Partition p1 = partition_of(t1), p2 = partition_of(t2);
  auto s = open_store(options_for(dir.path()));
  ASSERT_NE(s, nullptr);
  Mutations m;
  Event e1 = make_event(t1, "x", 50, "{}");
  m.events.push_back(e1);
  m.deliveries.push_back(put_new(make_delivery(e1, make_id(p1, 1), 51), t1));
  m.endpoints.push_back(make_endpoint(t1, 1));
  m.endpoints.push_back(make_endpoint(t2, 700));  // the newest id of p2 is an endpoint
  m.notifications.push_back({make_id(p1, 90), t1, 0, "k", {}, kT0, ""});  // newest of p1
  m.tenants.push_back({t1, true, {}, kT0, "", false, {}});
  m.tenants.push_back({t2, true, {}, kT0, "", false, {}});
  write_durable(*s, m);

  CollectingVisitor v1, v2;
  auto s1 = s->recover(p1, kT0, v1);
  auto s2 = s->recover(p2, kT0, v2);
  ASSERT_TRUE(s1.ok() && s2.ok());
  EXPECT_EQ(s1->next_sequence, 91u);
  EXPECT_EQ(s2->next_sequence, 701u);
  EXPECT_EQ(v1.deliveries.size(), 1u);
  EXPECT_EQ(v2.deliveries.size(), 0u);
  ASSERT_EQ(v1.tenants.size(), 1u);
  EXPECT_EQ(v1.tenants[0].name, t1);
  ASSERT_EQ(v2.endpoints.size(), 1u);
  EXPECT_EQ(v2.endpoints[0].id, make_id(p2, 700));

  // Deleting the newest endpoint does not let its id come back.
  Mutations del;
  del.endpoint_deletes.push_back(make_id(p2, 700));
  write_durable(*s, del);
  CollectingVisitor v3;
  auto s3 = s->recover(p2, kT0, v3);
  ASSERT_TRUE(s3.ok());
  EXPECT_TRUE(v3.endpoints.empty());
  EXPECT_EQ(s3->next_sequence, 701u);
  // An empty partition starts at 1.
  CollectingVisitor v4;
  Partition empty = 0;
  while (empty == p1 || empty == p2) ++empty;
  auto s4 = s->recover(empty, kT0, v4);
  ASSERT_TRUE(s4.ok());
  EXPECT_EQ(s4->next_sequence, 1u);
}

TEST(StoreRecovery, TerminalDeliveriesLeaveTheRecoveryScan) {
  ringcast::test::TempDir dir("ringcast-recovery");
  const std::string tenant = "acme";
  const Partition p = partition_of(tenant);
  auto s = open_store(options_for(dir.path()));
  ASSERT_NE(s, nullptr);
  Event ev = make_event(tenant, "e", 1, "{}");
  std::vector<Delivery> ds;
  Mutations m;
  m.events.push_back(ev);
  for (int i = 0; i < 100; ++i) {
    ds.push_back(make_delivery(ev, make_id(p, 1), 10 + i));
    m.deliveries.push_back(put_new(ds.back(), tenant));
  }
  write_durable(*s, m);
  Mutations done;
  for (int i = 0; i < 100; i += 2) {
    ds[i].status = (i % 4 == 0) ? DeliveryStatus::kDelivered : DeliveryStatus::kDead;
    done.deliveries.push_back(put_update(ds[i]));
  }
  write_durable(*s, done);
  ASSERT_TRUE(s->flush(true).ok());
  CollectingVisitor v;
  auto st = s->recover(p, kT0, v);
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(v.deliveries.size(), 50u);
  for (const auto& d : v.deliveries) EXPECT_FALSE(is_terminal(d.status));
  EXPECT_EQ(st->next_sequence, 110u);
  // The terminal ones are still readable from the log.
  auto d0 = s->get_delivery(ds[0].id);
  ASSERT_TRUE(d0.ok() && d0->has_value());
  EXPECT_EQ((*d0)->delivery.status, DeliveryStatus::kDelivered);
}

}  // namespace
}  // namespace ringcast::storage::test
