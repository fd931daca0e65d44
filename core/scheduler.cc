// The shard scheduler's core (SPEC R2, R5.3, R6, R7, R9, R12.2, R12.6): the pending-delivery
// slab, lookups, the ready queues, holds and pacing, intake and replay, and poll(): what is due
// and leased for sending. Results: core/scheduler_results.cc; admin: core/scheduler_admin.cc.
#include "core/scheduler.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>

#include "core/check.h"
#include "core/classify.h"
#include "core/endpoint_rules.h"
#include "core/fanout.h"
#include "core/scheduler_internal.h"

namespace ringcast {

namespace {
void list_push_back(TimerEntry* h, TimerEntry* e) {
  e->prev = h->prev;
  e->next = h;
  h->prev->next = e;
  h->prev = e;
}
void list_unlink(TimerEntry* e) {
  e->prev->next = e->next;
  e->next->prev = e->prev;
  e->next = e->prev = nullptr;
}
}  // namespace

Scheduler::Scheduler(SchedulerOptions opts, const PolicyRegistry& policies, uint64_t rng_seed,
                     WallTime now)
    : opts_(opts), policies_(policies), rng_(rng_seed), now_(now), wheel_(now.ms()) {
  if (opts_.slab_chunk_size == 0) opts_.slab_chunk_size = 1;
  if (opts_.fairness_cap == 0) opts_.fairness_cap = 1;
  if (opts_.default_max_in_flight == 0) opts_.default_max_in_flight = 1;
}

Scheduler::~Scheduler() = default;

// ---- slab -------------------------------------------------------------------------------------

Scheduler::Pending* Scheduler::alloc_pending() {
  if (free_ == nullptr) {
    const uint32_t n = opts_.slab_chunk_size;
    chunks_.push_back(std::make_unique<Pending[]>(n));
    Pending* chunk = chunks_.back().get();
    for (uint32_t i = n; i-- > 0;) {
      chunk[i].te.next = free_;
      free_ = &chunk[i].te;
    }
  }
  Pending* s = pending_of(free_);
  free_ = s->te.next;
  s->te = TimerEntry{};
  s->d = Delivery{};
  ++live_;
  return s;
}

void Scheduler::free_pending(Pending* s) {
  recycle_pending(s);
  --live_;
}

void Scheduler::recycle_pending(Pending* s) {
  RC_CHECK(!s->te.linked());
  if (!reconciling_.empty()) reconciling_.erase(s->d.id);
  s->d.id = 0;
  s->te.expiry_ms = 0;
  s->te.prev = nullptr;
  s->te.next = free_;
  free_ = &s->te;
}

// ---- lookups ----------------------------------------------------------------------------------

Scheduler::EpState* Scheduler::ep_of(EndpointId id) const {
  // One-entry cache: consecutive lookups are mostly for the same endpoint.
  if (id == last_ep_id_ && last_ep_ != nullptr) return last_ep_;
  auto it = endpoints_.find(id);
  if (it == endpoints_.end()) return nullptr;
  last_ep_id_ = id;
  last_ep_ = it->second.get();
  return last_ep_;
}

Scheduler::TenantState* Scheduler::find_tenant(std::string_view name) const {
  auto it = tenants_.find(std::string(name));
  return it == tenants_.end() ? nullptr : it->second.get();
}

Scheduler::TenantState& Scheduler::tenant_of(std::string_view name) {
  if (TenantState* t = find_tenant(name)) return *t;
  auto t = std::make_unique<TenantState>(opts_.breaker);
  t->name = std::string(name);
  t->hash = tenant_hash(name);
  TenantState* raw = t.get();
  if (!tenant_index_free_.empty()) {  // left by drop_partition()
    t->index = tenant_index_free_.back();
    tenant_index_free_.pop_back();
    tenant_by_index_[t->index] = raw;
  } else {
    t->index = static_cast<uint32_t>(tenant_by_index_.size());
    tenant_by_index_.push_back(raw);
  }
  tenants_.emplace(raw->name, std::move(t));
  return *raw;
}

uint32_t Scheduler::max_in_flight(const EpState& ep) const {
  return ep.cfg.max_in_flight ? ep.cfg.max_in_flight : opts_.default_max_in_flight;
}

// Its tenant's partition; by its id when its endpoint is unknown (deleted, or not restored).
Partition Scheduler::pending_partition(const Pending* s) const {
  if (const EpState* ep = ep_of(s->d.endpoint)) return partition_of_hash(ep->tenant->hash);
  return id_partition(s->d.id);
}

bool Scheduler::is_orphan(const Pending* s) {
  return !s->te.linked() && s->te.expiry_ms == kOrphanMark;
}

const Endpoint* Scheduler::find_endpoint(EndpointId id) const {
  const EpState* ep = ep_of(id);
  return ep ? &ep->cfg : nullptr;
}

std::vector<const Endpoint*> Scheduler::endpoints_of(std::string_view tenant) const {
  std::vector<const Endpoint*> out;
  if (const TenantState* t = find_tenant(tenant)) {
    for (const EpState* ep : t->endpoints) out.push_back(&ep->cfg);
  }
  return out;
}

bool Scheduler::subscription_active(std::string_view tenant) const {
  const TenantState* t = find_tenant(tenant);
  return t == nullptr || t->subscription_active;
}

std::optional<Delivery> Scheduler::find_live_delivery(DeliveryId id) const {
  for (const auto& chunk : chunks_) {
    for (uint32_t i = 0; i < opts_.slab_chunk_size; ++i) {
      if (chunk[i].d.id == id && id != 0 && !is_orphan(&chunk[i])) return chunk[i].d;
    }
  }
  return std::nullopt;
}

// ---- persistence helpers ------------------------------------------------------------------------

void Scheduler::put(const Pending* s, bool is_new, Mutations& m) {
  const EpState* ep = ep_of(s->d.endpoint);
  DeliveryPut p;
  p.delivery = s->d;
  p.tenant_hash = ep && ep->tenant ? ep->tenant->hash : 0;
  p.is_new = is_new;
  m.deliveries.push_back(p);
}

void Scheduler::persist_tenant(const TenantState& t, WallTime now, Mutations& m) {
  Tenant rec;
  rec.name = t.name;
  rec.subscription_active = t.subscription_active;
  rec.owner_email = t.owner_email;
  rec.owner_email_confirmed = t.owner_email_confirmed;
  rec.owner_email_asked_at = t.owner_email_asked_at;
  rec.breaker = t.breaker.snapshot();
  rec.updated_at = now;
  m.tenants.push_back(std::move(rec));
}

// ---- queues -------------------------------------------------------------------------------------

void Scheduler::schedule_at(Pending* s, WallTime at) {
  RC_CHECK(!s->te.linked());
  wheel_.schedule(&s->te, std::max<int64_t>(at.ms(), 0));
}

void Scheduler::ready_push(EpState& ep, Pending* s) {
  RC_CHECK(!s->te.linked());
  s->te.expiry_ms = kReadyMark;
  if (s->d.test()) {
    list_push_back(&ep.tests, &s->te);
    ++ep.test_count;
  } else {
    list_push_back(&ep.ready, &s->te);
    ++ep.ready_count;
  }
  ++ready_total_;
}

void Scheduler::ready_unlink(EpState& ep, Pending* s) {
  RC_CHECK(s->te.linked() && s->te.expiry_ms == kReadyMark);
  list_unlink(&s->te);
  if (s->d.test()) {
    --ep.test_count;
  } else {
    --ep.ready_count;
  }
  --ready_total_;
}

// A delivery became due (from the wheel, intake or recovery): park it where it belongs.
void Scheduler::route(Pending* s, WallTime now, Mutations& m) {
  EpState* ep = ep_of(s->d.endpoint);
  if (ep == nullptr) {  // deleted while it waited (recovery order, or a race with delete)
    finish(s, DeliveryStatus::kDead, ErrorCode::of(K::kEndpointDeleted), m);
    return;
  }
  if (!s->d.test()) {
    if (ep->cfg.state == EndpointState::kDisabled) {  // SPEC R8.3 (e.g. after recovery)
      finish(s, DeliveryStatus::kDead, ErrorCode::of(K::kEndpointDisabled), m);
      return;
    }
    if (budget_spent(s->d, *ep->policy)) {
      // Decided here, before this poll's dispatch, so an exhaustion that disables the
      // endpoint (R8.1) stops its queue before anything of it is leased.
      decide_spent(*ep, s, now, m);
      return;
    }
    if (!ep->tenant->subscription_active) {  // SPEC R6 subscription_inactive
      postpone_subscription(ep, s, now, m);
      return;
    }
    if (now.ms() < ep->hold_until_ms) {  // SPEC R7: the receiver asked us to wait
      park_for_hold(*ep, s, m);
      return;
    }
  }
  ready_push(*ep, s);
  activate(*ep, now);
}

void Scheduler::postpone_subscription(EpState*, Pending* s, WallTime now, Mutations& m) {
  // SPEC R6: postponed 1 h, no attempt spent, endpoint untouched; the log shows the code.
  s->d.next_attempt_at = now + opts_.subscription_postpone;
  s->d.last_code = ErrorCode::of(K::kSubscriptionInactive);
  s->d.status = DeliveryStatus::kPending;
  ++counters_.subscription_postponed;
  put(s, false, m);
  schedule_at(s, s->d.next_attempt_at);
}

bool Scheduler::take_token(EpState& ep, WallTime now) {
  const RateLimit& rl = ep.cfg.rate_limit;
  if (rl.per_second <= 0) return true;
  const double cap = rl.burst ? static_cast<double>(rl.burst) : std::max(1.0, rl.per_second);
  if (!ep.tokens_init) {
    ep.tokens = cap;
    ep.tokens_at = now;
    ep.tokens_init = true;
  }
  if (now > ep.tokens_at) {
    const double elapsed_s = static_cast<double>((now - ep.tokens_at).count()) / 1e9;
    ep.tokens = std::min(cap, ep.tokens + elapsed_s * rl.per_second);
    ep.tokens_at = now;
  }
  if (ep.tokens >= 1.0) {
    ep.tokens -= 1.0;
    return true;
  }
  // Wake when the next token is there.
  const double wait_s = (1.0 - ep.tokens) / rl.per_second;
  const int64_t at_ms =
      now.ms() + std::max<int64_t>(1, static_cast<int64_t>(std::ceil(wait_s * 1e3)));
  if (ep.rate_timer_ms != 0) rate_timers_.erase({ep.rate_timer_ms, ep.cfg.id});
  ep.rate_timer_ms = at_ms;
  rate_timers_.insert({at_ms, ep.cfg.id});
  return false;
}

// May the endpoint's ordinary (non-test) queue send now? Pause, disable, breaker (R4.6, R9).
bool Scheduler::normal_allowed(EpState& ep, WallTime now) {
  if (ep.ready_count == 0 || !may_send(ep.cfg, false)) return false;
  if (ep.policy->use_breaker && ep.tenant->breaker.admit(now) == Breaker::Admit::kHold) {
    return false;
  }
  if (ep.rate_timer_ms != 0 && now.ms() < ep.rate_timer_ms) return false;
  if (now.ms() < ep.hold_until_ms) return false;       // SPEC R7: the receiver asked us to wait
  if (now.ms() < ep.host_full_until_ms) return false;  // its host's queue is full
  return true;
}

// The endpoint's one timer (rate_timers_) fires no earlier than `at_ms`.
void Scheduler::arm_endpoint_timer(EpState& ep, int64_t at_ms) {
  if (ep.rate_timer_ms != 0) {
    if (ep.rate_timer_ms >= at_ms) return;
    rate_timers_.erase({ep.rate_timer_ms, ep.cfg.id});
  }
  ep.rate_timer_ms = at_ms;
  rate_timers_.insert({at_ms, ep.cfg.id});
}

// SPEC R7 per endpoint: a receiver that answered Retry-After gets nothing more from this
// endpoint's queue until then (not one more attempt spent on it); other endpoints on the same
// host are not affected. Extends, never shortens, a hold. What is queued now, and what becomes
// due during the hold, waits in the wheel with next_attempt_at at the hold's end, persisted: the
// API shows when it will go, and a restart keeps the hold.
void Scheduler::hold_endpoint(EpState& ep, WallTime until, Mutations& m) {
  if (until.ms() <= ep.hold_until_ms) return;
  ep.hold_until_ms = until.ms();
  arm_endpoint_timer(ep, ep.hold_until_ms);
  while (!list_empty(&ep.ready)) {
    Pending* s = pending_of(ep.ready.next);
    ready_unlink(ep, s);
    park_for_hold(ep, s, m);
  }
}

void Scheduler::park_for_hold(EpState& ep, Pending* s, Mutations& m) {
  Delivery& d = s->d;
  d.status = DeliveryStatus::kPending;
  d.next_attempt_at = std::max(d.next_attempt_at, WallTime::from_ms(ep.hold_until_ms));
  if (!(d.flags & Delivery::kFlagRetryAfterHold)) {
    d.flags |= Delivery::kFlagRetryAfterHold;
    ++held_waiting_;
  }
  put(s, false, m);
  schedule_at(s, d.next_attempt_at);
}

void Scheduler::activate(EpState& ep, WallTime now) {
  if (ep.active || ep.in_flight >= max_in_flight(ep)) return;
  if (ep.test_count == 0 && !normal_allowed(ep, now)) return;
  ep.active = true;
  active_.push_back(ep.cfg.id);
}

void Scheduler::activate_tenant(TenantState& t, WallTime now) {
  for (EpState* ep : t.endpoints) activate(*ep, now);
}

// ---- intake -------------------------------------------------------------------------------------

uint32_t Scheduler::fan_out(const Event& ev, WallTime now, IdAllocator& ids, Mutations& m) {
  return fan_out(Event(ev), now, ids, m);
}

uint32_t Scheduler::fan_out(Event&& in, WallTime now, IdAllocator& ids, Mutations& m) {
  m.events.push_back(std::move(in));
  const Event& ev = m.events.back();  // nothing below adds to m.events
  return fan_out_to(ev, {}, now, ids, m, nullptr);
}

// One delivery per enabled endpoint of ev's tenant whose filter matches and whose id is not in
// `exclude` (sorted). The event itself is the caller's to write.
uint32_t Scheduler::fan_out_to(const Event& ev, const std::vector<EndpointId>& exclude,
                               WallTime now, IdAllocator& ids, Mutations& m,
                               std::vector<EndpointId>* created) {
  TenantState* t = find_tenant(ev.tenant);
  if (t == nullptr) return 0;
  const Partition part = static_cast<Partition>(t->hash % kPartitions);
  uint32_t n = 0;
  const RetryPolicy* money_policy = nullptr;
  bool money = false;
  uint64_t key_hash = 0;  // SPEC R13.1: the event's key, hashed once for all its endpoints
  for (EpState* ep : t->endpoints) {
    if (!accepts_new_deliveries(ep->cfg)) continue;  // SPEC R9.1: paused/disabled get none
    if (!filter_matches(ep->cfg.event_types, ev.type)) continue;
    if (!exclude.empty() && std::binary_search(exclude.begin(), exclude.end(), ep->cfg.id))
      continue;
    if (ep->policy != money_policy) {  // SPEC R3.5, decided once per policy
      money_policy = ep->policy;
      money = ep->policy->money.is_money(ev.type, ev.payload);
    }
    Pending* s = alloc_pending();
    Delivery& d = s->d;
    d.id = ids.next_id(part);
    d.event = ev.seq;
    d.endpoint = ep->cfg.id;
    d.created_at = now;
    d.next_attempt_at = now;
    d.status = DeliveryStatus::kPending;
    if (money) d.flags |= Delivery::kFlagMoney;
    // SPEC R13.1: the endpoint's ordering decides the key the delivery is ordered by.
    if (ep->cfg.ordering == Ordering::kEndpoint) {
      d.set_order_key(kEndpointOrderKey);
    } else if (ep->cfg.ordering == Ordering::kPerKey && !ev.ordering_key.empty()) {
      if (key_hash == 0) key_hash = ordering_key_hash(ev.ordering_key);
      d.set_order_key(key_hash);
    }
    if (created != nullptr) created->push_back(ep->cfg.id);
    enter(*ep, s, now, m, true, false);  // SPEC R12.2: persisted before the first byte
    ++n;
  }
  return n;
}

Result<DeliveryId> Scheduler::add_test_delivery(EndpointId id, const Event& ev, WallTime now,
                                                IdAllocator& ids, Mutations& m) {
  EpState* ep = ep_of(id);
  if (ep == nullptr) return make_error(Errc::kNotFound, "no such endpoint", "id", "not_found");
  m.events.push_back(ev);
  Pending* s = alloc_pending();
  Delivery& d = s->d;
  d.id = ids.next_id(static_cast<Partition>(ep->tenant->hash % kPartitions));
  d.event = ev.seq;
  d.endpoint = id;
  d.created_at = now;
  d.next_attempt_at = now;
  d.status = DeliveryStatus::kPending;
  d.flags = Delivery::kFlagTest;
  put(s, true, m);
  route(s, now, m);
  return d.id;
}

// ---- replay (docs/operations.md "Delivery log") -------------------------------------------------

Result<Delivery> Scheduler::reopen_delivery(const Delivery& ended, WallTime now, Mutations& m) {
  if (!is_terminal(ended.status)) {
    return make_error(Errc::kConflict, "the delivery has not ended: it is pending already", "state",
                      "delivery_pending");
  }
  if (ended.test()) {
    return make_error(Errc::kConflict, "a test delivery is not resent: test the endpoint again",
                      "delivery", "test_delivery");
  }
  EpState* ep = ep_of(ended.endpoint);
  if (ep == nullptr) {
    return make_error(Errc::kNotFound, "the delivery's endpoint was deleted", "endpoint",
                      "unknown_endpoint");
  }
  if (ep->cfg.state == EndpointState::kDisabled) {  // SPEC R8.5: enable it first
    return make_error(Errc::kConflict, "the endpoint is disabled: enable it first", "endpoint",
                      "endpoint_disabled");
  }
  Pending* s = alloc_pending();
  Delivery& d = s->d;
  d = ended;
  d.status = DeliveryStatus::kPending;
  d.fast_attempts = 0;
  d.slow_attempts = 0;
  d.first_slow_at = WallTime();
  d.held = Duration(0);
  d.flags &= static_cast<uint8_t>(~(Delivery::kFlagSlowLadder | Delivery::kFlagDeferred |
                                    Delivery::kFlagRetryAfterHold | Delivery::kFlagLastUnknown));
  d.created_at = now;
  d.next_attempt_at = now;
  d.last_code = ErrorCode::of(K::kResent);
  d.last_http_status = 0;
  d.breaker_mark = 0;
  const Delivery out = d;
  // SPEC R13: an ordered one queues again behind what waits for its key (docs/operations.md
  // "Ordered delivery").
  enter(*ep, s, now, m, false, true);
  return out;
}

uint32_t Scheduler::fan_out_missing(const Event& ev, const std::vector<EndpointId>& exclude,
                                    WallTime now, IdAllocator& ids, Mutations& m,
                                    std::vector<EndpointId>* created) {
  return fan_out_to(ev, exclude, now, ids, m, created);
}

// ---- the loop -----------------------------------------------------------------------------------

void Scheduler::poll(WallTime now, std::vector<SendCommand>& out, Mutations& m) {
  now_ = now;
  // 1. Due deliveries leave the wheel (bounded, STYLE 5).
  wheel_.advance(now.ms(), opts_.max_fire_per_poll,
                 [&](TimerEntry* e) { route(pending_of(e), now, m); });
  // 2. Breaker timers: open → half-open (R4.2); half-open re-checks (R4.3) and ceilings.
  while (!tenant_timers_.empty() && tenant_timers_.begin()->first <= now.ms()) {
    TenantState& t = *tenant_by_index_[tenant_timers_.begin()->second];  // never a dropped one
    tenant_timers_.erase(tenant_timers_.begin());
    t.timer_ms = 0;
    const auto before = t.breaker.state();
    const WallTime hold_since = t.breaker.hold_since();
    if (t.breaker.advance(now)) {
      breaker_changed(t, before, hold_since, now, m);
    } else if (before == BreakerSnapshot::State::kHalfOpen) {
      set_tenant_timer(t, now + opts_.breaker_recheck);
      activate_tenant(t, now);  // a lost probe frees the slot after probe_timeout
    } else {
      set_tenant_timer(t, t.breaker.next_transition());
    }
  }
  // 3. Rate-limited endpoints whose next token is there.
  while (!rate_timers_.empty() && rate_timers_.begin()->first <= now.ms()) {
    const EndpointId id = rate_timers_.begin()->second;
    rate_timers_.erase(rate_timers_.begin());
    if (EpState* ep = ep_of(id)) {
      ep->rate_timer_ms = 0;
      activate(*ep, now);
    }
  }
  // 4. One pass over the endpoints with work: at most fairness_cap each (R5.3).
  uint32_t sends_left = opts_.max_sends_per_poll;
  size_t pass = active_.size();
  while (pass-- > 0 && sends_left > 0) {
    const EndpointId id = active_.front();
    active_.pop_front();
    EpState* ep = ep_of(id);
    if (ep == nullptr) continue;
    ep->active = false;
    dispatch(*ep, now, sends_left, out, m);
    activate(*ep, now);  // more work: back of the line, next pass
  }
}

// Checks before leasing (never overspend, never pass a ceiling). Returns false when the
// delivery was ended or moved instead.
bool Scheduler::guard(EpState& ep, Pending* s, WallTime now, Mutations& m) {
  Delivery& d = s->d;
  const RetryPolicy& p = *ep.policy;
  if (now > delivery_deadline(d, p)) {  // SPEC R3.2, R3.3
    ready_unlink(ep, s);
    finish(s, ended_status(s->d), ErrorCode::of(K::kDeadlineExceeded), m);
    return false;
  }
  if (p.use_breaker && d.held >= opts_.breaker.hold_ceiling) {  // SPEC R4.7
    ready_unlink(ep, s);
    finish(s, ended_status(s->d), ErrorCode::of(K::kBreakerHoldExpired), m);
    return false;
  }
  if (d.lease_expiries > opts_.max_lease_expiries) {  // a crash loop's guard, no disable
    ready_unlink(ep, s);
    finish(s, DeliveryStatus::kUnknown, ErrorCode::of(K::kLeaseExpired), m);
    return false;
  }
  if (budget_spent(d, p)) {
    ready_unlink(ep, s);
    decide_spent(ep, s, now, m);
    return false;
  }
  return true;
}

// A budget found spent before leasing: a record written before expire_lease() gave a lost
// attempt back (an older binary's recovery), or a policy whose ladder shrank since. The policy
// decides as if the last attempt had ended now with an unknown outcome (never an extra one).
void Scheduler::decide_spent(EpState& ep, Pending* s, WallTime now, Mutations& m) {
  Classification c;
  c.outcome = Outcome::kUnknown;
  c.code = s->d.last_code.is_none() ? ErrorCode::of(K::kLeaseExpired) : s->d.last_code;
  apply_decision(&ep, s, decide(s->d, c, *ep.policy, now, rng_), now, m);
}

void Scheduler::dispatch(EpState& ep, WallTime now, uint32_t& sends_left,
                         std::vector<SendCommand>& out, Mutations& m) {
  uint32_t work = 0;
  const uint32_t limit = max_in_flight(ep);
  while (work < opts_.fairness_cap && sends_left > 0 && ep.in_flight < limit) {
    if (ep.test_count > 0) {  // SPEC R9.3, R8.5: tests bypass pause, disable and breaker
      Pending* s = pending_of(ep.tests.next);
      ready_unlink(ep, s);
      ++work;
      if (s->d.attempts > 0) {  // single-shot: its one attempt was lost in a crash
        finish(s, DeliveryStatus::kUnknown, ErrorCode::of(K::kLeaseExpired), m);
        continue;
      }
      lease(ep, s, false, now, out, m);
      --sends_left;
      continue;
    }
    if (!normal_allowed(ep, now)) break;
    Pending* s = pending_of(ep.ready.next);
    ++work;
    if (!ep.tenant->subscription_active) {  // SPEC R6: inactive since it was queued
      ready_unlink(ep, s);
      postpone_subscription(&ep, s, now, m);
      continue;
    }
    // R12.11: a delivery whose latest outcome was UNKNOWN, on a reconciling endpoint, asks
    // the status URL instead of resending; paced and bounded like a send, never a probe.
    const bool check = wants_check(ep, s->d);
    bool probe = false;
    if (!check && ep.policy->use_breaker &&
        ep.tenant->breaker.admit(now) == Breaker::Admit::kProbe) {
      // SPEC R4.3: this one would be the probe of the cycle. Its held time so far is
      // accounted first (and its mark moved), so the ceiling check below sees it (R4.7).
      probe = true;
      Delivery& d = s->d;
      const WallTime from = std::max(d.next_attempt_at, ep.tenant->breaker.hold_since());
      if (now > from) d.held += now - from;
      d.next_attempt_at = std::max(d.next_attempt_at, now);
    }
    if (!guard(ep, s, now, m)) continue;
    if (!take_token(ep, now)) break;
    if (check) {
      ready_unlink(ep, s);
      lease_check(ep, s, now, out);
      --sends_left;
      continue;
    }
    if (probe) {
      ep.tenant->breaker.on_probe_sent(now);
      ++counters_.probes;
    }
    ready_unlink(ep, s);
    lease(ep, s, probe, now, out, m);
    --sends_left;
    if (probe) break;  // the breaker now holds the rest (R4.3)
  }
}

void Scheduler::lease(EpState& ep, Pending* s, bool probe, WallTime, std::vector<SendCommand>& out,
                      Mutations& m) {
  Delivery& d = s->d;
  clear_wait_flags(d);
  // The attempt is counted when it is leased, so a crash mid-flight cannot overspend.
  ++d.attempts;
  if (d.ladder() == Ladder::kSlow) {
    ++d.slow_attempts;
  } else {
    ++d.fast_attempts;
  }
  d.status = DeliveryStatus::kInFlight;  // SPEC R12.2: the lease, persisted before sending
  put(s, false, m);
  const uint32_t idx = take_inflight_index(s);
  ++ep.in_flight;
  ++counters_.sends;
  out.push_back(SendCommand{d.id, d.event, d.endpoint, d.attempts, probe, idx});
}

uint32_t Scheduler::take_inflight_index(Pending* s) {
  uint32_t idx;
  if (!inflight_free_.empty()) {
    idx = inflight_free_.back();
    inflight_free_.pop_back();
    inflight_[idx] = s;
  } else {
    idx = static_cast<uint32_t>(inflight_.size());
    inflight_.push_back(s);
  }
  ++inflight_count_;
  return idx;
}

bool Scheduler::wants_check(const EpState& ep, const Delivery& d) {
  return d.last_unknown() && !d.test() && ep.cfg.on_unknown == OnUnknown::kReconcile &&
         !ep.cfg.status_url.empty();
}

// R12.11: a status check goes out like a send (it holds an in-flight place) but leases
// nothing in the store: it is a read, and the delivery stays pending there meanwhile.
void Scheduler::lease_check(EpState& ep, Pending* s, WallTime now, std::vector<SendCommand>& out) {
  Delivery& d = s->d;
  clear_wait_flags(d);
  d.status = DeliveryStatus::kInFlight;               // in memory only
  reconciling_.try_emplace(d.id, Reconcile{now, 0});  // after a restart: from the first check
  const uint32_t idx = take_inflight_index(s);
  ++ep.in_flight;
  ++counters_.checks;
  SendCommand c{d.id, d.event, d.endpoint, d.attempts, false, idx};
  c.check = true;
  out.push_back(c);
}

std::optional<WallTime> Scheduler::next_wakeup() const {
  if (!active_.empty()) return now_;
  int64_t best = std::numeric_limits<int64_t>::max();
  if (!wheel_.empty()) best = std::min(best, wheel_.next_expiry_ms());
  if (!tenant_timers_.empty()) best = std::min(best, tenant_timers_.begin()->first);
  if (!rate_timers_.empty()) best = std::min(best, rate_timers_.begin()->first);
  if (best == std::numeric_limits<int64_t>::max()) return std::nullopt;
  return WallTime::from_ms(best);
}

}  // namespace ringcast
