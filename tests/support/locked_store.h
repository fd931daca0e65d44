// A MemoryStore (tests/support/memory_store.h, single-threaded) behind one mutex, for engine
// tests whose shards share one store. The inner store's calls forward under the lock; the
// batched and asynchronous forms go one by one through this store's own (core/store_helpers.h),
// so a test store that counts or delays some calls derives from it and overrides those (calling
// the base). It keeps no keys, secrets or outbox entries and removes nothing.
#pragma once

#include <functional>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "core/store.h"
#include "core/store_helpers.h"
#include "tests/support/memory_store.h"

namespace ringcast::test {

class LockedStore : public Store {
 public:
  Result<uint64_t> write(const Mutations& m) override {
    std::lock_guard lock(mu_);
    return inner_.write(m);
  }
  uint64_t durable_seq() const override {
    std::lock_guard lock(mu_);
    return inner_.durable_seq();
  }
  bool durable_on_write() const override { return true; }
  bool degraded() const override { return false; }
  bool full() const override { return false; }
  DiskHealth disk_health() const override { return DiskHealth::kOk; }
  bool retry_disk() override { return retry_disk_by_health(*this); }
  Result<std::optional<EventKeyRecord>> find_event_key(std::string_view tenant,
                                                       std::string_view event_id) override {
    std::lock_guard lock(mu_);
    return inner_.find_event_key(tenant, event_id);
  }
  Result<std::vector<std::optional<EventKeyRecord>>> find_event_keys(
      const std::vector<EventKeyRef>& keys) override {
    std::lock_guard lock(mu_);
    return inner_.find_event_keys(keys);
  }
  Result<std::optional<Event>> load_event(EventSeq seq) override {
    std::lock_guard lock(mu_);
    return inner_.load_event(seq);
  }
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
  Result<std::optional<Event>> find_event(std::string_view tenant,
                                          std::string_view event_id) override {
    std::lock_guard lock(mu_);
    return inner_.find_event(tenant, event_id);
  }
  Result<std::optional<DeliveryDetail>> get_delivery(DeliveryId id) override {
    std::lock_guard lock(mu_);
    return inner_.get_delivery(id);
  }
  Result<std::vector<std::optional<DeliveryDetail>>> get_deliveries(
      const std::vector<DeliveryId>& ids) override {
    return get_deliveries_one_by_one(*this, ids);
  }
  Result<std::vector<Delivery>> event_deliveries(EventSeq seq) override {
    std::lock_guard lock(mu_);
    return inner_.event_deliveries(seq);
  }
  Result<std::vector<Delivery>> recent_deliveries(std::string_view tenant, size_t limit) override {
    std::lock_guard lock(mu_);
    return inner_.recent_deliveries(tenant, limit);
  }
  Result<DeliveryPage> list_deliveries(std::string_view tenant, std::optional<EndpointId> endpoint,
                                       std::optional<DeliveryStatus> status, size_t limit,
                                       std::string_view cursor) override {
    std::lock_guard lock(mu_);
    return inner_.list_deliveries(tenant, endpoint, status, limit, cursor);
  }
  Result<std::vector<Notification>> list_notifications(std::string_view tenant,
                                                       size_t limit) override {
    std::lock_guard lock(mu_);
    return inner_.list_notifications(tenant, limit);
  }
  Result<RecoveryStats> recover(Partition p, WallTime now, RecoveryVisitor& v) override {
    std::lock_guard lock(mu_);
    return inner_.recover(p, now, v);
  }
  void recover_async(Partition p, WallTime now, Poster& on, RecoverDone done) override {
    (void)on;
    recover_collecting(*this, p, now, std::move(done));
  }

  // No key registry, no secrets.
  Result<void> put_api_key(const ApiKey&) override { return no_api_keys(); }
  Result<void> delete_api_key(std::string_view) override { return no_api_keys(); }
  Result<ApiKeySet> load_api_keys() override { return ApiKeySet{}; }
  Result<void> put_portal_cutoff(std::string_view, WallTime) override { return no_api_keys(); }
  Result<uint64_t> api_keys_version() override { return uint64_t{0}; }
  Result<std::string> node_secret(std::string_view, std::string_view) override {
    return no_secrets();
  }

  // No outbox entries; nothing removed.
  std::vector<Notification> take_outbox() override { return {}; }
  Result<void> outbox_done(uint64_t) override { return ok(); }
  std::vector<Notification> take_mail_outbox() override { return {}; }
  Result<void> mail_outbox_done(uint64_t) override { return ok(); }
  Result<RetentionStats> run_retention(WallTime, const std::function<bool()>&) override {
    return RetentionStats{};
  }

  OpenReport open_report() const override { return {}; }
  std::string metrics_text() const override { return {}; }
  bool shared() const override { return false; }

 protected:
  MemoryStore& inner() { return inner_; }  // for a derived test store (single-threaded use)
  const MemoryStore& inner() const { return inner_; }

 private:
  mutable std::mutex mu_;
  MemoryStore inner_;
};

}  // namespace ringcast::test
