// A MemoryStore (tests/support/memory_store.h, single-threaded) behind one mutex, for engine
// tests whose shards share one store. Every Store call forwards under the lock; a test store
// that counts or delays some calls derives from it and overrides those (calling the base).
#pragma once

#include <mutex>

#include "core/store.h"
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
  Result<std::optional<Event>> find_event(std::string_view tenant,
                                          std::string_view event_id) override {
    std::lock_guard lock(mu_);
    return inner_.find_event(tenant, event_id);
  }
  Result<std::optional<DeliveryDetail>> get_delivery(DeliveryId id) override {
    std::lock_guard lock(mu_);
    return inner_.get_delivery(id);
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

 protected:
  MemoryStore& inner() { return inner_; }  // for a derived test store (single-threaded use)
  const MemoryStore& inner() const { return inner_; }

 private:
  mutable std::mutex mu_;
  MemoryStore inner_;
};

}  // namespace ringcast::test
