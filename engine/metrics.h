// Per-shard counters and gauges, written by the shard thread only (relaxed atomics so the
// /metrics reader on another thread sees whole values), summed into Prometheus text.
// SPEC R12.8: transport failures and business outcomes are separate families; time spent in
// the UNKNOWN state is measured. No per-endpoint labels (cardinality stays bounded).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "core/transport.h"
#include "core/types.h"

namespace ringcast::trace {
struct TracerMetrics;
}

namespace ringcast::engine {

using Counter = std::atomic<uint64_t>;
using Gauge = std::atomic<int64_t>;

// Latency buckets in milliseconds (upper bounds); the last bucket is +Inf. One exchange ends
// within 15 s (the deadline); a delivery that needed retries can take hours to days (the
// ladders of SPEC R3), so the buckets go on to a day.
inline constexpr std::array<int64_t, 21> kLatencyBucketsMs = {
    1,    2,     5,     10,    25,    50,     100,    250,     500,      1000,    2500,
    5000, 10000, 15000, 30000, 60000, 300000, 900000, 3600000, 21600000, 86400000};

struct Histogram {
  std::array<Counter, kLatencyBucketsMs.size() + 1> buckets{};
  Counter count{0};
  Counter sum_us{0};
  void observe(Duration d);
};

struct ShardMetrics {
  // intake
  Counter events_accepted{0}, events_duplicate{0}, events_conflict{0}, events_rejected{0};
  Counter deliveries_created{0};
  // business outcomes (core Outcome) and HTTP status classes (0 = no response, 1..5)
  std::array<Counter, 4> attempts_by_outcome{};
  std::array<Counter, 6> attempts_by_status_class{};
  // transport failures, by kind (no response came)
  Counter transport_dns{0}, transport_connect{0}, transport_tls{0}, transport_timeout{0},
      transport_reset{0}, transport_protocol{0}, transport_refused_before_send{0};
  // sends the transport gave back unsent (ringcast's own back-pressure), by DeferReason: no
  // attempt, no outcome, no transport failure (SPEC R2.3, R12.8)
  std::array<Counter, kDeferReasons> sends_deferred{};
  Counter deliveries_delivered{0}, deliveries_failed{0}, deliveries_dead{0};
  Counter deliveries_unknown{0};  // ended `unknown`, needs review (R12.10)
  // operator resolutions of `unknown` deliveries (R12.10), by what they were resolved as
  Counter resolved_delivered{0}, resolved_failed{0};
  Counter endpoints_disabled{0};
  Counter unknown_attempts{0};
  Counter unknown_seconds_us{0};  // time from an UNKNOWN attempt to the delivery's next result
  // Time spent UNKNOWN (R12.8; seed 003's time in PENDING_CONFIRMATION): from the first
  // UNKNOWN attempt of a streak to the answer that settled it, or to an operator's resolution.
  Histogram unknown_duration;
  // Reconciliation (R12.11): status checks by answer — confirmed (2xx), not_received (404),
  // pending (processing or no answer) —, and deliveries whose reconciliation deadline passed.
  std::array<Counter, 3> reconcile_checks{};
  Counter reconcile_expired{0};
  Histogram attempt_latency;
  Histogram delivery_latency;  // created → delivered
  // store
  Counter store_batches{0}, store_records{0}, store_errors{0};
  // Cluster mode (docs/cluster.md): partitions taken, handed over, lost; sends held back because
  // their partition was being handed over or its ownership was past its local deadline; intake
  // answers withdrawn because the store fenced their write.
  Counter partitions_acquired{0}, partitions_released{0}, partitions_lost{0};
  Counter sends_withheld{0}, intake_fenced{0};
  // Intake on a non-owner (core/inbox.h): events queued for their partition's owner; queued
  // events this node drained as owner; drained entries dropped (their id was taken by another
  // payload meanwhile, or the tenant is gone), each logged.
  Counter inbox_queued{0}, inbox_drained{0}, inbox_dropped{0};
  Counter intake_store_full{0};  // intake answered 503 store_full (Store::full(): Redis memory)
  Counter payload_cache_hits{0}, payload_cache_misses{0};  // event payloads for sends
  // gauges
  Gauge pending{0}, ready{0}, in_flight{0}, held_by_breaker{0}, breakers_open{0};
  Gauge deferred_waiting{0}, held_by_retry_after{0};
  Gauge unknown_live{0};  // live deliveries whose latest attempt was UNKNOWN (R12.8)
  Gauge tenants{0}, endpoints{0}, intake_waiting_durable{0};
  // Ordered delivery (SPEC R13): from the scheduler's stats each turn.
  Gauge order_keys_waiting{0}, order_keys_blocked{0}, order_waiting{0}, order_oldest_head_s{0};
  Counter superseded{0};
};

std::string render_prometheus(const std::vector<const ShardMetrics*>& shards, uint32_t shard_count);

// The process's log (log/log.h, docs/operations.md §5 "Logs"), read from the log module:
// `ringcast_log_lines_suppressed_total{event="..."}` (the rate limit, per event kind) and
// `ringcast_log_lines_dropped_total` (the async queue was full). render_prometheus() appends it.
std::string render_log_metrics();

// The operator-notification webhook (engine/notifier.h, SPEC R8.4), written by its thread.
struct NotifierMetrics {
  Counter delivered{0};  // a 2xx from the operator URL
  Counter failed{0};     // gave up: ladder exhausted, 4xx, or the URL/address was refused
  Counter dropped{0};    // queue full (oldest dropped), or still queued at stop
};

// `ringcast_notifications_webhook_total{outcome="delivered|failed|dropped"}`.
std::string render_notifier_metrics(const NotifierMetrics& m);

// The owner's e-mail (engine/mailer.h, SPEC R8.4), written by its thread.
struct MailerMetrics {
  Counter sent{0};     // accepted by the SMTP relay (250 to the end of DATA)
  Counter failed{0};   // gave up: a permanent error (5xx, TLS refused), or the ladder used up
  Counter dropped{0};  // queue full (oldest dropped), or still queued at stop
  Gauge queued{0};     // waiting, retrying or being sent
};

// `ringcast_owner_emails_total{result="sent|failed|dropped"}` and `ringcast_owner_emails_queued`.
std::string render_mailer_metrics(const MailerMetrics& m);

// The span exporter (trace/tracer.h, docs/tracing.md), written by its thread:
// `ringcast_trace_spans_exported_total` and `ringcast_trace_spans_dropped_total`.
std::string render_tracer_metrics(const trace::TracerMetrics& m);

}  // namespace ringcast::engine
