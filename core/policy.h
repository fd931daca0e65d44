// Retry policies as data (SPEC R2, R3, R5, R6, R7, R8) and the pure decision "this attempt
// ended so; what next?". Invariant: decide() never schedules an attempt beyond a ladder's
// budget or past a ceiling, never earlier than the ladder's pause, and draws randomness only
// from the Rng passed in.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/classify.h"
#include "core/money.h"
#include "core/result.h"
#include "core/time.h"
#include "core/types.h"

namespace ringcast {

// Deterministic RNG (splitmix64). STYLE 9: jitter comes from a seeded RNG passed in.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, n); n > 0. (Lemire's multiply-shift; the bias is < n / 2^64.)
  uint64_t below(uint64_t n) {
    return static_cast<uint64_t>((static_cast<unsigned __int128>(next()) * n) >> 64);
  }
  // Uniform in [lo, hi] (inclusive).
  int64_t between(int64_t lo, int64_t hi) {
    return lo + static_cast<int64_t>(below(static_cast<uint64_t>(hi - lo) + 1));
  }

 private:
  uint64_t state_;
};

enum class PolicyShape : uint8_t {
  kFixedSchedule,  // smengo (R5): one schedule, every failure class retried on it
  kTwoLadder,      // xhub (R2, R3): fast ladder for failures, slow ladder for money 4xx
};

// What a 410 Gone does (R6, R8.1). The xhub seed knows only "4xx except 429", so its preset
// treats 410 like any other 4xx (money → slow ladder, else FAILED); smengo disables.
enum class GoneAction : uint8_t { kDisableEndpoint, kAsRejected };

struct RetryPolicy {
  std::string name;
  PolicyShape shape = PolicyShape::kFixedSchedule;

  // Fast ladder (two-ladder) or the fixed schedule: pauses[i] is the pause after the
  // (i+1)-th attempt spent on it, so the budget is pauses.size() + 1 attempts (R2.2, R5.1).
  std::vector<Duration> fast_pauses;
  // Slow ladder (two-ladder only, R3.1): slow_pauses[k] is the pause before slow step k+1;
  // one attempt per step, so the slow budget is slow_pauses.size() attempts.
  std::vector<Duration> slow_pauses;
  // ± jitter on every pause, in permille of the pause (R5.2: 100 = ±10 %). 0: exact times.
  uint32_t jitter_permille = 0;

  Duration slow_ceiling{0};      // R3.2: from the first slow step; 0 = none
  Duration absolute_ceiling{0};  // R3.3: since the delivery was created; 0 = none

  // Fixed schedule: a 4xx other than 410/429 is a failure and retried (R6 "other 4xx",
  // smengo); false: FAILED at once. Ignored by the two-ladder shape (money → slow, else FAILED).
  bool retry_rejected = true;
  GoneAction on_gone = GoneAction::kDisableEndpoint;
  bool disable_on_exhaustion = true;  // R8.1: exhausting the budget disables the endpoint
  bool use_breaker = false;           // R4: deliveries under this policy feed and obey the
                                      // tenant's circuit breaker
  MoneyRules money;                   // R3.5; empty: no event is a money event

  uint32_t fast_budget() const { return static_cast<uint32_t>(fast_pauses.size()) + 1; }
  uint32_t slow_budget() const { return static_cast<uint32_t>(slow_pauses.size()); }

  // Presets. smengo: R5.1 schedule, ±10 % jitter, other 4xx retried, 410 and exhaustion
  // disable the endpoint, no breaker, 30-day absolute ceiling (the log's retention, R10.1:
  // it bounds only the otherwise endless subscription-inactive postponement). xhub: R2 fast
  // ladder 1..256 s (10 attempts), R3 slow ladder 15 min..24 h with the money preset, 48 h
  // from the first slow step, 30 days absolute, breaker on, exhaustion → FAILED (no disable).
  static RetryPolicy smengo();
  static RetryPolicy xhub();

  // Budgets fit the Delivery counters (uint8), pauses are positive, jitter ≤ 50 %, names are
  // non-empty, a fixed schedule has no slow ladder.
  Result<void> validate() const;
};

// The delivery's business deadline: min(created + absolute_ceiling, first_slow_at +
// slow_ceiling); WallTime::max() when none applies.
WallTime delivery_deadline(const Delivery& d, const RetryPolicy& p);

// True when the pending attempt of `d` (on d.ladder()) would exceed that ladder's budget.
// The scheduler checks this before leasing, so no path can overspend (e.g. after recovery).
bool budget_spent(const Delivery& d, const RetryPolicy& p);

struct Decision {
  enum class Kind : uint8_t {
    kDelivered,  // 2xx
    kRetry,      // next attempt at `next_at` on `ladder`
    kFailed,     // terminal, manual review (R2.2, R3.3, R3.5 non-money 4xx)
    kDead,       // terminal by the endpoint's fate (R8: 410, exhaustion with auto-disable)
    // Terminal, needs review (R12.10): what would have been kFailed or kDead by a spent budget
    // or a ceiling, when this attempt's outcome was UNKNOWN. disable_endpoint still applies.
    kUnknown,
  };
  Kind kind = Kind::kFailed;
  WallTime next_at;
  Ladder ladder = Ladder::kNone;
  ErrorCode code;                 // the terminal reason (the attempt's code or a ceiling)
  bool disable_endpoint = false;  // R8.1
  WallTime first_slow_at;         // the delivery's value after this decision
};
const char* decision_kind_name(Decision::Kind k);

// One attempt of `d` ended with `c` at `now`. `d`'s counters already include that attempt
// (the scheduler counts an attempt when it leases it), and d.ladder() is the ladder it was
// spent on. Pauses are measured from `now`; Retry-After postpones, never hastens (R7). An
// UNKNOWN outcome (R12.1) that ends the delivery ends it kUnknown, never kFailed (R12.10).
Decision decide(const Delivery& d, const Classification& c, const RetryPolicy& p, WallTime now,
                Rng& rng);

// The presets plus named custom policies. Pointers returned by find() stay valid for the
// registry's lifetime (put() on an existing name overwrites it in place).
class PolicyRegistry {
 public:
  PolicyRegistry();  // holds "smengo" and "xhub"
  Result<void> put(RetryPolicy p);
  const RetryPolicy* find(std::string_view name) const;
  std::vector<std::string> names() const;

 private:
  std::map<std::string, std::unique_ptr<RetryPolicy>, std::less<>> policies_;
};

}  // namespace ringcast
