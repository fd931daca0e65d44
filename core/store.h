// The persistence contract (SPEC R10, R12.2, R12.5), by role (docs/architecture.md "The store's
// roles"): the shard's Journal, the DeliveryLog's reads, the KeyStore, the notification
// Outboxes, Retention and the StoreInfo the composition asks; Store is all of them. storage/
// implements it on RocksDB and on Redis; the simulation uses an in-memory fake. Every method of a
// role is pure: each backend says what it does, and what several share is a free helper of
// core/store_helpers.h that they call explicitly. A shard gathers everything one loop turn
// changed into one Mutations and writes it as one batch (group commit).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
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
  // The event's message id (the 202 body names it, a repeat's answer too); empty in a record
  // written before the idempotency record kept it.
  MessageIdBits message{};
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
// (Journal::recover_async).
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

// What one retention pass (SPEC R10.1) removed: every backend reports the same struct
// (engine/retention.h counts it for /metrics).
struct RetentionStats {
  uint64_t deliveries = 0, attempts = 0, events = 0, notifications = 0;
  uint64_t payloads_moved = 0;    // payloads of long-lived events copied to the active segment
  uint64_t payload_segments = 0;  // payload log segments removed
  uint64_t expiry_entries = 0;    // index entries processed
  bool stopped = false;           // `stop` was seen: the rest waits for the next pass
};

// What a store's open found that its operator should hear of (StoreInfo::open_report).
struct OpenReport {
  // Events dropped at open because their payload did not survive (a power loss after the
  // WAL record reached the disk but before the payload log did: never acknowledged).
  uint64_t torn_events_dropped = 0;
  // Leases of an earlier run that were newer than their delivery's record and were written
  // into it at open (each becomes a lease_expired attempt at recovery).
  uint64_t leases_applied = 0;
};

// ---- the shard's journal ----------------------------------------------------------------------
// What a shard needs: its turn's batch, durable; the idempotency keys and payloads of intake and
// the send path; the store's state that pauses intake or sends; rebuilding a partition.
class Journal {
 public:
  virtual ~Journal() = default;

  // One atomic batch. Returns its commit sequence; it is durable once durable_seq() >= it.
  virtual Result<uint64_t> write(const Mutations& m) = 0;
  virtual uint64_t durable_seq() const = 0;
  // True when a write() is persisted as far as sends are concerned once it returns (RocksDB:
  // in the WAL). False for a networked store that confirms later (durable_seq()): the shards
  // then hold a turn's sends until its batch is durable, so that nothing goes on the wire
  // before its lease and its event are stored (SPEC R12.2: a crash never makes an attempt, or
  // an event's webhook id, that the store does not know).
  virtual bool durable_on_write() const = 0;

  // A networked store that cannot confirm its writes right now (Redis unreachable or failing
  // over): the shards pause sends and answer intake 503 until it recovers. Local stores never.
  virtual bool degraded() const = 0;
  // A store that is about to run out of space (Redis near its maxmemory, docs/cluster.md
  // "Memory back-pressure"): intake answers 503 store_full until it is not, while deliveries and
  // attempts keep being written (they finish work and retention frees space). Any thread, cheap.
  // Local stores never.
  virtual bool full() const = 0;
  // The disk's state (DiskHealth). Any thread, cheap. A networked store says kFull while its
  // server refuses writes it cannot persist (Redis: MISCONF), never kFailed.
  virtual DiskHealth disk_health() const = 0;
  // kFull: a small write to find out whether the disk takes writes again (after a background
  // error, RocksDB resumes first); true once it does. A caller that has no write of its own to
  // try calls it now and then, so that kFull ends by itself. A store with nothing to try
  // answers disk_health() == kOk (retry_disk_by_health, core/store_helpers.h).
  virtual bool retry_disk() = 0;

  virtual Result<std::optional<EventKeyRecord>> find_event_key(std::string_view tenant,
                                                               std::string_view event_id) = 0;
  // The same for many keys at once (a bulk intake batch): one answer per key, in order.
  struct EventKeyRef {
    std::string_view tenant, event_id;
    // The event comes out of its partition's inbox (core/inbox.h): a store that keeps inboxes
    // does not answer it with its own queued key. Others: every queued key counts as taken.
    bool from_inbox = false;
  };
  // A store without a batched lookup asks one by one (find_event_keys_one_by_one).
  virtual Result<std::vector<std::optional<EventKeyRecord>>> find_event_keys(
      const std::vector<EventKeyRef>& keys) = 0;
  virtual Result<std::optional<Event>> load_event(EventSeq seq) = 0;
  // Several at once, aligned with the argument (a page of the delivery log names many: a
  // networked store answers them in one round trip, not one each; others ask one by one,
  // load_events_one_by_one).
  virtual Result<std::vector<std::optional<Event>>> load_events(
      const std::vector<EventSeq>& seqs) = 0;

  // ---- asynchronous forms for a shard's loop (cluster mode) ---------------------------------
  // A networked store (cluster mode) must not block a shard thread on the network, so the
  // shards look intake keys up and load payloads through these. `done` runs on `on`'s thread
  // exactly once: a local store (RocksDB, the in-memory fake) answers before returning — it
  // calls the synchronous forms (find_event_keys_at_once, load_event_at_once) —, a networked
  // store later, posted through `on` (which also tells it whose connection to use). Ordering: a
  // lookup sees every write() that returned before it was issued; writes made while it is
  // outstanding may or may not be seen (the shard covers the keys it wrote meanwhile itself,
  // ShardIntake::take_in). The views in `keys` stay valid until `done` runs. A store completes
  // every call before it is destroyed, and never after `on`'s loop has stopped (it answers an
  // error when it closes first).
  using EventKeysDone = std::function<void(Result<std::vector<std::optional<EventKeyRecord>>>)>;
  using EventDone = std::function<void(Result<std::optional<Event>>)>;
  virtual void find_event_keys_async(const std::vector<EventKeyRef>& keys, Poster& on,
                                     EventKeysDone done) = 0;
  virtual void load_event_async(EventSeq seq, Poster& on, EventDone done) = 0;

  // Rebuilds one partition (see RecoveryVisitor). `now` stamps lease_expired attempts.
  // Blocks the caller for the whole load: for start-up, never for a running shard's loop.
  virtual Result<RecoveryStats> recover(Partition p, WallTime now, RecoveryVisitor& v) = 0;
  // The same for a running shard taking a partition over (cluster mode): `done` gets the
  // partition's state, collected, on `on`'s thread exactly once, and the caller's thread is not
  // blocked meanwhile by a networked store (it loads on a thread of its own); a local store
  // answers before returning (recover_collecting). Nothing is visited on failure.
  using RecoverDone = std::function<void(Result<RecoveredPartition>)>;
  virtual void recover_async(Partition p, WallTime now, Poster& on, RecoverDone done) = 0;
};

// ---- the delivery log's reads ------------------------------------------------------------------
// What the REST API and the portal read (SPEC R10.2; docs/operations.md "Delivery log"), off the
// shards' loops.
class DeliveryLog {
 public:
  virtual ~DeliveryLog() = default;

  virtual Result<std::optional<Event>> find_event(std::string_view tenant,
                                                  std::string_view event_id) = 0;
  virtual Result<std::optional<DeliveryDetail>> get_delivery(DeliveryId id) = 0;
  // Several at once, aligned with the argument (a networked store answers them in a few round
  // trips; others ask one by one, get_deliveries_one_by_one).
  virtual Result<std::vector<std::optional<DeliveryDetail>>> get_deliveries(
      const std::vector<DeliveryId>& ids) = 0;
  // Replay missing (docs/operations.md "Delivery log"): every delivery of event `seq` the store
  // still holds (any state), from its event → deliveries index. Any order. A store without that
  // index answers kUnavailable, reason "not_supported" (no_event_index()).
  virtual Result<std::vector<Delivery>> event_deliveries(EventSeq seq) = 0;

  // R10.2: the newest `limit` deliveries across all endpoints of a tenant.
  virtual Result<std::vector<Delivery>> recent_deliveries(std::string_view tenant,
                                                          size_t limit) = 0;
  virtual Result<DeliveryPage> list_deliveries(std::string_view tenant,
                                               std::optional<EndpointId> endpoint,
                                               std::optional<DeliveryStatus> status, size_t limit,
                                               std::string_view cursor) = 0;
  virtual Result<std::vector<Notification>> list_notifications(std::string_view tenant,
                                                               size_t limit) = 0;
};

// ---- the tenant keys ---------------------------------------------------------------------------
// SPEC R14.1: the tenant-scoped API keys — one small registry for the whole store, not
// partitioned (any node checks any tenant's key). put and delete are durable when they return
// and bump the version; load_api_keys reads every key with the version, and api_keys_version
// lets a node poll cheaply for another node's change. A store that keeps no keys answers
// kUnavailable, reason "not_supported" (no_api_keys()), to a change, and an empty set at
// version 0 to a read.
class KeyStore {
 public:
  virtual ~KeyStore() = default;

  virtual Result<void> put_api_key(const ApiKey& key) = 0;
  virtual Result<void> delete_api_key(std::string_view id) = 0;
  virtual Result<ApiKeySet> load_api_keys() = 0;
  // Ends every portal link and session of `tenant` issued before `not_before` (SPEC R14.3):
  // durable when it returns, bumps the key version, and load_api_keys returns it.
  virtual Result<void> put_portal_cutoff(std::string_view tenant, WallTime not_before) = 0;
  virtual Result<uint64_t> api_keys_version() = 0;
  // A node-wide secret (e.g. the portal's signing key when portal.secret is unset, SPEC R14):
  // the value stored under `name`, or, when none is, `candidate`, stored durably first. Every
  // node of a store gets the same value (set-if-absent), so the first node's candidate wins.
  // A store that keeps none answers kUnavailable, reason "not_supported" (no_secrets()).
  virtual Result<std::string> node_secret(std::string_view name, std::string_view candidate) = 0;
};

// ---- the notification outboxes ------------------------------------------------------------------
// SPEC R8.4 across a crash (docs/notifications.md "Delivery: at least once, never in the way"):
// a notification written while the operator webhook (or an SMTP relay, for the owner's e-mail)
// is configured keeps an outbox entry until its channel is through with it, so that what a
// crash or a stop kept from the channel is sent again after the next start, with the same id.
class Outboxes {
 public:
  virtual ~Outboxes() = default;

  // The operator webhook's entries this store holds for the caller to send now (oldest first),
  // handed out once: a store whose entries are handed over otherwise (per partition, to the
  // node that takes it) answers an empty list.
  virtual std::vector<Notification> take_outbox() = 0;
  // The notification reached the operator webhook or was given up: its entry goes.
  virtual Result<void> outbox_done(uint64_t notification_seq) = 0;
  // The same two for the owner's e-mail (SPEC R8.4), independent of the webhook's.
  virtual std::vector<Notification> take_mail_outbox() = 0;
  virtual Result<void> mail_outbox_done(uint64_t notification_seq) = 0;
};

// ---- retention ---------------------------------------------------------------------------------
class Retention {
 public:
  virtual ~Retention() = default;

  // Deletes what became deletable before now - the store's retention (SPEC R10.1): terminal
  // deliveries with their attempts and index entries, events without deliveries left,
  // notifications, each in what this node owns. `stop`, when set, is asked before each chunk
  // with work: once it answers true the pass returns what it did (stats.stopped), and the next
  // pass goes on from there. Runs on the calling thread (never a shard's); safe concurrently
  // with write().
  virtual Result<RetentionStats> run_retention(WallTime now, const std::function<bool()>& stop) = 0;
};

// ---- what the composition asks a store about itself ---------------------------------------------
class StoreInfo {
 public:
  virtual ~StoreInfo() = default;

  // What the store's open found (node/ logs it at start).
  virtual OpenReport open_report() const = 0;
  // The store's own figures for /metrics, as Prometheus text (empty: none). Any thread.
  virtual std::string metrics_text() const = 0;
  // True when other processes may change what this store holds behind this one (a store shared
  // by the nodes of a cluster): a node then polls what it caches (the tenant keys, SPEC R14.1).
  virtual bool shared() const = 0;
};

// Every role: what a node runs on. A method name belongs to one role only.
class Store : public Journal,
              public DeliveryLog,
              public KeyStore,
              public Outboxes,
              public Retention,
              public StoreInfo {
 public:
  ~Store() override = default;
};

}  // namespace ringcast
