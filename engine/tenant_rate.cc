#include "engine/tenant_rate.h"

#include <algorithm>
#include <cmath>
#include <iterator>

namespace ringcast::engine {

TenantRate::TenantRate(double per_second, size_t max_tenants)
    : limit_{per_second > 0 ? per_second : 0,
             static_cast<uint32_t>(std::clamp(per_second, 1.0, 4e9))},
      max_tenants_(max_tenants) {}

bool TenantRate::take(std::string_view tenant, MonoTime now) {
  if (!enabled()) return true;
  std::lock_guard lk(mu_);
  auto it = buckets_.find(std::string(tenant));
  if (it == buckets_.end()) {
    if (buckets_.size() >= max_tenants_) {
      // A bucket that is full again holds nothing worth keeping.
      for (auto b = buckets_.begin(); b != buckets_.end();)
        b = b->second.full(now) ? buckets_.erase(b) : std::next(b);
    }
    if (buckets_.size() >= max_tenants_) {
      ++refused_;
      return false;
    }
    it = buckets_.emplace(std::string(tenant), net::TokenBucket(limit_, now)).first;
  }
  if (it->second.try_take(now)) return true;
  ++refused_;
  return false;
}

int64_t TenantRate::wait_seconds() const {
  if (!enabled()) return 0;
  return std::max<int64_t>(1, static_cast<int64_t>(std::ceil(1.0 / limit_.per_second)));
}

uint64_t TenantRate::refused() const {
  std::lock_guard lk(mu_);
  return refused_;
}

}  // namespace ringcast::engine
