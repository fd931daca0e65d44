// The shard scheduler (SPEC R2–R9, R12): pending deliveries in a timer wheel, per-endpoint FIFO
// ready queues, tenant breakers, endpoint states, the fairness cap and in-flight limits; it turns
// attempt results into the next state and the store mutations. Pure: no I/O, time and randomness
// are passed in. Invariants: a delivery is in exactly one place (wheel, one ready queue, in flight,
// or gone); every send is preceded by its kInFlight lease in the same Mutations; no attempt beyond
// a ladder's budget or ceiling; while a tenant's breaker is not closed only its one probe is sent
// (R4.3, R4.6).
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/breaker.h"
#include "core/engine.h"
#include "core/order_keys.h"
#include "core/policy.h"
#include "core/result.h"
#include "core/store.h"
#include "core/time.h"
#include "core/timer_wheel.h"
#include "core/transport.h"
#include "core/types.h"

namespace ringcast {

struct SchedulerOptions {
  uint32_t fairness_cap = 50;           // SPEC R5.3: per endpoint per pass (one poll() is one pass)
  uint32_t default_max_in_flight = 32;  // R12.6 bulkhead, when Endpoint::max_in_flight == 0
  uint32_t max_fire_per_poll = 4096;    // STYLE 5: bounded work per loop turn
  uint32_t max_sends_per_poll = 1024;
  Duration breaker_recheck = seconds(30);     // R4.3: half-open re-check / ceiling scan tick
  Duration subscription_postpone = hours(1);  // R6 subscription_inactive
  BreakerConfig breaker;                      // R4 thresholds and pauses
  uint32_t slab_chunk_size = 4096;            // pending deliveries allocated at once
  // Reconciliation (SPEC R12.11, seed 003): after an UNKNOWN outcome on an endpoint with
  // on_unknown = reconcile, the status URL is asked after reconcile_schedule[0], then after each
  // next pause (the last one repeats) — often in the first minute, rarer later — until it
  // answers, and the delivery ends `unknown` (needs review) once reconcile_deadline has passed
  // since the UNKNOWN outcome without an answer.
  std::vector<Duration> reconcile_schedule = {seconds(5), seconds(10), seconds(15), seconds(30),
                                              minutes(1), minutes(2),  minutes(5),  minutes(10)};
  Duration reconcile_deadline = minutes(30);
  // A delivery a crash left in flight more often than this (Delivery::lease_expiries) ends
  // `unknown` with lease_expired instead of being sent again: a request that itself brings the
  // process down must not crash-loop every node that takes its partition. Those crashes spend
  // no budget and never disable the endpoint (core/types.h expire_lease).
  uint32_t max_lease_expiries = 10;
};

// One send the engine must perform, after the Mutations of the same poll() are written.
struct SendCommand {
  DeliveryId delivery = 0;
  EventSeq event = 0;
  EndpointId endpoint = 0;
  uint16_t attempt = 0;         // 1-based over all ladders (R5.4)
  bool probe = false;           // the tenant breaker's half-open probe (R4.3)
  uint32_t inflight_index = 0;  // handle for O(1) lookup in on_result(); echo it back unchanged
  // A reconciliation status check (R12.11): GET the endpoint's status_url for this delivery's
  // webhook id, signed, empty body. Not an attempt: nothing is leased in the store for it (a
  // crash mid-check loses nothing) and `attempt` is the delivery's count so far.
  bool check = false;
};

// What one on_result() did (the caller's metrics, without classifying again or scanning the
// Mutations): set where the transitions happen (core/scheduler_results.cc).
struct ResultReport {
  // The attempt's classification (R12.1, R12.8); empty for a send the transport gave back
  // unsent (R2.3), a status check (R12.11), and a stale or orphaned result.
  std::optional<Outcome> outcome;
  // How the result's own delivery ended (finish()), if it did; empty while it goes on (a retry,
  // a reconciliation, a deferred send waiting) and for a stale or orphaned result.
  std::optional<DeliveryStatus> ended_as;
  bool endpoint_disabled = false;  // this result auto-disabled its endpoint (R8.2)
  bool reconcile_expired = false;  // a status check's delivery ended unknown at its deadline
};

// The engine assigns ids: make_id(partition, next sequence).
class IdAllocator {
 public:
  virtual ~IdAllocator() = default;
  virtual uint64_t next_id(Partition p) = 0;
};

struct SchedulerStats {
  // Gauges.
  uint64_t live = 0;      // deliveries held in memory: wheel + ready + in flight
  uint64_t in_wheel = 0;  // waiting for their time
  uint64_t ready = 0;     // due, queued at their endpoint (held ones included)
  uint64_t in_flight = 0;
  uint64_t held_by_breaker = 0;      // ready, their tenant's breaker not closed (R4.6)
  uint64_t held_by_pause = 0;        // ready, their endpoint paused (R9.2)
  uint64_t held_by_retry_after = 0;  // waiting out their endpoint's Retry-After (R7, 429/5xx)
  uint64_t deferred_waiting = 0;     // waiting after the transport gave their send back unsent
  // Sends of dropped partitions still out at the transport (drop_partition): not in live or
  // in_flight; their results are ignored.
  uint64_t orphaned = 0;
  // Pending deliveries allocated (memory: slab_capacity * pending_bytes).
  uint64_t slab_capacity = 0;
  uint64_t pending_bytes = 0;  // sizeof(Scheduler::Pending)
  uint32_t endpoints = 0, tenants = 0, breakers_open = 0, breakers_half_open = 0;
  // Counters since construction.
  uint64_t sends = 0, probes = 0, results = 0, stale_results = 0;
  uint64_t deferred = 0;  // sends given back unsent (no attempt spent, R2.3)
  uint64_t delivered = 0, retries = 0, failed = 0, dead = 0;
  uint64_t unknown = 0;  // ended kUnknown, needs review (R12.10)
  // Reconciliation (R12.11): status checks sent, and their answers — the receiver has it
  // (2xx), has not got it (404: resent), still processing or no answer (asked again) —; the
  // deliveries whose deadline passed; deliveries ended at once under on_unknown = review.
  uint64_t checks = 0, checks_confirmed = 0, checks_not_received = 0, checks_pending = 0;
  uint64_t reconcile_expired = 0, review_ended = 0;
  uint64_t outcome[4] = {};  // by Outcome: success, rejected, retryable, unknown (R12.8)
  uint64_t subscription_postponed = 0, breaker_opened = 0, endpoints_disabled = 0;
  uint64_t hold_expired = 0, deadline_exceeded = 0;
  // Ordered delivery (SPEC R13). Gauges: keys in play (a head, waiting ones, or blocked), keys
  // blocked by a head that ended in failure (R13.2), deliveries waiting behind their key's head,
  // the bytes of the key table; walked (once a second): keys with a backlog (waiting ones or
  // blocked) and the age of the oldest such key's head (since its creation; a blocked key's:
  // since it was blocked). Counter: deliveries ended superseded (R13.3).
  uint64_t order_keys = 0, order_keys_blocked = 0, order_waiting = 0, order_bytes = 0;
  uint64_t order_keys_backlogged = 0;
  Duration order_oldest_head{0};
  uint64_t superseded = 0;
};

class Scheduler {
 public:
  Scheduler(SchedulerOptions opts, const PolicyRegistry& policies, uint64_t rng_seed, WallTime now);
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Optional: assigns Notification::seq (make_id of the tenant's partition). Without it,
  // notifications carry seq 0 and the caller assigns one.
  void set_id_allocator(IdAllocator* ids) { ids_ = ids; }

  // ---- recovery (before the first poll(); any order) -------------------------------------
  // kInvalidArgument (field "policy", reason "unknown_policy") when the endpoint's policy is
  // not in the registry: there is no silent fall-back to another ladder (operations.md
  // "Validation").
  Result<void> restore_endpoint(const Endpoint& e);
  void restore_tenant(const Tenant& t);
  // A non-terminal delivery. It becomes due at max(next_attempt_at, now). A delivery whose
  // lease expired arrives with its attempt already counted: it is retried at once unless that
  // spent its ladder's budget, in which case the policy ends it (never an extra attempt).
  void restore_delivery(const Delivery& d, WallTime now);

  // ---- endpoints and tenants (what must be persisted is appended to `m`) --------------------
  // `e.id` assigned by the caller; the URL form check is the caller's (it owns UrlPolicy).
  // Errors: kConflict (id exists), kInvalidArgument (tenant empty; field "policy" reason
  // "unknown_policy"; field "event_types" reason "invalid_event_type").
  Result<Endpoint> create_endpoint(Endpoint e, WallTime now, Mutations& m);
  // Config change (url, event_types, policy, signature, secrets, rate_limit, max_in_flight);
  // state, disabled_reason, tenant and created_at are kept from the current record.
  Result<Endpoint> update_endpoint(const Endpoint& e, WallTime now, Mutations& m);
  // Pause / resume / enable (SPEC R8.5, R9). kNotFound, or kInvalidArgument "endpoint_disabled".
  Result<Endpoint> endpoint_action(EndpointId id, EndpointAction a, WallTime now, Mutations& m);
  // Queued deliveries end dead (`endpoint_deleted`); in-flight ones end when they return.
  Result<void> delete_endpoint(EndpointId id, WallTime now, Mutations& m);
  const Endpoint* find_endpoint(EndpointId id) const;
  std::vector<const Endpoint*> endpoints_of(std::string_view tenant) const;  // creation order

  void set_subscription(std::string_view tenant, bool active, WallTime now, Mutations& m);
  bool subscription_active(std::string_view tenant) const;
  // The owner's e-mail address (SPEC R8.4), kept in the tenant record, and its confirmation
  // (SPEC R14, docs/security.md "Owner e-mail"). `by_platform`: the admin set it, confirmed at
  // once. Otherwise a new (or still unconfirmed) address is unconfirmed and a notification
  // "owner_email_confirmation" to it is queued (the mailer sends its signed link), at most one
  // per `interval` per tenant: kLimitExceeded "too_many_confirmations" (nothing changes).
  // Setting the confirmed address again changes nothing; empty clears it. Returns whether a
  // confirmation was queued.
  Result<bool> set_owner_email(std::string_view tenant, std::string email, bool by_platform,
                               Duration interval, WallTime now, Mutations& m);
  // The address of a confirmation link is confirmed if it is still the tenant's (idempotent);
  // kConflict "owner_email_changed" otherwise.
  Result<void> confirm_owner_email(std::string_view tenant, std::string_view email, WallTime now,
                                   Mutations& m);
  struct OwnerEmail {
    std::string address;  // empty: none
    bool confirmed = false;
    WallTime asked_at;  // the last confirmation e-mail queued (zero: none)
  };
  OwnerEmail owner_email(std::string_view tenant) const;
  BreakerView breaker_view(std::string_view tenant, WallTime now) const;
  void reset_breaker(std::string_view tenant, WallTime now, Mutations& m);  // SPEC R4.8

  // ---- intake -------------------------------------------------------------------------------
  // Fan-out of an already-deduplicated event (ev.seq assigned): one delivery per enabled
  // (not paused, not disabled: R9.1) endpoint of ev.tenant whose filter matches; the money
  // flag comes from the endpoint policy's rules (R3.5). Appends the Event and every
  // DeliveryPut{is_new} to `m`; returns how many deliveries were created.
  uint32_t fan_out(const Event& ev, WallTime now, IdAllocator& ids, Mutations& m);
  // The same, taking the event (and its payload) without a copy.
  uint32_t fan_out(Event&& ev, WallTime now, IdAllocator& ids, Mutations& m);
  // R9.3, R8.5: one delivery of `ev` to this endpoint only, also while paused or disabled. A
  // test delivery is single-shot (one attempt, then delivered or failed), never feeds the
  // breaker and never changes the endpoint's state. kNotFound for an unknown endpoint.
  Result<DeliveryId> add_test_delivery(EndpointId id, const Event& ev, WallTime now,
                                       IdAllocator& ids, Mutations& m);

  // ---- replay (docs/operations.md "Delivery log") ----------------------------------------------
  // Resend: `ended` (the store's record of a delivery that ended) goes out again — same id,
  // event and webhook id; `attempts` keeps counting (the receiver sees attempt N+1) while the
  // ladders start afresh: fast/slow counters 0, no slow-ladder start, no breaker hold time, the
  // wait and UNKNOWN flags cleared, and created_at = now, so the ceilings (R3.2, R3.3) count
  // from the resend. Due now. Appends a DeliveryPut{rewrite} (the store moves it back to the
  // live set); the caller adds the history records. Errors: kConflict "delivery_pending" (not
  // ended), "endpoint_disabled" (R8.5), "test_delivery"; kNotFound "unknown_endpoint".
  Result<Delivery> reopen_delivery(const Delivery& ended, WallTime now, Mutations& m);
  // Replay missing: fan_out() of an event already stored (not appended to `m` again) to every
  // endpoint of ev.tenant it matches now except those in `exclude` (sorted: they have a
  // delivery of it). Returns how many deliveries were created; `created`, when given, gets
  // their endpoints.
  uint32_t fan_out_missing(const Event& ev, const std::vector<EndpointId>& exclude, WallTime now,
                           IdAllocator& ids, Mutations& m,
                           std::vector<EndpointId>* created = nullptr);
  // SPEC R13.2: an operator resolved `d` (an ended delivery). If it is the head that blocks its
  // ordering key (or the key's blocker is unknown, after a restart), the key goes on: the next
  // waiting delivery is its head. Returns whether a key was released.
  bool settle_key(const Delivery& d, WallTime now, Mutations& m);
  // The keys of an endpoint with a backlog or a block, at most `limit` (SPEC R13; a walk over
  // every key in play: for the API, not for hot paths).
  std::vector<OrderKeyView> order_keys_of(EndpointId endpoint, size_t limit) const;

  // ---- the loop -----------------------------------------------------------------------------
  // One pass: fires due timers (bounded), breaker timers, applies holds, and emits sends from
  // the per-endpoint FIFO queues within the fairness cap, the in-flight limit and the rate
  // limit. Every emitted delivery is written kInFlight into `m` (the lease) before the
  // command is appended to `out`.
  void poll(WallTime now, std::vector<SendCommand>& out, Mutations& m);
  // One attempt finished: classify → policy → breaker → endpoint rules. Appends the Attempt,
  // the Delivery update and any endpoint / tenant / notification change to `m`. A command
  // that does not match a live in-flight delivery is ignored (counted as stale). A result the
  // transport gave back unsent (r.deferred) is no attempt (SPEC R2.3): the lease is released
  // with the attempt not spent, nothing recorded, no breaker sample, and the delivery waits
  // until r.not_before. A Retry-After (429, 5xx) holds the endpoint's queue until then (R7).
  // Returns what it did (ResultReport); callers that do not need it may ignore it.
  ResultReport on_result(const SendCommand& cmd, const TransportResult& r, WallTime started_at,
                         WallTime now, Mutations& m);
  // ---- cluster mode (docs/cluster.md) ---------------------------------------------------------
  // Forgets everything of partition p — its tenants (breakers, timers), endpoints (ready lists,
  // rate timers) and queued/scheduled deliveries — without writing anything (the next owner
  // reloads them from the store). Deliveries of p in flight are not touched: the caller waits
  // until in_flight(p) == 0 before dropping, or drops anyway (a lost lease) and ignores their
  // results — after a drop, on_result() for a command of p is safe: the delivery is forgotten
  // then, without a mutation (counted in stale_results). Until then it is counted in
  // stats().orphaned, not in live or in_flight. A tenant's partition is partition_of(name);
  // an endpoint's and a delivery's are their tenant's (a delivery whose endpoint is unknown:
  // id_partition(id)). O(slab + endpoints + tenants). Returns how many deliveries were dropped
  // from the wheel and the ready queues (the in-flight ones are not counted).
  uint64_t drop_partition(Partition p);
  // The same for every partition in `ps`, in one pass over the slab, endpoints and tenants (a
  // SIGTERM hands all of a node's partitions over in one turn: one pass each was O(P × slab)).
  uint64_t drop_partitions(const PartitionSet& ps);
  // Deliveries of partition p currently leased to the transport (those of an earlier drop of
  // p, whose results are ignored, not counted). O(in-flight table).
  uint32_t in_flight(Partition p) const;

  // When poll() has work next (<= the last poll's now: call again without sleeping);
  // nullopt when nothing is pending.
  std::optional<WallTime> next_wakeup() const;

  // O(1) except the held_by_* and breakers_* gauges, which walk endpoints and tenants and
  // are refreshed at most once per second of poll time.
  SchedulerStats stats() const;
  uint64_t live() const { return live_; }  // deliveries in memory (wheel + ready + in flight)
  // The in-memory copy of a live (non-terminal) delivery, for tests and the simulation; the
  // store is the source of truth for lookups by id. O(slab) — not for hot paths.
  std::optional<Delivery> find_live_delivery(DeliveryId id) const;

  struct Pending;  // a pending delivery: the scheduler's record of one that has not ended
  struct EpState;
  struct TenantState;

 private:
  Pending* alloc_pending();
  void free_pending(Pending* s);
  void recycle_pending(Pending* s);  // free_pending() without counting it out of live_
  EpState* ep_of(EndpointId id) const;
  TenantState& tenant_of(std::string_view name);
  TenantState* find_tenant(std::string_view name) const;
  uint32_t max_in_flight(const EpState& ep) const;
  Partition pending_partition(const Pending* s) const;
  static bool is_orphan(const Pending* s);

  void route(Pending* s, WallTime now, Mutations& m);
  void schedule_at(Pending* s, WallTime at);
  void ready_push(EpState& ep, Pending* s);
  void ready_unlink(EpState& ep, Pending* s);
  void activate(EpState& ep, WallTime now);
  bool normal_allowed(EpState& ep, WallTime now);
  bool take_token(EpState& ep, WallTime now);
  void dispatch(EpState& ep, WallTime now, uint32_t& sends_left, std::vector<SendCommand>& out,
                Mutations& m);
  bool guard(EpState& ep, Pending* s, WallTime now, Mutations& m);
  void decide_spent(EpState& ep, Pending* s, WallTime now, Mutations& m);
  void lease(EpState& ep, Pending* s, bool probe, WallTime now, std::vector<SendCommand>& out,
             Mutations& m);
  void postpone_subscription(EpState* ep, Pending* s, WallTime now, Mutations& m);
  void release_unsent(const SendCommand& cmd, Pending* s, const TransportResult& r, WallTime now,
                      Mutations& m);
  void hold_endpoint(EpState& ep, WallTime until, Mutations& m);
  void park_for_hold(EpState& ep, Pending* s, Mutations& m);
  void arm_endpoint_timer(EpState& ep, int64_t at_ms);
  void clear_wait_flags(Delivery& d);
  static DeliveryStatus ended_status(const Delivery& d);
  static void note_outcome(Delivery& d, Outcome o);
  // SPEC R13 (core/scheduler_order.cc).
  void enter(EpState& ep, Pending* s, WallTime now, Mutations& m, bool is_new, bool rewrite);
  void order_ended(Pending* s, DeliveryStatus st, Mutations& m);
  void release_key(uint64_t key_id, WallTime now, Mutations& m);
  void release_key(OrderKeys::Key& k, uint64_t key_id, WallTime now, Mutations& m);
  void supersede_backlog(uint64_t key_id, const Pending* by, WallTime now, Mutations& m);
  void place(Pending* s, WallTime now, Mutations& m);  // route() now, or the wheel until due
  void restore_ordered(Pending* s, WallTime now);
  void order_detach(Pending* s);
  void order_reset_endpoint(EpState& ep, const Endpoint& before, WallTime now, Mutations& m);
  void order_drop_blocked(const PartitionSet* ps, EndpointId endpoint);
  void unqueue(Pending* s);  // out of the wheel or its ready queue, wherever it is linked
  uint32_t fan_out_to(const Event& ev, const std::vector<EndpointId>& exclude, WallTime now,
                      IdAllocator& ids, Mutations& m, std::vector<EndpointId>* created);
  static bool wants_check(const EpState& ep, const Delivery& d);
  void lease_check(EpState& ep, Pending* s, WallTime now, std::vector<SendCommand>& out);
  void take_result(const SendCommand& cmd, const TransportResult& r, WallTime started_at,
                   WallTime now, Mutations& m);
  void on_check_result(const SendCommand& cmd, Pending* s, const TransportResult& r,
                       WallTime started_at, WallTime now, Mutations& m);
  uint32_t take_inflight_index(Pending* s);
  void finish(Pending* s, DeliveryStatus st, ErrorCode code, Mutations& m);
  void put(const Pending* s, bool is_new, Mutations& m);
  void apply_decision(EpState* ep, Pending* s, const Decision& dec, WallTime now, Mutations& m);
  void disable_endpoint(EpState& ep, ErrorCode reason, const Delivery& trigger, WallTime now,
                        Mutations& m);
  void kill_backlog(EndpointId id, ErrorCode code, Mutations& m);
  void breaker_changed(TenantState& t, BreakerSnapshot::State before, WallTime hold_since,
                       WallTime now, Mutations& m);
  void account_held(TenantState& t, WallTime hold_since, WallTime now);
  void scan_ceilings(TenantState& t, WallTime now, Mutations& m);
  void set_tenant_timer(TenantState& t, std::optional<WallTime> at);
  void persist_tenant(const TenantState& t, WallTime now, Mutations& m);
  void activate_tenant(TenantState& t, WallTime now);

  SchedulerOptions opts_;
  const PolicyRegistry& policies_;
  Rng rng_;
  WallTime now_;
  IdAllocator* ids_ = nullptr;
  TimerWheel wheel_;

  std::vector<std::unique_ptr<Pending[]>> chunks_;
  TimerEntry* free_ = nullptr;  // free Pending records, linked through TimerEntry::next
  uint64_t live_ = 0;
  uint64_t ready_total_ = 0;
  uint64_t deferred_waiting_ = 0;  // live deliveries with kFlagDeferred
  uint64_t held_waiting_ = 0;      // live deliveries with kFlagRetryAfterHold

  std::vector<Pending*> inflight_;  // SendCommand::inflight_index → its pending delivery
  std::vector<uint32_t> inflight_free_;
  uint64_t inflight_count_ = 0;

  std::unordered_map<EndpointId, std::unique_ptr<EpState>> endpoints_;
  mutable EndpointId last_ep_id_ = 0;  // ep_of() cache; reset whenever endpoints_ changes
  mutable EpState* last_ep_ = nullptr;
  std::unordered_map<std::string, std::unique_ptr<TenantState>> tenants_;
  std::vector<TenantState*> tenant_by_index_;  // nullptr: dropped (index in tenant_index_free_)
  std::vector<uint32_t> tenant_index_free_;
  uint64_t orphans_ = 0;           // in-flight deliveries of dropped partitions (drop_partition)
  std::deque<EndpointId> active_;  // endpoints with sendable work
  std::set<std::pair<int64_t, uint32_t>> tenant_timers_;  // (ms, tenant index)
  // (ms, endpoint): the next rate-limit token, or the end of a Retry-After hold
  std::set<std::pair<int64_t, EndpointId>> rate_timers_;
  // Deliveries being reconciled (R12.11): since when (the UNKNOWN outcome, or the first check
  // after a restart) and how many checks were asked. In memory only.
  struct Reconcile {
    WallTime since;
    uint32_t checks = 0;
  };
  std::unordered_map<DeliveryId, Reconcile> reconciling_;
  // Ordered delivery (SPEC R13): the keys in play, and the blocked ones' facts (rare).
  OrderKeys order_keys_;
  struct Blocked {
    DeliveryId by = 0;  // 0: unknown (blocked since a restart: Delivery::kFlagKeyBlocked)
    WallTime since;
    EndpointId endpoint = 0;
    uint64_t order_key = 0;
  };
  std::unordered_map<uint64_t, Blocked> blocked_;
  uint64_t order_waiting_ = 0;
  // The report of the on_result() running now (nullptr outside one) and the delivery it is for
  // (nullptr once that one ended): finish(), disable_endpoint() and on_check_result() fill it.
  ResultReport* report_ = nullptr;
  const Pending* report_for_ = nullptr;
  SchedulerStats counters_;
  mutable SchedulerStats gauges_;  // the walked gauges, cached (see stats())
  mutable WallTime gauges_at_;
  mutable bool gauges_valid_ = false;
};

}  // namespace ringcast
