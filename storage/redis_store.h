// RedisStore: core's Store on Redis (a single server or a Redis Cluster) as the system of
// record, for cluster mode (research/scale-out.md design A; docs/cluster.md "The
// store on Redis"). Values are storage/codec's byte encodings of the records.
//
// Layout. Every key of partition p starts with the hash tag "{<ns>:<p>}" (ns default "rc"), so
// a partition lives in one slot and one Lua script updates it atomically. With T = "{rc:p}:":
//   T seq                   string  highest id sequence ever written in p (ids, deletes)
//   T ev                    hash    be64(event seq) -> encode_event (payload inline)
//   T key                   hash    tenant "\0" event id -> be64(seq) + encode_event_key
//   T dl                    hash    be64(delivery id) -> encode_delivery (every status)
//   T act                   zset    be64(id) of every non-terminal delivery (score 0, lex order
//                                   = id order: what recover() scans)
//   T at:<hex id>           hash    be16(number) -> encode_attempt
//   T ti:<hex th>           zset    be64(~id) per delivery of tenant hash th (newest first)
//   T ei:<hex th>:<hex ep>  zset    the same per endpoint
//   T ep                    hash    be64(endpoint id) -> encode_endpoint
//   T tn                    hash    tenant name -> encode_tenant
//   T nt:<hex th>           zset    be64(~seq) + encode_notification (newest first)
//   T ob                    hash    be64(seq) -> be64(tenant hash) + encode_notification: the
//                                   notification outbox (notification_outbox), until outbox_done
//   T om                    hash    the same, the owner's e-mail's outbox (mail_outbox; only a
//                                   notification with an owner_email), until mail_outbox_done
//   T own                   hash    {node, epoch}: the partition's lease. Written by the lease
//                                   manager (cluster/lease.h), only read here (the fence)
// Retention (SPEC R10.1, run_retention; docs/cluster.md "Retention"):
//   T done                  zset    be64(id) of every terminal delivery, score = the store's wall
//                                   clock (ms) when the write that ended it was made
//   T ed                    hash    be64(event seq) -> be16(n) + tenant "\0" event id (n bytes)
//                                   + be64(delivery id) of each of its deliveries
//   T eo                    zset    be64(seq) of each event written without a delivery, score ms
//   T nto                   zset    be64(tenant hash) + be64(seq) per notification, score ms
// Writes. write() groups a batch by partition, notes the epoch each partition is held at
// (set_partition_epoch, read in write()), and hands the batch to the store's loop thread (FIFO
// through net::Loop::post); the thread sends one EVAL of the apply script per partition (not
// EVALSHA: see send_batch()), pipelined, then (wait_replicas > 0) one WAIT per partition on the
// connection that carried its script. The script's keys are T own and T seq (one slot). With
// fencing on (RedisStoreOptions::node_id set) it starts with cluster::kFencePrelude: unless
// T own holds exactly {node_id, that epoch} it answers "FENCED ..." and writes nothing of the
// partition; a partition held at epoch 0 (never set, or cleared) is refused on the loop thread
// without being sent. Then the script checks every new event's idempotency key (unless
// Mutations::event_keys_checked) and answers "CONFLICT ..." before writing anything, then
// applies the puts in batch order (the last put of a record wins). With node_id empty there is
// no check (one ringcast node alone on its Redis).
// Invariants:
//   - write() never touches the network and returns a strictly increasing commit sequence;
//   - durable_seq() >= s means every script of batch s and of every earlier batch answered OK
//     or was refused by the fence and, with wait_replicas > 0, every WAIT after them counted >=
//     wait_replicas replicas. A FENCED part wrote nothing, so durable does not mean written: a
//     caller that acknowledges on durability must check fenced(p, epoch) for the partitions it
//     wrote;
//   - a refused write of p at epoch e is recorded (fenced(p, e), fenced_writes(), one
//     on_fenced(p, e) per pair) before durable_seq() can pass its batch, with release ordering:
//     who sees that durable_seq() and then asks fenced(p, e) gets true. It is not fatal: the
//     batch's other partitions are written and the store goes on;
//   - a batch that cannot be confirmed (a timeout, a lost connection, CLUSTERDOWN/TRYAGAIN/
//     READONLY during a failover, too few replicas in WAIT, a WAIT answered by a node that is a
//     replica now, a script redirected after its WAIT was sent) is not lost: degraded() turns true
//     and every batch not durable yet is sent again, in commit order, after a backoff (100 ms
//     doubling to 1 s) until all are confirmed. Safe because applying a batch again is
//     idempotent (whole-record puts; the key check compares the event's seq; seq only grows)
//     and the later batches, applied again after it, restore their newer states. durable_seq()
//     waits meanwhile, so nothing is acknowledged that Redis has not confirmed;
//   - a batch the script refuses (CONFLICT, a script error) is fatal for the store:
//     durable_seq() stops for good, failed() reports the first error and every later write()
//     returns it (crash-only: the shard aborts on a write error);
//   - a read issued after write() returned sees that write: reads are queued behind it on the
//     loop thread and travel on the same per-node connection, which Redis answers in order;
//     while unconfirmed batches wait to be sent again (degraded), a read waits for that replay
//     and goes right behind it; a read answered after a write failed that was issued before
//     it (e.g. timed out unsent) is asked again behind the replay, and after 3 such answers
//     fails with kUnavailable instead of answering without that write;
//   - synchronous reads block the calling thread (never the loop thread); the *_async forms
//     never block and complete exactly once through the caller's Poster.
// TODO(cluster): reads are not fenced (a stale owner still reads what is there), and a
// partition once FENCED at an epoch is still sent at that epoch (the script refuses it again);
// the caller is expected to drop the partition (set_partition_epoch(p, 0)).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/result.h"
#include "core/store.h"
#include "core/time.h"
#include "redis/tls_options.h"

namespace ringcast::storage {

// A partition this node holds, at the epoch of its lease (cluster/lease.h): what a retention
// pass covers (RedisStore::run_retention).
struct OwnedEpoch {
  Partition partition = 0;
  uint64_t epoch = 0;
};

struct RedisStoreOptions {
  std::vector<std::string> servers;  // "127.0.0.1:6379"; several only with cluster = true
  bool cluster = false;
  std::string username;  // a Redis ACL user; empty: AUTH with the password alone
  std::string password;
  redis::TlsOptions tls;  // TLS to every node (SPEC R14, storage.redis.tls*)
  std::string ns = "rc";  // the hash tag is "{<ns>:<partition>}"
  Duration command_timeout = seconds(2);
  // WAIT after each batch's scripts, per primary: durable = in memory on this many replicas.
  // 0 here (tests run without replicas); docs/cluster.md says 1 in production.
  uint32_t wait_replicas = 0;
  Duration wait_timeout = milliseconds(50);
  // Fencing (docs/cluster.md "Fencing"). Empty: no fence (one ringcast node alone on its Redis).
  // Set: this node's id as the lease manager writes it into T own ({node, epoch}); every write of p
  // must find the lease at exactly {node_id, the epoch set by set_partition_epoch(p)}.
  std::string node_id;
  // Called on the store's thread, once per (partition, epoch), when a write of the partition
  // at that epoch is first refused; before durable_seq() passes that batch. Must not block and
  // must not call the store's synchronous reads (they wait on this thread).
  std::function<void(Partition, uint64_t epoch)> on_fenced;

  // ---- retention (SPEC R10.1) and memory (docs/cluster.md "Memory back-pressure") ----
  Duration retention = days(30);  // run_retention() deletes what ended before now - this
  // The partitions run_retention(now, stop) covers, with the epoch each is held at, asked at each
  // pass (docs/cluster.md "Retention"). Set by whoever composes the node with a lease manager
  // (engine::Embedded: LeaseManager::owned()); unset, this node is alone on its Redis and owns
  // every partition, at epoch 0 (unfenced). Called on the retention caller's thread.
  std::function<std::vector<OwnedEpoch>()> retention_owned;
  // Stamps the retention indexes (T done, T eo, T nto) at write(). Null: the system wall clock.
  // Tests inject a ManualClock; only wall_now() is used, on the writer's thread.
  Clock* clock = nullptr;
  size_t retention_chunk = 500;  // records per retention script (one partition each)
  // Memory back-pressure: INFO memory is polled on every primary holding a partition every
  // memory_poll; full() turns true once some primary's used_memory reaches high_water x its
  // limit, and false again once every primary is below (high_water - kMemoryHysteresis) x limit.
  // The limit is the server's maxmemory, or max_memory_bytes when that is 0 (the smaller of
  // the two when both are set). 0 = never polled (memory_poll zero also turns it off).
  double high_water = 0.85;
  uint64_t max_memory_bytes = 0;
  Duration memory_poll = seconds(1);
  // open() refuses a server whose maxmemory-policy is not noeviction (an evicting system of
  // record silently loses accepted events) and warns on stderr when no limit is known (maxmemory
  // 0 and max_memory_bytes 0: no back-pressure, Redis grows until the host runs out). Off for
  // tests that do not care.
  bool check_memory_policy = true;

  // SPEC R8.4 across a crash (the RocksStore outbox's counterpart): every notification written
  // also gets an entry in its partition's outbox (T ob) until outbox_done(). recover(p) — the
  // node that now owns p — hands p's entries to on_outbox (on the recovering thread; it must
  // not block), so a notification its node did not get to the operator webhook before it died
  // is sent by the next owner, with the same webhook-id.
  bool notification_outbox = false;
  std::function<void(std::vector<Notification>)> on_outbox;
  // The owner's e-mail's outbox (T om, SPEC R8.4), independent of the webhook's: a notification
  // with an owner_email gets an entry until mail_outbox_done(); recover(p) hands p's entries to
  // on_mail_outbox the same way.
  bool mail_outbox = false;
  std::function<void(std::vector<Notification>)> on_mail_outbox;
};

// The memory view of the last poll (RedisStore::memory()).
struct RedisMemory {
  uint64_t used_bytes = 0;   // the fullest primary's used_memory (relative to its limit)
  uint64_t limit_bytes = 0;  // its limit (0: none known)
  uint64_t mark_bytes = 0;   // high_water x limit_bytes
  bool full = false;
  uint64_t polls = 0, poll_errors = 0, full_spells = 0;  // full_spells: times full() turned true
};

class RedisStore final : public Store {
 public:
  using OwnedEpoch = storage::OwnedEpoch;

  // Starts the store's loop thread and client and checks the server answers (PING).
  static Result<std::unique_ptr<RedisStore>> open(RedisStoreOptions options);
  // Fails what is still outstanding (async calls complete with an error) and joins the thread.
  ~RedisStore() override;
  RedisStore(const RedisStore&) = delete;
  RedisStore& operator=(const RedisStore&) = delete;

  // ---- Journal
  Result<uint64_t> write(const Mutations& m) override;
  uint64_t durable_seq() const override { return durable_.load(std::memory_order_acquire); }
  // Blocks until durable_seq() >= seq, the store failed, or the timeout; true when durable.
  bool wait_durable(uint64_t seq, Duration timeout);
  // The error that stopped the store, if one did.
  std::optional<Error> failed() const;
  // Store::degraded(): some write could not be confirmed (a timeout, a lost connection, a
  // failover, too few replicas in WAIT) and the unconfirmed batches are being sent again, in
  // commit order, until Redis confirms them; durable_seq() waits meanwhile.
  bool degraded() const override;
  // kFull while Redis refuses writes it cannot persist (MISCONF: its disk is full or failing;
  // docs/durability.md); the writes are sent again until one is confirmed.
  DiskHealth disk_health() const override;
  // No disk of its own to probe: the writes are sent again until Redis takes them
  // (retry_disk_by_health, core/store_helpers.h).
  bool retry_disk() override;
  bool durable_on_write() const override { return false; }  // confirmed by durable_seq() only
  uint64_t replays() const;                                 // how often that happened
  // Store::full(): some primary's memory reached the high-water mark (RedisStoreOptions::
  // high_water), with hysteresis. Intake answers 503 store_full; deliveries, attempts and
  // retention keep writing (they finish work and free space).
  bool full() const override;
  RedisMemory memory() const;
  // Polls INFO memory now (it also happens every memory_poll on the loop thread); for tests.
  Result<void> poll_memory();

  Result<std::optional<EventKeyRecord>> find_event_key(std::string_view tenant,
                                                       std::string_view event_id) override;
  Result<std::vector<std::optional<EventKeyRecord>>> find_event_keys(
      const std::vector<EventKeyRef>& keys) override;
  Result<std::optional<Event>> load_event(EventSeq seq) override;
  Result<std::vector<std::optional<Event>>> load_events(const std::vector<EventSeq>& seqs) override;
  void find_event_keys_async(const std::vector<EventKeyRef>& keys, Poster& on,
                             EventKeysDone done) override;
  void load_event_async(EventSeq seq, Poster& on, EventDone done) override;
  Result<RecoveryStats> recover(Partition p, WallTime now, RecoveryVisitor& v) override;
  // Store::recover_async: recover() runs on a loader thread of the store's (started on first
  // use; one load at a time, in the order asked) and its result is posted through `on`. The
  // caller's thread never waits on Redis.
  void recover_async(Partition p, WallTime now, Poster& on, RecoverDone done) override;
  // After this returns no recover_async answer is posted any more (the shards are going away:
  // Embedded stops the engine, cancels, then destroys it); a load still running ends on its
  // own, bounded by the command timeouts, and is joined by the destructor.
  void cancel_recovers();

  // ---- DeliveryLog (docs/cluster.md "Delivery-log reads"; paging: storage/log_query.h)
  Result<std::optional<Event>> find_event(std::string_view tenant,
                                          std::string_view event_id) override;
  Result<std::optional<DeliveryDetail>> get_delivery(DeliveryId id) override;
  Result<std::vector<std::optional<DeliveryDetail>>> get_deliveries(
      const std::vector<DeliveryId>& ids) override;
  Result<std::vector<Delivery>> event_deliveries(EventSeq seq) override;
  Result<std::vector<Delivery>> recent_deliveries(std::string_view tenant, size_t limit) override;
  Result<DeliveryPage> list_deliveries(std::string_view tenant, std::optional<EndpointId> endpoint,
                                       std::optional<DeliveryStatus> status, size_t limit,
                                       std::string_view cursor) override;
  Result<std::vector<Notification>> list_notifications(std::string_view tenant,
                                                       size_t limit) override;

  // ---- Outboxes. Nothing to take at start: a partition's entries (T ob, T om) go to the node
  // that takes the partition, from recover(p) through RedisStoreOptions::on_outbox and
  // on_mail_outbox (docs/operations.md "8. Cluster mode": "The notification outbox on Redis"),
  // so these two answer an empty list.
  std::vector<Notification> take_outbox() override;
  std::vector<Notification> take_mail_outbox() override;
  // The notification reached the operator webhook or was given up: its outbox entry goes
  // (RedisStoreOptions::notification_outbox). Any thread; blocks on Redis.
  Result<void> outbox_done(uint64_t notification_seq) override;
  // The owner's e-mail was accepted by the relay or given up: its T om entry goes (mail_outbox).
  Result<void> mail_outbox_done(uint64_t notification_seq) override;

  // ---- KeyStore. SPEC R14.1: API keys in one hash of their own slot ({<ns>:keys}:k, field = key
  // id) with a version counter ({<ns>:keys}:v) that every change bumps in the same script; with
  // wait_replicas > 0 a change returns once WAIT counted that many replicas, so a revocation
  // acknowledged to the admin survives a failover like an acknowledged event.
  Result<void> put_api_key(const ApiKey& key) override;
  Result<void> delete_api_key(std::string_view id) override;
  Result<ApiKeySet> load_api_keys() override;
  Result<uint64_t> api_keys_version() override;
  Result<std::string> node_secret(std::string_view name, std::string_view candidate) override;
  Result<void> put_portal_cutoff(std::string_view tenant, WallTime not_before) override;

  // ---- StoreInfo. Nothing is dropped at open (a batch is confirmed whole or sent again).
  OpenReport open_report() const override { return {}; }
  // The memory view (memory()) and retention_fenced(), storage/store_metrics.h.
  std::string metrics_text() const override;
  // The nodes of a cluster share it (and any node may change the tenant keys).
  bool shared() const override { return true; }

  // The epoch this process holds partition p's lease at (0: none), for the writes of p that
  // write() is called with from now on (any thread). Only checked with fencing on (node_id);
  // there, 0 refuses every write of p. recover(p) writes the leases it turns back at the epoch
  // p is held at when it starts, and answers an error (reason "fenced") if that was refused.
  void set_partition_epoch(Partition p, uint64_t epoch);
  // True once a write of p at `epoch` was refused (FENCED, or epoch 0 with fencing on): nothing
  // of p in that batch was written although the batch became durable. Any thread; see the
  // ordering invariant above. Never true with fencing off.
  bool fenced(Partition p, uint64_t epoch) const;
  // How many partition writes (one per partition of a batch) were refused so far.
  uint64_t fenced_writes() const;

  // ---- Retention. run_retention(now, stop) is run_retention_on(now, the partitions
  // RedisStoreOptions::retention_owned gives (unset: all, at epoch 0), stop).
  Result<RetentionStats> run_retention(WallTime now, const std::function<bool()>& stop) override;
  // Deletes what ended before now - retention (SPEC R10.1) in the partitions given with the
  // epoch this node holds each at (fencing on: every script of p starts with the fence at that
  // epoch, so a partition that moved deletes nothing; fencing off: the epoch is ignored).
  // What goes: terminal deliveries whose T done stamp is older (with their T at:<id> attempts
  // and T ti:/T ei: members), events no delivery is left of and those written without one that
  // are older (T ev, T key, T ed, T eo), notifications older (T nt:, T nto). Cost is
  // proportional to what expires (the time-ordered T done / T eo / T nto, no scan). One script
  // per chunk (retention_chunk records) of one partition; `stop` is asked before each chunk
  // with work, and a pass it ends reports stopped (the next pass goes on from there). Runs on
  // the calling thread, which blocks on the store's loop (never call it on a shard's thread).
  Result<RetentionStats> run_retention_on(WallTime now, const std::vector<OwnedEpoch>& owned,
                                          const std::function<bool()>& stop = {});
  // How many retention scripts the fence refused (the partition had moved).
  uint64_t retention_fenced() const;

  static constexpr double kMemoryHysteresis = 0.05;

  struct Impl;

 private:
  Result<void> change_api_key(std::string_view op, std::string_view id, std::string value,
                              std::string_view hash_suffix = "k");
  RedisStore() = default;
  struct Loader;
  std::unique_ptr<Loader> loader_;  // recover_async's thread and queue
  std::mutex loader_mu_;            // creates loader_ once
  std::unique_ptr<Impl> impl_;
  std::thread thread_;
  std::atomic<uint64_t> durable_{0};
};

}  // namespace ringcast::storage
