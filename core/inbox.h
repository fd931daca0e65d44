// Cluster mode's intake on a node that does not own the tenant's partition (docs/cluster.md
// "Intake on every node": its partition's script does the work). Such a node puts the event into
// the partition's inbox in the shared store, atomically with an idempotency check against the
// partition's accepted events (R12.5) and its other queued ones, and answers once that is durable;
// the partition's owner drains the inbox into its normal intake (fan-out, deliveries, the
// idempotency key), and only then removes the entries.
//
// Invariants:
//   - an event answered kQueued or kAlreadyQueued is durable in the inbox (with the store's
//     replica count), so a node crash, an owner change or no owner at all loses nothing: the
//     next owner drains it;
//   - an entry leaves the inbox only after the owner's write of that event (or a duplicate's
//     original) is durable and was not fenced: ack() comes after, never before;
//   - draining is at least once: a crash between the owner's write and ack() drains the entry
//     again, and the owner's own idempotency lookup answers it as a duplicate;
//   - an event id is taken once per tenant across the inbox and the accepted events: the push
//     answers kStored (the accepted record) or kAlreadyQueued (the queued payload's hash) instead
//     of queueing twice; the owner's own intake lookups see queued keys too (Store::EventKeyRef).
// Every callback runs exactly once on `on`'s thread (as Store's asynchronous forms).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/engine.h"
#include "core/result.h"
#include "core/store.h"
#include "core/types.h"

namespace ringcast {

// One event for an inbox. `event` stays valid until the push's callback has run.
struct InboxPush {
  const EventInput* event = nullptr;
  uint64_t payload_hash = 0;
};

struct InboxAnswer {
  enum class Kind : uint8_t {
    kQueued,         // new: now in the partition's inbox
    kAlreadyQueued,  // the inbox holds this id already; `payload_hash` is the queued one's,
                     // `stored.message` its message id (the rest of `stored` is unset)
    kStored,         // accepted before; `stored` is its idempotency record
    kUnknownTenant,  // the tenant has never had an endpoint (nothing written)
  };
  Kind kind = Kind::kQueued;
  uint64_t payload_hash = 0;
  EventKeyRecord stored;
};

// An event waiting in partition p's inbox, in arrival order. `id` is opaque and orders entries.
struct InboxEntry {
  std::string id;
  EventInput event;
  WallTime accepted_at;
};

struct InboxRead {
  Partition p = 0;
  std::vector<InboxEntry> entries;  // oldest first; fewer than asked: the inbox ends there
};

class Inbox {
 public:
  virtual ~Inbox() = default;

  // Queues events (any partitions, any order); one answer per event, in order. An Error
  // answer means nothing is known about that event (not durable: retry).
  using PushDone = std::function<void(std::vector<Result<InboxAnswer>>)>;
  virtual void push(std::vector<InboxPush> events, Poster& on, PushDone done) = 0;

  // For each (p, after): up to `max_each` entries of p's inbox after the entry id `after`
  // (empty: from the start). One InboxRead per partition asked, in the order asked.
  using ReadDone = std::function<void(Result<std::vector<InboxRead>>)>;
  virtual void read(std::vector<std::pair<Partition, std::string>> after, size_t max_each,
                    Poster& on, ReadDone done) = 0;

  // Removes drained entries of p and their queued keys (tenant "\0" event id). Best effort:
  // an entry left behind is drained again later and answered as a duplicate.
  virtual void ack(Partition p, std::vector<std::string> ids,
                   std::vector<std::string> key_fields) = 0;

  // The doorbell: a push rings its partitions once their entries are in; this takes (clears)
  // the rung ones among `mine` and answers them, so an owner reads only the inboxes that got
  // something. Best effort (a ring can be lost: a pusher that died between its entry and its
  // ring): an owner still reads all of its inboxes now and then.
  using RungDone = std::function<void(Result<std::vector<Partition>>)>;
  virtual void take_rung(std::vector<Partition> mine, Poster& on, RungDone done) = 0;
};

}  // namespace ringcast
