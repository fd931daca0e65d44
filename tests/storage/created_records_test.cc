// Created records (docs/storage-schema.md "Created records"): a delivery is stored once when it
// is created, in deliveries_created; deliveries_active holds only the later states of those that
// need one (a retry, a lease under `always`), so a delivery whose first attempt ends it leaves no
// tombstone there. Recovery finds the created-only ones from each partition's floor; one that
// waits too long is written into deliveries_active so that the floor can rise past it.
#include "storage/created_only.h"

#include <gtest/gtest.h>
#include <rocksdb/db.h>

#include <algorithm>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "storage/codec.h"
#include "storage/rocks_store.h"
#include "tests/storage/store_test_util.h"

namespace ringcast::storage::test {
namespace {

TEST(CreatedOnlySet, TracksAddsAndTakesAndWritesAFloorOnlyWhenItIsSafe) {
  CreatedOnly set;
  const Partition p = 7;
  for (uint64_t s = 100; s < 200; ++s) EXPECT_TRUE(set.add(make_id(p, s)));
  EXPECT_FALSE(set.add(make_id(p, 150))) << "already there";
  EXPECT_EQ(set.size(), 100u);
  for (uint64_t s = 100; s < 150; ++s) EXPECT_TRUE(set.take(make_id(p, s)));
  EXPECT_FALSE(set.take(make_id(p, 120))) << "taken already";
  EXPECT_FALSE(set.take(make_id(p, 99))) << "never added";
  EXPECT_FALSE(set.take(make_id(p + 1, 160))) << "another partition";
  EXPECT_TRUE(set.contains(make_id(p, 160)));
  EXPECT_FALSE(set.contains(make_id(p, 140)));

  set.begin_batch(p);
  EXPECT_EQ(set.floor_due(p, 16), 0u) << "not recovered here: the set may not know every one";
  set.end_batch(p);
  set.recovered(p, 40);
  set.begin_batch(p);
  EXPECT_EQ(set.floor_due(p, 16), 150u);
  set.begin_batch(p);
  EXPECT_EQ(set.floor_due(p, 16), 0u) << "another batch of p is still being committed";
  set.end_batch(p);
  set.floor_written(p, 150);
  EXPECT_EQ(set.floor_due(p, 16), 0u) << "not risen by a step since";
  for (uint64_t s = 150; s < 200; ++s) EXPECT_TRUE(set.take(make_id(p, s)));
  EXPECT_EQ(set.floor_due(p, 16), 200u) << "empty: the floor is past the newest created";
  set.end_batch(p);

  EXPECT_TRUE(set.add(make_id(p, 300)));
  EXPECT_TRUE(set.add(make_id(p, 1300)));
  EXPECT_TRUE(set.add(make_id(p, 1301)));
  EXPECT_EQ(set.oldest_beyond(p, 5000, 10), std::vector<DeliveryId>{});
  EXPECT_EQ(set.oldest_beyond(p, 500, 2),
            (std::vector<DeliveryId>{make_id(p, 300), make_id(p, 1300)}));
  EXPECT_TRUE(set.add(make_id(p, 10))) << "below the window: it grows downwards";
  EXPECT_EQ(set.oldest_beyond(p, 500, 1), std::vector<DeliveryId>{make_id(p, 10)});
  EXPECT_EQ(set.size(), 4u);
}

// Store-level fixture: one tenant, one event, deliveries created in one batch.
class CreatedRecords : public ::testing::Test {
 protected:
  const std::string tenant_ = "acme";
  const Partition p_ = partition_of("acme");
  ringcast::test::TempDir dir_{"ringcast-created"};
  std::string path_ = dir_.file("db");

  Event event(uint64_t seq) { return make_event(tenant_, "evt-" + std::to_string(seq), seq, "{}"); }
  // n new deliveries of one new event, as intake writes them (created, pending, no attempt).
  std::vector<Delivery> create(RocksStore& store, uint64_t event_seq, uint64_t n) {
    auto [m, ds] = created_batch(tenant_, event_seq, n, make_id(p_, 1));
    write_durable(store, m);
    return ds;
  }
  // ds[from, to) leased, then their first attempts succeeded: two batches, as a shard writes
  // them.
  void deliver(RocksStore& store, std::vector<Delivery>& ds, size_t from, size_t to) {
    Mutations lease, result;
    for (size_t i = from; i < to; ++i) {
      Delivery& d = ds[i];
      d.status = DeliveryStatus::kInFlight;
      d.attempts = d.fast_attempts = 1;
      lease.deliveries.push_back(put_update(d));
      d.status = DeliveryStatus::kDelivered;
      result.deliveries.push_back(put_update(d));
      result.attempts.push_back(make_attempt(d.id, 1, Outcome::kSuccess));
    }
    write_durable(store, lease);
    write_durable(store, result);
  }
  // ds[from, to): their first attempts failed; they wait for a retry (a state of their own, in
  // deliveries_active).
  void fail_once(RocksStore& store, std::vector<Delivery>& ds, size_t from, size_t to) {
    Mutations m;
    for (size_t i = from; i < to; ++i) {
      Delivery& d = ds[i];
      d.status = DeliveryStatus::kPending;
      d.attempts = d.fast_attempts = 1;
      m.deliveries.push_back(put_update(d));
      m.attempts.push_back(make_attempt(d.id, 1));
    }
    write_durable(store, m);
  }
  std::set<DeliveryId> recovered_ids(RocksStore& store) { return test::recovered_ids(store, p_); }
};

TEST_F(CreatedRecords, AFirstAttemptThatEndsADeliveryLeavesNoTombstoneInDeliveriesActive) {
  {
    auto store = open_store(options_for(path_));
    ASSERT_NE(store, nullptr);
    std::vector<Delivery> ds = create(*store, 1000, 20);
    EXPECT_EQ(store->created_only(), 20u);
    deliver(*store, ds, 0, 10);
    fail_once(*store, ds, 10, 15);
    for (size_t i = 10; i < 15; ++i) {
      Delivery& d = ds[i];
      Mutations end;
      d.status = DeliveryStatus::kDelivered;
      d.attempts = d.fast_attempts = 2;
      end.deliveries.push_back(put_update(d));
      end.attempts.push_back(make_attempt(d.id, 2, Outcome::kSuccess));
      write_durable(*store, end);
    }
    EXPECT_EQ(store->created_only(), 5u);
    auto det = store->get_delivery(ds[17].id);
    ASSERT_TRUE(det.ok() && det->has_value());
    EXPECT_EQ((*det)->delivery.status, DeliveryStatus::kPending) << "read from its created record";
    det = store->get_delivery(ds[3].id);
    ASSERT_TRUE(det.ok() && det->has_value());
    EXPECT_EQ((*det)->delivery.status, DeliveryStatus::kDelivered);
    auto page = store->list_deliveries(tenant_, std::nullopt, DeliveryStatus::kPending, 50, "");
    ASSERT_TRUE(page.ok());
    EXPECT_EQ(page->items.size(), 5u);
  }
  RawDb raw(path_, true);  // the WAL replayed into memtables: every write of the run is there
  ASSERT_NE(raw.db, nullptr);
  uint64_t deletes = 0, entries = 0, created = 0;
  ASSERT_TRUE(raw.db->GetIntProperty(raw.handles[kCfActive], "rocksdb.num-deletes-active-mem-table",
                                     &deletes));
  ASSERT_TRUE(raw.db->GetIntProperty(raw.handles[kCfActive], "rocksdb.num-entries-active-mem-table",
                                     &entries));
  ASSERT_TRUE(raw.db->GetIntProperty(raw.handles[kCfCreated],
                                     "rocksdb.num-entries-active-mem-table", &created));
  EXPECT_EQ(deletes, 5u) << "only the five that waited for a retry had an active record";
  EXPECT_EQ(entries, 10u) << "their retry state and its tombstone";
  EXPECT_EQ(created, 20u) << "every delivery once, when created";
}

TEST_F(CreatedRecords, RecoveryFindsTheCreatedOnlyAndTheRetryingFromTheFloorOn) {
  std::set<DeliveryId> waiting;
  uint64_t first = 0;
  {
    auto store = open_store(options_for(path_));
    ASSERT_NE(store, nullptr);
    EXPECT_TRUE(recovered_ids(*store).empty());  // recovered here: the set knows the partition
    std::vector<Delivery> ds = create(*store, 1000, 600);
    first = ds.front().id;
    deliver(*store, ds, 0, 250);
    deliver(*store, ds, 250, 500);
    fail_once(*store, ds, 500, 550);
    for (size_t i = 500; i < 600; ++i) waiting.insert(ds[i].id);
    EXPECT_EQ(store->created_only(), 50u);
  }
  uint64_t floor = 0;
  {
    RawDb raw(path_, false);
    ASSERT_NE(raw.db, nullptr);
    std::string v;
    const auto key = created_floor_key(p_);
    ASSERT_TRUE(raw.db
                    ->Get(rocksdb::ReadOptions(), raw.handles[kCfMeta],
                          rocksdb::Slice(key.data, sizeof key.data), &v)
                    .ok());
    Reader r(v);
    floor = r.fixed64();
    EXPECT_GT(floor, id_sequence(first) + 255) << "the floor rose with the ended deliveries";
    EXPECT_LE(floor, id_sequence(first) + 500) << "never past one that has not ended";
    // A corrupt created record below the floor is never read by recovery (its delivery ended:
    // reads find its archive record first); the scan starts at the floor.
    const auto below = id_key(first + 10);
    ASSERT_TRUE(raw.db
                    ->Put(rocksdb::WriteOptions(), raw.handles[kCfCreated],
                          rocksdb::Slice(below.data, sizeof below.data), "\x01\xff")
                    .ok());
  }
  for (int round = 0; round < 2; ++round) {  // the second start finds the same
    auto store = open_store(options_for(path_));
    ASSERT_NE(store, nullptr);
    EXPECT_EQ(recovered_ids(*store), waiting);
    EXPECT_EQ(store->created_only(), 50u);
  }
  {
    RawDb raw(path_, false);
    const auto above = id_key(make_id(p_, floor + 5000));  // no other record of it
    ASSERT_TRUE(raw.db
                    ->Put(rocksdb::WriteOptions(), raw.handles[kCfCreated],
                          rocksdb::Slice(above.data, sizeof above.data), "\x01\xff")
                    .ok());
  }
  auto store = open_store(options_for(path_));
  ASSERT_NE(store, nullptr);
  CollectingVisitor v;
  auto st = store->recover(p_, kT0, v);
  ASSERT_FALSE(st.ok()) << "a corrupt created record above the floor is read";
  EXPECT_EQ(st.error().code, Errc::kCorruption);
}

TEST_F(CreatedRecords, ADeliveryWaitingBehindTooManyNewerOnesIsWrittenIntoDeliveriesActive) {
  StoreOptions o = options_for(path_);
  o.created_span_max = 512;
  DeliveryId old_id = 0;
  {
    auto store = open_store(o);
    ASSERT_NE(store, nullptr);
    EXPECT_TRUE(recovered_ids(*store).empty());
    old_id = create(*store, 1000, 1).front().id;
    uint64_t seq = 2000;
    for (int batch = 0; batch < 8; ++batch, seq += 200) {
      std::vector<Delivery> ds = create(*store, seq, 100);
      deliver(*store, ds, 0, ds.size());
    }
    EXPECT_EQ(store->created_spilled(), 1u);
    EXPECT_EQ(store->created_only(), 0u);
    auto det = store->get_delivery(old_id);
    ASSERT_TRUE(det.ok() && det->has_value());
    EXPECT_EQ((*det)->delivery.status, DeliveryStatus::kPending);
  }
  {
    RawDb raw(path_, true);
    std::string v;
    const auto key = id_key(old_id);
    EXPECT_TRUE(raw.db
                    ->Get(rocksdb::ReadOptions(), raw.handles[kCfActive],
                          rocksdb::Slice(key.data, sizeof key.data), &v)
                    .ok())
        << "its created record was copied into deliveries_active";
  }
  {
    auto store = open_store(o);
    ASSERT_NE(store, nullptr);
    EXPECT_EQ(recovered_ids(*store), std::set<DeliveryId>{old_id});
    std::vector<Delivery> d = {make_delivery(event(1000), make_id(p_, 1), 1001)};
    d[0].attempts = d[0].fast_attempts = 0;
    deliver(*store, d, 0, 1);  // ends it: its active record goes
  }
  auto store = open_store(o);
  ASSERT_NE(store, nullptr);
  EXPECT_TRUE(recovered_ids(*store).empty());
}

}  // namespace
}  // namespace ringcast::storage::test
