// Time as an argument (STYLE 2, 3): MonoTime for I/O deadlines inside one process, WallTime
// for everything persisted or promised to users (ladders, ceilings, the delivery log). The
// two do not convert into each other. Core code never reads a clock; the loop reads both once
// per turn and passes them down.
#pragma once

#include <chrono>
#include <compare>
#include <cstdint>

namespace ringcast {

using Duration = std::chrono::nanoseconds;
using std::chrono::hours;
using std::chrono::microseconds;
using std::chrono::milliseconds;
using std::chrono::minutes;
using std::chrono::seconds;
using days = std::chrono::duration<int64_t, std::ratio<86400>>;

template <class Tag>
class TimePoint {
 public:
  constexpr TimePoint() = default;
  static constexpr TimePoint from_ns(int64_t ns) { return TimePoint(Duration(ns)); }
  static constexpr TimePoint from_ms(int64_t ms) { return TimePoint(milliseconds(ms)); }
  static constexpr TimePoint max() { return TimePoint(Duration::max()); }
  constexpr int64_t ns() const { return since_origin_.count(); }
  constexpr int64_t ms() const {
    return std::chrono::duration_cast<milliseconds>(since_origin_).count();
  }
  constexpr Duration since_origin() const { return since_origin_; }

  constexpr TimePoint operator+(Duration d) const { return TimePoint(since_origin_ + d); }
  constexpr TimePoint operator-(Duration d) const { return TimePoint(since_origin_ - d); }
  constexpr Duration operator-(TimePoint o) const { return since_origin_ - o.since_origin_; }
  constexpr TimePoint& operator+=(Duration d) {
    since_origin_ += d;
    return *this;
  }
  constexpr auto operator<=>(const TimePoint&) const = default;

 private:
  constexpr explicit TimePoint(Duration d) : since_origin_(d) {}
  Duration since_origin_{0};
};

struct MonoTag {};
struct WallTag {};
// Monotonic time since an arbitrary origin (CLOCK_MONOTONIC in production).
using MonoTime = TimePoint<MonoTag>;
// Wall time since the Unix epoch (CLOCK_REALTIME in production).
using WallTime = TimePoint<WallTag>;

inline constexpr int64_t to_ms(Duration d) {
  return std::chrono::duration_cast<milliseconds>(d).count();
}

// The outside implements this (net/ has the system clock); tests use ManualClock.
class Clock {
 public:
  virtual ~Clock() = default;
  virtual MonoTime mono_now() = 0;
  virtual WallTime wall_now() = 0;
};

// A clock that moves only when told to. Both time lines advance together.
class ManualClock final : public Clock {
 public:
  explicit ManualClock(WallTime wall_start = WallTime::from_ms(1'767'225'600'000))  // 2026-01-01
      : wall_(wall_start) {}
  MonoTime mono_now() override { return mono_; }
  WallTime wall_now() override { return wall_; }
  void advance(Duration d) {
    mono_ += d;
    wall_ += d;
  }
  // Wall clock steps (NTP) without monotonic time moving.
  void step_wall(Duration d) { wall_ += d; }

 private:
  MonoTime mono_ = MonoTime::from_ns(1'000'000'000);
  WallTime wall_;
};

}  // namespace ringcast
