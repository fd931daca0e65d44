// A tenant's intake rate on this node (SPEC R14, docs/security.md "Quotas"):
// limits.tenant_events_per_second as a token bucket per tenant (net/pacing.h; burst: one
// second's worth). Invariants: memory is bounded (`max_tenants` buckets; past it, the buckets
// that are full again — tenants idle for a second or more — are forgotten first, and a tenant
// that cannot get a bucket is refused rather than unlimited); an event refused here was not
// taken in (the producer retries it: a 429 over HTTP, a redelivery on a bus).
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

#include "core/time.h"
#include "net/pacing.h"

namespace ringcast::engine {

class TenantRate {
 public:
  // per_second 0: off (every take succeeds).
  explicit TenantRate(double per_second, size_t max_tenants = 100'000);

  // One event of `tenant` at `now`: true when it may be taken in. Any thread.
  bool take(std::string_view tenant, MonoTime now);

  // Seconds until a refused tenant has a token again (at least 1), for Retry-After.
  int64_t wait_seconds() const;

  bool enabled() const { return limit_.per_second > 0; }
  uint64_t refused() const;

 private:
  const RateLimit limit_;
  const size_t max_tenants_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, net::TokenBucket> buckets_;
  uint64_t refused_ = 0;
};

}  // namespace ringcast::engine
