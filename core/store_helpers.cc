#include "core/store_helpers.h"

#include <utility>

namespace ringcast {

Result<std::vector<std::optional<EventKeyRecord>>> find_event_keys_one_by_one(
    Journal& j, const std::vector<Journal::EventKeyRef>& keys) {
  std::vector<std::optional<EventKeyRecord>> out;
  out.reserve(keys.size());
  for (const Journal::EventKeyRef& k : keys) {
    auto r = j.find_event_key(k.tenant, k.event_id);
    if (!r.ok()) return r.error();
    out.push_back(std::move(*r));
  }
  return out;
}

Result<std::vector<std::optional<Event>>> load_events_one_by_one(
    Journal& j, const std::vector<EventSeq>& seqs) {
  std::vector<std::optional<Event>> out;
  out.reserve(seqs.size());
  for (EventSeq s : seqs) {
    auto r = j.load_event(s);
    if (!r.ok()) return r.error();
    out.push_back(std::move(*r));
  }
  return out;
}

Result<std::vector<std::optional<DeliveryDetail>>> get_deliveries_one_by_one(
    DeliveryLog& log, const std::vector<DeliveryId>& ids) {
  std::vector<std::optional<DeliveryDetail>> out;
  out.reserve(ids.size());
  for (DeliveryId id : ids) {
    auto r = log.get_delivery(id);
    if (!r.ok()) return r.error();
    out.push_back(std::move(*r));
  }
  return out;
}

void find_event_keys_at_once(Journal& j, const std::vector<Journal::EventKeyRef>& keys,
                             Journal::EventKeysDone done) {
  done(j.find_event_keys(keys));
}

void load_event_at_once(Journal& j, EventSeq seq, Journal::EventDone done) {
  done(j.load_event(seq));
}

void recover_collecting(Journal& j, Partition p, WallTime now, Journal::RecoverDone done) {
  CollectingVisitor c;
  auto st = j.recover(p, now, c);
  if (!st.ok()) return done(st.error());
  c.out.stats = *st;
  done(std::move(c.out));
}

Error no_event_index() {
  return make_error(Errc::kUnavailable, "this store does not index deliveries by event", nullptr,
                    "not_supported");
}

Error no_api_keys() {
  return make_error(Errc::kUnavailable, "this store keeps no API keys", nullptr, "not_supported");
}

Error no_secrets() {
  return make_error(Errc::kUnavailable, "this store keeps no secrets", nullptr, "not_supported");
}

}  // namespace ringcast
