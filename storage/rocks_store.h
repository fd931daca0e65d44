// RocksStore: core's Store on RocksDB (SPEC R10, R12.2, R12.5; docs/storage-schema.md).
// Invariants: one write() is one atomic WriteBatch; a commit sequence is durable once
// durable_seq() >= it (never earlier); a partition's records are one key range per column
// family; terminal records leave only through run_retention(), never a non-terminal one.
// A full or read-only disk fails a write whole (disk_health() kFull; writing it again is safe);
// a failed sync fails the store for good (kFailed): durable_seq() never passes what that sync
// was to cover, whatever a later sync answers.
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/store.h"
#include "core/time.h"
#include "storage/created_only.h"
#include "storage/schema.h"

namespace rocksdb {
class DB;
class ColumnFamilyHandle;
class Cache;
class Status;
class WriteBatch;
class EventListener;
struct Options;
}  // namespace rocksdb

namespace ringcast::storage {

class PayloadLog;
class LeaseLog;
struct StoredEvent;

struct StoreOptions {
  std::string path;
  SyncPolicy sync = SyncPolicy::kInterval;
  Duration sync_interval = milliseconds(10);  // kInterval: at most one WAL fsync per interval
  Duration retention = days(30);              // SPEC R10.1
  // Stamps the expiry index (when a record became deletable). Null: the system wall clock.
  // Tests inject a ManualClock. Only wall_now() is used.
  Clock* clock = nullptr;
  size_t block_cache_bytes = size_t{64} << 20;
  size_t write_buffer_bytes = size_t{64} << 20;  // memtable size of the large column families
  size_t total_write_buffer_bytes = size_t{256} << 20;
  // Bounds the WAL a restart after a crash replays (flushes the oldest memtables beyond it).
  size_t max_total_wal_bytes = size_t{64} << 20;
  int background_jobs = 2;
  bool create_if_missing = true;
  // Flush memtables when the store is closed, so that the next start replays no WAL (a start
  // after a crash still replays up to max_total_wal_bytes).
  bool flush_on_close = true;
  // Every notification written also gets an outbox entry until outbox_done() (the operator
  // webhook is configured): a restart sends again what a crash or a stop left unsent. When
  // false, open() deletes the entries left by an earlier run.
  bool notification_outbox = false;
  // The owner's e-mail's outbox (SPEC R8.4, the same at-least-once): every notification written
  // with an owner_email gets a second entry ('m') until mail_outbox_done() (an SMTP relay is
  // configured). Independent of the webhook's: each channel resends only what it did not
  // finish. When false, open() deletes the entries left by an earlier run.
  bool mail_outbox = false;
  // Payload log segments (storage/payload_log.h) roll over at this size.
  uint64_t payload_segment_bytes = uint64_t{64} << 20;
  // Lease log segments (storage/lease_log.h) roll over at this size.
  uint64_t lease_segment_bytes = uint64_t{4} << 20;
  // A partition whose created-only deliveries (storage/created_only.h) span more id sequences
  // than this has its oldest ones written into deliveries_active, so that neither the set in
  // memory (a bit per sequence) nor recovery's scan of deliveries_created grows without bound
  // behind one delivery that waits for weeks.
  uint64_t created_span_max = uint64_t{1} << 22;
  // Called by the sync thread (kInterval) each time durable_seq() advances, e.g. to wake a
  // shard loop through an eventfd. Must be cheap and must not call back into the store.
  std::function<void(uint64_t durable_seq)> on_durable;
  // Called once, by the thread that found it, when the store fails for good (DiskHealth::kFailed:
  // a sync failed, or RocksDB stopped on an error it cannot resume from). `what` is a static
  // string, `sys_errno` the errno when there is one. Must not call back into the store.
  std::function<void(const char* what, int sys_errno)> on_failed;
};

// Sizes of the on-disk state (bench and operators).
struct StoreSizes {
  uint64_t sst_bytes = 0;  // live SST files, all column families
  uint64_t wal_bytes = 0;
  uint64_t memtable_bytes = 0;
  uint64_t payload_log_bytes = 0;
  uint64_t lease_log_bytes = 0;
};

class RocksStore final : public Store {
 public:
  static Result<std::unique_ptr<RocksStore>> open(const StoreOptions& options);
  ~RocksStore() override;  // stops the sync thread, syncs the WAL, closes the DB
  RocksStore(const RocksStore&) = delete;
  RocksStore& operator=(const RocksStore&) = delete;

  // ---- Journal. write() is thread-safe: several shards write at once (RocksDB groups them).
  // An event whose (tenant, id) key already names another event fails the batch with
  // kConflict (SPEC R12.5: never a silent overwrite); rewriting the same event is allowed.
  // Commit sequences are RocksDB sequence numbers: strictly increasing for one caller, and an
  // empty Mutations returns the current one without writing.
  Result<uint64_t> write(const Mutations& m) override;
  uint64_t durable_seq() const override { return durable_.load(std::memory_order_acquire); }
  bool durable_on_write() const override { return true; }  // in the WAL once write() returns
  bool degraded() const override { return false; }         // a local disk: kFull or kFailed
  bool full() const override { return false; }             // the disk says kFull instead
  DiskHealth disk_health() const override {
    return static_cast<DiskHealth>(disk_.load(std::memory_order_acquire));
  }
  bool retry_disk() override;

  Result<std::optional<EventKeyRecord>> find_event_key(std::string_view tenant,
                                                       std::string_view event_id) override;
  // One MultiGet.
  Result<std::vector<std::optional<EventKeyRecord>>> find_event_keys(
      const std::vector<EventKeyRef>& keys) override;
  Result<std::optional<Event>> load_event(EventSeq seq) override;
  // One by one (load_events_one_by_one): local reads, no round trip to save.
  Result<std::vector<std::optional<Event>>> load_events(const std::vector<EventSeq>& seqs) override;
  // A local store answers before returning (find_event_keys_at_once, load_event_at_once).
  void find_event_keys_async(const std::vector<EventKeyRef>& keys, Poster& on,
                             EventKeysDone done) override;
  void load_event_async(EventSeq seq, Poster& on, EventDone done) override;

  // ---- DeliveryLog.
  Result<std::optional<Event>> find_event(std::string_view tenant,
                                          std::string_view event_id) override;
  Result<std::optional<DeliveryDetail>> get_delivery(DeliveryId id) override;
  // One by one (get_deliveries_one_by_one).
  Result<std::vector<std::optional<DeliveryDetail>>> get_deliveries(
      const std::vector<DeliveryId>& ids) override;
  Result<std::vector<Delivery>> event_deliveries(EventSeq seq) override;
  Result<std::vector<Delivery>> recent_deliveries(std::string_view tenant, size_t limit) override;
  // A page can hold fewer than `limit` items with a non-empty cursor when a status filter
  // skipped many entries (the scan per call is bounded by kListScanMax, storage/log_query.h).
  Result<DeliveryPage> list_deliveries(std::string_view tenant, std::optional<EndpointId> endpoint,
                                       std::optional<DeliveryStatus> status, size_t limit,
                                       std::string_view cursor) override;
  Result<std::vector<Notification>> list_notifications(std::string_view tenant,
                                                       size_t limit) override;
  // Lease convention (SPEC R6 lease_expired, R12.2): a kInFlight put of a delivery already
  // stored goes to the lease log, not to deliveries_active; reads show the live lease, and open
  // writes the leases an earlier run left unresolved into deliveries_active (when newer than
  // the record there). A delivery found kInFlight there at recovery gets one
  // attempt numbered max(d.attempts, last stored attempt + 1) with outcome kUnknown, and
  // d.attempts is raised to that number; the attempt and the kPending delivery are one batch,
  // fsynced before the visitor sees the delivery, so a second restart finds it kPending.
  Result<RecoveryStats> recover(Partition p, WallTime now, RecoveryVisitor& v) override;
  // Answered before returning (recover_collecting).
  void recover_async(Partition p, WallTime now, Poster& on, RecoverDone done) override;

  // ---- Outboxes. The notifications whose outbox entry was there when the store opened (oldest
  // first), handed out once; entries whose notification retention removed are deleted at open.
  std::vector<Notification> take_outbox() override;
  // The notification reached the operator webhook or was given up: its entry goes.
  Result<void> outbox_done(uint64_t notification_seq) override;
  // The same for the owner's e-mail (StoreOptions::mail_outbox).
  std::vector<Notification> take_mail_outbox() override;
  Result<void> mail_outbox_done(uint64_t notification_seq) override;

  // ---- KeyStore. SPEC R14.1: API keys in the meta column family ('k' | id), synced when written.
  // One process writes them, so the version is this process's count of changes.
  Result<void> put_api_key(const ApiKey& key) override;
  Result<void> delete_api_key(std::string_view id) override;
  Result<ApiKeySet> load_api_keys() override;
  Result<uint64_t> api_keys_version() override { return api_keys_version_.load(); }
  Result<std::string> node_secret(std::string_view name, std::string_view candidate) override;
  Result<void> put_portal_cutoff(std::string_view tenant, WallTime not_before) override;

  // ---- StoreInfo. What open found: torn_events_dropped() and leases_applied_at_open().
  OpenReport open_report() const override;
  // ringcast_store_bytes (sizes(), storage/store_metrics.h).
  std::string metrics_text() const override;
  // One process owns a RocksDB store (the data dir's lock).
  bool shared() const override { return false; }

  // Blocks until durable_seq() >= seq or `timeout` passes; true when durable.
  bool wait_durable(uint64_t seq, Duration timeout);

  // ---- Retention. Deletes what became deletable before now - retention (SPEC R10.1): terminal
  // deliveries with their attempts and index entries, events without deliveries left,
  // notifications. Cost is proportional to what expires (an expiry index, no scan). A daemon calls
  // it periodically (e.g. each minute); safe to call concurrently with write(). `stop`, when set,
  // is asked before each chunk that has work (kRetentionChunk ids, committed on its own): once it
  // answers true the pass returns what it did (stats.stopped), so a shutdown need not wait for a
  // long pass; the next pass goes on from there, nothing is skipped.
  Result<RetentionStats> run_retention(WallTime now, const std::function<bool()>& stop) override;

  // Flushes every memtable to SST files (and the WAL); with compact, also compacts every
  // column family fully. For tests, benchmarks and operators.
  Result<void> flush(bool compact = false);
  StoreSizes sizes() const;
  // Events dropped at open because their payload did not survive (a power loss after the
  // WAL record reached the disk but before the payload log did: never acknowledged).
  uint64_t torn_events_dropped() const { return torn_events_dropped_; }
  // Leases of the earlier run's lease log that were newer than their delivery's record and
  // were written into it at open (each becomes a lease_expired attempt at recovery).
  uint64_t leases_applied_at_open() const { return leases_applied_; }
  // Deliveries stored only as their created record now (docs/storage-schema.md "Created
  // records"), and how many were written into deliveries_active because their partition's
  // created-only ones spanned more than StoreOptions::created_span_max.
  size_t created_only() const { return created_only_.size(); }
  uint64_t created_spilled() const { return created_spilled_.load(); }

 private:
  explicit RocksStore(const StoreOptions& options);
  Result<void> open_db();
  Result<void> load_outbox();
  Result<void> load_outbox_entries(char prefix, bool keep, std::vector<Notification>& out);
  // Writes a batch under the store's sync policy; force_sync fsyncs regardless (recovery).
  // `probed`: the caller wrote to the data dir just before (the payload log), so a read-only
  // filesystem would have refused that already.
  Result<uint64_t> commit(rocksdb::WriteBatch& batch, bool force_sync, bool probed = false);
  Result<void> write_meta(std::string_view key, const std::string* value, bool sync);
  void sync_loop();
  void advance_durable(uint64_t seq);
  int64_t stamp_ms();
  rocksdb::ColumnFamilyHandle* cf(Cf c) const { return handles_[c]; }
  Result<std::vector<Delivery>> fetch_deliveries(const std::vector<DeliveryId>& ids);
  Result<uint64_t> max_id_in(Cf c, Partition p);
  Result<uint64_t> stored_created_floor(Partition p);
  Result<void> check_new_event_keys(const std::vector<Event>& events, std::vector<bool>& exists);
  Result<std::optional<StoredEvent>> load_event_head(EventSeq seq);
  Result<void> read_payload(const StoredEvent& s, Event& out);
  Result<uint64_t> newest_expiry_stamp();
  // fsyncs what this open found written by an earlier run (the payload log's segments, the WAL
  // files RocksDB replayed, the directory), which a killed process may have left unsynced.
  Result<void> sync_recovered();
  Result<void> drop_torn_events();
  Result<void> apply_old_leases();
  // `ids`: a buffer of the caller's for the settled ids.
  void settle_leases(std::vector<std::pair<DeliveryId, size_t>>& leased,
                     const std::vector<std::pair<DeliveryId, size_t>>& settled,
                     std::vector<DeliveryId>& ids);
  Result<void> sync_logs();  // the payload and lease logs, before a WAL sync
  // A write of the store's own files failed with `err`: ENOSPC, EDQUOT and EROFS make the disk
  // kFull (the write changed nothing durable); anything else fails the store (kFailed). The
  // error to return, reason "storage_full" or "storage_failed".
  Error disk_error(int err, const char* what);
  // The same for a RocksDB status: NoSpace is kFull; any other error of a write fails the store
  // (RocksDB stops on it and resumes from NoSpace only).
  Error db_write_error(const rocksdb::Status& s);
  // A failed sync (any errno but EROFS, which refuses the sync without writing anything back):
  // the store fails for good.
  void fail(const char* what, int err);
  // One byte rewritten in place in the probe file: EROFS before RocksDB sees the filesystem
  // turn read-only (RocksDB cannot resume from that error without a reopen). Writes that append
  // payloads first need none.
  Result<void> probe_write_access();
  // kFull (ENOSPC) before a write of about `bytes` would leave less than the floor free
  // (free_floor()): RocksDB must never meet ENOSPC on its WAL. A WritableFileWriter that saw a
  // write error asserts on its next use in RocksDB builds with assertions (a WAL sync, a close),
  // and a torn WAL tail is only safe once RocksDB has resumed. The free space is measured
  // (statvfs) at every write while it is below kSpaceWatchBytes, else once a second.
  Result<void> check_space(uint64_t bytes);
  Result<void> remove_done_segments(RetentionStats& st);

  StoreOptions options_;
  std::unique_ptr<Clock> own_clock_;
  Clock* clock_ = nullptr;
  std::shared_ptr<rocksdb::Cache> cache_;
  rocksdb::DB* db_ = nullptr;
  std::atomic<uint64_t> api_keys_version_{1};
  std::array<rocksdb::ColumnFamilyHandle*, kCfCount> handles_{};
  std::unique_ptr<PayloadLog> payloads_;
  // Syncs the payload log before each memtable flush (see payload_log.h).
  std::shared_ptr<rocksdb::EventListener> flush_listener_;
  uint64_t torn_events_dropped_ = 0;
  // Leases of stored deliveries (see lease_log.h and the lease convention above).
  std::unique_ptr<LeaseLog> leases_;
  uint64_t leases_applied_ = 0;
  // Deliveries stored only as their created record (docs/storage-schema.md "Created records").
  CreatedOnly created_only_;
  std::atomic<uint64_t> created_spilled_{0};  // written into deliveries_active for their age

  std::atomic<uint64_t> durable_{0};
  std::atomic<bool> failed_{false};  // a sync failed: writes are refused from then on
  std::atomic<uint8_t> disk_{static_cast<uint8_t>(DiskHealth::kOk)};  // DiskHealth
  int probe_fd_ = -1;
  // check_space(): the last measure (free bytes, the floor) and when it was taken (steady ms).
  std::atomic<uint64_t> free_bytes_{UINT64_MAX};
  std::atomic<uint64_t> free_floor_bytes_{0};
  std::atomic<int64_t> free_checked_ms_{0};
  // A RocksDB write failed (NoSpace) and RocksDB has not resumed: its WAL writer saw the error,
  // so nothing may sync or close it (the sync thread skips, the close does not flush).
  std::atomic<bool> rocks_write_failed_{false};  // probe_write_access()
  std::atomic<int64_t> last_stamp_ms_{0};
  // Key ids of grouped expiry entries: starts above the store's sequence at open, so no id is
  // used twice, also across restarts (each group is a Put: the sequence passes every id used).
  std::atomic<uint64_t> next_expiry_group_{1};

  // kInterval sync thread.
  std::mutex sync_mu_;
  std::condition_variable sync_cv_;
  bool stop_ = false;
  std::atomic<bool> dirty_{false};
  std::thread sync_thread_;
  // Waiters of wait_durable().
  std::mutex durable_mu_;
  std::condition_variable durable_cv_;
  std::atomic<int> waiters_{0};

  std::vector<Notification> outbox_at_open_;
  std::vector<Notification> mail_outbox_at_open_;
  std::mutex outbox_mu_;

  // run_retention(): per partition, the stamp below which everything was processed.
  std::mutex retention_mu_;
  std::vector<uint64_t> retention_done_ms_;
};

}  // namespace ringcast::storage
