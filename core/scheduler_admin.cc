// The scheduler's endpoints and tenants (SPEC R4.8, R8.4, R8.5, R9, R14): recovery, create,
// update, pause/resume/enable and delete, subscription, owner e-mail, the breaker's view and
// reset; cluster mode's partition drop (docs/cluster.md); and stats().
#include "core/scheduler.h"

#include <algorithm>

#include "core/check.h"
#include "core/endpoint_rules.h"
#include "core/fanout.h"
#include "core/scheduler_internal.h"

namespace ringcast {

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
  if (d.order_key() != 0 && !d.test()) return restore_ordered(s, now);  // SPEC R13.4
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
  const Endpoint before = ep->cfg;
  ep->cfg = n;
  order_reset_endpoint(*ep, before, now, m);  // SPEC R13: a change of ordering
  ep->policy = p;
  // A new rate limit starts with a full bucket and does not wait for the old limit's next
  // token; another change keeps the bucket as it is.
  if (before.rate_limit.per_second != n.rate_limit.per_second ||
      before.rate_limit.burst != n.rate_limit.burst) {
    ep->tokens_init = false;
    if (ep->rate_timer_ms != 0) {
      rate_timers_.erase({ep->rate_timer_ms, ep->cfg.id});
      ep->rate_timer_ms = 0;
    }
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
      order_detach(s);  // SPEC R13: the next owner rebuilds the keys from the store
      if (s->d.status == DeliveryStatus::kInFlight) {
        RC_CHECK(!s->te.linked());
        s->te.expiry_ms = kOrphanMark;
        --live_;
        --inflight_count_;
        ++orphans_;
        continue;
      }
      unqueue(s);
      clear_wait_flags(s->d);
      free_pending(s);
      ++dropped;
    }
  }
  order_drop_blocked(&ps, 0);
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
    v.endpoints = static_cast<uint32_t>(t->endpoints.size());
    for (const EpState* ep : t->endpoints) v.endpoints_using += ep->policy->use_breaker ? 1 : 0;
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
    g.order_keys_backlogged = 0;
    g.order_oldest_head = Duration(0);
    order_keys_.for_each([&](const OrderKeys::Key& k) {
      if (k.head != nullptr && k.tail == nullptr) return;  // no backlog
      ++g.order_keys_backlogged;
      WallTime since = now_;
      if (k.head != nullptr) {
        since = pending_of(k.head)->d.created_at;
      } else if (auto b = blocked_.find(k.id); b != blocked_.end()) {
        since = b->second.since;
      }
      g.order_oldest_head = std::max(g.order_oldest_head, now_ - since);
    });
    gauges_at_ = now_;
    gauges_valid_ = true;
  }
  s.order_keys = order_keys_.size();
  s.order_keys_blocked = blocked_.size();
  s.order_waiting = order_waiting_;
  s.order_bytes = order_keys_.bytes();
  s.order_keys_backlogged = gauges_.order_keys_backlogged;
  s.order_oldest_head = gauges_.order_oldest_head;
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
