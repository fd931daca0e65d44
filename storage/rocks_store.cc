#include "storage/rocks_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <rocksdb/cache.h>
#include <rocksdb/db.h>
#include <rocksdb/listener.h>
#include <rocksdb/options.h>
#include <rocksdb/perf_level.h>
#include <rocksdb/write_batch.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "log/log.h"
#include "storage/codec.h"
#include "storage/lease_log.h"
#include "storage/payload_log.h"
#include "storage/rocks_options.h"
#include "storage/status.h"

namespace ringcast::storage {
namespace {

using rocksdb::Slice;

// RocksDB counts perf_context statistics on every operation by default (kEnableCount): a
// thread-local access per key comparison, through __tls_get_addr since RocksDB is a shared
// library. Nothing reads them here, so each thread that drives the store turns them off once.
void no_perf_counters() {
  thread_local const bool done = [] {
    rocksdb::SetPerfLevel(rocksdb::PerfLevel::kDisable);
    return true;
  }();
  (void)done;
}

Slice sl(std::string_view s) {
  return Slice(s.data(), s.size());
}
template <size_t N>
Slice sl(const FixedKey<N>& k) {
  return Slice(k.data, N);
}
std::string_view sv(const Slice& s) {
  return {s.data(), s.size()};
}

// The smallest key greater than every key with this prefix; empty: none (all 0xff).
std::string prefix_successor(std::string p) {
  while (!p.empty()) {
    auto& c = reinterpret_cast<unsigned char&>(p.back());
    if (c != 0xff) {
      ++c;
      return p;
    }
    p.pop_back();
  }
  return p;
}

std::string partition_prefix(Partition p) {
  std::string k;
  put_be16(k, p);
  return k;
}

bool starts_with(const Slice& s, std::string_view prefix) {
  return s.size() >= prefix.size() && std::memcmp(s.data(), prefix.data(), prefix.size()) == 0;
}

class SystemClock final : public Clock {
 public:
  MonoTime mono_now() override {
    return MonoTime::from_ns(
        std::chrono::duration_cast<Duration>(std::chrono::steady_clock::now().time_since_epoch())
            .count());
  }
  WallTime wall_now() override {
    return WallTime::from_ns(
        std::chrono::duration_cast<Duration>(std::chrono::system_clock::now().time_since_epoch())
            .count());
  }
};

// Syncs the payload log before RocksDB writes a memtable to an SST file, so that a reference
// that becomes durable that way never points at bytes that are not (payload_log.h). A sync that
// fails there fails the store (`on_sync_error`): the flush cannot be stopped from here.
// Also keeps RocksDB from resuming on its own after a NoSpace error: its SstFileManager waits
// for free space of the largest write buffer (64 MiB here: more than a small disk ever has)
// and polls every 5 s. The store resumes itself on the next write instead (RocksStore::commit).
class StoreListener final : public rocksdb::EventListener {
 public:
  StoreListener(PayloadLog* log, std::function<void(int err)> on_sync_error)
      : log_(log), on_sync_error_(std::move(on_sync_error)) {}
  void OnFlushBegin(rocksdb::DB*, const rocksdb::FlushJobInfo&) override {
    if (auto r = log_->sync(); !r) on_sync_error_(r.error().sys_errno);
  }
  void OnErrorRecoveryBegin(rocksdb::BackgroundErrorReason, rocksdb::Status,
                            bool* auto_recovery) override {
    *auto_recovery = false;
  }

 private:
  PayloadLog* log_;
  std::function<void(int err)> on_sync_error_;
};

bool disk_refuses(int err) {
  return err == ENOSPC || err == EDQUOT || err == EROFS;
}

constexpr const char* kProbeFile = "/write-probe";

// check_space(): below this much free space it is measured at every write. The floor is 1/32
// of the filesystem, at most kSpaceFloorMax: room for RocksDB's flushes and the MANIFEST.
constexpr uint64_t kSpaceWatchBytes = uint64_t{256} << 20;
constexpr uint64_t kSpaceFloorMax = uint64_t{64} << 20;

// An error of open on a disk that is full or read-only says so (serve prints it and exits 1).
Error at_open(Error e) {
  if (e.sys_errno == ENOSPC || e.sys_errno == EDQUOT)
    e.message = "the data dir is full: retry once space is freed";
  if (e.sys_errno == EROFS) e.message = "the data dir is read-only: retry once it is writable";
  return e;
}

constexpr size_t kRecoveryChunk = 4096;
constexpr size_t kRetentionChunk = 512;
constexpr size_t kFetchChunk = 64;

}  // namespace

// ---- lifecycle --------------------------------------------------------------------------------

RocksStore::RocksStore(const StoreOptions& options) : options_(options) {
  if (options_.clock) {
    clock_ = options_.clock;
  } else {
    own_clock_ = std::make_unique<SystemClock>();
    clock_ = own_clock_.get();
  }
  retention_done_ms_.assign(kPartitions, 0);
}

Result<std::unique_ptr<RocksStore>> RocksStore::open(const StoreOptions& options) {
  if (options.path.empty())
    return make_error(Errc::kInvalidArgument, "store path is empty", "path");
  if (options.sync_interval <= Duration::zero())
    return make_error(Errc::kInvalidArgument, "sync interval must be positive", "sync_interval");
  if (options.retention <= Duration::zero())
    return make_error(Errc::kInvalidArgument, "retention must be positive", "retention");
  std::unique_ptr<RocksStore> s(new RocksStore(options));
  if (auto r = s->open_db(); !r) return r.error();
  return s;
}

Result<void> RocksStore::open_db() {
  cache_ = rocksdb::NewLRUCache(options_.block_cache_bytes);
  // The payload log first: the flush listener needs it from the first flush on (a restart
  // after a crash may flush while it replays the WAL).
  if (options_.create_if_missing && ::mkdir(options_.path.c_str(), 0700) != 0 && errno != EEXIST)
    return io_error("cannot create the store directory");
  auto log = PayloadLog::open(options_.path + "/payloads", options_.payload_segment_bytes);
  if (!log) return at_open(log.error());
  payloads_ = std::move(*log);
  auto leases = LeaseLog::open(options_.path + "/leases", options_.lease_segment_bytes);
  if (!leases) return at_open(leases.error());
  leases_ = std::move(*leases);
  probe_fd_ = ::open((options_.path + kProbeFile).c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (probe_fd_ < 0) return at_open(io_error("cannot create the store's write probe", errno));
  if (::pwrite(probe_fd_, "p", 1, 0) != 1)
    return at_open(io_error("cannot write the store's write probe", errno));
  // RocksDB writes at open (a MANIFEST, the WAL): on a disk without room it would meet ENOSPC.
  if (auto r = check_space(0); !r) return at_open(r.error());
  flush_listener_ = std::make_shared<StoreListener>(
      payloads_.get(), [this](int err) { fail("a payload log fsync before a flush failed", err); });
  rocksdb::DBOptions dbo = db_options(options_);
  dbo.listeners.push_back(flush_listener_);
  // Open the column families that exist, then create the missing ones in one call: RocksDB
  // rewrites and re-verifies its OPTIONS file per creation call, and 12 separate creations
  // made a fresh store's first open cost ~10x more (visible in every test).
  std::vector<std::string> existing;
  if (!rocksdb::DB::ListColumnFamilies(dbo, options_.path, &existing).ok()) existing = {"default"};
  std::vector<rocksdb::ColumnFamilyDescriptor> present, missing;
  std::vector<size_t> present_idx, missing_idx;
  for (size_t i = 0; i < kCfCount; ++i) {
    rocksdb::ColumnFamilyDescriptor d(std::string(kColumnFamilies[i]),
                                      column_family_options(static_cast<Cf>(i), options_, cache_));
    if (std::find(existing.begin(), existing.end(), d.name) != existing.end()) {
      present.push_back(std::move(d));
      present_idx.push_back(i);
    } else {
      missing.push_back(std::move(d));
      missing_idx.push_back(i);
    }
  }
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::Status s = rocksdb::DB::Open(dbo, options_.path, present, &handles, &db_);
  if (!s.ok()) {
    Error e = to_error(s);
    e.message = "cannot open the RocksDB store (path, permissions, or an unknown column family)";
    if (s.IsNoSpace()) e.message = "the data dir is full: retry once space is freed";
    if (s.ToString().find("Read-only file system") != std::string::npos)
      e.message = "the data dir is read-only: retry once it is writable";
    return e;
  }
  for (size_t j = 0; j < present_idx.size(); ++j) handles_[present_idx[j]] = handles[j];
  if (!missing.empty()) {
    handles.clear();
    s = db_->CreateColumnFamilies(missing, &handles);
    if (!s.ok()) return to_error(s);
    for (size_t j = 0; j < missing_idx.size(); ++j) handles_[missing_idx[j]] = handles[j];
  }

  // Before anything is answered from the recovered state (a resubmission's 200 is an
  // acknowledgement), it is made durable: a kill leaves the last writes in the page cache only,
  // and a power cut after this start must not take them (docs/durability.md, SPEC R12.5).
  if (auto r = sync_recovered(); !r) return at_open(r.error());

  std::string version;
  s = db_->Get(rocksdb::ReadOptions(), cf(kCfMeta), sl(kSchemaKey), &version);
  if (s.IsNotFound()) {
    rocksdb::WriteOptions wo;
    wo.sync = true;
    s = db_->Put(wo, cf(kCfMeta), sl(kSchemaKey), Slice(&kSchemaVersion, 1));
    if (!s.ok()) return to_error(s);
  } else if (!s.ok()) {
    return to_error(s);
  } else if (version == std::string_view(&kSchemaVersionBeforeMessageIds, 1)) {
    rocksdb::WriteOptions wo;  // upgrade in place: old records still decode (schema.h)
    wo.sync = true;
    s = db_->Put(wo, cf(kCfMeta), sl(kSchemaKey), Slice(&kSchemaVersion, 1));
    if (!s.ok()) return to_error(s);
  } else if (version != std::string_view(&kSchemaVersion, 1)) {
    return make_error(Errc::kCorruption, "the store has an unsupported schema version");
  }

  {
    // Segments of earlier runs hold events whose expiry stamps are at most the newest stamp in
    // the expiry index (or now, whichever is later: the clock may have stepped back).
    auto newest = newest_expiry_stamp();
    if (!newest) return newest.error();
    payloads_->raise_stamps(std::max<uint64_t>(*newest, static_cast<uint64_t>(stamp_ms())));
  }
  if (auto r = drop_torn_events(); !r) return r;
  if (auto r = apply_old_leases(); !r) return r;
  if (auto r = load_outbox(); !r) return r;
  durable_.store(db_->GetLatestSequenceNumber(), std::memory_order_release);
  next_expiry_group_.store(db_->GetLatestSequenceNumber() + 1, std::memory_order_relaxed);
  if (options_.sync == SyncPolicy::kInterval)
    sync_thread_ = std::thread([this] {
      ::pthread_setname_np(::pthread_self(), "rc-wal-sync");
      sync_loop();
    });
  return ok();
}

RocksStore::~RocksStore() {
  if (sync_thread_.joinable()) {
    {
      std::lock_guard lk(sync_mu_);
      stop_ = true;
    }
    sync_cv_.notify_all();
    sync_thread_.join();
  }
  if (db_) {
    if (options_.flush_on_close && !failed_.load() && !rocks_write_failed_.load()) {
      rocksdb::FlushOptions fo;
      fo.wait = true;
      std::vector<rocksdb::ColumnFamilyHandle*> all(handles_.begin(), handles_.end());
      db_->Flush(fo, all).PermitUncheckedError();  // best effort: the WAL has everything
    }
    uint64_t seq = db_->GetLatestSequenceNumber();
    // After a failed sync nothing is published: a later sync that succeeds proves nothing.
    if (options_.sync != SyncPolicy::kNone && !failed_.load() && !rocks_write_failed_.load() &&
        sync_logs() && db_->SyncWAL().ok())
      advance_durable(seq);
    for (auto* h : handles_) {
      if (h) db_->DestroyColumnFamilyHandle(h);
    }
    db_->Close().PermitUncheckedError();
    delete db_;
  }
  if (probe_fd_ >= 0) ::close(probe_fd_);
}

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
      log::warn(
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
  log::error(
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

Result<void> RocksStore::load_outbox() {
  if (auto r = load_outbox_entries('o', options_.notification_outbox, outbox_at_open_); !r)
    return r;
  return load_outbox_entries('m', options_.mail_outbox, mail_outbox_at_open_);
}

// The entries under meta key `prefix` ('o' the webhook's, 'm' the e-mail's), oldest first; with
// !keep (nobody sends them any more) they are deleted, as are those retention orphaned.
Result<void> RocksStore::load_outbox_entries(char prefix, bool keep,
                                             std::vector<Notification>& out) {
  rocksdb::WriteBatch gone;
  const char lo[1] = {prefix}, hi[1] = {static_cast<char>(prefix + 1)};
  Slice upper(hi, 1);
  rocksdb::ReadOptions ro;
  ro.iterate_upper_bound = &upper;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro, cf(kCfMeta)));
  for (it->Seek(Slice(lo, 1)); it->Valid(); it->Next()) {
    const Slice k = it->key();
    if (k.size() != kOutboxKeyBytes || it->value().size() != 8)
      return make_error(Errc::kCorruption, "outbox: bad entry");
    if (!keep) {  // nobody sends them any more
      gone.Delete(cf(kCfMeta), k);
      continue;
    }
    const uint64_t seq = get_be64(k.data() + 1);
    Reader r(sv(it->value()));
    const uint64_t th = r.fixed64();
    const auto nk = notification_key(th, seq);
    rocksdb::PinnableSlice v;
    auto s = db_->Get(rocksdb::ReadOptions(), cf(kCfNotifications), sl(nk), &v);
    if (s.IsNotFound()) {  // retention removed it
      gone.Delete(cf(kCfMeta), k);
      continue;
    }
    if (!s.ok()) return to_error(s);
    auto n = decode_notification(nk.view(), sv(v));
    if (!n) return n.error();
    out.push_back(std::move(*n));
  }
  if (!it->status().ok()) return to_error(it->status());
  if (gone.Count() > 0) {
    auto s = db_->Write(rocksdb::WriteOptions(), &gone);
    if (!s.ok()) return to_error(s);
  }
  return ok();
}

std::vector<Notification> RocksStore::take_outbox() {
  std::lock_guard lock(outbox_mu_);
  return std::exchange(outbox_at_open_, {});
}

// One meta key put (value) or deleted (nullptr), committed on its own.
Result<void> RocksStore::write_meta(std::string_view key, const std::string* value, bool sync) {
  rocksdb::WriteBatch batch;
  if (value != nullptr) {
    batch.Put(cf(kCfMeta), sl(key), sl(*value));
  } else {
    batch.Delete(cf(kCfMeta), sl(key));
  }
  auto r = commit(batch, sync);
  if (!r) return r.error();
  return ok();
}

Result<void> RocksStore::outbox_done(uint64_t notification_seq) {
  return write_meta(outbox_key(notification_seq).view(), nullptr, false);
}

Result<void> RocksStore::put_api_key(const ApiKey& key) {
  std::string v;
  encode_api_key(key, v);
  auto r = write_meta(api_key_key(key.id), &v, true);
  if (r) api_keys_version_.fetch_add(1);
  return r;
}

Result<void> RocksStore::delete_api_key(std::string_view id) {
  auto r = write_meta(api_key_key(id), nullptr, true);
  if (r) api_keys_version_.fetch_add(1);
  return r;
}

Result<std::string> RocksStore::node_secret(std::string_view name, std::string_view candidate) {
  // One process owns a RocksDB store: a mutex makes read-then-write a set-if-absent.
  static std::mutex mu;
  std::lock_guard lk(mu);
  const std::string key = node_secret_key(name);
  std::string value;
  const rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), cf(kCfMeta), key, &value);
  if (s.ok()) return value;
  if (!s.IsNotFound()) return to_error(s);
  value.assign(candidate);
  auto w = write_meta(key, &value, true);
  if (!w) return w.error();
  return value;
}

Result<void> RocksStore::put_portal_cutoff(std::string_view tenant, WallTime not_before) {
  std::string v;
  put_fixed64(v, static_cast<uint64_t>(not_before.ms()));
  auto r = write_meta(portal_cutoff_key(tenant), &v, true);
  if (r) api_keys_version_.fetch_add(1);
  return r;
}

Result<ApiKeySet> RocksStore::load_api_keys() {
  ApiKeySet set;
  set.version = api_keys_version_.load();
  const char lo[1] = {'k'}, hi[1] = {'l'};
  Slice upper(hi, 1);
  rocksdb::ReadOptions ro;
  ro.iterate_upper_bound = &upper;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro, cf(kCfMeta)));
  for (it->Seek(Slice(lo, 1)); it->Valid(); it->Next()) {
    auto k = decode_api_key(sv(it->key()).substr(1), sv(it->value()));
    if (!k) return k.error();
    set.keys.push_back(std::move(*k));
  }
  if (!it->status().ok()) return to_error(it->status());
  const char clo[1] = {'c'}, chi[1] = {'d'};
  Slice cupper(chi, 1);
  rocksdb::ReadOptions cro;
  cro.iterate_upper_bound = &cupper;
  std::unique_ptr<rocksdb::Iterator> c(db_->NewIterator(cro, cf(kCfMeta)));
  for (c->Seek(Slice(clo, 1)); c->Valid(); c->Next()) {
    const std::string_view v = sv(c->value());
    if (v.size() != 8) return make_error(Errc::kCorruption, "bad portal cutoff record");
    uint64_t ms = 0;
    for (int i = 7; i >= 0; --i) ms = (ms << 8) | static_cast<uint8_t>(v[static_cast<size_t>(i)]);
    set.portal_cutoffs.emplace_back(std::string(sv(c->key()).substr(1)),
                                    WallTime::from_ms(static_cast<int64_t>(ms)));
  }
  if (!c->status().ok()) return to_error(c->status());
  return set;
}

std::vector<Notification> RocksStore::take_mail_outbox() {
  std::lock_guard lock(outbox_mu_);
  return std::exchange(mail_outbox_at_open_, {});
}

Result<void> RocksStore::mail_outbox_done(uint64_t notification_seq) {
  return write_meta(mail_outbox_key(notification_seq).view(), nullptr, false);
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
  std::string v;
  v.reserve(512);
  int64_t stamp = -1;
  auto get_stamp = [&] {
    if (stamp < 0) stamp = stamp_ms();
    return static_cast<uint64_t>(stamp);
  };

  // Ids that get an expiry entry (R10.1), grouped per partition at the end of the batch.
  std::vector<uint64_t> expiring_events, expiring_deliveries;
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
      encode_event_key({e.seq, ev->payload_hash, static_cast<uint32_t>(hi - lo)}, v);
      batch.Put(cf(kCfIdempotency), sl(idempotency_key(e.tenant, e.id)), sl(v));
      expiring_events.push_back(e.seq);
    }
  }

  // A delivery written twice in one batch (created, then leased in the same turn) is stored
  // once, in its last state; its index entries come from the put that created it. Only a
  // batch that creates deliveries is looked at: elsewhere a repeat is rare, and harmless (the
  // batch applies in order, the last put wins), so the hot delivery path builds no map.
  std::vector<bool> superseded;
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
  std::unordered_set<DeliveryId> new_in_batch;  // only filled when some put is superseded
  // The attempt that ended a delivery goes into its archive record (encode_archived) when the
  // batch holds exactly one attempt of it: one memtable insert less per delivered attempt.
  // (delivery, index of its attempt) sorted by delivery; kSeveral: several in this batch.
  std::vector<std::pair<DeliveryId, size_t>> attempt_of;
  constexpr size_t kSeveral = ~size_t{0};
  std::vector<bool> embedded;
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
  LeaseBatch leases;
  std::vector<std::pair<DeliveryId, size_t>> leased, settled;
  std::vector<DeliveryId> active_deletes;  // added last, in key order (see below)
  for (size_t di = 0; di < m.deliveries.size(); ++di) {
    const DeliveryPut& dp = m.deliveries[di];
    const Delivery& d = dp.delivery;
    const auto key = id_key(d.id);
    if (!superseded.empty() && superseded[di]) {
      if (dp.is_new) new_in_batch.insert(d.id);
    } else {
      v.clear();
      if (is_terminal(d.status)) {
        if (const size_t a = attempt_index(d.id); a != kSeveral) {
          encode_archived(d, m.attempts[a], v);
          embedded[a] = true;
        } else {
          encode_delivery(d, v);
        }
        // Nothing to delete when the active record was never written (new in this batch).
        if (!dp.is_new && !new_in_batch.count(d.id)) active_deletes.push_back(d.id);
        batch.Put(cf(kCfArchive), sl(key), sl(v));
        expiring_deliveries.push_back(d.id);
        settled.emplace_back(d.id, di);
      } else if (log_leases && d.status == DeliveryStatus::kInFlight && !dp.is_new &&
                 !new_in_batch.count(d.id)) {
        encode_delivery(d, v);
        leases.add(d.id, v);
        leased.emplace_back(d.id, di);
      } else {
        encode_delivery(d, v);
        batch.Put(cf(kCfActive), sl(key), sl(v));
        settled.emplace_back(d.id, di);
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
  // A batch with events wrote the payload log just now: a read-only disk refused that already.
  auto seq = commit(batch, false, /*probed=*/!m.events.empty());
  if (!seq) return seq;
  // The leases are appended after the batch they belong to is written and before write()
  // returns, so before any of their requests is on the wire: a lease the log holds always
  // belongs to a committed batch (a crash in between loses a lease whose request was never
  // sent; the delivery is then simply still pending).
  // If the lease log refuses (a full or read-only disk), the batch is in the WAL and its sends
  // must not go: the caller keeps the batch and writes it again, which rewrites the same
  // records (a write is idempotent) and appends the leases then.
  if (auto r = leases_->append(leases); !r)
    return disk_error(r.error().sys_errno, r.error().message);
  settle_leases(leased, settled);
  return seq;
}

// After a write: the deliveries whose last put in the batch was not a lease have their earlier
// lease settled. `leased` and `settled` hold (delivery, index of the put in the batch).
void RocksStore::settle_leases(std::vector<std::pair<DeliveryId, size_t>>& leased,
                               const std::vector<std::pair<DeliveryId, size_t>>& settled) {
  if (!settled.empty() && leases_->any_live()) {
    std::vector<DeliveryId> ids;
    ids.reserve(settled.size());
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

// ---- point reads ------------------------------------------------------------------------------

Result<std::optional<EventKeyRecord>> RocksStore::find_event_key(std::string_view tenant,
                                                                 std::string_view event_id) {
  no_perf_counters();
  rocksdb::PinnableSlice v;
  auto s = db_->Get(rocksdb::ReadOptions(), cf(kCfIdempotency),
                    sl(idempotency_key(tenant, event_id)), &v);
  if (s.IsNotFound()) return std::optional<EventKeyRecord>();
  if (!s.ok()) return to_error(s);
  auto r = decode_event_key(sv(v));
  if (!r) return r.error();
  return std::optional<EventKeyRecord>(*r);
}

Result<std::vector<std::optional<EventKeyRecord>>> RocksStore::find_event_keys(
    const std::vector<EventKeyRef>& refs) {
  no_perf_counters();
  const size_t n = refs.size();
  std::vector<std::optional<EventKeyRecord>> out(n);
  if (n == 0) return out;
  std::vector<std::string> keys(n);
  std::vector<Slice> slices(n);
  for (size_t i = 0; i < n; ++i) {
    keys[i] = idempotency_key(refs[i].tenant, refs[i].event_id);
    slices[i] = sl(keys[i]);
  }
  std::vector<rocksdb::PinnableSlice> values(n);
  std::vector<rocksdb::Status> st(n);
  db_->MultiGet(rocksdb::ReadOptions(), cf(kCfIdempotency), n, slices.data(), values.data(),
                st.data());
  for (size_t i = 0; i < n; ++i) {
    if (st[i].IsNotFound()) continue;
    if (!st[i].ok()) return to_error(st[i]);
    auto rec = decode_event_key(sv(values[i]));
    if (!rec) return rec.error();
    out[i] = *rec;
  }
  return out;
}

Result<std::optional<StoredEvent>> RocksStore::load_event_head(EventSeq seq) {
  no_perf_counters();
  rocksdb::PinnableSlice v;
  auto s = db_->Get(rocksdb::ReadOptions(), cf(kCfEvents), sl(id_key(seq)), &v);
  if (s.IsNotFound()) return std::optional<StoredEvent>();
  if (!s.ok()) return to_error(s);
  auto r = decode_stored_event(seq, sv(v));
  if (!r) return r.error();
  return std::optional<StoredEvent>(std::move(*r));
}

Result<void> RocksStore::read_payload(const StoredEvent& s, Event& out) {
  if (!s.ref) return ok();  // the value held the bytes (checked by decode_event)
  if (auto r = payloads_->read(*s.ref, out.payload); !r) return r;
  if (payload_hash(out.payload) != out.payload_hash)
    return make_error(Errc::kCorruption, "event: payload hash mismatch in the payload log", nullptr,
                      "corrupt_record");
  return ok();
}

Result<std::optional<Event>> RocksStore::load_event(EventSeq seq) {
  auto h = load_event_head(seq);
  if (!h) return h.error();
  if (!*h) return std::optional<Event>();
  if (auto r = read_payload(**h, (*h)->event); !r) return r.error();
  return std::optional<Event>(std::move((*h)->event));
}

Result<std::optional<Event>> RocksStore::find_event(std::string_view tenant,
                                                    std::string_view event_id) {
  auto k = find_event_key(tenant, event_id);
  if (!k) return k.error();
  if (!*k) return std::optional<Event>();
  auto e = load_event((*k)->seq);
  if (!e) return e.error();
  if (*e && ((*e)->tenant != tenant || (*e)->id != event_id))
    return make_error(Errc::kCorruption, "idempotency key points at another event");
  return e;
}

// `last`, when given, gets the attempt an archive record carries (encode_archived), per id.
// A delivery with a live lease reads as that lease (it is newer than the active record).
static Result<std::vector<std::optional<Delivery>>> fetch_aligned(
    rocksdb::DB* db, rocksdb::ColumnFamilyHandle* active, rocksdb::ColumnFamilyHandle* archive,
    const LeaseLog& leases, const std::vector<DeliveryId>& ids,
    std::vector<std::optional<Attempt>>* last = nullptr) {
  const size_t n = ids.size();
  std::vector<std::optional<Delivery>> out(n);
  if (last) last->assign(n, std::nullopt);
  if (n == 0) return out;
  std::vector<FixedKey<kIdKeyBytes>> keys(n);
  std::vector<Slice> slices(n);
  for (size_t i = 0; i < n; ++i) {
    keys[i] = id_key(ids[i]);
    slices[i] = sl(keys[i]);
  }
  std::vector<rocksdb::PinnableSlice> values(n);
  std::vector<rocksdb::Status> st(n);
  db->MultiGet(rocksdb::ReadOptions(), active, n, slices.data(), values.data(), st.data());
  std::vector<size_t> missing;
  std::string lease;
  for (size_t i = 0; i < n; ++i) {
    if (st[i].ok()) {
      auto live = leases.lookup(ids[i], lease);
      if (!live) return live.error();
      auto d = decode_delivery(ids[i], *live ? std::string_view(lease) : sv(values[i]));
      if (!d) return d.error();
      out[i] = *d;
    } else if (st[i].IsNotFound()) {
      missing.push_back(i);
    } else {
      return to_error(st[i]);
    }
  }
  if (missing.empty()) return out;
  const size_t m = missing.size();
  std::vector<Slice> mslices(m);
  for (size_t j = 0; j < m; ++j) mslices[j] = slices[missing[j]];
  std::vector<rocksdb::PinnableSlice> mvalues(m);
  std::vector<rocksdb::Status> mst(m);
  db->MultiGet(rocksdb::ReadOptions(), archive, m, mslices.data(), mvalues.data(), mst.data());
  for (size_t j = 0; j < m; ++j) {
    const size_t i = missing[j];
    if (mst[j].ok()) {
      Delivery d;
      if (auto r = decode_archived(ids[i], sv(mvalues[j]), d, last ? &(*last)[i] : nullptr); !r)
        return r.error();
      out[i] = d;
    } else if (!mst[j].IsNotFound()) {
      return to_error(mst[j]);
    }
  }
  return out;
}

Result<std::vector<Delivery>> RocksStore::fetch_deliveries(const std::vector<DeliveryId>& ids) {
  auto r = fetch_aligned(db_, cf(kCfActive), cf(kCfArchive), *leases_, ids);
  if (!r) return r.error();
  std::vector<Delivery> out;
  out.reserve(ids.size());
  for (auto& d : *r) {
    if (d) out.push_back(*d);  // an index entry whose delivery retention just removed
  }
  return out;
}

Result<std::vector<Delivery>> RocksStore::event_deliveries(EventSeq seq) {
  const auto ek = id_key(seq);
  std::vector<DeliveryId> ids;
  std::unique_ptr<rocksdb::Iterator> it(
      db_->NewIterator(rocksdb::ReadOptions(), cf(kCfEventDeliveries)));
  for (it->Seek(sl(ek)); it->Valid() && starts_with(it->key(), ek.view()); it->Next()) {
    if (it->key().size() != kEventDeliveryKeyBytes)
      return make_error(Errc::kCorruption, "event deliveries: bad key");
    ids.push_back(get_be64(it->key().data() + 8));
  }
  if (!it->status().ok()) return to_error(it->status());
  return fetch_deliveries(ids);
}

Result<std::optional<DeliveryDetail>> RocksStore::get_delivery(DeliveryId id) {
  std::vector<std::optional<Attempt>> kept;  // the attempt the archive record carries, if any
  auto found = fetch_aligned(db_, cf(kCfActive), cf(kCfArchive), *leases_, {id}, &kept);
  if (!found) return found.error();
  if (!(*found)[0]) return std::optional<DeliveryDetail>();
  DeliveryDetail detail;
  detail.delivery = *(*found)[0];
  std::optional<Attempt>& last = kept[0];
  auto ev = load_event_head(detail.delivery.event);
  if (!ev) return ev.error();
  if (*ev) detail.tenant = (*ev)->event.tenant;

  rocksdb::ReadOptions ro;
  const auto upper = id_key(id + 1);
  Slice upper_slice = sl(upper);
  if (id != UINT64_MAX) ro.iterate_upper_bound = &upper_slice;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro, cf(kCfAttempts)));
  const auto prefix = id_key(id);
  for (it->Seek(sl(prefix)); it->Valid() && starts_with(it->key(), prefix.view()); it->Next()) {
    auto a = decode_attempt(sv(it->key()), sv(it->value()));
    if (!a) return a.error();
    detail.attempts.push_back(std::move(*a));
  }
  if (!it->status().ok()) return to_error(it->status());
  if (last) {
    auto at = std::find_if(detail.attempts.begin(), detail.attempts.end(),
                           [&](const Attempt& a) { return a.number >= last->number; });
    detail.attempts.insert(at, std::move(*last));
  }
  return std::optional<DeliveryDetail>(std::move(detail));
}

// ---- log queries ------------------------------------------------------------------------------

Result<std::vector<Delivery>> RocksStore::recent_deliveries(std::string_view tenant, size_t limit) {
  limit = std::min(limit, kListLimitMax);
  std::vector<Delivery> out;
  if (limit == 0) return out;
  const uint64_t th = tenant_hash(tenant);
  std::string prefix = partition_prefix(partition_of_hash(th));
  put_be64(prefix, th);
  const std::string upper = prefix_successor(prefix);
  Slice upper_slice = sl(upper);
  rocksdb::ReadOptions ro;
  ro.iterate_upper_bound = &upper_slice;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro, cf(kCfTenantIndex)));
  std::vector<DeliveryId> ids;
  it->Seek(sl(prefix));
  // Normally one pass; more only when retention removed deliveries under our feet.
  while (out.size() < limit && it->Valid()) {
    ids.clear();
    for (; it->Valid() && ids.size() < limit - out.size(); it->Next()) {
      if (it->key().size() != kTenantIndexKeyBytes)
        return make_error(Errc::kCorruption, "tenant index: bad key");
      ids.push_back(~get_be64(it->key().data() + 10));
    }
    auto ds = fetch_deliveries(ids);
    if (!ds) return ds.error();
    for (auto& d : *ds) out.push_back(d);
  }
  if (!it->status().ok()) return to_error(it->status());
  return out;
}

Result<DeliveryPage> RocksStore::list_deliveries(std::string_view tenant,
                                                 std::optional<EndpointId> endpoint,
                                                 std::optional<DeliveryStatus> status, size_t limit,
                                                 std::string_view cursor) {
  limit = std::clamp<size_t>(limit, 1, kListLimitMax);
  auto parsed = decode_list_cursor(cursor);
  if (!parsed) return parsed.error();
  const std::optional<DeliveryId> after = *parsed;
  const uint64_t th = tenant_hash(tenant);
  std::string prefix = partition_prefix(partition_of_hash(th));
  put_be64(prefix, th);
  if (endpoint) put_be64(prefix, *endpoint);
  const size_t id_offset = prefix.size();
  const size_t key_bytes = endpoint ? kEndpointIndexKeyBytes : kTenantIndexKeyBytes;
  const std::string upper = prefix_successor(prefix);
  Slice upper_slice = sl(upper);
  rocksdb::ReadOptions ro;
  ro.iterate_upper_bound = &upper_slice;
  // The tenant index holds every delivery of the tenant once, newest first; the endpoint
  // index the same per endpoint.
  std::unique_ptr<rocksdb::Iterator> it(
      db_->NewIterator(ro, cf(endpoint ? kCfEndpointIndex : kCfTenantIndex)));
  std::string start = prefix;
  if (after) put_be64(start, ~*after);
  it->Seek(sl(start));

  DeliveryPage page;
  std::vector<DeliveryId> chunk;
  size_t scanned = 0;
  DeliveryId last_consumed = 0;
  bool more = false;
  while (true) {
    chunk.clear();
    for (; it->Valid() && chunk.size() < kFetchChunk && scanned < kListScanMax; it->Next()) {
      if (it->key().size() != key_bytes)
        return make_error(Errc::kCorruption, "delivery index: bad key");
      const DeliveryId id = ~get_be64(it->key().data() + id_offset);
      if (after && id == *after) continue;
      chunk.push_back(id);
      ++scanned;
    }
    if (chunk.empty()) break;
    auto ds = fetch_aligned(db_, cf(kCfActive), cf(kCfArchive), *leases_, chunk);
    if (!ds) return ds.error();
    bool full = false;
    for (size_t i = 0; i < chunk.size(); ++i) {
      last_consumed = chunk[i];
      const auto& d = (*ds)[i];
      if (d && (!status || d->status == *status)) {
        page.items.push_back(*d);
        if (page.items.size() == limit) {
          more = i + 1 < chunk.size() || it->Valid();
          full = true;
          break;
        }
      }
    }
    if (full) break;
    if (scanned >= kListScanMax) {
      more = it->Valid();
      break;
    }
  }
  if (!it->status().ok()) return to_error(it->status());
  if (more) page.next_cursor = encode_cursor(last_consumed);
  return page;
}

Result<std::vector<Notification>> RocksStore::list_notifications(std::string_view tenant,
                                                                 size_t limit) {
  limit = std::min(limit, kListLimitMax);
  std::vector<Notification> out;
  const uint64_t th = tenant_hash(tenant);
  std::string prefix = partition_prefix(partition_of_hash(th));
  put_be64(prefix, th);
  const std::string upper = prefix_successor(prefix);
  Slice upper_slice = sl(upper);
  rocksdb::ReadOptions ro;
  ro.iterate_upper_bound = &upper_slice;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro, cf(kCfNotifications)));
  for (it->Seek(sl(prefix)); it->Valid() && out.size() < limit; it->Next()) {
    auto n = decode_notification(sv(it->key()), sv(it->value()));
    if (!n) return n.error();
    if (n->tenant == tenant) out.push_back(std::move(*n));  // a 64-bit hash collision
  }
  if (!it->status().ok()) return to_error(it->status());
  return out;
}

// ---- recovery ---------------------------------------------------------------------------------

Result<uint64_t> RocksStore::max_id_in(Cf c, Partition p) {
  const auto key = id_key(make_id(p, ~uint64_t{0}));
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), cf(c)));
  it->SeekForPrev(sl(key));
  if (!it->status().ok()) return to_error(it->status());
  if (!it->Valid() || it->key().size() < 8) return uint64_t{0};
  const uint64_t id = get_be64(it->key().data());
  return id_partition(id) == p ? id_sequence(id) : 0;
}

Result<RecoveryStats> RocksStore::recover(Partition p, WallTime now, RecoveryVisitor& visitor) {
  RecoveryStats st;
  uint64_t max_seq = 0;
  const bool last_partition = p == 0xffff;
  const auto lo_id = id_key(make_id(p, 0));
  const auto hi_id = id_key(last_partition ? 0 : uint64_t{p + 1u} << kIdSequenceBits);
  Slice hi_id_slice = sl(hi_id);
  rocksdb::ReadOptions scan;
  // No fixed readahead: a partition is often a few hundred KB, and a fixed 4 MB prefetch per
  // Seek (256 partitions x several families) cost more than the scan. RocksDB's automatic
  // readahead grows from 8 KB on sequential reads.
  scan.adaptive_readahead = true;
  scan.fill_cache = false;
  if (!last_partition) scan.iterate_upper_bound = &hi_id_slice;

  {  // endpoints
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(scan, cf(kCfEndpoints)));
    for (it->Seek(sl(lo_id)); it->Valid(); it->Next()) {
      if (it->key().size() != kIdKeyBytes)
        return make_error(Errc::kCorruption, "endpoint: bad key");
      const EndpointId id = get_be64(it->key().data());
      auto e = decode_endpoint(id, sv(it->value()));
      if (!e) return e.error();
      max_seq = std::max(max_seq, id_sequence(id));
      visitor.on_endpoint(*e);
      ++st.endpoints;
    }
    if (!it->status().ok()) return to_error(it->status());
  }
  {  // tenants
    const std::string prefix = partition_prefix(p);
    const std::string upper = prefix_successor(prefix);
    Slice upper_slice = sl(upper);
    rocksdb::ReadOptions ro = scan;
    ro.iterate_upper_bound = upper.empty() ? nullptr : &upper_slice;
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro, cf(kCfTenants)));
    for (it->Seek(sl(prefix)); it->Valid(); it->Next()) {
      auto t = decode_tenant(sv(it->key()), sv(it->value()));
      if (!t) return t.error();
      visitor.on_tenant(*t);
      ++st.tenants;
    }
    if (!it->status().ok()) return to_error(it->status());
  }
  {  // non-terminal deliveries, in key order, in chunks; leases are fixed before the visit
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(scan, cf(kCfActive)));
    std::unique_ptr<rocksdb::Iterator> attempts(
        db_->NewIterator(rocksdb::ReadOptions(), cf(kCfAttempts)));
    std::vector<Delivery> chunk;
    chunk.reserve(kRecoveryChunk);
    std::vector<size_t> leased;
    std::string v;
    auto flush_chunk = [&]() -> Result<void> {
      if (!leased.empty()) {
        rocksdb::WriteBatch batch;
        for (size_t i : leased) {
          Delivery& d = chunk[i];
          // Never overwrite a recorded attempt: number after the last one stored.
          attempts->SeekForPrev(sl(attempt_key(d.id, 0xffff)));
          if (!attempts->status().ok()) return to_error(attempts->status());
          uint32_t number = std::max<uint32_t>(d.attempts, 1);
          if (attempts->Valid() && attempts->key().size() == kAttemptKeyBytes &&
              get_be64(attempts->key().data()) == d.id) {
            number = std::max<uint32_t>(number, get_be16(attempts->key().data() + 8) + 1u);
          }
          number = std::min<uint32_t>(number, 0xffff);
          const Attempt a = expire_lease(d, static_cast<uint16_t>(number), now);
          v.clear();
          encode_attempt(a, v);
          batch.Put(cf(kCfAttempts), sl(attempt_key(d.id, a.number)), sl(v));
          v.clear();
          encode_delivery(d, v);
          batch.Put(cf(kCfActive), sl(id_key(d.id)), sl(v));
        }
        auto r = commit(batch, /*force_sync=*/true);
        if (!r) return r.error();
        st.leases_expired += leased.size();
        leased.clear();
      }
      for (const Delivery& d : chunk) visitor.on_delivery(d);
      st.pending += chunk.size();
      chunk.clear();
      return ok();
    };
    for (it->Seek(sl(lo_id)); it->Valid(); it->Next()) {
      if (it->key().size() != kIdKeyBytes)
        return make_error(Errc::kCorruption, "delivery: bad key");
      const DeliveryId id = get_be64(it->key().data());
      Delivery& d = chunk.emplace_back();
      if (auto r = decode_delivery(id, sv(it->value()), d); !r) return r.error();
      max_seq = std::max(max_seq, id_sequence(id));
      if (d.status == DeliveryStatus::kInFlight) leased.push_back(chunk.size() - 1);
      if (is_terminal(d.status)) chunk.pop_back();  // not expected in this column family
      if (chunk.size() == kRecoveryChunk) {
        if (auto r = flush_chunk(); !r) return r.error();
      }
    }
    if (!it->status().ok()) return to_error(it->status());
    if (auto r = flush_chunk(); !r) return r.error();
  }
  // The next free id: the newest of every kind, and what retention or deletes removed.
  for (Cf c : {kCfEvents, kCfArchive}) {
    auto m = max_id_in(c, p);
    if (!m) return m.error();
    max_seq = std::max(max_seq, *m);
  }
  {
    const std::string prefix = partition_prefix(p);
    std::unique_ptr<rocksdb::Iterator> it(
        db_->NewIterator(rocksdb::ReadOptions(), cf(kCfNotifications)));
    for (it->Seek(sl(prefix)); it->Valid() && starts_with(it->key(), prefix); it->Next()) {
      if (it->key().size() != kNotificationKeyBytes) continue;
      max_seq = std::max(max_seq, id_sequence(~get_be64(it->key().data() + 10)));
    }
    if (!it->status().ok()) return to_error(it->status());
  }
  {
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), cf(kCfMeta)));
    const auto top = hwm_key(p, ~uint64_t{0});
    it->SeekForPrev(sl(top));
    if (!it->status().ok()) return to_error(it->status());
    if (it->Valid() && it->key().size() == kHwmKeyBytes &&
        starts_with(it->key(), std::string_view(top.data, 3)))
      max_seq = std::max(max_seq, id_sequence(get_be64(it->key().data() + 3)));
  }
  st.next_sequence = max_seq + 1;
  return st;
}

// ---- retention --------------------------------------------------------------------------------

Result<RetentionStats> RocksStore::run_retention(WallTime now, const std::function<bool()>& stop) {
  std::lock_guard guard(retention_mu_);
  RetentionStats st;
  const int64_t cutoff = (now - options_.retention).ms();
  if (cutoff <= 0) return st;
  const uint64_t cutoff_ms = static_cast<uint64_t>(cutoff);
  // Entries written from now on carry a stamp >= this (stamps are monotone), so progress may
  // be recorded up to it even if the caller's `now` runs ahead of the store's clock.
  const uint64_t done_ms = std::min<uint64_t>(
      cutoff_ms, static_cast<uint64_t>(last_stamp_ms_.load(std::memory_order_acquire)));

  for (uint32_t pi = 0; pi < kPartitions; ++pi) {
    const Partition p = static_cast<Partition>(pi);
    if (retention_done_ms_[p] >= cutoff_ms) continue;
    const auto lo = expiry_key(p, retention_done_ms_[p], static_cast<ExpiryKind>(0), 0);
    const auto hi = expiry_key(p, cutoff_ms, static_cast<ExpiryKind>(0), 0);
    Slice hi_slice = sl(hi);
    rocksdb::ReadOptions ro;
    ro.iterate_upper_bound = &hi_slice;
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro, cf(kCfExpiry)));
    it->Seek(sl(lo));
    uint64_t hwm = 0;
    while (true) {
      rocksdb::WriteBatch batch;
      std::vector<DeliveryId> dids;
      std::vector<uint64_t> dstamps;                  // the stamp of each did's expiry entry
      std::vector<std::pair<EventSeq, bool>> events;  // (event, its own expiry entry)
      size_t n = 0, ids = 0;  // entries and the ids they name (a group names many)
      for (; it->Valid() && ids < kRetentionChunk; it->Next(), ++n) {
        const Slice k = it->key();
        if (k.size() != kExpiryKeyBytes) return make_error(Errc::kCorruption, "expiry: bad key");
        batch.Delete(cf(kCfExpiry), k);
        const auto kind = static_cast<ExpiryKind>(k.data()[10]);
        const uint64_t id = get_be64(k.data() + 11);
        ++ids;
        switch (kind) {
          case ExpiryKind::kDelivery:
            dids.push_back(id);
            break;
          case ExpiryKind::kEvent:
            events.emplace_back(id, true);
            break;
          case ExpiryKind::kDeliveryGroup:
          case ExpiryKind::kEventGroup: {
            auto group = decode_id_group(p, sv(it->value()));
            if (!group) return group.error();
            ids += group->size() - 1;
            for (uint64_t gid : *group) {
              if (kind == ExpiryKind::kDeliveryGroup) {
                dids.push_back(gid);
              } else {
                events.emplace_back(gid, true);
              }
            }
            break;
          }
          case ExpiryKind::kNotification: {
            if (it->value().size() != 8)
              return make_error(Errc::kCorruption, "expiry: bad notification entry");
            Reader r(sv(it->value()));
            batch.Delete(cf(kCfNotifications), sl(notification_key(r.fixed64(), id)));
            ++st.notifications;
            hwm = std::max(hwm, id);
            break;
          }
          default:
            return make_error(Errc::kCorruption, "expiry: unknown kind");
        }
      }
      if (!it->status().ok()) return to_error(it->status());
      if (n == 0) break;
      // Asked once per chunk that has work, before it is written (each chunk commits on its own):
      // a stop drops this chunk and leaves the partition's progress where it was, so the next
      // pass seeks from there and finds what is left.
      if (stop && stop()) {
        st.stopped = true;
        return st;
      }
      const bool more = it->Valid();
      st.expiry_entries += n;

      // Terminal deliveries (only the archive holds them) with attempts and index entries.
      std::vector<FixedKey<kIdKeyBytes>> keys(dids.size());
      std::vector<Slice> slices(dids.size());
      for (size_t i = 0; i < dids.size(); ++i) keys[i] = id_key(dids[i]), slices[i] = sl(keys[i]);
      std::vector<rocksdb::PinnableSlice> values(dids.size());
      std::vector<rocksdb::Status> sts(dids.size());
      if (!dids.empty()) {
        db_->MultiGet(rocksdb::ReadOptions(), cf(kCfArchive), dids.size(), slices.data(),
                      values.data(), sts.data());
      }
      std::unique_ptr<rocksdb::Iterator> ait(
          db_->NewIterator(rocksdb::ReadOptions(), cf(kCfAttempts)));
      for (size_t i = 0; i < dids.size(); ++i) {
        if (sts[i].IsNotFound()) continue;  // an earlier entry removed it already
        if (!sts[i].ok()) return to_error(sts[i]);
        Delivery d;
        std::optional<Attempt> kept;
        if (auto r = decode_archived(dids[i], sv(values[i]), d, &kept); !r) return r.error();
        if (kept) ++st.attempts;
        auto ev = load_event_head(d.event);
        if (!ev) return ev.error();
        if (*ev) {  // the tenant (its hash) names the index entries
          const uint64_t th = tenant_hash((*ev)->event.tenant);
          batch.Delete(cf(kCfTenantIndex), sl(tenant_index_key(th, d.id)));
          batch.Delete(cf(kCfEndpointIndex), sl(endpoint_index_key(th, d.endpoint, d.id)));
        }
        batch.Delete(cf(kCfArchive), sl(keys[i]));
        batch.Delete(cf(kCfEventDeliveries), sl(event_delivery_key(d.event, d.id)));
        for (ait->Seek(sl(keys[i])); ait->Valid() && starts_with(ait->key(), keys[i].view());
             ait->Next()) {
          batch.Delete(cf(kCfAttempts), ait->key());
          ++st.attempts;
        }
        if (!ait->status().ok()) return to_error(ait->status());
        events.emplace_back(d.event, false);
        hwm = std::max(hwm, d.id);
        ++st.deliveries;
      }
      if (auto r = commit(batch, false); !r) return r.error();

      // Events go once no delivery of theirs is left (SPEC: an event outlives its deliveries).
      rocksdb::WriteBatch eb;
      std::unique_ptr<rocksdb::Iterator> edit(
          db_->NewIterator(rocksdb::ReadOptions(), cf(kCfEventDeliveries)));
      std::sort(events.begin(), events.end());
      for (size_t i = 0; i < events.size(); ++i) {
        const auto [ev, own_entry] = events[i];
        if (i + 1 < events.size() && events[i + 1].first == ev) continue;  // keep the last (own)
        const auto ek = id_key(ev);
        edit->Seek(sl(ek));
        if (!edit->status().ok()) return to_error(edit->status());
        const bool has_deliveries = edit->Valid() && starts_with(edit->key(), ek.view());
        if (has_deliveries) {
          // Still referenced (a non-terminal delivery can live for weeks): look again later,
          // with its payload moved to the active segment so that its old segment can go.
          if (own_entry) {
            const uint64_t now_stamp = static_cast<uint64_t>(stamp_ms());
            auto h = load_event_head(ev);
            if (!h) return h.error();
            if (*h) {
              Event& moved = (*h)->event;
              if (auto r = read_payload(**h, moved); !r) return r.error();
              std::vector<PayloadRef> ref;
              if (auto r = payloads_->append({moved.payload}, now_stamp, ref); !r) return r.error();
              std::string head;
              encode_event_logged(moved, ref[0], head);
              eb.Put(cf(kCfEvents), sl(ek), sl(head));
              ++st.payloads_moved;
            }
            eb.Put(cf(kCfExpiry), sl(expiry_key(p, now_stamp, ExpiryKind::kEvent, ev)), Slice());
          }
          continue;
        }
        auto h = load_event_head(ev);
        if (!h) return h.error();
        if (!*h) continue;
        const Event& e = (*h)->event;
        // Reached through a delivery: the event's own entry decides if it is younger.
        if (!own_entry && e.created_at.ms() >= cutoff) continue;
        eb.Delete(cf(kCfEvents), sl(ek));
        eb.Delete(cf(kCfIdempotency), sl(idempotency_key(e.tenant, e.id)));
        hwm = std::max(hwm, ev);
        ++st.events;
      }
      if (hwm != 0) {
        // One high-water mark per partition: remove the older ones.
        const Partition hp = id_partition(hwm);
        std::unique_ptr<rocksdb::Iterator> hit(
            db_->NewIterator(rocksdb::ReadOptions(), cf(kCfMeta)));
        const auto first = hwm_key(hp, 0);
        bool newer_exists = false;
        for (hit->Seek(sl(first));
             hit->Valid() && starts_with(hit->key(), std::string_view(first.data, 3));
             hit->Next()) {
          if (hit->key().size() != kHwmKeyBytes) continue;
          if (get_be64(hit->key().data() + 3) >= hwm) {
            newer_exists = true;
          } else {
            eb.Delete(cf(kCfMeta), hit->key());
          }
        }
        if (!hit->status().ok()) return to_error(hit->status());
        if (!newer_exists) eb.Put(cf(kCfMeta), sl(hwm_key(hp, hwm)), Slice());
      }
      if (eb.Count() > 0) {
        if (auto r = commit(eb, false); !r) return r.error();
      }
      if (!more) break;
    }
    retention_done_ms_[p] = std::max(retention_done_ms_[p], done_ms);
  }
  if (auto r = remove_done_segments(st); !r) return r.error();
  return st;
}

// A segment can go once every expiry entry up to its stamp was processed in every partition:
// each of its events was then deleted, or moved with a new entry (run_retention above).
Result<void> RocksStore::remove_done_segments(RetentionStats& st) {
  const uint64_t done = *std::min_element(retention_done_ms_.begin(), retention_done_ms_.end());
  const uint64_t active = payloads_->active_segment();
  std::vector<uint64_t> gone;
  for (const auto& [n, stamp] : payloads_->segments()) {
    if (n != active && stamp < done) gone.push_back(n);
  }
  if (gone.empty()) return ok();
  // The moved copies and their new heads are durable before the old copies go.
  if (auto r = payloads_->sync(); !r) {
    if (r.error().sys_errno != EROFS)
      fail("an fsync of the payload log failed", r.error().sys_errno);
    return r;
  }
  if (auto s = db_->SyncWAL(); !s.ok()) {
    fail("an fsync of the RocksDB WAL failed", EIO);
    return to_error(s);
  }
  for (uint64_t n : gone) {
    if (auto r = payloads_->remove(n); !r) return r;
    ++st.payload_segments;
  }
  return ok();
}

Result<uint64_t> RocksStore::newest_expiry_stamp() {
  uint64_t newest = 0;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), cf(kCfExpiry)));
  for (uint32_t pi = 0; pi < kPartitions; ++pi) {
    const Partition p = static_cast<Partition>(pi);
    const auto last = expiry_key(p, ~uint64_t{0}, static_cast<ExpiryKind>(0xff), ~uint64_t{0});
    it->SeekForPrev(sl(last));
    if (it->Valid() && it->key().size() == kExpiryKeyBytes && get_be16(it->key().data()) == p) {
      newest = std::max(newest, get_be64(it->key().data() + 2));
    }
  }
  if (!it->status().ok()) return to_error(it->status());
  return newest;
}

// The WAL replayed at open is in the memtables: an event there whose payload is short or does
// not match its hash lost its payload in a power loss (payload_log.h), so it was never
// acknowledged. It is removed with everything intake wrote with it, as if never taken in.
// The leases an earlier run left in its lease log: one newer than its delivery's record (a
// higher attempt count, or the same attempt with a later mark while in flight) was never
// settled and is written into deliveries_active, where recovery finds it kInFlight. Leases of
// deliveries that are no longer active were settled by a terminal write. Then the old
// segments go.
Result<void> RocksStore::apply_old_leases() {
  auto old = leases_->read_old();
  if (!old) return old.error();
  std::vector<DeliveryId> ids;
  ids.reserve(old->size());
  for (const auto& [id, rec] : *old) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  rocksdb::WriteBatch batch;
  for (size_t lo = 0; lo < ids.size(); lo += kRecoveryChunk) {
    const size_t n = std::min(kRecoveryChunk, ids.size() - lo);
    std::vector<FixedKey<kIdKeyBytes>> keys(n);
    std::vector<Slice> slices(n);
    for (size_t i = 0; i < n; ++i) {
      keys[i] = id_key(ids[lo + i]);
      slices[i] = sl(keys[i]);
    }
    std::vector<rocksdb::PinnableSlice> values(n);
    std::vector<rocksdb::Status> st(n);
    db_->MultiGet(rocksdb::ReadOptions(), cf(kCfActive), n, slices.data(), values.data(),
                  st.data());
    for (size_t i = 0; i < n; ++i) {
      if (st[i].IsNotFound()) continue;
      if (!st[i].ok()) return to_error(st[i]);
      const DeliveryId id = ids[lo + i];
      auto cur = decode_delivery(id, sv(values[i]));
      if (!cur) return cur.error();
      const std::string& rec = old->at(id);
      auto lease = decode_delivery(id, rec);
      if (!lease) return lease.error();
      if (lease->status != DeliveryStatus::kInFlight) continue;
      if (lease->attempts > cur->attempts ||
          (lease->attempts == cur->attempts && cur->status == DeliveryStatus::kInFlight)) {
        batch.Put(cf(kCfActive), sl(keys[i]), sl(rec));
        ++leases_applied_;
      }
    }
  }
  if (batch.Count() > 0) {
    if (auto r = commit(batch, /*force_sync=*/true); !r) return r.error();
  }
  return leases_->remove_old();
}

Result<void> RocksStore::sync_recovered() {
  if (auto r = payloads_->sync(); !r) return r;
  DIR* dir = ::opendir(options_.path.c_str());
  if (dir == nullptr) return io_error("cannot list the store directory", errno);
  std::vector<std::string> wals;
  while (const dirent* e = ::readdir(dir)) {
    const std::string_view name(e->d_name);
    if (name.size() > 4 && name.substr(name.size() - 4) == ".log") wals.emplace_back(name);
  }
  ::closedir(dir);
  for (const std::string& name : wals) {
    const int fd = ::open((options_.path + "/" + name).c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      if (errno == ENOENT) continue;  // RocksDB removed it since the listing
      return io_error("cannot open a WAL file to sync it", errno);
    }
    const int rc = ::fdatasync(fd);
    const int err = errno;
    ::close(fd);
    if (rc != 0) return io_error("cannot sync a WAL file the store recovered", err);
  }
  const int dfd = ::open(options_.path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return io_error("cannot open the store directory", errno);
  const int rc = ::fsync(dfd);
  const int err = errno;
  ::close(dfd);
  if (rc != 0) return io_error("cannot sync the store directory", err);
  return ok();
}

Result<void> RocksStore::drop_torn_events() {
  rocksdb::ReadOptions ro;
  ro.read_tier = rocksdb::kMemtableTier;
  std::vector<Event> torn;
  {
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro, cf(kCfEvents)));
    for (it->SeekToFirst(); it->Valid(); it->Next()) {
      if (it->key().size() != kIdKeyBytes) continue;
      const EventSeq seq = get_be64(it->key().data());
      auto h = decode_stored_event(seq, sv(it->value()));
      if (!h || !h->ref) continue;  // a value that does not decode stays a read error
      if (read_payload(*h, h->event).ok()) continue;  // short or mismatched: torn
      h->event.payload.clear();
      torn.push_back(std::move(h->event));
    }
    if (!it->status().ok()) return to_error(it->status());
  }
  if (torn.empty()) return ok();
  rocksdb::WriteBatch batch;
  std::unique_ptr<rocksdb::Iterator> edit(
      db_->NewIterator(rocksdb::ReadOptions(), cf(kCfEventDeliveries)));
  std::unique_ptr<rocksdb::Iterator> ait(db_->NewIterator(rocksdb::ReadOptions(), cf(kCfAttempts)));
  std::unordered_map<Partition, uint64_t> hwm;  // ids are never reused: remember the dropped
  auto seen = [&](uint64_t id) {
    uint64_t& h = hwm[id_partition(id)];
    h = std::max(h, id);
  };
  for (const Event& e : torn) {
    seen(e.seq);
    const auto ek = id_key(e.seq);
    batch.Delete(cf(kCfEvents), sl(ek));
    auto key = find_event_key(e.tenant, e.id);
    if (key.ok() && *key && (*key)->seq == e.seq)
      batch.Delete(cf(kCfIdempotency), sl(idempotency_key(e.tenant, e.id)));
    const uint64_t th = tenant_hash(e.tenant);
    for (edit->Seek(sl(ek)); edit->Valid() && starts_with(edit->key(), ek.view()); edit->Next()) {
      if (edit->key().size() != kEventDeliveryKeyBytes) continue;
      const DeliveryId did = get_be64(edit->key().data() + kIdKeyBytes);
      seen(did);
      const auto dk = id_key(did);
      for (Cf c : {kCfActive, kCfArchive}) {
        rocksdb::PinnableSlice v;
        auto s = db_->Get(rocksdb::ReadOptions(), cf(c), sl(dk), &v);
        if (!s.ok()) continue;
        Delivery dd;
        if (decode_archived(did, sv(v), dd, nullptr))
          batch.Delete(cf(kCfEndpointIndex), sl(endpoint_index_key(th, dd.endpoint, did)));
        batch.Delete(cf(c), sl(dk));
      }
      batch.Delete(cf(kCfTenantIndex), sl(tenant_index_key(th, did)));
      for (ait->Seek(sl(dk)); ait->Valid() && starts_with(ait->key(), dk.view()); ait->Next())
        batch.Delete(cf(kCfAttempts), ait->key());
      batch.Delete(cf(kCfEventDeliveries), edit->key());
    }
    if (!edit->status().ok()) return to_error(edit->status());
    if (!ait->status().ok()) return to_error(ait->status());
  }
  for (const auto& [p, id] : hwm) batch.Put(cf(kCfMeta), sl(hwm_key(p, id)), Slice());
  rocksdb::WriteOptions wo;
  wo.sync = true;
  if (auto s = db_->Write(wo, &batch); !s.ok()) return to_error(s);
  torn_events_dropped_ = torn.size();
  return ok();
}

// ---- maintenance ------------------------------------------------------------------------------

Result<void> RocksStore::flush(bool compact) {
  std::vector<rocksdb::ColumnFamilyHandle*> all(handles_.begin(), handles_.end());
  rocksdb::FlushOptions fo;
  fo.wait = true;
  auto s = db_->Flush(fo, all);
  if (!s.ok()) return to_error(s);
  if (compact) {
    rocksdb::CompactRangeOptions co;
    co.bottommost_level_compaction = rocksdb::BottommostLevelCompaction::kForceOptimized;
    for (auto* h : all) {
      s = db_->CompactRange(co, h, nullptr, nullptr);
      if (!s.ok()) return to_error(s);
    }
  }
  s = db_->SyncWAL();
  if (!s.ok()) return to_error(s);
  return ok();
}

StoreSizes RocksStore::sizes() const {
  StoreSizes out;
  for (auto* h : handles_) {
    uint64_t v = 0;
    if (db_->GetIntProperty(h, "rocksdb.live-sst-files-size", &v)) out.sst_bytes += v;
    if (db_->GetIntProperty(h, "rocksdb.cur-size-all-mem-tables", &v)) out.memtable_bytes += v;
  }
  out.payload_log_bytes = payloads_->bytes();
  out.lease_log_bytes = leases_->bytes();
  rocksdb::VectorLogPtr wals;
  if (db_->GetSortedWalFiles(wals).ok()) {
    for (const auto& w : wals) out.wal_bytes += w->SizeFileBytes();
  }
  return out;
}

}  // namespace ringcast::storage
