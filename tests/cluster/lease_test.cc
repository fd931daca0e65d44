// LeaseManager against a real 3-primary Redis Cluster on loopback (docs/cluster.md "Tests"):
// convergence to a disjoint, fair cover; takeover after a crash within lease_ttl + 2 s at greater
// epochs; a node whose I/O is paused past its ttl gives its leases up locally before anyone else
// takes them, its stale epoch is FENCED, and it gets its share back on resume; a graceful stop
// hands over at once after done(); a fourth node takes ~1/4 while the others keep the rest
// untouched.
// Timings (1 s lease, 200 ms heartbeat) come from tests/cluster/cluster_test_util.h; every test
// uses its own key namespace, so they share one cluster.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cluster/fence.h"
#include "cluster/keys.h"
#include "cluster/lease.h"
#include "redis/cluster.h"
#include "redis/slot.h"
#include "tests/cluster/cluster_test_util.h"
#include "tests/redis/redis_test_util.h"
#include "tests/support/redis_server.h"
#include "tests/support/temp_dir.h"

namespace ringcast::cluster {
namespace {

using redis::testing::make_loop;
using redis::testing::run_until;
using test::RedisCluster;
using test::RedisServer;
using test::TempDir;
using namespace testing;  // NOLINT: the cluster test helpers

constexpr auto kTtl = std::chrono::milliseconds(1000);

class LeaseClusterTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!RedisServer::available()) return;
    dir_ = new TempDir("ringcast-cluster-lease");
    cluster_ = RedisCluster::start(dir_->path(), 3).release();
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
    delete dir_;
    dir_ = nullptr;
  }
  void SetUp() override {
    ASSERT_NE(cluster_, nullptr) << "redis-server is not installed (bash tools/install-deps.sh)";
    ns_ = std::string("t") + ::testing::UnitTest::GetInstance()->current_test_info()->name();
  }

  std::unique_ptr<Node> node(const std::string& id, bool hold_releases = false) {
    LeaseOptions o = test_options(id, ns_);
    o.cluster = true;
    o.servers = {cluster_->node(1).address()};
    return start_node(std::move(o), hold_releases);
  }

  // The lease as Redis holds it: {node, epoch} ("" when absent), asked of the slot's primary.
  std::pair<std::string, std::string> lease_in_redis(Partition p) {
    const std::string key = own_key(ns_, p);
    const int owner = cluster_->owner_of(redis::key_slot(key));
    const auto r = cluster_->node(static_cast<size_t>(owner)).cmd({"HMGET", key, "node", "epoch"});
    if (r.elements.size() != 2) return {};
    return {r.elements[0].str, r.elements[1].str};
  }

  static std::vector<const Node*> all(std::initializer_list<const Node*> n) { return n; }

  static TempDir* dir_;
  static RedisCluster* cluster_;
  std::string ns_;
};

TempDir* LeaseClusterTest::dir_ = nullptr;
RedisCluster* LeaseClusterTest::cluster_ = nullptr;

TEST_F(LeaseClusterTest, ThreeManagersConvergeToADisjointFairCover) {
  const auto t0 = SteadyClock::now();
  auto a = node("node-a"), b = node("node-b"), c = node("node-c");
  ASSERT_TRUE(wait_until([&] { return converged(all({a.get(), b.get(), c.get()})); }, seconds(8)));
  std::printf("[ converge ] 3 managers own all %u partitions after %.0f ms\n", kPartitions,
              ms_since(t0));
  std::vector<int> owners(kPartitions, 0);
  const double fair = static_cast<double>(kPartitions) / 3;
  for (const Node* n : {a.get(), b.get(), c.get()}) {
    const auto owned = n->owned();
    EXPECT_GT(static_cast<double>(owned.size()), fair * 0.65) << n->id;
    EXPECT_LT(static_cast<double>(owned.size()), fair * 1.35) << n->id;
    for (const auto& [p, e] : owned) {
      owners[p]++;
      EXPECT_TRUE(n->m->valid(p, e, mono_now()));
    }
    const auto st = n->m->status();
    EXPECT_EQ(st.members, (std::vector<std::string>{"node-a", "node-b", "node-c"}));
    EXPECT_EQ(st.owned.size(), owned.size());
  }
  for (uint32_t p = 0; p < kPartitions; ++p) EXPECT_EQ(owners[p], 1) << "partition " << p;
  // Redis agrees with what the managers report.
  for (const Node* n : {a.get(), b.get(), c.get()}) {
    for (const auto& [p, e] : n->owned()) {
      const auto [holder, epoch] = lease_in_redis(p);
      EXPECT_EQ(holder, n->id) << "partition " << p;
      EXPECT_EQ(epoch, std::to_string(e)) << "partition " << p;
    }
  }
}

TEST_F(LeaseClusterTest, CrashedManagersPartitionsAreTakenOverAtGreaterEpochs) {
  auto a = node("node-a"), b = node("node-b"), c = node("node-c");
  ASSERT_TRUE(wait_until([&] { return converged(all({a.get(), b.get(), c.get()})); }, seconds(8)));
  const auto before = c->owned();
  const auto t0 = SteadyClock::now();
  c->m.reset();  // no stop(): nothing released, no leave; its leases must expire
  ASSERT_TRUE(wait_until([&] { return converged(all({a.get(), b.get()})); }, kTtl + seconds(4)));
  const double took = ms_since(t0);
  std::printf("[ takeover ] %zu partitions of a crashed node re-owned after %.0f ms (ttl %lld)\n",
              before.size(), took, static_cast<long long>(kTtl.count()));
  EXPECT_LT(took, static_cast<double>((kTtl + seconds(2)).count()));
  auto now = a->owned();
  for (const auto& [p, e] : b->owned()) now[p] = e;
  ASSERT_EQ(now.size(), kPartitions);
  for (const auto& [p, e] : before) EXPECT_GT(now.at(p), e) << "partition " << p;
}

TEST_F(LeaseClusterTest, PausedManagerLosesLocallyBeforeOthersAcquireAndIsFenced) {
  auto a = node("node-a"), b = node("node-b"), c = node("node-c");
  ASSERT_TRUE(wait_until([&] { return converged(all({a.get(), b.get(), c.get()})); }, seconds(8)));
  const auto before = c->owned();
  ASSERT_FALSE(before.empty());
  const size_t acquired_before =
      a->rec->count(Event::Kind::kAcquire) + b->rec->count(Event::Kind::kAcquire);
  // The safety property itself, checked all along: no instant at which another node holds one
  // of c's partitions while c's valid() still says yes. (Ownership is read first, the time
  // after: an overlap seen is a real one.)
  std::atomic<bool> checking{true};
  std::atomic<int> overlaps{0};
  std::thread checker([&] {
    while (checking.load()) {
      const auto owned_a = a->owned();
      const auto owned_b = b->owned();
      const MonoTime now = mono_now();
      for (const auto& [p, e] : before)
        if ((owned_a.count(p) || owned_b.count(p)) && c->m->valid(p, e, now)) overlaps++;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  c->m->pause_io(true);  // sends nothing: no renewals, no heartbeats
  const auto t0 = SteadyClock::now();
  const bool reowned = wait_until(
      [&] {
        return converged(all({a.get(), b.get()}));
      },
      kTtl + seconds(4));
  checking = false;
  checker.join();
  ASSERT_TRUE(reowned);
  EXPECT_EQ(overlaps.load(), 0) << "another node held a partition c still took as valid";
  std::printf("[ pause    ] paused node's %zu partitions re-owned after %.0f ms\n", before.size(),
              ms_since(t0));
  EXPECT_TRUE(c->owned().empty());

  // Its on_lose(lost) callbacks, against the new owners' on_acquire: normally well before
  // (the local deadline is ttl/4 ahead of Redis's), but a callback is only news of what valid()
  // already says, and a loaded machine can delay a loop's timer past the takeover: printed,
  // not asserted (the checker above asserts the property).
  std::map<Partition, SteadyClock::time_point> lost_at, taken_at;
  for (const auto& e : c->rec->events()) {
    if (e.kind != Event::Kind::kLose || !before.count(e.p) || e.epoch != before.at(e.p)) continue;
    EXPECT_EQ(e.reason, LoseReason::kLost) << "partition " << e.p;
    lost_at[e.p] = e.at;
  }
  for (const Node* n : {a.get(), b.get()}) {
    const auto ev = n->rec->events();
    for (size_t i = 0; i < ev.size(); ++i) {
      if (ev[i].kind == Event::Kind::kAcquire && before.count(ev[i].p))
        taken_at[ev[i].p] = ev[i].at;
    }
  }
  EXPECT_GE(a->rec->count(Event::Kind::kAcquire) + b->rec->count(Event::Kind::kAcquire),
            acquired_before + before.size());
  ASSERT_EQ(lost_at.size(), before.size());
  ASSERT_EQ(taken_at.size(), before.size());
  double min_gap = 1e9;
  for (const auto& [p, lost] : lost_at) {
    const double gap = std::chrono::duration<double, std::milli>(taken_at.at(p) - lost).count();
    min_gap = std::min(min_gap, gap);
  }
  std::printf("[ pause    ] on_lose(lost) came at least %.0f ms before every takeover\n", min_gap);
  for (const auto& [p, e] : before) EXPECT_FALSE(c->m->valid(p, e, mono_now()));

  // A write with the paused node's stale epoch is FENCED; the new owner's goes through.
  const Partition p = before.begin()->first;
  const uint64_t stale = before.begin()->second;
  auto loop = make_loop();
  redis::ClusterOptions co;
  co.seeds = {cluster_->node(0).address()};
  auto client = redis::ClusterClient::create(*loop, co);
  ASSERT_TRUE(client.ok());
  const redis::Script script(fenced_source("return redis.call('SET', KEYS[2], ARGV[3])\n"));
  const std::vector<std::string> keys = {partition_key(ns_, p, "x")};
  auto write = [&](const std::string& id, uint64_t epoch, const std::string& v) {
    std::optional<Result<redis::Reply>> got;
    const std::vector<std::string> args = {v};
    evalsha_fenced(**client, script, ns_, p, id, epoch, keys, args,
                   [&](Result<redis::Reply> r) { got.emplace(std::move(r)); });
    EXPECT_TRUE(run_until(*loop, [&] { return got.has_value(); }));
    EXPECT_TRUE(got->ok());
    return got->value();
  };
  const redis::Reply fenced = write("node-c", stale, "stale");
  EXPECT_TRUE(is_fenced(fenced)) << fenced.debug_string();
  const Node* taker = a->owned().count(p) ? a.get() : b.get();
  const redis::Reply ok = write(taker->id, taker->owned().at(p), "fresh");
  EXPECT_FALSE(ok.is_error()) << ok.debug_string();

  // Resumed, it rejoins and gets its share back, at new epochs.
  const auto t1 = SteadyClock::now();
  c->m->pause_io(false);
  ASSERT_TRUE(wait_until([&] { return converged(all({a.get(), b.get(), c.get()})); }, seconds(6)));
  std::printf("[ pause    ] resumed node has its share back after %.0f ms\n", ms_since(t1));
  for (const auto& [q, e] : c->owned()) {
    ASSERT_TRUE(before.count(q));
    EXPECT_GT(e, before.at(q));
  }
  EXPECT_EQ(c->owned().size(), before.size());
  EXPECT_TRUE(is_fenced(write("node-c", stale, "stale again")));
}

TEST_F(LeaseClusterTest, GracefulStopHandsOverAtOnceAfterDone) {
  auto a = node("node-a"), b = node("node-b"), c = node("node-c");
  ASSERT_TRUE(wait_until([&] { return converged(all({a.get(), b.get(), c.get()})); }, seconds(8)));
  // Held only from here: a node that starts before it sees the others takes partitions it
  // then hands over, and a held release of those would keep the cover from converging (the
  // flake CI hit under load).
  c->rec->hold_releases(true);
  const auto held_at = SteadyClock::now();
  const size_t loses_before = c->rec->count(Event::Kind::kLose);
  const uint64_t released_before = c->m->counters().released.load();
  const auto before = c->owned();
  std::thread stopper([&] { c->m->stop(seconds(5)); });
  ASSERT_TRUE(wait_until([&] { return c->rec->held_dones() == before.size(); }, seconds(2)));
  // While its work is unfinished, nobody else gets its partitions (the lease is kept, renewed).
  std::this_thread::sleep_for(kTtl + std::chrono::milliseconds(200));
  for (const auto& [p, e] : before) {
    EXPECT_FALSE(a->owned().count(p) || b->owned().count(p)) << "partition " << p;
    EXPECT_EQ(lease_in_redis(p).first, "node-c") << "partition " << p;
  }
  // on_lose(released) waits for done()
  EXPECT_EQ(c->rec->count(Event::Kind::kLose), loses_before);
  const auto t0 = SteadyClock::now();
  for (auto& done : c->rec->take_dones()) done();
  ASSERT_TRUE(wait_until([&] { return converged(all({a.get(), b.get()})); }, seconds(3)));
  const double took = ms_since(t0);
  std::printf("[ handover ] %zu partitions handed over %.0f ms after done() (ttl %lld)\n",
              before.size(), took, static_cast<long long>(kTtl.count()));
  EXPECT_LT(took, 0.7 * static_cast<double>(kTtl.count()));
  stopper.join();
  for (const auto& e : c->rec->events()) {
    if (e.kind != Event::Kind::kLose || e.at < held_at) continue;
    EXPECT_EQ(e.reason, LoseReason::kReleased) << "partition " << e.p;
    EXPECT_GE(e.at, t0);
  }
  EXPECT_EQ(c->rec->count(Event::Kind::kLose) - loses_before, before.size());
  EXPECT_EQ(c->m->counters().released.load() - released_before, before.size());
}

TEST_F(LeaseClusterTest, AFourthManagerTakesAQuarterWithoutDisturbingTheRest) {
  auto a = node("node-a"), b = node("node-b"), c = node("node-c");
  ASSERT_TRUE(wait_until([&] { return converged(all({a.get(), b.get(), c.get()})); }, seconds(8)));
  std::map<Partition, std::pair<const Node*, uint64_t>> before;
  std::map<const Node*, size_t> events_before;
  for (const Node* n : {a.get(), b.get(), c.get()}) {
    for (const auto& [p, e] : n->owned()) before[p] = {n, e};
    events_before[n] = n->rec->events().size();
  }
  const auto t0 = SteadyClock::now();
  auto d = node("node-d");
  ASSERT_TRUE(wait_until(
      [&] {
        return converged(all({a.get(), b.get(), c.get(), d.get()}));
      },
      seconds(6)));
  const auto took = ms_since(t0);
  const auto moved = d->owned();
  std::printf("[ join     ] 4th node owns %zu partitions after %.0f ms\n", moved.size(), took);
  EXPECT_GT(static_cast<double>(moved.size()), kPartitions / 4.0 * 0.6);
  EXPECT_LT(static_cast<double>(moved.size()), kPartitions / 4.0 * 1.4);
  for (const Node* n : {a.get(), b.get(), c.get()}) {
    for (const auto& [p, e] : n->owned()) {
      EXPECT_EQ(before.at(p).first, n) << "partition " << p << " moved between old members";
      EXPECT_EQ(before.at(p).second, e) << "partition " << p << " was interrupted";
    }
    // After the join, the only callbacks an old member saw are for partitions that moved.
    const auto ev = n->rec->events();
    for (size_t i = events_before[n]; i < ev.size(); ++i) {
      EXPECT_TRUE(moved.count(ev[i].p)) << n->id << " partition " << ev[i].p;
      if (ev[i].kind == Event::Kind::kLose) {
        EXPECT_EQ(ev[i].reason, LoseReason::kReleased);
      }
    }
  }
  for (const auto& [p, e] : moved) EXPECT_GT(e, before.at(p).second);
}

}  // namespace
}  // namespace ringcast::cluster
