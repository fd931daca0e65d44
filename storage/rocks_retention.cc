// RocksStore's retention (SPEC R10.1; docs/storage-schema.md "Retention (R10.1): expiry index,
// not a compaction filter" and the payload log's "Retention"): what expired is deleted through
// the expiry index, then the payload segments nothing names any more.
#include <rocksdb/db.h>
#include <rocksdb/options.h>
#include <rocksdb/write_batch.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "storage/codec.h"
#include "storage/payload_log.h"
#include "storage/rocks_store.h"
#include "storage/rocks_store_internal.h"
#include "storage/status.h"

namespace ringcast::storage {

using namespace rocks_detail;  // the store's shared helpers (rocks_store_internal.h)

namespace {

constexpr size_t kRetentionChunk = 512;

}  // namespace

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
        batch.Delete(cf(kCfCreated), sl(keys[i]));
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

}  // namespace ringcast::storage
