// The span exporter (docs/tracing.md): POSTs finished spans as OTLP/HTTP JSON to
// `tracing.endpoint` from its own thread, loop and HttpTransport, like the operator webhook's
// notifier (engine/notifier.h). Invariants: emit() never waits for I/O (a short critical
// section on a bounded queue: a full queue drops the span, counted), so a shard is never slowed
// by the collector; every span handed to emit() ends in exactly one of the counters exported /
// dropped once stop() has returned. Best effort: nothing of tracing is durable, and nothing of
// delivery waits on it.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/resolver.h"
#include "core/result.h"
#include "core/time.h"
#include "core/types.h"
#include "net/http_client.h"
#include "trace/otlp_json.h"
#include "trace/span.h"

namespace ringcast::net {
class Loop;
}

namespace ringcast::trace {

struct TracerOptions {
  std::string url;  // the collector's OTLP/HTTP traces URL (checked like an endpoint URL)
  Resource resource;
  // The daemon's transport options: the same address guard, allow-list, URL policy and CA file
  // as an endpoint's, so the collector URL gets exactly the checks the operator webhook gets.
  net::HttpTransportOptions transport;
  size_t queue_max = 8192;  // spans waiting; when full a new span is dropped (counted)
  double sample_ratio = 1.0;
  size_t batch_max = 512;             // spans per POST
  Duration batch_delay = seconds(1);  // a span waits at most this long for its batch
  // Pauses before sending a batch again after a 429, 502, 503, 504 or no answer; then the
  // batch is dropped (counted). A Retry-After can lengthen a pause up to retry_after_max.
  std::vector<Duration> retry_pauses = {seconds(1), seconds(2)};
  Duration retry_after_max = seconds(5);
  Duration stop_drain = seconds(2);  // stop(): what is queued gets this long, the rest is dropped
  Resolver* resolver = nullptr;      // tests: injected DNS; nullptr = the transport's own
};

// Written by the exporter thread (and by emit() for drops); read by /metrics.
struct TracerMetrics {
  std::atomic<uint64_t> exported{0};  // spans in batches the collector answered 2xx
  std::atomic<uint64_t> dropped{0};   // queue full, refused or failed batches, left at stop
  std::atomic<uint64_t> batches{0};   // POSTs completed (any result)
};

class Tracer {
 public:
  // Starts the thread, its loop and transport; fails when they cannot start.
  static Result<std::unique_ptr<Tracer>> start(TracerOptions options);
  ~Tracer();  // stop()
  Tracer(const Tracer&) = delete;
  Tracer& operator=(const Tracer&) = delete;

  // Any thread. Never blocks on I/O: queued, or dropped (counted) when the queue is full or the
  // tracer stopped.
  void emit(Span&& span);
  // A span a caller could not make (e.g. its context could not be read in time): counted.
  void count_dropped(uint64_t n);
  // Head sampling of a trace that no producer sampled (core/trace_context.h ratio_sampled).
  bool sampled(const TraceId& trace) const { return ratio_sampled_(trace); }
  double sample_ratio() const { return options_.sample_ratio; }
  // Stops taking spans, sends what is queued within stop_drain (one try each), counts the rest
  // as dropped, joins the thread. Idempotent.
  void stop();

  const TracerMetrics& metrics() const { return metrics_; }
  const TracerOptions& options() const { return options_; }

  class Op;

 private:
  explicit Tracer(TracerOptions options);
  bool ratio_sampled_(const TraceId& trace) const;
  Result<void> init();  // on the exporter's thread: its loop and transport
  void run();           // then until stop(): batches out, the drain, what is left dropped
  void maybe_send(bool draining);
  void send();
  void completed(Op* op);
  void drop_batch(const std::string& why);
  Duration next_wait() const;

  TracerOptions options_;
  TracerMetrics metrics_;

  // Shared with the shards.
  mutable std::mutex mu_;
  std::deque<Span> queue_;  // bounded by queue_max
  bool accepting_ = true;
  std::atomic<bool> stop_requested_{false};

  // The exporter thread's own state.
  std::unique_ptr<net::Loop> loop_;  // kept until ~Tracer: emit() may still wake it
  std::unique_ptr<net::HttpTransport> transport_;
  std::vector<Span> batch_;  // being sent, or waiting to be sent again
  std::string body_;         // batch_ encoded
  size_t tries_ = 0;         // sends of batch_ so far
  MonoTime retry_at_;
  MonoTime next_flush_;
  std::unique_ptr<Op> in_flight_;
  uint64_t posts_ = 0;
  bool discarding_ = false;  // the transport is being torn down: its completion is dropped
  std::thread thread_;
};

}  // namespace ringcast::trace
