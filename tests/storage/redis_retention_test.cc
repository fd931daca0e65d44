// RedisStore's retention (SPEC R10.1) and memory back-pressure (docs/cluster.md) on a real
// redis-server: run_retention deletes exactly the terminal deliveries whose end is older than
// the retention (with their attempts and index members), the events none of whose deliveries is
// left and the old events written without one (with their idempotency keys), and the old
// notifications; it keeps the recent and the non-terminal ones and the events they still name.
// It is fenced (a partition held at another epoch or by another node loses nothing), chunked,
// and stops between chunks when asked. full() turns true at the high-water mark of maxmemory
// (or of max_memory_bytes) before Redis answers OOM, and false again only once memory is below
// the mark minus the hysteresis; open() refuses a server whose policy evicts.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "cluster/keys.h"
#include "storage/codec.h"
#include "storage/redis_store.h"
#include "tests/storage/store_test_util.h"
#include "tests/support/redis_server.h"
#include "tests/support/require.h"
#include "tests/support/temp_dir.h"

namespace ringcast::storage::test {
namespace {

using ringcast::test::RedisServer;
using ringcast::test::RedisServerOptions;
using ringcast::test::SyncReply;
using ringcast::test::TempDir;

std::string hex16(uint64_t v) {
  char b[17];
  std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(v));
  return b;
}

std::vector<RedisStore::OwnedEpoch> all_partitions(uint64_t epoch = 0) {
  std::vector<RedisStore::OwnedEpoch> v;
  for (uint32_t p = 0; p < kPartitions; ++p) v.push_back({static_cast<Partition>(p), epoch});
  return v;
}

class RedisRetentionTest : public ::testing::Test {
 protected:
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
    delete dir_;
    dir_ = nullptr;
  }
  void SetUp() override {
    if (!RedisServer::available())
      RINGCAST_SKIP_MISSING() << "redis-server is not installed (bash tools/install-deps.sh)";
    if (!dir_) {
      dir_ = new TempDir("ringcast-redis-retention");
      server_ = RedisServer::start(dir_->path()).release();
    }
    ASSERT_FALSE(server_->cmd({"FLUSHALL"}).is_error());
  }

  std::unique_ptr<RedisStore> open(std::string node_id = {}, size_t chunk = 500) {
    RedisStoreOptions o;
    o.servers = {server_->address()};
    o.node_id = std::move(node_id);
    o.clock = &clock_;
    o.retention = days(30);
    o.retention_chunk = chunk;
    auto r = RedisStore::open(std::move(o));
    if (!r) ADD_FAILURE() << "open failed: " << r.error().message;
    return r ? std::move(*r) : nullptr;
  }
  void write(RedisStore& s, const Mutations& m) {
    auto r = s.write(m);
    ASSERT_TRUE(r.ok()) << r.error().message;
    ASSERT_TRUE(s.wait_durable(*r, seconds(10)));
  }
  // The key of partition p's record suffix ("{rc:p}:<suffix>").
  static std::string key(Partition p, const std::string& suffix) {
    return "{rc:" + std::to_string(p) + "}:" + suffix;
  }
  long long num(const std::vector<std::string>& args) {
    SyncReply r = server_->cmd(args);
    EXPECT_FALSE(r.is_error()) << r.str;
    return r.integer;
  }
  bool delivery_stored(DeliveryId id) {
    return num({"HEXISTS", key(id_partition(id), "dl"), be64s(id)}) == 1;
  }
  // How many of the delivery's attempts T at holds (members be64(id) + be16(n) + attempt).
  long long attempts_stored(DeliveryId id) {
    return num({"ZLEXCOUNT", key(id_partition(id), "at"), "[" + be64s(id), "(" + be64s(id + 1)});
  }
  // Everything a delivery leaves in Redis: record, attempts, index members, T done.
  long long delivery_traces(DeliveryId id, uint64_t th, EndpointId ep) {
    const Partition p = id_partition(id);
    return num({"HEXISTS", key(p, "dl"), be64s(id)}) + (attempts_stored(id) > 0 ? 1 : 0) +
           (server_->cmd({"ZSCORE", key(p, "ti:" + hex16(th)), be64s(~id)}).type ==
                    SyncReply::Type::kString
                ? 1
                : 0) +
           (server_->cmd({"ZSCORE", key(p, "ei:" + hex16(th) + ":" + hex16(ep)), be64s(~id)})
                        .type == SyncReply::Type::kString
                ? 1
                : 0) +
           (in_done(id) ? 1 : 0);
  }
  // The id is in a T done member (the ids one batch ended, be64 each).
  bool in_done(DeliveryId id) {
    const SyncReply r = server_->cmd({"ZRANGE", key(id_partition(id), "done"), "0", "-1"});
    const std::string id8 = be64s(id);
    for (const SyncReply& m : r.elements) {
      for (size_t at = 0; at + 8 <= m.str.size(); at += 8) {
        if (m.str.compare(at, 8, id8) == 0) return true;
      }
    }
    return false;
  }
  bool event_stored(RedisStore& s, const Event& e) {
    auto k = s.find_event_key(e.tenant, e.id);
    EXPECT_TRUE(k.ok());
    auto v = s.load_event(e.seq);
    EXPECT_TRUE(v.ok());
    EXPECT_EQ(k.ok() && k->has_value(), v.ok() && v->has_value()) << "key and event disagree";
    return v.ok() && v->has_value();
  }

  // A delivery of `e` written new (pending) at the clock's time, with its attempts.
  Mutations new_delivery(const Event& e, EndpointId ep, uint64_t seq, bool with_event) {
    Mutations m;
    if (with_event) m.events.push_back(e);
    Delivery d = make_delivery(e, ep, seq);
    m.deliveries.push_back(put_new(d, e.tenant));
    m.attempts.push_back(make_attempt(d.id, 1));
    return m;
  }
  // The delivery turned terminal now (its end is stamped with the clock's time).
  Mutations end(const Event& e, EndpointId ep, uint64_t seq) {
    Mutations m;
    Delivery d = make_delivery(e, ep, seq, DeliveryStatus::kDelivered);
    m.deliveries.push_back(put_update(d));
    m.attempts.push_back(make_attempt(d.id, 2, Outcome::kSuccess));
    return m;
  }

  static TempDir* dir_;
  static RedisServer* server_;
  ManualClock clock_{kT0};
  const std::string tenant_ = "acme";
};
TempDir* RedisRetentionTest::dir_ = nullptr;
RedisServer* RedisRetentionTest::server_ = nullptr;

TEST_F(RedisRetentionTest, DeletesExactlyTheOldTerminalRecordsAndWhatOnlyTheyNamed) {
  auto s = open();
  ASSERT_NE(s, nullptr);
  const Partition p = partition_of(tenant_);
  const uint64_t th = tenant_hash(tenant_);
  const EndpointId ep = make_id(p, 1);
  // At t0: A (two deliveries, both end now), B (one ends now, one stays pending), D (no
  // delivery), N1. At t0 + 20 days: C (one delivery, ends then), E (no delivery), N2.
  const Event a = make_event(tenant_, "a", 10, "{\"a\":1}");
  const Event b = make_event(tenant_, "b", 20, "{\"b\":1}");
  const Event d = make_event(tenant_, "d", 30, "{\"d\":1}");
  {
    Mutations m = new_delivery(a, ep, 11, true);
    Mutations m2 = new_delivery(a, ep, 12, false);
    m.deliveries.push_back(m2.deliveries[0]);
    m.attempts.push_back(m2.attempts[0]);
    Mutations mb = new_delivery(b, ep, 21, true);
    Mutations mb2 = new_delivery(b, ep, 22, false);
    m.events.push_back(b);
    m.deliveries.push_back(mb.deliveries[0]);
    m.deliveries.push_back(mb2.deliveries[0]);
    m.attempts.push_back(mb.attempts[0]);
    m.attempts.push_back(mb2.attempts[0]);
    m.events.push_back(d);
    m.notifications.push_back(
        {make_id(p, 40), tenant_, ep, "endpoint_disabled", ErrorCode::http(410), kT0, "n1"});
    write(*s, m);
    Mutations e1 = end(a, ep, 11), e2 = end(a, ep, 12), e3 = end(b, ep, 21);
    for (Mutations* x : {&e2, &e3}) {
      e1.deliveries.push_back(x->deliveries[0]);
      e1.attempts.push_back(x->attempts[0]);
    }
    write(*s, e1);
  }
  clock_.advance(days(20));
  const Event c = make_event(tenant_, "c", 50, "{\"c\":1}", clock_.wall_now());
  const Event e = make_event(tenant_, "e", 60, "{\"e\":1}", clock_.wall_now());
  {
    Mutations m = new_delivery(c, ep, 51, true);
    m.events.push_back(e);
    m.notifications.push_back({make_id(p, 70), tenant_, ep, "endpoint_disabled",
                               ErrorCode::http(410), clock_.wall_now(), "n2"});
    write(*s, m);
    write(*s, end(c, ep, 51));
  }
  ASSERT_EQ(delivery_traces(make_id(p, 11), th, ep), 5);

  clock_.advance(days(11));  // A, B's first, D and N1 are 31 days old; C, E and N2 11 days
  auto st = s->run_retention_on(clock_.wall_now(), all_partitions());
  ASSERT_TRUE(st.ok()) << st.error().message;
  EXPECT_EQ(st->deliveries, 3u);
  EXPECT_EQ(st->attempts, 6u);  // two per delivery
  EXPECT_EQ(st->events, 2u);    // A and D
  EXPECT_EQ(st->notifications, 1u);
  EXPECT_FALSE(st->stopped);
  for (uint64_t seq : {11, 12, 21}) EXPECT_EQ(delivery_traces(make_id(p, seq), th, ep), 0) << seq;
  EXPECT_TRUE(delivery_stored(make_id(p, 22)));  // pending: never
  EXPECT_TRUE(delivery_stored(make_id(p, 51)));  // ended 11 days ago
  EXPECT_EQ(delivery_traces(make_id(p, 51), th, ep), 5);
  // The attempts of the deliveries that stay are all still there, and only theirs.
  EXPECT_EQ(attempts_stored(make_id(p, 22)), 1);
  EXPECT_EQ(attempts_stored(make_id(p, 51)), 2);
  EXPECT_EQ(num({"ZCARD", key(p, "at")}), 3);
  EXPECT_FALSE(event_stored(*s, a));
  EXPECT_TRUE(event_stored(*s, b));  // its pending delivery still names it
  EXPECT_TRUE(event_stored(*s, c));
  EXPECT_FALSE(event_stored(*s, d));
  EXPECT_TRUE(event_stored(*s, e));
  auto notes = s->list_notifications(tenant_, 10);
  ASSERT_TRUE(notes.ok());
  ASSERT_EQ(notes->size(), 1u);
  EXPECT_EQ((*notes)[0].message, "n2");
  auto page = s->list_deliveries(tenant_, std::nullopt, std::nullopt, 100, "");
  ASSERT_TRUE(page.ok());
  std::vector<DeliveryId> listed;
  for (const Delivery& x : page->items) listed.push_back(x.id);
  EXPECT_EQ(listed, (std::vector<DeliveryId>{make_id(p, 51), make_id(p, 22)}));
  // A reopened store recovers the pending one only, and ids go on after everything ever used.
  struct V final : RecoveryVisitor {
    std::vector<DeliveryId> seen;
    void on_endpoint(const Endpoint&) override {}
    void on_tenant(const Tenant&) override {}
    void on_delivery(const Delivery& x) override { seen.push_back(x.id); }
  } v;
  auto rec = s->recover(p, clock_.wall_now(), v);
  ASSERT_TRUE(rec.ok());
  EXPECT_EQ(v.seen, std::vector<DeliveryId>{make_id(p, 22)});
  EXPECT_EQ(rec->next_sequence, 71u);

  // Nothing is left to do at the same time.
  auto again = s->run_retention_on(clock_.wall_now(), all_partitions());
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->deliveries + again->events + again->notifications, 0u);

  // B's last delivery ends now; 31 days on, it goes with B, and C, E, N2 go too.
  write(*s, end(b, ep, 22));
  clock_.advance(days(31));
  auto later = s->run_retention_on(clock_.wall_now(), all_partitions());
  ASSERT_TRUE(later.ok());
  EXPECT_EQ(later->deliveries, 2u);  // B's second, C's
  EXPECT_EQ(later->events, 3u);      // B, C, E
  EXPECT_EQ(later->notifications, 1u);
  for (const Event* x : {&b, &c, &e}) EXPECT_FALSE(event_stored(*s, *x)) << x->id;
  // Only the lasting keys of the partition are left: seq (and nothing of ti/ei/at/done/...).
  SyncReply keys = server_->cmd({"KEYS", "*"});
  std::vector<std::string> left;
  for (const auto& k : keys.elements) left.push_back(k.str);
  EXPECT_EQ(left, std::vector<std::string>{key(p, "seq")});
}

// T ed (an event's idempotency key and deliveries) when deliveries of an event come in later
// batches, two of them in one batch, and a batch is applied twice (a replay): every id once, the
// key kept; retention then keeps the event until the last of its deliveries goes.
TEST_F(RedisRetentionTest, DeliveriesAddedLaterAreAppendedToTheirEventOnce) {
  auto s = open();
  ASSERT_NE(s, nullptr);
  const Partition p = partition_of(tenant_);
  const EndpointId ep = make_id(p, 1);
  const Event a = make_event(tenant_, "a", 10, "{}");
  write(*s, new_delivery(a, ep, 11, true));
  Mutations later = new_delivery(a, ep, 12, false);
  Mutations third = new_delivery(a, ep, 13, false);
  later.deliveries.push_back(third.deliveries[0]);
  later.attempts.push_back(third.attempts[0]);
  write(*s, later);
  write(*s, later);  // applied again: nothing appended twice
  SyncReply ed = server_->cmd({"HGET", key(p, "ed"), be64s(a.seq)});
  ASSERT_EQ(ed.type, SyncReply::Type::kString);
  const std::string kf = tenant_ + std::string(1, '\0') + "a";
  std::string want;
  want.push_back(static_cast<char>(kf.size() >> 8));
  want.push_back(static_cast<char>(kf.size() & 0xff));
  want += kf;
  for (uint64_t q : {11, 12, 13}) want += be64s(make_id(p, q));
  EXPECT_EQ(ed.str, want);
  // Two of the three end and expire: the event stays for the third; then it goes too.
  Mutations e1 = end(a, ep, 11), e2 = end(a, ep, 12);
  e1.deliveries.push_back(e2.deliveries[0]);
  write(*s, e1);
  clock_.advance(days(31));
  auto st = s->run_retention_on(clock_.wall_now(), all_partitions());
  ASSERT_TRUE(st.ok()) << st.error().message;
  EXPECT_EQ(st->deliveries, 2u);
  EXPECT_EQ(st->events, 0u);
  EXPECT_TRUE(event_stored(*s, a));
  write(*s, end(a, ep, 13));
  clock_.advance(days(31));
  st = s->run_retention_on(clock_.wall_now(), all_partitions());
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->deliveries, 1u);
  EXPECT_EQ(st->events, 1u);
  EXPECT_FALSE(event_stored(*s, a));
}

TEST_F(RedisRetentionTest, IsFencedByTheLease) {
  auto s = open("node-1");
  ASSERT_NE(s, nullptr);
  const Partition p = partition_of(tenant_);
  const EndpointId ep = make_id(p, 1);
  ASSERT_FALSE(
      server_->cmd({"HSET", cluster::own_key("rc", p), "node", "node-1", "epoch", "5"}).is_error());
  s->set_partition_epoch(p, 5);
  const Event a = make_event(tenant_, "a", 10, "{}");
  write(*s, new_delivery(a, ep, 11, true));
  write(*s, end(a, ep, 11));
  ASSERT_FALSE(s->fenced(p, 5));
  clock_.advance(days(31));
  // Another epoch of this node: nothing goes.
  auto r = s->run_retention_on(clock_.wall_now(), {{p, 4}});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->deliveries + r->events, 0u);
  EXPECT_EQ(s->retention_fenced(), 1u);
  EXPECT_TRUE(delivery_stored(make_id(p, 11)));
  // The lease moved to another node at this epoch: still nothing.
  ASSERT_FALSE(
      server_->cmd({"HSET", cluster::own_key("rc", p), "node", "node-2", "epoch", "5"}).is_error());
  r = s->run_retention_on(clock_.wall_now(), {{p, 5}});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->deliveries + r->events, 0u);
  EXPECT_EQ(s->retention_fenced(), 2u);
  EXPECT_TRUE(delivery_stored(make_id(p, 11)));
  EXPECT_TRUE(event_stored(*s, a));
  // The holder deletes.
  ASSERT_FALSE(
      server_->cmd({"HSET", cluster::own_key("rc", p), "node", "node-1", "epoch", "5"}).is_error());
  r = s->run_retention_on(clock_.wall_now(), {{p, 5}});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->deliveries, 1u);
  EXPECT_EQ(r->events, 1u);
  EXPECT_FALSE(delivery_stored(make_id(p, 11)));
  // A partition that is not given is not touched.
  const Event b = make_event(tenant_, "b", 20, "{}");
  write(*s, new_delivery(b, ep, 21, true));
  write(*s, end(b, ep, 21));
  clock_.advance(days(31));
  r = s->run_retention_on(clock_.wall_now(), {{static_cast<Partition>((p + 1) % kPartitions), 5}});
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(delivery_stored(make_id(p, 21)));
}

// T done holds one member per partition and batch (the ids it ended); a resend that reopens
// one of them keeps that delivery out of the member's retention, and it goes a window after it
// ends again.
TEST_F(RedisRetentionTest, OneMemberPerBatchAndAReopenedDeliveryIsKept) {
  auto s = open();
  ASSERT_NE(s, nullptr);
  const Partition p = partition_of(tenant_);
  const uint64_t th = tenant_hash(tenant_);
  const EndpointId ep = make_id(p, 1);
  std::vector<Event> evs;
  Mutations ended;
  for (uint64_t i = 0; i < 3; ++i) {
    evs.push_back(make_event(tenant_, "r" + std::to_string(i), 100 + 2 * i, "{}"));
    write(*s, new_delivery(evs.back(), ep, 101 + 2 * i, true));
    Mutations e = end(evs.back(), ep, 101 + 2 * i);
    ended.deliveries.push_back(e.deliveries[0]);
    ended.attempts.push_back(e.attempts[0]);
  }
  write(*s, ended);
  EXPECT_EQ(num({"ZCARD", key(p, "done")}), 1) << "one member for the batch's three ids";
  for (uint64_t i = 0; i < 3; ++i) EXPECT_TRUE(in_done(make_id(p, 101 + 2 * i))) << i;

  clock_.advance(days(5));
  const DeliveryId reopened = make_id(p, 103);
  {  // a resend: the ended delivery is pending again
    Mutations m;
    Delivery d = make_delivery(evs[1], ep, 103, DeliveryStatus::kPending);
    DeliveryPut put{d, th, false};
    put.rewrite = true;
    m.deliveries.push_back(put);
    m.attempts.push_back(make_attempt(d.id, 2, Outcome::kSuccess));
    write(*s, m);
  }
  clock_.advance(days(26));  // the batch ended 31 days ago
  auto st = s->run_retention_on(clock_.wall_now(), all_partitions());
  ASSERT_TRUE(st.ok()) << st.error().message;
  EXPECT_EQ(st->deliveries, 2u);
  EXPECT_FALSE(delivery_stored(make_id(p, 101)));
  EXPECT_FALSE(delivery_stored(make_id(p, 105)));
  EXPECT_TRUE(delivery_stored(reopened)) << "reopened since: not the old member's to delete";
  EXPECT_EQ(num({"ZCARD", key(p, "done")}), 0);

  write(*s, end(evs[1], ep, 103));  // it ends again: a window from now
  clock_.advance(days(29));
  st = s->run_retention_on(clock_.wall_now(), all_partitions());
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->deliveries, 0u);
  EXPECT_TRUE(delivery_stored(reopened));
  clock_.advance(days(2));
  st = s->run_retention_on(clock_.wall_now(), all_partitions());
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->deliveries, 1u);
  EXPECT_FALSE(delivery_stored(reopened));
}

TEST_F(RedisRetentionTest, WorksInChunksAndStopsBetweenThem) {
  auto s = open({}, 3);
  ASSERT_NE(s, nullptr);
  const Partition p = partition_of(tenant_);
  const EndpointId ep = make_id(p, 1);
  std::vector<Event> evs;
  for (uint64_t i = 0; i < 10; ++i) {
    evs.push_back(make_event(tenant_, "e" + std::to_string(i), 100 + 2 * i, "{}"));
    write(*s, new_delivery(evs.back(), ep, 101 + 2 * i, true));
    write(*s, end(evs.back(), ep, 101 + 2 * i));
  }
  clock_.advance(days(31));
  int asked = 0;
  auto r = s->run_retention_on(clock_.wall_now(), all_partitions(), [&] { return ++asked > 2; });
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->stopped);
  EXPECT_EQ(asked, 3);
  EXPECT_EQ(r->deliveries, 6u);  // two chunks of three
  EXPECT_EQ(r->events, 6u);
  size_t stored = 0;
  for (uint64_t i = 0; i < 10; ++i) stored += delivery_stored(make_id(p, 101 + 2 * i));
  EXPECT_EQ(stored, 4u);
  // The next pass goes on from there; it asked once per chunk with work (4 left: 2 chunks).
  asked = 0;
  r = s->run_retention_on(clock_.wall_now(), all_partitions(), [&] { return ++asked > 100; });
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->stopped);
  EXPECT_EQ(asked, 2);
  EXPECT_EQ(r->deliveries, 4u);
  EXPECT_EQ(r->events, 4u);
  for (uint64_t i = 0; i < 10; ++i) EXPECT_FALSE(delivery_stored(make_id(p, 101 + 2 * i)));
}

// ---- memory ------------------------------------------------------------------------------------

class RedisMemoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!RedisServer::available())
      RINGCAST_SKIP_MISSING() << "redis-server is not installed (bash tools/install-deps.sh)";
  }
  std::unique_ptr<RedisServer> start(std::vector<std::string> config) {
    RedisServerOptions o;
    o.extra_config = std::move(config);
    return RedisServer::start(dir_.path(), o);
  }
  static RedisStoreOptions options(const RedisServer& s) {
    RedisStoreOptions o;
    o.servers = {s.address()};
    o.memory_poll = milliseconds(20);
    return o;
  }
  // Fills Redis with 64 KiB strings until `until` holds or Redis refuses (OOM); how many went.
  template <class F>
  int fill(RedisServer& s, F until, bool* oom) {
    const std::string blob(64 * 1024, 'x');
    *oom = false;
    for (int i = 0; i < 1000; ++i) {
      if (until()) return i;
      SyncReply r = s.cmd({"SET", "filler:" + std::to_string(next_++), blob});
      if (r.is_error()) {
        *oom = r.str.find("OOM") != std::string::npos;
        return i;
      }
    }
    return 1000;
  }
  TempDir dir_{"ringcast-redis-memory"};
  int next_ = 0;
};

TEST_F(RedisMemoryTest, FullAtTheHighWaterMarkBeforeRedisRefusesAndAgainBelowIt) {
  auto server = start({"maxmemory 8mb", "maxmemory-policy noeviction"});
  auto opened = RedisStore::open(options(*server));
  ASSERT_TRUE(opened.ok()) << opened.error().message;
  RedisStore& s = **opened;
  ASSERT_TRUE(s.poll_memory().ok());
  EXPECT_FALSE(s.full());
  EXPECT_EQ(s.memory().limit_bytes, 8u << 20);
  EXPECT_EQ(s.memory().mark_bytes, static_cast<uint64_t>(0.85 * (8 << 20)));
  bool oom = false;
  const int n = fill(
      *server,
      [&] {
        EXPECT_TRUE(s.poll_memory().ok());
        return s.full();
      },
      &oom);
  ASSERT_FALSE(oom) << "Redis refused a write before the store was full";
  ASSERT_TRUE(s.full()) << "not full after " << n << " x 64 KiB";
  EXPECT_GE(s.memory().used_bytes, s.memory().mark_bytes);
  EXPECT_EQ(s.memory().full_spells, 1u);
  // Writes still go through while full (deliveries, attempts must finish).
  Mutations m;
  const Event e = make_event("acme", "x", 1, "{}");
  m.events.push_back(e);
  auto w = s.write(m);
  ASSERT_TRUE(w.ok());
  EXPECT_TRUE(s.wait_durable(*w, seconds(10)));
  // Past the mark Redis itself refuses at maxmemory: the mark came first.
  fill(
      *server, [] { return false; }, &oom);
  EXPECT_TRUE(oom);
  // Hysteresis: one key less is still over mark - 5%.
  ASSERT_FALSE(server->cmd({"DEL", "filler:0"}).is_error());
  ASSERT_TRUE(s.poll_memory().ok());
  EXPECT_TRUE(s.full());
  // Space freed: not full again, by the periodic poll alone.
  ASSERT_FALSE(server->cmd({"FLUSHALL"}).is_error());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (s.full() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_FALSE(s.full());
  EXPECT_LT(s.memory().used_bytes, s.memory().mark_bytes);
}

TEST_F(RedisMemoryTest, TheSizeCapStandsInForAMissingMaxmemory) {
  auto server = start({});
  RedisStoreOptions o = options(*server);
  o.max_memory_bytes = 6u << 20;
  o.high_water = 0.5;
  auto opened = RedisStore::open(o);
  ASSERT_TRUE(opened.ok()) << opened.error().message;
  RedisStore& s = **opened;
  ASSERT_TRUE(s.poll_memory().ok());
  EXPECT_EQ(s.memory().limit_bytes, 6u << 20);
  EXPECT_FALSE(s.full());
  bool oom = false;
  fill(
      *server,
      [&] {
        EXPECT_TRUE(s.poll_memory().ok());
        return s.full();
      },
      &oom);
  EXPECT_FALSE(oom);
  EXPECT_TRUE(s.full());
  EXPECT_GE(s.memory().used_bytes, 3u << 20);
}

TEST_F(RedisMemoryTest, OpenRefusesAServerThatEvicts) {
  auto server = start({"maxmemory 64mb", "maxmemory-policy allkeys-lru"});
  auto opened = RedisStore::open(options(*server));
  ASSERT_FALSE(opened.ok());
  EXPECT_STREQ(opened.error().field, "maxmemory-policy");
  EXPECT_STREQ(opened.error().reason, "redis_evicts");
  EXPECT_NE(std::string(opened.error().message).find("noeviction"), std::string::npos);
  // Turned off (a test that does not care), it opens.
  RedisStoreOptions o = options(*server);
  o.check_memory_policy = false;
  EXPECT_TRUE(RedisStore::open(o).ok());
}

}  // namespace
}  // namespace ringcast::storage::test
