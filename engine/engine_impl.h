// The Engine (core/engine.h) over N shards: routes every tenant call to the shard that owns
// the tenant's partition (partition % shards), and serves delivery-log reads from the store.
#pragma once

#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "core/engine.h"
#include "core/store.h"
#include "engine/options.h"
#include "engine/shard.h"
#include "engine/tenant_rate.h"

namespace ringcast::engine {

class EngineImpl final : public Engine {
 public:
  // Starts the shards and recovers every partition; `store` must outlive the engine. On a
  // failure `why`, if given, gets a line for the operator with what the Error cannot carry
  // (e.g. which stored policies are missing from the config, and how many endpoints use them).
  static Result<std::unique_ptr<EngineImpl>> start(EngineOptions options, Store& store,
                                                   std::string* why = nullptr);
  ~EngineImpl() override;

  // Graceful stop (SIGTERM): stop intake, finish or lease what is in flight, flush.
  void stop();

  void create_endpoint(std::string tenant, EndpointSpec spec, Callback<Endpoint> done) override;
  void list_endpoints(std::string tenant, Callback<std::vector<Endpoint>> done) override;
  void get_endpoint(std::string tenant, EndpointId id, Callback<Endpoint> done) override;
  void update_endpoint(std::string tenant, EndpointId id, EndpointPatch patch,
                       Callback<Endpoint> done) override;
  void delete_endpoint(std::string tenant, EndpointId id, Callback<bool> done) override;
  void endpoint_action(std::string tenant, EndpointId id, EndpointAction action,
                       Callback<Endpoint> done) override;
  void test_endpoint(std::string tenant, EndpointId id, Callback<DeliveryId> done) override;
  void resolve_delivery(std::string tenant, DeliveryId id, Resolution verdict, std::string note,
                        Callback<Delivery> done) override;
  Result<DeliveryDetail> ended_delivery_for(std::string_view tenant, DeliveryId id,
                                            const std::string& note);
  void resend_delivery(std::string tenant, DeliveryId id, std::string note,
                       Callback<Delivery> done) override;
  void replay_event(std::string tenant, std::string event_id, Callback<uint32_t> done) override;
  void requeue_endpoint(std::string tenant, EndpointId id, WallTime since, WallTime until,
                        Callback<JobView> done) override;
  void get_job(std::string tenant, uint64_t id, Callback<JobView> done) override;
  void rotate_secret(std::string tenant, EndpointId id, std::optional<std::string> secret,
                     Callback<Endpoint> done) override;
  void submit(EventInput event, Callback<SubmitResult> done) override;
  void submit_batch(std::vector<EventInput> events,
                    std::function<void(std::vector<Result<SubmitResult>>)> done) override;
  void get_breaker(std::string tenant, Callback<BreakerView> done) override;
  void order_keys(std::string tenant, EndpointId endpoint, size_t limit,
                  Callback<std::vector<OrderKeyView>> done) override;
  void get_tenant_settings(std::string tenant, Callback<TenantSettings> done) override;
  void set_tenant_settings(std::string tenant, TenantSettings settings,
                           Callback<TenantSettings> done) override;
  void confirm_owner_email(std::string tenant, std::string email,
                           Callback<TenantSettings> done) override;
  void reset_breaker(std::string tenant, Callback<BreakerView> done) override;
  void set_subscription(std::string tenant, bool active, Callback<bool> done) override;

  Result<std::optional<DeliveryDetail>> get_delivery(std::string_view tenant,
                                                     DeliveryId id) override;
  Result<std::vector<Delivery>> recent_deliveries(std::string_view tenant) override;
  Result<DeliveryPage> list_deliveries(std::string_view tenant, std::optional<EndpointId> endpoint,
                                       std::optional<DeliveryStatus> status, size_t limit,
                                       std::string_view cursor) override;
  Result<std::optional<Event>> get_event(std::string_view tenant,
                                         std::string_view event_id) override;
  Result<std::optional<Event>> get_event_by_seq(std::string_view tenant, EventSeq seq) override;
  Result<std::vector<std::optional<Event>>> get_events_by_seq(
      std::string_view tenant, const std::vector<EventSeq>& seqs) override;
  Result<std::vector<std::optional<DeliveryDetail>>> get_deliveries(
      std::string_view tenant, const std::vector<DeliveryId>& ids) override;
  Result<std::vector<Notification>> notifications(std::string_view tenant) override;
  std::string metrics_text() override;
  bool ready() const override;
  const char* storage_problem() const override;

  // Cluster mode (EngineOptions::ownership), from the lease manager's thread: hand partition p
  // to its shard, or take it away (gracefully: `done` runs once its in-flight work is
  // finished and durable; or at once, when its ownership is lost). Shard::*_partition.
  void acquire_partition(Partition p, uint64_t epoch);
  void release_partition(Partition p, uint64_t epoch, std::function<void()> done);
  void lose_partition(Partition p, uint64_t epoch);
  // What the shards hold now (cluster mode), ascending.
  std::vector<std::pair<Partition, uint64_t>> owned_partitions() const;

  // Wakes every shard's loop (e.g. when the store's durable sequence advanced).
  void wake_all();
  uint32_t shard_count() const { return static_cast<uint32_t>(shards_.size()); }
  Shard& shard_for(std::string_view tenant) {
    return *shards_[partition_of(tenant) % shards_.size()];
  }

 private:
  EngineImpl(EngineOptions options, Store& store);

  EngineOptions options_;
  TenantRate tenant_rate_{options_.tenant_events_per_second};
  Store& store_;
  std::vector<std::unique_ptr<Shard>> shards_;
  std::atomic<bool> stopped_{false};
  // Requeue jobs: one thread each while running, joined by stop(); a queued one's thread starts
  // when a running job of its shard ends (Shard::next_requeue_job).
  void start_job_worker(const std::shared_ptr<RequeueJob>& job);
  void run_requeue(std::shared_ptr<RequeueJob> job);
  std::mutex jobs_mu_;
  std::vector<std::pair<std::thread, std::shared_ptr<RequeueJob>>> job_threads_;
};

}  // namespace ringcast::engine
