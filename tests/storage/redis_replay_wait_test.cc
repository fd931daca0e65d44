// RedisStore's replay with wait_replicas > 0 (docs/cluster.md "Unconfirmed writes are sent
// again"): a replay sends the unconfirmed batches' scripts and then ONE WAIT per primary for all
// of them, not one per batch. A WAIT blocks its connection until answered, so a WAIT per batch
// made a replay of many batches take batches × wait_timeout while the replicas lagged — past the
// command timeout under a burst, and the replay was replayed again without end (found by
// bench/e2e_cluster.sh). Here: a primary without its replica, 60 unconfirmed batches; while it
// stays so, each replay costs one WAIT; once the replica is there every batch becomes durable.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <string>
#include <thread>

#include "storage/redis_store.h"
#include "tests/storage/store_test_util.h"
#include "tests/support/redis_server.h"
#include "tests/support/require.h"
#include "tests/support/temp_dir.h"

namespace ringcast::storage::test {
namespace {

TEST(RedisStoreWait, ABurstWhoseWaitsRunShortConvergesWithoutALoop) {
  if (!ringcast::test::RedisServer::available())
    RINGCAST_SKIP_MISSING() << "redis-server is not installed";
  ringcast::test::TempDir dir("ringcast-redis-replay-wait");
  ASSERT_EQ(::mkdir(dir.file("primary").c_str(), 0755), 0);
  ASSERT_EQ(::mkdir(dir.file("replica").c_str(), 0755), 0);
  ringcast::test::RedisServerOptions po;
  po.extra_config = {"repl-diskless-sync yes", "repl-diskless-sync-delay 0"};
  auto primary = ringcast::test::RedisServer::start(dir.file("primary"), po);
  RedisStoreOptions o;
  o.servers = {primary->address()};
  o.wait_replicas = 1;
  o.wait_timeout = milliseconds(20);
  o.command_timeout = seconds(2);
  auto s = RedisStore::open(o);
  ASSERT_TRUE(s.ok());

  constexpr int kBatches = 60;
  uint64_t last = 0;
  for (int i = 0; i < kBatches; ++i) {
    Mutations m;
    m.events.push_back(make_event("acme", "evt-" + std::to_string(i),
                                  100 + static_cast<uint64_t>(i), "{\"i\":1}"));
    auto w = (*s)->write(m);
    ASSERT_TRUE(w.ok());
    last = *w;
  }
  // No replica: nothing can be confirmed; the store replays with a backoff (≤ 1 s).
  ASSERT_FALSE((*s)->wait_durable(last, milliseconds(800)));
  EXPECT_TRUE((*s)->degraded());

  ASSERT_FALSE(primary->cmd({"CONFIG", "RESETSTAT"}).is_error());
  const uint64_t replays_before = (*s)->replays();
  std::this_thread::sleep_for(milliseconds(2500));
  const uint64_t replays = (*s)->replays() - replays_before;
  const long long evals = primary->calls("eval");
  const long long waits = primary->calls("wait");
  std::printf("[ replay ] in 2.5 s without a replica: %llu replays, %lld scripts, %lld WAITs\n",
              static_cast<unsigned long long>(replays), evals, waits);
  ASSERT_GE(replays, 1u) << "no replay while the replica is missing";
  EXPECT_GE(evals, kBatches) << "a replay sends every unconfirmed batch again";
  // One WAIT per primary and replay (the last replay's may still be outstanding), never one
  // per batch.
  EXPECT_LE(waits, static_cast<long long>(replays) + 1);

  ringcast::test::RedisServerOptions ro;
  ro.extra_config = {"replicaof " + primary->host() + " " + std::to_string(primary->port())};
  auto replica = ringcast::test::RedisServer::start(dir.file("replica"), ro);
  EXPECT_TRUE((*s)->wait_durable(last, seconds(15))) << "the replay never converged";
  EXPECT_FALSE((*s)->degraded());
  EXPECT_FALSE((*s)->failed().has_value());
  // Everything is on the replica.
  auto n = replica->cmd({"HLEN", "{rc:" + std::to_string(partition_of("acme")) + "}:ev"});
  EXPECT_EQ(n.integer, kBatches);
}

}  // namespace
}  // namespace ringcast::storage::test
