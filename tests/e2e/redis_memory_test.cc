// ISSUE 16, memory back-pressure end to end: `ringcast serve` with storage.backend = "redis" on
// one redis-server with a small maxmemory and noeviction. Once Redis is over the high-water
// mark (filled by the test behind ringcast's back), POST /v1/tenants/x/events answers 503
// store_full with Retry-After, /metrics says so, and intake resumes once the space is freed.
#include <gtest/gtest.h>

#include <string>

#include "tests/e2e/daemon.h"
#include "tests/support/redis_server.h"

namespace ringcast::e2e {
namespace {

TEST(E2eRedisMemory, IntakeAnswers503StoreFullOverTheHighWaterMarkAndResumesBelowIt) {
  if (!test::RedisServer::available()) GTEST_SKIP() << "redis-server is not installed";
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

}  // namespace
}  // namespace ringcast::e2e
