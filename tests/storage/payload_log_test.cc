// The payload log (storage/payload_log.h) on a real directory, and what RocksStore builds on it:
// payloads round-trip across rollovers and reopens, a torn tail after a power loss takes the
// events that named it (never acknowledged) out as if never taken in, and retention removes a
// segment only after moving the payloads of events that still have deliveries.
#include "storage/payload_log.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include "storage/rocks_store.h"
#include "tests/storage/store_test_util.h"

namespace ringcast::storage::test {
namespace {

namespace fs = std::filesystem;

std::vector<fs::path> segment_files(const std::string& dir) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() == ".plog") out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

TEST(PayloadLog, AppendsReadBackAcrossRolloversAndReopens) {
  ringcast::test::TempDir dir("ringcast-plog");
  const std::string path = dir.path() + "/p";
  std::vector<std::string> bodies;
  for (int i = 0; i < 300; ++i)
    bodies.push_back(std::string(100 + i, static_cast<char>('a' + i % 26)));
  std::vector<PayloadRef> refs;
  {
    auto log = PayloadLog::open(path, 8192);
    ASSERT_TRUE(log.ok()) << log.error().message;
    for (size_t i = 0; i < bodies.size(); i += 10) {  // batches of 10
      std::vector<std::string_view> batch(bodies.begin() + i, bodies.begin() + i + 10);
      std::vector<PayloadRef> r;
      ASSERT_TRUE((*log)->append(batch, 1000 + i, r).ok());
      ASSERT_EQ(r.size(), 10u);
      for (size_t k = 1; k < r.size(); ++k) {  // a batch never straddles two segments
        EXPECT_EQ(r[k].segment, r[0].segment);
        EXPECT_EQ(r[k].offset, r[k - 1].offset + r[k - 1].size);
      }
      refs.insert(refs.end(), r.begin(), r.end());
    }
    ASSERT_TRUE((*log)->sync().ok());
    EXPECT_GT((*log)->segments().size(), 5u) << "8 KiB segments must roll over";
    for (const auto& [n, stamp] : (*log)->segments()) {
      EXPECT_LE((*log)->segment_size(n), 8192u + 10 * 400) << n;
      EXPECT_GE(stamp, 1000u);
    }
    std::string out;
    for (size_t i = 0; i < bodies.size(); ++i) {
      ASSERT_TRUE((*log)->read(refs[i], out).ok());
      EXPECT_EQ(out, bodies[i]) << i;
    }
  }
  auto log = PayloadLog::open(path, 8192);
  ASSERT_TRUE(log.ok());
  EXPECT_GT((*log)->active_segment(), refs.back().segment) << "a reopen starts a new segment";
  std::string out;
  for (size_t i = 0; i < bodies.size(); ++i) {
    ASSERT_TRUE((*log)->read(refs[i], out).ok());
    EXPECT_EQ(out, bodies[i]) << i;
  }
  (*log)->raise_stamps(5000);
  for (const auto& [n, stamp] : (*log)->segments())
    EXPECT_EQ(stamp, n == (*log)->active_segment() ? 0u : 5000u);
  // The active segment stays; an old one goes, and reading from it is a clear error.
  EXPECT_FALSE((*log)->remove((*log)->active_segment()).ok());
  ASSERT_TRUE((*log)->remove(refs[0].segment).ok());
  auto gone = (*log)->read(refs[0], out);
  ASSERT_FALSE(gone.ok());
  EXPECT_EQ(gone.error().code, Errc::kCorruption);
  EXPECT_FALSE(fs::exists(path + "/0000000000000001.plog"));
  // A read past the end of a segment is an error too, not a short payload.
  PayloadRef past = refs.back();
  past.offset += 1 << 20;
  EXPECT_FALSE((*log)->read(past, out).ok());
}

class PayloadStoreTest : public ::testing::Test {
 protected:
  StoreOptions opts(SyncPolicy sync = SyncPolicy::kInterval) {
    auto o = options_for(dir_.path(), &clock_, sync);
    o.payload_segment_bytes = 16 << 10;
    return o;
  }
  Mutations intake(const std::string& id, int deliveries, DeliveryStatus status,
                   std::vector<Delivery>* out = nullptr) {
    Mutations m;
    Event ev = make_event(tenant_, id, next_++, std::string(700, 'x') + id, clock_.wall_now());
    m.events.push_back(ev);
    for (int i = 0; i < deliveries; ++i) {
      Delivery d = make_delivery(ev, make_id(p_, 1), next_++, status);
      m.deliveries.push_back(put_new(d, tenant_));
      if (out) out->push_back(d);
    }
    return m;
  }
  bool has_event(RocksStore& s, const Event& e) {
    auto got = s.find_event(tenant_, e.id);
    EXPECT_TRUE(got.ok()) << (got.ok() ? "" : got.error().message);
    if (!got.ok() || !*got) return false;
    EXPECT_EQ((*got)->payload, e.payload);
    return true;
  }

  ManualClock clock_{kT0};
  ringcast::test::TempDir dir_{"ringcast-plog-store"};
  std::string tenant_ = "acme";
  Partition p_ = partition_of(tenant_);
  uint64_t next_ = 10;
};

TEST_F(PayloadStoreTest, ATornPayloadTailDropsOnlyTheEventsThatNamedIt) {
  std::vector<Mutations> kept, torn;
  std::vector<Delivery> torn_deliveries;
  uint64_t keep_bytes = 0;
  {
    auto store = open_store(opts());
    ASSERT_NE(store, nullptr);
    for (int i = 0; i < 5; ++i) {
      kept.push_back(intake("kept-" + std::to_string(i), 1, DeliveryStatus::kPending));
      write_durable(*store, kept.back());
    }
    keep_bytes = store->sizes().payload_log_bytes;
    for (int i = 0; i < 3; ++i) {
      torn.push_back(
          intake("torn-" + std::to_string(i), 2, DeliveryStatus::kPending, &torn_deliveries));
      write_durable(*store, torn.back());
    }
    ASSERT_GT(store->sizes().payload_log_bytes, keep_bytes);
  }
  // A power loss kept the WAL records but not the end of the payload segment.
  auto files = segment_files(dir_.path() + "/payloads");
  ASSERT_EQ(files.size(), 1u);
  ASSERT_EQ(::truncate(files[0].c_str(), static_cast<off_t>(keep_bytes + 100)), 0);

  auto store = open_store(opts());
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->torn_events_dropped(), 3u);
  for (const Mutations& m : kept) EXPECT_TRUE(has_event(*store, m.events[0])) << m.events[0].id;
  for (const Mutations& m : torn) {
    EXPECT_FALSE(has_event(*store, m.events[0])) << m.events[0].id;
    auto key = store->find_event_key(tenant_, m.events[0].id);
    ASSERT_TRUE(key.ok());
    EXPECT_FALSE(key->has_value()) << "the producer's retry must be taken in again";
  }
  for (const Delivery& d : torn_deliveries) {
    auto got = store->get_delivery(d.id);
    ASSERT_TRUE(got.ok());
    EXPECT_FALSE(got->has_value()) << d.id;
  }
  auto page = store->list_deliveries(tenant_, std::nullopt, std::nullopt, 100, "");
  ASSERT_TRUE(page.ok());
  EXPECT_EQ(page->items.size(), kept.size());
  ringcast::storage::test::CollectingVisitor v;
  auto rec = store->recover(p_, clock_.wall_now(), v);
  ASSERT_TRUE(rec.ok());
  EXPECT_EQ(rec->pending, kept.size());
  EXPECT_GT(rec->next_sequence, id_sequence(torn_deliveries.back().id))
      << "ids of dropped records are never handed out again";
  // Taking the same events in again works and they read back whole.
  for (const Mutations& m : torn) write_durable(*store, m);
  for (const Mutations& m : torn) EXPECT_TRUE(has_event(*store, m.events[0]));
}

TEST_F(PayloadStoreTest, RetentionRemovesSegmentsAfterMovingWhatIsStillReferenced) {
  auto o = opts(SyncPolicy::kNone);
  o.retention = days(30);
  auto store = open_store(o);
  ASSERT_NE(store, nullptr);
  std::vector<Delivery> long_lived;
  Mutations first = intake("long-lived", 1, DeliveryStatus::kPending, &long_lived);
  write_durable(*store, first);
  std::vector<Mutations> old;
  for (int i = 0; i < 60; ++i) {
    old.push_back(intake("old-" + std::to_string(i), 0, DeliveryStatus::kPending));
    write_durable(*store, old.back());
  }
  const size_t segments_before = segment_files(dir_.path() + "/payloads").size();
  ASSERT_GE(segments_before, 3u);
  clock_.advance(days(31));
  Mutations young = intake("young", 0, DeliveryStatus::kPending);
  write_durable(*store, young);

  auto st = store->run_retention(clock_.wall_now(), {});
  ASSERT_TRUE(st.ok()) << st.error().message;
  EXPECT_EQ(st->events, old.size());
  EXPECT_EQ(st->payloads_moved, 1u);
  EXPECT_GE(st->payload_segments, segments_before - 1);
  EXPECT_LT(segment_files(dir_.path() + "/payloads").size(), segments_before);
  EXPECT_TRUE(has_event(*store, first.events[0])) << "moved, not lost";
  EXPECT_TRUE(has_event(*store, young.events[0]));
  for (const Mutations& m : old) EXPECT_FALSE(has_event(*store, m.events[0]));
  // The moved payload survives a reopen, and a later pass moves it again while it is needed.
  store.reset();
  store = open_store(o);
  ASSERT_NE(store, nullptr);
  EXPECT_TRUE(has_event(*store, first.events[0]));
  clock_.advance(days(31));
  st = store->run_retention(clock_.wall_now(), {});
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->payloads_moved, 1u);
  EXPECT_TRUE(has_event(*store, first.events[0]));
  EXPECT_FALSE(has_event(*store, young.events[0]));
}

}  // namespace
}  // namespace ringcast::storage::test
