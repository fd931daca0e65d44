// RocksStore's reads (SPEC R10.2; docs/storage-schema.md "Why this shape"): point reads of
// keys, events and deliveries (a live lease read instead, "The lease log"), and the delivery
// log's listings.
#include <rocksdb/db.h>
#include <rocksdb/options.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/store_helpers.h"
#include "storage/codec.h"
#include "storage/lease_log.h"
#include "storage/log_query.h"
#include "storage/payload_log.h"
#include "storage/rocks_store.h"
#include "storage/rocks_store_internal.h"
#include "storage/status.h"

namespace ringcast::storage {

using namespace rocks_detail;  // the store's shared helpers (rocks_store_internal.h)

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

void RocksStore::find_event_keys_async(const std::vector<EventKeyRef>& keys, Poster& on,
                                       EventKeysDone done) {
  (void)on;
  find_event_keys_at_once(*this, keys, std::move(done));
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

Result<std::vector<std::optional<Event>>> RocksStore::load_events(
    const std::vector<EventSeq>& seqs) {
  return load_events_one_by_one(*this, seqs);
}

void RocksStore::load_event_async(EventSeq seq, Poster& on, EventDone done) {
  (void)on;
  load_event_at_once(*this, seq, std::move(done));
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

// The delivery families a read looks in: deliveries_active, then deliveries_archive, then
// deliveries_created (a delivery stored only as created: docs/storage-schema.md "Created
// records").
struct DeliveryFamilies {
  rocksdb::ColumnFamilyHandle *active, *archive, *created;
};

// `last`, when given, gets the attempt an archive record carries (encode_archived), per id.
// A delivery that has not ended and has a live lease reads as that lease (it is newer than its
// active or created record).
static Result<std::vector<std::optional<Delivery>>> fetch_aligned(
    rocksdb::DB* db, const DeliveryFamilies& cfs, const LeaseLog& leases,
    const std::vector<DeliveryId>& ids, std::vector<std::optional<Attempt>>* last = nullptr) {
  const size_t n = ids.size();
  std::vector<std::optional<Delivery>> out(n);
  if (last) last->assign(n, std::nullopt);
  if (n == 0) return out;
  std::vector<FixedKey<kIdKeyBytes>> keys(n);
  for (size_t i = 0; i < n; ++i) keys[i] = id_key(ids[i]);
  std::vector<size_t> todo(n);  // indexes into ids not found yet
  for (size_t i = 0; i < n; ++i) todo[i] = i;
  std::string lease;
  for (rocksdb::ColumnFamilyHandle* family : {cfs.active, cfs.archive, cfs.created}) {
    if (todo.empty()) break;
    const size_t m = todo.size();
    std::vector<Slice> slices(m);
    for (size_t j = 0; j < m; ++j) slices[j] = sl(keys[todo[j]]);
    std::vector<rocksdb::PinnableSlice> values(m);
    std::vector<rocksdb::Status> st(m);
    db->MultiGet(rocksdb::ReadOptions(), family, m, slices.data(), values.data(), st.data());
    std::vector<size_t> missing;
    for (size_t j = 0; j < m; ++j) {
      const size_t i = todo[j];
      if (st[j].IsNotFound()) {
        missing.push_back(i);
        continue;
      }
      if (!st[j].ok()) return to_error(st[j]);
      if (family == cfs.archive) {
        Delivery d;
        if (auto r = decode_archived(ids[i], sv(values[j]), d, last ? &(*last)[i] : nullptr); !r)
          return r.error();
        out[i] = d;
        continue;
      }
      auto live = leases.lookup(ids[i], lease);
      if (!live) return live.error();
      auto d = decode_delivery(ids[i], *live ? std::string_view(lease) : sv(values[j]));
      if (!d) return d.error();
      out[i] = *d;
    }
    todo = std::move(missing);
  }
  return out;
}

Result<std::vector<Delivery>> RocksStore::fetch_deliveries(const std::vector<DeliveryId>& ids) {
  auto r = fetch_aligned(db_, {cf(kCfActive), cf(kCfArchive), cf(kCfCreated)}, *leases_, ids);
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
  auto found =
      fetch_aligned(db_, {cf(kCfActive), cf(kCfArchive), cf(kCfCreated)}, *leases_, {id}, &kept);
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

Result<std::vector<std::optional<DeliveryDetail>>> RocksStore::get_deliveries(
    const std::vector<DeliveryId>& ids) {
  return get_deliveries_one_by_one(*this, ids);
}

// ---- log queries ------------------------------------------------------------------------------
// The semantics are storage/log_query.h's; here only how RocksDB's index column families are
// read (docs/storage-schema.md "Keys: partition first").

namespace {

// A delivery index column family under `prefix` (the tenant index: partition, tenant hash; the
// endpoint index: the same and the endpoint), newest first: each key is the prefix then
// be64(~id). Starts at `after` when given, which it skips (Seek lands on it).
class IndexScan final : public DeliveryScan {
 public:
  struct Families {
    rocksdb::ColumnFamilyHandle* index;
    DeliveryFamilies deliveries;
  };
  IndexScan(rocksdb::DB* db, Families cfs, const LeaseLog& leases, std::string prefix,
            size_t key_bytes, size_t chunk, std::optional<DeliveryId> after, const char* bad_key)
      : db_(db),
        cfs_(cfs),
        leases_(leases),
        prefix_(std::move(prefix)),
        key_bytes_(key_bytes),
        chunk_(chunk),
        after_(after),
        bad_key_(bad_key),
        upper_(prefix_successor(prefix_)),
        upper_slice_(sl(upper_)) {
    ro_.iterate_upper_bound = &upper_slice_;
    it_.reset(db_->NewIterator(ro_, cfs_.index));
    std::string start = prefix_;
    if (after_) put_be64(start, ~*after_);
    it_->Seek(sl(start));
  }
  IndexScan(const IndexScan&) = delete;
  IndexScan& operator=(const IndexScan&) = delete;

  Result<std::vector<DeliveryId>> next(size_t at_most) override {
    std::vector<DeliveryId> ids;
    const size_t n = std::min(at_most, chunk_);
    for (; it_->Valid() && ids.size() < n; it_->Next()) {
      if (it_->key().size() != key_bytes_) return make_error(Errc::kCorruption, bad_key_);
      const DeliveryId id = ~get_be64(it_->key().data() + prefix_.size());
      if (after_ && id == *after_) continue;
      ids.push_back(id);
    }
    if (!it_->status().ok()) return to_error(it_->status());
    return ids;
  }
  bool goes_on() const override { return it_->Valid(); }
  Result<std::vector<std::optional<Delivery>>> fetch(const std::vector<DeliveryId>& ids) override {
    return fetch_aligned(db_, cfs_.deliveries, leases_, ids);
  }

 private:
  rocksdb::DB* db_;
  Families cfs_;
  const LeaseLog& leases_;
  const std::string prefix_;
  const size_t key_bytes_, chunk_;
  const std::optional<DeliveryId> after_;
  const char* bad_key_;
  const std::string upper_;
  Slice upper_slice_;
  rocksdb::ReadOptions ro_;
  std::unique_ptr<rocksdb::Iterator> it_;
};

// The notifications column family under `prefix` (partition, tenant hash), newest first.
class NotesScan final : public NotificationScan {
 public:
  NotesScan(rocksdb::DB* db, rocksdb::ColumnFamilyHandle* cf, std::string prefix)
      : upper_(prefix_successor(prefix)), upper_slice_(sl(upper_)) {
    ro_.iterate_upper_bound = &upper_slice_;
    it_.reset(db->NewIterator(ro_, cf));
    it_->Seek(sl(prefix));
  }
  NotesScan(const NotesScan&) = delete;
  NotesScan& operator=(const NotesScan&) = delete;

  Result<std::vector<Notification>> next(size_t at_most) override {
    std::vector<Notification> out;
    for (; it_->Valid() && out.size() < at_most; it_->Next()) {
      auto n = decode_notification(sv(it_->key()), sv(it_->value()));
      if (!n) return n.error();
      out.push_back(std::move(*n));
    }
    if (!it_->status().ok()) return to_error(it_->status());
    return out;
  }
  bool goes_on() const override { return it_->Valid(); }

 private:
  const std::string upper_;
  Slice upper_slice_;
  rocksdb::ReadOptions ro_;
  std::unique_ptr<rocksdb::Iterator> it_;
};

// A tenant's key prefix in the tenant-keyed column families: partition, tenant hash.
std::string tenant_prefix(std::string_view tenant) {
  const uint64_t th = tenant_hash(tenant);
  std::string prefix = partition_prefix(partition_of_hash(th));
  put_be64(prefix, th);
  return prefix;
}

}  // namespace

Result<std::vector<Delivery>> RocksStore::recent_deliveries(std::string_view tenant, size_t limit) {
  // The tenant index holds every delivery of the tenant once, newest first.
  IndexScan scan(db_, {cf(kCfTenantIndex), {cf(kCfActive), cf(kCfArchive), cf(kCfCreated)}},
                 *leases_, tenant_prefix(tenant), kTenantIndexKeyBytes, SIZE_MAX, std::nullopt,
                 "tenant index: bad key");
  return collect_recent(limit, scan);
}

Result<DeliveryPage> RocksStore::list_deliveries(std::string_view tenant,
                                                 std::optional<EndpointId> endpoint,
                                                 std::optional<DeliveryStatus> status, size_t limit,
                                                 std::string_view cursor) {
  auto q = page_query(status, limit, cursor);
  if (!q) return q.error();
  // The tenant index holds every delivery of the tenant once, newest first; the endpoint
  // index the same per endpoint.
  std::string prefix = tenant_prefix(tenant);
  if (endpoint) put_be64(prefix, *endpoint);
  IndexScan scan(db_,
                 {cf(endpoint ? kCfEndpointIndex : kCfTenantIndex),
                  {cf(kCfActive), cf(kCfArchive), cf(kCfCreated)}},
                 *leases_, std::move(prefix),
                 endpoint ? kEndpointIndexKeyBytes : kTenantIndexKeyBytes, kListFetchChunk,
                 q->after, "delivery index: bad key");
  return collect_page(*q, scan);
}

Result<std::vector<Notification>> RocksStore::list_notifications(std::string_view tenant,
                                                                 size_t limit) {
  NotesScan scan(db_, cf(kCfNotifications), tenant_prefix(tenant));
  return collect_notifications(tenant, limit, scan);
}

}  // namespace ringcast::storage
