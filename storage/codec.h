// Binary encoding of the store's keys and values (docs/storage-schema.md). Invariant: every
// value starts with a version byte, every decoder checks bounds, enum ranges and that the whole
// value was consumed, and answers Errc::kCorruption for anything else: never a crash, never UB.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

#include "core/result.h"
#include "core/store.h"
#include "core/types.h"
#include "storage/payload_log.h"

namespace ringcast::storage {

inline constexpr uint8_t kValueVersion = 1;

// ---- primitive writers (append to a std::string) ---------------------------------------------
inline void put_u8(std::string& out, uint8_t v) {
  out.push_back(static_cast<char>(v));
}
inline void put_be16(std::string& out, uint16_t v) {
  char b[2] = {static_cast<char>(v >> 8), static_cast<char>(v)};
  out.append(b, 2);
}
inline void put_be32(std::string& out, uint32_t v) {
  char b[4];
  for (int i = 0; i < 4; ++i) b[i] = static_cast<char>(v >> (24 - 8 * i));
  out.append(b, 4);
}
inline void put_be64(std::string& out, uint64_t v) {
  char b[8];
  for (int i = 0; i < 8; ++i) b[i] = static_cast<char>(v >> (56 - 8 * i));
  out.append(b, 8);
}
inline void put_fixed64(std::string& out, uint64_t v) {  // little endian, for values
  char b[8];
  for (int i = 0; i < 8; ++i) b[i] = static_cast<char>(v >> (8 * i));
  out.append(b, 8);
}
inline void put_varint(std::string& out, uint64_t v) {
  char b[10];
  size_t n = 0;
  while (v >= 0x80) {
    b[n++] = static_cast<char>((v & 0x7f) | 0x80);
    v >>= 7;
  }
  b[n++] = static_cast<char>(v);
  out.append(b, n);
}
inline uint64_t zigzag(int64_t v) {
  return (static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63);
}
inline int64_t unzigzag(uint64_t v) {
  return static_cast<int64_t>(v >> 1) ^ -static_cast<int64_t>(v & 1);
}
inline void put_zigzag(std::string& out, int64_t v) {
  put_varint(out, zigzag(v));
}
inline void put_bytes(std::string& out, std::string_view s) {
  put_varint(out, s.size());
  out.append(s.data(), s.size());
}

inline uint64_t get_be64(const char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}
inline uint32_t get_be32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}
inline uint16_t get_be16(const char* p) {
  return static_cast<uint16_t>((static_cast<uint8_t>(p[0]) << 8) | static_cast<uint8_t>(p[1]));
}

// A bounds-checked reader. After the first failure every read returns 0/empty and ok() is false.
class Reader {
 public:
  explicit Reader(std::string_view in) : p_(in.data()), end_(in.data() + in.size()) {}
  bool ok() const { return ok_; }
  bool done() const { return ok_ && p_ == end_; }
  size_t remaining() const { return static_cast<size_t>(end_ - p_); }

  uint8_t u8() {
    if (!need(1)) return 0;
    return static_cast<uint8_t>(*p_++);
  }
  uint64_t be64() {
    if (!need(8)) return 0;
    uint64_t v = get_be64(p_);
    p_ += 8;
    return v;
  }
  uint16_t be16() {
    if (!need(2)) return 0;
    uint16_t v = get_be16(p_);
    p_ += 2;
    return v;
  }
  uint64_t fixed64() {
    if (!need(8)) return 0;
    uint64_t v = 0;
    for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p_[i]);
    p_ += 8;
    return v;
  }
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (!need(1)) return 0;
      uint8_t b = static_cast<uint8_t>(*p_++);
      if (shift == 63 && b > 1) return fail();
      v |= uint64_t{b & 0x7fu} << shift;
      if (!(b & 0x80)) return v;
    }
    return fail();
  }
  int64_t zz() { return unzigzag(varint()); }
  // Exactly `n` raw bytes.
  std::string_view fixed(size_t n) {
    if (!need(n)) return std::string_view();
    std::string_view s(p_, n);
    p_ += n;
    return s;
  }
  std::string_view bytes() {
    uint64_t n = varint();
    if (!ok_ || n > remaining()) return fail(), std::string_view();
    std::string_view s(p_, n);
    p_ += n;
    return s;
  }
  // A varint that must fit `max` (enum ranges, small counters).
  uint64_t bounded(uint64_t max) {
    uint64_t v = varint();
    return v > max ? fail() : v;
  }
  uint8_t u8_max(uint8_t max) {
    uint8_t v = u8();
    return v > max ? static_cast<uint8_t>(fail()) : v;
  }
  uint64_t fail() {
    ok_ = false;
    p_ = end_;
    return 0;
  }

 private:
  bool need(size_t n) {
    if (!ok_ || remaining() < n) {
      fail();
      return false;
    }
    return true;
  }
  const char* p_;
  const char* end_;
  bool ok_ = true;
};

// ---- keys (big endian so that byte order is numeric order; partition first) ------------------
inline constexpr size_t kIdKeyBytes = 8;
inline constexpr size_t kAttemptKeyBytes = 10;
inline constexpr size_t kTenantIndexKeyBytes = 18;
inline constexpr size_t kEndpointIndexKeyBytes = 26;
inline constexpr size_t kEventDeliveryKeyBytes = 16;
inline constexpr size_t kNotificationKeyBytes = 18;
inline constexpr size_t kExpiryKeyBytes = 19;
inline constexpr size_t kHwmKeyBytes = 11;

// Fixed-size key on the stack: no allocation per record on the write path.
template <size_t N>
struct FixedKey {
  char data[N];
  std::string_view view() const { return {data, N}; }
};

inline void be64_at(char* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<char>(v >> (56 - 8 * i));
}
inline void be32_at(char* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<char>(v >> (24 - 8 * i));
}
inline void be16_at(char* p, uint16_t v) {
  p[0] = static_cast<char>(v >> 8);
  p[1] = static_cast<char>(v);
}

// events, deliveries (active and archive), endpoints: the id itself (its top 16 bits are the
// partition).
inline FixedKey<kIdKeyBytes> id_key(uint64_t id) {
  FixedKey<kIdKeyBytes> k;
  be64_at(k.data, id);
  return k;
}
inline FixedKey<kAttemptKeyBytes> attempt_key(DeliveryId d, uint16_t number) {
  FixedKey<kAttemptKeyBytes> k;
  be64_at(k.data, d);
  be16_at(k.data + 8, number);
  return k;
}
inline Partition partition_of_hash(uint64_t th) {
  return static_cast<Partition>(th % kPartitions);
}
// idx_tenant: partition | tenant hash | ~delivery id (newest first in forward order)
inline FixedKey<kTenantIndexKeyBytes> tenant_index_key(uint64_t th, DeliveryId d) {
  FixedKey<kTenantIndexKeyBytes> k;
  be16_at(k.data, partition_of_hash(th));
  be64_at(k.data + 2, th);
  be64_at(k.data + 10, ~d);
  return k;
}
// idx_endpoint: partition | tenant hash | endpoint | ~delivery id
inline FixedKey<kEndpointIndexKeyBytes> endpoint_index_key(uint64_t th, EndpointId e,
                                                           DeliveryId d) {
  FixedKey<kEndpointIndexKeyBytes> k;
  be16_at(k.data, partition_of_hash(th));
  be64_at(k.data + 2, th);
  be64_at(k.data + 10, e);
  be64_at(k.data + 18, ~d);
  return k;
}
inline FixedKey<kEventDeliveryKeyBytes> event_delivery_key(EventSeq ev, DeliveryId d) {
  FixedKey<kEventDeliveryKeyBytes> k;
  be64_at(k.data, ev);
  be64_at(k.data + 8, d);
  return k;
}
inline FixedKey<kNotificationKeyBytes> notification_key(uint64_t th, uint64_t seq) {
  FixedKey<kNotificationKeyBytes> k;
  be16_at(k.data, partition_of_hash(th));
  be64_at(k.data + 2, th);
  be64_at(k.data + 10, ~seq);
  return k;
}

// kEvent, kDelivery: one id per entry (the key's id). kEventGroup, kDeliveryGroup: the ids of
// one write() in one partition, in one entry (one memtable insert per batch instead of one per
// record); the key's id is a per-store counter and the value the sorted ids (encode_id_group).
enum class ExpiryKind : uint8_t {
  kEvent = 1,
  kDelivery = 2,
  kNotification = 3,
  kEventGroup = 4,
  kDeliveryGroup = 5,
};
// expiry: partition | stamp ms | kind | id. Value: tenant hash for notifications, the id group
// for the group kinds, else empty.
inline FixedKey<kExpiryKeyBytes> expiry_key(Partition p, uint64_t stamp_ms, ExpiryKind kind,
                                            uint64_t id) {
  FixedKey<kExpiryKeyBytes> k;
  be16_at(k.data, p);
  be64_at(k.data + 2, stamp_ms);
  k.data[10] = static_cast<char>(kind);
  be64_at(k.data + 11, id);
  return k;
}
// meta: 'h' | partition | id: the highest id sequence ever deleted (ids are never reused).
inline FixedKey<kHwmKeyBytes> hwm_key(Partition p, uint64_t id) {
  FixedKey<kHwmKeyBytes> k;
  k.data[0] = 'h';
  be16_at(k.data + 1, p);
  be64_at(k.data + 3, id);
  return k;
}
// meta: 'f' | partition: the partition's created floor, fixed64 (storage/created_only.h): every
// delivery of it created below that id sequence has a record in deliveries_active or
// deliveries_archive, so recovery scans deliveries_created from there.
inline constexpr size_t kFloorKeyBytes = 3;
inline FixedKey<kFloorKeyBytes> created_floor_key(Partition p) {
  FixedKey<kFloorKeyBytes> k;
  k.data[0] = 'f';
  be16_at(k.data + 1, p);
  return k;
}
// meta: 'o' | notification seq: the notification still has to reach the operator webhook
// (value: its tenant hash, fixed64). Written with the notification, deleted once it was POSTed
// or given up (StoreOptions::notification_outbox).
inline constexpr size_t kOutboxKeyBytes = 9;
inline FixedKey<kOutboxKeyBytes> outbox_key(uint64_t seq) {
  FixedKey<kOutboxKeyBytes> k;
  k.data[0] = 'o';
  be64_at(k.data + 1, seq);
  return k;
}
// meta: 'k' | key id (SPEC R14.1): one tenant-scoped API key (encode_api_key).
inline std::string api_key_key(std::string_view id) {
  std::string k(1, 'k');
  k += id;
  return k;
}
// meta: 'c' | tenant: the tenant's portal cutoff (Store::put_portal_cutoff), fixed64 wall ms.
inline std::string portal_cutoff_key(std::string_view tenant) {
  std::string k(1, 'c');
  k += tenant;
  return k;
}
// meta: 's' | name: a node-wide secret (Store::node_secret), the raw text.
inline std::string node_secret_key(std::string_view name) {
  std::string k(1, 's');
  k += name;
  return k;
}
// meta: 'm' | notification seq: the owner's e-mail of the notification is still to be sent
// (value: its tenant hash, fixed64). Written with a notification that names an owner_email,
// deleted once the e-mail was accepted by the relay or given up (StoreOptions::mail_outbox).
inline FixedKey<kOutboxKeyBytes> mail_outbox_key(uint64_t seq) {
  FixedKey<kOutboxKeyBytes> k;
  k.data[0] = 'm';
  be64_at(k.data + 1, seq);
  return k;
}
// tenants: partition | name
std::string tenant_key(std::string_view tenant);
// idempotency: partition | varint(len tenant) | tenant | event id
std::string idempotency_key(std::string_view tenant, std::string_view event_id);

// ---- values -----------------------------------------------------------------------------------
// The event value with its payload inline (version 1): what the store wrote before the payload
// log, still read; e.payload_hash must be set.
void encode_event(const Event& e, std::string& out);
Result<Event> decode_event(EventSeq seq, std::string_view v);
// The event value the store writes: the head of encode_event and a PayloadRef into the payload
// log instead of the bytes (its own version tag, kEventInLog). decode_stored_event reads both
// forms: `ref` is set when the payload is still to be read from the log (and checked against
// event.payload_hash), empty when the value held the bytes (a store written before the log).
inline constexpr uint8_t kEventInLog = 2;
// The same with the event's message id (SPEC R11.3), what the store writes since schema
// version 2. The older forms are still read; their message id is legacy_message_id().
inline constexpr uint8_t kEventInLogWithMessageId = 3;
void encode_event_logged(const Event& e, const PayloadRef& ref, std::string& out);
// The event with its payload inline and its message id: what the Redis store writes (the
// receivers' webhook id must survive a move of the partition to another node, SPEC R11.3).
// decode_event reads it as well as version 1.
inline constexpr uint8_t kEventInlineWithMessageId = 4;
void encode_event_inline(const Event& e, std::string& out);
// An event with an ordering key (SPEC R13.1) is written with its own tag, the form's fields
// then the key (bytes): kEventInLogWithOrderingKey (the RocksDB store's, after
// kEventInLogWithMessageId's fields) and kEventInlineWithOrderingKey (the Redis store's, after
// kEventInlineWithMessageId's). An event without one keeps the older tag.
inline constexpr uint8_t kEventInLogWithOrderingKey = 13;
inline constexpr uint8_t kEventInlineWithOrderingKey = 14;
// An event whose producer sent a trace context (docs/tracing.md: Event::trace) is written with
// its own tag, the ordering-key form's fields (the key as bytes, empty when none) then the
// context's 25 bytes (trace id 16, intake span id 8, flags 1): kEventInLogWithTrace (after
// kEventInLogWithOrderingKey's fields) and kEventInlineWithTrace (after
// kEventInlineWithOrderingKey's). An event without one keeps the older tags.
inline constexpr uint8_t kEventInLogWithTrace = 15;
inline constexpr uint8_t kEventInlineWithTrace = 16;
inline constexpr size_t kTraceContextBytes = 25;
struct StoredEvent {
  Event event;
  std::optional<PayloadRef> ref;
};
Result<StoredEvent> decode_stored_event(EventSeq seq, std::string_view v);

// A delivery a crash left in flight at least once (Delivery::lease_expiries > 0) is written with
// its own tag: version 1's fields, then lease_expiries (u8). Every other delivery stays version 1
// (a binary from before reads it). decode_delivery reads both.
inline constexpr uint8_t kDeliveryWithLeaseExpiries = 9;
// An ordered delivery (SPEC R13: Delivery::order_key() != 0) is written with tag 12: version
// 9's fields (lease_expiries always), then the 56-bit order key (7 bytes, little-endian).
inline constexpr uint8_t kDeliveryWithOrderKey = 12;
void encode_delivery(const Delivery& d, std::string& out);
// Allocation-free: recovery decodes a million of these.
Result<void> decode_delivery(DeliveryId id, std::string_view v, Delivery& out);
Result<Delivery> decode_delivery(DeliveryId id, std::string_view v);

// A terminal delivery in `deliveries_archive` can carry the attempt that ended it in the same
// value (delivery, varint number, length-prefixed attempt): that attempt then has no record of
// its own in `attempts`, which saves one memtable insert per delivered attempt.
// decode_archived reads both forms (last stays empty without one; null: not decoded).
void encode_attempt(const Attempt& a, std::string& out);
void encode_archived(const Delivery& d, const Attempt& last, std::string& out);
Result<void> decode_archived(DeliveryId id, std::string_view v, Delivery& d,
                             std::optional<Attempt>* last);
Result<Attempt> decode_attempt(std::string_view key, std::string_view v);

// An endpoint is written as version 1 while it uses neither extra headers nor the
// Idempotency-Key option (so a binary from before either existed still reads it), else with
// its own tag: version 1's fields, then a flags byte (bit 0: idempotency_key), a header count
// and the name/value pairs. decode_endpoint reads both (version 1: no headers, option off).
inline constexpr uint8_t kEndpointWithHeaders = 5;
// Version 6 adds, after version 5's fields, the reconciliation settings (R12.11): on_unknown
// (u8) and status_url (bytes). Written only when they differ from the defaults.
inline constexpr uint8_t kEndpointWithReconcile = 6;
// Version 11 adds, after version 6's fields, the ordering settings (SPEC R13): ordering (u8),
// on_head_failure (u8), supersede (u8). Written only when they differ from the defaults.
inline constexpr uint8_t kEndpointWithOrdering = 11;
// Version 17 adds, after version 11's fields, send_traceparent (u8; docs/tracing.md). Written
// only when it is on.
inline constexpr uint8_t kEndpointWithTraceparent = 17;
// A tenant value with the owner's e-mail (SPEC R8.4) after the version-1 fields: an address
// written so was set before confirmation existed and reads back confirmed.
inline constexpr uint8_t kTenantWithSettings = 7;
// Version 10: version 7's, then whether the address is confirmed (u8) and when the last
// confirmation e-mail was asked for (zigzag ns; SPEC R14, docs/security.md "Owner e-mail").
inline constexpr uint8_t kTenantWithConfirmation = 10;
void encode_endpoint(const Endpoint& e, std::string& out);
Result<Endpoint> decode_endpoint(EndpointId id, std::string_view v);

void encode_tenant(const Tenant& t, std::string& out);
// An API key's record without its id (the key names it).
void encode_api_key(const ApiKey& k, std::string& out);
Result<ApiKey> decode_api_key(std::string_view id, std::string_view v);
Result<Tenant> decode_tenant(std::string_view key, std::string_view v);

void encode_event_key(const EventKeyRecord& r, std::string& out);
// A sorted, non-empty list of ids of one partition: version, count, first id, then deltas.
void encode_id_group(const uint64_t* sorted_ids, size_t n, std::string& out);
// Checks the order and that every id is in partition p.
Result<std::vector<uint64_t>> decode_id_group(Partition p, std::string_view in);
Result<EventKeyRecord> decode_event_key(std::string_view v);

// Version 8 adds, after version 1's fields, what the owner's e-mail needs (SPEC R8.4):
// owner_email, endpoint_url (bytes), trigger, attempts, last_http_status (varints). Written
// only when one of them is set; version 1 records (written before) still decode.
inline constexpr uint8_t kNotificationWithEmail = 8;
void encode_notification(const Notification& n, std::string& out);
Result<Notification> decode_notification(std::string_view key, std::string_view v);

// The cursor of list_deliveries: opaque to callers ("d1" + 16 hex digits of the last id seen).
std::string encode_cursor(DeliveryId last);
Result<DeliveryId> decode_cursor(std::string_view cursor);
// A list call's cursor as both stores take it: empty = from the newest, else decode_cursor.
Result<std::optional<DeliveryId>> decode_list_cursor(std::string_view cursor);

// The most items one list call returns, in every store (the API's limits.max_list_limit).
inline constexpr size_t kListLimitMax = 1000;

}  // namespace ringcast::storage
