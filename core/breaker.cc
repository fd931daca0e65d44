#include "core/breaker.h"

#include <algorithm>

namespace ringcast {
namespace {
// A sample mark: bit 31 the sample failed, bits 24-30 the window generation (1..127), bits
// 0-23 the bucket epoch modulo 2^24 (15 s buckets: compared only within the 20-bucket window).
constexpr uint32_t kMarkFailed = 1u << 31;
constexpr uint32_t kMarkEpochMask = (1u << 24) - 1;
constexpr uint32_t kGenerations = 127;
uint32_t mark_of(uint32_t generation, int64_t epoch, bool failed) {
  return (failed ? kMarkFailed : 0) | (generation << 24) |
         (static_cast<uint32_t>(epoch) & kMarkEpochMask);
}
size_t slot(int64_t epoch) {
  return static_cast<size_t>(((epoch % kBreakerBuckets) + kBreakerBuckets) % kBreakerBuckets);
}
}  // namespace

BreakerSignal breaker_signal(const Classification& c) {
  if (c.counts_as_unavailability) return BreakerSignal::kFailure;  // SPEC R4.5
  if (c.provably_not_received) return BreakerSignal::kIgnore;
  return BreakerSignal::kSuccess;  // the receiver answered; 4xx never opens it (R4.5)
}

int64_t Breaker::epoch_of(WallTime t) const {
  const int64_t width = std::max<int64_t>(1, to_ms(cfg_.window) / kBreakerBuckets);
  const int64_t ms = t.ms();
  return ms >= 0 ? ms / width : (ms - width + 1) / width;
}

void Breaker::roll_to(int64_t epoch) {
  if (head_epoch_ == INT64_MIN || epoch - head_epoch_ >= kBreakerBuckets) {
    buckets_.fill({});
    head_epoch_ = epoch;
    return;
  }
  while (head_epoch_ < epoch) {
    ++head_epoch_;
    buckets_[slot(head_epoch_)] = {};
  }
}

void Breaker::clear_window() {
  buckets_.fill({});
  head_epoch_ = INT64_MIN;
  generation_ = generation_ % kGenerations + 1;  // 1..127: every mark taken so far is void
}

// Takes back the sample `mark` stands for, if it is still in the window.
void Breaker::forget(uint32_t mark) {
  if (mark == 0 || head_epoch_ == INT64_MIN) return;
  if (((mark >> 24) & 0x7f) != generation_) return;
  const uint32_t age = (static_cast<uint32_t>(head_epoch_) - mark) & kMarkEpochMask;
  if (age >= kBreakerBuckets) return;  // rolled out of the window already
  Bucket& b = buckets_[slot(head_epoch_ - age)];
  if (b.total > 0) --b.total;
  if ((mark & kMarkFailed) != 0 && b.failed > 0) --b.failed;
}

uint32_t Breaker::sum(WallTime now, bool failed) const {
  if (head_epoch_ == INT64_MIN) return 0;
  const int64_t now_epoch = std::max(epoch_of(now), head_epoch_);
  uint32_t total = 0;
  for (int64_t e = now_epoch - kBreakerBuckets + 1; e <= head_epoch_; ++e) {
    if (e < head_epoch_ - kBreakerBuckets + 1) continue;
    const Bucket& b = buckets_[slot(e)];
    total += failed ? b.failed : b.total;
  }
  return total;
}

uint32_t Breaker::window_total(WallTime now) const {
  return sum(now, false);
}
uint32_t Breaker::window_failed(WallTime now) const {
  return sum(now, true);
}

Duration Breaker::current_pause() const {
  // SPEC R4.2: 5 min, doubled after each failed probe, capped at 30 min.
  Duration p = cfg_.first_pause;
  for (uint32_t i = 0; i < failed_probes_ && p < cfg_.max_pause; ++i) p *= 2;
  return std::min(p, cfg_.max_pause);
}

void Breaker::open(WallTime now, bool new_episode) {
  if (new_episode) opened_at_ = now;
  state_ = State::kOpen;
  probe_in_flight_ = false;
  reopen_at_ = now + current_pause();
}

Breaker::Admit Breaker::admit(WallTime now) const {
  switch (state_) {
    case State::kClosed:
      return Admit::kAllow;
    case State::kOpen:
      return Admit::kHold;
    case State::kHalfOpen:
      if (!probe_in_flight_) return Admit::kProbe;
      if (now - probe_sent_at_ >= cfg_.probe_timeout) return Admit::kProbe;
      return Admit::kHold;
  }
  return Admit::kHold;
}

void Breaker::on_probe_sent(WallTime now) {
  probe_in_flight_ = true;
  probe_sent_at_ = now;
}

bool Breaker::advance(WallTime now) {
  if (state_ == State::kOpen && now >= reopen_at_) {
    state_ = State::kHalfOpen;  // SPEC R4.2
    probe_in_flight_ = false;
    return true;
  }
  return false;
}

bool Breaker::record(BreakerSignal s, bool probe, WallTime now, uint32_t* mark) {
  if (s == BreakerSignal::kIgnore) {
    if (probe && state_ == State::kHalfOpen) probe_in_flight_ = false;  // try another probe
    return false;
  }
  if (state_ == State::kClosed) {
    int64_t e = epoch_of(now);
    if (head_epoch_ != INT64_MIN) e = std::max(e, head_epoch_);  // a clock step back
    roll_to(e);
    if (mark != nullptr) forget(*mark);  // SPEC R4.1: one sample per delivery, its latest
    Bucket& b = buckets_[slot(head_epoch_)];
    ++b.total;
    if (s == BreakerSignal::kFailure) ++b.failed;
    if (mark != nullptr) *mark = mark_of(generation_, head_epoch_, s == BreakerSignal::kFailure);
    if (s != BreakerSignal::kFailure) return false;
    const uint32_t total = window_total(now), failed = window_failed(now);
    // SPEC R4.1: ≥ 5 deliveries in the window and ≥ 80 % of them failed.
    if (total >= cfg_.min_deliveries &&
        uint64_t{failed} * 100 >= uint64_t{cfg_.failure_percent} * total) {
      failed_probes_ = 0;
      open(now, /*new_episode=*/true);
      return true;
    }
    return false;
  }
  if (!probe || state_ != State::kHalfOpen) return false;  // stragglers do not move it
  if (s == BreakerSignal::kSuccess) {
    reset(now);  // SPEC R4.4: closed, counters reset
    return true;
  }
  ++failed_probes_;  // SPEC R4.4: open again, pause doubled
  open(now, /*new_episode=*/false);
  return true;
}

void Breaker::reset(WallTime) {
  state_ = State::kClosed;
  probe_in_flight_ = false;
  failed_probes_ = 0;
  clear_window();
  opened_at_ = WallTime();
  reopen_at_ = WallTime();
}

std::optional<WallTime> Breaker::next_transition() const {
  if (state_ == State::kOpen) return reopen_at_;
  return std::nullopt;
}

BreakerSnapshot Breaker::snapshot() const {
  BreakerSnapshot s;
  s.state = state_;
  s.failed_probes = failed_probes_;
  s.opened_at = opened_at_;
  s.reopen_at = reopen_at_;
  return s;
}

void Breaker::restore(const BreakerSnapshot& s, WallTime now) {
  clear_window();
  failed_probes_ = s.failed_probes;
  opened_at_ = s.opened_at;
  reopen_at_ = s.reopen_at;
  probe_in_flight_ = false;
  state_ = s.state;
  if (state_ == State::kHalfOpen) {
    state_ = State::kOpen;
    reopen_at_ = now;
  }
  if (state_ == State::kClosed) {
    opened_at_ = WallTime();
    reopen_at_ = WallTime();
  }
}

}  // namespace ringcast
