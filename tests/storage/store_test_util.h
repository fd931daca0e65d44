// Builders and comparisons shared by the storage tests: records with every field set to a
// non-default value, so that a field the codec forgets shows up as a mismatch.
#pragma once

#include <gtest/gtest.h>
#include <rocksdb/db.h>

#include <memory>
#include <set>
#include <string>
#include <tuple>

#include "core/store.h"
#include "core/types.h"
#include "storage/codec.h"
#include "storage/rocks_store.h"
#include "storage/schema.h"
#include "tests/support/temp_dir.h"

namespace ringcast::storage::test {

inline constexpr WallTime kT0 = WallTime::from_ms(1'767'225'600'000);  // 2026-01-01

inline auto fields(const Delivery& d) {
  return std::tie(d.id, d.event, d.endpoint, d.created_at, d.next_attempt_at, d.first_slow_at,
                  d.held, d.attempts, d.fast_attempts, d.slow_attempts, d.last_http_status,
                  d.last_code, d.status, d.flags, d.lease_expiries);
}
inline auto fields(const Attempt& a) {
  return std::tie(a.delivery, a.number, a.ladder, a.outcome, a.code, a.http_status,
                  a.request_written, a.started_at, a.duration, a.timings.dns, a.timings.connect,
                  a.timings.tls, a.timings.first_byte, a.timings.total, a.response_prefix);
}
inline auto fields(const Event& e) {
  return std::tie(e.seq, e.tenant, e.id, e.type, e.payload, e.created_at, e.payload_hash);
}
inline auto fields(const Tenant& t) {
  return std::tie(t.name, t.subscription_active, t.breaker.state, t.breaker.failed_probes,
                  t.breaker.opened_at, t.breaker.reopen_at, t.updated_at, t.owner_email,
                  t.owner_email_confirmed, t.owner_email_asked_at);
}
inline auto fields(const Notification& n) {
  return std::tie(n.seq, n.tenant, n.endpoint, n.kind, n.reason, n.at, n.message);
}
inline bool same_endpoint(const Endpoint& a, const Endpoint& b) {
  if (a.secrets.size() != b.secrets.size()) return false;
  for (size_t i = 0; i < a.secrets.size(); ++i) {
    if (a.secrets[i].key != b.secrets[i].key || a.secrets[i].expires_at != b.secrets[i].expires_at)
      return false;
  }
  return std::tie(a.id, a.tenant, a.url, a.event_types, a.policy, a.signature,
                  a.rate_limit.per_second, a.rate_limit.burst, a.max_in_flight, a.headers,
                  a.idempotency_key, a.state, a.disabled_reason, a.created_at, a.updated_at) ==
         std::tie(b.id, b.tenant, b.url, b.event_types, b.policy, b.signature,
                  b.rate_limit.per_second, b.rate_limit.burst, b.max_in_flight, b.headers,
                  b.idempotency_key, b.state, b.disabled_reason, b.created_at, b.updated_at);
}

inline Event make_event(std::string_view tenant, std::string_view id, uint64_t seq,
                        std::string payload, WallTime at = kT0) {
  Event e;
  e.seq = make_id(partition_of(tenant), seq);
  e.tenant = tenant;
  e.id = id;
  e.type = "payment.status_changed";
  e.payload = std::move(payload);
  e.created_at = at;
  e.payload_hash = payload_hash(e.payload);
  return e;
}

inline Delivery make_delivery(const Event& e, EndpointId endpoint, uint64_t seq,
                              DeliveryStatus status = DeliveryStatus::kPending) {
  Delivery d;
  d.id = make_id(id_partition(e.seq), seq);
  d.event = e.seq;
  d.endpoint = endpoint;
  d.created_at = e.created_at + milliseconds(3);
  d.next_attempt_at = e.created_at + seconds(5);
  d.first_slow_at = WallTime();
  d.held = seconds(7);
  d.attempts = 2;
  d.fast_attempts = 2;
  d.slow_attempts = 0;
  d.last_http_status = 503;
  d.last_code = ErrorCode::http(503);
  d.status = status;
  d.flags = Delivery::kFlagMoney;
  return d;
}

inline Attempt make_attempt(DeliveryId d, uint16_t number, Outcome outcome = Outcome::kRetryable,
                            WallTime at = kT0) {
  Attempt a;
  a.delivery = d;
  a.number = number;
  a.ladder = Ladder::kFast;
  a.outcome = outcome;
  a.code = outcome == Outcome::kSuccess ? ErrorCode::none() : ErrorCode::http(503);
  a.http_status = outcome == Outcome::kSuccess ? 200 : 503;
  a.request_written = true;
  a.started_at = at;
  a.duration = milliseconds(42);
  a.timings = {microseconds(10), microseconds(200), microseconds(900), milliseconds(40),
               milliseconds(42)};
  a.response_prefix = "{\"error\":\"busy\"} #" + std::to_string(number);
  return a;
}

inline Endpoint make_endpoint(std::string_view tenant, uint64_t seq) {
  Endpoint e;
  e.id = make_id(partition_of(tenant), seq);
  e.tenant = tenant;
  e.url = "https://hooks.example.com/r/" + std::to_string(seq);
  e.event_types = {"payment.*", "refund.completed"};
  e.policy = "xhub";
  e.signature = SignatureProfile::kXhub;
  e.secrets = {{"new-secret", WallTime::max()}, {"old-secret", kT0 + hours(24)}};
  e.rate_limit = {12.5, 20};
  e.max_in_flight = 8;
  e.state = EndpointState::kDisabled;
  e.disabled_reason = ErrorCode::of(ErrorCode::Kind::kGone);
  e.created_at = kT0;
  e.updated_at = kT0 + minutes(3);
  return e;
}

inline DeliveryPut put_new(const Delivery& d, std::string_view tenant) {
  return DeliveryPut{d, tenant_hash(tenant), true};
}
inline DeliveryPut put_update(const Delivery& d) {
  return DeliveryPut{d, 0, false};
}

// One new event of `tenant` and its n new deliveries to `endpoint`, as intake writes them
// (created, pending, no attempt yet): the batch, and the deliveries (ids event_seq + 1 ...).
inline std::pair<Mutations, std::vector<Delivery>> created_batch(std::string_view tenant,
                                                                 uint64_t event_seq, uint64_t n,
                                                                 EndpointId endpoint) {
  Event ev = make_event(tenant, "evt-" + std::to_string(event_seq), event_seq, "{}");
  Mutations m;
  m.events.push_back(ev);
  std::vector<Delivery> out;
  for (uint64_t i = 1; i <= n; ++i) {
    Delivery d = make_delivery(ev, endpoint, event_seq + i);
    d.attempts = d.fast_attempts = 0;
    d.last_http_status = 0;
    d.last_code = ErrorCode::none();
    m.deliveries.push_back(put_new(d, tenant));
    out.push_back(d);
  }
  return {std::move(m), std::move(out)};
}

// be64 of v, as the stores' keys and Redis members spell ids.
inline std::string be64s(uint64_t v) {
  std::string s;
  put_be64(s, v);
  return s;
}

inline StoreOptions options_for(const std::string& path, Clock* clock = nullptr,
                                SyncPolicy sync = SyncPolicy::kInterval) {
  StoreOptions o;
  o.path = path;
  o.sync = sync;
  o.sync_interval = milliseconds(2);
  o.clock = clock;
  o.block_cache_bytes = 8 << 20;
  o.write_buffer_bytes = 4 << 20;
  o.total_write_buffer_bytes = 32 << 20;
  o.flush_on_close = false;  // keeps the many reopens fast; the WAL path is what is tested
  return o;
}

inline std::unique_ptr<RocksStore> open_store(const StoreOptions& o) {
  auto r = RocksStore::open(o);
  if (!r) ADD_FAILURE() << "open failed: " << r.error().message;
  return r ? std::move(*r) : nullptr;
}

// Writes and waits until durable; fails the test on error.
// Either store (RocksStore, RedisStore: both have wait_durable).
template <class S>
inline uint64_t write_durable(S& s, const Mutations& m) {
  auto r = s.write(m);
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message);
  if (!r) return 0;
  EXPECT_TRUE(s.wait_durable(*r, seconds(10)));
  return *r;
}

// The ids recovery of p hands its visitor (each once, each pending: leases turned back), from
// either store; `leases` gets how many leases it turned back.
template <class S>
inline std::set<DeliveryId> recovered_ids(S& s, Partition p, uint64_t* leases = nullptr) {
  struct Ids final : RecoveryVisitor {
    std::set<DeliveryId> ids;
    void on_endpoint(const Endpoint&) override {}
    void on_tenant(const Tenant&) override {}
    void on_delivery(const Delivery& d) override {
      EXPECT_EQ(d.status, DeliveryStatus::kPending) << d.id;
      EXPECT_TRUE(ids.insert(d.id).second) << "recovered twice: " << d.id;
    }
  } v;
  auto st = s.recover(p, kT0 + hours(1), v);
  EXPECT_TRUE(st.ok()) << (st.ok() ? "" : st.error().message);
  if (leases && st.ok()) *leases = st->leases_expired;
  return v.ids;
}

// The store's RocksDB opened directly (the store closed), to look under or around its API.
struct RawDb {
  RawDb(const std::string& path, bool read_only) {
    std::vector<rocksdb::ColumnFamilyDescriptor> cfs;
    for (auto name : kColumnFamilies)
      cfs.emplace_back(std::string(name), rocksdb::ColumnFamilyOptions());
    auto s = read_only
                 ? rocksdb::DB::OpenForReadOnly(rocksdb::DBOptions(), path, cfs, &handles, &db)
                 : rocksdb::DB::Open(rocksdb::DBOptions(), path, cfs, &handles, &db);
    EXPECT_TRUE(s.ok()) << s.ToString();
  }
  ~RawDb() {
    for (auto* h : handles) db->DestroyColumnFamilyHandle(h);
    delete db;
  }
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DB* db = nullptr;
};

// Collects what recovery streams.
struct CollectingVisitor final : RecoveryVisitor {
  std::vector<Endpoint> endpoints;
  std::vector<Tenant> tenants;
  std::vector<Delivery> deliveries;
  void on_endpoint(const Endpoint& e) override { endpoints.push_back(e); }
  void on_tenant(const Tenant& t) override { tenants.push_back(t); }
  void on_delivery(const Delivery& d) override { deliveries.push_back(d); }
};

}  // namespace ringcast::storage::test
