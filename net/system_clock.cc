#include "net/system_clock.h"

#include <time.h>

namespace ringcast::net {

namespace {
int64_t read_ns(clockid_t id) {
  timespec ts{};
  ::clock_gettime(id, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}
}  // namespace

MonoTime SystemClock::mono_now() { return MonoTime::from_ns(read_ns(CLOCK_MONOTONIC)); }
WallTime SystemClock::wall_now() { return WallTime::from_ns(read_ns(CLOCK_REALTIME)); }

}  // namespace ringcast::net
