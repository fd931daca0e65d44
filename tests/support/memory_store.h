// An in-memory Store (core/store.h) for the simulation and unit tests: every write is
// applied at once and is durable at once. Invariant: it keeps the contract the RocksDB store
// keeps — idempotency keys are unique per (tenant, event id), a delivery found kInFlight at
// recovery gets a `lease_expired` attempt and comes back kPending. Single-threaded.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/store.h"
#include "core/store_helpers.h"

namespace ringcast {

class MemoryStore final : public Store {
 public:
  // ---- Journal: durable at once, never degraded or full; the batched and asynchronous forms
  // are the one-by-one and synchronous ones (core/store_helpers.h).
  Result<uint64_t> write(const Mutations& m) override;
  uint64_t durable_seq() const override { return commit_seq_; }
  bool durable_on_write() const override { return true; }
  bool degraded() const override { return false; }
  bool full() const override { return false; }
  DiskHealth disk_health() const override { return DiskHealth::kOk; }
  bool retry_disk() override { return retry_disk_by_health(*this); }

  Result<std::optional<EventKeyRecord>> find_event_key(std::string_view tenant,
                                                       std::string_view event_id) override;
  Result<std::vector<std::optional<EventKeyRecord>>> find_event_keys(
      const std::vector<EventKeyRef>& keys) override {
    return find_event_keys_one_by_one(*this, keys);
  }
  Result<std::optional<Event>> load_event(EventSeq seq) override;
  Result<std::vector<std::optional<Event>>> load_events(
      const std::vector<EventSeq>& seqs) override {
    return load_events_one_by_one(*this, seqs);
  }
  void find_event_keys_async(const std::vector<EventKeyRef>& keys, Poster& on,
                             EventKeysDone done) override {
    (void)on;
    find_event_keys_at_once(*this, keys, std::move(done));
  }
  void load_event_async(EventSeq seq, Poster& on, EventDone done) override {
    (void)on;
    load_event_at_once(*this, seq, std::move(done));
  }
  Result<RecoveryStats> recover(Partition p, WallTime now, RecoveryVisitor& v) override;
  void recover_async(Partition p, WallTime now, Poster& on, RecoverDone done) override {
    (void)on;
    recover_collecting(*this, p, now, std::move(done));
  }

  // ---- DeliveryLog
  Result<std::optional<Event>> find_event(std::string_view tenant,
                                          std::string_view event_id) override;
  Result<std::optional<DeliveryDetail>> get_delivery(DeliveryId id) override;
  Result<std::vector<std::optional<DeliveryDetail>>> get_deliveries(
      const std::vector<DeliveryId>& ids) override {
    return get_deliveries_one_by_one(*this, ids);
  }
  Result<std::vector<Delivery>> event_deliveries(EventSeq seq) override;
  Result<std::vector<Delivery>> recent_deliveries(std::string_view tenant, size_t limit) override;
  Result<DeliveryPage> list_deliveries(std::string_view tenant, std::optional<EndpointId> endpoint,
                                       std::optional<DeliveryStatus> status, size_t limit,
                                       std::string_view cursor) override;
  Result<std::vector<Notification>> list_notifications(std::string_view tenant,
                                                       size_t limit) override;
  // ---- KeyStore. SPEC R14.1: API keys (any thread: a key registry's refresher reads them).
  Result<void> put_api_key(const ApiKey& key) override;
  Result<void> delete_api_key(std::string_view id) override;
  Result<ApiKeySet> load_api_keys() override;
  Result<uint64_t> api_keys_version() override;
  Result<void> put_portal_cutoff(std::string_view tenant, WallTime not_before) override {
    std::lock_guard lk(api_keys_mu_);
    cutoffs_[std::string(tenant)] = not_before;
    ++api_keys_version_;
    return ok();
  }
  Result<std::string> node_secret(std::string_view name, std::string_view candidate) override {
    std::lock_guard lk(api_keys_mu_);
    return secrets_.try_emplace(std::string(name), candidate).first->second;
  }

  // ---- Outboxes: no outbox entries are kept (nothing sends notifications again after a restart
  // of a store that does not outlive its process).
  std::vector<Notification> take_outbox() override { return {}; }
  Result<void> outbox_done(uint64_t) override { return ok(); }
  std::vector<Notification> take_mail_outbox() override { return {}; }
  Result<void> mail_outbox_done(uint64_t) override { return ok(); }
  // ---- Retention: everything is kept (a test's store lives for the test).
  Result<RetentionStats> run_retention(WallTime, const std::function<bool()>&) override {
    return RetentionStats{};
  }
  // ---- StoreInfo
  OpenReport open_report() const override { return {}; }
  std::string metrics_text() const override { return {}; }
  bool shared() const override { return false; }

  // ---- test helpers ----
  // Forgets everything (a store that lost its data; the simulation then replays what it kept).
  void clear_all() {
    keys_.clear(), events_.clear(), deliveries_.clear(), delivery_tenant_.clear();
    tenant_by_hash_.clear(), attempts_.clear(), endpoints_.clear(), tenants_.clear();
    notifications_.clear();
    commit_seq_ = 0;
  }
  // The next `n` writes fail with kIo (and change nothing).
  void fail_next_writes(int n) { fail_writes_ = n; }
  // The next `n` event reads (find_event_key, load_event) fail with kIo.
  void fail_next_reads(int n) { fail_reads_.store(n); }  // any thread
  const std::map<DeliveryId, Delivery>& deliveries() const { return deliveries_; }
  const std::vector<Attempt>& attempts_of(DeliveryId id) const;
  const std::map<EndpointId, Endpoint>& endpoints() const { return endpoints_; }
  const std::map<std::string, Tenant>& tenants() const { return tenants_; }
  const std::vector<Notification>& notifications() const { return notifications_; }
  std::string tenant_of_delivery(DeliveryId id) const;
  uint64_t writes() const { return commit_seq_; }

 private:
  std::map<std::pair<std::string, std::string>, EventKeyRecord> keys_;
  std::map<EventSeq, Event> events_;
  std::map<DeliveryId, Delivery> deliveries_;
  std::map<DeliveryId, std::string> delivery_tenant_;
  std::map<uint64_t, std::string> tenant_by_hash_;
  std::map<DeliveryId, std::vector<Attempt>> attempts_;
  std::map<EndpointId, Endpoint> endpoints_;
  std::map<std::string, Tenant> tenants_;
  std::vector<Notification> notifications_;
  mutable std::mutex api_keys_mu_;
  std::map<std::string, ApiKey> api_keys_;
  uint64_t api_keys_version_ = 0;
  std::map<std::string, std::string> secrets_;
  std::map<std::string, WallTime> cutoffs_;
  uint64_t commit_seq_ = 0;
  int fail_writes_ = 0;
  std::atomic<int> fail_reads_{0};
  bool read_fails();
};

}  // namespace ringcast
