// Retry policies (SPEC R2, R3, R5, R6, R7, R8): table-driven from the SPEC tables.
#include "core/policy.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/classify.h"
#include "core/money.h"

namespace ringcast {
namespace {

using K = ErrorCode::Kind;
const WallTime kT0 = WallTime::from_ms(1'767'225'600'000);  // 2026-01-01

TransportResult http(int status, std::string retry_after = "") {
  TransportResult r;
  r.response_received = true;
  r.request_written = true;
  r.connect_attempted = true;
  r.http_status = static_cast<uint16_t>(status);
  r.retry_after = std::move(retry_after);
  return r;
}

TransportResult net_error(ErrorCode code, bool written) {
  TransportResult r;
  r.connect_attempted = true;
  r.request_written = written;
  r.code = code;
  return r;
}

// Mirrors what core/scheduler does around decide(): count the attempt on its ladder when it
// is leased, then apply the decision.
struct Driver {
  RetryPolicy policy;
  Delivery d;
  Rng rng{42};
  WallTime now;

  Driver(const RetryPolicy& p, bool money, WallTime created = kT0) : policy(p), now(created) {
    d.id = 1;
    d.created_at = created;
    d.next_attempt_at = created;
    if (money) d.flags |= Delivery::kFlagMoney;
  }
  // Runs the pending attempt at its due time with `r`; returns the decision.
  Decision attempt(const TransportResult& r) {
    if (d.next_attempt_at > now) now = d.next_attempt_at;
    ++d.attempts;
    if (d.ladder() == Ladder::kSlow)
      ++d.slow_attempts;
    else
      ++d.fast_attempts;
    Classification c = classify(r, now);
    Decision dec = decide(d, c, policy, now, rng);
    d.first_slow_at = dec.first_slow_at;
    if (dec.kind == Decision::Kind::kRetry) {
      d.next_attempt_at = dec.next_at;
      if (dec.ladder == Ladder::kSlow)
        d.flags |= Delivery::kFlagSlowLadder;
      else
        d.flags &= static_cast<uint8_t>(~Delivery::kFlagSlowLadder);
    }
    return dec;
  }
};

// ---- SPEC R2: the fast ladder ----------------------------------------------------------------

TEST(PolicyXhub, FastLadderExactTimes) {
  const RetryPolicy p = RetryPolicy::xhub();
  for (TransportResult failure :
       {http(503), http(500), http(429), net_error(ErrorCode::of(K::kTimeout), true),
        net_error(ErrorCode::network(111), false)}) {
    Driver drv(p, /*money=*/false);
    // Attempt 1 immediately; attempt n+1 after 2^(n-1) s (R2.1).
    const int64_t expected_pause_s[] = {1, 2, 4, 8, 16, 32, 64, 128, 256};
    WallTime t = kT0;
    for (int n = 1; n <= 9; ++n) {
      Decision dec = drv.attempt(failure);
      ASSERT_EQ(dec.kind, Decision::Kind::kRetry) << "attempt " << n;
      EXPECT_EQ(dec.ladder, Ladder::kFast);
      t = t + seconds(expected_pause_s[n - 1]);
      EXPECT_EQ(dec.next_at, t) << "attempt " << n;
    }
    // Pauses sum to 511 s ≈ 8.5 min (R2.2).
    EXPECT_EQ(t - kT0, seconds(511));
    Decision last = drv.attempt(failure);
    // Budget of 10 spent: FAILED, or UNKNOWN when the last outcome was (a timeout after the
    // request was written, SPEC R12.10).
    const bool unknown = classify(failure, kT0).outcome == Outcome::kUnknown;
    EXPECT_EQ(last.kind, unknown ? Decision::Kind::kUnknown : Decision::Kind::kFailed);
    EXPECT_FALSE(last.disable_endpoint);  // xhub: manual review, no auto-disable
    EXPECT_EQ(drv.d.attempts, 10);
    EXPECT_EQ(drv.d.fast_attempts, 10);
    EXPECT_EQ(drv.d.slow_attempts, 0);
  }
}

TEST(PolicyXhub, FastLadderFailureCodeIsTheAttemptsCode) {
  Driver drv(RetryPolicy::xhub(), false);
  Decision dec;
  for (int i = 0; i < 10; ++i) dec = drv.attempt(http(503));
  EXPECT_EQ(dec.kind, Decision::Kind::kFailed);
  EXPECT_EQ(dec.code, ErrorCode::http(503));
}

// SPEC R12.10: a budget spent on an UNKNOWN outcome (502, R12.1) ends UNKNOWN with that code;
// a definitive last outcome after earlier UNKNOWN ones ends FAILED.
TEST(PolicyXhub, ABudgetEndingOnAnUnknownOutcomeEndsUnknown) {
  Driver drv(RetryPolicy::xhub(), false);
  Decision dec;
  for (int i = 0; i < 10; ++i) dec = drv.attempt(http(502));
  EXPECT_EQ(dec.kind, Decision::Kind::kUnknown);
  EXPECT_EQ(dec.code, ErrorCode::http(502));
  EXPECT_FALSE(dec.disable_endpoint);

  Driver mixed(RetryPolicy::xhub(), false);
  for (int i = 0; i < 9; ++i) dec = mixed.attempt(http(502));
  dec = mixed.attempt(http(503));
  EXPECT_EQ(dec.kind, Decision::Kind::kFailed);
}

// Auto-disable on exhaustion (R8.1) still applies when the delivery ends UNKNOWN; a 410 is a
// definitive answer: dead, as before.
TEST(PolicySmengo, ExhaustionOnUnknownEndsUnknownAndStillDisables) {
  Driver drv(RetryPolicy::smengo(), false);
  Decision dec;
  const TransportResult timeout = net_error(ErrorCode::of(K::kTimeout), true);
  for (uint32_t i = 0; i < RetryPolicy::smengo().fast_budget(); ++i) dec = drv.attempt(timeout);
  EXPECT_EQ(dec.kind, Decision::Kind::kUnknown);
  EXPECT_TRUE(dec.disable_endpoint);
  Driver gone(RetryPolicy::smengo(), false);
  dec = gone.attempt(http(410));
  EXPECT_EQ(dec.kind, Decision::Kind::kDead);
}

TEST(PolicyXhub, SuccessAnywhereDelivers) {
  Driver drv(RetryPolicy::xhub(), true);
  drv.attempt(http(503));
  drv.attempt(http(404));  // money → slow
  Decision dec = drv.attempt(http(204));
  EXPECT_EQ(dec.kind, Decision::Kind::kDelivered);
  EXPECT_TRUE(dec.code.is_none());
}

// ---- SPEC R3: the slow ladder ----------------------------------------------------------------

TEST(PolicyXhub, SlowLadderExactTimes) {
  Driver drv(RetryPolicy::xhub(), /*money=*/true);
  const Duration pauses[] = {minutes(15), hours(1), hours(4), hours(12), hours(24)};
  WallTime t = kT0;
  for (int k = 0; k < 5; ++k) {
    Decision dec = drv.attempt(http(400));
    ASSERT_EQ(dec.kind, Decision::Kind::kRetry) << "step " << k;
    EXPECT_EQ(dec.ladder, Ladder::kSlow);
    EXPECT_EQ(dec.first_slow_at, kT0);  // counted from the first slow step (R3.2)
    t = t + pauses[k];
    EXPECT_EQ(dec.next_at, t) << "step " << k;
  }
  EXPECT_EQ(t - kT0, minutes(41 * 60 + 15));  // ≈ 41 h window
  Decision last = drv.attempt(http(400));
  EXPECT_EQ(last.kind, Decision::Kind::kFailed);
  EXPECT_EQ(last.code, ErrorCode::http(400));
  EXPECT_EQ(drv.d.attempts, 6);  // the first (fast) attempt + 5 slow steps
  EXPECT_EQ(drv.d.fast_attempts, 1);
  EXPECT_EQ(drv.d.slow_attempts, 5);
}

TEST(PolicyXhub, SlowCeilingCountsFromFirstSlowStepNotCreation) {
  // A delivery that waited five days (breaker hold, no address) before its first 4xx still
  // gets the whole slow ladder (the seed's example).
  const WallTime created = kT0 - days(5);
  Driver drv(RetryPolicy::xhub(), true, created);
  drv.now = kT0;
  drv.d.next_attempt_at = kT0;
  int steps = 0;
  Decision dec;
  while ((dec = drv.attempt(http(422))).kind == Decision::Kind::kRetry) ++steps;
  EXPECT_EQ(steps, 5);
  EXPECT_EQ(drv.d.first_slow_at, kT0);
  EXPECT_EQ(dec.kind, Decision::Kind::kFailed);
  EXPECT_EQ(dec.code, ErrorCode::http(422));
}

TEST(PolicyXhub, SlowCeiling48hFromFirstSlowStep) {
  const RetryPolicy p = RetryPolicy::xhub();
  struct Row {
    Duration since_first_slow;  // how long ago the first slow step was
    uint8_t slow_done;          // slow steps already taken (this attempt included)
    bool retried;
  };
  // The next pause is slow_pauses[slow_done]; the step is allowed while first + 48 h is not
  // passed.
  const Row rows[] = {
      {hours(23), 4, true},                     // +24 h → 47 h
      {hours(24), 4, true},                     // +24 h → exactly 48 h
      {hours(24) + milliseconds(1), 4, false},  // 48 h + 1 ms
      {hours(36), 3, true},                     // +12 h → 48 h
      {hours(40), 3, false},                    // +12 h → 52 h
      {hours(47) + minutes(46), 0, false},      // +15 min → 48 h 01 min
      {hours(47) + minutes(45), 0, true},       // +15 min → 48 h
  };
  for (const Row& row : rows) {
    Delivery d;
    d.created_at = kT0 - days(3);
    d.flags = Delivery::kFlagMoney | Delivery::kFlagSlowLadder;
    d.first_slow_at = kT0 - row.since_first_slow;
    d.fast_attempts = 1;
    d.slow_attempts = row.slow_done;
    d.attempts = static_cast<uint16_t>(1 + row.slow_done);
    Rng rng(1);
    Decision dec = decide(d, classify(http(400), kT0), p, kT0, rng);
    if (row.retried) {
      EXPECT_EQ(dec.kind, Decision::Kind::kRetry) << to_ms(row.since_first_slow);
      EXPECT_LE(dec.next_at, d.first_slow_at + hours(48));
    } else {
      EXPECT_EQ(dec.kind, Decision::Kind::kFailed) << to_ms(row.since_first_slow);
      EXPECT_EQ(dec.code, ErrorCode::of(K::kDeadlineExceeded));
    }
  }
}

TEST(PolicyXhub, AbsoluteCeiling30DaysSinceCreation) {
  const RetryPolicy p = RetryPolicy::xhub();
  struct Row {
    Duration age;
    TransportResult r;
    bool retried;
  };
  const Row rows[] = {
      {days(29), http(400), true},                 // +15 min slow
      {days(30) - minutes(15), http(400), true},   // lands exactly on 30 d
      {days(30) - minutes(14), http(400), false},  // would pass 30 d
      {days(30) - seconds(1), http(503), true},    // +1 s fast → exactly 30 d
      {days(30), http(503), false},                // fast too
  };
  for (const Row& row : rows) {
    Delivery d;
    d.created_at = kT0 - row.age;
    d.flags = Delivery::kFlagMoney;
    d.fast_attempts = 1;
    d.attempts = 1;
    Rng rng(1);
    Decision dec = decide(d, classify(row.r, kT0), p, kT0, rng);
    EXPECT_EQ(dec.kind, row.retried ? Decision::Kind::kRetry : Decision::Kind::kFailed)
        << to_ms(row.age);
    if (!row.retried) {
      EXPECT_EQ(dec.code, ErrorCode::of(K::kDeadlineExceeded));
    }
  }
}

TEST(PolicyXhub, SeparateBudgets) {
  // Nine fast failures, then the money 4xx: the slow ladder is whole (R3.4).
  Driver drv(RetryPolicy::xhub(), true);
  for (int i = 0; i < 9; ++i) ASSERT_EQ(drv.attempt(http(503)).kind, Decision::Kind::kRetry);
  EXPECT_EQ(drv.d.fast_attempts, 9);
  WallTime before = std::max(drv.now, drv.d.next_attempt_at);
  Decision dec = drv.attempt(http(409));  // fast attempt 10 answered 4xx → slow step 1
  ASSERT_EQ(dec.kind, Decision::Kind::kRetry);
  EXPECT_EQ(dec.ladder, Ladder::kSlow);
  EXPECT_EQ(dec.next_at, before + minutes(15));
  EXPECT_EQ(drv.d.fast_attempts, 10);
  // Four more slow steps do not spend fast attempts, and fast is already spent: a 5xx on a
  // slow step now ends it (the fast budget is exhausted), a 4xx keeps the slow ladder going.
  for (int k = 0; k < 4; ++k) {
    dec = drv.attempt(http(409));
    ASSERT_EQ(dec.kind, Decision::Kind::kRetry) << k;
    EXPECT_EQ(dec.ladder, Ladder::kSlow);
  }
  EXPECT_EQ(drv.d.fast_attempts, 10);
  EXPECT_EQ(drv.d.slow_attempts, 4);
  dec = drv.attempt(http(503));
  EXPECT_EQ(dec.kind, Decision::Kind::kFailed);
  EXPECT_EQ(drv.d.slow_attempts, 5);
}

TEST(PolicyXhub, SlowStepsDoNotSpendFastAttempts) {
  Driver drv(RetryPolicy::xhub(), true);
  // 4xx: five slow steps, each answered 4xx except the last one answered 503.
  for (int k = 0; k < 5; ++k) ASSERT_EQ(drv.attempt(http(400)).kind, Decision::Kind::kRetry);
  EXPECT_EQ(drv.d.fast_attempts, 1);
  EXPECT_EQ(drv.d.slow_attempts, 4);
  WallTime before = drv.now;
  Decision dec = drv.attempt(http(503));  // slow step 5 answered 5xx → fast ladder resumes
  ASSERT_EQ(dec.kind, Decision::Kind::kRetry);
  EXPECT_EQ(dec.ladder, Ladder::kFast);
  EXPECT_EQ(dec.next_at - drv.now, seconds(1));  // after fast attempt 1: +1 s
  EXPECT_GE(drv.now, before);
  // Nine more fast attempts remain (10 in all on the fast ladder) — unless the 48 h ceiling
  // from the first slow step comes first; the fast ladder is short, so it does not.
  int fast_retries = 0;
  while ((dec = drv.attempt(http(503))).kind == Decision::Kind::kRetry) ++fast_retries;
  EXPECT_EQ(fast_retries, 8);
  EXPECT_EQ(drv.d.fast_attempts, 10);
  EXPECT_EQ(dec.kind, Decision::Kind::kFailed);
  EXPECT_EQ(dec.code, ErrorCode::http(503));
}

// ---- SPEC R3.5: money vs non-money, every listed type and status ---------------------------

struct MoneyRow {
  const char* type;
  const char* payload;
  bool money;
};

const MoneyRow kMoneyTable[] = {
    {"payment.status_changed", R"({"status":"paid"})", true},
    {"payment.status_changed", R"({"status":"settled"})", true},
    {"payment.status_changed", R"({"status":"refunded"})", true},
    {"payment.status_changed", R"({"status":"amount_mismatch"})", false},
    {"payment.status_changed", R"({"status":"expired"})", false},
    {"payment.status_changed", R"({"status":"cancelled"})", false},
    {"payment.status_changed", R"({"status":"failed"})", false},
    {"payment.status_changed", R"({"status":"pending"})", false},
    {"payment.status_changed", R"({"payment_id":"p1"})", false},         // no status
    {"payment.status_changed", R"({"status":"PAID"})", false},           // exact values
    {"payment.status_changed", R"({"meta":{"status":"paid"}})", false},  // top-level only
    {"payment.status_changed", R"({"status":["paid"]})", false},
    // Truncated JSON: a scanner reads the value before the damage (intake validates JSON).
    {"payment.status_changed", R"({"status":"paid")", true},
    {"withdrawal.status_changed", R"({"status":"completed"})", true},
    {"withdrawal.status_changed", R"({"status":"failed"})", false},
    {"withdrawal.status_changed", R"({"status":"paid"})", false},
    {"exchange.status_changed", R"({"status":"completed"})", true},
    {"exchange.status_changed", R"({"status":"cancelled"})", false},
    {"refund.completed", R"({})", true},
    {"refund.completed", R"(not json)", true},  // the type alone decides
    {"refund.reversed", R"({"status":"whatever"})", true},
    {"refund.rejected", R"({"status":"completed"})", false},
    {"refund.failed", R"({})", false},
    {"subscription.status_changed", R"({"status":"paid"})", false},
    {"kyc.status_changed", R"({"status":"completed"})", false},
    {"gateway.status_changed", R"({"status":"completed"})", false},
    {"payment.delivery_proof_reminder", R"({"status":"paid"})", false},
    {"payment.status_changed.v2", R"({"status":"paid"})", false},
};

TEST(MoneyRules, XhubPresetTable) {
  const MoneyRules rules = MoneyRules::xhub_default();
  for (const MoneyRow& row : kMoneyTable) {
    EXPECT_EQ(rules.is_money(row.type, row.payload), row.money) << row.type << " " << row.payload;
  }
}

TEST(PolicyXhub, MoneyVsNonMoneyForEveryStatus) {
  const RetryPolicy p = RetryPolicy::xhub();
  const int statuses[] = {400, 401, 403, 404, 405, 409, 410, 413, 415, 422, 429, 451, 499};
  for (const MoneyRow& row : kMoneyTable) {
    const bool money = p.money.is_money(row.type, row.payload);
    ASSERT_EQ(money, row.money) << row.type << " " << row.payload;
    for (int s : statuses) {
      Driver drv(p, money);
      Decision dec = drv.attempt(http(s));
      SCOPED_TRACE(std::string(row.type) + " " + row.payload + " " + std::to_string(s));
      if (s == 429) {  // SPEC R2: 429 is a delivery failure → fast ladder, money or not
        EXPECT_EQ(dec.kind, Decision::Kind::kRetry);
        EXPECT_EQ(dec.ladder, Ladder::kFast);
        EXPECT_EQ(dec.next_at, kT0 + seconds(1));
      } else if (money) {  // SPEC R3: slow ladder
        EXPECT_EQ(dec.kind, Decision::Kind::kRetry);
        EXPECT_EQ(dec.ladder, Ladder::kSlow);
        EXPECT_EQ(dec.next_at, kT0 + minutes(15));
      } else {  // SPEC R3.5: FAILED at once, no retry
        EXPECT_EQ(dec.kind, Decision::Kind::kFailed);
        EXPECT_EQ(dec.code, s == 410 ? ErrorCode::of(K::kGone) : ErrorCode::http(s));
      }
      EXPECT_FALSE(dec.disable_endpoint);  // xhub never auto-disables
    }
    // 5xx, 3xx and network failures are the fast ladder for every event.
    for (TransportResult r :
         {http(500), http(503), http(302), net_error(ErrorCode::of(K::kTimeout), true)}) {
      Driver drv(p, money);
      Decision dec = drv.attempt(r);
      EXPECT_EQ(dec.kind, Decision::Kind::kRetry);
      EXPECT_EQ(dec.ladder, Ladder::kFast);
    }
  }
}

// ---- SPEC R5: the smengo schedule ---------------------------------------------------------------

TEST(PolicySmengo, ScheduleAndJitterBounds) {
  const RetryPolicy p = RetryPolicy::smengo();
  const Duration pauses[] = {seconds(5), minutes(5), minutes(30), hours(2),
                             hours(5),   hours(10),  hours(10)};
  Rng rng(2024);
  constexpr int kSamples = 10'000;
  for (int n = 1; n <= 7; ++n) {
    const Duration pause = pauses[n - 1];
    const Duration lo = pause - pause / 10, hi = pause + pause / 10;
    Duration min = Duration::max(), max = Duration::min();
    long double sum = 0;
    for (int i = 0; i < kSamples; ++i) {
      Delivery d;
      d.created_at = kT0;
      d.attempts = static_cast<uint16_t>(n);
      d.fast_attempts = static_cast<uint8_t>(n);
      Decision dec = decide(d, classify(http(500), kT0), p, kT0, rng);
      ASSERT_EQ(dec.kind, Decision::Kind::kRetry);
      const Duration got = dec.next_at - kT0;
      ASSERT_GE(got, lo) << "attempt " << n;
      ASSERT_LE(got, hi) << "attempt " << n;
      min = std::min(min, got);
      max = std::max(max, got);
      sum += static_cast<long double>(got.count());
    }
    // Uniform over ±10 %: the extremes are reached closely and the mean is centred.
    const double spread = static_cast<double>((hi - lo).count());
    EXPECT_LT(static_cast<double>((min - lo).count()), spread * 0.005) << n;
    EXPECT_LT(static_cast<double>((hi - max).count()), spread * 0.005) << n;
    const double mean = static_cast<double>(sum / kSamples);
    EXPECT_NEAR(mean / static_cast<double>(pause.count()), 1.0, 0.003) << n;
  }
}

TEST(PolicySmengo, EightAttemptsThenDeadAndDisable) {
  Driver drv(RetryPolicy::smengo(), false);
  const Duration pauses[] = {seconds(5), minutes(5), minutes(30), hours(2),
                             hours(5),   hours(10),  hours(10)};
  Duration total{0};
  for (int n = 1; n <= 7; ++n) {
    WallTime at = std::max(drv.now, drv.d.next_attempt_at);
    Decision dec = drv.attempt(http(500));
    ASSERT_EQ(dec.kind, Decision::Kind::kRetry);
    const Duration got = dec.next_at - at;
    EXPECT_GE(got, pauses[n - 1] - pauses[n - 1] / 10);
    EXPECT_LE(got, pauses[n - 1] + pauses[n - 1] / 10);
    total += got;
  }
  EXPECT_GT(total, hours(25));  // ~28 h
  EXPECT_LT(total, hours(31));
  Decision last = drv.attempt(http(500));
  EXPECT_EQ(last.kind, Decision::Kind::kDead);  // SPEC R8.1: exhaustion
  EXPECT_TRUE(last.disable_endpoint);
  EXPECT_EQ(last.code, ErrorCode::http(500));
  EXPECT_EQ(drv.d.attempts, 8);
}

TEST(PolicySmengo, ResponseTable) {
  // SPEC R6 table under smengo.
  const RetryPolicy p = RetryPolicy::smengo();
  struct Row {
    TransportResult r;
    Decision::Kind kind;
    ErrorCode code;  // for terminal rows
    bool disable;
  };
  const Row rows[] = {
      {http(200), Decision::Kind::kDelivered, {}, false},
      {http(299), Decision::Kind::kDelivered, {}, false},
      {http(301), Decision::Kind::kRetry, {}, false},
      {http(410), Decision::Kind::kDead, ErrorCode::of(K::kGone), true},
      {http(429), Decision::Kind::kRetry, {}, false},
      {http(500), Decision::Kind::kRetry, {}, false},
      {http(400), Decision::Kind::kRetry, {}, false},  // other 4xx retried
      {http(404), Decision::Kind::kRetry, {}, false},
      {http(422), Decision::Kind::kRetry, {}, false},
      {net_error(ErrorCode::of(K::kTimeout), true), Decision::Kind::kRetry, {}, false},
      {net_error(ErrorCode::network(111), false), Decision::Kind::kRetry, {}, false},
      {net_error(ErrorCode::of(K::kDnsFailed), false), Decision::Kind::kRetry, {}, false},
      {net_error(ErrorCode::of(K::kPrivateAddress), false), Decision::Kind::kRetry, {}, false},
  };
  for (const Row& row : rows) {
    Driver drv(p, false);
    Decision dec = drv.attempt(row.r);
    EXPECT_EQ(dec.kind, row.kind) << row.r.http_status << " " << row.r.code.str();
    EXPECT_EQ(dec.disable_endpoint, row.disable);
    if (row.kind == Decision::Kind::kDead) {
      EXPECT_EQ(dec.code, row.code);
    }
    if (row.kind == Decision::Kind::kRetry) {
      EXPECT_GE(dec.next_at, kT0 + seconds(5) - milliseconds(500));
      EXPECT_LE(dec.next_at, kT0 + seconds(5) + milliseconds(500));
    }
  }
}

TEST(PolicyXhub, GoneFollowsTheXhubSeed) {
  // The xhub seed knows "4xx except 429" only: 410 on a money event → slow ladder, on any
  // other event → FAILED (code gone); never an auto-disable.
  const RetryPolicy p = RetryPolicy::xhub();
  Driver money(p, true);
  Decision dec = money.attempt(http(410));
  EXPECT_EQ(dec.kind, Decision::Kind::kRetry);
  EXPECT_EQ(dec.ladder, Ladder::kSlow);
  Driver plain(p, false);
  dec = plain.attempt(http(410));
  EXPECT_EQ(dec.kind, Decision::Kind::kFailed);
  EXPECT_EQ(dec.code, ErrorCode::of(K::kGone));
  EXPECT_FALSE(dec.disable_endpoint);
  // Configurable: the R6 reading (410 disables) for an xhub-shaped policy.
  RetryPolicy strict = p;
  strict.on_gone = GoneAction::kDisableEndpoint;
  Driver s(strict, true);
  dec = s.attempt(http(410));
  EXPECT_EQ(dec.kind, Decision::Kind::kDead);
  EXPECT_TRUE(dec.disable_endpoint);
}

// ---- SPEC R7: Retry-After -------------------------------------------------------------------

TEST(PolicyRetryAfter, PostponesNeverHastensCappedAtOneHour) {
  const RetryPolicy p = RetryPolicy::xhub();
  struct Row {
    int status;
    const char* ra;
    int fast_done;    // attempts spent on the fast ladder, this one included
    Duration expect;  // next_at - now
  };
  const Row rows[] = {
      {503, "120", 1, seconds(120)},  // postpones the +1 s step
      {503, "0", 1, seconds(1)},      // never hastens
      {503, "0", 9, seconds(256)},
      {503, "10", 9, seconds(256)},                            // the ladder is later
      {429, "7200", 1, hours(1)},                              // capped
      {429, "garbage", 2, seconds(2)},                         // ignored
      {503, "Thu, 01 Jan 2026 00:10:00 GMT", 1, minutes(10)},  // HTTP-date
      {503, "Wed, 31 Dec 2025 23:00:00 GMT", 1, seconds(1)},   // past date
      {500, "", 3, seconds(4)},
  };
  for (const Row& row : rows) {
    Delivery d;
    d.created_at = kT0;
    d.fast_attempts = static_cast<uint8_t>(row.fast_done);
    d.attempts = static_cast<uint16_t>(row.fast_done);
    Rng rng(3);
    Decision dec = decide(d, classify(http(row.status, row.ra), kT0), p, kT0, rng);
    ASSERT_EQ(dec.kind, Decision::Kind::kRetry) << row.ra;
    EXPECT_EQ(dec.next_at - kT0, row.expect) << row.status << " " << row.ra;
  }
}

TEST(PolicySmengo, RetryAfterUsesMaxOfScheduleAndHeader) {
  const RetryPolicy p = RetryPolicy::smengo();
  Rng rng(9);
  for (int i = 0; i < 100; ++i) {
    Delivery d;
    d.created_at = kT0;
    d.fast_attempts = 1;
    d.attempts = 1;
    Decision dec = decide(d, classify(http(429, "60"), kT0), p, kT0, rng);
    EXPECT_EQ(dec.next_at, kT0 + seconds(60));  // 60 s > 5 s ± 10 %
    d.fast_attempts = 2;                        // next pause 5 min ± 10 % > 60 s
    dec = decide(d, classify(http(429, "60"), kT0), p, kT0, rng);
    EXPECT_GE(dec.next_at, kT0 + seconds(270));
  }
}

// ---- custom policies, registry, helpers -------------------------------------------------------

TEST(PolicyRegistry, PresetsAndCustom) {
  PolicyRegistry reg;
  ASSERT_NE(reg.find("smengo"), nullptr);
  ASSERT_NE(reg.find("xhub"), nullptr);
  EXPECT_EQ(reg.find("nope"), nullptr);
  EXPECT_EQ(reg.find("xhub")->fast_budget(), 10u);
  EXPECT_EQ(reg.find("xhub")->slow_budget(), 5u);
  EXPECT_EQ(reg.find("smengo")->fast_budget(), 8u);

  // The smengo shape in milliseconds, for tests and users.
  RetryPolicy fast = RetryPolicy::smengo();
  fast.name = "smengo-ms";
  fast.fast_pauses = {milliseconds(5), milliseconds(10), milliseconds(20)};
  ASSERT_TRUE(reg.put(fast).ok());
  const RetryPolicy* got = reg.find("smengo-ms");
  ASSERT_NE(got, nullptr);
  EXPECT_EQ(got->fast_budget(), 4u);
  // put() on an existing name overwrites in place: the pointer stays valid.
  fast.fast_pauses = {milliseconds(1)};
  ASSERT_TRUE(reg.put(fast).ok());
  EXPECT_EQ(reg.find("smengo-ms"), got);
  EXPECT_EQ(got->fast_budget(), 2u);

  RetryPolicy bad = fast;
  bad.fast_pauses = {milliseconds(0)};
  EXPECT_FALSE(reg.put(bad).ok());
  bad = fast;
  bad.name = "";
  EXPECT_FALSE(reg.put(bad).ok());
  bad = fast;
  bad.slow_pauses = {seconds(1)};  // fixed schedule with a slow ladder
  EXPECT_FALSE(reg.put(bad).ok());
  bad = fast;
  bad.fast_pauses.assign(300, milliseconds(1));
  EXPECT_FALSE(reg.put(bad).ok());
  bad = fast;
  bad.jitter_permille = 600;
  EXPECT_FALSE(reg.put(bad).ok());
}

TEST(PolicyCustom, MillisecondLadder) {
  RetryPolicy p = RetryPolicy::smengo();
  p.name = "ms";
  p.jitter_permille = 0;
  p.fast_pauses = {milliseconds(10), milliseconds(20)};
  Driver drv(p, false);
  EXPECT_EQ(drv.attempt(http(500)).next_at, kT0 + milliseconds(10));
  EXPECT_EQ(drv.attempt(http(500)).next_at, kT0 + milliseconds(30));
  Decision dec = drv.attempt(http(500));
  EXPECT_EQ(dec.kind, Decision::Kind::kDead);
  EXPECT_TRUE(dec.disable_endpoint);
}

TEST(PolicyHelpers, BudgetAndDeadline) {
  const RetryPolicy x = RetryPolicy::xhub();
  Delivery d;
  d.created_at = kT0;
  EXPECT_EQ(delivery_deadline(d, x), kT0 + days(30));
  d.first_slow_at = kT0 + days(1);
  EXPECT_EQ(delivery_deadline(d, x), kT0 + days(3));
  d.first_slow_at = kT0 + days(29);
  EXPECT_EQ(delivery_deadline(d, x), kT0 + days(30));
  RetryPolicy none = x;
  none.absolute_ceiling = Duration(0);
  none.slow_ceiling = Duration(0);
  EXPECT_EQ(delivery_deadline(d, none), WallTime::max());

  d = Delivery{};
  d.fast_attempts = 9;
  EXPECT_FALSE(budget_spent(d, x));
  d.fast_attempts = 10;
  EXPECT_TRUE(budget_spent(d, x));
  d.flags |= Delivery::kFlagSlowLadder;  // the pending attempt is a slow step
  EXPECT_FALSE(budget_spent(d, x));
  d.slow_attempts = 5;
  EXPECT_TRUE(budget_spent(d, x));
}

TEST(PolicyUnknown, UnknownOutcomesAreRetriedOnTheFastLadder) {
  // SPEC R12.1: a timeout after the request was written, a 502, a lease_expired — the
  // receiver may have acted; the ladder retries them (with the same delivery id).
  const RetryPolicy p = RetryPolicy::xhub();
  Classification c;
  c.outcome = Outcome::kUnknown;
  c.code = ErrorCode::of(K::kLeaseExpired);
  Delivery d;
  d.created_at = kT0;
  d.flags = Delivery::kFlagMoney;
  d.fast_attempts = 2;
  Rng rng(1);
  Decision dec = decide(d, c, p, kT0, rng);
  EXPECT_EQ(dec.kind, Decision::Kind::kRetry);
  EXPECT_EQ(dec.ladder, Ladder::kFast);
  EXPECT_EQ(dec.next_at, kT0 + seconds(2));
}

// ---- the JSON scanner ---------------------------------------------------------------------------

TEST(JsonStringField, Table) {
  struct Row {
    const char* json;
    const char* path;
    const char* want;  // nullptr: nullopt
  };
  const Row rows[] = {
      {R"({"status":"paid"})", "status", "paid"},
      {R"(  { "a" : 1 , "status" : "paid" } )", "status", "paid"},
      {R"({"a":{"status":"x"},"status":"paid"})", "status", "paid"},
      {R"({"a":[1,{"status":"x"},"s"],"status":"paid"})", "status", "paid"},
      {R"({"data":{"object":{"status":"settled"}}})", "data.object.status", "settled"},
      {R"({"data":{"object":{"status":"settled"}}})", "data.status", nullptr},
      {R"({"data":"x"})", "data.status", nullptr},
      {R"({"status":"pa\"id"})", "status", "pa\"id"},
      {R"({"status":"p\u0061id"})", "status", "paid"},
      {R"({"st\u0061tus":"paid"})", "status", "paid"},
      {R"({"status":"\ud83d\ude00"})", "status", "\xF0\x9F\x98\x80"},
      {R"({"status":"\ud83d"})", "status", nullptr},
      {R"({"status":1})", "status", nullptr},
      {R"({"status":null})", "status", nullptr},
      {R"({"status":true,"x":"paid"})", "status", nullptr},
      {R"({"status":"paid","status":"x"})", "status", "paid"},
      {R"(["status","paid"])", "status", nullptr},
      {R"({"a":"b")", "status", nullptr},
      {R"({"a":)", "status", nullptr},
      {R"({"a":"unterminated)", "status", nullptr},
      {R"({})", "status", nullptr},
      {"", "status", nullptr},
      {R"({"a":-1.5e+3,"b":false,"c":null,"status":"ok"})", "status", "ok"},
      {"{\"a\":\"\x01\",\"status\":\"ok\"}", "status", nullptr},  // control char in string
  };
  for (const Row& row : rows) {
    std::optional<std::string> got = json_string_field(row.json, row.path);
    if (row.want == nullptr) {
      EXPECT_FALSE(got.has_value()) << row.json << " → " << got.value_or("");
    } else {
      ASSERT_TRUE(got.has_value()) << row.json;
      EXPECT_EQ(*got, row.want) << row.json;
    }
  }
}

TEST(JsonStringField, DeepNestingIsBounded) {
  std::string deep;
  for (int i = 0; i < 100'000; ++i) deep += "[";
  std::string json = R"({"a":)" + deep + R"(,"status":"paid"})";
  EXPECT_FALSE(json_string_field(json, "status").has_value());
  std::string ok_json = R"({"a":[[[[1]]]],"status":"paid"})";
  EXPECT_EQ(json_string_field(ok_json, "status").value_or(""), "paid");
}

TEST(MoneyRules, CustomRuleSet) {
  MoneyRules rules;
  rules.rules = {{"invoice.paid", "", {}}, {"transfer.updated", "data.state", {"done", "settled"}}};
  EXPECT_TRUE(rules.is_money("invoice.paid", "{}"));
  EXPECT_TRUE(rules.is_money("transfer.updated", R"({"data":{"state":"done"}})"));
  EXPECT_FALSE(rules.is_money("transfer.updated", R"({"data":{"state":"open"}})"));
  EXPECT_FALSE(rules.is_money("transfer.updated", R"({"state":"done"})"));
  EXPECT_FALSE(rules.is_money("payment.status_changed", R"({"status":"paid"})"));
}

}  // namespace
}  // namespace ringcast
