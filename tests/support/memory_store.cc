#include "tests/support/memory_store.h"

#include <algorithm>
#include <charconv>

namespace ringcast {

namespace {
const std::vector<Attempt> kNoAttempts;
}

Result<uint64_t> MemoryStore::write(const Mutations& m) {
  if (fail_writes_ > 0) {
    --fail_writes_;
    return make_error(Errc::kIo, "injected write failure");
  }
  // Validate idempotency keys first so a conflicting batch changes nothing (R12.5).
  for (const Event& ev : m.events) {
    auto it = keys_.find({ev.tenant, ev.id});
    if (it != keys_.end() && it->second.seq != ev.seq) {
      return make_error(Errc::kConflict, "event id exists", "id", "conflict");
    }
  }
  for (const Endpoint& e : m.endpoints) {
    endpoints_[e.id] = e;
    tenant_by_hash_[tenant_hash(e.tenant)] = e.tenant;
  }
  for (EndpointId id : m.endpoint_deletes) endpoints_.erase(id);
  for (const Tenant& t : m.tenants) {
    tenants_[t.name] = t;
    tenant_by_hash_[tenant_hash(t.name)] = t.name;
  }
  for (const Event& ev : m.events) {
    events_[ev.seq] = ev;
    tenant_by_hash_[tenant_hash(ev.tenant)] = ev.tenant;
    EventKeyRecord& k = keys_[{ev.tenant, ev.id}];
    k.seq = ev.seq;
    k.payload_hash = ev.payload_hash;
    k.message = message_id_bits(ev.message_id);
  }
  for (const DeliveryPut& p : m.deliveries) {
    const Delivery& d = p.delivery;
    if (p.is_new) {
      std::string tenant;
      if (auto e = endpoints_.find(d.endpoint); e != endpoints_.end()) {
        tenant = e->second.tenant;
      } else if (auto h = tenant_by_hash_.find(p.tenant_hash); h != tenant_by_hash_.end()) {
        tenant = h->second;
      }
      delivery_tenant_[d.id] = tenant;
      if (auto ev = events_.find(d.event); ev != events_.end()) {
        ++keys_[{ev->second.tenant, ev->second.id}].deliveries;
      }
    }
    deliveries_[d.id] = d;
  }
  for (const Attempt& a : m.attempts) attempts_[a.delivery].push_back(a);
  for (const Notification& n : m.notifications) notifications_.push_back(n);
  return ++commit_seq_;
}

bool MemoryStore::read_fails() {
  int n = fail_reads_.load();
  while (n > 0 && !fail_reads_.compare_exchange_weak(n, n - 1)) {
  }
  return n > 0;
}

Result<std::optional<EventKeyRecord>> MemoryStore::find_event_key(std::string_view tenant,
                                                                  std::string_view event_id) {
  if (read_fails()) return make_error(Errc::kIo, "injected read failure");
  auto it = keys_.find({std::string(tenant), std::string(event_id)});
  if (it == keys_.end()) return std::optional<EventKeyRecord>();
  return std::optional<EventKeyRecord>(it->second);
}

Result<std::optional<Event>> MemoryStore::load_event(EventSeq seq) {
  if (read_fails()) return make_error(Errc::kIo, "injected read failure");
  auto it = events_.find(seq);
  if (it == events_.end()) return std::optional<Event>();
  return std::optional<Event>(it->second);
}

Result<std::optional<Event>> MemoryStore::find_event(std::string_view tenant,
                                                     std::string_view event_id) {
  auto it = keys_.find({std::string(tenant), std::string(event_id)});
  if (it == keys_.end()) return std::optional<Event>();
  return load_event(it->second.seq);
}

Result<std::vector<Delivery>> MemoryStore::event_deliveries(EventSeq seq) {
  std::vector<Delivery> out;
  for (const auto& [id, d] : deliveries_) {
    if (d.event == seq) out.push_back(d);
  }
  return out;
}

Result<std::optional<DeliveryDetail>> MemoryStore::get_delivery(DeliveryId id) {
  auto it = deliveries_.find(id);
  if (it == deliveries_.end()) return std::optional<DeliveryDetail>();
  DeliveryDetail d;
  d.delivery = it->second;
  d.tenant = tenant_of_delivery(id);
  d.attempts = attempts_of(id);
  return std::optional<DeliveryDetail>(std::move(d));
}

Result<std::vector<Delivery>> MemoryStore::recent_deliveries(std::string_view tenant,
                                                             size_t limit) {
  std::vector<Delivery> out;
  for (auto it = deliveries_.rbegin(); it != deliveries_.rend() && out.size() < limit; ++it) {
    if (tenant_of_delivery(it->first) == tenant) out.push_back(it->second);
  }
  return out;
}

Result<DeliveryPage> MemoryStore::list_deliveries(std::string_view tenant,
                                                  std::optional<EndpointId> endpoint,
                                                  std::optional<DeliveryStatus> status,
                                                  size_t limit, std::string_view cursor) {
  DeliveryId before = UINT64_MAX;
  if (!cursor.empty()) {
    auto [p, ec] = std::from_chars(cursor.data(), cursor.data() + cursor.size(), before);
    if (ec != std::errc() || p != cursor.data() + cursor.size()) {
      return make_error(Errc::kInvalidArgument, "bad cursor", "cursor");
    }
  }
  DeliveryPage page;
  for (auto it = deliveries_.rbegin(); it != deliveries_.rend(); ++it) {
    if (it->first >= before) continue;
    const Delivery& d = it->second;
    if (tenant_of_delivery(d.id) != tenant) continue;
    if (endpoint && d.endpoint != *endpoint) continue;
    if (status && d.status != *status) continue;
    if (page.items.size() == limit) {
      page.next_cursor = std::to_string(page.items.back().id);
      break;
    }
    page.items.push_back(d);
  }
  return page;
}

Result<std::vector<Notification>> MemoryStore::list_notifications(std::string_view tenant,
                                                                  size_t limit) {
  std::vector<Notification> out;
  for (auto it = notifications_.rbegin(); it != notifications_.rend() && out.size() < limit; ++it) {
    if (it->tenant == tenant) out.push_back(*it);
  }
  return out;
}

Result<RecoveryStats> MemoryStore::recover(Partition p, WallTime now, RecoveryVisitor& v) {
  RecoveryStats st;
  uint64_t max_seq = 0;
  auto note = [&](uint64_t id) {
    if (id_partition(id) == p) max_seq = std::max(max_seq, id_sequence(id));
  };
  for (const auto& [id, e] : endpoints_) {
    note(id);
    if (partition_of(e.tenant) != p) continue;
    v.on_endpoint(e);
    ++st.endpoints;
  }
  for (const auto& [name, t] : tenants_) {
    if (partition_of(name) != p) continue;
    v.on_tenant(t);
    ++st.tenants;
  }
  for (const auto& [seq, ev] : events_) note(seq);
  for (const Notification& n : notifications_) note(n.seq);
  for (auto& [id, d] : deliveries_) {
    note(id);
    if (id_partition(id) != p || is_terminal(d.status)) continue;
    if (d.status == DeliveryStatus::kInFlight) {
      // The lease expired with the process (SPEC R6 lease_expired): record it, retry.
      attempts_[id].push_back(expire_lease(d, std::max<uint16_t>(d.attempts, 1), now));
      ++st.leases_expired;
    }
    v.on_delivery(d);
    ++st.pending;
  }
  st.next_sequence = max_seq + 1;
  return st;
}

const std::vector<Attempt>& MemoryStore::attempts_of(DeliveryId id) const {
  auto it = attempts_.find(id);
  return it == attempts_.end() ? kNoAttempts : it->second;
}

std::string MemoryStore::tenant_of_delivery(DeliveryId id) const {
  auto it = delivery_tenant_.find(id);
  return it == delivery_tenant_.end() ? std::string() : it->second;
}

Result<void> MemoryStore::put_api_key(const ApiKey& key) {
  std::lock_guard lk(api_keys_mu_);
  api_keys_[key.id] = key;
  ++api_keys_version_;
  return ok();
}

Result<void> MemoryStore::delete_api_key(std::string_view id) {
  std::lock_guard lk(api_keys_mu_);
  api_keys_.erase(std::string(id));
  ++api_keys_version_;
  return ok();
}

Result<ApiKeySet> MemoryStore::load_api_keys() {
  std::lock_guard lk(api_keys_mu_);
  ApiKeySet set;
  set.version = api_keys_version_;
  for (const auto& [id, k] : api_keys_) set.keys.push_back(k);
  for (const auto& [tenant, t] : cutoffs_) set.portal_cutoffs.emplace_back(tenant, t);
  return set;
}

Result<uint64_t> MemoryStore::api_keys_version() {
  std::lock_guard lk(api_keys_mu_);
  return api_keys_version_;
}

}  // namespace ringcast
