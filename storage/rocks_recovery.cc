// RocksStore's recovery (SPEC R12.2, R12.5; docs/storage-schema.md "Why this shape" and the
// payload and lease logs' "Restart"): a partition's state for its shard; at open, the recovered
// files synced (docs/durability.md), torn events dropped, an earlier run's leases applied.
#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <rocksdb/db.h>
#include <rocksdb/options.h>
#include <rocksdb/write_batch.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/store_helpers.h"
#include "storage/codec.h"
#include "storage/lease_log.h"
#include "storage/payload_log.h"
#include "storage/rocks_store.h"
#include "storage/rocks_store_internal.h"
#include "storage/status.h"

namespace ringcast::storage {

using namespace rocks_detail;  // the store's shared helpers (rocks_store_internal.h)

namespace {

constexpr size_t kRecoveryChunk = 4096;

}  // namespace

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

void RocksStore::recover_async(Partition p, WallTime now, Poster& on, RecoverDone done) {
  (void)on;
  recover_collecting(*this, p, now, std::move(done));
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
  // Non-terminal deliveries, in key order, in chunks; leases are fixed before the visit. Two
  // families merged by key: deliveries_active, and deliveries_created from the partition's
  // floor, where a created record with neither an active nor an archive record is a delivery
  // stored only as created (docs/storage-schema.md "Created records").
  auto floor = stored_created_floor(p);
  if (!floor) return floor.error();
  {
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(scan, cf(kCfActive)));
    std::unique_ptr<rocksdb::Iterator> cit(db_->NewIterator(scan, cf(kCfCreated)));
    std::unique_ptr<rocksdb::Iterator> attempts(
        db_->NewIterator(rocksdb::ReadOptions(), cf(kCfAttempts)));
    std::vector<Delivery> chunk;
    chunk.reserve(kRecoveryChunk);
    std::vector<size_t> leased;
    std::vector<size_t> created;  // chunk entries read from a created record
    std::vector<bool> ended;      // per chunk entry: an archive record says it ended
    std::string v;
    auto flush_chunk = [&]() -> Result<void> {
      ended.assign(chunk.size(), false);
      if (!created.empty()) {  // those that ended are in the archive (one MultiGet)
        const size_t m = created.size();
        std::vector<FixedKey<kIdKeyBytes>> keys(m);
        std::vector<Slice> slices(m);
        for (size_t j = 0; j < m; ++j)
          keys[j] = id_key(chunk[created[j]].id), slices[j] = sl(keys[j]);
        std::vector<rocksdb::PinnableSlice> values(m);
        std::vector<rocksdb::Status> found(m);
        db_->MultiGet(rocksdb::ReadOptions(), cf(kCfArchive), m, slices.data(), values.data(),
                      found.data());
        for (size_t j = 0; j < m; ++j) {
          if (found[j].ok()) {
            ended[created[j]] = true;
          } else if (!found[j].IsNotFound()) {
            return to_error(found[j]);
          }
        }
      }
      if (!leased.empty()) {
        rocksdb::WriteBatch batch;
        for (size_t i : leased) {
          if (ended[i]) continue;
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
          ++st.leases_expired;
        }
        if (batch.Count() > 0) {
          auto r = commit(batch, /*force_sync=*/true);
          if (!r) return r.error();
        }
      }
      // A created record still in its created state: created-only from here on.
      std::vector<bool> is_leased(chunk.size(), false);
      for (size_t i : leased) is_leased[i] = true;
      for (size_t i : created) {
        if (!ended[i] && !is_leased[i]) created_only_.add(chunk[i].id);
      }
      for (size_t i = 0; i < chunk.size(); ++i) {
        if (ended[i]) continue;
        visitor.on_delivery(chunk[i]);
        ++st.pending;
      }
      leased.clear();
      created.clear();
      chunk.clear();
      return ok();
    };
    it->Seek(sl(lo_id));
    cit->Seek(sl(id_key(make_id(p, *floor))));
    while (it->Valid() || cit->Valid()) {
      // The next key of the two; on a tie the active record is the state (a created record is
      // never rewritten).
      const bool from_active = it->Valid() && (!cit->Valid() || it->key().compare(cit->key()) <= 0);
      rocksdb::Iterator& src = from_active ? *it : *cit;
      if (src.key().size() != kIdKeyBytes)
        return make_error(Errc::kCorruption, "delivery: bad key");
      const DeliveryId id = get_be64(src.key().data());
      Delivery& d = chunk.emplace_back();
      if (auto r = decode_delivery(id, sv(src.value()), d); !r) return r.error();
      max_seq = std::max(max_seq, id_sequence(id));
      if (from_active) {
        if (cit->Valid() && cit->key() == it->key()) cit->Next();
        it->Next();
      } else {
        created.push_back(chunk.size() - 1);
        cit->Next();
      }
      if (is_terminal(d.status)) {  // not expected in either family
        if (!from_active) created.pop_back();
        chunk.pop_back();
      } else if (d.status == DeliveryStatus::kInFlight) {
        leased.push_back(chunk.size() - 1);
      }
      if (chunk.size() == kRecoveryChunk) {
        if (auto r = flush_chunk(); !r) return r.error();
      }
    }
    if (!it->status().ok()) return to_error(it->status());
    if (!cit->status().ok()) return to_error(cit->status());
    if (auto r = flush_chunk(); !r) return r.error();
  }
  // The next free id: the newest of every kind, and what retention or deletes removed.
  for (Cf c : {kCfEvents, kCfArchive, kCfCreated}) {
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
  created_only_.recovered(p, *floor);
  return st;
}

Result<uint64_t> RocksStore::stored_created_floor(Partition p) {
  rocksdb::PinnableSlice v;
  auto s = db_->Get(rocksdb::ReadOptions(), cf(kCfMeta), sl(created_floor_key(p)), &v);
  if (s.IsNotFound()) return uint64_t{0};
  if (!s.ok()) return to_error(s);
  Reader r(sv(v));
  const uint64_t floor = r.fixed64();
  if (!r.ok() || !r.done()) return make_error(Errc::kCorruption, "created floor: bad value");
  return floor;
}

// ---- at open: what an earlier run left --------------------------------------------------------

// The WAL replayed at open is in the memtables: an event there whose payload is short or does
// not match its hash lost its payload in a power loss (payload_log.h), so it was never
// acknowledged. It is removed with everything intake wrote with it, as if never taken in.
// The leases an earlier run left in its lease log: one newer than its delivery's record (a
// higher attempt count, or the same attempt with a later mark while in flight) was never
// settled and is written into deliveries_active, where recovery finds it kInFlight. Its record is
// the active one, or the created one of a delivery stored only as created; leases of
// deliveries that ended (an archive record) were settled by their terminal write. Then the old
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
    // The delivery's record: its active one, else (none there) its created one unless it
    // ended (an archive record).
    std::vector<rocksdb::PinnableSlice> values(n);
    std::vector<rocksdb::Status> st(n);
    db_->MultiGet(rocksdb::ReadOptions(), cf(kCfActive), n, slices.data(), values.data(),
                  st.data());
    std::vector<size_t> missing;
    for (size_t i = 0; i < n; ++i) {
      if (st[i].IsNotFound()) missing.push_back(i);
    }
    for (Cf c : {kCfArchive, kCfCreated}) {
      if (missing.empty()) break;
      const size_t m = missing.size();
      std::vector<Slice> ms(m);
      for (size_t j = 0; j < m; ++j) ms[j] = slices[missing[j]];
      std::vector<rocksdb::PinnableSlice> mv(m);
      std::vector<rocksdb::Status> mst(m);
      db_->MultiGet(rocksdb::ReadOptions(), cf(c), m, ms.data(), mv.data(), mst.data());
      std::vector<size_t> still;
      for (size_t j = 0; j < m; ++j) {
        const size_t i = missing[j];
        if (mst[j].IsNotFound()) {
          still.push_back(i);
        } else if (!mst[j].ok()) {
          return to_error(mst[j]);
        } else if (c == kCfCreated) {  // stored only as created: its record is this one
          st[i] = rocksdb::Status::OK();
          values[i].PinSelf(mv[j]);
        }  // else it ended: the lease was settled by its terminal write
      }
      missing = std::move(still);
    }
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
      for (Cf c : {kCfActive, kCfArchive, kCfCreated}) {
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

}  // namespace ringcast::storage
