// Hierarchical timer wheel for pending deliveries (ISSUE 2 item 9): O(1) schedule and cancel
// through an intrusive entry embedded in the owner, millisecond resolution, a horizon past
// 31 days, and bounded work per advance(). Time is an argument: `now_ms` is passed in.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ringcast {

// Embedded in the owner (e.g. the scheduler's pending-delivery slot). Not copyable while
// linked; the wheel never allocates per timer.
struct TimerEntry {
  TimerEntry* next = nullptr;
  TimerEntry* prev = nullptr;
  int64_t expiry_ms = 0;
  bool linked() const { return prev != nullptr; }
};

class TimerWheel;  // defined by the implementation in timer_wheel.h below this line

}  // namespace ringcast
