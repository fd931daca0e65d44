// An Engine that only takes events, for the intake tests: it answers submit_batch as the real
// engine does (unknown_tenant, conflict on the same id with another payload, duplicate on the
// same id and payload), on its own worker thread (never inline), and can hold its answers
// ("not durable yet") or refuse the next batches as transient (shutting_down). Everything else
// is refused with kUnavailable.
#pragma once

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

namespace ringcast::test {

class IntakeFakeEngine final : public Engine {
 public:
  IntakeFakeEngine() : worker_([this] { run(); }) {}
  ~IntakeFakeEngine() override {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    worker_.join();
  }

  void add_tenant(const std::string& t) {
    std::lock_guard lock(mu_);
    tenants_.insert(t);
  }
  // While held, answers wait (the events are "taken" but not "durable").
  void hold(bool on) {
    {
      std::lock_guard lock(mu_);
      hold_ = on;
    }
    cv_.notify_all();
  }
  void refuse_next_batches(int n) {
    std::lock_guard lock(mu_);
    refuse_batches_ = n;
  }
  size_t events_seen() {
    std::lock_guard lock(mu_);
    return seen_;
  }
  size_t accepted() {
    std::lock_guard lock(mu_);
    return events_.size();
  }
  // The payload accepted for (tenant, id); "" when none.
  std::string payload_of(const std::string& tenant, const std::string& id) {
    std::lock_guard lock(mu_);
    auto it = events_.find(tenant + '\0' + id);
    return it == events_.end() ? "" : it->second;
  }
  // How many times each (tenant, id) was submitted.
  std::map<std::string, int> submissions() {
    std::lock_guard lock(mu_);
    return submissions_;
  }

  void submit_batch(std::vector<EventInput> events,
                    std::function<void(std::vector<Result<SubmitResult>>)> done) override {
    std::lock_guard lock(mu_);
    seen_ += events.size();
    queue_.push_back({std::move(events), std::move(done)});
    cv_.notify_all();
  }
  void submit(EventInput event, Callback<SubmitResult> done) override {
    std::vector<EventInput> one{std::move(event)};
    submit_batch(std::move(one),
                 [done](std::vector<Result<SubmitResult>> rs) { done(std::move(rs[0])); });
  }

  // -- not used by the intake --
  void create_endpoint(std::string, EndpointSpec, Callback<Endpoint> d) override { d(no()); }
  void list_endpoints(std::string, Callback<std::vector<Endpoint>> d) override { d(no()); }
  void get_endpoint(std::string, EndpointId, Callback<Endpoint> d) override { d(no()); }
  void update_endpoint(std::string, EndpointId, EndpointPatch, Callback<Endpoint> d) override {
    d(no());
  }
  void delete_endpoint(std::string, EndpointId, Callback<bool> d) override { d(no()); }
  void endpoint_action(std::string, EndpointId, EndpointAction, Callback<Endpoint> d) override {
    d(no());
  }
  void test_endpoint(std::string, EndpointId, Callback<DeliveryId> d) override { d(no()); }
  void rotate_secret(std::string, EndpointId, std::optional<std::string>,
                     Callback<Endpoint> d) override {
    d(no());
  }
  void get_breaker(std::string, Callback<BreakerView> d) override { d(no()); }
  void reset_breaker(std::string, Callback<BreakerView> d) override { d(no()); }
  void set_subscription(std::string, bool, Callback<bool> d) override { d(no()); }
  Result<std::optional<DeliveryDetail>> get_delivery(std::string_view, DeliveryId) override {
    return no();
  }
  Result<std::vector<Delivery>> recent_deliveries(std::string_view) override { return no(); }
  Result<DeliveryPage> list_deliveries(std::string_view, std::optional<EndpointId>,
                                       std::optional<DeliveryStatus>, size_t,
                                       std::string_view) override {
    return no();
  }
  Result<std::optional<Event>> get_event(std::string_view, std::string_view) override {
    return no();
  }
  Result<std::vector<Notification>> notifications(std::string_view) override { return no(); }
  std::string metrics_text() override { return {}; }
  bool ready() const override { return true; }

 private:
  static Error no() { return make_error(Errc::kUnavailable, "not in this fake"); }

  struct Batch {
    std::vector<EventInput> events;
    std::function<void(std::vector<Result<SubmitResult>>)> done;
  };

  Result<SubmitResult> take_locked(const EventInput& e) {
    if (!tenants_.count(e.tenant))
      return make_error(Errc::kNotFound, "no tenant by this name", "tenant", "unknown_tenant");
    std::string key = e.tenant + '\0' + e.id;
    submissions_[key]++;
    auto it = events_.find(key);
    if (it != events_.end()) {
      if (it->second != e.payload)
        return make_error(Errc::kConflict,
                          "an event with this id was accepted with another payload", "id",
                          "conflict");
      return SubmitResult{SubmitResult::Kind::kDuplicate, 1, 1};
    }
    events_.emplace(key, e.payload);
    return SubmitResult{SubmitResult::Kind::kAccepted, 1, 1};
  }

  void run() {
    std::unique_lock lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return stop_ || (!hold_ && !queue_.empty()); });
      if (stop_) return;
      Batch b = std::move(queue_.front());
      queue_.pop_front();
      std::vector<Result<SubmitResult>> rs;
      if (refuse_batches_ > 0) {
        --refuse_batches_;
        for (size_t i = 0; i < b.events.size(); ++i)
          rs.push_back(make_error(Errc::kUnavailable, "the engine is not running", nullptr,
                                  "shutting_down"));
      } else {
        for (const auto& e : b.events) rs.push_back(take_locked(e));
      }
      lock.unlock();
      b.done(std::move(rs));
      lock.lock();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  bool hold_ = false;
  int refuse_batches_ = 0;
  size_t seen_ = 0;
  std::set<std::string> tenants_;
  std::map<std::string, std::string> events_;
  std::map<std::string, int> submissions_;
  std::deque<Batch> queue_;
  std::thread worker_;
};

}  // namespace ringcast::test
