// Failed authentication slowed down per client address (SPEC R14, docs/security.md "The
// listener"): after `max_failures` failed authentications from one address in a minute, every
// /v1 call from it is answered 429 for the rest of that minute, whatever it carries (answering
// a good credential would tell a guesser which guess was right). Invariants: memory is bounded
// (`max_tracked` addresses; past it an address is not tracked, never another one forgotten
// within its minute); minutes are fixed windows of the wall clock.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <utility>

#include "core/ip_address.h"
#include "core/time.h"

namespace ringcast::api {

class AuthThrottle {
 public:
  // max_failures 0: off.
  explicit AuthThrottle(uint32_t max_failures, size_t max_tracked = 65536)
      : max_failures_(max_failures), max_tracked_(max_tracked) {}

  // Seconds until `ip` may try again (the rest of its minute); 0: go on. Any thread.
  int64_t blocked_for(const IpAddress& ip, WallTime now);
  // One failed authentication from `ip`. Any thread.
  void failed(const IpAddress& ip, WallTime now);

  uint64_t refused() const { return refused_.load(std::memory_order_relaxed); }
  uint64_t failures() const { return failures_.load(std::memory_order_relaxed); }
  size_t tracked() const;

 private:
  using Key = std::pair<IpAddress::Family, std::array<uint8_t, 16>>;
  struct Window {
    int64_t minute = 0;
    uint32_t failures = 0;
  };

  const uint32_t max_failures_;
  const size_t max_tracked_;
  mutable std::mutex mu_;
  std::map<Key, Window> by_ip_;
  // by_ip_.size(), readable without the lock: every request asks blocked_for(), and while no
  // address has failed (the usual case) it answers without taking the mutex.
  std::atomic<size_t> tracked_{0};
  int64_t pruned_minute_ = 0;
  std::atomic<uint64_t> refused_{0};
  std::atomic<uint64_t> failures_{0};
};

}  // namespace ringcast::api
