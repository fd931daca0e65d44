// Memory back-pressure (docs/cluster.md) end to end: `ringcast serve` with storage.backend =
// "redis" on one redis-server with a small maxmemory and noeviction. Once Redis is over the
// high-water mark (filled by the test behind ringcast's back), POST /v1/tenants/x/events answers
// 503 store_full with Retry-After, /metrics says so, and intake resumes once the space is freed.
#include <gtest/gtest.h>

#include <string>

#include "tests/e2e/daemon.h"
#include "tests/support/redis_server.h"
#include "tests/support/require.h"

namespace ringcast::e2e {
namespace {

TEST(E2eRedisMemory, IntakeAnswers503StoreFullOverTheHighWaterMarkAndResumesBelowIt) {
  if (!test::RedisServer::available()) RINGCAST_SKIP_MISSING() << "redis-server is not installed";
  test::TempDir redis_dir("e2e-redis-memory");
  test::RedisServerOptions ro;
  ro.extra_config = {"maxmemory 16mb", "maxmemory-policy noeviction"};
  auto redis = test::RedisServer::start(redis_dir.path(), ro);
  DaemonOptions o;
  o.env = {"RINGCAST_STORAGE_BACKEND=redis", "RINGCAST_STORAGE_REDIS_SERVERS=" + redis->address(),
           "RINGCAST_STORAGE_REDIS_WAIT_REPLICAS=0", "RINGCAST_STORAGE_REDIS_HIGH_WATER=0.5"};
  Daemon d(o);
  d.start();
  Reply cr = create_endpoint(d, "x", "{\"url\":\"http://127.0.0.1:9/x\"}");
  ASSERT_EQ(cr.status, 201) << cr.describe();
  Reply first = submit_event(d, "x", "e-0", "payment.created", "{\"n\":0}");
  ASSERT_EQ(first.status, 202) << first.describe();

  // 10 MiB of filler: over 0.5 x 16 MiB, under maxmemory (Redis itself still accepts writes).
  const std::string blob(64 * 1024, 'f');
  for (int i = 0; i < 160; ++i) {
    auto r = redis->cmd({"SET", "filler:" + std::to_string(i), blob});
    ASSERT_FALSE(r.is_error()) << r.str;
  }
  Reply refused;
  int n = 1;
  ASSERT_TRUE(wait_until(
      [&] {
        refused = submit_event(d, "x", "e-" + std::to_string(n++), "payment.created", "{}");
        return refused.status == 503;
      },
      scaled(10s), 50ms))
      << refused.describe() << "\n"
      << d.output();
  EXPECT_NE(refused.body.find("store_full"), std::string::npos) << refused.describe();
  EXPECT_NE(refused.headers.find("Retry-After: 1"), std::string::npos) << refused.headers;
  Metrics m = scrape_metrics(d);
  EXPECT_EQ(metric(m, "ringcast_redis_store_full"), 1);
  EXPECT_GE(metric_sum(m, "ringcast_intake_store_full_total"), 1);
  EXPECT_EQ(metric(m, "ringcast_redis_memory_limit_bytes"), 16 << 20);
  EXPECT_GT(metric(m, "ringcast_redis_used_memory_bytes"),
            metric(m, "ringcast_redis_memory_high_water_bytes"));
  // Reads still work while full.
  EXPECT_EQ(d.call("GET", "/v1/tenants/x/events/e-0").status, 200);

  // Space freed: intake resumes by itself.
  for (int i = 0; i < 160; ++i) redis->cmd({"DEL", "filler:" + std::to_string(i)});
  Reply again;
  ASSERT_TRUE(wait_until(
      [&] {
        again = submit_event(d, "x", "after-" + std::to_string(n++), "payment.created", "{}");
        return again.status == 202;
      },
      scaled(10s), 50ms))
      << again.describe();
  EXPECT_EQ(metric(scrape_metrics(d), "ringcast_redis_store_full"), 0);
  EXPECT_EQ(d.terminate().code, 0);
}

// The same for events a node queues for a partition it does not own (cluster mode's inboxes,
// core/inbox.h): two nodes on one small redis-server; over the mark, an event node a would
// queue for node b's partition is refused 503 store_full too, and queued again once freed.
TEST(E2eRedisMemory, QueuedIntakeOnANonOwnerIsHeldBackToo) {
  if (!test::RedisServer::available()) RINGCAST_SKIP_MISSING() << "redis-server is not installed";
  test::TempDir redis_dir("e2e-redis-memory-inbox");
  test::RedisServerOptions ro;
  ro.extra_config = {"maxmemory 16mb", "maxmemory-policy noeviction"};
  auto redis = test::RedisServer::start(redis_dir.path(), ro);
  auto node = [&](const char* id) {
    DaemonOptions o;
    o.env = {"RINGCAST_STORAGE_BACKEND=redis",
             "RINGCAST_STORAGE_REDIS_SERVERS=" + redis->address(),
             "RINGCAST_STORAGE_REDIS_WAIT_REPLICAS=0",
             "RINGCAST_STORAGE_REDIS_HIGH_WATER=0.5",
             "RINGCAST_CLUSTER_ENABLED=true",
             std::string("RINGCAST_CLUSTER_SECRET=") + Daemon::kClusterSecret,
             std::string("RINGCAST_CLUSTER_NODE_ID=") + id,
             "RINGCAST_CLUSTER_LEASE_TTL=1s",
             "RINGCAST_CLUSTER_SAFETY_MARGIN=250ms",
             "RINGCAST_CLUSTER_HEARTBEAT_INTERVAL=200ms",
             "RINGCAST_CLUSTER_MEMBER_TTL=700ms"};
    return o;
  };
  Daemon a(node("node-a")), b(node("node-b"));
  a.start();
  b.start();
  auto owned = [](const Daemon& d) {
    Reply r = d.call("GET", "/v1/cluster");
    return r.status == 200 ? r.json()["owned_count"].i64() : 0;
  };
  ASSERT_TRUE(wait_until([&] { return owned(a) > 0 && owned(b) > 0 && owned(a) + owned(b) == 256; },
                         scaled(15s), 50ms))
      << a.output() << b.output();
  // A tenant of node b's: node a queues its events.
  std::string tenant;
  for (int i = 0; i < 64 && tenant.empty(); ++i) {
    std::string t = "m";
    t += std::to_string(i);
    // A 503 not_owner while the owner still loads the partition it just took: retried, as a
    // client does on Retry-After.
    Reply cr;
    ASSERT_TRUE(wait_until(
        [&] {
          cr = create_endpoint(a, t, "{\"url\":\"http://127.0.0.1:9/x\"}");
          return cr.status != 503;
        },
        scaled(10s), 50ms));
    ASSERT_EQ(cr.status, 201) << cr.describe();
    Reply probe = submit_event(a, t, "probe", "payment.created", "{}");
    ASSERT_EQ(probe.status, 202) << probe.describe();
    if (probe.json()["queued"].boolean()) tenant = t;
  }
  ASSERT_FALSE(tenant.empty()) << "node a owns every tenant tried";

  const std::string blob(64 * 1024, 'f');
  for (int i = 0; i < 160; ++i)
    ASSERT_FALSE(redis->cmd({"SET", "filler:" + std::to_string(i), blob}).is_error());
  Reply refused;
  int n = 0;
  ASSERT_TRUE(wait_until(
      [&] {
        refused = submit_event(a, tenant, "q-" + std::to_string(n++), "payment.created", "{}");
        return refused.status == 503;
      },
      scaled(10s), 50ms))
      << refused.describe();
  EXPECT_NE(refused.body.find("store_full"), std::string::npos) << refused.describe();
  for (int i = 0; i < 160; ++i) redis->cmd({"DEL", "filler:" + std::to_string(i)});
  Reply again;
  ASSERT_TRUE(wait_until(
      [&] {
        again = submit_event(a, tenant, "q-" + std::to_string(n++), "payment.created", "{}");
        return again.status == 202;
      },
      scaled(10s), 50ms))
      << again.describe();
  EXPECT_TRUE(again.json()["queued"].boolean()) << again.describe();
}

}  // namespace
}  // namespace ringcast::e2e
