// An Engine that knows nothing and answers every call at once, on the caller's thread: what
// sans-I/O tests of the REST adapter and the fuzz targets drive RestApi::handle() with. It
// records what the adapter handed it (so a test can check what got past the readers) and
// answers writes with an echo of their input, reads with "not found".
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/engine.h"

namespace ringcast::test {

class StubEngine final : public Engine {
 public:
  std::vector<std::pair<std::string, EndpointSpec>> created;  // (tenant, spec)
  std::vector<EndpointPatch> patched;
  std::vector<std::optional<std::string>> rotated;  // the secret asked for
  std::vector<EventInput> submitted;                // single and bulk, in order
  std::vector<bool> subscriptions;

  void clear() {
    created.clear();
    patched.clear();
    rotated.clear();
    submitted.clear();
    subscriptions.clear();
  }

  void create_endpoint(std::string tenant, EndpointSpec spec, Callback<Endpoint> done) override {
    Endpoint e;
    e.id = 1;
    e.tenant = tenant;
    e.url = spec.url;
    e.event_types = spec.event_types;
    e.policy = spec.policy;
    e.signature = spec.signature;
    e.rate_limit = spec.rate_limit;
    e.max_in_flight = spec.max_in_flight;
    e.secrets.push_back(Secret{spec.secret.value_or("stub-secret"), WallTime::max()});
    created.emplace_back(std::move(tenant), std::move(spec));
    done(std::move(e));
  }
  void list_endpoints(std::string, Callback<std::vector<Endpoint>> done) override {
    done(std::vector<Endpoint>());
  }
  void get_endpoint(std::string, EndpointId, Callback<Endpoint> done) override {
    done(missing("endpoint"));
  }
  void update_endpoint(std::string tenant, EndpointId id, EndpointPatch patch,
                       Callback<Endpoint> done) override {
    Endpoint e;
    e.id = id;
    e.tenant = std::move(tenant);
    e.url = patch.url.value_or("https://stub.example.com/");
    patched.push_back(std::move(patch));
    done(std::move(e));
  }
  void delete_endpoint(std::string, EndpointId, Callback<bool> done) override { done(false); }
  void endpoint_action(std::string, EndpointId, EndpointAction, Callback<Endpoint> done) override {
    done(missing("endpoint"));
  }
  void test_endpoint(std::string, EndpointId, Callback<DeliveryId> done) override {
    done(missing("endpoint"));
  }
  void rotate_secret(std::string tenant, EndpointId id, std::optional<std::string> secret,
                     Callback<Endpoint> done) override {
    Endpoint e;
    e.id = id;
    e.tenant = std::move(tenant);
    e.secrets.push_back(Secret{secret.value_or("stub-secret"), WallTime::max()});
    rotated.push_back(std::move(secret));
    done(std::move(e));
  }

  void submit(EventInput event, Callback<SubmitResult> done) override {
    submitted.push_back(std::move(event));
    done(accepted());
  }
  void submit_batch(std::vector<EventInput> events,
                    std::function<void(std::vector<Result<SubmitResult>>)> done) override {
    std::vector<Result<SubmitResult>> results;
    for (auto& e : events) {
      submitted.push_back(std::move(e));
      results.emplace_back(accepted());
    }
    done(std::move(results));
  }

  void get_breaker(std::string, Callback<BreakerView> done) override { done(BreakerView{}); }
  void reset_breaker(std::string, Callback<BreakerView> done) override { done(BreakerView{}); }
  void set_subscription(std::string, bool active, Callback<bool> done) override {
    subscriptions.push_back(active);
    done(active);
  }

  // The calls with a "not supported here" default (core/engine.h): a stub answers them as the
  // engine does for what it does not know, so the fuzz targets reach their routes' answers
  // (GET …/settings answered 503 from the default, outside what the API answers).
  void resolve_delivery(std::string, DeliveryId, Resolution, std::string,
                        Callback<Delivery> done) override {
    done(make_error(Errc::kNotFound, "no such delivery", nullptr, "unknown_delivery"));
  }
  void resend_delivery(std::string, DeliveryId, std::string, Callback<Delivery> done) override {
    done(make_error(Errc::kNotFound, "no such delivery", nullptr, "unknown_delivery"));
  }
  void replay_event(std::string, std::string, Callback<uint32_t> done) override {
    done(make_error(Errc::kNotFound, "no such event", nullptr, "unknown_event"));
  }
  void requeue_endpoint(std::string, EndpointId, WallTime, WallTime,
                        Callback<JobView> done) override {
    done(make_error(Errc::kNotFound, "no such endpoint", nullptr, "unknown_endpoint"));
  }
  void get_tenant_settings(std::string, Callback<TenantSettings> done) override {
    done(make_error(Errc::kNotFound, "no such tenant", nullptr, "unknown_tenant"));
  }
  void set_tenant_settings(std::string, TenantSettings settings,
                           Callback<TenantSettings> done) override {
    done(std::move(settings));
  }

  Result<std::optional<DeliveryDetail>> get_delivery(std::string_view, DeliveryId) override {
    return std::optional<DeliveryDetail>();
  }
  Result<std::vector<Delivery>> recent_deliveries(std::string_view) override {
    return std::vector<Delivery>();
  }
  Result<DeliveryPage> list_deliveries(std::string_view, std::optional<EndpointId>,
                                       std::optional<DeliveryStatus>, size_t,
                                       std::string_view) override {
    return DeliveryPage{};
  }
  Result<std::optional<Event>> get_event(std::string_view, std::string_view) override {
    return std::optional<Event>();
  }
  Result<std::vector<Notification>> notifications(std::string_view) override {
    return std::vector<Notification>();
  }

  std::string metrics_text() override { return ""; }
  bool ready() const override { return true; }

 private:
  static Error missing(const char* what) { return make_error(Errc::kNotFound, what); }
  SubmitResult accepted() {
    SubmitResult r;
    r.event = submitted.size();
    r.deliveries = 1;
    return r;
  }
};

}  // namespace ringcast::test
