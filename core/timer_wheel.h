// Hierarchical timer wheel for pending deliveries (ISSUE 2 item 9): O(1) schedule and cancel
// through an intrusive entry embedded in the owner, millisecond resolution, a horizon past
// 31 days, and bounded work per advance(). Time is an argument: `now_ms` is passed in.
//
// API contract (the implementation may add to it, not change it):
//   TimerWheel wheel(now_ms);
//   wheel.schedule(&entry, expiry_ms);   // O(1); an expiry in the past fires on the next advance
//   wheel.cancel(&entry);                // O(1); a no-op when not linked
//   size_t n = wheel.advance(now_ms, max_fire, [](TimerEntry* e) { ... });
//                                        // fires due entries in expiry order (ms resolution),
//                                        // at most max_fire; entries are unlinked before the
//                                        // callback, which may schedule/cancel freely.
//   wheel.size(); wheel.next_expiry_ms(); // the latter: a lower bound, for the loop's sleep
#pragma once

#include <cstddef>
#include <cstdint>

namespace ringcast {

struct TimerEntry {
  TimerEntry* next = nullptr;
  TimerEntry* prev = nullptr;
  int64_t expiry_ms = 0;
  bool linked() const { return prev != nullptr; }
};

}  // namespace ringcast
