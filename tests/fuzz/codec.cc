// Fuzz target: the store's value codecs (storage/codec.h: every decode_*), which read what is
// on disk (a torn write, a bit flip, a downgrade). Any bytes decode or give kCorruption (the
// cursor: kInvalidArgument); never a crash or UB. What decodes re-encodes to bytes that decode
// again and re-encode identically (the encoding of a decoded value is stable), and a decoded
// record's names print (unknown enum values included).
#include <string>

#include "storage/codec.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

using namespace ringcast;
using namespace ringcast::storage;

void expect_corrupt(const Error& e) {
  FUZZ_CHECK(e.code == Errc::kCorruption);
}

void print_names(const Delivery& d) {
  (void)delivery_status_name(d.status);
  (void)d.last_code.str();
}

void delivery(uint64_t id, std::string_view v) {
  Delivery d;
  auto r = decode_delivery(id, v, d);
  if (!r) return expect_corrupt(r.error());
  print_names(d);
  std::string e1, e2;
  encode_delivery(d, e1);
  Delivery d2;
  FUZZ_CHECK(decode_delivery(id, e1, d2).ok());
  encode_delivery(d2, e2);
  FUZZ_CHECK(e1 == e2);
  FUZZ_CHECK(d2.id == id && d2.event == d.event && d2.endpoint == d.endpoint);
}

void archived(uint64_t id, std::string_view v) {
  Delivery d;
  std::optional<Attempt> last;
  auto r = decode_archived(id, v, d, &last);
  if (!r) return expect_corrupt(r.error());
  print_names(d);
  if (!last) {
    std::string e1, e2;
    encode_delivery(d, e1);
    Delivery d2;
    std::optional<Attempt> none;
    FUZZ_CHECK(decode_archived(id, e1, d2, &none).ok() && !none);
    encode_delivery(d2, e2);
    FUZZ_CHECK(e1 == e2);
    return;
  }
  (void)outcome_name(last->outcome);
  (void)last->code.str();
  std::string e1, e2;
  encode_archived(d, *last, e1);
  Delivery d2;
  std::optional<Attempt> last2;
  FUZZ_CHECK(decode_archived(id, e1, d2, &last2).ok() && last2);
  FUZZ_CHECK(last2->number == last->number && last2->delivery == id);
  encode_archived(d2, *last2, e2);
  FUZZ_CHECK(e1 == e2);
}

void attempt(std::string_view key, std::string_view v) {
  auto a = decode_attempt(key, v);
  if (!a) return expect_corrupt(a.error());
  (void)outcome_name(a->outcome);
  (void)a->code.str();
  std::string e1, e2;
  encode_attempt(*a, e1);
  auto a2 = decode_attempt(key, e1);
  FUZZ_CHECK(a2.ok());
  encode_attempt(*a2, e2);
  FUZZ_CHECK(e1 == e2);
}

void event(uint64_t seq, std::string_view v) {
  auto s = decode_stored_event(seq, v);
  if (!s) return expect_corrupt(s.error());
  FUZZ_CHECK(s->event.seq == seq);
  std::string e1, e2;
  if (s->ref) {
    encode_event_logged(s->event, *s->ref, e1);
  } else {
    FUZZ_CHECK(payload_hash(s->event.payload) == s->event.payload_hash);
    encode_event(s->event, e1);
  }
  auto s2 = decode_stored_event(seq, e1);
  FUZZ_CHECK(s2.ok() && s2->ref.has_value() == s->ref.has_value());
  if (s2->ref) {
    encode_event_logged(s2->event, *s2->ref, e2);
  } else {
    encode_event(s2->event, e2);
  }
  FUZZ_CHECK(e1 == e2);
}

void endpoint(uint64_t id, std::string_view v) {
  auto e = decode_endpoint(id, v);
  if (!e) return expect_corrupt(e.error());
  (void)signature_profile_name(e->signature);
  (void)endpoint_state_name(e->state);
  (void)e->disabled_reason.str();
  std::string e1, e2;
  encode_endpoint(*e, e1);
  auto again = decode_endpoint(id, e1);
  FUZZ_CHECK(again.ok());
  encode_endpoint(*again, e2);
  FUZZ_CHECK(e1 == e2);
}

void tenant(std::string_view key, std::string_view v) {
  auto t = decode_tenant(key, v);
  if (!t) return expect_corrupt(t.error());
  std::string e1, e2;
  encode_tenant(*t, e1);
  auto again = decode_tenant(key, e1);
  FUZZ_CHECK(again.ok() && again->name == t->name);
  encode_tenant(*again, e2);
  FUZZ_CHECK(e1 == e2);
}

void id_group(Partition p, std::string_view v) {
  auto ids = decode_id_group(p, v);
  if (!ids) return expect_corrupt(ids.error());
  FUZZ_CHECK(!ids->empty());
  for (size_t i = 0; i < ids->size(); ++i) {
    FUZZ_CHECK(id_partition((*ids)[i]) == p);
    if (i > 0) FUZZ_CHECK((*ids)[i - 1] < (*ids)[i]);
  }
  std::string e1;
  encode_id_group(ids->data(), ids->size(), e1);
  auto again = decode_id_group(p, e1);
  FUZZ_CHECK(again.ok() && *again == *ids);
}

void event_key(std::string_view v) {
  auto k = decode_event_key(v);
  if (!k) return expect_corrupt(k.error());
  std::string e1, e2;
  encode_event_key(*k, e1);
  auto again = decode_event_key(e1);
  FUZZ_CHECK(again.ok());
  encode_event_key(*again, e2);
  FUZZ_CHECK(e1 == e2);
}

void notification(std::string_view key, std::string_view v) {
  auto n = decode_notification(key, v);
  if (!n) return expect_corrupt(n.error());
  (void)n->reason.str();
  std::string e1, e2;
  encode_notification(*n, e1);
  auto again = decode_notification(key, e1);
  FUZZ_CHECK(again.ok() && again->seq == n->seq);
  encode_notification(*again, e2);
  FUZZ_CHECK(e1 == e2);
}

void cursor(std::string_view v) {
  auto c = decode_cursor(v);
  if (!c) {
    FUZZ_CHECK(c.error().code == Errc::kInvalidArgument);
    return;
  }
  FUZZ_CHECK(encode_cursor(*c) == v);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ringcast::fuzz::Input in(data, size);
  const uint8_t which = in.u8();
  switch (which % 10) {
    case 0: {
      const uint64_t id = in.u64();
      delivery(id, in.rest());
      break;
    }
    case 1: {
      const uint64_t id = in.u64();
      archived(id, in.rest());
      break;
    }
    case 2: {
      const std::string_view key = in.bytes(in.u8() % 2 ? kAttemptKeyBytes : in.u8() % 16);
      attempt(key, in.rest());
      break;
    }
    case 3: {
      const uint64_t seq = in.u64();
      event(seq, in.rest());
      break;
    }
    case 4: {
      const uint64_t id = in.u64();
      endpoint(id, in.rest());
      break;
    }
    case 5: {
      const std::string_view key = in.bytes(in.u8() % 24);
      tenant(key, in.rest());
      break;
    }
    case 6: {
      const uint8_t hi = in.u8();
      const Partition p = static_cast<Partition>((hi << 8 | in.u8()) % kPartitions);
      id_group(p, in.rest());
      break;
    }
    case 7:
      event_key(in.rest());
      break;
    case 8: {
      const std::string_view key = in.bytes(in.u8() % 2 ? kNotificationKeyBytes : in.u8() % 24);
      notification(key, in.rest());
      break;
    }
    case 9:
      cursor(in.rest());
      break;
  }
  return 0;
}
