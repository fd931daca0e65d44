// The persistence contract the shards rely on (SPEC R10, R12.2, R12.5). storage/ implements
// it on RocksDB; the simulation uses an in-memory fake. A shard gathers everything one loop
// turn changed into one Mutations and writes it as one batch (group commit).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/result.h"
#include "core/types.h"

namespace ringcast {

struct DeliveryPut {
  Delivery delivery;
  uint64_t tenant_hash = 0;  // for the per-tenant index; needed when is_new
  bool is_new = false;       // first write: also index it (tenant and endpoint time order)
  // An operator's change of a delivery that had ended (R12.10: a resolution, or a resend that
  // reopens it: then the delivery is not terminal and goes back to the live set — out of the
  // ended records and their retention index), not an outcome of the engine's: not counted. The
  // batch also holds the delivery's latest attempt again, so a store that keeps that attempt inside
  // the ended record (RocksStore's archive) keeps it when the record is replaced.
  bool rewrite = false;
};

// Everything one loop turn changed. Plain data: the core's decision logic produces it.
struct Mutations {
  std::vector<Event> events;  // new events: payload stored once + idempotency key (R12.5)
  std::vector<DeliveryPut> deliveries;
  std::vector<Attempt> attempts;  // append-only history
  std::vector<Endpoint> endpoints;
  std::vector<EndpointId> endpoint_deletes;
  std::vector<Tenant> tenants;
  std::vector<Notification> notifications;
  // The writer looked every event's idempotency key up in this store after its own last write
  // of those partitions, and none exists (a shard owns its partitions): write() skips its own
  // lookup. False: write() refuses a batch whose key names another event (R12.5).
  bool event_keys_checked = false;

  bool empty() const {
    return events.empty() && deliveries.empty() && attempts.empty() && endpoints.empty() &&
           endpoint_deletes.empty() && tenants.empty() && notifications.empty();
  }
  void clear() {
    events.clear(), deliveries.clear(), attempts.clear(), endpoints.clear();
    endpoint_deletes.clear(), tenants.clear(), notifications.clear();
    event_keys_checked = false;
  }
};

// Whether a local store's disk takes writes now (RocksStore; docs/operations.md "Disk full,
// read-only and failed syncs"). SPEC R12.2: nothing is acknowledged that is not durable.
enum class DiskHealth : uint8_t {
  kOk,
  // Out of space or read-only (ENOSPC, EROFS): a write fails whole and changes nothing durable;
  // written again, it succeeds once space or write access is back. Intake answers 503
  // storage_full meanwhile.
  kFull,
  // A sync failed (EIO, ...): the kernel may have dropped what it covered, and no later sync
  // proves otherwise (fsyncgate). Nothing more becomes durable in this process: intake answers
  // 503 storage_failed and the daemon exits for a restart that recovers from what is on disk.
  kFailed,
};

enum class SyncPolicy : uint8_t {
  kAlways,    // the batch is fsynced before write() returns
  kInterval,  // a sync at most every interval; acks wait for durable_seq() (default)
  kNone,      // never synced by us: benchmarks only, unsafe
};

// What the idempotency key holds for (tenant, event id).
struct EventKeyRecord {
  EventSeq seq = 0;
  uint64_t payload_hash = 0;
  uint32_t deliveries = 0;  // how many deliveries intake created (the 202 body)
};

struct DeliveryDetail {
  Delivery delivery;
  std::string tenant;
  std::vector<Attempt> attempts;  // in order
};

// Every API key in a store, and the version of that set (SPEC R14.1).
struct ApiKeySet {
  std::vector<ApiKey> keys;
  // Per tenant: portal links and sessions issued before this time are ended (SPEC R14.3).
  std::vector<std::pair<std::string, WallTime>> portal_cutoffs;
  uint64_t version = 0;
};

struct DeliveryPage {
  std::vector<Delivery> items;  // newest first
  std::string next_cursor;      // opaque; empty at the end
};

// Receives a partition's state during recovery, in key order.
class RecoveryVisitor {
 public:
  virtual ~RecoveryVisitor() = default;
  virtual void on_endpoint(const Endpoint& e) = 0;
  virtual void on_tenant(const Tenant& t) = 0;
  // Every non-terminal delivery. One that was kInFlight at the crash arrives already turned
  // back to kPending, after the store wrote its `lease_expired` attempt.
  virtual void on_delivery(const Delivery& d) = 0;
};

struct RecoveryStats {
  uint64_t endpoints = 0, tenants = 0, pending = 0, leases_expired = 0;
  uint64_t next_sequence = 1;  // the partition's next free id sequence
};

// A partition's state, collected: what recover() hands its visitor, in the same order
// (Store::recover_async).
struct RecoveredPartition {
  RecoveryStats stats;
  std::vector<Endpoint> endpoints;
  std::vector<Tenant> tenants;
  std::vector<Delivery> deliveries;  // every non-terminal one; leases already turned back
};

// A RecoveryVisitor that keeps what it is given.
class CollectingVisitor final : public RecoveryVisitor {
 public:
  void on_endpoint(const Endpoint& e) override { out.endpoints.push_back(e); }
  void on_tenant(const Tenant& t) override { out.tenants.push_back(t); }
  void on_delivery(const Delivery& d) override { out.deliveries.push_back(d); }
  RecoveredPartition out;
};

// Where a store's asynchronous answer runs: the calling shard's loop (engine/shard.h).
class Poster {
 public:
  virtual ~Poster() = default;
  // Runs `fn` on the loop's thread, on a later turn; safe from any thread.
  virtual void post(std::function<void()> fn) = 0;
};

class Store {
 public:
  virtual ~Store() = default;

  // One atomic batch. Returns its commit sequence; it is durable once durable_seq() >= it.
  virtual Result<uint64_t> write(const Mutations& m) = 0;
  virtual uint64_t durable_seq() const = 0;

  virtual Result<std::optional<EventKeyRecord>> find_event_key(std::string_view tenant,
                                                               std::string_view event_id) = 0;
  // The same for many keys at once (a bulk intake batch): one answer per key, in order.
  struct EventKeyRef {
    std::string_view tenant, event_id;
    // The event comes out of its partition's inbox (core/inbox.h): a store that keeps inboxes
    // does not answer it with its own queued key. Others: every queued key counts as taken.
    bool from_inbox = false;
  };
  virtual Result<std::vector<std::optional<EventKeyRecord>>> find_event_keys(
      const std::vector<EventKeyRef>& keys) {
    std::vector<std::optional<EventKeyRecord>> out;
    out.reserve(keys.size());
    for (const EventKeyRef& k : keys) {
      auto r = find_event_key(k.tenant, k.event_id);
      if (!r.ok()) return r.error();
      out.push_back(std::move(*r));
    }
    return out;
  }
  virtual Result<std::optional<Event>> load_event(EventSeq seq) = 0;
  virtual Result<std::optional<Event>> find_event(std::string_view tenant,
                                                  std::string_view event_id) = 0;

  virtual Result<std::optional<DeliveryDetail>> get_delivery(DeliveryId id) = 0;
  // Several at once, aligned with the argument (a page of the delivery log names many: a
  // networked store answers them in one round trip, not one each). The defaults ask one by one.
  virtual Result<std::vector<std::optional<Event>>> load_events(const std::vector<EventSeq>& seqs) {
    std::vector<std::optional<Event>> out;
    out.reserve(seqs.size());
    for (EventSeq s : seqs) {
      auto r = load_event(s);
      if (!r.ok()) return r.error();
      out.push_back(std::move(*r));
    }
    return out;
  }
  virtual Result<std::vector<std::optional<DeliveryDetail>>> get_deliveries(
      const std::vector<DeliveryId>& ids) {
    std::vector<std::optional<DeliveryDetail>> out;
    out.reserve(ids.size());
    for (DeliveryId id : ids) {
      auto r = get_delivery(id);
      if (!r.ok()) return r.error();
      out.push_back(std::move(*r));
    }
    return out;
  }
  // Replay missing (docs/operations.md "Delivery log"): every delivery of event `seq` the store
  // still holds (any state), from its event → deliveries index. Any order.
  virtual Result<std::vector<Delivery>> event_deliveries(EventSeq seq) {
    (void)seq;
    return make_error(Errc::kUnavailable, "this store does not index deliveries by event", nullptr,
                      "not_supported");
  }

  // R10.2: the newest `limit` deliveries across all endpoints of a tenant.
  virtual Result<std::vector<Delivery>> recent_deliveries(std::string_view tenant,
                                                          size_t limit) = 0;
  virtual Result<DeliveryPage> list_deliveries(std::string_view tenant,
                                               std::optional<EndpointId> endpoint,
                                               std::optional<DeliveryStatus> status, size_t limit,
                                               std::string_view cursor) = 0;
  virtual Result<std::vector<Notification>> list_notifications(std::string_view tenant,
                                                               size_t limit) = 0;

  // SPEC R14.1: the tenant-scoped API keys — one small registry for the whole store, not
  // partitioned (any node checks any tenant's key). put and delete are durable when they
  // return and bump the version; load_api_keys reads every key with the version, and
  // api_keys_version lets a node poll cheaply for another node's change.
  virtual Result<void> put_api_key(const ApiKey& key) {
    (void)key;
    return make_error(Errc::kUnavailable, "this store keeps no API keys", nullptr, "not_supported");
  }
  virtual Result<void> delete_api_key(std::string_view id) {
    (void)id;
    return make_error(Errc::kUnavailable, "this store keeps no API keys", nullptr, "not_supported");
  }
  virtual Result<ApiKeySet> load_api_keys() { return ApiKeySet{}; }
  // Ends every portal link and session of `tenant` issued before `not_before` (SPEC R14.3):
  // durable when it returns, bumps the key version, and load_api_keys returns it.
  virtual Result<void> put_portal_cutoff(std::string_view tenant, WallTime not_before) {
    (void)tenant;
    (void)not_before;
    return make_error(Errc::kUnavailable, "this store keeps no API keys", nullptr, "not_supported");
  }
  virtual Result<uint64_t> api_keys_version() { return uint64_t{0}; }

  // A node-wide secret (e.g. the portal's signing key when portal.secret is unset, SPEC R14):
  // the value stored under `name`, or, when none is, `candidate`, stored durably first. Every
  // node of a store gets the same value (set-if-absent), so the first node's candidate wins.
  virtual Result<std::string> node_secret(std::string_view name, std::string_view candidate) {
    (void)name;
    (void)candidate;
    return make_error(Errc::kUnavailable, "this store keeps no secrets", nullptr, "not_supported");
  }

  // ---- asynchronous forms for a shard's loop (cluster mode) ---------------------------------
  // A networked store (cluster mode) must not block a shard thread on the network, so the
  // shards look intake keys up and load payloads through these. `done` runs on `on`'s thread
  // exactly once: a local store (RocksDB, the in-memory fake) answers before returning — the
  // defaults below call the synchronous forms —, a networked store later, posted through `on`
  // (which also tells it whose connection to use). Ordering: a lookup sees every write() that
  // returned before it was issued; writes made while it is outstanding may or may not be seen
  // (the shard covers the keys it wrote meanwhile itself, Shard::take_in). The views in `keys`
  // stay valid until `done` runs. A store completes every call before it is destroyed, and
  // never after `on`'s loop has stopped (it answers an error when it closes first).
  using EventKeysDone = std::function<void(Result<std::vector<std::optional<EventKeyRecord>>>)>;
  using EventDone = std::function<void(Result<std::optional<Event>>)>;
  virtual void find_event_keys_async(const std::vector<EventKeyRef>& keys, Poster& on,
                                     EventKeysDone done) {
    (void)on;
    done(find_event_keys(keys));
  }
  virtual void load_event_async(EventSeq seq, Poster& on, EventDone done) {
    (void)on;
    done(load_event(seq));
  }

  // A networked store that cannot confirm its writes right now (Redis unreachable or failing
  // over): the shards pause sends and answer intake 503 until it recovers. Local stores never.
  virtual bool degraded() const { return false; }

  // True when a write() is persisted as far as sends are concerned once it returns (RocksDB:
  // in the WAL). False for a networked store that confirms later (durable_seq()): the shards
  // then hold a turn's sends until its batch is durable, so that nothing goes on the wire
  // before its lease and its event are stored (SPEC R12.2: a crash never makes an attempt, or
  // an event's webhook id, that the store does not know).
  virtual bool durable_on_write() const { return true; }

  // A store that is about to run out of space (Redis near its maxmemory, docs/cluster.md
  // "Memory back-pressure"): intake answers 503 store_full until it is not, while deliveries and
  // attempts keep being written (they finish work and retention frees space). Any thread, cheap.
  // Local stores never.
  virtual bool full() const { return false; }

  // The disk's state (DiskHealth). Any thread, cheap. A networked store says kFull while its
  // server refuses writes it cannot persist (Redis: MISCONF), never kFailed.
  virtual DiskHealth disk_health() const { return DiskHealth::kOk; }
  // kFull: a small write to find out whether the disk takes writes again (after a background
  // error, RocksDB resumes first); true once it does. A caller that has no write of its own to
  // try calls it now and then, so that kFull ends by itself.
  virtual bool retry_disk() { return disk_health() == DiskHealth::kOk; }

  // Rebuilds one partition (see RecoveryVisitor). `now` stamps lease_expired attempts.
  // Blocks the caller for the whole load: for start-up, never for a running shard's loop.
  virtual Result<RecoveryStats> recover(Partition p, WallTime now, RecoveryVisitor& v) = 0;

  // The same for a running shard taking a partition over (cluster mode): `done` gets the
  // partition's state, collected, on `on`'s thread exactly once, and the caller's thread is not
  // blocked meanwhile by a networked store (it loads on a thread of its own); a local store
  // answers before returning (the default). Nothing is visited on failure.
  using RecoverDone = std::function<void(Result<RecoveredPartition>)>;
  virtual void recover_async(Partition p, WallTime now, Poster& on, RecoverDone done) {
    (void)on;
    CollectingVisitor c;
    auto st = recover(p, now, c);
    if (!st.ok()) return done(st.error());
    c.out.stats = *st;
    done(std::move(c.out));
  }
};

}  // namespace ringcast
