// Per-host pacing (SPEC R7, R12.6): a token bucket plus the pause a receiver asked for with
// 429 + Retry-After. Pure arithmetic on MonoTime (time is an argument, STYLE 2).
// Invariant: 0 <= tokens <= burst; an unlimited bucket (rate 0) always has a token.
#pragma once

#include <algorithm>
#include <cstdint>

#include "core/time.h"
#include "core/types.h"

namespace ringcast::net {

class TokenBucket {
 public:
  TokenBucket() = default;
  TokenBucket(RateLimit limit, MonoTime now) { configure(limit, now); }

  void configure(RateLimit limit, MonoTime now) {
    rate_per_s_ = limit.per_second > 0 ? limit.per_second : 0;
    burst_ = std::max<double>(1.0, limit.burst);
    tokens_ = burst_;
    last_ = now;
  }
  bool unlimited() const { return rate_per_s_ <= 0; }
  // The time between two tokens (0 when unlimited).
  Duration interval() const {
    return unlimited() ? Duration(0) : Duration(static_cast<int64_t>(1e9 / rate_per_s_) + 1);
  }
  bool full(MonoTime now) {
    refill(now);
    return unlimited() || tokens_ >= burst_;
  }

  bool try_take(MonoTime now) {
    if (unlimited()) return true;
    refill(now);
    if (tokens_ < 1.0) return false;
    tokens_ -= 1.0;
    return true;
  }

  // When the next token is there (now if one is).
  MonoTime next_token_at(MonoTime now) { return token_at(now, 0); }

  // When the token after `ahead` others is there, if nobody else takes one: where a request
  // queued behind `ahead` requests gets its turn.
  MonoTime token_at(MonoTime now, uint64_t ahead) {
    if (unlimited()) return now;
    refill(now);
    const double need = static_cast<double>(ahead) + 1.0 - tokens_;
    if (need <= 0) return now;
    return now + Duration(static_cast<int64_t>(need / rate_per_s_ * 1e9) + 1);
  }

 private:
  void refill(MonoTime now) {
    if (now <= last_) return;
    const double dt_s = static_cast<double>((now - last_).count()) / 1e9;
    tokens_ = std::min(burst_, tokens_ + dt_s * rate_per_s_);
    last_ = now;
  }

  double rate_per_s_ = 0;
  double burst_ = 1;
  double tokens_ = 1;
  MonoTime last_;
};

}  // namespace ringcast::net
