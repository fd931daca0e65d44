// RocksStore on a real RocksDB in a temp dir: round trips of every record type through
// write() and a reopen, idempotent intake (SPEC R12.5), the delivery-log queries (R10.2),
// durability sequencing, and corrupted values surfacing as kCorruption.
#include "storage/rocks_store.h"

#include <gtest/gtest.h>
#include <rocksdb/db.h>

#include <set>
#include <thread>

#include "storage/codec.h"
#include "storage/schema.h"
#include "tests/storage/store_test_util.h"

namespace ringcast::storage::test {
namespace {

class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override { store_ = open_store(options_for(dir_.path())); }
  void reopen() {
    store_.reset();
    store_ = open_store(options_for(dir_.path()));
    ASSERT_NE(store_, nullptr);
  }
  ringcast::test::TempDir dir_{"ringcast-store"};
  std::unique_ptr<RocksStore> store_;
};

TEST_F(StoreTest, EveryRecordTypeRoundTripsAcrossReopen) {
  ASSERT_NE(store_, nullptr);
  const std::string tenant = "acme";
  const Partition p = partition_of(tenant);
  Endpoint ep = make_endpoint(tenant, 1);
  Event ev = make_event(tenant, "evt-1", 2, "{\"amount\":100,\"status\":\"paid\"}");
  Delivery d = make_delivery(ev, ep.id, 3);
  Tenant t{tenant, false, {BreakerSnapshot::State::kHalfOpen, 2, kT0, kT0 + minutes(10)}, kT0};
  Notification n{
      make_id(p, 4), tenant,    ep.id, "endpoint_disabled", ErrorCode::of(ErrorCode::Kind::kGone),
      kT0,           "410 Gone"};
  Attempt a1 = make_attempt(d.id, 1);
  Attempt a2 = make_attempt(d.id, 2, Outcome::kUnknown);

  Mutations m;
  m.endpoints.push_back(ep);
  m.events.push_back(ev);
  m.deliveries.push_back(put_new(d, tenant));
  m.tenants.push_back(t);
  m.notifications.push_back(n);
  m.attempts = {a2, a1};  // written out of order: read back in number order
  write_durable(*store_, m);
  reopen();

  auto e = store_->load_event(ev.seq);
  ASSERT_TRUE(e.ok());
  ASSERT_TRUE(e->has_value());
  EXPECT_EQ(fields(**e), fields(ev));
  auto key = store_->find_event_key(tenant, "evt-1");
  ASSERT_TRUE(key.ok() && key->has_value());
  EXPECT_EQ((*key)->seq, ev.seq);
  EXPECT_EQ((*key)->payload_hash, ev.payload_hash);
  EXPECT_EQ((*key)->deliveries, 1u);

  auto det = store_->get_delivery(d.id);
  ASSERT_TRUE(det.ok() && det->has_value());
  EXPECT_EQ(fields((*det)->delivery), fields(d));
  EXPECT_EQ((*det)->tenant, tenant);
  ASSERT_EQ((*det)->attempts.size(), 2u);
  EXPECT_EQ(fields((*det)->attempts[0]), fields(a1));
  EXPECT_EQ(fields((*det)->attempts[1]), fields(a2));

  auto notes = store_->list_notifications(tenant, 10);
  ASSERT_TRUE(notes.ok());
  ASSERT_EQ(notes->size(), 1u);
  EXPECT_EQ(fields((*notes)[0]), fields(n));

  CollectingVisitor v;
  auto st = store_->recover(p, kT0, v);
  ASSERT_TRUE(st.ok());
  ASSERT_EQ(v.endpoints.size(), 1u);
  EXPECT_TRUE(same_endpoint(v.endpoints[0], ep));
  ASSERT_EQ(v.tenants.size(), 1u);
  EXPECT_EQ(fields(v.tenants[0]), fields(t));
  ASSERT_EQ(v.deliveries.size(), 1u);
  EXPECT_EQ(fields(v.deliveries[0]), fields(d));
  EXPECT_EQ(st->next_sequence, 5u);
  EXPECT_EQ(st->endpoints, 1u);
  EXPECT_EQ(st->tenants, 1u);
  EXPECT_EQ(st->pending, 1u);
  EXPECT_EQ(st->leases_expired, 0u);
}

TEST_F(StoreTest, UnknownThingsAreAbsentNotErrors) {
  ASSERT_NE(store_, nullptr);
  auto e = store_->load_event(make_id(3, 99));
  ASSERT_TRUE(e.ok());
  EXPECT_FALSE(e->has_value());
  auto d = store_->get_delivery(make_id(3, 99));
  ASSERT_TRUE(d.ok());
  EXPECT_FALSE(d->has_value());
  auto k = store_->find_event("nobody", "x");
  ASSERT_TRUE(k.ok());
  EXPECT_FALSE(k->has_value());
  auto r = store_->recent_deliveries("nobody", 25);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->empty());
}

TEST_F(StoreTest, IdempotentIntakeSameHashSameResultOtherHashConflict) {
  ASSERT_NE(store_, nullptr);
  const std::string tenant = "shop-7";
  Event ev = make_event(tenant, "order-42", 10, "{\"status\":\"paid\"}");
  Mutations m;
  m.events.push_back(ev);
  m.deliveries.push_back(put_new(make_delivery(ev, make_id(partition_of(tenant), 1), 11), tenant));
  m.deliveries.push_back(put_new(make_delivery(ev, make_id(partition_of(tenant), 2), 12), tenant));
  write_durable(*store_, m);

  // The caller (the owning shard) checks the key before intake, as the engine does.
  auto again = store_->find_event_key(tenant, "order-42");
  ASSERT_TRUE(again.ok() && again->has_value());
  EXPECT_EQ((*again)->seq, ev.seq);
  EXPECT_EQ((*again)->deliveries, 2u);
  EXPECT_EQ((*again)->payload_hash, payload_hash("{\"status\":\"paid\"}"));    // same: duplicate
  EXPECT_NE((*again)->payload_hash, payload_hash("{\"status\":\"unpaid\"}"));  // other: conflict
  // The key is per tenant: another tenant may use the same event id.
  auto other = store_->find_event_key("shop-8", "order-42");
  ASSERT_TRUE(other.ok());
  EXPECT_FALSE(other->has_value());
  auto found = store_->find_event(tenant, "order-42");
  ASSERT_TRUE(found.ok() && found->has_value());
  EXPECT_EQ((*found)->payload, ev.payload);

  // A second event under the same (tenant, id) is refused, never a silent overwrite; the
  // original stays; rewriting the very same event is harmless.
  Event imposter = make_event(tenant, "order-42", 30, "{\"status\":\"unpaid\"}");
  Mutations dup;
  dup.events.push_back(imposter);
  auto refused = store_->write(dup);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code, Errc::kConflict);
  EXPECT_STREQ(refused.error().reason_or_code(), "conflict");
  EXPECT_FALSE(store_->load_event(imposter.seq)->has_value());
  auto kept = store_->find_event(tenant, "order-42");
  ASSERT_TRUE(kept.ok() && kept->has_value());
  EXPECT_EQ((*kept)->payload, ev.payload);
  Mutations same;
  same.events.push_back(ev);
  EXPECT_TRUE(store_->write(same).ok());
  auto still = store_->find_event_key(tenant, "order-42");
  ASSERT_TRUE(still.ok() && still->has_value());
  EXPECT_EQ((*still)->deliveries, 2u);

  // The store fills payload_hash when the caller left it 0.
  Event unhashed = make_event(tenant, "order-43", 20, "{\"x\":1}");
  unhashed.payload_hash = 0;
  Mutations m2;
  m2.events.push_back(unhashed);
  write_durable(*store_, m2);
  auto k2 = store_->find_event_key(tenant, "order-43");
  ASSERT_TRUE(k2.ok() && k2->has_value());
  EXPECT_EQ((*k2)->payload_hash, payload_hash("{\"x\":1}"));
  EXPECT_EQ((*k2)->deliveries, 0u);
}

TEST_F(StoreTest, PayloadBytesAreExact) {
  ASSERT_NE(store_, nullptr);
  std::string payload;
  for (int i = 0; i < 256; ++i) payload.push_back(static_cast<char>(i));
  payload += std::string(100'000, 'z');  // a large body
  Event ev = make_event("acme", "bin", 5, payload);
  Mutations m;
  m.events.push_back(ev);
  write_durable(*store_, m);
  reopen();
  auto e = store_->find_event("acme", "bin");
  ASSERT_TRUE(e.ok() && e->has_value());
  EXPECT_EQ((*e)->payload, payload);
}

TEST_F(StoreTest, RejectsRecordsOutsideTheirPartition) {
  ASSERT_NE(store_, nullptr);
  Event ev = make_event("acme", "e", 5, "{}");
  ev.seq = make_id(static_cast<Partition>((partition_of("acme") + 1) % kPartitions), 5);
  Mutations m;
  m.events.push_back(ev);
  auto r = store_->write(m);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::kInvalidArgument);
  Event good = make_event("acme", "e", 5, "{}");
  Mutations m2;
  m2.deliveries.push_back({make_delivery(good, 1, 6), 0, true});  // new, no tenant hash
  EXPECT_FALSE(store_->write(m2).ok());
  EXPECT_FALSE(store_->find_event_key("acme", "e")->has_value());  // nothing partial written
}

// Builds a tenant with deliveries over three endpoints, ids ascending = creation order.
struct LogFixture {
  std::string tenant = "merchant-1";
  Partition p = partition_of(tenant);
  std::vector<EndpointId> endpoints = {make_id(p, 1), make_id(p, 2), make_id(p, 3)};
  std::vector<Delivery> all;  // in creation order

  void fill(RocksStore& s, int events) {
    uint64_t seq = 100;
    for (int i = 0; i < events; ++i) {
      Mutations m;
      Event ev = make_event(tenant, "e" + std::to_string(i), seq++, "{}");
      m.events.push_back(ev);
      for (int k = 0; k < 3; ++k) {
        if ((i + k) % 4 == 0) continue;  // not every event goes everywhere
        auto status = (i % 3 == 0)   ? DeliveryStatus::kDelivered
                      : (i % 3 == 1) ? DeliveryStatus::kPending
                                     : DeliveryStatus::kFailed;
        Delivery d = make_delivery(ev, endpoints[k], seq++, status);
        m.deliveries.push_back(put_new(d, tenant));
        all.push_back(d);
      }
      write_durable(s, m);
    }
  }
  std::vector<DeliveryId> expected(std::optional<EndpointId> ep,
                                   std::optional<DeliveryStatus> st) const {
    std::vector<DeliveryId> out;
    for (auto it = all.rbegin(); it != all.rend(); ++it) {
      if ((!ep || it->endpoint == *ep) && (!st || it->status == *st)) out.push_back(it->id);
    }
    return out;
  }
};

std::vector<DeliveryId> ids_of(const std::vector<Delivery>& ds) {
  std::vector<DeliveryId> out;
  for (const auto& d : ds) out.push_back(d.id);
  return out;
}

TEST_F(StoreTest, RecentDeliveriesAreTheNewestAcrossEndpointsWithOneSharedLimit) {
  ASSERT_NE(store_, nullptr);
  LogFixture f;
  f.fill(*store_, 40);
  // Another tenant's deliveries never show up.
  LogFixture other;
  other.tenant = "merchant-2";
  other.p = partition_of(other.tenant);
  other.endpoints = {make_id(other.p, 1), make_id(other.p, 2), make_id(other.p, 3)};
  other.fill(*store_, 5);

  auto recent = store_->recent_deliveries(f.tenant, 25);
  ASSERT_TRUE(recent.ok());
  auto want = f.expected(std::nullopt, std::nullopt);
  want.resize(25);
  EXPECT_EQ(ids_of(*recent), want);  // SPEC R10.2: 25 in total, newest first
  std::set<EndpointId> eps;
  for (const auto& d : *recent) eps.insert(d.endpoint);
  EXPECT_EQ(eps.size(), 3u);  // across all endpoints
  // Updates do not reorder: order is by creation.
  Delivery changed = f.all[f.all.size() - 5];
  changed.status = DeliveryStatus::kDead;
  Mutations m;
  m.deliveries.push_back(put_update(changed));
  write_durable(*store_, m);
  auto again = store_->recent_deliveries(f.tenant, 25);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(ids_of(*again), want);
  EXPECT_EQ((*again)[4].status, DeliveryStatus::kDead);
  auto few = store_->recent_deliveries(f.tenant, 3);
  ASSERT_TRUE(few.ok());
  EXPECT_EQ(ids_of(*few), std::vector<DeliveryId>(want.begin(), want.begin() + 3));
}

TEST_F(StoreTest, ListDeliveriesFiltersAndPagesWithCursors) {
  ASSERT_NE(store_, nullptr);
  LogFixture f;
  f.fill(*store_, 60);
  struct Case {
    std::optional<EndpointId> ep;
    std::optional<DeliveryStatus> st;
    size_t page;
  };
  std::vector<Case> cases = {{std::nullopt, std::nullopt, 7},
                             {f.endpoints[1], std::nullopt, 10},
                             {f.endpoints[2], DeliveryStatus::kFailed, 4},
                             {std::nullopt, DeliveryStatus::kPending, 9},
                             {f.endpoints[0], DeliveryStatus::kDelivered, 1000}};
  for (const auto& c : cases) {
    std::vector<DeliveryId> got;
    std::string cursor;
    int pages = 0;
    do {
      auto page = store_->list_deliveries(f.tenant, c.ep, c.st, c.page, cursor);
      ASSERT_TRUE(page.ok());
      EXPECT_LE(page->items.size(), c.page);
      for (const auto& d : page->items) got.push_back(d.id);
      cursor = page->next_cursor;
      ASSERT_LT(++pages, 200);
    } while (!cursor.empty());
    EXPECT_EQ(got, f.expected(c.ep, c.st));
    EXPECT_FALSE(got.empty());
  }
  // An endpoint id of another tenant yields nothing; a broken cursor is a clear error.
  auto foreign = store_->list_deliveries("merchant-9", f.endpoints[0], std::nullopt, 10, "");
  ASSERT_TRUE(foreign.ok());
  EXPECT_TRUE(foreign->items.empty());
  auto bad = store_->list_deliveries(f.tenant, std::nullopt, std::nullopt, 10, "garbage");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().code, Errc::kInvalidArgument);
  // The last page ends with an empty cursor.
  auto all = store_->list_deliveries(f.tenant, std::nullopt, std::nullopt, 1000, "");
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->items.size(), f.all.size());
  EXPECT_TRUE(all->next_cursor.empty());
}

TEST_F(StoreTest, NotificationsNewestFirstPerTenant) {
  ASSERT_NE(store_, nullptr);
  const std::string tenant = "acme";
  const Partition p = partition_of(tenant);
  Mutations m;
  for (int i = 1; i <= 5; ++i) {
    m.notifications.push_back({make_id(p, 100 + i), tenant, make_id(p, 1), "endpoint_disabled",
                               ErrorCode::of(ErrorCode::Kind::kEndpointDisabled), kT0 + seconds(i),
                               "n" + std::to_string(i)});
  }
  m.notifications.push_back({make_id(partition_of("other"), 7), "other", 0, "x", {}, kT0, "o"});
  write_durable(*store_, m);
  auto n = store_->list_notifications(tenant, 3);
  ASSERT_TRUE(n.ok());
  ASSERT_EQ(n->size(), 3u);
  EXPECT_EQ((*n)[0].message, "n5");
  EXPECT_EQ((*n)[2].message, "n3");
}

TEST_F(StoreTest, CommitSequencesIncreaseAndBecomeDurable) {
  ASSERT_NE(store_, nullptr);
  // Four writers at once (as four shards would), each checking its own sequences.
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int w = 0; w < 4; ++w) {
    threads.emplace_back([&, w] {
      uint64_t last = 0;
      for (int i = 0; i < 50; ++i) {
        Mutations m;
        m.attempts.push_back(make_attempt(make_id(static_cast<Partition>(w), 1000 + i), 1));
        auto r = store_->write(m);
        if (!r || *r <= last) ++failures;
        if (r) last = *r;
        if (r && !store_->wait_durable(*r, seconds(10))) ++failures;
        if (r && store_->durable_seq() < *r) ++failures;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  // An empty batch writes nothing and returns the current sequence.
  auto before = store_->write(Mutations{});
  ASSERT_TRUE(before.ok());
  EXPECT_LE(*before, store_->durable_seq());
}

TEST(StoreSyncPolicy, AlwaysAndNoneAreDurableOnReturn) {
  for (SyncPolicy p : {SyncPolicy::kAlways, SyncPolicy::kNone}) {
    ringcast::test::TempDir dir("ringcast-store");
    auto s = open_store(options_for(dir.path(), nullptr, p));
    ASSERT_NE(s, nullptr);
    Mutations m;
    m.attempts.push_back(make_attempt(make_id(1, 1), 1));
    auto r = s->write(m);
    ASSERT_TRUE(r.ok());
    EXPECT_GE(s->durable_seq(), *r);
  }
}

TEST(StoreSyncPolicy, IntervalCallsOnDurable) {
  ringcast::test::TempDir dir("ringcast-store");
  auto o = options_for(dir.path());
  std::atomic<uint64_t> seen{0};
  o.on_durable = [&](uint64_t seq) { seen.store(seq); };
  auto s = open_store(o);
  ASSERT_NE(s, nullptr);
  Mutations m;
  m.attempts.push_back(make_attempt(make_id(1, 1), 1));
  auto r = s->write(m);
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(s->wait_durable(*r, seconds(10)));
  for (int i = 0; i < 1000 && seen.load() < *r; ++i) std::this_thread::sleep_for(milliseconds(1));
  EXPECT_GE(seen.load(), *r);
}

TEST(StoreOpen, BadOptionsAndBadPathsAreErrors) {
  StoreOptions o;
  auto r = RocksStore::open(o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::kInvalidArgument);
  o.path = "/proc/definitely/not/here";
  r = RocksStore::open(o);
  ASSERT_FALSE(r.ok());
  ringcast::test::TempDir dir("ringcast-store");
  o.path = dir.file("missing");
  o.create_if_missing = false;
  EXPECT_FALSE(RocksStore::open(o).ok());
}

// Writes raw bytes under a key of one column family, with the store closed.
void poke(const std::string& path, Cf c, std::string_view key, std::string_view value) {
  std::vector<rocksdb::ColumnFamilyDescriptor> cfs;
  for (auto name : kColumnFamilies)
    cfs.emplace_back(std::string(name), rocksdb::ColumnFamilyOptions());
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DB* db = nullptr;
  ASSERT_TRUE(rocksdb::DB::Open(rocksdb::DBOptions(), path, cfs, &handles, &db).ok());
  ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), handles[c], rocksdb::Slice(key.data(), key.size()),
                      rocksdb::Slice(value.data(), value.size()))
                  .ok());
  for (auto* h : handles) db->DestroyColumnFamilyHandle(h);
  delete db;
}

TEST_F(StoreTest, CorruptedOrTruncatedValuesAreClearErrors) {
  ASSERT_NE(store_, nullptr);
  const std::string tenant = "acme";
  const Partition p = partition_of(tenant);
  Event ev = make_event(tenant, "evt", 10, "{\"k\":\"v\"}");
  Delivery d = make_delivery(ev, make_id(p, 1), 11, DeliveryStatus::kPending);
  Delivery d2 = make_delivery(ev, make_id(p, 1), 12, DeliveryStatus::kDelivered);
  Mutations m;
  m.events.push_back(ev);
  m.deliveries = {put_new(d, tenant), put_new(d2, tenant)};
  m.attempts.push_back(make_attempt(d2.id, 1, Outcome::kSuccess));
  write_durable(*store_, m);
  store_.reset();

  std::string ev_value, d_value, a_value;
  encode_event(ev, ev_value);
  encode_delivery(d, d_value);
  encode_attempt(make_attempt(d2.id, 1, Outcome::kSuccess), a_value);
  poke(dir_.path(), kCfEvents, id_key(ev.seq).view(), ev_value.substr(0, ev_value.size() / 2));
  poke(dir_.path(), kCfActive, id_key(d.id).view(), d_value.substr(0, 5));
  poke(dir_.path(), kCfAttempts, attempt_key(d2.id, 1).view(), "\x01\xff");
  poke(dir_.path(), kCfIdempotency, idempotency_key(tenant, "evt"), "");
  reopen();

  auto e = store_->load_event(ev.seq);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.error().code, Errc::kCorruption);
  EXPECT_NE(std::string(e.error().message), "");
  auto k = store_->find_event_key(tenant, "evt");
  ASSERT_FALSE(k.ok());
  EXPECT_EQ(k.error().code, Errc::kCorruption);
  auto dd = store_->get_delivery(d.id);
  ASSERT_FALSE(dd.ok());
  EXPECT_EQ(dd.error().code, Errc::kCorruption);
  auto dd2 = store_->get_delivery(d2.id);  // the delivery decodes, its attempt does not
  ASSERT_FALSE(dd2.ok());
  EXPECT_EQ(dd2.error().code, Errc::kCorruption);
  auto recent = store_->recent_deliveries(tenant, 25);
  ASSERT_FALSE(recent.ok());
  EXPECT_EQ(recent.error().code, Errc::kCorruption);
  CollectingVisitor v;
  auto rec = store_->recover(p, kT0, v);
  ASSERT_FALSE(rec.ok());
  EXPECT_EQ(rec.error().code, Errc::kCorruption);
}

TEST(StoreSchema, RefusesAnotherSchemaVersion) {
  ringcast::test::TempDir dir("ringcast-store");
  { ASSERT_NE(open_store(options_for(dir.path())), nullptr); }
  poke(dir.path(), kCfMeta, kSchemaKey, "9");
  auto r = RocksStore::open(options_for(dir.path()));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::kCorruption);
}

}  // namespace
}  // namespace ringcast::storage::test
