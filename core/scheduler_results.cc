// What follows a send (SPEC R4, R7.2, R8, R12.1, R12.10, R12.11): on_result() and a status
// check's answer, finish(), the decision applied (retry or end), the breaker's bookkeeping,
// auto-disable and the backlog it ends.
#include "core/scheduler.h"

#include <algorithm>
#include <cstddef>

#include "core/classify.h"
#include "core/endpoint_rules.h"
#include "core/retry_after.h"
#include "core/scheduler_internal.h"

namespace ringcast {

// Terminal: written once, then the Pending is recycled (the store keeps the record).
void Scheduler::finish(Pending* s, DeliveryStatus st, ErrorCode code, Mutations& m) {
  clear_wait_flags(s->d);
  s->d.status = st;
  if (!code.is_none()) s->d.last_code = code;
  switch (st) {
    case DeliveryStatus::kDelivered:
      ++counters_.delivered;
      break;
    case DeliveryStatus::kFailed:
      ++counters_.failed;
      break;
    case DeliveryStatus::kDead:
      ++counters_.dead;
      break;
    case DeliveryStatus::kUnknown:
      ++counters_.unknown;
      break;
    case DeliveryStatus::kSuperseded:
      ++counters_.superseded;
      break;
    default:
      break;
  }
  if (code.kind == K::kBreakerHoldExpired) ++counters_.hold_expired;
  if (code.kind == K::kDeadlineExceeded) ++counters_.deadline_exceeded;
  if (report_ != nullptr && s == report_for_) {  // the result's own delivery (not its backlog)
    report_->ended_as = st;
    report_for_ = nullptr;  // its record is recycled now
  }
  put(s, false, m);
  order_ended(s, st, m);  // SPEC R13: the next of its key goes (or the key is held)
  free_pending(s);
}

// R12.10: a budget or ceiling that ends a delivery whose latest outcome was UNKNOWN.
DeliveryStatus Scheduler::ended_status(const Delivery& d) {
  return d.last_unknown() ? DeliveryStatus::kUnknown : DeliveryStatus::kFailed;
}

// R12.1: whether the delivery's latest outcome leaves it UNKNOWN.
void Scheduler::note_outcome(Delivery& d, Outcome o) {
  if (o == Outcome::kUnknown) {
    d.flags |= Delivery::kFlagLastUnknown;
  } else {
    d.flags &= static_cast<uint8_t>(~Delivery::kFlagLastUnknown);
  }
}

void Scheduler::clear_wait_flags(Delivery& d) {
  if (d.deferred()) {
    d.flags &= static_cast<uint8_t>(~Delivery::kFlagDeferred);
    --deferred_waiting_;
  }
  if (d.flags & Delivery::kFlagRetryAfterHold) {
    d.flags &= static_cast<uint8_t>(~Delivery::kFlagRetryAfterHold);
    --held_waiting_;
  }
}

// ---- breaker bookkeeping ------------------------------------------------------------------------

void Scheduler::set_tenant_timer(TenantState& t, std::optional<WallTime> at) {
  if (t.timer_ms != 0) {
    tenant_timers_.erase({t.timer_ms, t.index});
    t.timer_ms = 0;
  }
  if (at) {
    // Rounded UP to the millisecond: a key rounded down could be <= now.ms() while `at` is
    // still in the future (same millisecond), and poll() would pop and re-arm it forever.
    int64_t ms = at->ms() + (at->ns() % 1'000'000 > 0 ? 1 : 0);
    t.timer_ms = std::max<int64_t>(ms, 1);
    tenant_timers_.insert({t.timer_ms, t.index});
  }
}

// SPEC R2.3, R4.7: time a queued delivery spent held by the breaker goes into Delivery::held.
// Ready deliveries' next_attempt_at is the time they became due, so the held part of their
// wait is [max(due, hold_since), now].
void Scheduler::account_held(TenantState& t, WallTime hold_since, WallTime now) {
  for (EpState* ep : t.endpoints) {
    if (!ep->policy->use_breaker) continue;
    for (TimerEntry* e = ep->ready.next; e != &ep->ready; e = e->next) {
      Delivery& d = pending_of(e)->d;
      const WallTime from = std::max(d.next_attempt_at, hold_since);
      if (now > from) d.held += now - from;
      d.next_attempt_at = std::max(d.next_attempt_at, now);
    }
  }
}

// R4.7 and the ladder ceilings for deliveries parked behind a breaker that is not closed.
void Scheduler::scan_ceilings(TenantState& t, WallTime now, Mutations& m) {
  const WallTime hold_since = t.breaker.hold_since();
  for (EpState* ep : t.endpoints) {
    if (!ep->policy->use_breaker) continue;
    TimerEntry* e = ep->ready.next;
    while (e != &ep->ready) {
      TimerEntry* next = e->next;
      Pending* s = pending_of(e);
      Delivery& d = s->d;
      const WallTime from = std::max(d.next_attempt_at, hold_since);
      const Duration held_now = d.held + (now > from ? now - from : Duration(0));
      if (held_now >= opts_.breaker.hold_ceiling) {
        d.held = held_now;
        ready_unlink(*ep, s);
        finish(s, ended_status(d), ErrorCode::of(K::kBreakerHoldExpired), m);
      } else if (now > delivery_deadline(d, *ep->policy)) {
        d.held = held_now;
        d.next_attempt_at = now;
        ready_unlink(*ep, s);
        finish(s, ended_status(d), ErrorCode::of(K::kDeadlineExceeded), m);
      }
      e = next;
    }
  }
}

void Scheduler::breaker_changed(TenantState& t, BreakerSnapshot::State before, WallTime hold_since,
                                WallTime now, Mutations& m) {
  using S = BreakerSnapshot::State;
  const S after = t.breaker.state();
  if (before != S::kClosed && after == S::kClosed) account_held(t, hold_since, now);
  if (before == S::kClosed && after == S::kOpen) ++counters_.breaker_opened;
  if (after == S::kHalfOpen || (before == S::kHalfOpen && after == S::kOpen)) {
    scan_ceilings(t, now, m);
  }
  persist_tenant(t, now, m);
  switch (after) {
    case S::kClosed:
      set_tenant_timer(t, std::nullopt);
      break;
    case S::kOpen:
      set_tenant_timer(t, t.breaker.next_transition());
      break;
    case S::kHalfOpen:
      set_tenant_timer(t, now + opts_.breaker_recheck);
      break;
  }
  activate_tenant(t, now);
}

// Timers fire on their millisecond (or a little before): a check this close to the deadline is
// the deadline's.
constexpr Duration kCheckSlack = milliseconds(10);

void Scheduler::on_check_result(const SendCommand& cmd, Pending* s, const TransportResult& r,
                                WallTime started_at, WallTime now, Mutations& m) {
  Delivery& d = s->d;
  EpState* ep = ep_of(d.endpoint);
  if (ep != nullptr) --ep->in_flight;
  if (r.deferred != DeferReason::kNone) {  // never left: no check, nothing recorded
    d.status = DeliveryStatus::kPending;
    d.next_attempt_at = std::max(now, r.not_before);
    schedule_at(s, d.next_attempt_at);
    if (ep != nullptr) activate(*ep, now);
    return;
  }
  auto [rc, fresh] = reconciling_.try_emplace(d.id, Reconcile{started_at, 0});
  (void)fresh;
  const uint32_t index = rc->second.checks++;
  const uint16_t st = r.response_received ? r.http_status : 0;
  // 2xx: the receiver has it — but 202 Accepted says "still processing" (seed 003), like 409
  // and 425; 404: never got it.
  const bool confirmed = st >= 200 && st < 300 && st != 202;
  const bool not_received = st == 404;

  Attempt a;  // every ask is in the history (R12.11)
  a.delivery = d.id;
  a.number = check_record_number(cmd.attempt, index);
  a.ladder = Ladder::kNone;
  a.outcome = confirmed ? Outcome::kSuccess : not_received ? Outcome::kRejected : Outcome::kUnknown;
  a.code = !r.code.is_none() ? r.code : st != 0 ? ErrorCode::http(st) : ErrorCode::of(K::kNetwork);
  a.http_status = st;
  a.request_written = r.request_written;
  a.started_at = started_at;
  a.duration = now - started_at;
  a.timings = r.timings;
  a.response_prefix = r.body_prefix.substr(0, std::min(r.body_prefix.size(), kResponsePrefixBytes));
  m.attempts.push_back(std::move(a));

  const ErrorCode kill = d.last_code;  // a disable or delete while it was out (R8.3)
  if (ep == nullptr || kill.kind == K::kEndpointDisabled || kill.kind == K::kEndpointDeleted) {
    if (confirmed) {
      ++counters_.checks_confirmed;
      note_outcome(d, Outcome::kSuccess);
      finish(s, DeliveryStatus::kDelivered, ErrorCode::none(), m);
    } else {
      finish(s, DeliveryStatus::kDead, ep == nullptr ? ErrorCode::of(K::kEndpointDeleted) : kill,
             m);
    }
    if (ep != nullptr) activate(*ep, now);
    return;
  }
  if (confirmed) {  // the receiver has it: delivered, no second send
    ++counters_.checks_confirmed;
    note_outcome(d, Outcome::kSuccess);
    d.last_http_status = st;
    d.last_code = ErrorCode::none();
    finish(s, DeliveryStatus::kDelivered, ErrorCode::none(), m);
  } else if (not_received) {  // never got it: resent now, on the ladder's budget
    ++counters_.checks_not_received;
    note_outcome(d, Outcome::kRejected);
    reconciling_.erase(rc);
    d.status = DeliveryStatus::kPending;
    d.next_attempt_at = now;
    put(s, false, m);
    schedule_at(s, now);
  } else {  // still processing, or no answer: ask again, up to the deadline
    ++counters_.checks_pending;
    const WallTime deadline = rc->second.since + opts_.reconcile_deadline;
    // The last check is the one at the deadline (the timer may fire it a little early).
    if (now + kCheckSlack >= deadline) {
      ++counters_.reconcile_expired;
      if (report_ != nullptr) report_->reconcile_expired = true;
      finish(s, DeliveryStatus::kUnknown, ErrorCode::of(K::kReconcileExpired), m);
    } else {
      const auto& sched = opts_.reconcile_schedule;
      const Duration pause =
          sched.empty() ? seconds(60) : sched[std::min<size_t>(index + 1, sched.size() - 1)];
      d.status = DeliveryStatus::kPending;
      d.next_attempt_at = std::min(now + pause, deadline);
      put(s, false, m);
      schedule_at(s, d.next_attempt_at);
    }
  }
  activate(*ep, now);
}

ResultReport Scheduler::on_result(const SendCommand& cmd, const TransportResult& r,
                                  WallTime started_at, WallTime now, Mutations& m) {
  ResultReport report;
  report_ = &report;
  take_result(cmd, r, started_at, now, m);
  report_ = nullptr;
  report_for_ = nullptr;
  return report;
}

void Scheduler::take_result(const SendCommand& cmd, const TransportResult& r, WallTime started_at,
                            WallTime now, Mutations& m) {
  if (cmd.inflight_index >= inflight_.size() || inflight_[cmd.inflight_index] == nullptr ||
      inflight_[cmd.inflight_index]->d.id != cmd.delivery ||
      inflight_[cmd.inflight_index]->d.status != DeliveryStatus::kInFlight) {
    ++counters_.stale_results;
    return;
  }
  Pending* s = inflight_[cmd.inflight_index];
  inflight_[cmd.inflight_index] = nullptr;
  inflight_free_.push_back(cmd.inflight_index);
  if (is_orphan(s)) {
    // Its partition was dropped while it was out (cluster mode): its endpoint and tenant are gone,
    // the next owner retries it from the store. Forgotten here, nothing written.
    --orphans_;
    ++counters_.stale_results;
    recycle_pending(s);  // already out of live_ and inflight_count_
    return;
  }
  --inflight_count_;
  report_for_ = s;
  if (cmd.check) {
    on_check_result(cmd, s, r, started_at, now, m);
    return;
  }
  if (r.deferred != DeferReason::kNone) {
    release_unsent(cmd, s, r, now, m);
    return;
  }
  ++counters_.results;

  Delivery& d = s->d;
  const Classification c = classify(r, now);
  ++counters_.outcome[static_cast<int>(c.outcome)];
  report_->outcome = c.outcome;
  // A kill while in flight (R8.3 disable, delete) left its mark in last_code.
  const bool killed =
      d.last_code.kind == K::kEndpointDisabled || d.last_code.kind == K::kEndpointDeleted;
  const ErrorCode kill_code = d.last_code;

  Attempt a;  // SPEC R12.2: every attempt recorded separately
  a.delivery = d.id;
  a.number = cmd.attempt;
  a.ladder = d.test() ? Ladder::kFast : d.ladder();
  a.outcome = c.outcome;
  a.code = c.code;
  a.http_status = c.http_status;
  a.request_written = r.request_written;
  a.started_at = started_at;
  a.duration = now - started_at;
  a.timings = r.timings;
  a.response_prefix = r.body_prefix.substr(0, std::min(r.body_prefix.size(), kResponsePrefixBytes));
  m.attempts.push_back(std::move(a));

  d.last_code = c.code;
  d.last_http_status = c.http_status;
  note_outcome(d, c.outcome);

  EpState* ep = ep_of(d.endpoint);
  if (ep != nullptr) --ep->in_flight;
  const bool success = c.outcome == Outcome::kSuccess;

  if (d.test() || ep == nullptr || killed) {
    // Single-shot tests (R9.3); deliveries of a deleted endpoint; deliveries killed while in
    // flight: they end here, whatever the policy would say.
    if (success) {
      finish(s, DeliveryStatus::kDelivered, ErrorCode::none(), m);
    } else if (d.test()) {
      finish(s, ended_status(d), ErrorCode::none(), m);
    } else {
      finish(s, DeliveryStatus::kDead, killed ? kill_code : ErrorCode::of(K::kEndpointDeleted), m);
    }
    if (ep != nullptr) activate(*ep, now);
    return;
  }

  TenantState& t = *ep->tenant;
  if (ep->policy->use_breaker) {  // SPEC R4.1, R4.4, R4.5
    const auto before = t.breaker.state();
    const WallTime hold_since = t.breaker.hold_since();
    if (t.breaker.record(breaker_signal(c), cmd.probe, now, &d.breaker_mark)) {
      breaker_changed(t, before, hold_since, now, m);
    } else if (cmd.probe && before == BreakerSnapshot::State::kHalfOpen) {
      activate_tenant(t, now);  // an ignored probe: another one may go
    }
  }
  if (c.retry_after && *c.retry_after > Duration::zero()) {
    hold_endpoint(*ep, now + std::min(*c.retry_after, kRetryAfterCap), m);  // SPEC R7.2
  }
  Decision dec = decide(d, c, *ep->policy, now, rng_);
  if (c.outcome == Outcome::kUnknown && dec.kind == Decision::Kind::kRetry) {
    if (ep->cfg.on_unknown == OnUnknown::kReview) {
      // on_unknown = review: never resent after an UNKNOWN: straight to review (R12.10).
      ++counters_.review_ended;
      dec.kind = Decision::Kind::kUnknown;
      dec.code = c.code.is_none() ? ErrorCode::http(c.http_status) : c.code;
    } else if (wants_check(*ep, d)) {
      // R12.11: ask before resending. The next attempt keeps the ladder's place; it waits for
      // the first check instead of the ladder's pause.
      reconciling_[d.id] = Reconcile{now, 0};
      const auto& sched = opts_.reconcile_schedule;
      dec.next_at = now + (sched.empty() ? seconds(5) : sched.front());
    }
  }
  apply_decision(ep, s, dec, now, m);
  activate(*ep, now);
}

// SPEC R2.3: the transport held the send for ringcast's own reasons (pacing, connection limits) and
// never sent it. The lease is released as if it had not been taken: the attempt is not spent,
// nothing is recorded, the breaker and auto-disable see nothing, and the delivery waits until the
// transport said a new try may go.
void Scheduler::release_unsent(const SendCommand& cmd, Pending* s, const TransportResult& r,
                               WallTime now, Mutations& m) {
  Delivery& d = s->d;
  ++counters_.deferred;
  if (d.attempts > 0) --d.attempts;
  if (d.ladder() == Ladder::kSlow) {
    if (d.slow_attempts > 0) --d.slow_attempts;
  } else if (d.fast_attempts > 0) {
    --d.fast_attempts;
  }
  EpState* ep = ep_of(d.endpoint);
  if (ep != nullptr) --ep->in_flight;
  if (cmd.probe && ep != nullptr && ep->policy->use_breaker) {
    ep->tenant->breaker.record(BreakerSignal::kIgnore, true, now);  // the probe slot is free
    activate_tenant(*ep->tenant, now);
  }
  const ErrorCode kill = d.last_code;  // a disable or delete while it was out (R8.3)
  if (ep == nullptr || kill.kind == K::kEndpointDisabled || kill.kind == K::kEndpointDeleted) {
    finish(s, DeliveryStatus::kDead, ep == nullptr ? ErrorCode::of(K::kEndpointDeleted) : kill, m);
    if (ep != nullptr) activate(*ep, now);
    return;
  }
  d.status = DeliveryStatus::kPending;
  d.next_attempt_at = std::max(now, r.not_before);  // the API shows when it will go
  if (r.deferred == DeferReason::kQueueFull && d.next_attempt_at.ms() > ep->host_full_until_ms) {
    ep->host_full_until_ms = d.next_attempt_at.ms();
    arm_endpoint_timer(*ep, ep->host_full_until_ms);
  }
  if (!d.deferred()) {
    d.flags |= Delivery::kFlagDeferred;
    ++deferred_waiting_;
  }
  put(s, false, m);  // the lease, released
  schedule_at(s, d.next_attempt_at);
  activate(*ep, now);
}

void Scheduler::apply_decision(EpState* ep, Pending* s, const Decision& dec, WallTime now,
                               Mutations& m) {
  Delivery& d = s->d;
  d.first_slow_at = dec.first_slow_at;
  if (dec.kind != Decision::Kind::kDelivered && ep != nullptr &&
      ep->cfg.state == EndpointState::kDisabled) {
    // SPEC R8.3: nothing of a disabled endpoint is retried, not even after re-enabling.
    finish(s, DeliveryStatus::kDead, ErrorCode::of(K::kEndpointDisabled), m);
    return;
  }
  switch (dec.kind) {
    case Decision::Kind::kDelivered:
      finish(s, DeliveryStatus::kDelivered, ErrorCode::none(), m);
      return;
    case Decision::Kind::kRetry:
      ++counters_.retries;
      d.status = DeliveryStatus::kPending;
      d.next_attempt_at = dec.next_at;
      if (dec.ladder == Ladder::kSlow) {
        d.flags |= Delivery::kFlagSlowLadder;
      } else {
        d.flags &= static_cast<uint8_t>(~Delivery::kFlagSlowLadder);
      }
      put(s, false, m);
      schedule_at(s, dec.next_at);
      return;
    case Decision::Kind::kFailed:
      finish(s, DeliveryStatus::kFailed, dec.code, m);
      return;
    case Decision::Kind::kDead:
    case Decision::Kind::kUnknown: {  // R12.10: unknown; auto-disable (R8) applies all the same
      const Delivery trigger = d;
      finish(s,
             dec.kind == Decision::Kind::kDead ? DeliveryStatus::kDead : DeliveryStatus::kUnknown,
             dec.code, m);
      if (dec.disable_endpoint && ep != nullptr) disable_endpoint(*ep, dec.code, trigger, now, m);
      return;
    }
  }
}

void Scheduler::disable_endpoint(EpState& ep, ErrorCode reason, const Delivery& trigger,
                                 WallTime now, Mutations& m) {
  if (ep.cfg.state == EndpointState::kDisabled) return;
  ep.cfg = disabled_endpoint(ep.cfg, reason, now);  // SPEC R8.2
  m.endpoints.push_back(ep.cfg);
  ++counters_.endpoints_disabled;
  if (report_ != nullptr) report_->endpoint_disabled = true;
  kill_backlog(ep.cfg.id, ErrorCode::of(K::kEndpointDisabled), m);  // SPEC R8.3
  Notification n = disable_notification(ep.cfg, reason, trigger.id, trigger.attempts, now);
  if (ids_ != nullptr) n.seq = ids_->next_id(static_cast<Partition>(ep.tenant->hash % kPartitions));
  // The owner's e-mail (SPEC R8.4): the recipient and the facts it reports, as they are now;
  // an address the merchant set and has not confirmed gets nothing (SPEC R14).
  if (ep.tenant->owner_email_confirmed) n.owner_email = ep.tenant->owner_email;
  n.endpoint_url = ep.cfg.url;
  n.trigger = trigger.id;
  n.attempts = trigger.attempts;
  n.last_http_status = trigger.last_http_status;
  m.notifications.push_back(std::move(n));  // SPEC R8.4
}

// Every queued (wheel or ready) non-test delivery of the endpoint ends dead with `code`;
// in-flight ones are marked and end when their result comes back. Scans the slab: a rare
// event (R8.3 auto-disable, delete).
void Scheduler::kill_backlog(EndpointId id, ErrorCode code, Mutations& m) {
  // SPEC R13: the endpoint's keys end with its backlog (a blocked one's block too): no
  // release of a next one while they are killed.
  order_drop_blocked(nullptr, id);
  for (const auto& chunk : chunks_) {
    for (uint32_t i = 0; i < opts_.slab_chunk_size; ++i) {
      Pending* s = &chunk[i];
      if (s->d.id == 0 || s->d.endpoint != id || s->d.test() || is_orphan(s)) continue;
      if (s->d.status == DeliveryStatus::kInFlight) {
        s->d.last_code = code;
        continue;
      }
      order_detach(s);
      unqueue(s);
      finish(s, DeliveryStatus::kDead, code, m);
    }
  }
}

}  // namespace ringcast
