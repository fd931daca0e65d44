// RocksStore's lifecycle and upkeep (docs/storage-schema.md "Options"; docs/durability.md "One
// node"): open and close, the meta family's outboxes and API keys (SPEC R8.4, R14.1), flush, sizes
// and what StoreInfo reports (the open report, /metrics).
// Its other roles: rocks_journal.cc, rocks_reads.cc, rocks_recovery.cc, rocks_retention.cc.
#include "storage/rocks_store.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include <rocksdb/cache.h>
#include <rocksdb/db.h>
#include <rocksdb/listener.h>
#include <rocksdb/options.h>
#include <rocksdb/write_batch.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "storage/codec.h"
#include "storage/lease_log.h"
#include "storage/payload_log.h"
#include "storage/rocks_options.h"
#include "storage/rocks_store_internal.h"
#include "storage/status.h"
#include "storage/store_metrics.h"

namespace ringcast::storage {

using namespace rocks_detail;  // the store's shared helpers (rocks_store_internal.h)

namespace {

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

// An error of open on a disk that is full or read-only says so (serve prints it and exits 1).
Error at_open(Error e) {
  if (e.sys_errno == ENOSPC || e.sys_errno == EDQUOT)
    e.message = "the data dir is full: retry once space is freed";
  if (e.sys_errno == EROFS) e.message = "the data dir is read-only: retry once it is writable";
  return e;
}

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

// ---- meta: outboxes, API keys, node secrets, portal cutoffs -----------------------------------

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

OpenReport RocksStore::open_report() const {
  OpenReport r;
  r.torn_events_dropped = torn_events_dropped_;
  r.leases_applied = leases_applied_;
  return r;
}

std::string RocksStore::metrics_text() const {
  const StoreSizes z = sizes();
  return render_store_metrics(z.sst_bytes, z.wal_bytes, z.memtable_bytes, z.payload_log_bytes,
                              z.lease_log_bytes);
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
