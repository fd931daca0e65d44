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

#include "storage/codec.h"
#include "storage/lease_log.h"
#include "storage/payload_log.h"
#include "storage/rocks_store.h"
#include "storage/rocks_store_internal.h"
#include "storage/status.h"

namespace ringcast::storage {

using namespace rocks_detail;  // the store's shared helpers (rocks_store_internal.h)

namespace {

constexpr size_t kFetchChunk = 64;

}  // namespace

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

}  // namespace ringcast::storage
