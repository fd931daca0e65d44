// The production clock: CLOCK_MONOTONIC and CLOCK_REALTIME, read once per loop turn.
#pragma once

#include "core/time.h"

namespace ringcast::net {

class SystemClock final : public Clock {
 public:
  MonoTime mono_now() override;
  WallTime wall_now() override;
};

}  // namespace ringcast::net
