// The send path (SPEC R12.2: prepared in the turn, on the wire after its commit): each request
// from its event and endpoint (R11.3 webhook id, R12.11 status checks), and each result back to
// the scheduler, with its metrics (R2.3 deferred sends, R12.8 UNKNOWN streaks).
#include "engine/shard.h"

#include <algorithm>

#include "core/endpoint_headers.h"
#include "core/endpoint_rules.h"
#include "engine/shard_internal.h"

namespace ringcast::engine {

namespace {

size_t status_class(uint16_t status) {
  return status >= 100 && status < 600 ? status / 100 : 0;
}

}  // namespace

void Shard::prepare_send(const SendCommand& cmd) {
  SendSlot* slot;
  if (!free_slots_.empty()) {
    slot = free_slots_.back();
    free_slots_.pop_back();
  } else {
    slots_.push_back(std::make_unique<SendSlot>(this));
    slot = slots_.back().get();
  }
  slot->cmd = cmd;
  slot->epoch = ownership_->sent(id_partition(cmd.delivery));
  slot->result = TransportResult{};
  slot->started_at = loop_->wall_now();
  SendRequest& req = slot->request;
  req.delivery_id = cmd.delivery;
  req.attempt = cmd.attempt;
  req.pool_key = cmd.endpoint;
  req.body = {};

  std::shared_ptr<const Event> ev = payloads_.find(cmd.event);
  (ev ? metrics_.payload_cache_hits : metrics_.payload_cache_misses)
      .fetch_add(1, std::memory_order_relaxed);
  if (!ev) {
    if (const Event* fresh = turn_event(cmd.event)) {
      // Accepted in this very turn: not in the store until commit(), sent right after it.
      ev = std::make_shared<const Event>(*fresh);
      payloads_.put(ev);
    } else if (auto it = turn_loaded_.find(cmd.event); it != turn_loaded_.end()) {
      ev = it->second;
    } else {
      // Read back from the store: at once from a local store, on a later turn from a
      // networked one (the slot waits; the lease is held meanwhile).
      ++loads_in_flight_;
      store_.load_event_async(cmd.event, poster_,
                              [this, slot](Result<std::optional<Event>> loaded) {
                                --loads_in_flight_;
                                std::shared_ptr<const Event> got;
                                if (!loaded.ok()) {
                                  // An I/O error or a corrupt record: the attempt is recorded
                                  // internal_error and the scheduler retries it like any failed
                                  // attempt.
                                  metrics_.store_errors.fetch_add(1, std::memory_order_relaxed);
                                } else if (loaded->has_value()) {
                                  // Read back for this turn only: the cache admits events at
                                  // intake, so draining a backlog larger than the cache does not
                                  // evict the events the next turns need (a scan through an
                                  // LRU/FIFO cache would miss every time).
                                  got = std::make_shared<const Event>(std::move(**loaded));
                                  turn_loaded_.emplace(slot->cmd.event, got);
                                }
                                finish_prepare(slot, std::move(got));
                              });
      return;
    }
  }
  finish_prepare(slot, std::move(ev));
}

void Shard::finish_prepare(SendSlot* slot, std::shared_ptr<const Event> ev) {
  const SendCommand& cmd = slot->cmd;
  SendRequest& req = slot->request;
  // Looked up now, not before a load: the endpoint may have changed while it was outstanding.
  const Endpoint* ep = scheduler_->find_endpoint(cmd.endpoint);
  req.status_check = cmd.check;
  if (ep) {
    req.url = ep->url;
    req.profile = ep->signature;
    WallTime now = loop_->wall_now();
    size_t n = 0;  // raw key bytes, assigned into the slot's strings (no allocation per attempt)
    for (const Secret& s : ep->secrets) {
      if (s.expires_at <= now) continue;
      if (n < req.secrets.size()) {
        req.secrets[n].assign(s.key);
      } else {
        req.secrets.push_back(s.key);
      }
      ++n;
    }
    req.secrets.resize(n);
  } else {
    req.secrets.clear();
  }
  if (ev) {
    // The id receivers deduplicate by (R11.3): the event's message id, assigned at acceptance,
    // unique across tenants and time and the same on every attempt and endpoint (operations.md
    // "Events"; the producer's id is only the intake idempotency key, unique per tenant).
    req.message_id.assign(ev->message_id);
    req.body = ev->payload;
    if (cmd.check && ep) {  // R12.11: ask the status URL about this webhook id
      req.url = status_check_url(ep->status_url, ev->message_id);
      req.body = {};
    }
  }
  req.extra_headers.clear();  // the slot's buffer: no allocation once it has grown
  if (ep && ev) append_endpoint_headers(*ep, ev->message_id, req.extra_headers);
  if (!ep || !ev) {
    // Nothing to send (endpoint deleted under the lease, or the event is gone): complete it
    // on the next turn as an attempt that never left, so the scheduler decides its fate.
    slot->result.code =
        ErrorCode::of(ep ? ErrorCode::Kind::kInternalError : ErrorCode::Kind::kEndpointDeleted);
    ++in_flight_;
    loop_->post([slot] { slot->on_complete(); });
    return;
  }
  slot->event = std::move(ev);
  to_send_.push_back(slot);
}

void Shard::on_send_complete(SendSlot* slot) {
  --in_flight_;
  if (!discarding_) {
    if (!ownership_->completed(id_partition(slot->cmd.delivery), slot->epoch)) {
      // Its partition was lost (or lost and taken again) while it was out: the scheduler
      // frees the orphaned lease without writing anything; the new owner retries it.
      scheduler_->on_result(slot->cmd, slot->result, slot->started_at, loop_->wall_now(),
                            mutations_);
      slot->release();
      free_slots_.push_back(slot);
      return;
    }
  }
  if (discarding_) {  // stopping: the transport cancels what is left; the leases stay open
    slot->release();
    free_slots_.push_back(slot);
    return;
  }
  WallTime now = loop_->wall_now();
  const TransportResult& r = slot->result;
  if (r.deferred != DeferReason::kNone) {
    // Never sent (pacing, connection limits): no attempt, no outcome, no transport failure;
    // the scheduler releases the lease (SPEC R2.3). An UNKNOWN before it stays UNKNOWN.
    metrics_.sends_deferred[static_cast<size_t>(r.deferred)].fetch_add(1,
                                                                       std::memory_order_relaxed);
    scheduler_->on_result(slot->cmd, r, slot->started_at, now, mutations_);
    slot->release();
    free_slots_.push_back(slot);
    return;
  }
  if (slot->cmd.check) {
    // R12.11: a status check is no attempt: its own counters; a definitive answer (2xx: the
    // receiver has it; 404: it never got it) settles the delivery's UNKNOWN streak (R12.8).
    const uint16_t st = r.response_received ? r.http_status : 0;
    const size_t answer = st >= 200 && st < 300 && st != 202 ? 0 : st == 404 ? 1 : 2;
    metrics_.reconcile_checks[answer].fetch_add(1, std::memory_order_relaxed);
    if (answer != 2) {
      if (auto since = unknown_since_.find(slot->cmd.delivery); since != unknown_since_.end()) {
        const Duration spent = std::max(Duration(0), now - since->second);
        metrics_.unknown_seconds_us.fetch_add(static_cast<uint64_t>(spent.count() / 1000),
                                              std::memory_order_relaxed);
        metrics_.unknown_duration.observe(spent);
        unknown_since_.erase(since);
      }
    }
    const ResultReport report =
        scheduler_->on_result(slot->cmd, r, slot->started_at, now, mutations_);
    if (report.reconcile_expired)
      metrics_.reconcile_expired.fetch_add(1, std::memory_order_relaxed);
    slot->release();
    free_slots_.push_back(slot);
    return;
  }
  // The scheduler classifies the attempt (R12.1) and says what followed: its report, not a
  // second classification or a scan of mutations_, feeds the metrics.
  const ResultReport report =
      scheduler_->on_result(slot->cmd, r, slot->started_at, now, mutations_);
  if (report.endpoint_disabled) metrics_.endpoints_disabled.fetch_add(1, std::memory_order_relaxed);
  if (report.outcome)
    metrics_.attempts_by_outcome[static_cast<size_t>(*report.outcome)].fetch_add(
        1, std::memory_order_relaxed);
  metrics_.attempts_by_status_class[r.response_received ? status_class(r.http_status) : 0]
      .fetch_add(1, std::memory_order_relaxed);
  if (!r.response_received) {
    using K = ErrorCode::Kind;
    Counter* k = nullptr;
    switch (r.code.kind) {
      case K::kDnsFailed:
        k = &metrics_.transport_dns;
        break;
      case K::kTlsCert:
      case K::kTlsHandshake:
        k = &metrics_.transport_tls;
        break;
      case K::kTimeout:
        k = &metrics_.transport_timeout;
        break;
      case K::kNetwork:
        k = r.request_written ? &metrics_.transport_reset : &metrics_.transport_connect;
        break;
      default:
        k = &metrics_.transport_refused_before_send;
        break;
    }
    k->fetch_add(1, std::memory_order_relaxed);
  }
  metrics_.attempt_latency.observe(now - slot->started_at);
  // R12.8: a delivery is UNKNOWN from its first UNKNOWN attempt until a definitive answer
  // (or its end: a delivery that ends `unknown` is measured when it is resolved).
  DeliveryId id = slot->cmd.delivery;
  auto since = unknown_since_.find(id);
  if (report.outcome == Outcome::kUnknown) {
    metrics_.unknown_attempts.fetch_add(1, std::memory_order_relaxed);
    if (since == unknown_since_.end()) unknown_since_.emplace(id, slot->started_at);
  } else if (report.outcome && since != unknown_since_.end()) {
    const Duration spent = std::max(Duration(0), now - since->second);
    metrics_.unknown_seconds_us.fetch_add(static_cast<uint64_t>(spent.count() / 1000),
                                          std::memory_order_relaxed);
    metrics_.unknown_duration.observe(spent);
    unknown_since_.erase(since);
  }
  slot->release();
  free_slots_.push_back(slot);
}

void Shard::refresh_gauges() {
  SchedulerStats s = scheduler_->stats();
  metrics_.pending.store(static_cast<int64_t>(s.in_wheel), std::memory_order_relaxed);
  metrics_.ready.store(static_cast<int64_t>(s.ready), std::memory_order_relaxed);
  metrics_.in_flight.store(in_flight_, std::memory_order_relaxed);
  metrics_.held_by_breaker.store(static_cast<int64_t>(s.held_by_breaker),
                                 std::memory_order_relaxed);
  metrics_.held_by_retry_after.store(static_cast<int64_t>(s.held_by_retry_after),
                                     std::memory_order_relaxed);
  metrics_.deferred_waiting.store(static_cast<int64_t>(s.deferred_waiting),
                                  std::memory_order_relaxed);
  metrics_.unknown_live.store(static_cast<int64_t>(unknown_since_.size()),
                              std::memory_order_relaxed);
  metrics_.breakers_open.store(static_cast<int64_t>(s.breakers_open + s.breakers_half_open),
                               std::memory_order_relaxed);
  metrics_.endpoints.store(static_cast<int64_t>(s.endpoints), std::memory_order_relaxed);
  metrics_.intake_waiting_durable.store(static_cast<int64_t>(batch_.answers_waiting()),
                                        std::memory_order_relaxed);
}

}  // namespace ringcast::engine
