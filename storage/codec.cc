#include "storage/codec.h"

#include <bit>
#include <cmath>
#include <limits>

namespace ringcast::storage {
namespace {

Error corrupt(const char* what) {
  return make_error(Errc::kCorruption, what, nullptr, "corrupt_record");
}

// Times are stored as wrapping differences so every int64 round-trips exactly.
uint64_t delta(int64_t a, int64_t b) {
  return static_cast<uint64_t>(a) - static_cast<uint64_t>(b);
}
int64_t undelta(uint64_t d, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(b) + d);
}

void put_code(std::string& out, ErrorCode c) {
  put_u8(out, static_cast<uint8_t>(c.kind));
  put_zigzag(out, c.detail);
}
// Any kind byte is accepted: core may add kinds, and an unknown kind prints as "unknown".
ErrorCode get_code(Reader& r) {
  ErrorCode c;
  c.kind = static_cast<ErrorCode::Kind>(r.u8());
  int64_t detail = r.zz();
  if (detail < std::numeric_limits<int16_t>::min() || detail > std::numeric_limits<int16_t>::max())
    r.fail();
  c.detail = static_cast<int16_t>(detail);
  return c;
}

bool version_ok(Reader& r) {
  return r.u8() == kValueVersion && r.ok();
}

constexpr uint8_t kMaxStatus = static_cast<uint8_t>(DeliveryStatus::kSuperseded);
constexpr uint8_t kMaxOutcome = static_cast<uint8_t>(Outcome::kUnknown);
constexpr uint8_t kMaxLadder = static_cast<uint8_t>(Ladder::kSlow);
constexpr uint8_t kMaxSignature = static_cast<uint8_t>(SignatureProfile::kSmengo);
constexpr uint8_t kMaxEndpointState = static_cast<uint8_t>(EndpointState::kDisabled);
constexpr uint8_t kMaxBreakerState = static_cast<uint8_t>(BreakerSnapshot::State::kHalfOpen);

}  // namespace

std::string tenant_key(std::string_view tenant) {
  std::string k;
  k.reserve(2 + tenant.size());
  put_be16(k, partition_of(tenant));
  k.append(tenant.data(), tenant.size());
  return k;
}

std::string idempotency_key(std::string_view tenant, std::string_view event_id) {
  std::string k;
  k.reserve(4 + tenant.size() + event_id.size());
  put_be16(k, partition_of(tenant));
  put_bytes(k, tenant);
  k.append(event_id.data(), event_id.size());
  return k;
}

// ---- event ------------------------------------------------------------------------------------
// The fields both event forms share, after the version byte.
static void put_event_fields(const Event& e, std::string& out) {
  put_fixed64(out, static_cast<uint64_t>(e.created_at.ns()));
  put_fixed64(out, e.payload_hash);
  put_bytes(out, e.tenant);
  put_bytes(out, e.id);
  put_bytes(out, e.type);
}
static void get_event_fields(EventSeq seq, Reader& r, Event& e) {
  e.seq = seq;
  e.created_at = WallTime::from_ns(static_cast<int64_t>(r.fixed64()));
  e.payload_hash = r.fixed64();
  e.tenant = r.bytes();
  e.id = r.bytes();
  e.type = r.bytes();
}

// The trace context's 25 bytes (kEventInLogWithTrace, kEventInlineWithTrace).
static void put_trace(const TraceContext& t, std::string& out) {
  out.append(reinterpret_cast<const char*>(t.trace_id.data()), t.trace_id.size());
  out.append(reinterpret_cast<const char*>(t.span_id.data()), t.span_id.size());
  put_u8(out, t.flags);
}
// False when the bytes are missing or name no valid context (a writer stores only valid ones).
static bool get_trace(Reader& r, TraceContext& t) {
  const std::string_view b = r.fixed(kTraceContextBytes);
  if (b.size() != kTraceContextBytes) return false;
  std::memcpy(t.trace_id.data(), b.data(), t.trace_id.size());
  std::memcpy(t.span_id.data(), b.data() + t.trace_id.size(), t.span_id.size());
  t.flags = static_cast<uint8_t>(b[kTraceContextBytes - 1]);
  return t.valid();
}

void encode_event(const Event& e, std::string& out) {
  out.reserve(out.size() + 32 + e.tenant.size() + e.id.size() + e.type.size() + e.payload.size());
  put_u8(out, kValueVersion);
  put_event_fields(e, out);
  put_bytes(out, e.payload);
}

void encode_event_inline(const Event& e, std::string& out) {
  out.reserve(out.size() + 48 + e.tenant.size() + e.id.size() + e.type.size() +
              e.message_id.size() + e.payload.size() + e.ordering_key.size());
  const bool traced = e.trace.valid();
  const bool keyed = traced || !e.ordering_key.empty();
  put_u8(out, traced  ? kEventInlineWithTrace
              : keyed ? kEventInlineWithOrderingKey
                      : kEventInlineWithMessageId);
  put_event_fields(e, out);
  put_bytes(out, e.message_id);
  put_bytes(out, e.payload);
  if (keyed) put_bytes(out, e.ordering_key);
  if (traced) put_trace(e.trace, out);
}

Result<Event> decode_event(EventSeq seq, std::string_view v) {
  Reader r(v);
  const uint8_t tag = r.u8();
  if (!r.ok() || (tag != kValueVersion && tag != kEventInlineWithMessageId &&
                  tag != kEventInlineWithOrderingKey && tag != kEventInlineWithTrace))
    return corrupt("event: bad version or empty value");
  Event e;
  get_event_fields(seq, r, e);
  if (tag != kValueVersion) e.message_id = r.bytes();
  e.payload = r.bytes();
  if (tag == kEventInlineWithOrderingKey || tag == kEventInlineWithTrace)
    e.ordering_key = r.bytes();
  if (tag == kEventInlineWithTrace && !get_trace(r, e.trace))
    return corrupt("event: bad trace context");
  if (!r.done()) return corrupt("event: truncated or trailing bytes");
  if (payload_hash(e.payload) != e.payload_hash) return corrupt("event: payload hash mismatch");
  // Written before message ids existed (or by a writer that had none): derived from the seq.
  if (e.message_id.empty()) e.message_id = legacy_message_id(e.created_at, seq);
  return e;
}

void encode_event_logged(const Event& e, const PayloadRef& ref, std::string& out) {
  const bool traced = e.trace.valid();
  const bool keyed = traced || !e.ordering_key.empty();
  put_u8(out, traced  ? kEventInLogWithTrace
              : keyed ? kEventInLogWithOrderingKey
                      : kEventInLogWithMessageId);
  put_event_fields(e, out);
  put_bytes(out, e.message_id);
  put_varint(out, ref.segment);
  put_varint(out, ref.offset);
  put_varint(out, ref.size);
  if (keyed) put_bytes(out, e.ordering_key);
  if (traced) put_trace(e.trace, out);
}

Result<StoredEvent> decode_stored_event(EventSeq seq, std::string_view v) {
  const uint8_t tag = v.empty() ? 0 : static_cast<uint8_t>(v[0]);
  if (tag != kEventInLog && tag != kEventInLogWithMessageId && tag != kEventInLogWithOrderingKey &&
      tag != kEventInLogWithTrace) {
    auto e = decode_event(seq, v);
    if (!e) return e.error();
    return StoredEvent{std::move(*e), std::nullopt};
  }
  Reader r(v);
  r.u8();
  StoredEvent s;
  get_event_fields(seq, r, s.event);
  if (tag != kEventInLog) s.event.message_id = r.bytes();
  // Written before message ids existed (or by a writer that had none): one derived from the
  // sequence, stable and unique within this store.
  if (s.event.message_id.empty()) s.event.message_id = legacy_message_id(s.event.created_at, seq);
  PayloadRef ref;
  ref.segment = r.varint();
  ref.offset = r.varint();
  const uint64_t size = r.varint();
  if (tag == kEventInLogWithOrderingKey || tag == kEventInLogWithTrace)
    s.event.ordering_key = r.bytes();
  if (tag == kEventInLogWithTrace && !get_trace(r, s.event.trace))
    return corrupt("event: bad trace context");
  if (!r.done() || size > std::numeric_limits<uint32_t>::max())
    return corrupt("event: truncated or trailing bytes");
  ref.size = static_cast<uint32_t>(size);
  s.ref = ref;
  return s;
}

// ---- delivery ---------------------------------------------------------------------------------
void encode_delivery(const Delivery& d, std::string& out) {
  const int64_t created = d.created_at.ns();
  const uint64_t order_key = d.order_key();
  put_u8(out, order_key != 0         ? kDeliveryWithOrderKey
              : d.lease_expiries > 0 ? kDeliveryWithLeaseExpiries
                                     : kValueVersion);
  put_zigzag(out, static_cast<int64_t>(d.id - d.event));
  put_zigzag(out, static_cast<int64_t>(d.id - d.endpoint));
  put_fixed64(out, static_cast<uint64_t>(created));
  put_zigzag(out, static_cast<int64_t>(delta(d.next_attempt_at.ns(), created)));
  put_zigzag(out, d.first_slow_at.ns());  // usually 0 ("none yet"): one byte
  put_zigzag(out, d.held.count());
  put_varint(out, d.attempts);
  put_u8(out, d.fast_attempts);
  put_u8(out, d.slow_attempts);
  put_varint(out, d.last_http_status);
  put_code(out, d.last_code);
  put_u8(out, static_cast<uint8_t>(d.status));
  put_u8(out, d.flags);
  if (order_key != 0) {
    put_u8(out, d.lease_expiries);
    out.append(reinterpret_cast<const char*>(d.order_key_bytes), sizeof(d.order_key_bytes));
  } else if (d.lease_expiries > 0) {
    put_u8(out, d.lease_expiries);
  }
}

static bool decode_delivery_fields(DeliveryId id, Reader& r, Delivery& d);

Result<void> decode_delivery(DeliveryId id, std::string_view v, Delivery& d) {
  Reader r(v);
  if (!decode_delivery_fields(id, r, d)) return corrupt("delivery: bad version or empty value");
  if (!r.done()) return corrupt("delivery: truncated or trailing bytes");
  return ok();
}

void encode_archived(const Delivery& d, const Attempt& last, std::string& out) {
  encode_delivery(d, out);
  put_varint(out, last.number);
  const size_t at = out.size();
  encode_attempt(last, out);
  // put_bytes' length prefix, inserted before the bytes just encoded.
  std::string len;
  put_varint(len, out.size() - at);
  out.insert(at, len);
}

Result<void> decode_archived(DeliveryId id, std::string_view v, Delivery& d,
                             std::optional<Attempt>* last) {
  Reader r(v);
  if (!decode_delivery_fields(id, r, d)) return corrupt("delivery: bad version or empty value");
  if (r.done()) return ok();
  const uint64_t number = r.varint();
  const std::string_view av = r.bytes();
  if (!r.done() || number > 0xffff) return corrupt("delivery: truncated or trailing bytes");
  if (last) {
    const auto key = attempt_key(id, static_cast<uint16_t>(number));
    auto a = decode_attempt(key.view(), av);
    if (!a) return a.error();
    *last = std::move(*a);
  }
  return ok();
}

static bool decode_delivery_fields(DeliveryId id, Reader& r, Delivery& d) {
  const uint8_t tag = r.u8();
  if (!r.ok() ||
      (tag != kValueVersion && tag != kDeliveryWithLeaseExpiries && tag != kDeliveryWithOrderKey))
    return false;
  d.id = id;
  d.event = id - static_cast<uint64_t>(r.zz());
  d.endpoint = id - static_cast<uint64_t>(r.zz());
  const int64_t created = static_cast<int64_t>(r.fixed64());
  d.created_at = WallTime::from_ns(created);
  d.next_attempt_at = WallTime::from_ns(undelta(static_cast<uint64_t>(r.zz()), created));
  d.first_slow_at = WallTime::from_ns(r.zz());
  d.held = Duration(r.zz());
  d.attempts = static_cast<uint16_t>(r.bounded(0xffff));
  d.fast_attempts = r.u8();
  d.slow_attempts = r.u8();
  d.last_http_status = static_cast<uint16_t>(r.bounded(0xffff));
  d.last_code = get_code(r);
  d.status = static_cast<DeliveryStatus>(r.u8_max(kMaxStatus));
  d.flags = r.u8();
  d.lease_expiries = tag != kValueVersion ? r.u8() : 0;
  for (uint8_t& b : d.order_key_bytes) b = tag == kDeliveryWithOrderKey ? r.u8() : 0;
  return true;
}

Result<Delivery> decode_delivery(DeliveryId id, std::string_view v) {
  Delivery d;
  auto r = decode_delivery(id, v, d);
  if (!r) return r.error();
  return d;
}

// ---- attempt ----------------------------------------------------------------------------------
void encode_attempt(const Attempt& a, std::string& out) {
  put_u8(out, kValueVersion);
  put_u8(out, static_cast<uint8_t>(a.ladder));
  put_u8(out, static_cast<uint8_t>(a.outcome));
  put_code(out, a.code);
  put_varint(out, a.http_status);
  put_u8(out, a.request_written ? 1 : 0);
  put_zigzag(out, a.started_at.ns());
  put_zigzag(out, a.duration.count());
  put_zigzag(out, a.timings.dns.count());
  put_zigzag(out, a.timings.connect.count());
  put_zigzag(out, a.timings.tls.count());
  put_zigzag(out, a.timings.first_byte.count());
  put_zigzag(out, a.timings.total.count());
  put_bytes(out, a.response_prefix);
}

Result<Attempt> decode_attempt(std::string_view key, std::string_view v) {
  if (key.size() != kAttemptKeyBytes) return corrupt("attempt: bad key");
  Reader r(v);
  if (!version_ok(r)) return corrupt("attempt: bad version or empty value");
  Attempt a;
  a.delivery = get_be64(key.data());
  a.number = get_be16(key.data() + 8);
  a.ladder = static_cast<Ladder>(r.u8_max(kMaxLadder));
  a.outcome = static_cast<Outcome>(r.u8_max(kMaxOutcome));
  a.code = get_code(r);
  a.http_status = static_cast<uint16_t>(r.bounded(0xffff));
  a.request_written = r.u8_max(1) != 0;
  a.started_at = WallTime::from_ns(r.zz());
  a.duration = Duration(r.zz());
  a.timings.dns = Duration(r.zz());
  a.timings.connect = Duration(r.zz());
  a.timings.tls = Duration(r.zz());
  a.timings.first_byte = Duration(r.zz());
  a.timings.total = Duration(r.zz());
  a.response_prefix = r.bytes();
  if (!r.done()) return corrupt("attempt: truncated or trailing bytes");
  return a;
}

// ---- endpoint ---------------------------------------------------------------------------------
void encode_endpoint(const Endpoint& e, std::string& out) {
  const bool traceparent = e.send_traceparent;
  const bool ordering = traceparent || e.ordering != Ordering::kNone ||
                        e.on_head_failure != OnHeadFailure::kBlock || e.supersede;
  const bool reconcile = ordering || e.on_unknown != OnUnknown::kRetry || !e.status_url.empty();
  const bool extended = reconcile || e.idempotency_key || !e.headers.empty();
  put_u8(out, traceparent ? kEndpointWithTraceparent
              : ordering  ? kEndpointWithOrdering
              : reconcile ? kEndpointWithReconcile
              : extended  ? kEndpointWithHeaders
                          : kValueVersion);
  put_bytes(out, e.tenant);
  put_bytes(out, e.url);
  put_varint(out, e.event_types.size());
  for (const auto& t : e.event_types) put_bytes(out, t);
  put_bytes(out, e.policy);
  put_u8(out, static_cast<uint8_t>(e.signature));
  put_varint(out, e.secrets.size());
  for (const auto& s : e.secrets) {
    put_bytes(out, s.key);
    put_zigzag(out, s.expires_at.ns());
  }
  put_fixed64(out, std::bit_cast<uint64_t>(e.rate_limit.per_second));
  put_varint(out, e.rate_limit.burst);
  put_varint(out, e.max_in_flight);
  put_u8(out, static_cast<uint8_t>(e.state));
  put_code(out, e.disabled_reason);
  put_zigzag(out, e.created_at.ns());
  put_zigzag(out, e.updated_at.ns());
  if (!extended) return;
  put_u8(out, e.idempotency_key ? 1 : 0);
  put_varint(out, e.headers.size());
  for (const auto& h : e.headers) {
    put_bytes(out, h.name);
    put_bytes(out, h.value);
  }
  if (!reconcile) return;
  put_u8(out, static_cast<uint8_t>(e.on_unknown));
  put_bytes(out, e.status_url);
  if (!ordering) return;
  put_u8(out, static_cast<uint8_t>(e.ordering));
  put_u8(out, static_cast<uint8_t>(e.on_head_failure));
  put_u8(out, e.supersede ? 1 : 0);
  if (!traceparent) return;
  put_u8(out, 1);
}

Result<Endpoint> decode_endpoint(EndpointId id, std::string_view v) {
  Reader r(v);
  const uint8_t tag = r.u8();
  if (!r.ok() ||
      (tag != kValueVersion && tag != kEndpointWithHeaders && tag != kEndpointWithReconcile &&
       tag != kEndpointWithOrdering && tag != kEndpointWithTraceparent))
    return corrupt("endpoint: bad version or empty value");
  Endpoint e;
  e.id = id;
  e.tenant = r.bytes();
  e.url = r.bytes();
  // Each element takes at least one byte: a count above the remaining bytes is corruption
  // (and must not turn into a huge reserve()).
  uint64_t n = r.bounded(r.remaining());
  for (uint64_t i = 0; i < n && r.ok(); ++i) e.event_types.emplace_back(r.bytes());
  e.policy = r.bytes();
  e.signature = static_cast<SignatureProfile>(r.u8_max(kMaxSignature));
  n = r.bounded(r.remaining() / 2);
  for (uint64_t i = 0; i < n && r.ok(); ++i) {
    Secret s;
    s.key = r.bytes();
    s.expires_at = WallTime::from_ns(r.zz());
    e.secrets.push_back(std::move(s));
  }
  e.rate_limit.per_second = std::bit_cast<double>(r.fixed64());
  // A rate the API could never have accepted (NaN, infinite, negative) is a corrupt record,
  // not a value for the scheduler's token arithmetic.
  if (!std::isfinite(e.rate_limit.per_second) || e.rate_limit.per_second < 0) r.fail();
  e.rate_limit.burst = static_cast<uint32_t>(r.bounded(0xffffffff));
  e.max_in_flight = static_cast<uint32_t>(r.bounded(0xffffffff));
  e.state = static_cast<EndpointState>(r.u8_max(kMaxEndpointState));
  e.disabled_reason = get_code(r);
  e.created_at = WallTime::from_ns(r.zz());
  e.updated_at = WallTime::from_ns(r.zz());
  if (tag != kValueVersion) {
    e.idempotency_key = r.u8_max(1) != 0;
    // Each header takes at least two bytes (two lengths).
    n = r.bounded(r.remaining() / 2);
    for (uint64_t i = 0; i < n && r.ok(); ++i) {
      EndpointHeader h;
      h.name = r.bytes();
      h.value = r.bytes();
      e.headers.push_back(std::move(h));
    }
  }
  if (tag == kEndpointWithReconcile || tag == kEndpointWithOrdering ||
      tag == kEndpointWithTraceparent) {
    e.on_unknown = static_cast<OnUnknown>(r.u8_max(static_cast<uint8_t>(OnUnknown::kReview)));
    e.status_url = r.bytes();
  }
  if (tag == kEndpointWithOrdering || tag == kEndpointWithTraceparent) {
    e.ordering = static_cast<Ordering>(r.u8_max(static_cast<uint8_t>(Ordering::kEndpoint)));
    e.on_head_failure = static_cast<OnHeadFailure>(r.u8_max(1));
    e.supersede = r.u8_max(1) != 0;
  }
  if (tag == kEndpointWithTraceparent) e.send_traceparent = r.u8_max(1) != 0;
  if (!r.done()) return corrupt("endpoint: truncated or trailing bytes");
  return e;
}

// ---- tenant -----------------------------------------------------------------------------------
void encode_tenant(const Tenant& t, std::string& out) {
  const bool settings = !t.owner_email.empty() || t.owner_email_asked_at != WallTime();
  put_u8(out, settings ? kTenantWithConfirmation : kValueVersion);
  put_u8(out, t.subscription_active ? 1 : 0);
  put_u8(out, static_cast<uint8_t>(t.breaker.state));
  put_varint(out, t.breaker.failed_probes);
  put_zigzag(out, t.breaker.opened_at.ns());
  put_zigzag(out, t.breaker.reopen_at.ns());
  put_zigzag(out, t.updated_at.ns());
  if (!settings) return;
  put_bytes(out, t.owner_email);
  put_u8(out, t.owner_email_confirmed ? 1 : 0);
  put_zigzag(out, t.owner_email_asked_at.ns());
}

Result<Tenant> decode_tenant(std::string_view key, std::string_view v) {
  if (key.size() < 2) return corrupt("tenant: bad key");
  Reader r(v);
  const uint8_t tag = r.u8();
  if (!r.ok() ||
      (tag != kValueVersion && tag != kTenantWithSettings && tag != kTenantWithConfirmation))
    return corrupt("tenant: bad version or empty value");
  Tenant t;
  t.name.assign(key.substr(2));
  t.subscription_active = r.u8_max(1) != 0;
  t.breaker.state = static_cast<BreakerSnapshot::State>(r.u8_max(kMaxBreakerState));
  t.breaker.failed_probes = static_cast<uint32_t>(r.bounded(0xffffffff));
  t.breaker.opened_at = WallTime::from_ns(r.zz());
  t.breaker.reopen_at = WallTime::from_ns(r.zz());
  t.updated_at = WallTime::from_ns(r.zz());
  if (tag == kTenantWithSettings) {  // from before confirmation: trusted as it was
    t.owner_email = r.bytes();
    t.owner_email_confirmed = !t.owner_email.empty();
  }
  if (tag == kTenantWithConfirmation) {
    t.owner_email = r.bytes();
    t.owner_email_confirmed = r.u8_max(1) != 0;
    t.owner_email_asked_at = WallTime::from_ns(r.zz());
  }
  if (!r.done()) return corrupt("tenant: truncated or trailing bytes");
  return t;
}

// ---- API key (SPEC R14.1) ----------------------------------------------------------------------
void encode_api_key(const ApiKey& k, std::string& out) {
  put_u8(out, kValueVersion);
  put_bytes(out, k.tenant);
  put_bytes(out, k.secret_hash);
  put_bytes(out, k.name);
  put_u8(out, k.read_only ? 1 : 0);
  put_zigzag(out, k.created_at.ns());
  put_zigzag(out, k.expires_at.ns());
}

Result<ApiKey> decode_api_key(std::string_view id, std::string_view v) {
  Reader r(v);
  if (!version_ok(r)) return corrupt("api key: bad version or empty value");
  ApiKey k;
  k.id.assign(id);
  k.tenant = r.bytes();
  k.secret_hash = r.bytes();
  k.name = r.bytes();
  k.read_only = r.u8_max(1) != 0;
  k.created_at = WallTime::from_ns(r.zz());
  k.expires_at = WallTime::from_ns(r.zz());
  if (!r.done() || k.secret_hash.size() != 32) return corrupt("api key: truncated or bad hash");
  return k;
}

// ---- idempotency key --------------------------------------------------------------------------
void encode_id_group(const uint64_t* sorted_ids, size_t n, std::string& out) {
  out.push_back(static_cast<char>(kValueVersion));
  put_varint(out, n);
  uint64_t prev = 0;
  for (size_t i = 0; i < n; ++i) {
    put_varint(out, sorted_ids[i] - prev);
    prev = sorted_ids[i];
  }
}

Result<std::vector<uint64_t>> decode_id_group(Partition p, std::string_view in) {
  Reader r(in);
  if (r.u8() != kValueVersion) return corrupt("id group: version");
  const uint64_t n = r.varint();
  // Every id takes at least one byte: a count beyond that is corrupt (and bounds the reserve).
  if (!r.ok() || n == 0 || n > r.remaining()) return corrupt("id group: count");
  std::vector<uint64_t> ids;
  ids.reserve(n);
  uint64_t prev = 0;
  for (uint64_t i = 0; i < n; ++i) {
    const uint64_t d = r.varint();
    if (!r.ok() || (i > 0 && d == 0) || d > ~prev) return corrupt("id group: order");
    prev += d;
    if (id_partition(prev) != p) return corrupt("id group: partition");
    ids.push_back(prev);
  }
  if (!r.done()) return corrupt("id group: trailing bytes");
  return ids;
}

void encode_event_key(const EventKeyRecord& k, std::string& out) {
  put_u8(out, kValueVersion);
  put_varint(out, k.seq);
  put_fixed64(out, k.payload_hash);
  put_varint(out, k.deliveries);
  // The message id's 128 bits (records written before they were kept end here).
  if (!k.message.empty()) {
    put_fixed64(out, k.message.hi);
    put_fixed64(out, k.message.lo);
  }
}

Result<EventKeyRecord> decode_event_key(std::string_view v) {
  Reader r(v);
  if (!version_ok(r)) return corrupt("idempotency key: bad version or empty value");
  EventKeyRecord k;
  k.seq = r.varint();
  k.payload_hash = r.fixed64();
  k.deliveries = static_cast<uint32_t>(r.bounded(0xffffffff));
  if (r.ok() && !r.done()) {
    k.message.hi = r.fixed64();
    k.message.lo = r.fixed64();
  }
  if (!r.done()) return corrupt("idempotency key: truncated or trailing bytes");
  return k;
}

// ---- notification -----------------------------------------------------------------------------
void encode_notification(const Notification& n, std::string& out) {
  const bool email = !n.owner_email.empty() || !n.endpoint_url.empty() || n.trigger != 0 ||
                     n.attempts != 0 || n.last_http_status != 0;
  put_u8(out, email ? kNotificationWithEmail : kValueVersion);
  put_bytes(out, n.tenant);
  put_varint(out, n.endpoint);
  put_bytes(out, n.kind);
  put_code(out, n.reason);
  put_zigzag(out, n.at.ns());
  put_bytes(out, n.message);
  if (!email) return;
  // Version 8's trailing fields: what the owner's e-mail needs (SPEC R8.4).
  put_bytes(out, n.owner_email);
  put_bytes(out, n.endpoint_url);
  put_varint(out, n.trigger);
  put_varint(out, n.attempts);
  put_varint(out, n.last_http_status);
}

Result<Notification> decode_notification(std::string_view key, std::string_view v) {
  if (key.size() != kNotificationKeyBytes) return corrupt("notification: bad key");
  Reader r(v);
  const uint8_t tag = r.u8();
  if (!r.ok() || (tag != kValueVersion && tag != kNotificationWithEmail))
    return corrupt("notification: bad version or empty value");
  Notification n;
  n.seq = ~get_be64(key.data() + 10);
  n.tenant = r.bytes();
  n.endpoint = r.varint();
  n.kind = r.bytes();
  n.reason = get_code(r);
  n.at = WallTime::from_ns(r.zz());
  n.message = r.bytes();
  if (tag == kNotificationWithEmail) {  // the owner's e-mail's fields (version 1 has none)
    n.owner_email = r.bytes();
    n.endpoint_url = r.bytes();
    n.trigger = r.varint();
    n.attempts = static_cast<uint16_t>(r.bounded(0xffff));
    n.last_http_status = static_cast<uint16_t>(r.bounded(0xffff));
  }
  if (!r.done()) return corrupt("notification: truncated or trailing bytes");
  return n;
}

// ---- cursor -----------------------------------------------------------------------------------
std::string encode_cursor(DeliveryId last) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string c = "d1";
  for (int i = 15; i >= 0; --i) c.push_back(kHex[(last >> (4 * i)) & 0xf]);
  return c;
}

Result<std::optional<DeliveryId>> decode_list_cursor(std::string_view cursor) {
  if (cursor.empty()) return std::optional<DeliveryId>();
  auto c = decode_cursor(cursor);
  if (!c) return c.error();
  return std::optional<DeliveryId>(*c);
}

Result<DeliveryId> decode_cursor(std::string_view c) {
  auto bad = make_error(Errc::kInvalidArgument, "malformed cursor", "cursor", "invalid_cursor");
  if (c.size() != 18 || c.substr(0, 2) != "d1") return bad;
  DeliveryId v = 0;
  for (char ch : c.substr(2)) {
    int d;
    if (ch >= '0' && ch <= '9')
      d = ch - '0';
    else if (ch >= 'a' && ch <= 'f')
      d = ch - 'a' + 10;
    else
      return bad;
    v = (v << 4) | static_cast<uint64_t>(d);
  }
  return v;
}

}  // namespace ringcast::storage
