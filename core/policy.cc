#include "core/policy.h"

#include <algorithm>
#include <limits>

#include "core/retry_after.h"

namespace ringcast {
namespace {

using K = ErrorCode::Kind;

Duration jittered(Duration pause, uint32_t permille, Rng& rng) {
  if (permille == 0 || pause <= Duration(0)) return pause;
  // Exact integer bounds: pause ± floor(pause * permille / 1000).
  const int64_t ns = pause.count();
  const int64_t span = static_cast<int64_t>((static_cast<__int128>(ns) * permille) / 1000);
  return Duration(ns + rng.between(-span, span));
}

bool is_set(WallTime t) {
  return t != WallTime();
}

Decision terminal(Decision::Kind k, ErrorCode code, const Delivery& d) {
  Decision out;
  out.kind = k;
  out.code = code;
  out.first_slow_at = d.first_slow_at;
  return out;
}

// The attempt's code, or a generic one when the classification carried none.
ErrorCode code_of(const Classification& c) {
  if (!c.code.is_none()) return c.code;
  if (c.http_status != 0) return ErrorCode::http(c.http_status);
  return ErrorCode::of(K::kNetwork);
}

Decision exhausted(const Delivery& d, const Classification& c, const RetryPolicy& p) {
  Decision out = terminal(p.disable_on_exhaustion ? Decision::Kind::kDead : Decision::Kind::kFailed,
                          code_of(c), d);
  out.disable_endpoint = p.disable_on_exhaustion;  // SPEC R8.1
  return out;
}

// Schedules the next attempt at now + pause on `ladder`, then applies Retry-After (R7) and
// the ceilings (R3.2, R3.3).
Decision retry_at(const Delivery& d, const Classification& c, const RetryPolicy& p, WallTime now,
                  Duration pause, Ladder ladder, WallTime first_slow_at, Rng& rng) {
  WallTime at = now + jittered(pause, p.jitter_permille, rng);
  at = apply_retry_after(at, c.retry_after, now);  // SPEC R7.2, R7.3
  Delivery probe = d;
  probe.first_slow_at = first_slow_at;
  if (at > delivery_deadline(probe, p)) {
    Decision out = terminal(Decision::Kind::kFailed, ErrorCode::of(K::kDeadlineExceeded), d);
    out.first_slow_at = first_slow_at;
    return out;
  }
  Decision out;
  out.kind = Decision::Kind::kRetry;
  out.next_at = at;
  out.ladder = ladder;
  out.first_slow_at = first_slow_at;
  return out;
}

Decision fast_step(const Delivery& d, const Classification& c, const RetryPolicy& p, WallTime now,
                   Rng& rng) {
  const uint32_t n = d.fast_attempts;  // attempts spent on this ladder, this one included
  if (n >= p.fast_budget()) return exhausted(d, c, p);  // SPEC R2.2, R5.1, R8.1
  const size_t idx = n == 0 ? 0 : n - 1;
  return retry_at(d, c, p, now, p.fast_pauses[idx], Ladder::kFast, d.first_slow_at, rng);
}

Decision slow_step(const Delivery& d, const Classification& c, const RetryPolicy& p, WallTime now,
                   Rng& rng) {
  const uint32_t k = d.slow_attempts;  // slow steps already taken
  if (k >= p.slow_budget()) {
    // SPEC R3.3: the slow ladder is spent → FAILED (auto-disable is a fixed-schedule rule).
    return terminal(Decision::Kind::kFailed, code_of(c), d);
  }
  // SPEC R3.2: the 48 h ceiling counts from the first slow step, not from creation.
  const WallTime first = is_set(d.first_slow_at) ? d.first_slow_at : now;
  return retry_at(d, c, p, now, p.slow_pauses[k], Ladder::kSlow, first, rng);
}

}  // namespace

RetryPolicy RetryPolicy::smengo() {
  RetryPolicy p;
  p.name = "smengo";
  p.shape = PolicyShape::kFixedSchedule;
  // SPEC R5.1: immediately, +5 s, +5 min, +30 min, +2 h, +5 h, +10 h, +10 h.
  p.fast_pauses = {seconds(5), minutes(5), minutes(30), hours(2), hours(5), hours(10), hours(10)};
  p.jitter_permille = 100;  // SPEC R5.2: ±10 %
  p.absolute_ceiling = days(30);
  p.retry_rejected = true;  // SPEC R6: other 4xx retried
  p.on_gone = GoneAction::kDisableEndpoint;
  p.disable_on_exhaustion = true;  // SPEC R8.1
  p.use_breaker = false;
  return p;
}

RetryPolicy RetryPolicy::xhub() {
  RetryPolicy p;
  p.name = "xhub";
  p.shape = PolicyShape::kTwoLadder;
  // SPEC R2.1: +1, +2, +4, ..., +256 s; R2.2: 10 attempts.
  for (int i = 0; i < 9; ++i) p.fast_pauses.push_back(seconds(int64_t{1} << i));
  // SPEC R3.1: 15 min, 1 h, 4 h, 12 h, 24 h.
  p.slow_pauses = {minutes(15), hours(1), hours(4), hours(12), hours(24)};
  p.jitter_permille = 0;
  p.slow_ceiling = hours(48);           // SPEC R3.2
  p.absolute_ceiling = days(30);        // SPEC R3.3
  p.retry_rejected = false;             // SPEC R3.5: non-money 4xx → FAILED
  p.on_gone = GoneAction::kAsRejected;  // the xhub seed: "4xx except 429"
  p.disable_on_exhaustion = false;      // SPEC R2.2: FAILED, manual review
  p.use_breaker = true;                 // SPEC R4
  p.money = MoneyRules::xhub_default();
  return p;
}

Result<void> RetryPolicy::validate() const {
  if (name.empty()) return make_error(Errc::kInvalidArgument, "policy name is empty", "name");
  if (fast_pauses.size() + 1 > std::numeric_limits<uint8_t>::max()) {
    return make_error(Errc::kInvalidArgument, "fast ladder longer than 254 steps", "schedule");
  }
  if (slow_pauses.size() > std::numeric_limits<uint8_t>::max()) {
    return make_error(Errc::kInvalidArgument, "slow ladder longer than 255 steps", "slow");
  }
  if (shape == PolicyShape::kFixedSchedule && !slow_pauses.empty()) {
    return make_error(Errc::kInvalidArgument, "a fixed schedule has no slow ladder", "slow");
  }
  for (Duration d : fast_pauses) {
    if (d <= Duration(0))
      return make_error(Errc::kInvalidArgument, "pause must be > 0", "schedule");
  }
  for (Duration d : slow_pauses) {
    if (d <= Duration(0)) return make_error(Errc::kInvalidArgument, "pause must be > 0", "slow");
  }
  if (jitter_permille > 500) {
    return make_error(Errc::kInvalidArgument, "jitter above 50 %", "jitter");
  }
  if (slow_ceiling < Duration(0) || absolute_ceiling < Duration(0)) {
    return make_error(Errc::kInvalidArgument, "negative ceiling", "ceiling");
  }
  for (const MoneyRule& r : money.rules) {
    if (r.event_type.empty()) {
      return make_error(Errc::kInvalidArgument, "money rule without event type", "money");
    }
    if (!r.field_path.empty() && r.values.empty()) {
      return make_error(Errc::kInvalidArgument, "money rule field without values", "money");
    }
  }
  return ok();
}

WallTime delivery_deadline(const Delivery& d, const RetryPolicy& p) {
  WallTime deadline = WallTime::max();
  if (p.absolute_ceiling > Duration(0))
    deadline = std::min(deadline, d.created_at + p.absolute_ceiling);
  if (p.slow_ceiling > Duration(0) && is_set(d.first_slow_at)) {
    deadline = std::min(deadline, d.first_slow_at + p.slow_ceiling);
  }
  return deadline;
}

bool budget_spent(const Delivery& d, const RetryPolicy& p) {
  if (d.ladder() == Ladder::kSlow) return d.slow_attempts >= p.slow_budget();
  return d.fast_attempts >= p.fast_budget();
}

const char* decision_kind_name(Decision::Kind k) {
  switch (k) {
    case Decision::Kind::kDelivered:
      return "delivered";
    case Decision::Kind::kRetry:
      return "retry";
    case Decision::Kind::kFailed:
      return "failed";
    case Decision::Kind::kDead:
      return "dead";
    case Decision::Kind::kUnknown:
      return "unknown";
  }
  return "?";
}

static Decision decide_outcome(const Delivery& d, const Classification& c, const RetryPolicy& p,
                               WallTime now, Rng& rng);

Decision decide(const Delivery& d, const Classification& c, const RetryPolicy& p, WallTime now,
                Rng& rng) {
  Decision out = decide_outcome(d, c, p, now, rng);
  // SPEC R12.10: "FAILED may be a lie" — the budget or a ceiling ended on an UNKNOWN outcome.
  if (c.outcome == Outcome::kUnknown &&
      (out.kind == Decision::Kind::kFailed || out.kind == Decision::Kind::kDead)) {
    out.kind = Decision::Kind::kUnknown;
  }
  return out;
}

static Decision decide_outcome(const Delivery& d, const Classification& c, const RetryPolicy& p,
                               WallTime now, Rng& rng) {
  if (c.outcome == Outcome::kSuccess) {
    Decision out = terminal(Decision::Kind::kDelivered, ErrorCode::none(), d);
    return out;
  }
  const bool rejected = c.outcome == Outcome::kRejected;
  const bool gone = c.code.kind == K::kGone;
  if (rejected && gone && p.on_gone == GoneAction::kDisableEndpoint) {
    // SPEC R6, R8.1: 410 is terminal, the endpoint is disabled at once.
    Decision out = terminal(Decision::Kind::kDead, c.code, d);
    out.disable_endpoint = true;
    return out;
  }
  if (p.shape == PolicyShape::kFixedSchedule) {
    if (rejected && !p.retry_rejected) return terminal(Decision::Kind::kFailed, code_of(c), d);
    return fast_step(d, c, p, now, rng);  // SPEC R5, R6: every failure retried on the schedule
  }
  if (rejected) {
    // SPEC R3: a money event answered 4xx (not 429, which classify makes retryable) goes to
    // the slow ladder; any other event's 4xx is FAILED at once (R3.5).
    if (d.money() && p.slow_budget() > 0) return slow_step(d, c, p, now, rng);
    return terminal(Decision::Kind::kFailed, code_of(c), d);
  }
  return fast_step(d, c, p, now, rng);  // SPEC R2: 5xx, 429, network, timeout, unknown
}

PolicyRegistry::PolicyRegistry() {
  for (RetryPolicy p : {RetryPolicy::smengo(), RetryPolicy::xhub()}) {
    std::string name = p.name;
    policies_.emplace(std::move(name), std::make_unique<RetryPolicy>(std::move(p)));
  }
}

Result<void> PolicyRegistry::put(RetryPolicy p) {
  if (Result<void> v = p.validate(); !v) return v;
  auto it = policies_.find(p.name);
  if (it != policies_.end()) {
    *it->second = std::move(p);
  } else {
    std::string name = p.name;
    policies_.emplace(std::move(name), std::make_unique<RetryPolicy>(std::move(p)));
  }
  return ok();
}

const RetryPolicy* PolicyRegistry::find(std::string_view name) const {
  auto it = policies_.find(name);
  return it == policies_.end() ? nullptr : it->second.get();
}

std::vector<std::string> PolicyRegistry::names() const {
  std::vector<std::string> out;
  for (const auto& [name, p] : policies_) out.push_back(name);
  return out;
}

}  // namespace ringcast
