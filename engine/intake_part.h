// The shard's intake (SPEC R12.5: one event per tenant and id): the checks, the key lookup, the
// fan-out into the turn's batch, bulk batches in bounded parts, cluster mode's events for other
// partitions to their inboxes; answered once durable (SPEC R12.2). Invariant: the turn's events
// and the keys settling are known here until the store has them. Shard thread only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/engine.h"
#include "core/result.h"
#include "core/store.h"
#include "core/types.h"
#include "engine/shard_core.h"
#include "trace/span.h"

namespace ringcast::engine {

class ShardIntake {
 public:
  explicit ShardIntake(ShardCore& core) : core_(core) {}
  ShardIntake(const ShardIntake&) = delete;
  ShardIntake& operator=(const ShardIntake&) = delete;

  void submit(EventInput in, std::function<void(Result<SubmitResult>)> done);
  // Many events, one answer (in input order) once they are durable; one key lookup for all.
  // submit() is a batch of one.
  void submit_batch(std::vector<EventInput> events,
                    std::function<void(std::vector<Result<SubmitResult>>)> done);
  // submit_batch; `from_inbox`: the events were drained from their partitions' inboxes (they
  // never go back to one, and their own queued keys do not count as taken).
  void submit_events(std::vector<EventInput> events, bool from_inbox,
                     std::function<void(std::vector<Result<SubmitResult>>)> done);
  // An event accepted in this turn (still in the turn's mutations), or nullptr.
  const Event* turn_event(EventSeq seq);
  // Asynchronous key lookups (Store::find_event_keys_async): begin returns the commit
  // generation the lookup was issued after; end settles it.
  uint64_t begin_lookup();
  void end_lookup(uint64_t gen);

  // A written batch (TurnBatch::Listener, through Shard): the events of `m` that got deliveries
  // join the payload cache; the turn's keys settle while a lookup is outstanding.
  void on_written(Mutations& m);
  // After every commit (`dropped`: what the turn changed is gone).
  void after_commit(bool dropped);

  bool lookups_outstanding() const { return !lookups_by_gen_.empty(); }
  uint32_t inbox_pushes() const { return inbox_pushes_; }  // a stop waits for them

 private:
  // `to_inbox` (null: never): set when the event is well-formed but its partition is not
  // served here and goes to its inbox instead (cluster mode, EngineOptions::inbox).
  Result<void> check_event_input(const EventInput& in, bool* to_inbox);
  Error store_full();  // the answer while the store is over its memory high-water mark
  // Takes one checked event in (fan-out into this turn's mutations), or answers it as a
  // duplicate or conflict of this turn's events or of `stored`, the store's record for its key.
  // `span` (null: tracing off): set to the accepted event's intake span when its trace is
  // sampled, for the caller to end once the answer is known (docs/tracing.md).
  Result<SubmitResult> take_in(EventInput& in, const std::optional<EventKeyRecord>& stored,
                               std::optional<trace::Span>* span);
  void prune_settling();

  ShardCore& core_;
  uint32_t inbox_pushes_ = 0;  // inbox pushes outstanding (a stop waits for them)
  // Events accepted in this turn, not yet in the store: same-turn duplicates see them.
  std::unordered_map<std::string, EventKeyRecord> turn_events_;
  std::unordered_map<EventSeq, const Event*> turn_event_index_;  // into the turn's events
  // The events of this turn's batch that got deliveries: they join the cache once written.
  std::vector<size_t> cache_after_commit_;  // indexes into the turn's events
  // Key lookups outstanding, by the commit generation they were issued after. A lookup may
  // not see what later commits wrote, so keys accepted while one is outstanding stay here
  // (settling_) until every lookup issued before their commit has answered. With a local
  // store (answers before returning) nothing is ever outstanding at a commit: settling_ stays
  // empty.
  uint64_t commit_gen_ = 0;
  std::map<uint64_t, uint32_t> lookups_by_gen_;
  std::unordered_map<std::string, EventKeyRecord> settling_;
  std::deque<std::pair<uint64_t, std::string>> settling_order_;  // (commit gen, key)
};

}  // namespace ringcast::engine
