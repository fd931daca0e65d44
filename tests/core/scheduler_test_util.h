// What the scheduler's tests and its benchmark share: a fixed start time, ids allocated in
// sequence per call, a 2xx/4xx/5xx answer with a response, and the millisecond smengo ladder
// (three attempts, 10 and 20 ms apart, no jitter) the tests register as "smengo-ms".
#pragma once

#include <cstdint>

#include "core/policy.h"
#include "core/scheduler.h"

namespace ringcast::test {

inline const WallTime kSchedT0 = WallTime::from_ms(1'767'225'600'000);  // 2026-01-01

struct SeqIds : IdAllocator {
  uint64_t n = 0;
  uint64_t next_id(Partition p) override { return make_id(p, ++n); }
};

inline RetryPolicy smengo_ms() {
  RetryPolicy ms = RetryPolicy::smengo();
  ms.name = "smengo-ms";
  ms.jitter_permille = 0;
  ms.fast_pauses = {milliseconds(10), milliseconds(20)};  // 3 attempts
  return ms;
}

}  // namespace ringcast::test
