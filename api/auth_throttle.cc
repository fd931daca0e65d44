#include "api/auth_throttle.h"

namespace ringcast::api {

namespace {

int64_t minute_of(WallTime t) {
  return t.ms() / 60'000;
}

}  // namespace

int64_t AuthThrottle::blocked_for(const IpAddress& ip, WallTime now) {
  if (max_failures_ == 0 || tracked_.load(std::memory_order_relaxed) == 0) return 0;
  std::lock_guard lk(mu_);
  auto it = by_ip_.find({ip.family, ip.bytes});
  if (it == by_ip_.end() || it->second.minute != minute_of(now) ||
      it->second.failures < max_failures_)
    return 0;
  refused_.fetch_add(1, std::memory_order_relaxed);
  const int64_t left_ms = 60'000 - now.ms() % 60'000;
  return (left_ms + 999) / 1000;
}

void AuthThrottle::failed(const IpAddress& ip, WallTime now) {
  if (max_failures_ == 0) return;
  failures_.fetch_add(1, std::memory_order_relaxed);
  const int64_t minute = minute_of(now);
  std::lock_guard lk(mu_);
  if (minute != pruned_minute_) {  // once a minute: what belongs to an earlier one goes
    std::erase_if(by_ip_, [minute](const auto& kv) { return kv.second.minute != minute; });
    pruned_minute_ = minute;
    tracked_.store(by_ip_.size(), std::memory_order_relaxed);
  }
  auto it = by_ip_.find({ip.family, ip.bytes});
  if (it == by_ip_.end()) {
    if (by_ip_.size() >= max_tracked_) return;
    it = by_ip_.emplace(Key{ip.family, ip.bytes}, Window{minute, 0}).first;
  }
  if (it->second.minute != minute) it->second = Window{minute, 0};
  ++it->second.failures;
  tracked_.store(by_ip_.size(), std::memory_order_relaxed);
}

size_t AuthThrottle::tracked() const {
  std::lock_guard lk(mu_);
  return by_ip_.size();
}

}  // namespace ringcast::api
