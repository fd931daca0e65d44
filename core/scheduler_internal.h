// Internal to the scheduler's files (core/scheduler.cc, scheduler_results.cc,
// scheduler_admin.cc), not part of core/scheduler.h's interface: the records they share
// (Scheduler::Pending, EpState, TenantState), the TimerEntry marks and the intrusive list
// helpers, in ringcast::scheduler_detail; using-declarations bring them into ringcast.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "core/breaker.h"
#include "core/policy.h"
#include "core/scheduler.h"
#include "core/time.h"
#include "core/timer_wheel.h"
#include "core/types.h"

namespace ringcast {

namespace scheduler_detail {

using K = ErrorCode::Kind;
// TimerEntry::expiry_ms of a pending delivery linked into an endpoint ready queue (not the wheel).
inline constexpr int64_t kReadyMark = std::numeric_limits<int64_t>::min();
// TimerEntry::expiry_ms of an in-flight pending delivery whose partition was dropped
// (drop_partition): its result is ignored and its record recycled then. In-flight ones are never
// linked, so the field is free to carry it.
inline constexpr int64_t kOrphanMark = std::numeric_limits<int64_t>::min() + 1;
// TimerEntry::expiry_ms of a pending delivery waiting behind its ordering key's head (SPEC R13,
// core/order_keys.h): linked into the key's waiting list, in no wheel and no ready queue.
inline constexpr int64_t kWaitMark = std::numeric_limits<int64_t>::min() + 2;

inline Partition partition_of_hash(uint64_t tenant_hash) {
  return static_cast<Partition>(tenant_hash % kPartitions);
}

inline void list_init(TimerEntry* h) {
  h->next = h->prev = h;
}
inline bool list_empty(const TimerEntry* h) {
  return h->next == h;
}

}  // namespace scheduler_detail

using scheduler_detail::K;
using scheduler_detail::kOrphanMark;
using scheduler_detail::kReadyMark;
using scheduler_detail::kWaitMark;
using scheduler_detail::list_empty;
using scheduler_detail::list_init;
using scheduler_detail::partition_of_hash;

// A pending delivery and its timer link: the unit of scheduler memory (there are millions).
// Standard layout with the entry first, so a TimerEntry* from the wheel is the Pending*.
struct Scheduler::Pending {
  TimerEntry te;
  Delivery d;
};
// 104 since Delivery::lease_expiries (96 before; docs/benchmarks.md measures ~110-190 B of RSS
// per pending delivery against a 256 B target).
static_assert(sizeof(Scheduler::Pending) <= 104, "keep a pending delivery under ~100 bytes");
static_assert(std::is_standard_layout_v<Scheduler::Pending>);

struct Scheduler::EpState {
  Endpoint cfg;
  const RetryPolicy* policy = nullptr;
  TenantState* tenant = nullptr;
  TimerEntry ready;  // FIFO of due deliveries (sentinel)
  TimerEntry tests;  // FIFO of due test deliveries (sentinel): they bypass pause and breaker
  uint32_t ready_count = 0, test_count = 0, in_flight = 0;
  bool active = false;        // in Scheduler::active_
  int64_t rate_timer_ms = 0;  // key in rate_timers_ when != 0
  int64_t hold_until_ms = 0;  // the receiver's Retry-After holds the queue until then (R7)
  // A send of it came back queue_full (its host's queue, shared with the host's other
  // endpoints, was full): no new sends until that one's come-back time, so the endpoint does not
  // send its whole in-flight budget into a full queue to have it come back (a lease written and
  // released each). In memory only; not shown, not persisted.
  int64_t host_full_until_ms = 0;
  double tokens = 0;
  WallTime tokens_at;
  bool tokens_init = false;
  EpState() {
    list_init(&ready);
    list_init(&tests);
  }
};

struct Scheduler::TenantState {
  std::string name;
  uint64_t hash = 0;
  uint32_t index = 0;
  bool subscription_active = true;
  std::string owner_email;             // SPEC R8.4
  bool owner_email_confirmed = false;  // SPEC R14: notices go only to a confirmed address
  WallTime owner_email_asked_at;
  Breaker breaker;
  std::vector<EpState*> endpoints;  // creation order
  int64_t timer_ms = 0;             // key in tenant_timers_ when != 0
  explicit TenantState(const BreakerConfig& cfg) : breaker(cfg) {}
};

namespace scheduler_detail {

inline Scheduler::Pending* pending_of(TimerEntry* e) {
  return reinterpret_cast<Scheduler::Pending*>(e);
}

}  // namespace scheduler_detail

using scheduler_detail::pending_of;

}  // namespace ringcast
