// A hand-written in-memory Engine, kept only for what the real engine cannot do on demand:
// hold delivery-log reads at a gate (api_read_pool_test), answer the next submissions 503
// (api_cli_test's resend), and serve a seeded log with hand-made bytes and recorded call
// arguments. The routes themselves are tested on the real engine (tests/engine/
// rest_api_test.cc); where this fake answers, it answers as the real engine does: codes
// unknown_tenant / unknown_endpoint (engine/shard.cc), and delivery-log reads of an unknown
// tenant are empty, as the store's are. Asynchronous calls complete on a worker thread (like a
// shard thread would), never inline. Tenants exist once they have an endpoint or are listed
// in `known_tenants`.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "core/engine.h"
#include "core/url.h"

namespace ringcast::test {

class FakeEngine final : public Engine {
 public:
  FakeEngine() : worker_([this] { run(); }) {}
  ~FakeEngine() override {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    worker_.join();
  }

  // The delivery log the read routes serve in tests: event evt-9 (seq 9<<48|5) of tenant acme,
  // deliveries 9<<48|1..3 to endpoint 77 (two delivered, one pending), each with a 503 attempt
  // whose response prefix is not UTF-8, then a 200; one notification.
  void seed_delivery_log() {
    std::lock_guard lock(mu_);
    Event ev;
    ev.seq = (uint64_t{9} << 48) | 5;
    ev.tenant = "acme";
    ev.id = "evt-9";
    ev.type = "payment.status_changed";
    ev.payload = R"({"status": "paid"})";
    ev.created_at = WallTime::from_ms(1'767'225'600'123);
    events_by_seq[ev.seq] = ev;
    for (uint64_t i = 1; i <= 3; ++i) {
      DeliveryDetail d;
      d.tenant = "acme";
      d.delivery.id = (uint64_t{9} << 48) | i;
      d.delivery.event = ev.seq;
      d.delivery.endpoint = 77;
      d.delivery.status = i == 3 ? DeliveryStatus::kPending : DeliveryStatus::kDelivered;
      d.delivery.attempts = 2;
      d.delivery.created_at = ev.created_at;
      Attempt a;
      a.number = 1;
      a.ladder = Ladder::kFast;
      a.outcome = Outcome::kRetryable;
      a.code = ErrorCode::http(503);
      a.http_status = 503;
      a.request_written = true;
      a.started_at = ev.created_at;
      a.duration = milliseconds(12);
      a.response_prefix = "busy \xff\xfe \"quoted\"\n\x01";  // not UTF-8, control bytes
      d.attempts.push_back(a);
      a.number = 2;
      a.outcome = Outcome::kSuccess;
      a.code = ErrorCode::none();
      a.http_status = 200;
      a.response_prefix = "ok";
      d.attempts.push_back(a);
      deliveries[d.delivery.id] = d;
    }
    Notification n;
    n.seq = 1;
    n.tenant = "acme";
    n.endpoint = 77;
    n.kind = "endpoint_disabled";
    n.reason = ErrorCode::of(ErrorCode::Kind::kGone);
    n.message = "endpoint answered 410 Gone";
    n.at = ev.created_at;
    notes.push_back(n);
  }

  // --- test controls and records (guarded by mu()) ---
  std::mutex& mu() { return mu_; }
  std::set<std::string> known_tenants = {"acme"};
  std::vector<EventInput> submitted;  // every event that reached submit / submit_batch
  int unavailable_next = 0;           // the next N submissions of known tenants answer 503
  size_t batches = 0;
  struct ListArgs {
    std::string tenant;
    std::optional<EndpointId> endpoint;
    std::optional<DeliveryStatus> status;
    size_t limit = 0;
    std::string cursor;
  } last_list;
  std::map<DeliveryId, DeliveryDetail> deliveries;
  std::map<EventSeq, Event> events_by_seq;
  std::vector<Notification> notes;
  bool is_ready = true;
  // SPEC R13: what order_keys answers for any endpoint of the tenant (cut to the limit), and
  // the limit it was last asked with.
  std::vector<OrderKeyView> order_key_views;
  size_t last_order_keys_limit = 0;

  // --- read gate: a slow store read. While closed, every delivery-log read waits in the engine
  // (bounded: after 10 s it goes through anyway, so a broken test cannot hang). ---
  void close_reads() {
    std::lock_guard lock(gate_mu_);
    gate_closed_ = true;
  }
  void open_reads() {
    {
      std::lock_guard lock(gate_mu_);
      gate_closed_ = false;
    }
    gate_cv_.notify_all();
  }
  // Waits until at least `n` reads are held at the gate; false after `timeout`.
  bool wait_held_reads(size_t n, std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
    std::unique_lock lock(gate_mu_);
    return gate_cv_.wait_for(lock, timeout, [&] { return held_ >= n; });
  }
  size_t reads_started() {
    std::lock_guard lock(gate_mu_);
    return reads_started_;
  }

  // --- Engine ---
  void create_endpoint(std::string tenant, EndpointSpec spec, Callback<Endpoint> done) override {
    post([=, this]() mutable {
      UrlPolicy policy;
      auto url = check_url(spec.url, policy);
      if (!url) return done(url.error());
      if (spec.policy != "smengo" && spec.policy != "xhub" && spec.policy != "quick") {
        return done(
            make_error(Errc::kInvalidArgument, "unknown policy", "policy", "unknown_policy"));
      }
      std::lock_guard lock(mu_);
      Endpoint e;
      e.id = next_id_++;
      e.tenant = tenant;
      e.url = spec.url;
      e.event_types = spec.event_types;
      e.policy = spec.policy;
      e.signature = spec.signature;
      e.secrets.push_back(
          Secret{spec.secret ? *spec.secret : "generated-key-" + std::to_string(e.id)});
      e.rate_limit = spec.rate_limit;
      e.max_in_flight = spec.max_in_flight;
      e.headers = spec.headers;
      e.idempotency_key = spec.idempotency_key;
      e.ordering = spec.ordering;  // SPEC R13
      e.on_head_failure = spec.on_head_failure;
      e.supersede = spec.supersede;
      e.created_at = e.updated_at = WallTime::from_ms(1'767'225'600'000);
      endpoints_[e.id] = e;
      known_tenants.insert(tenant);
      done(e);
    });
  }
  void list_endpoints(std::string tenant, Callback<std::vector<Endpoint>> done) override {
    post([=, this] {
      std::lock_guard lock(mu_);
      if (!known_tenants.count(tenant)) return done(unknown_tenant());
      std::vector<Endpoint> out;
      for (auto& [id, e] : endpoints_) {
        if (e.tenant == tenant) out.push_back(e);
      }
      done(out);
    });
  }
  void get_endpoint(std::string tenant, EndpointId id, Callback<Endpoint> done) override {
    post([=, this] {
      std::lock_guard lock(mu_);
      auto* e = find(tenant, id);
      if (!e) return done(unknown_endpoint());
      done(*e);
    });
  }
  void update_endpoint(std::string tenant, EndpointId id, EndpointPatch patch,
                       Callback<Endpoint> done) override {
    post([=, this] {
      if (patch.url) {
        auto url = check_url(*patch.url, UrlPolicy{});
        if (!url) return done(url.error());
      }
      std::lock_guard lock(mu_);
      auto* e = find(tenant, id);
      if (!e) return done(unknown_endpoint());
      if (patch.url) e->url = *patch.url;
      if (patch.event_types) e->event_types = *patch.event_types;
      if (patch.policy) e->policy = *patch.policy;
      if (patch.signature) e->signature = *patch.signature;
      if (patch.rate_limit) e->rate_limit = *patch.rate_limit;
      if (patch.max_in_flight) e->max_in_flight = *patch.max_in_flight;
      if (patch.headers) e->headers = *patch.headers;
      if (patch.idempotency_key) e->idempotency_key = *patch.idempotency_key;
      if (patch.ordering) e->ordering = *patch.ordering;  // SPEC R13
      if (patch.on_head_failure) e->on_head_failure = *patch.on_head_failure;
      if (patch.supersede) e->supersede = *patch.supersede;
      done(*e);
    });
  }
  void delete_endpoint(std::string tenant, EndpointId id, Callback<bool> done) override {
    post([=, this] {
      std::lock_guard lock(mu_);
      if (!find(tenant, id)) return done(unknown_endpoint());
      endpoints_.erase(id);
      done(true);
    });
  }
  void endpoint_action(std::string tenant, EndpointId id, EndpointAction action,
                       Callback<Endpoint> done) override {
    post([=, this] {
      std::lock_guard lock(mu_);
      auto* e = find(tenant, id);
      if (!e) return done(unknown_endpoint());
      e->state =
          action == EndpointAction::kPause ? EndpointState::kPaused : EndpointState::kEnabled;
      done(*e);
    });
  }
  void test_endpoint(std::string tenant, EndpointId id, Callback<DeliveryId> done) override {
    post([=, this] {
      std::lock_guard lock(mu_);
      if (!find(tenant, id)) return done(unknown_endpoint());
      done(DeliveryId{(uint64_t{7} << 48) | 99});
    });
  }
  void rotate_secret(std::string tenant, EndpointId id, std::optional<std::string> secret,
                     Callback<Endpoint> done) override {
    post([=, this] {
      std::lock_guard lock(mu_);
      auto* e = find(tenant, id);
      if (!e) return done(unknown_endpoint());
      if (!e->secrets.empty()) e->secrets.front().expires_at = WallTime::from_ms(1'767'312'000'000);
      e->secrets.insert(e->secrets.begin(),
                        Secret{secret ? *secret : "rotated-" + std::to_string(rot_++)});
      done(*e);
    });
  }

  void submit(EventInput event, Callback<SubmitResult> done) override {
    post([=, this] {
      std::lock_guard lock(mu_);
      done(submit_locked(event));
    });
  }
  void submit_batch(std::vector<EventInput> events,
                    std::function<void(std::vector<Result<SubmitResult>>)> done) override {
    post([=, this] {
      std::lock_guard lock(mu_);
      batches++;
      std::vector<Result<SubmitResult>> out;
      for (const auto& e : events) out.push_back(submit_locked(e));
      done(std::move(out));
    });
  }

  void get_breaker(std::string tenant, Callback<BreakerView> done) override {
    post([=, this] {
      std::lock_guard lock(mu_);
      if (!known_tenants.count(tenant)) return done(unknown_tenant());
      BreakerView v;
      v.snapshot.state =
          breaker_open_ ? BreakerSnapshot::State::kOpen : BreakerSnapshot::State::kClosed;
      v.snapshot.failed_probes = breaker_open_ ? 2 : 0;
      v.snapshot.reopen_at = WallTime::from_ms(1'767'225'900'000);
      v.window_total = 10;
      v.window_failed = breaker_open_ ? 9 : 0;
      done(v);
    });
  }
  void reset_breaker(std::string tenant, Callback<BreakerView> done) override {
    {
      std::lock_guard lock(mu_);
      breaker_open_ = false;
    }
    get_breaker(std::move(tenant), std::move(done));
  }
  void order_keys(std::string tenant, EndpointId endpoint, size_t limit,
                  Callback<std::vector<OrderKeyView>> done) override {
    post([=, this] {
      std::lock_guard lock(mu_);
      if (!find(tenant, endpoint)) return done(unknown_endpoint());
      last_order_keys_limit = limit;
      std::vector<OrderKeyView> out = order_key_views;
      if (out.size() > limit) out.resize(limit);
      done(out);
    });
  }
  void set_subscription(std::string tenant, bool active, Callback<bool> done) override {
    post([=, this] {
      std::lock_guard lock(mu_);
      if (!known_tenants.count(tenant)) return done(unknown_tenant());
      subscription_[tenant] = active;
      done(active);
    });
  }

  Result<std::optional<DeliveryDetail>> get_delivery(std::string_view tenant,
                                                     DeliveryId id) override {
    read_gate();
    std::lock_guard lock(mu_);
    auto it = deliveries.find(id);
    if (it == deliveries.end() || it->second.tenant != tenant) {
      return std::optional<DeliveryDetail>();
    }
    return std::optional<DeliveryDetail>(it->second);
  }
  Result<std::vector<Delivery>> recent_deliveries(std::string_view tenant) override {
    read_gate();
    std::lock_guard lock(mu_);
    std::vector<Delivery> out;
    for (auto it = deliveries.rbegin(); it != deliveries.rend() && out.size() < 25; ++it) {
      if (it->second.tenant == tenant) out.push_back(it->second.delivery);
    }
    return out;
  }
  Result<DeliveryPage> list_deliveries(std::string_view tenant, std::optional<EndpointId> endpoint,
                                       std::optional<DeliveryStatus> status, size_t limit,
                                       std::string_view cursor) override {
    read_gate();
    std::lock_guard lock(mu_);
    last_list = ListArgs{std::string(tenant), endpoint, status, limit, std::string(cursor)};
    DeliveryPage page;
    for (auto& [id, d] : deliveries) {
      if (d.tenant != tenant) continue;
      if (endpoint && d.delivery.endpoint != *endpoint) continue;
      if (status && d.delivery.status != *status) continue;
      page.items.push_back(d.delivery);
    }
    if (page.items.size() > limit) {
      page.items.resize(limit);
      page.next_cursor = "next-page";
    }
    return page;
  }
  Result<std::optional<Event>> get_event(std::string_view tenant,
                                         std::string_view event_id) override {
    read_gate();
    std::lock_guard lock(mu_);
    for (auto& [seq, e] : events_by_seq) {
      if (e.tenant == tenant && e.id == event_id) return std::optional<Event>(e);
    }
    return std::optional<Event>();
  }
  Result<std::optional<Event>> get_event_by_seq(std::string_view tenant, EventSeq seq) override {
    read_gate();
    std::lock_guard lock(mu_);
    auto it = events_by_seq.find(seq);
    if (it == events_by_seq.end() || it->second.tenant != tenant) return std::optional<Event>();
    return std::optional<Event>(it->second);
  }
  Result<std::vector<Notification>> notifications(std::string_view tenant) override {
    read_gate();
    std::lock_guard lock(mu_);
    std::vector<Notification> out;
    for (const auto& n : notes) {
      if (n.tenant == tenant) out.push_back(n);
    }
    return out;
  }
  std::string metrics_text() override {
    return "# TYPE ringcast_attempts_total counter\nringcast_attempts_total{outcome=\"success\"} "
           "3\n";
  }
  bool ready() const override {
    std::lock_guard lock(mu_);
    return is_ready;
  }

  void open_breaker() {
    std::lock_guard lock(mu_);
    breaker_open_ = true;
  }
  std::optional<bool> subscription(const std::string& tenant) {
    std::lock_guard lock(mu_);
    auto it = subscription_.find(tenant);
    if (it == subscription_.end()) return std::nullopt;
    return it->second;
  }

 private:
  // As engine/shard.cc answers.
  static Error unknown_tenant() {
    return make_error(Errc::kNotFound, "unknown tenant: create an endpoint first", "tenant",
                      "unknown_tenant");
  }
  static Error unknown_endpoint() {
    return make_error(Errc::kNotFound, "no such endpoint for this tenant", "endpoint",
                      "unknown_endpoint");
  }

  void read_gate() {
    std::unique_lock lock(gate_mu_);
    reads_started_++;
    if (!gate_closed_) return;
    held_++;
    gate_cv_.notify_all();
    gate_cv_.wait_for(lock, std::chrono::seconds(10), [&] { return !gate_closed_; });
    held_--;
  }

  Endpoint* find(const std::string& tenant, EndpointId id) {
    auto it = endpoints_.find(id);
    if (it == endpoints_.end() || it->second.tenant != tenant) return nullptr;
    return &it->second;
  }

  Result<SubmitResult> submit_locked(const EventInput& e) {
    submitted.push_back(e);
    if (!known_tenants.count(e.tenant)) return unknown_tenant();
    if (e.id.find(' ') != std::string::npos) {
      return make_error(Errc::kInvalidArgument,
                        "event id must be 1-256 printable ASCII characters without spaces", "id",
                        "invalid_event_id");
    }
    if (unavailable_next > 0) {  // as a stopping engine answers (per line in a bulk request)
      --unavailable_next;
      return make_error(Errc::kUnavailable, "the engine is shutting down", nullptr,
                        "shutting_down");
    }
    auto key = e.tenant + "\n" + e.id;
    auto it = events_.find(key);
    uint32_t n = 0;
    for (auto& [id, ep] : endpoints_) n += ep.tenant == e.tenant ? 1 : 0;
    if (it != events_.end()) {
      if (it->second.first != e.payload) {
        return make_error(Errc::kConflict, "event id already used with another payload", "id",
                          "conflict");
      }
      return SubmitResult{SubmitResult::Kind::kDuplicate, 1, it->second.second};
    }
    events_[key] = {e.payload, n};
    return SubmitResult{SubmitResult::Kind::kAccepted, 1, n};
  }

  void post(std::function<void()> fn) {
    {
      std::lock_guard lock(mu_);
      queue_.push_back(std::move(fn));
    }
    cv_.notify_all();
  }
  void run() {
    std::unique_lock lock(mu_);
    while (true) {
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty() && stop_) return;
      auto fn = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      fn();
      lock.lock();
    }
  }

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool stop_ = false;
  std::map<EndpointId, Endpoint> endpoints_;
  std::map<std::string, std::pair<std::string, uint32_t>> events_;
  std::map<std::string, bool> subscription_;
  bool breaker_open_ = false;
  EndpointId next_id_ = (uint64_t{200} << 48) | 1;  // > 2^53: ids must travel as strings
  int rot_ = 0;
  std::mutex gate_mu_;  // the read gate; never held together with mu_
  std::condition_variable gate_cv_;
  bool gate_closed_ = false;
  size_t held_ = 0;
  size_t reads_started_ = 0;
  std::thread worker_;  // last: starts after everything above exists
};

}  // namespace ringcast::test
