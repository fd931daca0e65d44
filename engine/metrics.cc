#include "engine/metrics.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <utility>

#include "trace/tracer.h"
#include "log/log.h"

namespace ringcast::engine {

void Histogram::observe(Duration d) {
  // Buckets are upper bounds, inclusive (Prometheus `le`): 1.5 ms counts under 2 ms, not 1.
  const int64_t us = std::chrono::duration_cast<microseconds>(d).count();
  size_t i = 0;
  while (i < kLatencyBucketsMs.size() && us > kLatencyBucketsMs[i] * 1000) ++i;
  buckets[i].fetch_add(1, std::memory_order_relaxed);
  count.fetch_add(1, std::memory_order_relaxed);
  sum_us.fetch_add(us > 0 ? static_cast<uint64_t>(us) : 0, std::memory_order_relaxed);
}

namespace {

class Writer {
 public:
  explicit Writer(const std::vector<const ShardMetrics*>& s) : shards_(s) {}
  template <class F>
  uint64_t sum_u(F f) const {
    uint64_t v = 0;
    for (auto* s : shards_) v += f(*s).load(std::memory_order_relaxed);
    return v;
  }
  template <class F>
  int64_t sum_i(F f) const {
    int64_t v = 0;
    for (auto* s : shards_) v += f(*s).load(std::memory_order_relaxed);
    return v;
  }
  void header(const char* name, const char* type, const char* help) {
    out_ += "# HELP ";
    out_ += name;
    out_ += ' ';
    out_ += help;
    out_ += "\n# TYPE ";
    out_ += name;
    out_ += ' ';
    out_ += type;
    out_ += '\n';
  }
  void sample(const char* name, const std::string& labels, double v) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.17g", v);
    out_ += name;
    if (!labels.empty()) out_ += "{" + labels + "}";
    out_ += ' ';
    out_ += buf;
    out_ += '\n';
  }
  template <class F>
  void counter(const char* name, const char* help, F f) {
    header(name, "counter", help);
    sample(name, "", static_cast<double>(sum_u(f)));
  }
  template <class F>
  void gauge(const char* name, const char* help, F f) {
    header(name, "gauge", help);
    sample(name, "", static_cast<double>(sum_i(f)));
  }
  template <class F>
  void gauge_max(const char* name, const char* help, F f) {  // the largest shard's value
    header(name, "gauge", help);
    int64_t v = 0;
    for (auto* s : shards_) v = std::max(v, f(*s).load(std::memory_order_relaxed));
    sample(name, "", static_cast<double>(v));
  }
  template <class F>
  void histogram(const char* name, const char* help, F f) {
    header(name, "histogram", help);
    uint64_t cumulative = 0;
    std::string hname = std::string(name) + "_bucket";
    for (size_t i = 0; i <= kLatencyBucketsMs.size(); ++i) {
      cumulative += sum_u([&](const ShardMetrics& s) -> const Counter& { return f(s).buckets[i]; });
      char le[32] = "+Inf";
      if (i < kLatencyBucketsMs.size()) {
        std::snprintf(le, sizeof le, "%g", static_cast<double>(kLatencyBucketsMs[i]) / 1000.0);
      }
      sample(hname.c_str(), std::string("le=\"") + le + "\"", static_cast<double>(cumulative));
    }
    sample((std::string(name) + "_sum").c_str(), "",
           static_cast<double>(
               sum_u([&](const ShardMetrics& s) -> const Counter& { return f(s).sum_us; })) /
               1e6);
    sample((std::string(name) + "_count").c_str(), "",
           static_cast<double>(
               sum_u([&](const ShardMetrics& s) -> const Counter& { return f(s).count; })));
  }
  std::string& out() { return out_; }

 private:
  const std::vector<const ShardMetrics*>& shards_;
  std::string out_;
};

}  // namespace

std::string render_prometheus(const std::vector<const ShardMetrics*>& shards,
                              uint32_t shard_count) {
  Writer w(shards);
  using M = const ShardMetrics&;
  w.counter("ringcast_events_accepted_total", "Events accepted by intake (durable).",
            [](M s) -> const Counter& { return s.events_accepted; });
  w.counter("ringcast_events_duplicate_total", "Idempotent repeats of an accepted event.",
            [](M s) -> const Counter& { return s.events_duplicate; });
  w.counter("ringcast_events_conflict_total", "Same event id with another payload (409).",
            [](M s) -> const Counter& { return s.events_conflict; });
  w.counter("ringcast_events_rejected_total",
            "Events refused by intake (bad input, unknown tenant).",
            [](M s) -> const Counter& { return s.events_rejected; });
  w.counter("ringcast_deliveries_created_total", "Deliveries created by fan-out.",
            [](M s) -> const Counter& { return s.deliveries_created; });

  w.header("ringcast_attempts_total", "counter", "Attempts by business outcome (SPEC R6, R12.1).");
  for (size_t i = 0; i < 4; ++i)
    w.sample("ringcast_attempts_total",
             std::string("outcome=\"") + outcome_name(static_cast<Outcome>(i)) + "\"",
             static_cast<double>(
                 w.sum_u([&](M s) -> const Counter& { return s.attempts_by_outcome[i]; })));
  w.header("ringcast_attempt_responses_total", "counter",
           "Attempts by HTTP status class; class=\"none\" when no response came.");
  static const char* kClass[] = {"none", "1xx", "2xx", "3xx", "4xx", "5xx"};
  for (size_t i = 0; i < 6; ++i)
    w.sample("ringcast_attempt_responses_total", std::string("class=\"") + kClass[i] + "\"",
             static_cast<double>(
                 w.sum_u([&](M s) -> const Counter& { return s.attempts_by_status_class[i]; })));
  w.header("ringcast_transport_failures_total", "counter",
           "Transport failures (no HTTP response), by kind (R12.8).");
  struct K {
    const char* name;
    const Counter ShardMetrics::*field;
  };
  static const K kKinds[] = {{"dns", &ShardMetrics::transport_dns},
                             {"connect", &ShardMetrics::transport_connect},
                             {"tls", &ShardMetrics::transport_tls},
                             {"timeout", &ShardMetrics::transport_timeout},
                             {"reset", &ShardMetrics::transport_reset},
                             {"protocol", &ShardMetrics::transport_protocol},
                             {"refused_before_send", &ShardMetrics::transport_refused_before_send}};
  for (const K& k : kKinds)
    w.sample("ringcast_transport_failures_total", std::string("kind=\"") + k.name + "\"",
             static_cast<double>(w.sum_u([&](M s) -> const Counter& { return s.*(k.field); })));
  w.header("ringcast_sends_deferred_total", "counter",
           "Sends given back unsent by ringcast's own back-pressure (no attempt spent), by "
           "reason.");
  for (size_t i = 1; i < kDeferReasons; ++i)
    w.sample(
        "ringcast_sends_deferred_total",
        std::string("reason=\"") + defer_reason_name(static_cast<DeferReason>(i)) + "\"",
        static_cast<double>(w.sum_u([&](M s) -> const Counter& { return s.sends_deferred[i]; })));
  w.counter("ringcast_deliveries_delivered_total", "Deliveries that got a 2xx.",
            [](M s) -> const Counter& { return s.deliveries_delivered; });
  w.counter("ringcast_deliveries_failed_total", "Deliveries FAILED (budget, ceiling, rejected).",
            [](M s) -> const Counter& { return s.deliveries_failed; });
  w.counter("ringcast_deliveries_dead_total", "Deliveries dead with their endpoint (R8).",
            [](M s) -> const Counter& { return s.deliveries_dead; });
  w.counter("ringcast_deliveries_ended_unknown_total",
            "Deliveries ended UNKNOWN, needing review: budget or ceiling over on an UNKNOWN "
            "outcome (R12.10).",
            [](M s) -> const Counter& { return s.deliveries_unknown; });
  w.header("ringcast_deliveries_resolved_total", "counter",
           "UNKNOWN deliveries an operator resolved, by outcome.");
  w.sample(
      "ringcast_deliveries_resolved_total", "outcome=\"delivered\"",
      static_cast<double>(w.sum_u([](M s) -> const Counter& { return s.resolved_delivered; })));
  w.sample("ringcast_deliveries_resolved_total", "outcome=\"failed\"",
           static_cast<double>(w.sum_u([](M s) -> const Counter& { return s.resolved_failed; })));
  w.header("ringcast_reconcile_checks_total", "counter",
           "Reconciliation status checks by answer: confirmed (2xx, no resend), not_received (404, "
           "resent), pending (processing or no answer, asked again).");
  {
    const char* answers[] = {"answer=\"confirmed\"", "answer=\"not_received\"",
                             "answer=\"pending\""};
    for (size_t i = 0; i < 3; ++i) {
      w.sample("ringcast_reconcile_checks_total", answers[i],
               static_cast<double>(
                   w.sum_u([i](M s) -> const Counter& { return s.reconcile_checks[i]; })));
    }
  }
  w.counter("ringcast_reconcile_expired_total",
            "Deliveries whose reconciliation deadline passed without an answer: unknown, "
            "needing review.",
            [](M s) -> const Counter& { return s.reconcile_expired; });
  w.counter("ringcast_endpoints_disabled_total", "Endpoints auto-disabled (410, exhaustion).",
            [](M s) -> const Counter& { return s.endpoints_disabled; });
  w.counter("ringcast_unknown_attempts_total", "Attempts whose outcome is UNKNOWN (R12.1).",
            [](M s) -> const Counter& { return s.unknown_attempts; });
  w.header("ringcast_unknown_seconds_total", "counter",
           "Time deliveries spent UNKNOWN: from an UNKNOWN attempt to the next result (R12.8).");
  w.sample(
      "ringcast_unknown_seconds_total", "",
      static_cast<double>(w.sum_u([](M s) -> const Counter& { return s.unknown_seconds_us; })) /
          1e6);
  w.histogram("ringcast_attempt_duration_seconds", "Duration of one HTTP attempt.",
              [](M s) -> const Histogram& { return s.attempt_latency; });
  w.histogram("ringcast_delivery_latency_seconds", "From delivery creation to its 2xx.",
              [](M s) -> const Histogram& { return s.delivery_latency; });
  w.histogram("ringcast_unknown_duration_seconds",
              "Time deliveries spent UNKNOWN, from the first UNKNOWN attempt to the answer or "
              "the resolution that settled it (R12.8).",
              [](M s) -> const Histogram& { return s.unknown_duration; });
  w.header("ringcast_partitions_total", "counter",
           "Cluster mode: partition leases taken, handed over and lost by this node's shards.");
  w.sample(
      "ringcast_partitions_total", "event=\"acquired\"",
      static_cast<double>(w.sum_u([](M s) -> const Counter& { return s.partitions_acquired; })));
  w.sample(
      "ringcast_partitions_total", "event=\"released\"",
      static_cast<double>(w.sum_u([](M s) -> const Counter& { return s.partitions_released; })));
  w.sample("ringcast_partitions_total", "event=\"lost\"",
           static_cast<double>(w.sum_u([](M s) -> const Counter& { return s.partitions_lost; })));
  w.counter("ringcast_sends_withheld_total",
            "Cluster mode: sends not made because their partition was being handed over or its "
            "lease was past its local deadline (no attempt spent).",
            [](M s) -> const Counter& { return s.sends_withheld; });
  w.counter("ringcast_intake_fenced_total",
            "Cluster mode: accepted events answered 503 because the store fenced their write "
            "(the partition had moved); the producer retries them.",
            [](M s) -> const Counter& { return s.intake_fenced; });
  w.counter("ringcast_inbox_queued_total",
            "Cluster mode: events taken by this node for a partition it does not own, queued "
            "durably in that partition's inbox for its owner.",
            [](M s) -> const Counter& { return s.inbox_queued; });
  w.counter("ringcast_inbox_drained_total",
            "Cluster mode: queued events this node took in as their partition's owner.",
            [](M s) -> const Counter& { return s.inbox_drained; });
  w.counter("ringcast_inbox_dropped_total",
            "Cluster mode: queued events dropped when drained (their id was accepted with another "
            "payload meanwhile, or their tenant is gone); each is logged.",
            [](M s) -> const Counter& { return s.inbox_dropped; });
  w.counter("ringcast_intake_store_full_total",
            "Events answered 503 store_full: the store was over its memory high-water mark "
            "(Redis, storage.redis.high_water).",
            [](M s) -> const Counter& { return s.intake_store_full; });
  w.counter("ringcast_store_batches_total", "Write batches committed (one per loop turn).",
            [](M s) -> const Counter& { return s.store_batches; });
  w.counter("ringcast_store_errors_total",
            "Store reads that failed (I/O error, corrupt record); a failed write aborts.",
            [](M s) -> const Counter& { return s.store_errors; });
  w.counter("ringcast_payload_cache_hits_total",
            "Sends whose event payload came from memory (engine.payload_cache).",
            [](M s) -> const Counter& { return s.payload_cache_hits; });
  w.counter("ringcast_payload_cache_misses_total",
            "Sends whose event payload was read back from the store.",
            [](M s) -> const Counter& { return s.payload_cache_misses; });
  w.gauge("ringcast_deliveries_pending", "Deliveries waiting for their next attempt.",
          [](M s) -> const Gauge& { return s.pending; });
  w.gauge("ringcast_deliveries_ready", "Deliveries due and queued per endpoint.",
          [](M s) -> const Gauge& { return s.ready; });
  w.gauge("ringcast_deliveries_in_flight", "Attempts on the wire.",
          [](M s) -> const Gauge& { return s.in_flight; });
  w.gauge("ringcast_deliveries_held_by_breaker", "Deliveries held by an open tenant breaker.",
          [](M s) -> const Gauge& { return s.held_by_breaker; });
  w.gauge("ringcast_deliveries_deferred",
          "Deliveries waiting because a send was given back unsent (pacing, connection limits).",
          [](M s) -> const Gauge& { return s.deferred_waiting; });
  w.gauge("ringcast_deliveries_held_by_retry_after",
          "Deliveries due but held: their endpoint answered Retry-After (SPEC R7).",
          [](M s) -> const Gauge& { return s.held_by_retry_after; });
  w.gauge("ringcast_deliveries_unknown",
          "Live deliveries whose latest attempt was UNKNOWN (the receiver may have acted).",
          [](M s) -> const Gauge& { return s.unknown_live; });
  w.gauge("ringcast_breakers_open", "Tenants whose circuit breaker is open or half-open.",
          [](M s) -> const Gauge& { return s.breakers_open; });
  // Ordered delivery (SPEC R13, docs/operations.md "Ordered delivery").
  w.gauge("ringcast_order_keys_waiting",
          "Ordering keys with deliveries waiting behind their head, or blocked.",
          [](M s) -> const Gauge& { return s.order_keys_waiting; });
  w.gauge("ringcast_order_keys_blocked",
          "Ordering keys held because their head ended in failure (on_head_failure = block).",
          [](M s) -> const Gauge& { return s.order_keys_blocked; });
  w.gauge("ringcast_order_deliveries_waiting", "Deliveries waiting behind their key's head.",
          [](M s) -> const Gauge& { return s.order_waiting; });
  w.gauge_max("ringcast_order_oldest_head_seconds",
              "Age of the oldest head of an ordering key with a backlog (a blocked key's: since "
              "the block).",
              [](M s) -> const Gauge& { return s.order_oldest_head_s; });
  w.counter("ringcast_deliveries_superseded_total",
            "Deliveries ended superseded by a newer one of their ordering key (SPEC R13.3).",
            [](M s) -> const Counter& { return s.superseded; });
  w.gauge("ringcast_endpoints", "Endpoints known to the shards.",
          [](M s) -> const Gauge& { return s.endpoints; });
  w.gauge("ringcast_intake_waiting_durable", "Accepted events waiting for their WAL sync.",
          [](M s) -> const Gauge& { return s.intake_waiting_durable; });
  w.header("ringcast_shards", "gauge", "Shard threads.");
  w.sample("ringcast_shards", "", shard_count);
  w.out() += render_log_metrics();
  return std::move(w.out());
}

std::string render_log_metrics() {
  std::string out =
      "# HELP ringcast_log_lines_suppressed_total Log lines dropped by the per-event-kind rate "
      "limit (log.rate_per_second, log.burst).\n"
      "# TYPE ringcast_log_lines_suppressed_total counter\n";
  for (const log::SuppressedCount& s : log::suppressed_counts()) {
    out += "ringcast_log_lines_suppressed_total{event=\"";
    for (char c : s.event) {  // the kinds are the code's snake_case names; escaped all the same
      if (c == '"' || c == '\\') out += '\\';
      if (c == '\n') {
        out += "\\n";
        continue;
      }
      out += c;
    }
    out += "\"} ";
    out += std::to_string(s.lines);
    out += '\n';
  }
  out +=
      "# HELP ringcast_log_lines_dropped_total Log lines dropped because the log's queue was full "
      "(stderr slower than the lines came).\n"
      "# TYPE ringcast_log_lines_dropped_total counter\n"
      "ringcast_log_lines_dropped_total ";
  out += std::to_string(log::lines_dropped());
  out += '\n';
  return out;
}

std::string render_notifier_metrics(const NotifierMetrics& m) {
  std::string out =
      "# HELP ringcast_notifications_webhook_total Operator notifications POSTed to "
      "notifications.webhook_url, by outcome (SPEC R8.4).\n"
      "# TYPE ringcast_notifications_webhook_total counter\n";
  const std::pair<const char*, const Counter*> rows[] = {
      {"delivered", &m.delivered}, {"failed", &m.failed}, {"dropped", &m.dropped}};
  for (const auto& [name, c] : rows) {
    out += "ringcast_notifications_webhook_total{outcome=\"";
    out += name;
    out += "\"} ";
    out += std::to_string(c->load(std::memory_order_relaxed));
    out += '\n';
  }
  return out;
}

std::string render_mailer_metrics(const MailerMetrics& m) {
  std::string out =
      "# HELP ringcast_owner_emails_total Owner e-mails on auto-disable through "
      "notifications.smtp, by result (SPEC R8.4).\n"
      "# TYPE ringcast_owner_emails_total counter\n";
  const std::pair<const char*, const Counter*> rows[] = {
      {"sent", &m.sent}, {"failed", &m.failed}, {"dropped", &m.dropped}};
  for (const auto& [name, c] : rows) {
    out += "ringcast_owner_emails_total{result=\"";
    out += name;
    out += "\"} ";
    out += std::to_string(c->load(std::memory_order_relaxed));
    out += '\n';
  }
  out +=
      "# HELP ringcast_owner_emails_queued Owner e-mails waiting, retrying or being sent.\n"
      "# TYPE ringcast_owner_emails_queued gauge\n"
      "ringcast_owner_emails_queued ";
  out += std::to_string(m.queued.load(std::memory_order_relaxed));
  out += '\n';
  return out;
}

std::string render_tracer_metrics(const trace::TracerMetrics& m) {
  std::string out =
      "# HELP ringcast_trace_spans_exported_total Spans the OTLP collector at tracing.endpoint "
      "accepted (docs/tracing.md).\n"
      "# TYPE ringcast_trace_spans_exported_total counter\n"
      "ringcast_trace_spans_exported_total ";
  out += std::to_string(m.exported.load(std::memory_order_relaxed));
  out +=
      "\n# HELP ringcast_trace_spans_dropped_total Spans not exported: the exporter's queue was "
      "full, the collector refused or kept failing a batch, or they were still queued at a "
      "stop.\n"
      "# TYPE ringcast_trace_spans_dropped_total counter\n"
      "ringcast_trace_spans_dropped_total ";
  out += std::to_string(m.dropped.load(std::memory_order_relaxed));
  out += '\n';
  return out;
}

}  // namespace ringcast::engine
