// Per-tenant circuit breaker (SPEC R4): a bucketed sliding window of delivery outcomes and the
// closed → open → half-open → closed machine. Pure: time is passed in. Invariants: at most one
// probe in flight per half-open cycle; only unavailability (network, timeout, 5xx) counts as
// failure; the window counts deliveries, not attempts (R4.1: a delivery's newer result replaces
// its older sample, through a mark the caller keeps with the delivery); memory is fixed per
// tenant (kBreakerBuckets counters, no timestamp lists).
#pragma once

#include <array>
#include <cstdint>
#include <optional>

#include "core/classify.h"
#include "core/time.h"
#include "core/types.h"

namespace ringcast {

struct BreakerConfig {
  Duration window = minutes(5);         // R4.1 sliding window
  uint32_t min_deliveries = 5;          // R4.1
  uint32_t failure_percent = 80;        // R4.1
  Duration first_pause = minutes(5);    // R4.2
  Duration max_pause = minutes(30);     // R4.2
  Duration recheck = seconds(30);       // R4.3: the others ask again after ~30 s
  Duration hold_ceiling = days(30);     // R4.7
  Duration probe_timeout = minutes(2);  // a probe whose result never came frees the slot
};

// How one finished attempt feeds the window (R4.5).
enum class BreakerSignal : uint8_t {
  kSuccess,  // the receiver answered (2xx, 3xx, 4xx, 429): it is available
  kFailure,  // unavailability: network, timeout, 5xx
  kIgnore,   // nothing reached the receiver for our own reasons (URL check, private_address)
};
BreakerSignal breaker_signal(const Classification& c);

inline constexpr int kBreakerBuckets = 20;  // 20 × 15 s = 5 min

class Breaker {
 public:
  using State = BreakerSnapshot::State;
  enum class Admit : uint8_t { kAllow, kProbe, kHold };

  explicit Breaker(const BreakerConfig& cfg = {}) : cfg_(cfg) {}

  State state() const { return state_; }
  // kAllow when closed; kProbe when half-open and no probe is in flight (or the last one
  // timed out); kHold otherwise (R4.3, R4.6).
  Admit admit(WallTime now) const;
  void on_probe_sent(WallTime now);

  // Moves open → half-open once the pause is over (R4.2). Returns true on a change.
  bool advance(WallTime now);
  // A finished attempt of this tenant. `probe`: it was the half-open probe. Returns true when
  // the state changed (closed → open, half-open → open or closed). `mark`: the delivery's
  // sample mark (0 for none, kept by the caller with the delivery): a sample of the same
  // delivery still in the window is replaced, so each delivery counts once with its latest
  // result (SPEC R4.1); when a sample is taken it is set to mark the new one.
  bool record(BreakerSignal s, bool probe, WallTime now, uint32_t* mark = nullptr);
  // R4.8: back to closed, counters cleared.
  void reset(WallTime now);

  // When advance() has something to do next (the end of the pause), if open.
  std::optional<WallTime> next_transition() const;
  // Start of the current hold episode (the last closed → open); meaningful when not closed.
  WallTime hold_since() const { return opened_at_; }
  WallTime reopen_at() const { return reopen_at_; }
  uint32_t failed_probes() const { return failed_probes_; }
  bool probe_in_flight() const { return probe_in_flight_; }
  Duration current_pause() const;  // the pause after failed_probes_ failures (R4.2)

  // Deliveries in the window, and how many of them failed (their latest result there).
  uint32_t window_total(WallTime now) const;
  uint32_t window_failed(WallTime now) const;

  BreakerSnapshot snapshot() const;
  // A persisted half-open (its probe was lost with the process) becomes open with the pause
  // already over, so a new probe goes at once.
  void restore(const BreakerSnapshot& s, WallTime now);

 private:
  struct Bucket {
    uint32_t total = 0;
    uint32_t failed = 0;
  };
  int64_t epoch_of(WallTime t) const;
  void roll_to(int64_t epoch);
  void clear_window();
  void open(WallTime now, bool new_episode);
  void forget(uint32_t mark);
  uint32_t sum(WallTime now, bool failed) const;

  BreakerConfig cfg_;
  std::array<Bucket, kBreakerBuckets> buckets_{};
  int64_t head_epoch_ = INT64_MIN;  // the newest bucket's epoch
  uint32_t generation_ = 1;         // changes when the window is cleared: older marks are void
  State state_ = State::kClosed;
  bool probe_in_flight_ = false;
  uint32_t failed_probes_ = 0;
  WallTime opened_at_;
  WallTime reopen_at_;
  WallTime probe_sent_at_;
};

}  // namespace ringcast
