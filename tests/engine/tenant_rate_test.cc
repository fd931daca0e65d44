// engine/tenant_rate: limits.tenant_events_per_second as a token bucket per tenant (SPEC R14):
// a burst of one second's worth, refilled at the rate, tenants independent, memory bounded.
#include "engine/tenant_rate.h"

#include <gtest/gtest.h>

#include <string>

namespace ringcast::engine {
namespace {

using std::chrono::milliseconds;

const MonoTime kT0 = MonoTime::from_ms(1'000'000);

TEST(TenantRate, ABurstOfOneSecondThenTheRateAndTenantsApart) {
  TenantRate r(4);
  const MonoTime t0 = kT0;
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(r.take("acme", t0)) << i;
  EXPECT_FALSE(r.take("acme", t0));
  EXPECT_TRUE(r.take("zeta", t0));                       // another tenant has its own bucket
  EXPECT_FALSE(r.take("acme", t0 + milliseconds(200)));  // 0.8 of a token
  EXPECT_TRUE(r.take("acme", t0 + milliseconds(260)));   // 1.04
  EXPECT_FALSE(r.take("acme", t0 + milliseconds(300)));
  // Idle for long: full again, never more than the burst.
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(r.take("acme", t0 + std::chrono::seconds(60))) << i;
  EXPECT_FALSE(r.take("acme", t0 + std::chrono::seconds(60)));
  EXPECT_EQ(r.refused(), 4u);
  EXPECT_EQ(r.wait_seconds(), 1);
}

TEST(TenantRate, OffTakesEverything) {
  TenantRate r(0);
  const MonoTime t0 = kT0;
  for (int i = 0; i < 10'000; ++i) ASSERT_TRUE(r.take("acme", t0));
  EXPECT_FALSE(r.enabled());
}

TEST(TenantRate, PastItsTenantCapANewTenantIsRefusedUntilIdleBucketsGo) {
  TenantRate r(1, 2);
  const MonoTime t0 = kT0;
  EXPECT_TRUE(r.take("a", t0));
  EXPECT_TRUE(r.take("b", t0));
  EXPECT_FALSE(r.take("c", t0));  // no bucket for it: refused, not unlimited
  // A second on, a and b are full again (idle): forgotten, and c gets a bucket.
  EXPECT_TRUE(r.take("c", t0 + std::chrono::seconds(1)));
}

}  // namespace
}  // namespace ringcast::engine
