// What several stores do the same way for a role's method (core/store.h), written once: each
// backend that does it so calls the helper from its own override, so that every store says what
// it does. No helper is a default: a store with a better way (one round trip, a batched read)
// does not call it.
#pragma once

#include <optional>
#include <vector>

#include "core/result.h"
#include "core/store.h"
#include "core/types.h"

namespace ringcast {

// ---- asking one by one -----------------------------------------------------------------------
// Journal::find_event_keys as find_event_key for each key, in order; the first error ends it.
Result<std::vector<std::optional<EventKeyRecord>>> find_event_keys_one_by_one(
    Journal& j, const std::vector<Journal::EventKeyRef>& keys);
// Journal::load_events as load_event for each seq, aligned.
Result<std::vector<std::optional<Event>>> load_events_one_by_one(Journal& j,
                                                                 const std::vector<EventSeq>& seqs);
// DeliveryLog::get_deliveries as get_delivery for each id, aligned.
Result<std::vector<std::optional<DeliveryDetail>>> get_deliveries_one_by_one(
    DeliveryLog& log, const std::vector<DeliveryId>& ids);

// ---- a local store's asynchronous forms: answered before returning -----------------------------
// `done` gets j.find_event_keys(keys) on the caller's thread (the caller is `on`'s loop).
void find_event_keys_at_once(Journal& j, const std::vector<Journal::EventKeyRef>& keys,
                             Journal::EventKeysDone done);
// `done` gets j.load_event(seq) on the caller's thread.
void load_event_at_once(Journal& j, EventSeq seq, Journal::EventDone done);
// `done` gets the partition as j.recover() visits it, collected (CollectingVisitor), or its
// error; on the caller's thread.
void recover_collecting(Journal& j, Partition p, WallTime now, Journal::RecoverDone done);

// ---- what a store without a write to try answers ------------------------------------------------
// Journal::retry_disk for a store with no disk of its own to probe: whether it takes writes now.
inline bool retry_disk_by_health(const Journal& j) {
  return j.disk_health() == DiskHealth::kOk;
}

// ---- what a store that lacks a part answers (kUnavailable, reason "not_supported") --------------
// DeliveryLog::event_deliveries without an event → deliveries index.
Error no_event_index();
// KeyStore's changes without a key registry.
Error no_api_keys();
// KeyStore::node_secret without a place for secrets.
Error no_secrets();

}  // namespace ringcast
