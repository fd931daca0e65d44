// LeaseManager across a Redis Cluster failover: 3 primaries + 3 replicas on loopback; a primary
// is SIGKILLed, its replica is promoted (cluster-node-timeout 1000), and the managers, whose
// leases on that primary's slots could not be renewed meanwhile, lose those locally, take them
// again on the promoted replica at greater epochs, and converge to the same cover as before.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "cluster/keys.h"
#include "cluster/lease.h"
#include "redis/slot.h"
#include "tests/cluster/cluster_test_util.h"
#include "tests/support/redis_server.h"
#include "tests/support/temp_dir.h"

namespace ringcast::cluster {
namespace {

using test::RedisCluster;
using test::RedisClusterOptions;
using test::RedisServer;
using test::TempDir;
using namespace testing;  // NOLINT: the cluster test helpers

// This needs redis::ClusterClient to learn the new slot map while a node is down: it asks
// again when a node's connection goes into backoff and when a command could not be sent to
// its node by the deadline (kTimeoutUnsent), not only after MOVED or a cut mid-command.
TEST(LeaseFailoverTest, ManagersSurviveAPrimaryFailover) {
  ASSERT_TRUE(RedisServer::available()) << "redis-server is not installed";
  TempDir dir("ringcast-cluster-failover");
  RedisClusterOptions co;
  co.primaries = 3;
  co.replicas_per_primary = 1;
  auto cl = RedisCluster::start(dir.path(), co);
  ASSERT_EQ(cl->size(), 6u);
  auto node = [&](const std::string& id) {
    LeaseOptions o = test_options(id, "failover");
    o.cluster = true;
    o.servers = {cl->node(0).address(), cl->node(1).address(), cl->node(2).address()};
    return start_node(std::move(o));
  };
  auto a = node("node-a"), b = node("node-b");
  const std::vector<const Node*> both = {a.get(), b.get()};
  ASSERT_TRUE(wait_until([&] { return converged(both); }, seconds(8)));
  std::map<Partition, uint64_t> before = a->owned();
  for (const auto& [p, e] : b->owned()) before[p] = e;
  // Partitions whose lease lives on primary 1 (the one that dies).
  std::set<Partition> on_dead;
  for (uint32_t p = 0; p < kPartitions; ++p) {
    const auto part = static_cast<Partition>(p);
    if (cl->owner_of(redis::key_slot(own_key("failover", part))) == 1) on_dead.insert(part);
  }
  ASSERT_FALSE(on_dead.empty());

  // The lease writes must be on the replica before its primary dies for the epochs below to
  // be strictly greater: Redis replicates asynchronously and the manager does not WAIT after an
  // acquire yet, so a failover right after the acquires can lose them and the same epoch is
  // handed out again (seen once under ASan). Still safe — the fence compares node and epoch —
  // but it is the "known limit" of docs/cluster.md; this test keeps it out.
  ASSERT_TRUE(cl->wait_replicated(1, seconds(5)));
  const auto t0 = SteadyClock::now();
  cl->node(1).kill();
  ASSERT_TRUE(cl->wait_failover(1, seconds(15)));
  const double promoted = ms_since(t0);
  // Every lease is held again, by the node rendezvous names, whatever happened meanwhile.
  const bool again = wait_until([&] { return converged(both); }, seconds(10));
  if (!again) {  // what each manager holds, and why not more
    for (const Node* n : both) {
      const auto& c = n->m->counters();
      std::printf(
          "%s owns %zu acquired %llu lost %llu fenced %llu refused %llu errors %llu "
          "renewals %llu\n",
          n->id.c_str(), n->owned().size(), (unsigned long long)c.acquired.load(),
          (unsigned long long)c.lost.load(), (unsigned long long)c.fenced.load(),
          (unsigned long long)c.acquire_refused.load(), (unsigned long long)c.redis_errors.load(),
          (unsigned long long)c.renewals.load());
      const auto st = n->m->status();
      for (const auto& m : st.members) std::printf("  member %s\n", m.c_str());
    }
  }
  ASSERT_TRUE(again);
  std::printf(
      "[ failover ] replica promoted after %.0f ms; managers converged after %.0f ms; "
      "%zu partitions on the dead primary\n",
      promoted, ms_since(t0), on_dead.size());
  std::map<Partition, uint64_t> after = a->owned();
  for (const auto& [p, e] : b->owned()) after[p] = e;
  ASSERT_EQ(after.size(), kPartitions);
  for (const auto& [p, e] : after) {
    EXPECT_GE(e, before.at(p)) << "partition " << p;
    if (on_dead.count(p)) {
      EXPECT_GT(e, before.at(p)) << "partition " << p << " never re-taken";
    }
  }
  const uint64_t lost = a->m->counters().lost.load() + b->m->counters().lost.load();
  std::printf("[ failover ] leases lost locally during the failover: %llu\n",
              static_cast<unsigned long long>(lost));
}

}  // namespace
}  // namespace ringcast::cluster
