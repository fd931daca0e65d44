#include "engine/tenant_rate.h"

#include <algorithm>
#include <cmath>

namespace ringcast::engine {

TenantRate::TenantRate(double per_second, size_t max_tenants)
    : per_second_(per_second), burst_(std::max(1.0, per_second)), max_tenants_(max_tenants) {}

void TenantRate::prune(Clock::time_point now) {
  // A bucket idle long enough to be full again holds nothing worth keeping.
  const auto full_after = std::chrono::duration<double>(burst_ / per_second_);
  std::erase_if(buckets_, [&](const auto& kv) { return now - kv.second.at >= full_after; });
}

bool TenantRate::take(std::string_view tenant, Clock::time_point now) {
  if (per_second_ <= 0) return true;
  std::lock_guard lk(mu_);
  auto it = buckets_.find(std::string(tenant));
  if (it == buckets_.end()) {
    if (buckets_.size() >= max_tenants_) prune(now);
    if (buckets_.size() >= max_tenants_) {
      ++refused_;
      return false;
    }
    it = buckets_.emplace(std::string(tenant), Bucket{burst_, now}).first;
  }
  Bucket& b = it->second;
  const double elapsed = std::chrono::duration<double>(now - b.at).count();
  if (elapsed > 0) {
    b.tokens = std::min(burst_, b.tokens + elapsed * per_second_);
    b.at = now;
  }
  if (b.tokens < 1.0) {
    ++refused_;
    return false;
  }
  b.tokens -= 1.0;
  return true;
}

int64_t TenantRate::wait_seconds() const {
  if (per_second_ <= 0) return 0;
  return std::max<int64_t>(1, static_cast<int64_t>(std::ceil(1.0 / per_second_)));
}

uint64_t TenantRate::refused() const {
  std::lock_guard lk(mu_);
  return refused_;
}

}  // namespace ringcast::engine
