// The operator-notification webhook (SPEC R8.4, docs/notifications.md): POSTs each stored
// notification to `notifications.webhook_url` from its own thread, loop and HttpTransport.
// Invariants: enqueue() never waits for I/O (a short critical section on a bounded queue), so a
// shard is never slowed by the operator's receiver; every notification enqueued ends in exactly one
// of the counters delivered / failed / dropped once stop() has returned. Best effort: the
// notification is already durable in the store and listed by GET
// /v1/tenants/{tenant}/notifications.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/resolver.h"
#include "core/result.h"
#include "core/time.h"
#include "core/types.h"
#include "engine/metrics.h"
#include "net/http_client.h"

namespace ringcast::engine {

struct NotifierOptions {
  std::string url;     // the operator webhook (checked like an endpoint URL, SPEC R6)
  std::string secret;  // raw HMAC key bytes; empty: no webhook-signature header (R11.2)
  // The shards' transport options: the same address guard, allow-list, URL policy, CA file and
  // timeouts, so the operator URL gets exactly the SSRF checks an endpoint gets (R6, R7).
  net::HttpTransportOptions transport;
  size_t queue_max = 10'000;   // waiting + retrying; when full the oldest is dropped
  uint32_t max_in_flight = 4;  // POSTs on the wire at once
  // Pauses between attempts on a retryable outcome (core/classify.h: 5xx, 429, 3xx, network,
  // timeout, UNKNOWN); Retry-After can lengthen a pause (R7.2). Exhausted: given up (failed).
  std::vector<Duration> retry_ladder = {seconds(1), seconds(5), seconds(30), minutes(2),
                                        minutes(10)};
  Duration stop_drain = seconds(2);  // stop(): due work gets this long, the rest is dropped
  Resolver* resolver = nullptr;      // tests: injected DNS; nullptr = the transport's own
  // Called on the notifier's thread when a notification is done with: POSTed (2xx) or given up
  // (refused, ladder used up). Not for one dropped (stop, a full queue): a store outbox sends
  // those again after a restart.
  std::function<void(const Notification&)> on_finished;
};

struct NotifierStats {
  uint64_t delivered = 0, failed = 0, dropped = 0;
  uint64_t queued = 0;     // not yet finished (waiting, retrying or on the wire)
  uint64_t attempts = 0;   // POSTs completed (any result)
  std::string last_error;  // the SPEC R6 code of the last failed attempt ("http_503", ...)
};

// {"type":"ringcast.notification", then the REST API's notification fields}: exactly
// the REST API's notification fields (api/json_views.cc write_notification: ids as decimal
// strings, endpoint and reason null when unset, `at` RFC 3339 UTC) plus the envelope type.
std::string notification_json(const Notification& n);
// "ntf_<seq>": the webhook-id, stable across the retries of one notification (R11.3).
std::string notification_message_id(const Notification& n);

class Notifier {
 public:
  // Starts the thread, its loop and transport; fails when the loop or transport cannot start.
  static Result<std::unique_ptr<Notifier>> start(NotifierOptions options);
  ~Notifier();  // stop()
  Notifier(const Notifier&) = delete;
  Notifier& operator=(const Notifier&) = delete;

  // Any thread. Never blocks on I/O; when the queue is full the oldest waiting notification is
  // dropped (counted). After stop() the notification is dropped.
  void enqueue(const Notification& n);
  // Stops taking notifications, sends what is due within stop_drain, counts the rest as dropped,
  // joins the thread. Idempotent.
  void stop();

  const NotifierMetrics& metrics() const { return metrics_; }
  NotifierStats stats() const;

  struct Item;
  class Op;

 private:
  explicit Notifier(NotifierOptions options);
  void thread_main(std::promise<Result<void>> started);
  void take_queue();
  void launch_due();
  void launch(std::unique_ptr<Item> item);
  void completed(Op* op);
  Duration next_wait() const;
  bool work_due_before(MonoTime deadline) const;

  NotifierOptions options_;
  NotifierMetrics metrics_;

  // Shared with producers (shard threads).
  mutable std::mutex mu_;
  std::deque<Notification> queue_;  // bounded by queue_max
  bool accepting_ = true;
  std::string last_error_;         // guarded by mu_
  std::atomic<uint64_t> held_{0};  // items the thread holds (waiting + in flight)
  std::atomic<uint64_t> attempts_{0};
  std::atomic<bool> stop_requested_{false};

  // The notifier thread's own state.
  std::unique_ptr<net::Loop> loop_;  // kept until ~Notifier: enqueue() may still wake it
  std::unique_ptr<net::HttpTransport> transport_;
  std::vector<std::unique_ptr<Item>> waiting_;  // oldest first
  std::vector<std::unique_ptr<Op>> in_flight_;
  uint64_t next_order_ = 0;
  bool discarding_ = false;  // the transport is being torn down: completions are dropped
  std::thread thread_;
};

}  // namespace ringcast::engine
