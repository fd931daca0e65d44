#include "core/scheduler.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>

#include "core/check.h"
#include "core/classify.h"
#include "core/endpoint_rules.h"
#include "core/fanout.h"
#include "core/retry_after.h"

namespace ringcast {

namespace {
using K = ErrorCode::Kind;
// TimerEntry::expiry_ms of a pending delivery linked into an endpoint ready queue (not the wheel).
constexpr int64_t kReadyMark = std::numeric_limits<int64_t>::min();
// TimerEntry::expiry_ms of an in-flight pending delivery whose partition was dropped
// (drop_partition): its result is ignored and its record recycled then. In-flight ones are never
// linked, so the field is free to carry it.
constexpr int64_t kOrphanMark = std::numeric_limits<int64_t>::min() + 1;

Partition partition_of_hash(uint64_t tenant_hash) {
  return static_cast<Partition>(tenant_hash % kPartitions);
}

void list_init(TimerEntry* h) {
  h->next = h->prev = h;
}
bool list_empty(const TimerEntry* h) {
  return h->next == h;
}
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

// A pending delivery and its timer link: the unit of scheduler memory (there are millions).
// Standard layout with the entry first, so a TimerEntry* from the wheel is the Pending*.
struct Scheduler::Pending {
  TimerEntry te;
  Delivery d;
};
// 104 since Delivery::lease_expiries (96 before; docs/benchmarks.md measures ~110-190 B of RSS
// per pending delivery against a 256 B target).
static_assert(sizeof(Scheduler::Pending) <= 104, "keep a pending delivery under ~100 bytes");
static_assert(std::is_standard_layout_v<Scheduler::Pending>);

struct Scheduler::EpState {
  Endpoint cfg;
  const RetryPolicy* policy = nullptr;
  TenantState* tenant = nullptr;
  TimerEntry ready;  // FIFO of due deliveries (sentinel)
  TimerEntry tests;  // FIFO of due test deliveries (sentinel): they bypass pause and breaker
  uint32_t ready_count = 0, test_count = 0, in_flight = 0;
  bool active = false;        // in Scheduler::active_
  int64_t rate_timer_ms = 0;  // key in rate_timers_ when != 0
  int64_t hold_until_ms = 0;  // the receiver's Retry-After holds the queue until then (R7)
  // A send of it came back queue_full (its host's queue, shared with the host's other
  // endpoints, was full): no new sends until that one's come-back time, so the endpoint does not
  // send its whole in-flight budget into a full queue to have it come back (a lease written and
  // released each). In memory only; not shown, not persisted.
  int64_t host_full_until_ms = 0;
  double tokens = 0;
  WallTime tokens_at;
  bool tokens_init = false;
  EpState() {
    list_init(&ready);
    list_init(&tests);
  }
};

struct Scheduler::TenantState {
  std::string name;
  uint64_t hash = 0;
  uint32_t index = 0;
  bool subscription_active = true;
  std::string owner_email;             // SPEC R8.4
  bool owner_email_confirmed = false;  // SPEC R14: notices go only to a confirmed address
  WallTime owner_email_asked_at;
  Breaker breaker;
  std::vector<EpState*> endpoints;  // creation order
  int64_t timer_ms = 0;             // key in tenant_timers_ when != 0
  explicit TenantState(const BreakerConfig& cfg) : breaker(cfg) {}
};

namespace {
Scheduler::Pending* pending_of(TimerEntry* e) {
  return reinterpret_cast<Scheduler::Pending*>(e);
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
    default:
      break;
  }
  if (code.kind == K::kBreakerHoldExpired) ++counters_.hold_expired;
  if (code.kind == K::kDeadlineExceeded) ++counters_.deadline_exceeded;
  put(s, false, m);
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

// ---- endpoints and tenants ---------------------------------------------------------------------

Result<void> Scheduler::restore_endpoint(const Endpoint& e) {
  const RetryPolicy* p = policies_.find(e.policy);
  if (p == nullptr) {
    return make_error(Errc::kInvalidArgument, "unknown policy", "policy", "unknown_policy");
  }
  auto ep = std::make_unique<EpState>();
  ep->cfg = e;
  ep->policy = p;
  ep->tenant = &tenant_of(e.tenant);
  ep->tenant->endpoints.push_back(ep.get());
  last_ep_ = nullptr;
  endpoints_[e.id] = std::move(ep);
  return ok();
}

void Scheduler::restore_tenant(const Tenant& t) {
  TenantState& ts = tenant_of(t.name);
  ts.subscription_active = t.subscription_active;
  ts.owner_email = t.owner_email;
  ts.owner_email_confirmed = t.owner_email_confirmed;
  ts.owner_email_asked_at = t.owner_email_asked_at;
  ts.breaker.restore(t.breaker, now_);
  set_tenant_timer(ts, ts.breaker.next_transition());
}

void Scheduler::restore_delivery(const Delivery& d, WallTime now) {
  if (is_terminal(d.status) || d.id == 0) return;
  Pending* s = alloc_pending();
  s->d = d;
  s->d.status = DeliveryStatus::kPending;  // a lease the store did not turn back: retried
  // A lease that expired in a crash: the request may have been written (R12.1).
  if (d.last_code.kind == K::kLeaseExpired) s->d.flags |= Delivery::kFlagLastUnknown;
  if (s->d.deferred()) ++deferred_waiting_;
  if (s->d.flags & Delivery::kFlagRetryAfterHold) {
    ++held_waiting_;
    // The endpoint's hold outlives a restart: its other deliveries wait for it too (R7).
    if (EpState* ep = ep_of(d.endpoint); ep != nullptr && d.next_attempt_at > now) {
      ep->hold_until_ms = std::max(ep->hold_until_ms, d.next_attempt_at.ms());
      arm_endpoint_timer(*ep, ep->hold_until_ms);
    }
  }
  schedule_at(s, std::max(d.next_attempt_at, now));
}

Result<Endpoint> Scheduler::create_endpoint(Endpoint e, WallTime now, Mutations& m) {
  if (e.id == 0) return make_error(Errc::kInvalidArgument, "endpoint id not assigned", "id");
  if (ep_of(e.id)) return make_error(Errc::kConflict, "endpoint id exists", "id", "conflict");
  if (e.tenant.empty()) return make_error(Errc::kInvalidArgument, "tenant is empty", "tenant");
  const RetryPolicy* p = policies_.find(e.policy);
  if (p == nullptr) {
    return make_error(Errc::kInvalidArgument, "unknown policy", "policy", "unknown_policy");
  }
  if (Result<void> v = validate_event_filter(e.event_types); !v) return v.error();
  const bool new_tenant = find_tenant(e.tenant) == nullptr;
  e.created_at = now;
  e.updated_at = now;
  if (e.state != EndpointState::kDisabled) e.disabled_reason = ErrorCode::none();
  if (Result<void> r = restore_endpoint(e); !r) return r.error();  // the policy was checked
  if (new_tenant) persist_tenant(tenant_of(e.tenant), now, m);
  m.endpoints.push_back(e);
  return e;
}

Result<Endpoint> Scheduler::update_endpoint(const Endpoint& e, WallTime now, Mutations& m) {
  EpState* ep = ep_of(e.id);
  if (ep == nullptr) return make_error(Errc::kNotFound, "no such endpoint", "id", "not_found");
  if (e.tenant != ep->cfg.tenant) {
    return make_error(Errc::kInvalidArgument, "an endpoint cannot change tenant", "tenant");
  }
  const RetryPolicy* p = policies_.find(e.policy);
  if (p == nullptr) {
    return make_error(Errc::kInvalidArgument, "unknown policy", "policy", "unknown_policy");
  }
  if (Result<void> v = validate_event_filter(e.event_types); !v) return v.error();
  Endpoint n = e;
  n.state = ep->cfg.state;
  n.disabled_reason = ep->cfg.disabled_reason;
  n.created_at = ep->cfg.created_at;
  n.updated_at = now;
  ep->cfg = n;
  ep->policy = p;
  ep->tokens_init = false;       // a new rate limit starts with a full bucket
  if (ep->rate_timer_ms != 0) {  // ... and does not wait for the old limit's next token
    rate_timers_.erase({ep->rate_timer_ms, ep->cfg.id});
    ep->rate_timer_ms = 0;
  }
  if (ep->hold_until_ms > now.ms()) arm_endpoint_timer(*ep, ep->hold_until_ms);  // R7 stays
  m.endpoints.push_back(n);
  activate(*ep, now);
  return n;
}

Result<Endpoint> Scheduler::endpoint_action(EndpointId id, EndpointAction a, WallTime now,
                                            Mutations& m) {
  EpState* ep = ep_of(id);
  if (ep == nullptr) return make_error(Errc::kNotFound, "no such endpoint", "id", "not_found");
  Result<ActionResult> r = apply_endpoint_action(ep->cfg, a, now);
  if (!r) return r.error();
  if (r->changed) {
    ep->cfg = r->endpoint;
    m.endpoints.push_back(ep->cfg);
    activate(*ep, now);  // SPEC R9.2: the queue goes out after resume
  }
  return ep->cfg;
}

Result<void> Scheduler::delete_endpoint(EndpointId id, WallTime, Mutations& m) {
  EpState* ep = ep_of(id);
  if (ep == nullptr) return make_error(Errc::kNotFound, "no such endpoint", "id", "not_found");
  kill_backlog(id, ErrorCode::of(K::kEndpointDeleted), m);
  // Test deliveries of a deleted endpoint die too.
  while (!list_empty(&ep->tests)) {
    Pending* s = pending_of(ep->tests.next);
    ready_unlink(*ep, s);
    finish(s, DeliveryStatus::kDead, ErrorCode::of(K::kEndpointDeleted), m);
  }
  auto& eps = ep->tenant->endpoints;
  eps.erase(std::remove(eps.begin(), eps.end(), ep), eps.end());
  if (ep->rate_timer_ms != 0) rate_timers_.erase({ep->rate_timer_ms, id});
  m.endpoint_deletes.push_back(id);
  last_ep_ = nullptr;
  endpoints_.erase(id);  // active_ may still name it: skipped on lookup
  return ok();
}

// ---- cluster mode (docs/cluster.md) -----------------------------------------------------------

uint64_t Scheduler::drop_partition(Partition p) {
  PartitionSet ps;
  ps.set(p);
  return drop_partitions(ps);
}

uint64_t Scheduler::drop_partitions(const PartitionSet& ps) {
  // 1. Deliveries (before the endpoints: their ready queues and their partition need them).
  // Queued and scheduled ones are recycled; in-flight ones are marked and recycled when their
  // result comes back (the transport still holds their command and in-flight index).
  uint64_t dropped = 0;
  for (const auto& chunk : chunks_) {
    for (uint32_t i = 0; i < opts_.slab_chunk_size; ++i) {
      Pending* s = &chunk[i];
      if (s->d.id == 0 || is_orphan(s) || !ps.test(pending_partition(s))) continue;
      if (s->d.status == DeliveryStatus::kInFlight) {
        RC_CHECK(!s->te.linked());
        s->te.expiry_ms = kOrphanMark;
        --live_;
        --inflight_count_;
        ++orphans_;
        continue;
      }
      RC_CHECK(s->te.linked());
      if (s->te.expiry_ms == kReadyMark) {
        ready_unlink(*ep_of(s->d.endpoint), s);
      } else {
        wheel_.cancel(&s->te);
      }
      clear_wait_flags(s->d);
      free_pending(s);
      ++dropped;
    }
  }
  // 2. Endpoints: an endpoint is in its tenant's partition.
  for (auto it = endpoints_.begin(); it != endpoints_.end();) {
    EpState& ep = *it->second;
    if (!ps.test(partition_of_hash(ep.tenant->hash))) {
      ++it;
      continue;
    }
    RC_CHECK(ep.ready_count == 0 && ep.test_count == 0);
    if (ep.rate_timer_ms != 0) rate_timers_.erase({ep.rate_timer_ms, ep.cfg.id});
    it = endpoints_.erase(it);
  }
  last_ep_ = nullptr;
  // active_ names endpoints by id: a dropped one restored later must not be queued twice.
  std::erase_if(active_, [this](EndpointId id) { return ep_of(id) == nullptr; });
  // 3. Tenants (their endpoints are all gone): breakers and their timers.
  for (auto it = tenants_.begin(); it != tenants_.end();) {
    TenantState& t = *it->second;
    if (!ps.test(partition_of_hash(t.hash))) {
      ++it;
      continue;
    }
    set_tenant_timer(t, std::nullopt);
    tenant_by_index_[t.index] = nullptr;
    tenant_index_free_.push_back(t.index);
    it = tenants_.erase(it);
  }
  gauges_valid_ = false;  // breakers_open and held_by_* change now, not within the second
  return dropped;
}

uint32_t Scheduler::in_flight(Partition p) const {
  uint32_t n = 0;
  for (const Pending* s : inflight_) {
    if (s != nullptr && !is_orphan(s) && pending_partition(s) == p) ++n;
  }
  return n;
}

void Scheduler::set_subscription(std::string_view tenant, bool active, WallTime now, Mutations& m) {
  TenantState& t = tenant_of(tenant);
  if (t.subscription_active == active) return;
  t.subscription_active = active;
  persist_tenant(t, now, m);
  // Deliveries already postponed come back by themselves within the hour (the seed);
  // queued ones are postponed when their endpoint is next dispatched.
  if (active) activate_tenant(t, now);
}

Result<bool> Scheduler::set_owner_email(std::string_view tenant, std::string email,
                                        bool by_platform, Duration interval, WallTime now,
                                        Mutations& m) {
  TenantState& t = tenant_of(tenant);
  if (email.empty() || by_platform) {
    const bool confirmed = !email.empty();
    if (t.owner_email == email && t.owner_email_confirmed == confirmed) return false;
    t.owner_email = std::move(email);
    t.owner_email_confirmed = confirmed;
    persist_tenant(t, now, m);
    return false;
  }
  if (t.owner_email == email && t.owner_email_confirmed) return false;
  // SPEC R14: the platform's relay mails an address a merchant chose once per interval at most.
  if (t.owner_email_asked_at != WallTime() && now < t.owner_email_asked_at + interval) {
    return make_error(Errc::kLimitExceeded,
                      "a confirmation e-mail was sent lately: set the address again later",
                      "owner_email", "too_many_confirmations");
  }
  t.owner_email = std::move(email);
  t.owner_email_confirmed = false;
  t.owner_email_asked_at = now;
  persist_tenant(t, now, m);
  Notification n;
  n.tenant = t.name;
  n.kind = "owner_email_confirmation";
  n.at = now;
  n.owner_email = t.owner_email;
  n.message = "a confirmation link was e-mailed to the owner address " + t.owner_email +
              "; notices go to it once it is confirmed";
  if (ids_ != nullptr) n.seq = ids_->next_id(static_cast<Partition>(t.hash % kPartitions));
  m.notifications.push_back(std::move(n));
  return true;
}

Result<void> Scheduler::confirm_owner_email(std::string_view tenant, std::string_view email,
                                            WallTime now, Mutations& m) {
  TenantState* t = find_tenant(tenant);
  if (t == nullptr || t->owner_email != email) {
    return make_error(Errc::kConflict,
                      "the tenant's owner address changed since this link was sent", "owner_email",
                      "owner_email_changed");
  }
  if (t->owner_email_confirmed) return ok();
  t->owner_email_confirmed = true;
  persist_tenant(*t, now, m);
  return ok();
}

Scheduler::OwnerEmail Scheduler::owner_email(std::string_view tenant) const {
  const TenantState* t = find_tenant(tenant);
  if (t == nullptr) return {};
  return OwnerEmail{t->owner_email, t->owner_email_confirmed, t->owner_email_asked_at};
}

BreakerView Scheduler::breaker_view(std::string_view tenant, WallTime now) const {
  BreakerView v;
  if (const TenantState* t = find_tenant(tenant)) {
    v.snapshot = t->breaker.snapshot();
    v.window_total = t->breaker.window_total(now);
    v.window_failed = t->breaker.window_failed(now);
  }
  return v;
}

void Scheduler::reset_breaker(std::string_view tenant, WallTime now, Mutations& m) {
  TenantState& t = tenant_of(tenant);
  const auto before = t.breaker.state();
  const WallTime hold_since = t.breaker.hold_since();
  t.breaker.reset(now);
  breaker_changed(t, before, hold_since, now, m);
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
    if (created != nullptr) created->push_back(ep->cfg.id);
    put(s, true, m);  // SPEC R12.2: persisted before the first byte
    route(s, now, m);
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
  put(s, false, m);
  m.deliveries.back().rewrite = true;
  const Delivery out = d;
  route(s, now, m);
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

// Timers fire on their millisecond (or a little before): a check this close to the deadline is
// the deadline's.
constexpr Duration kCheckSlack = milliseconds(10);

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

void Scheduler::on_result(const SendCommand& cmd, const TransportResult& r, WallTime started_at,
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
  EpState* ep = ep_of(id);
  for (const auto& chunk : chunks_) {
    for (uint32_t i = 0; i < opts_.slab_chunk_size; ++i) {
      Pending* s = &chunk[i];
      if (s->d.id == 0 || s->d.endpoint != id || s->d.test() || is_orphan(s)) continue;
      if (s->d.status == DeliveryStatus::kInFlight) {
        s->d.last_code = code;
        continue;
      }
      if (s->te.linked()) {
        if (s->te.expiry_ms == kReadyMark) {
          ready_unlink(*ep, s);
        } else {
          wheel_.cancel(&s->te);
        }
      }
      finish(s, DeliveryStatus::kDead, code, m);
    }
  }
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

SchedulerStats Scheduler::stats() const {
  SchedulerStats s = counters_;
  s.live = live_;
  s.in_wheel = wheel_.size();
  s.ready = ready_total_;
  s.in_flight = inflight_count_;
  s.slab_capacity = uint64_t{chunks_.size()} * opts_.slab_chunk_size;
  s.pending_bytes = sizeof(Pending);
  s.endpoints = static_cast<uint32_t>(endpoints_.size());
  s.tenants = static_cast<uint32_t>(tenants_.size());
  // The gauges that need a walk over endpoints and tenants are refreshed at most once per
  // second of poll time: the loop asks for stats every turn.
  if (!gauges_valid_ || now_ - gauges_at_ >= seconds(1) || now_ < gauges_at_) {
    SchedulerStats& g = gauges_;
    g.breakers_open = g.breakers_half_open = 0;
    g.held_by_pause = g.held_by_breaker = g.held_by_retry_after = 0;
    for (const auto& [name, t] : tenants_) {
      if (t->breaker.state() == BreakerSnapshot::State::kOpen) ++g.breakers_open;
      if (t->breaker.state() == BreakerSnapshot::State::kHalfOpen) ++g.breakers_half_open;
    }
    for (const auto& [id, ep] : endpoints_) {
      if (ep->cfg.state == EndpointState::kPaused) g.held_by_pause += ep->ready_count;
      if (ep->policy->use_breaker &&
          ep->tenant->breaker.state() != BreakerSnapshot::State::kClosed) {
        g.held_by_breaker += ep->ready_count;
      }
    }
    gauges_at_ = now_;
    gauges_valid_ = true;
  }
  s.breakers_open = gauges_.breakers_open;
  s.breakers_half_open = gauges_.breakers_half_open;
  s.held_by_pause = gauges_.held_by_pause;
  s.held_by_breaker = gauges_.held_by_breaker;
  s.held_by_retry_after = held_waiting_;
  s.deferred_waiting = deferred_waiting_;
  s.orphaned = orphans_;
  return s;
}

}  // namespace ringcast
