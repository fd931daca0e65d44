// The shard's send path (engine/send_path.h; SPEC R12.2: prepared in the turn, on the wire after
// its commit): each request from its event and endpoint (R11.3 webhook id, R12.11 status
// checks), and each result back to the scheduler, with its metrics (R2.3 deferred sends, R12.8
// UNKNOWN streaks).
#include "engine/send_path.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "core/classify.h"
#include "core/endpoint_headers.h"
#include "core/endpoint_rules.h"
#include "core/trace_context.h"
#include "core/url.h"
#include "trace/tracer.h"
#include "log/log.h"

namespace ringcast::engine {

namespace {

size_t status_class(uint16_t status) {
  return status >= 100 && status < 600 ? status / 100 : 0;
}

// The W3C trace flags an attempt carries (docs/tracing.md "Propagation"): a producer's as it
// sent them, else sampled when this node's tracing records the trace.
uint8_t trace_flags(const Event& ev, const TraceContext& tc, const trace::Tracer* tracer) {
  if (ev.trace.valid()) return ev.trace.flags;
  return tracer != nullptr && tracer->sampled(tc.trace_id) ? 1 : 0;
}

// docs/operations.md §5 "Logs": each attempt at debug, an auto-disable (SPEC R8) at info. Never
// the request's secrets, headers or body (SPEC R14).
void log_attempt(const SendCommand& cmd, const TransportResult& r, const Event* ev,
                 WallTime started_at, const ResultReport& report, WallTime now) {
  const bool disabled = report.endpoint_disabled && log::enabled(log::Level::kInfo);
  if (!disabled && !log::enabled(log::Level::kDebug)) return;
  const std::string_view tenant = ev ? std::string_view(ev->tenant) : std::string_view();
  const std::string code = r.response_received ? std::string() : r.code.str();
  const std::string_view outcome = report.outcome ? outcome_name(*report.outcome) : "";
  if (log::enabled(log::Level::kDebug)) {
    log::debug(
        "delivery_attempt",
        {{"tenant", tenant},
         log::Field::id("endpoint", cmd.endpoint),
         log::Field::id("delivery", cmd.delivery),
         {"event_id", ev ? std::string_view(ev->id) : std::string_view()},
         {"message_id", ev ? std::string_view(ev->message_id) : std::string_view()},
         {"attempt", cmd.attempt},
         {"status", r.http_status},
         {"code", code},
         {"outcome", outcome},
         {"duration_ms", std::chrono::duration<double, std::milli>(now - started_at).count()}},
        "tenant {}: delivery {} to endpoint {}: attempt {}: {} ({})", tenant, cmd.delivery,
        cmd.endpoint, cmd.attempt,
        r.response_received ? fmt::format("HTTP {}", r.http_status) : code, outcome);
  }
  if (disabled) {
    log::info("endpoint_disabled",
              {{"tenant", tenant},
               log::Field::id("endpoint", cmd.endpoint),
               log::Field::id("delivery", cmd.delivery),
               {"status", r.http_status},
               {"code", code}},
              "tenant {}: endpoint {} disabled by the outcome of delivery {} (SPEC R8)", tenant,
              cmd.endpoint, cmd.delivery);
  }
}

}  // namespace

void SendPath::prepare_send(const SendCommand& cmd) {
  Slot* slot;
  if (!free_slots_.empty()) {
    slot = free_slots_.back();
    free_slots_.pop_back();
  } else {
    slots_.push_back(std::make_unique<Slot>(this));
    slot = slots_.back().get();
  }
  slot->cmd = cmd;
  slot->epoch = core_.ownership.sent(id_partition(cmd.delivery));
  slot->result = TransportResult{};
  slot->started_at = core_.loop->wall_now();
  SendRequest& req = slot->request;
  req.delivery_id = cmd.delivery;
  req.attempt = cmd.attempt;
  req.pool_key = cmd.endpoint;
  req.body = {};

  std::shared_ptr<const Event> ev = core_.payloads.find(cmd.event);
  (ev ? core_.metrics.payload_cache_hits : core_.metrics.payload_cache_misses)
      .fetch_add(1, std::memory_order_relaxed);
  if (!ev) {
    if (const Event* fresh = intake_.turn_event(cmd.event)) {
      // Accepted in this very turn: not in the store until commit(), sent right after it.
      ev = std::make_shared<const Event>(*fresh);
      core_.payloads.put(ev);
    } else if (auto it = turn_loaded_.find(cmd.event); it != turn_loaded_.end()) {
      ev = it->second;
    } else {
      // Read back from the store: at once from a local store, on a later turn from a
      // networked one (the slot waits; the lease is held meanwhile).
      ++loads_in_flight_;
      core_.store.load_event_async(
          cmd.event, core_.poster, [this, slot](Result<std::optional<Event>> loaded) {
            --loads_in_flight_;
            std::shared_ptr<const Event> got;
            if (!loaded.ok()) {
              // An I/O error or a corrupt record: the attempt is recorded
              // internal_error and the scheduler retries it like any failed
              // attempt.
              core_.metrics.store_errors.fetch_add(1, std::memory_order_relaxed);
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

void SendPath::finish_prepare(Slot* slot, std::shared_ptr<const Event> ev) {
  const SendCommand& cmd = slot->cmd;
  SendRequest& req = slot->request;
  // Looked up now, not before a load: the endpoint may have changed while it was outstanding.
  const Endpoint* ep = core_.scheduler->find_endpoint(cmd.endpoint);
  req.status_check = cmd.check;
  if (ep) {
    req.url = ep->url;
    req.profile = ep->signature;
    WallTime now = core_.loop->wall_now();
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
  if (ep && ev && ep->send_traceparent && !cmd.check) {
    // The attempt's span is the receiver's parent (docs/tracing.md "Propagation"); the
    // signature covers id, timestamp and body only (SPEC R11), not this header.
    const TraceContext tc = event_trace(*ev);
    req.extra_headers.append("traceparent: ");
    append_traceparent(req.extra_headers, tc.trace_id,
                       attempt_span_id(tc.trace_id, cmd.delivery, cmd.attempt),
                       trace_flags(*ev, tc, core_.options.tracer));
    req.extra_headers.append("\r\n");
  }
  if (!ep || !ev) {
    // Nothing to send (endpoint deleted under the lease, or the event is gone): complete it
    // on the next turn as an attempt that never left, so the scheduler decides its fate.
    slot->result.code =
        ErrorCode::of(ep ? ErrorCode::Kind::kInternalError : ErrorCode::Kind::kEndpointDeleted);
    ++in_flight_;
    core_.loop->post([slot] { slot->on_complete(); });
    return;
  }
  slot->event = std::move(ev);
  to_send_.push_back(slot);
}

void SendPath::on_send_complete(Slot* slot) {
  --in_flight_;
  if (!core_.discarding) {
    if (!core_.ownership.completed(id_partition(slot->cmd.delivery), slot->epoch)) {
      // Its partition was lost (or lost and taken again) while it was out: the scheduler
      // frees the orphaned lease without writing anything; the new owner retries it.
      core_.scheduler->on_result(slot->cmd, slot->result, slot->started_at, core_.loop->wall_now(),
                                 core_.mutations());
      slot->release();
      free_slots_.push_back(slot);
      return;
    }
  }
  if (core_.discarding) {  // stopping: the transport cancels what is left; the leases stay open
    slot->release();
    free_slots_.push_back(slot);
    return;
  }
  WallTime now = core_.loop->wall_now();
  const TransportResult& r = slot->result;
  if (r.deferred != DeferReason::kNone) {
    // Never sent (pacing, connection limits): no attempt, no outcome, no transport failure;
    // the scheduler releases the lease (SPEC R2.3). An UNKNOWN before it stays UNKNOWN.
    core_.metrics.sends_deferred[static_cast<size_t>(r.deferred)].fetch_add(
        1, std::memory_order_relaxed);
    core_.scheduler->on_result(slot->cmd, r, slot->started_at, now, core_.mutations());
    slot->release();
    free_slots_.push_back(slot);
    return;
  }
  if (slot->cmd.check) {
    // R12.11: a status check is no attempt: its own counters; a definitive answer (2xx: the
    // receiver has it; 404: it never got it) settles the delivery's UNKNOWN streak (R12.8).
    const uint16_t st = r.response_received ? r.http_status : 0;
    const size_t answer = st >= 200 && st < 300 && st != 202 ? 0 : st == 404 ? 1 : 2;
    core_.metrics.reconcile_checks[answer].fetch_add(1, std::memory_order_relaxed);
    if (answer != 2) {
      if (auto since = unknown_since_.find(slot->cmd.delivery); since != unknown_since_.end()) {
        const Duration spent = std::max(Duration(0), now - since->second);
        core_.metrics.unknown_seconds_us.fetch_add(static_cast<uint64_t>(spent.count() / 1000),
                                                   std::memory_order_relaxed);
        core_.metrics.unknown_duration.observe(spent);
        unknown_since_.erase(since);
      }
    }
    const ResultReport report =
        core_.scheduler->on_result(slot->cmd, r, slot->started_at, now, core_.mutations());
    if (report.reconcile_expired)
      core_.metrics.reconcile_expired.fetch_add(1, std::memory_order_relaxed);
    slot->release();
    free_slots_.push_back(slot);
    return;
  }
  // The scheduler classifies the attempt (R12.1) and says what followed: its report, not a
  // second classification or a scan of the mutations, feeds the metrics.
  const ResultReport report =
      core_.scheduler->on_result(slot->cmd, r, slot->started_at, now, core_.mutations());
  if (core_.options.tracer != nullptr && slot->event && report.outcome) {
    trace_attempt(*slot, report, now);
    if (report.ended_as) {  // its delivery span, once the written batch reports the end
      if (ended_traces_.size() >= kMaxEndedTraces) ended_traces_.clear();
      ended_traces_[slot->cmd.delivery] = {
          event_trace(*slot->event),
          event_sampled(*slot->event, core_.options.tracer->sample_ratio())};
    }
  }
  if (report.endpoint_disabled)
    core_.metrics.endpoints_disabled.fetch_add(1, std::memory_order_relaxed);
  log_attempt(slot->cmd, r, slot->event.get(), slot->started_at, report, now);
  if (report.outcome)
    core_.metrics.attempts_by_outcome[static_cast<size_t>(*report.outcome)].fetch_add(
        1, std::memory_order_relaxed);
  core_.metrics.attempts_by_status_class[r.response_received ? status_class(r.http_status) : 0]
      .fetch_add(1, std::memory_order_relaxed);
  if (!r.response_received) {
    using K = ErrorCode::Kind;
    Counter* k = nullptr;
    switch (r.code.kind) {
      case K::kDnsFailed:
        k = &core_.metrics.transport_dns;
        break;
      case K::kTlsCert:
      case K::kTlsHandshake:
        k = &core_.metrics.transport_tls;
        break;
      case K::kTimeout:
        k = &core_.metrics.transport_timeout;
        break;
      case K::kNetwork:
        k = r.request_written ? &core_.metrics.transport_reset : &core_.metrics.transport_connect;
        break;
      default:
        k = &core_.metrics.transport_refused_before_send;
        break;
    }
    k->fetch_add(1, std::memory_order_relaxed);
  }
  core_.metrics.attempt_latency.observe(now - slot->started_at);
  // R12.8: a delivery is UNKNOWN from its first UNKNOWN attempt until a definitive answer
  // (or its end: a delivery that ends `unknown` is measured when it is resolved).
  DeliveryId id = slot->cmd.delivery;
  auto since = unknown_since_.find(id);
  if (report.outcome == Outcome::kUnknown) {
    core_.metrics.unknown_attempts.fetch_add(1, std::memory_order_relaxed);
    if (since == unknown_since_.end()) unknown_since_.emplace(id, slot->started_at);
  } else if (report.outcome && since != unknown_since_.end()) {
    const Duration spent = std::max(Duration(0), now - since->second);
    core_.metrics.unknown_seconds_us.fetch_add(static_cast<uint64_t>(spent.count() / 1000),
                                               std::memory_order_relaxed);
    core_.metrics.unknown_duration.observe(spent);
    unknown_since_.erase(since);
  }
  slot->release();
  free_slots_.push_back(slot);
}

void SendPath::refresh_gauges() {
  SchedulerStats s = core_.scheduler->stats();
  core_.metrics.pending.store(static_cast<int64_t>(s.in_wheel), std::memory_order_relaxed);
  core_.metrics.ready.store(static_cast<int64_t>(s.ready), std::memory_order_relaxed);
  core_.metrics.in_flight.store(in_flight_, std::memory_order_relaxed);
  core_.metrics.held_by_breaker.store(static_cast<int64_t>(s.held_by_breaker),
                                      std::memory_order_relaxed);
  core_.metrics.held_by_retry_after.store(static_cast<int64_t>(s.held_by_retry_after),
                                          std::memory_order_relaxed);
  core_.metrics.deferred_waiting.store(static_cast<int64_t>(s.deferred_waiting),
                                       std::memory_order_relaxed);
  core_.metrics.unknown_live.store(static_cast<int64_t>(unknown_since_.size()),
                                   std::memory_order_relaxed);
  core_.metrics.breakers_open.store(static_cast<int64_t>(s.breakers_open + s.breakers_half_open),
                                    std::memory_order_relaxed);
  core_.metrics.endpoints.store(static_cast<int64_t>(s.endpoints), std::memory_order_relaxed);
  core_.metrics.order_keys_waiting.store(static_cast<int64_t>(s.order_keys_backlogged),
                                         std::memory_order_relaxed);
  core_.metrics.order_keys_blocked.store(static_cast<int64_t>(s.order_keys_blocked),
                                         std::memory_order_relaxed);
  core_.metrics.order_waiting.store(static_cast<int64_t>(s.order_waiting),
                                    std::memory_order_relaxed);
  core_.metrics.order_oldest_head_s.store(
      std::chrono::duration_cast<std::chrono::seconds>(s.order_oldest_head).count(),
      std::memory_order_relaxed);
  core_.metrics.superseded.store(s.superseded, std::memory_order_relaxed);
  core_.metrics.intake_waiting_durable.store(static_cast<int64_t>(core_.batch.answers_waiting()),
                                             std::memory_order_relaxed);
}

void SendPath::withhold_sends() {
  for (Slot* slot : to_send_) {
    slot->result = TransportResult{};
    slot->result.deferred = DeferReason::kConnections;
    slot->result.not_before = core_.loop->wall_now() + TurnBatch::kDiskRetry;
    core_.metrics.sends_withheld.fetch_add(1, std::memory_order_relaxed);
    ++in_flight_;
    core_.loop->post([slot] { slot->on_complete(); });
  }
  to_send_.clear();
}

// After the turn's commit (SPEC R12.2: its leases are committed before its sends go out).
void SendPath::send_turn(MonoTime mono) {
  // A store that confirms later (Redis): this turn's sends wait until its batch is durable.
  const uint64_t written = core_.batch.last_written();
  const bool hold = !core_.store.durable_on_write() && core_.store.durable_seq() < written;
  for (Slot* slot : to_send_) {
    if (hold) {
      held_sends_.push_back({written, slot});
      continue;
    }
    send_now(slot, mono);
  }
  to_send_.clear();
  turn_loaded_.clear();
}

// Sends held until their batch is durable (Store::durable_on_write() false) go out now, or,
// when their partition is no longer sendable here (handed over, ownership past its deadline), come
// back unsent: no attempt spent, the scheduler releases the lease. Also when the partition is
// held at another epoch than the send was leased at (lost and taken again while the batch
// waited), or the store fenced that batch: its lease and event were never stored, and the
// owner at the new epoch read the partition without them and may have given their ids to other
// events — sent, the request would carry a webhook id nobody stored (E2eCluster.RedisPrimaryKill…:
// a Redis failover put the batch in a 3.6 s replay; the partition was lost and taken again
// meanwhile; the retried events got the same seqs under new webhook ids, and the held sends
// went out under the old ones).
void SendPath::release_held_sends() {
  if (held_sends_.empty()) return;
  const uint64_t durable = core_.store.durable_seq();
  const MonoTime mono = core_.loop->now();
  while (!held_sends_.empty() && held_sends_.front().seq <= durable) {
    Slot* slot = held_sends_.front().slot;
    held_sends_.pop_front();
    send_now(slot, mono);
  }
}

// Also a send whose payload was read back after its partition started to be handed over (the
// read answers on a later turn): no new sends for a partition being handed over (docs/cluster.md).
void SendPath::send_now(Slot* slot, MonoTime mono) {
  ++in_flight_;
  const Partition p = id_partition(slot->cmd.delivery);
  if (core_.discarding || !core_.ownership.sendable(p, mono, slot->epoch) ||
      core_.ownership.fenced(p, slot->epoch)) {
    slot->result = TransportResult{};
    slot->result.deferred = DeferReason::kConnections;
    slot->result.not_before = core_.loop->wall_now() + milliseconds(200);
    core_.metrics.sends_withheld.fetch_add(1, std::memory_order_relaxed);
    core_.loop->post([slot] { slot->on_complete(); });
    return;
  }
  core_.transport->send(slot);
}

// Every way a delivery ends (a result, 410, delete, disable, a ceiling, the breaker's hold
// limit) passes here once, from a written batch: the outcome counters and the UNKNOWN clock.
void SendPath::delivery_ended(const Delivery& d, WallTime now) {
  switch (d.status) {
    case DeliveryStatus::kDelivered:
      core_.metrics.deliveries_delivered.fetch_add(1, std::memory_order_relaxed);
      core_.metrics.delivery_latency.observe(now - d.created_at);
      break;
    case DeliveryStatus::kFailed:
      core_.metrics.deliveries_failed.fetch_add(1, std::memory_order_relaxed);
      break;
    case DeliveryStatus::kUnknown:
      core_.metrics.deliveries_unknown.fetch_add(1, std::memory_order_relaxed);
      break;
    default:
      core_.metrics.deliveries_dead.fetch_add(1, std::memory_order_relaxed);
      break;
  }
  if (!unknown_since_.empty()) unknown_since_.erase(d.id);
  if (core_.options.tracer != nullptr) trace_delivery(d, now);
}

// One span per attempt (docs/tracing.md "Spans"), kind CLIENT, a child of its delivery's span.
// Its attributes name the receiver by host and port only: a URL's path and query may carry a
// receiver's token, and header values are never traced.
void SendPath::trace_attempt(const Slot& slot, const ResultReport& report, WallTime now) {
  const trace::Tracer& tracer = *core_.options.tracer;
  const Event& ev = *slot.event;
  if (!event_sampled(ev, tracer.sample_ratio())) return;
  const SendCommand& cmd = slot.cmd;
  const TransportResult& r = slot.result;
  const TraceContext tc = event_trace(ev);
  trace::Span s;
  s.trace_id = tc.trace_id;
  s.span_id = attempt_span_id(tc.trace_id, cmd.delivery, cmd.attempt);
  s.parent_span_id = delivery_span_id(tc.trace_id, cmd.delivery);
  s.name = "attempt";
  s.kind = trace::SpanKind::kClient;
  s.start_unix_ns = slot.started_at.ns();
  s.end_unix_ns = now.ns();
  s.add("http.request.method", "POST");
  UrlPolicy any;  // the URL passed the endpoint's checks; here only its host and port are read
  any.allow_http = true;
  any.max_bytes = SIZE_MAX;
  any.denied_ports.clear();
  if (auto url = check_url(slot.request.url, any); url.ok()) {
    s.add("server.address", url->host).add("server.port", int64_t{url->port});
  }
  if (r.response_received) s.add("http.response.status_code", int64_t{r.http_status});
  s.add("ringcast.endpoint.id", std::to_string(cmd.endpoint))
      .add("ringcast.delivery.id", std::to_string(cmd.delivery))
      .add("ringcast.attempt.number", int64_t{cmd.attempt})
      .add("ringcast.attempt.outcome", outcome_name(*report.outcome))
      .add("ringcast.attempt.duration_ms",
           std::chrono::duration_cast<std::chrono::milliseconds>(now - slot.started_at).count());
  if (*report.outcome == Outcome::kSuccess) {
    s.status = trace::SpanStatus::kOk;
  } else {
    // The SPEC R6 code the delivery log shows for it: http_503, timeout, network_ECONNREFUSED.
    const Classification c = classify(r, now);
    std::string code = c.code.is_none() ? std::string("unknown") : c.code.str();
    s.add("ringcast.attempt.code", code);
    s.status = trace::SpanStatus::kError;
    s.status_message = std::move(code);
  }
  core_.options.tracer->emit(std::move(s));
}

// The delivery's span, from its creation to the end a written batch reports. Its event's trace
// is at hand when an attempt ended it (ended_traces_) or the event is cached; else (its endpoint
// deleted or disabled, superseded, a ceiling, long after intake) the event is read back.
void SendPath::trace_delivery(const Delivery& d, WallTime now) {
  trace::Tracer& tracer = *core_.options.tracer;
  if (auto it = ended_traces_.find(d.id); it != ended_traces_.end()) {
    const auto [tc, sampled] = it->second;
    ended_traces_.erase(it);
    if (sampled) emit_delivery_span(d, tc, now);
    return;
  }
  if (std::shared_ptr<const Event> ev = core_.payloads.find(d.event)) {
    if (event_sampled(*ev, tracer.sample_ratio())) emit_delivery_span(d, event_trace(*ev), now);
    return;
  }
  if (trace_loads_ >= kMaxTraceLoads) return tracer.count_dropped(1);
  ++trace_loads_;
  ++loads_in_flight_;  // a stop waits for it like for a payload load
  core_.store.load_event_async(d.event, core_.poster,
                               [this, d, now](Result<std::optional<Event>> loaded) {
                                 --trace_loads_;
                                 --loads_in_flight_;
                                 trace::Tracer& t = *core_.options.tracer;
                                 if (!loaded.ok() || !loaded->has_value())
                                   return t.count_dropped(1);
                                 const Event& ev = **loaded;
                                 if (event_sampled(ev, t.sample_ratio()))
                                   emit_delivery_span(d, event_trace(ev), now);
                               });
}

void SendPath::emit_delivery_span(const Delivery& d, const TraceContext& tc, WallTime now) {
  trace::Span s;
  s.trace_id = tc.trace_id;
  s.span_id = delivery_span_id(tc.trace_id, d.id);
  s.parent_span_id = tc.span_id;  // the event's intake span
  s.name = "delivery";
  s.kind = trace::SpanKind::kInternal;
  s.start_unix_ns = d.created_at.ns();
  s.end_unix_ns = now.ns();
  s.add("ringcast.endpoint.id", std::to_string(d.endpoint))
      .add("ringcast.delivery.id", std::to_string(d.id))
      .add("ringcast.delivery.status", delivery_status_name(d.status))
      .add("ringcast.delivery.attempts", int64_t{d.attempts});
  if (!d.last_code.is_none()) s.add("ringcast.delivery.last_code", d.last_code.str());
  if (d.status == DeliveryStatus::kDelivered) {
    s.status = trace::SpanStatus::kOk;
  } else if (d.status != DeliveryStatus::kSuperseded) {  // superseded is no failure (SPEC R13.3)
    s.status = trace::SpanStatus::kError;
    s.status_message = delivery_status_name(d.status);
  }
  core_.options.tracer->emit(std::move(s));
}

void SendPath::drop_unknown(DeliveryId id) {
  if (unknown_since_.count(id) != 0) unknown_since_.erase(id);
}

void SendPath::forget(const PartitionSet& ps) {
  std::erase_if(unknown_since_, [&](const auto& u) { return ps.test(id_partition(u.first)); });
  std::erase_if(ended_traces_, [&](const auto& u) { return ps.test(id_partition(u.first)); });
}

}  // namespace ringcast::engine
