// RocksStore's journal (SPEC R12.2, R12.5; docs/storage-schema.md "Why this shape" and the
// payload and lease logs' "Order"): the write batch, group commit by the sync thread, the
// durable sequence, disk health (docs/durability.md "One node").
#include <sys/statvfs.h>
#include <unistd.h>

#include <rocksdb/db.h>
#include <rocksdb/options.h>
#include <rocksdb/write_batch.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "log/log.h"
#include "storage/codec.h"
#include "storage/lease_log.h"
#include "storage/payload_log.h"
#include "storage/rocks_store.h"
#include "storage/rocks_store_internal.h"
#include "storage/status.h"

namespace ringcast::storage {

using namespace rocks_detail;  // the store's shared helpers (rocks_store_internal.h)

namespace {

bool disk_refuses(int err) {
  return err == ENOSPC || err == EDQUOT || err == EROFS;
}

// A partition's created floor is written when it rose by this many id sequences (one meta put
// per that many deliveries at most; recovery scans at most that much more of deliveries_created).
constexpr uint64_t kFloorStep = 256;
// Created-only deliveries written into deliveries_active per batch when a partition spans more
// than StoreOptions::created_span_max.
constexpr size_t kSpillPerBatch = 1024;

// One write()'s changes of the created-only set (created_only.h): each partition it touches is
// marked in flight for the batch's lifetime, and without committed() the changes are undone,
// so that the set never runs ahead of the WAL (a batch that fails is written again whole, or
// the store fails).
class CreatedOnlyBatch {
 public:
  // `touched` and `ops` are the caller's (cleared) buffers, reused across writes.
  CreatedOnlyBatch(CreatedOnly& set, std::vector<Partition>& touched,
                   std::vector<std::pair<DeliveryId, bool>>& ops)
      : set_(set), touched_(touched), ops_(ops) {}
  CreatedOnlyBatch(const CreatedOnlyBatch&) = delete;
  CreatedOnlyBatch& operator=(const CreatedOnlyBatch&) = delete;
  ~CreatedOnlyBatch() {
    if (!committed_) {
      for (auto it = ops_.rbegin(); it != ops_.rend(); ++it) {
        if (it->second) {
          set_.take(it->first);
        } else {
          set_.add(it->first);
        }
      }
    }
    for (Partition p : touched_) set_.end_batch(p);
  }
  void add(DeliveryId id) {
    touch(id_partition(id));
    if (set_.add(id)) ops_.emplace_back(id, true);
  }
  // True when id was created-only (nothing of it in deliveries_active).
  bool take(DeliveryId id) {
    touch(id_partition(id));
    if (!set_.take(id)) return false;
    ops_.emplace_back(id, false);
    return true;
  }
  const std::vector<Partition>& touched() const { return touched_; }
  void committed() { committed_ = true; }

 private:
  void touch(Partition p) {
    if (!touched_.empty() && touched_[last_] == p) return;
    for (size_t i = 0; i < touched_.size(); ++i) {
      if (touched_[i] == p) {
        last_ = i;
        return;
      }
    }
    set_.begin_batch(p);
    last_ = touched_.size();
    touched_.push_back(p);
  }
  CreatedOnly& set_;
  std::vector<Partition>& touched_;
  size_t last_ = 0;
  std::vector<std::pair<DeliveryId, bool>>& ops_;  // (id, added) in order
  bool committed_ = false;
};

// What one write() builds besides its WriteBatch, kept per writing thread and cleared, not
// freed, between writes: once grown, the delivery path allocates none of it (a batch of a few
// deliveries otherwise cost several allocations per delivery: docs/benchmarks.md "What
// persisting costs"). Buffers grown past kKeepBytes by a rare huge write are given back.
struct WriteScratch {
  static constexpr size_t kKeepBytes = size_t{1} << 20;
  std::string v;
  std::vector<uint64_t> expiring_events, expiring_deliveries;
  std::vector<bool> superseded, embedded;
  std::vector<std::pair<DeliveryId, size_t>> attempt_of, leased, settled;
  std::vector<DeliveryId> active_deletes, settle_ids;
  LeaseBatch leases;
  std::vector<Partition> touched;
  std::vector<std::pair<DeliveryId, bool>> created_ops;
  std::vector<std::pair<Partition, uint64_t>> floors;

  template <typename T>
  static void reset(std::vector<T>& x) {
    if (x.capacity() * sizeof(T) > kKeepBytes) std::vector<T>().swap(x);
    x.clear();
  }
  void clear() {
    if (v.capacity() > kKeepBytes) std::string().swap(v);
    v.clear();
    reset(expiring_events), reset(expiring_deliveries), reset(superseded), reset(embedded);
    reset(attempt_of), reset(leased), reset(settled), reset(active_deletes), reset(settle_ids);
    reset(touched), reset(created_ops), reset(floors);
    leases.clear(kKeepBytes);
  }
};

// check_space(): below this much free space it is measured at every write. The floor is 1/32
// of the filesystem, at most kSpaceFloorMax: room for RocksDB's flushes and the MANIFEST.
constexpr uint64_t kSpaceWatchBytes = uint64_t{256} << 20;
constexpr uint64_t kSpaceFloorMax = uint64_t{64} << 20;

}  // namespace

// ---- durability -------------------------------------------------------------------------------

void RocksStore::advance_durable(uint64_t seq) {
  uint64_t cur = durable_.load(std::memory_order_relaxed);
  while (cur < seq && !durable_.compare_exchange_weak(cur, seq, std::memory_order_seq_cst)) {
  }
  if (waiters_.load(std::memory_order_seq_cst) > 0) {
    { std::lock_guard lk(durable_mu_); }
    durable_cv_.notify_all();
  }
}

bool RocksStore::wait_durable(uint64_t seq, Duration timeout) {
  if (durable_seq() >= seq) return true;
  std::unique_lock lk(durable_mu_);
  waiters_.fetch_add(1, std::memory_order_seq_cst);
  bool ok = durable_cv_.wait_for(lk, timeout, [&] { return durable_seq() >= seq; });
  waiters_.fetch_sub(1, std::memory_order_seq_cst);
  return ok;
}

// Group commit across shards (kInterval): writers only mark the WAL dirty; this thread fsyncs
// it at most once per interval and then publishes the RocksDB sequence read *before* the sync.
// Every write published at or below that sequence was already in the WAL file (RocksDB
// publishes a sequence only after its WAL write), so the fsync covers it.
void RocksStore::sync_loop() {
  using SteadyClock = std::chrono::steady_clock;
  const auto interval = std::chrono::duration_cast<SteadyClock::duration>(options_.sync_interval);
  auto last_sync = SteadyClock::now() - interval;
  bool sync_refused = false;  // the last sync met a read-only filesystem
  std::unique_lock lk(sync_mu_);
  while (!stop_) {
    sync_cv_.wait_for(lk, interval, [&] { return stop_ || dirty_.load(); });
    if (stop_) break;
    if (!dirty_.load()) continue;
    const auto earliest = last_sync + interval;
    if (SteadyClock::now() < earliest) {
      sync_cv_.wait_until(lk, earliest, [&] { return stop_; });
      if (stop_) break;
    }
    if (failed_.load()) break;  // nothing becomes durable any more: nothing to sync
    dirty_.store(false);
    lk.unlock();
    last_sync = SteadyClock::now();
    // Lease log segments whose leases were all resolved by writes already in the WAL (resolve()
    // runs after the write): this sync makes those writes durable, then the segments can go.
    const std::vector<uint64_t> resolved = leases_->resolved_segments();
    const uint64_t seq = db_->GetLatestSequenceNumber();
    // A read-only filesystem refuses the sync before anything is written back: nothing is lost,
    // the same writes are synced once it is writable again (the logs keep them dirty). Asked
    // first, so that RocksDB's own WAL sync does not meet it. Any other failure is a failed
    // sync (fsyncgate): the store fails for good.
    Result<void> logs = probe_write_access();
    // The logs before the WAL: every batch up to seq appended its payloads before its WAL write
    // (its leases follow it, and need not be durable with it).
    if (logs.ok()) logs = sync_logs();
    // RocksDB's WAL writer saw a write error and RocksDB has not resumed yet (the next write
    // resumes it): the WAL is not synced now; what it holds becomes durable by the resume's
    // flush or by the next sync after it.
    if (logs.ok() && rocks_write_failed_.load()) {
      dirty_.store(true);
      last_sync = SteadyClock::now() + std::chrono::milliseconds(100);
      lk.lock();
      continue;
    }
    if (!logs.ok() && logs.error().sys_errno == EROFS) {
      static_cast<void>(disk_error(EROFS, "a sync of the data dir was refused"));
      sync_refused = true;
      dirty_.store(true);
      last_sync = SteadyClock::now() + std::chrono::milliseconds(100);  // ask again in 100 ms
      lk.lock();
      continue;
    }
    if (!logs.ok()) {
      fail("an fsync of the payload or lease log failed", logs.error().sys_errno);
      lk.lock();
      break;
    }
    rocksdb::Status s = db_->SyncWAL();
    if (!s.ok()) {
      fail("an fsync of the RocksDB WAL failed", EIO);
      lk.lock();
      break;
    }
    // A removal that fails leaves the files for the next sync (open removes them at the latest).
    static_cast<void>(leases_->remove(resolved));
    if (sync_refused) {
      sync_refused = false;
      uint8_t full = static_cast<uint8_t>(DiskHealth::kFull);
      disk_.compare_exchange_strong(full, static_cast<uint8_t>(DiskHealth::kOk));
    }
    advance_durable(seq);
    if (options_.on_durable) options_.on_durable(seq);
    lk.lock();
  }
}

Result<uint64_t> RocksStore::commit(rocksdb::WriteBatch& batch, bool force_sync, bool probed) {
  if (failed_.load(std::memory_order_relaxed))
    return make_error(Errc::kUnavailable,
                      "the store stopped accepting writes after a failed sync: restart the daemon",
                      nullptr, "storage_failed");
  if (!probed) {
    if (auto r = probe_write_access(); !r) return r.error();
    if (auto r = check_space(batch.GetDataSize()); !r) return r.error();
  }
  rocksdb::WriteOptions wo;
  wo.sync = options_.sync == SyncPolicy::kAlways || force_sync;
  if (wo.sync) {
    if (auto r = sync_logs(); !r) {
      if (r.error().sys_errno == EROFS) return disk_error(EROFS, "the data dir is read-only");
      fail("an fsync of the payload or lease log failed", r.error().sys_errno);
      return disk_error(r.error().sys_errno, "a sync failed");
    }
  }
  if (disk_.load(std::memory_order_acquire) == static_cast<uint8_t>(DiskHealth::kFull)) {
    // After a NoSpace error RocksDB refuses writes until it resumes (it flushes the memtables
    // and starts a new WAL, so a torn WAL tail is never written after). Not stopped: at once OK.
    if (rocksdb::Status r = db_->Resume(); !r.ok()) return db_write_error(r);
    rocks_write_failed_.store(false);
  }
  rocksdb::Status s = db_->Write(wo, &batch);
  if (!s.ok()) {
    if (s.IsNoSpace()) rocks_write_failed_.store(true);
    return db_write_error(s);
  }
  if (disk_.load(std::memory_order_relaxed) != static_cast<uint8_t>(DiskHealth::kOk)) {
    uint8_t full = static_cast<uint8_t>(DiskHealth::kFull);
    disk_.compare_exchange_strong(full, static_cast<uint8_t>(DiskHealth::kOk));
  }
  // An upper bound of this batch's own sequence: waiting for it is always safe.
  const uint64_t seq = db_->GetLatestSequenceNumber();
  switch (options_.sync) {
    case SyncPolicy::kAlways:  // every write of this store is synced: all published ones are
    case SyncPolicy::kNone:    // documented unsafe: "durable" means "written"
      advance_durable(seq);
      break;
    case SyncPolicy::kInterval:
      if (!dirty_.exchange(true)) sync_cv_.notify_one();
      break;
  }
  return seq;
}

Result<void> RocksStore::sync_logs() {
  if (auto r = payloads_->sync(); !r) return r;
  return leases_->sync();
}

Result<void> RocksStore::probe_write_access() {
  static constexpr char kByte = 'p';
  while (::pwrite(probe_fd_, &kByte, 1, 0) != 1) {
    if (errno == EINTR) continue;
    return disk_error(errno, "the data dir does not take writes");
  }
  return ok();
}

Result<void> RocksStore::check_space(uint64_t bytes) {
  const int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::chrono::steady_clock::now().time_since_epoch())
                             .count();
  uint64_t free = free_bytes_.load(std::memory_order_relaxed);
  if (free < kSpaceWatchBytes ||
      now_ms - free_checked_ms_.load(std::memory_order_relaxed) >= 1000) {
    struct statvfs st {};
    if (::statvfs(options_.path.c_str(), &st) == 0) {
      free = static_cast<uint64_t>(st.f_bavail) * st.f_frsize;
      const uint64_t size = static_cast<uint64_t>(st.f_blocks) * st.f_frsize;
      free_bytes_.store(free, std::memory_order_relaxed);
      free_floor_bytes_.store(std::min(kSpaceFloorMax, size / 32), std::memory_order_relaxed);
    }
    free_checked_ms_.store(now_ms, std::memory_order_relaxed);
  }
  if (free < free_floor_bytes_.load(std::memory_order_relaxed) + bytes)
    return disk_error(ENOSPC, "the data dir is nearly full");
  return ok();
}

Error RocksStore::disk_error(int err, const char* what) {
  if (disk_refuses(err)) {
    uint8_t was = static_cast<uint8_t>(DiskHealth::kOk);
    if (disk_.compare_exchange_strong(was, static_cast<uint8_t>(DiskHealth::kFull)) &&
        db_ != nullptr) {  // open() says it in its own error
      log::warn("storage_full",
                {{"error", what}, {"errno", std::strerror(err)}, {"path", options_.path}},
                "storage: {} ({}): the data dir {} refuses writes; intake answers "
                "503 storage_full until it takes them again",
                what, std::strerror(err), options_.path.c_str());
    }
    Error e = make_error(Errc::kUnavailable,
                         err == EROFS ? "the data dir is read-only: retry once it is writable"
                                      : "the data dir is full: retry once space is freed",
                         nullptr, "storage_full");
    e.sys_errno = err;
    return e;
  }
  fail(what, err);
  Error e = make_error(Errc::kUnavailable,
                       "the store stopped accepting writes after an I/O error: restart the daemon",
                       nullptr, "storage_failed");
  e.sys_errno = err;
  return e;
}

Error RocksStore::db_write_error(const rocksdb::Status& s) {
  if (s.IsNoSpace() || s.IsBusy()) return disk_error(ENOSPC, "RocksDB is out of space");
  fail("RocksDB stopped on a write error", EIO);
  Error e = to_error(s);
  e.code = Errc::kUnavailable;
  e.message = "the store stopped accepting writes after an I/O error: restart the daemon";
  e.reason = "storage_failed";
  return e;
}

void RocksStore::fail(const char* what, int err) {
  disk_.store(static_cast<uint8_t>(DiskHealth::kFailed), std::memory_order_release);
  if (failed_.exchange(true)) return;
  log::error("storage_failed",
             {{"error", what},
              {"errno", err != 0 ? std::strerror(err) : "no errno"},
              {"path", options_.path}},
             "storage: {} ({}) in {}: what it covered may be lost, so nothing it "
             "covered is acknowledged and nothing more is written",
             what, err != 0 ? std::strerror(err) : "no errno", options_.path.c_str());
  if (options_.on_failed) options_.on_failed(what, err);
}

bool RocksStore::retry_disk() {
  if (failed_.load()) return false;
  if (disk_health() == DiskHealth::kOk) return true;
  // A WAL record of a few bytes: it needs space, unlike the probe's rewrite in place.
  rocksdb::WriteBatch batch;
  batch.Delete(cf(kCfMeta), Slice(kProbeFile));
  return commit(batch, false).ok();
}

int64_t RocksStore::stamp_ms() {
  // Monotone within the process so that run_retention's per-partition progress stays valid
  // if the wall clock steps back.
  int64_t now = std::max<int64_t>(0, clock_->wall_now().ms());
  int64_t prev = last_stamp_ms_.load(std::memory_order_relaxed);
  while (now > prev && !last_stamp_ms_.compare_exchange_weak(prev, now)) {
  }
  return std::max(now, prev);
}

// ---- writes -----------------------------------------------------------------------------------

// The owning shard looks the keys up before intake (race-free: one shard per partition).
// This is the second line (R12.5: never a silent overwrite): an idempotency key that already
// names another event refuses the whole batch. One MultiGet; misses are answered by the Bloom
// filters.
Result<void> RocksStore::check_new_event_keys(const std::vector<Event>& events,
                                              std::vector<bool>& exists) {
  std::vector<EventKeyRef> refs;
  refs.reserve(events.size());
  for (const Event& e : events) refs.push_back({e.tenant, e.id});
  auto found = find_event_keys(refs);
  if (!found) return found.error();
  exists.assign(events.size(), false);
  for (size_t i = 0; i < events.size(); ++i) {
    if (!(*found)[i]) continue;
    exists[i] = true;
    if ((*found)[i]->seq != events[i].seq)
      return make_error(Errc::kConflict, "an event with this id already exists for the tenant",
                        "id", "conflict");
  }
  return ok();
}

Result<uint64_t> RocksStore::write(const Mutations& m) {
  no_perf_counters();
  if (m.empty()) return db_->GetLatestSequenceNumber();
  {
    uint64_t bytes = 256 * (m.deliveries.size() + m.attempts.size() + m.events.size() +
                            m.endpoints.size() + m.tenants.size() + m.notifications.size());
    for (const Event& e : m.events) bytes += e.payload.size();
    if (auto r = check_space(bytes); !r) return r.error();
  }
  // One batch per writing thread, cleared and reused: its buffer keeps its capacity, so a turn
  // neither allocates it nor grows it by doubling (a fresh batch per write was ~0.8 % of a
  // delivery window's CPU). A buffer grown past 4 MiB by a rare huge turn (a killed backlog)
  // is given back when the write returns instead of staying with the thread. write() never
  // nests.
  thread_local rocksdb::WriteBatch reused;
  struct GiveBackHuge {
    rocksdb::WriteBatch& b;
    ~GiveBackHuge() {
      if (b.Data().capacity() > (size_t{4} << 20)) b = rocksdb::WriteBatch();
    }
  } give_back{reused};
  rocksdb::WriteBatch& batch = reused;
  batch.Clear();
  thread_local WriteScratch scratch;  // write() never nests on a thread
  scratch.clear();
  std::string& v = scratch.v;
  int64_t stamp = -1;
  auto get_stamp = [&] {
    if (stamp < 0) stamp = stamp_ms();
    return static_cast<uint64_t>(stamp);
  };

  // Ids that get an expiry entry (R10.1), grouped per partition at the end of the batch.
  std::vector<uint64_t>& expiring_events = scratch.expiring_events;
  std::vector<uint64_t>& expiring_deliveries = scratch.expiring_deliveries;
  auto put_expiry_groups = [&](std::vector<uint64_t>& ids, ExpiryKind kind) {
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    for (size_t lo = 0, hi = 0; lo < ids.size(); lo = hi) {
      const Partition p = id_partition(ids[lo]);
      while (hi < ids.size() && id_partition(ids[hi]) == p) ++hi;
      v.clear();
      encode_id_group(ids.data() + lo, hi - lo, v);
      const uint64_t group = next_expiry_group_.fetch_add(1, std::memory_order_relaxed);
      batch.Put(cf(kCfExpiry), sl(expiry_key(p, get_stamp(), kind, group)), sl(v));
    }
  };

  // SPEC R12.5: the idempotency key is derived here from each new event, in the same batch.
  if (!m.events.empty()) {
    std::vector<bool> exists(m.events.size(), false);
    if (!m.event_keys_checked) {
      if (auto r = check_new_event_keys(m.events, exists); !r) return r.error();
    }
    // The payloads go to the payload log (one pwritev) before the batch that names them.
    std::vector<PayloadRef> refs;
    {
      std::vector<std::string_view> bodies;
      bodies.reserve(m.events.size());
      for (const Event& e : m.events) bodies.emplace_back(e.payload);
      if (auto r = payloads_->append(bodies, get_stamp(), refs); !r)
        return disk_error(r.error().sys_errno, r.error().message);
    }
    std::vector<EventSeq> fanout;  // event of each new delivery, to count them per event
    for (const auto& dp : m.deliveries) {
      if (dp.is_new) fanout.push_back(dp.delivery.event);
    }
    std::sort(fanout.begin(), fanout.end());
    for (size_t ei = 0; ei < m.events.size(); ++ei) {
      const Event& e = m.events[ei];
      const Partition p = partition_of(e.tenant);
      if (id_partition(e.seq) != p)
        return make_error(Errc::kInvalidArgument, "event seq is not in its tenant's partition",
                          "seq");
      Event copy_hash_only;  // only used when the caller left payload_hash unset
      const Event* ev = &e;
      if (e.payload_hash == 0) {
        copy_hash_only = e;
        copy_hash_only.payload_hash = payload_hash(e.payload);
        ev = &copy_hash_only;
      }
      v.clear();
      encode_event_logged(*ev, refs[ei], v);
      batch.Put(cf(kCfEvents), sl(id_key(e.seq)), sl(v));
      if (exists[ei]) continue;  // a rewrite of the same event: keep its key and its count
      auto [lo, hi] = std::equal_range(fanout.begin(), fanout.end(), e.seq);
      v.clear();
      encode_event_key(
          {e.seq, ev->payload_hash, static_cast<uint32_t>(hi - lo), message_id_bits(e.message_id)},
          v);
      batch.Put(cf(kCfIdempotency), sl(idempotency_key(e.tenant, e.id)), sl(v));
      expiring_events.push_back(e.seq);
    }
  }

  // A delivery written twice in one batch (created, then leased in the same turn) is stored
  // once, in its last state; its index entries come from the put that created it. Only a
  // batch that creates deliveries is looked at: elsewhere a repeat is rare, and harmless (the
  // batch applies in order, the last put wins), so the hot delivery path builds no map.
  std::vector<bool>& superseded = scratch.superseded;
  const bool creates = std::any_of(m.deliveries.begin(), m.deliveries.end(),
                                   [](const DeliveryPut& dp) { return dp.is_new; });
  if (creates && m.deliveries.size() > 1) {
    std::unordered_map<DeliveryId, size_t> last;
    last.reserve(m.deliveries.size());
    for (size_t i = 0; i < m.deliveries.size(); ++i) last[m.deliveries[i].delivery.id] = i;
    if (last.size() != m.deliveries.size()) {
      superseded.assign(m.deliveries.size(), false);
      // A rewrite is never skipped: it moves the delivery between the archive and the active
      // records, which a later put of the same batch (a lease: the lease log) does not.
      for (size_t i = 0; i < m.deliveries.size(); ++i)
        superseded[i] = last[m.deliveries[i].delivery.id] != i && !m.deliveries[i].rewrite;
    }
  }
  // The attempt that ended a delivery goes into its archive record (encode_archived) when the
  // batch holds exactly one attempt of it: one memtable insert less per delivered attempt.
  // (delivery, index of its attempt) sorted by delivery; kSeveral: several in this batch.
  std::vector<std::pair<DeliveryId, size_t>>& attempt_of = scratch.attempt_of;
  constexpr size_t kSeveral = ~size_t{0};
  std::vector<bool>& embedded = scratch.embedded;
  if (!m.attempts.empty() &&
      std::any_of(m.deliveries.begin(), m.deliveries.end(),
                  [](const DeliveryPut& dp) { return is_terminal(dp.delivery.status); })) {
    attempt_of.reserve(m.attempts.size());
    for (size_t i = 0; i < m.attempts.size(); ++i)
      attempt_of.emplace_back(m.attempts[i].delivery, i);
    std::sort(attempt_of.begin(), attempt_of.end());
    for (size_t i = 0; i + 1 < attempt_of.size(); ++i) {
      if (attempt_of[i].first != attempt_of[i + 1].first) continue;
      attempt_of[i].second = attempt_of[i + 1].second = kSeveral;
    }
    embedded.assign(m.attempts.size(), false);
  }
  auto attempt_index = [&](DeliveryId id) {
    auto it = std::lower_bound(attempt_of.begin(), attempt_of.end(), id,
                               [](const auto& e, DeliveryId x) { return e.first < x; });
    return it != attempt_of.end() && it->first == id ? it->second : kSeveral;
  };
  // A lease of a delivery already stored goes to the lease log (lease_log.h), except under
  // `always`, where the lease must be durable before the send and the batch's own fsync makes
  // it so; every other put settles the delivery's earlier lease once this batch is in the WAL.
  // Both with the put's index in the batch.
  const bool log_leases = options_.sync != SyncPolicy::kAlways;
  LeaseBatch& leases = scratch.leases;
  std::vector<std::pair<DeliveryId, size_t>>& leased = scratch.leased;
  std::vector<std::pair<DeliveryId, size_t>>& settled = scratch.settled;
  std::vector<DeliveryId>& active_deletes = scratch.active_deletes;  // added last, in key order
  // The created-only set (created_only.h) changes with this batch; undone if the batch is not
  // committed, so that the set never runs ahead of what is in the WAL.
  CreatedOnlyBatch created{created_only_, scratch.touched, scratch.created_ops};
  for (size_t di = 0; di < m.deliveries.size(); ++di) {
    const DeliveryPut& dp = m.deliveries[di];
    const Delivery& d = dp.delivery;
    const auto key = id_key(d.id);
    if (dp.is_new) {
      // The created record: written once, with the fan-out that made the delivery. Until
      // another state of it is stored, it is the delivery's state (a lease of it goes to the
      // lease log) and deliveries_active holds nothing of it.
      v.clear();
      encode_delivery(d, v);
      batch.Put(cf(kCfCreated), sl(key), sl(v));
      created.add(d.id);
    }
    if (superseded.empty() || !superseded[di]) {
      v.clear();
      if (is_terminal(d.status)) {
        if (const size_t a = attempt_index(d.id); a != kSeveral) {
          encode_archived(d, m.attempts[a], v);
          embedded[a] = true;
        } else {
          encode_delivery(d, v);
        }
        // A created-only delivery has nothing in deliveries_active to delete.
        if (!created.take(d.id)) active_deletes.push_back(d.id);
        batch.Put(cf(kCfArchive), sl(key), sl(v));
        expiring_deliveries.push_back(d.id);
        settled.emplace_back(d.id, di);
      } else if (log_leases && d.status == DeliveryStatus::kInFlight) {
        encode_delivery(d, v);
        leases.add(d.id, v);
        leased.emplace_back(d.id, di);
      } else if (!dp.is_new) {
        encode_delivery(d, v);
        batch.Put(cf(kCfActive), sl(key), sl(v));
        created.take(d.id);
        settled.emplace_back(d.id, di);
      } else if (d.status != DeliveryStatus::kPending) {  // created in another state
        encode_delivery(d, v);
        batch.Put(cf(kCfActive), sl(key), sl(v));
        created.take(d.id);
      }
    }
    // A resend reopened an ended delivery: it leaves the archive (the batch holds its
    // latest attempt again, written to the attempts CF, so an embedded one is not lost). Its
    // old expiry entry finds no archive record (skipped) — or, when it ended again before that
    // entry's time, the new one, which then goes that early (docs/operations.md).
    if (dp.rewrite && !is_terminal(d.status)) batch.Delete(cf(kCfArchive), sl(key));
    if (dp.is_new) {
      uint64_t th = dp.tenant_hash;
      if (th == 0) {  // derive it from the event when it is in this batch
        for (const Event& e : m.events) {
          if (e.seq == d.event) th = tenant_hash(e.tenant);
        }
      }
      if (th == 0 || partition_of_hash(th) != id_partition(d.id))
        return make_error(Errc::kInvalidArgument,
                          "new delivery without its tenant hash, or outside its partition",
                          "tenant_hash");
      batch.Put(cf(kCfTenantIndex), sl(tenant_index_key(th, d.id)), Slice());
      batch.Put(cf(kCfEndpointIndex), sl(endpoint_index_key(th, d.endpoint, d.id)), Slice());
      batch.Put(cf(kCfEventDeliveries), sl(event_delivery_key(d.event, d.id)), Slice());
    }
  }

  for (size_t ai = 0; ai < m.attempts.size(); ++ai) {
    if (!embedded.empty() && embedded[ai]) continue;
    const Attempt& a = m.attempts[ai];
    v.clear();
    encode_attempt(a, v);
    batch.Put(cf(kCfAttempts), sl(attempt_key(a.delivery, a.number)), sl(v));
  }
  for (const Endpoint& e : m.endpoints) {
    v.clear();
    encode_endpoint(e, v);
    batch.Put(cf(kCfEndpoints), sl(id_key(e.id)), sl(v));
  }
  for (EndpointId id : m.endpoint_deletes) {
    batch.Delete(cf(kCfEndpoints), sl(id_key(id)));
    // Ids are never reused, also when the newest record of a partition is deleted.
    batch.Put(cf(kCfMeta), sl(hwm_key(id_partition(id), id)), Slice());
  }
  for (const Tenant& t : m.tenants) {
    v.clear();
    encode_tenant(t, v);
    batch.Put(cf(kCfTenants), sl(tenant_key(t.name)), sl(v));
  }
  for (const Notification& n : m.notifications) {
    const uint64_t th = tenant_hash(n.tenant);
    v.clear();
    encode_notification(n, v);
    batch.Put(cf(kCfNotifications), sl(notification_key(th, n.seq)), sl(v));
    std::string thv;
    put_fixed64(thv, th);
    if (options_.notification_outbox) batch.Put(cf(kCfMeta), sl(outbox_key(n.seq)), sl(thv));
    if (options_.mail_outbox && !n.owner_email.empty())  // the owner's e-mail (SPEC R8.4)
      batch.Put(cf(kCfMeta), sl(mail_outbox_key(n.seq)), sl(thv));
    batch.Put(cf(kCfExpiry),
              sl(expiry_key(partition_of_hash(th), get_stamp(), ExpiryKind::kNotification, n.seq)),
              sl(thv));
  }
  // The active records of the deliveries this batch ended, deleted in key order: each tombstone
  // lands next to the previous one in the memtable (its insert hint), where in completion order
  // each insert searched afresh among records written long before (cold in the cache). A
  // delivery's tombstone always comes after its own puts in this batch, as the batch applies
  // in order.
  std::sort(active_deletes.begin(), active_deletes.end());
  for (DeliveryId id : active_deletes) batch.Delete(cf(kCfActive), sl(id_key(id)));
  put_expiry_groups(expiring_events, ExpiryKind::kEventGroup);
  put_expiry_groups(expiring_deliveries, ExpiryKind::kDeliveryGroup);
  // Per partition this batch changed: the oldest created-only deliveries of one that spans too
  // far go into deliveries_active (their created record is their state), then its floor.
  std::vector<std::pair<Partition, uint64_t>>& floors = scratch.floors;
  for (Partition p : created.touched()) {
    const std::vector<DeliveryId> old =
        created_only_.oldest_beyond(p, options_.created_span_max, kSpillPerBatch);
    if (!old.empty()) {
      std::vector<FixedKey<kIdKeyBytes>> keys(old.size());
      std::vector<Slice> slices(old.size());
      for (size_t i = 0; i < old.size(); ++i) keys[i] = id_key(old[i]), slices[i] = sl(keys[i]);
      std::vector<rocksdb::PinnableSlice> values(old.size());
      std::vector<rocksdb::Status> st(old.size());
      db_->MultiGet(rocksdb::ReadOptions(), cf(kCfCreated), old.size(), slices.data(),
                    values.data(), st.data());
      for (size_t i = 0; i < old.size(); ++i) {
        if (!st[i].ok()) continue;  // kept in the set: recovery still scans from below it
        batch.Put(cf(kCfActive), slices[i], values[i]);
        created.take(old[i]);
        ++created_spilled_;
      }
    }
    if (const uint64_t f = created_only_.floor_due(p, kFloorStep); f != 0) {
      std::string fv;
      put_fixed64(fv, f);
      batch.Put(cf(kCfMeta), sl(created_floor_key(p)), sl(fv));
      floors.emplace_back(p, f);
    }
  }
  // A batch with events wrote the payload log just now: a read-only disk refused that already.
  auto seq = commit(batch, false, /*probed=*/!m.events.empty());
  if (!seq) return seq;
  created.committed();
  for (const auto& [p, f] : floors) created_only_.floor_written(p, f);
  // The leases are appended after the batch they belong to is written and before write()
  // returns, so before any of their requests is on the wire: a lease the log holds always
  // belongs to a committed batch (a crash in between loses a lease whose request was never
  // sent; the delivery is then simply still pending).
  // If the lease log refuses (a full or read-only disk), the batch is in the WAL and its sends
  // must not go: the caller keeps the batch and writes it again, which rewrites the same
  // records (a write is idempotent) and appends the leases then.
  if (auto r = leases_->append(leases); !r)
    return disk_error(r.error().sys_errno, r.error().message);
  settle_leases(leased, settled, scratch.settle_ids);
  return seq;
}

// After a write: the deliveries whose last put in the batch was not a lease have their earlier
// lease settled. `leased` and `settled` hold (delivery, index of the put in the batch).
void RocksStore::settle_leases(std::vector<std::pair<DeliveryId, size_t>>& leased,
                               const std::vector<std::pair<DeliveryId, size_t>>& settled,
                               std::vector<DeliveryId>& ids) {
  if (!settled.empty() && leases_->any_live()) {
    ids.clear();
    std::sort(leased.begin(), leased.end());
    for (const auto& [id, at] : settled) {
      // A lease put after this one in the same batch stays live.
      auto it = std::lower_bound(leased.begin(), leased.end(), std::make_pair(id, at));
      if (it != leased.end() && it->first == id) continue;
      ids.push_back(id);
    }
    leases_->resolve(ids.data(), ids.size());
  }
  // Under `none` (which promises nothing) segments whose leases are all settled go now; under
  // `interval` the sync thread removes them after a sync; `always` logs no leases.
  if (options_.sync == SyncPolicy::kNone && leases_->has_resolved_segments())
    static_cast<void>(leases_->remove(leases_->resolved_segments()));
}

}  // namespace ringcast::storage
