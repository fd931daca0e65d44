// Retention (SPEC R10.1) with an injected wall clock: what became terminal more than the window ago
// disappears with its attempts, index entries and (once unreferenced) its event; nothing younger
// and nothing non-terminal is touched; the store stays bounded over time.
#include <gtest/gtest.h>

#include "storage/rocks_store.h"
#include "tests/storage/store_test_util.h"

namespace ringcast::storage::test {
namespace {

class RetentionTest : public ::testing::Test {
 protected:
  void SetUp() override { store_ = open_store(opts()); }
  // Durability is not what these tests are about: kNone keeps them fast.
  StoreOptions opts() {
    auto o = options_for(dir_.path(), &clock_, SyncPolicy::kNone);
    o.retention = days(30);
    return o;
  }
  // One event with `n` deliveries, each with two attempts, written at the clock's now.
  std::pair<Event, std::vector<Delivery>> intake(const std::string& id, int n,
                                                 DeliveryStatus status) {
    Event ev = make_event(tenant_, id, next_++, "{\"id\":\"" + id + "\"}", clock_.wall_now());
    std::vector<Delivery> ds;
    Mutations m;
    m.events.push_back(ev);
    for (int i = 0; i < n; ++i) {
      Delivery d = make_delivery(ev, make_id(p_, 1 + i % 2), next_++, status);
      ds.push_back(d);
      m.deliveries.push_back(put_new(d, tenant_));
      m.attempts.push_back(make_attempt(d.id, 1, Outcome::kRetryable, clock_.wall_now()));
      m.attempts.push_back(make_attempt(d.id, 2, Outcome::kSuccess, clock_.wall_now()));
    }
    write_durable(*store_, m);
    return {ev, ds};
  }
  void finish(std::vector<Delivery>& ds, DeliveryStatus status) {
    Mutations m;
    for (auto& d : ds) {
      d.status = status;
      m.deliveries.push_back(put_update(d));
    }
    write_durable(*store_, m);
  }
  bool exists(DeliveryId id) {
    auto d = store_->get_delivery(id);
    EXPECT_TRUE(d.ok());
    return d.ok() && d->has_value();
  }
  bool event_exists(const Event& e) {
    auto x = store_->find_event(tenant_, e.id);
    EXPECT_TRUE(x.ok());
    return x.ok() && x->has_value();
  }
  size_t listed() {
    auto page = store_->list_deliveries(tenant_, std::nullopt, std::nullopt, 1000, "");
    EXPECT_TRUE(page.ok());
    return page.ok() ? page->items.size() : 0;
  }

  ManualClock clock_;
  ringcast::test::TempDir dir_{"ringcast-retention"};
  std::unique_ptr<RocksStore> store_;
  std::string tenant_ = "acme";
  Partition p_ = partition_of(tenant_);
  uint64_t next_ = 10;
};

TEST_F(RetentionTest, DeletesOlderThanTheWindowAndNothingYounger) {
  ASSERT_NE(store_, nullptr);
  auto [old_ev, old_ds] = intake("old", 3, DeliveryStatus::kDelivered);
  auto [lonely_ev, none] = intake("no-endpoints", 0, DeliveryStatus::kPending);
  clock_.advance(days(10));
  auto [young_ev, young_ds] = intake("young", 2, DeliveryStatus::kFailed);
  Mutations notes;
  notes.notifications.push_back(
      {make_id(p_, 5000), tenant_, 0, "endpoint_disabled", {}, clock_.wall_now(), "n"});
  write_durable(*store_, notes);
  EXPECT_EQ(listed(), 5u);

  // 29 days after the first intake: nothing is old enough yet.
  clock_.advance(days(19));
  auto r = store_->run_retention(clock_.wall_now(), {});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->deliveries, 0u);
  EXPECT_TRUE(exists(old_ds[0].id));

  // Day 31: the first intake goes (deliveries, their attempts, index entries, events, keys).
  clock_.advance(days(2));
  r = store_->run_retention(clock_.wall_now(), {});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->deliveries, 3u);
  EXPECT_EQ(r->attempts, 6u);
  EXPECT_EQ(r->events, 2u);
  EXPECT_EQ(r->notifications, 0u);
  for (const auto& d : old_ds) EXPECT_FALSE(exists(d.id));
  EXPECT_FALSE(event_exists(old_ev));
  EXPECT_FALSE(event_exists(lonely_ev));
  EXPECT_FALSE(store_->find_event_key(tenant_, "old")->has_value());
  for (const auto& d : young_ds) EXPECT_TRUE(exists(d.id));
  EXPECT_TRUE(event_exists(young_ev));
  EXPECT_EQ(listed(), 2u);
  auto recent = store_->recent_deliveries(tenant_, 25);
  ASSERT_TRUE(recent.ok());
  EXPECT_EQ(recent->size(), 2u);
  auto young_detail = store_->get_delivery(young_ds[0].id);
  ASSERT_TRUE(young_detail.ok() && young_detail->has_value());
  EXPECT_EQ((*young_detail)->attempts.size(), 2u);

  // Running again changes nothing; day 41 takes the rest.
  r = store_->run_retention(clock_.wall_now(), {});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->deliveries + r->events, 0u);
  clock_.advance(days(10));
  r = store_->run_retention(clock_.wall_now(), {});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->deliveries, 2u);
  EXPECT_EQ(r->events, 1u);
  EXPECT_EQ(r->notifications, 1u);
  EXPECT_EQ(listed(), 0u);
  EXPECT_TRUE(store_->list_notifications(tenant_, 10)->empty());

  // Ids removed by retention are never handed out again.
  ringcast::storage::test::CollectingVisitor v;
  auto st = store_->recover(p_, clock_.wall_now(), v);
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->next_sequence, 5001u);
}

TEST_F(RetentionTest, NonTerminalDeliveriesAndTheirEventsAreNeverDeleted) {
  ASSERT_NE(store_, nullptr);
  // Held by the breaker for weeks: pending the whole time.
  auto [held_ev, held_ds] = intake("held", 2, DeliveryStatus::kPending);
  // One terminal, one pending delivery of the same event.
  auto [mixed_ev, mixed_ds] = intake("mixed", 2, DeliveryStatus::kPending);
  std::vector<Delivery> first = {mixed_ds[0]};
  finish(first, DeliveryStatus::kDead);

  clock_.advance(days(45));
  auto r = store_->run_retention(clock_.wall_now(), {});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->deliveries, 1u);  // only the dead one
  EXPECT_FALSE(exists(mixed_ds[0].id));
  EXPECT_TRUE(exists(mixed_ds[1].id));
  for (const auto& d : held_ds) EXPECT_TRUE(exists(d.id));
  EXPECT_TRUE(event_exists(held_ev));   // still referenced
  EXPECT_TRUE(event_exists(mixed_ev));  // one delivery left
  auto det = store_->get_delivery(held_ds[0].id);
  ASSERT_TRUE(det.ok() && det->has_value());
  EXPECT_EQ((*det)->attempts.size(), 2u);  // history of a live delivery stays

  // The pending ones finish on day 50: they are kept 30 days from then, not from creation.
  clock_.advance(days(5));
  finish(held_ds, DeliveryStatus::kFailed);
  std::vector<Delivery> second = {mixed_ds[1]};
  finish(second, DeliveryStatus::kDelivered);
  clock_.advance(days(29));
  r = store_->run_retention(clock_.wall_now(), {});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->deliveries, 0u);
  EXPECT_TRUE(event_exists(held_ev));
  clock_.advance(days(2));
  r = store_->run_retention(clock_.wall_now(), {});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->deliveries, 3u);
  EXPECT_EQ(r->events, 2u);
  EXPECT_FALSE(event_exists(held_ev));
  EXPECT_FALSE(event_exists(mixed_ev));
}

// A pass asked to stop returns between chunks (so a daemon's shutdown does not wait for a long
// pass) and the next pass deletes what is left: nothing is skipped, nothing deleted twice.
TEST_F(RetentionTest, AStoppedPassEndsBetweenChunksAndTheNextOneFinishes) {
  ASSERT_NE(store_, nullptr);
  constexpr int kWrites = 6, kPerWrite = 200;  // more ids than one chunk (512)
  std::vector<DeliveryId> ids;
  for (int w = 0; w < kWrites; ++w) {
    auto [ev, ds] = intake("bulk-" + std::to_string(w), kPerWrite, DeliveryStatus::kDelivered);
    for (const auto& d : ds) ids.push_back(d.id);
  }
  clock_.advance(days(31));

  // Asked before every chunk with work: the first goes through, the second is refused.
  int asked = 0;
  auto r = store_->run_retention(clock_.wall_now(), [&asked] { return ++asked > 1; });
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->stopped);
  EXPECT_EQ(asked, 2);
  EXPECT_GT(r->deliveries, 0u);
  EXPECT_LT(r->deliveries, ids.size());
  const uint64_t first = r->deliveries;
  EXPECT_EQ(listed(), ids.size() - first);

  // Stopped at once: nothing is done.
  r = store_->run_retention(clock_.wall_now(), [] { return true; });
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->stopped);
  EXPECT_EQ(r->deliveries + r->events + r->expiry_entries, 0u);

  r = store_->run_retention(clock_.wall_now(), {});
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->stopped);
  EXPECT_EQ(first + r->deliveries, ids.size());
  EXPECT_EQ(listed(), 0u);
  for (DeliveryId id : ids) EXPECT_FALSE(exists(id));
}

TEST_F(RetentionTest, SurvivesReopenAndStaysBoundedUnderSteadyLoad) {
  ASSERT_NE(store_, nullptr);
  // 45 simulated days, 5 events x 2 deliveries a day, delivered at once; retention daily,
  // a restart every 15 days (the retention progress is in memory only).
  size_t max_listed = 0;
  for (int day = 0; day < 45; ++day) {
    for (int i = 0; i < 5; ++i) {
      auto [ev, ds] =
          intake("d" + std::to_string(day) + "-" + std::to_string(i), 2, DeliveryStatus::kPending);
      finish(ds, DeliveryStatus::kDelivered);
    }
    clock_.advance(days(1));
    auto r = store_->run_retention(clock_.wall_now(), {});
    ASSERT_TRUE(r.ok());
    max_listed = std::max(max_listed, listed());
    if (day % 15 == 14) {
      store_.reset();
      store_ = open_store(opts());
      ASSERT_NE(store_, nullptr);
    }
  }
  // At most 31 days of deliveries are ever kept (the window plus the day in progress).
  EXPECT_LE(max_listed, 31u * 10u);
  EXPECT_GE(listed(), 29u * 10u);
  EXPECT_TRUE(store_->find_event_key(tenant_, "d44-0")->has_value());
  EXPECT_TRUE(store_->find_event_key(tenant_, "d15-4")->has_value());
  EXPECT_FALSE(store_->find_event_key(tenant_, "d14-0")->has_value());
}

}  // namespace
}  // namespace ringcast::storage::test
