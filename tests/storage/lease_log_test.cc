// The lease log (storage/lease_log.h) on a real directory, and what RocksStore builds on it: a
// lease of a stored delivery stays out of RocksDB, reads as the delivery's state while live,
// is written into deliveries_active at the next open when it was never settled (and becomes
// exactly one lease_expired attempt), and its segment goes once every lease in it is settled.
#include "storage/lease_log.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <optional>

#include "storage/codec.h"
#include "storage/rocks_store.h"
#include "tests/storage/store_test_util.h"

namespace ringcast::storage::test {
namespace {

namespace fs = std::filesystem;

size_t lease_files(const std::string& dir) {
  size_t n = 0;
  for (const auto& e : fs::directory_iterator(dir)) n += e.path().extension() == ".lease";
  return n;
}

std::string record_of(DeliveryId id, int version) {
  return "lease-" + std::to_string(id) + "-v" + std::to_string(version) + std::string(40, 'x');
}

TEST(LeaseLog, LeasesReadBackUntilSettledAndAnEarlierRunsLeasesReplayWithoutATornTail) {
  ringcast::test::TempDir dir("ringcast-lease");
  const std::string path = dir.path() + "/l";
  {
    auto log = LeaseLog::open(path, 4096);
    ASSERT_TRUE(log.ok()) << log.error().message;
    LeaseLog& l = **log;
    for (DeliveryId id = 1; id <= 200; id += 10) {
      LeaseBatch b;
      for (DeliveryId k = id; k < id + 10; ++k) b.add(k, record_of(k, 1));
      ASSERT_TRUE(l.append(b).ok());
    }
    LeaseBatch again;  // a newer lease of the same delivery replaces the older one
    again.add(5, record_of(5, 2));
    ASSERT_TRUE(l.append(again).ok());
    EXPECT_GT(l.segment_count(), 3u) << "4 KiB segments must roll over";
    EXPECT_TRUE(l.resolved_segments().empty()) << "every lease is still live";

    std::string rec;
    auto r = l.lookup(3, rec);
    ASSERT_TRUE(r.ok() && *r);
    EXPECT_EQ(rec, record_of(3, 1));
    r = l.lookup(5, rec);
    ASSERT_TRUE(r.ok() && *r);
    EXPECT_EQ(rec, record_of(5, 2));
    r = l.lookup(999, rec);
    ASSERT_TRUE(r.ok());
    EXPECT_FALSE(*r);

    // Settle the first 100: the segments that held only those can go, the rest stay readable.
    std::vector<DeliveryId> first;
    for (DeliveryId id = 1; id <= 100; ++id) first.push_back(id);
    l.resolve(first.data(), first.size());
    r = l.lookup(50, rec);
    ASSERT_TRUE(r.ok());
    EXPECT_FALSE(*r) << "a settled lease is not live";
    const auto gone = l.resolved_segments();
    ASSERT_FALSE(gone.empty());
    const size_t before = l.segment_count();
    ASSERT_TRUE(l.remove(gone).ok());
    EXPECT_EQ(l.segment_count(), before - gone.size());
    EXPECT_EQ(lease_files(path), l.segment_count());
    r = l.lookup(150, rec);
    ASSERT_TRUE(r.ok() && *r);
    EXPECT_EQ(rec, record_of(150, 1));

    LeaseBatch last;  // the newest entry of the run, torn below
    last.add(777, record_of(777, 1));
    ASSERT_TRUE(l.append(last).ok());
    ASSERT_TRUE(l.sync().ok());
  }
  {  // a power loss tore the last entry
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(path)) files.push_back(e.path());
    std::sort(files.begin(), files.end());
    ASSERT_EQ(::truncate(files.back().c_str(), static_cast<off_t>(fs::file_size(files.back()) - 3)),
              0);
  }
  auto log = LeaseLog::open(path, 4096);
  ASSERT_TRUE(log.ok());
  auto old = (*log)->read_old();
  ASSERT_TRUE(old.ok()) << old.error().message;
  for (DeliveryId id = 101; id <= 200; ++id) {
    ASSERT_TRUE(old->count(id)) << id;
    EXPECT_EQ(old->at(id), record_of(id, 1));
  }
  EXPECT_FALSE(old->count(777)) << "a torn entry is not a lease";
  std::string rec;
  auto r = (*log)->lookup(150, rec);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(*r) << "an earlier run's lease is not live in this one";
  ASSERT_TRUE((*log)->remove_old().ok());
  EXPECT_EQ(lease_files(path), 1u) << "only this run's segment is left";
  auto none = (*log)->read_old();
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
}

// A delivery's record in column family `c`, read from RocksDB directly (the store is closed).
std::optional<Delivery> raw_record(const std::string& path, Cf c, DeliveryId id) {
  RawDb raw(path, true);
  if (raw.db == nullptr) return std::nullopt;
  std::string v;
  const auto key = id_key(id);
  auto s = raw.db->Get(rocksdb::ReadOptions(), raw.handles[c],
                       rocksdb::Slice(key.data, sizeof key.data), &v);
  EXPECT_TRUE(s.ok() || s.IsNotFound()) << s.ToString();
  if (!s.ok()) return std::nullopt;
  Delivery d;
  EXPECT_TRUE(decode_delivery(id, v, d).ok());
  return d;
}

TEST(LeaseStore, ALeaseStaysOutOfRocksDbReadsAsInFlightAndBecomesOneLeaseExpiredAfterACrash) {
  ringcast::test::TempDir dir("ringcast-lease-store");
  const std::string path = dir.file("db");
  const std::string tenant = "acme";
  const Partition p = partition_of(tenant);
  Event ev = make_event(tenant, "evt-1", 10, "{}");
  Delivery open = make_delivery(ev, make_id(p, 1), 11);     // leased, never settled
  Delivery settled = make_delivery(ev, make_id(p, 1), 12);  // leased, then attempt 3 failed
  {
    auto store = open_store(options_for(path));
    ASSERT_NE(store, nullptr);
    Mutations m;
    m.events.push_back(ev);
    m.deliveries = {put_new(open, tenant), put_new(settled, tenant)};
    write_durable(*store, m);

    Mutations lease;
    for (Delivery* d : {&open, &settled}) {
      d->status = DeliveryStatus::kInFlight;
      d->attempts = 3;
      d->fast_attempts = 3;
      lease.deliveries.push_back(put_update(*d));
    }
    write_durable(*store, lease);
    EXPECT_GT(store->sizes().lease_log_bytes, 0u);
    auto det = store->get_delivery(open.id);
    ASSERT_TRUE(det.ok() && det->has_value());
    EXPECT_EQ(fields((*det)->delivery), fields(open)) << "a live lease reads as the delivery";
    auto page = store->list_deliveries(tenant, std::nullopt, DeliveryStatus::kInFlight, 10, "");
    ASSERT_TRUE(page.ok());
    EXPECT_EQ(page->items.size(), 2u);

    Mutations result;
    settled.status = DeliveryStatus::kPending;
    result.deliveries.push_back(put_update(settled));
    result.attempts.push_back(make_attempt(settled.id, 3));
    write_durable(*store, result);
    det = store->get_delivery(settled.id);
    ASSERT_TRUE(det.ok() && det->has_value());
    EXPECT_EQ(fields((*det)->delivery), fields(settled));
  }  // a stop with `open` still on the wire, as after a kill -9 (the log is in the page cache)

  // RocksDB itself never saw the lease: the delivery's one record is the one it was created
  // with (attempts 2, pending), in deliveries_created; deliveries_active has none.
  std::optional<Delivery> raw = raw_record(path, kCfCreated, open.id);
  ASSERT_TRUE(raw.has_value());
  EXPECT_EQ(raw->status, DeliveryStatus::kPending);
  EXPECT_EQ(raw->attempts, 2);
  EXPECT_FALSE(raw_record(path, kCfActive, open.id).has_value());

  for (int round = 0; round < 2; ++round) {
    auto store = open_store(options_for(path));
    ASSERT_NE(store, nullptr);
    EXPECT_EQ(store->leases_applied_at_open(), round == 0 ? 1u : 0u)
        << "only the unsettled lease is newer than its record";
    EXPECT_EQ(lease_files(path + "/leases"), 1u) << "the earlier run's segments are gone";
    CollectingVisitor v;
    auto st = store->recover(p, kT0 + hours(1), v);
    ASSERT_TRUE(st.ok());
    EXPECT_EQ(st->leases_expired, round == 0 ? 1u : 0u);
    auto det = store->get_delivery(open.id);
    ASSERT_TRUE(det.ok() && det->has_value());
    EXPECT_EQ((*det)->delivery.status, DeliveryStatus::kPending);
    EXPECT_EQ((*det)->delivery.attempts, 3);
    ASSERT_EQ((*det)->attempts.size(), 1u);
    EXPECT_EQ((*det)->attempts[0].number, 3);
    EXPECT_EQ((*det)->attempts[0].code.kind, ErrorCode::Kind::kLeaseExpired);
    det = store->get_delivery(settled.id);
    ASSERT_TRUE(det.ok() && det->has_value());
    EXPECT_EQ(fields((*det)->delivery), fields(settled));
    ASSERT_EQ((*det)->attempts.size(), 1u);
    EXPECT_EQ((*det)->attempts[0].code.kind, ErrorCode::Kind::kHttp);
  }
}

TEST(LeaseStore, UnderAlwaysTheLeaseIsPartOfTheSyncedBatch) {
  ringcast::test::TempDir dir("ringcast-lease-always");
  const std::string path = dir.file("db");
  const std::string tenant = "acme";
  Event ev = make_event(tenant, "evt-1", 10, "{}");
  Delivery d = make_delivery(ev, make_id(partition_of(tenant), 1), 11);
  {
    auto store = open_store(options_for(path, nullptr, SyncPolicy::kAlways));
    ASSERT_NE(store, nullptr);
    Mutations m;
    m.events.push_back(ev);
    m.deliveries = {put_new(d, tenant)};
    write_durable(*store, m);
    d.status = DeliveryStatus::kInFlight;
    d.attempts = 3;
    Mutations lease;
    lease.deliveries.push_back(put_update(d));
    write_durable(*store, lease);
    EXPECT_EQ(store->sizes().lease_log_bytes, 0u);
  }
  std::optional<Delivery> raw = raw_record(path, kCfActive, d.id);
  ASSERT_TRUE(raw.has_value());
  EXPECT_EQ(raw->status, DeliveryStatus::kInFlight);
  EXPECT_EQ(raw->attempts, 3);
}

TEST(LeaseStore, ASegmentGoesOnceEveryLeaseInItIsSettledAndSynced) {
  ringcast::test::TempDir dir("ringcast-lease-gc");
  const std::string path = dir.file("db");
  const std::string tenant = "acme";
  const Partition p = partition_of(tenant);
  StoreOptions o = options_for(path);
  o.lease_segment_bytes = 4096;
  auto store = open_store(o);
  ASSERT_NE(store, nullptr);
  Event ev = make_event(tenant, "evt-1", 10, "{}");
  Delivery keep = make_delivery(ev, make_id(p, 1), 11);  // its lease stays live throughout
  Mutations m;
  m.events.push_back(ev);
  m.deliveries.push_back(put_new(keep, tenant));
  write_durable(*store, m);
  keep.status = DeliveryStatus::kInFlight;
  Mutations lk;
  lk.deliveries.push_back(put_update(keep));
  write_durable(*store, lk);
  uint64_t seq = 100;
  for (int round = 0; round < 60; ++round) {
    std::vector<Delivery> ds;
    Mutations create;
    for (int i = 0; i < 10; ++i) {
      ds.push_back(make_delivery(ev, make_id(p, 1), ++seq));
      create.deliveries.push_back(put_new(ds.back(), tenant));
    }
    write_durable(*store, create);
    Mutations lease, done;
    for (Delivery& d : ds) {
      d.status = DeliveryStatus::kInFlight;
      lease.deliveries.push_back(put_update(d));
      d.status = DeliveryStatus::kDelivered;
      done.deliveries.push_back(put_update(d));
    }
    write_durable(*store, lease);
    write_durable(*store, done);
  }
  // ~60 KiB of leases in 4 KiB segments; all but `keep`'s first segment and the active one
  // are settled, and the sync thread removes them after its next sync.
  size_t files = 0;
  for (int w = 0; w < 500; ++w) {
    files = lease_files(path + "/leases");
    if (files <= 2) break;
    Mutations nudge;  // a write makes the sync thread run again
    nudge.deliveries.push_back(put_update(keep));
    write_durable(*store, nudge);
    usleep(10'000);
  }
  EXPECT_LE(files, 2u);
  auto det = store->get_delivery(keep.id);
  ASSERT_TRUE(det.ok() && det->has_value());
  EXPECT_EQ((*det)->delivery.status, DeliveryStatus::kInFlight) << "its lease is still live";
}

}  // namespace
}  // namespace ringcast::storage::test
