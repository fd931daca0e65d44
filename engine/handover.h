// The shard's hand-over in cluster mode (docs/cluster.md): partitions taken and loaded, released
// once their results are durable, lost, forgotten; their inboxes (core/inbox.h) polled and
// drained through the intake. Invariant: a write its ownership no longer covers is fenced, never
// acknowledged (SPEC R12.5). Shard thread only: the lease manager's calls are posted to it.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/inbox.h"
#include "core/result.h"
#include "core/store.h"
#include "core/time.h"
#include "core/types.h"
#include "engine/intake_part.h"
#include "engine/requeue_part.h"
#include "engine/send_path.h"
#include "engine/shard_core.h"

namespace ringcast::engine {

class HandOver {
 public:
  HandOver(ShardCore& core, ShardIntake& intake, SendPath& send, Requeue& requeue)
      : core_(core), intake_(intake), send_(send), requeue_(requeue) {}
  HandOver(const HandOver&) = delete;
  HandOver& operator=(const HandOver&) = delete;

  // Takes p at `epoch`: the store fences p's writes with it, and p's state (endpoints,
  // tenants, breakers, pending deliveries with their attempt counts) is loaded from the store
  // (Store::recover_async: off this thread on Redis); p is served once it is loaded.
  void acquire_partition(Partition p, uint64_t epoch);
  // Graceful hand-over: no new intake or sends for p; once its attempts on the wire have
  // completed and their results are durable, p is forgotten and `done` runs (on this thread).
  void release_partition(Partition p, uint64_t epoch, std::function<void()> done);
  // Its ownership is gone (expired or fenced): p is forgotten at once; results of its attempts
  // still on the wire are dropped (their writes would be fenced).
  void lose_partition(Partition p, uint64_t epoch);

  // ---- the turn's part (Shard::turn) -------------------------------------------------------
  void progress_releases();
  void retry_failed_loads();
  // Cluster mode's inboxes (core/inbox.h): poll those of the partitions held here, and take
  // a partition's queued events in through the normal intake; entries are removed once what
  // they became is durable.
  void poll_inboxes();
  // After every commit (TurnBatch::Listener, through Shard): the epochs of partitions forgotten
  // while the turn's writes were not out yet go to 0.
  void reset_epochs_after_commit();

  bool retrying() const { return !retry_loads_.empty(); }
  bool loading() const { return !loading_.empty(); }
  bool inbox_polling() const { return inbox_polling_; }
  MonoTime next_inbox_poll() const { return next_inbox_poll_; }
  uint32_t inbox_ops() const { return inbox_ops_; }  // a stop waits for them

 private:
  void finish_acquire(Partition p, uint64_t epoch, Result<RecoveredPartition> loaded);
  void forget_partition(Partition p);
  // One pass for many (progress_releases: a SIGTERM hands every partition over in one turn).
  // What it forgets is every part's: the scheduler's, the payload cache's, the known tenants,
  // the send path's UNKNOWN clocks, the requeue jobs, the ids, the epochs, the table.
  void forget_partitions(const std::vector<Partition>& ps);
  void read_inboxes(std::vector<std::pair<Partition, std::string>> after);
  void drain_inbox(Partition p, uint64_t epoch, std::vector<InboxEntry> entries, bool full);

  ShardCore& core_;
  ShardIntake& intake_;  // drained inbox entries go through the normal intake
  SendPath& send_;       // forget_partitions
  Requeue& requeue_;     // forget_partitions
  struct RetryLoad {
    Partition p;
    uint64_t epoch;
    MonoTime at;
  };
  std::vector<RetryLoad> retry_loads_;               // acquired, but recover() failed: tried again
  std::unordered_map<Partition, uint64_t> loading_;  // acquired, being loaded: the epoch
  // Forgotten while this turn's writes were not out yet: the store names a partition's epoch
  // at write() (the one the intake's fenced(p, epoch) check asks about), so it goes to 0 only
  // after the commit — written at the epoch the events were taken in at, a write its ownership no
  // longer covers is fenced and answered 503, never acknowledged and dropped (SPEC R12.5).
  std::vector<Partition> epoch_resets_;
  bool inbox_polling_ = false;  // one inbox poll at a time per shard
  MonoTime next_inbox_poll_;
  MonoTime next_inbox_sweep_;     // every inbox held is read then (20 polls apart)
  bool inbox_sweep_now_ = false;  // a partition was taken: sweep at the next poll
  uint32_t inbox_ops_ = 0;        // inbox reads outstanding (a stop waits for them)
};

}  // namespace ringcast::engine
