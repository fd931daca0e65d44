// The shard's operator repairs (docs/operations.md "Delivery log"): resolve (SPEC R12.10), resend,
// replay, requeue jobs with their SPEC R14 quotas. Invariant: a store read older than a change
// made here is refused; a replay creates no delivery twice. Shard thread only (a RequeueJob is
// shared with the engine's worker thread that runs it, under its lock).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/engine.h"
#include "core/result.h"
#include "core/store.h"
#include "core/types.h"
#include "engine/send_path.h"
#include "engine/shard_core.h"

namespace ringcast::engine {

// A requeue job's state (docs/operations.md "Delivery log"): shared by the owning shard (its live
// count, the job table) and the engine's worker thread that runs the job (everything else).
struct RequeueJob {
  mutable std::mutex mu;
  JobView view;                     // guarded by mu
  std::atomic<uint32_t> live{0};    // its re-queued deliveries not ended again yet
  std::atomic<bool> cancel{false};  // the tenant's partition left this shard
  JobView snapshot() const {
    std::lock_guard<std::mutex> lock(mu);
    JobView v = view;
    v.in_flight = live.load(std::memory_order_relaxed);
    return v;
  }
};

// What a batch of a requeue job's resends came to (Shard::resend_batch).
struct ResendCounts {
  uint32_t requeued = 0, skipped = 0;
};

class Requeue {
 public:
  Requeue(ShardCore& core, SendPath& send) : core_(core), send_(send) {}
  Requeue(const Requeue&) = delete;
  Requeue& operator=(const Requeue&) = delete;

  // Engine::resolve_delivery on the owner: `seen` is the delivery as read from the store.
  void resolve_delivery(DeliveryDetail seen, Resolution verdict, std::string note,
                        Callback<Delivery> done);
  // Replay (Engine::resend_delivery, replay_event, requeue_endpoint, get_job) on the
  // owner: `seen` as read from the store; `have`: the endpoints that have a delivery of `ev`.
  void resend_delivery(DeliveryDetail seen, std::string note, Callback<Delivery> done);
  void replay_event(Event ev, std::vector<EndpointId> have, Callback<uint32_t> done);
  // A new job: running (the caller starts its worker) or queued (SPEC R14 quotas: past
  // max_requeue_jobs running, at most max_queued_requeue_jobs wait in FIFO order); 429
  // too_many_jobs for a tenant that has one running or queued, or a full queue.
  void start_requeue_job(const std::string& tenant, EndpointId id, WallTime since, WallTime until,
                         Callback<std::shared_ptr<RequeueJob>> done);
  // After a job ended: the oldest queued job, now running (the caller starts its worker), or
  // nullptr when none waits or every slot is taken.
  std::shared_ptr<RequeueJob> next_requeue_job();
  // A requeue job's resends: each is re-queued or skipped (not ended, or a store read older
  // than a change); an error (endpoint deleted or disabled, shutting down) ends the job.
  void resend_batch(std::vector<DeliveryDetail> seen, std::shared_ptr<RequeueJob> job,
                    Callback<ResendCounts> done);
  void get_job(const std::string& tenant, uint64_t id, Callback<JobView> done);

  // A written batch ended delivery `id` (TurnBatch::Listener, through Shard): a requeue job's
  // delivery ended again.
  void delivery_ended(DeliveryId id);
  // The partitions left this shard (the hand-over): their jobs end (their worker sees
  // `cancel`); their deliveries are the next owner's now.
  void forget(const PartitionSet& ps);

 private:
  void note_rewritten(DeliveryId id, size_t history);
  // Resend `seen`: reopen it in the scheduler, its history records into the turn's mutations.
  Result<Delivery> resend_one(const DeliveryDetail& seen, const std::string& note,
                              const std::shared_ptr<RequeueJob>& job);

  ShardCore& core_;
  SendPath& send_;  // a resent delivery's UNKNOWN clock
  // Ended deliveries this shard changed lately (resolve_delivery) → their history length after
  // the change: a store read older than that (a request racing the change) is refused.
  std::unordered_map<DeliveryId, size_t> rewritten_;
  std::deque<DeliveryId> rewritten_order_;  // FIFO, at most kRewrittenKept
  static constexpr size_t kRewrittenKept = 4096;
  // Events replayed lately → the endpoints that got a delivery of it then: a replay racing
  // the store's index (not yet showing them) creates none twice. FIFO, at most kReplayedKept.
  std::unordered_map<EventSeq, std::vector<EndpointId>> replayed_;
  std::deque<EventSeq> replayed_order_;
  static constexpr size_t kReplayedKept = 4096;
  // Requeue jobs of this shard's tenants (kept after they end, at most kJobsKept), and the
  // live deliveries they re-queued (their ends counted back in on_written, delivery_ended()).
  std::unordered_map<uint64_t, std::shared_ptr<RequeueJob>> jobs_;
  std::deque<uint64_t> jobs_order_;
  std::deque<uint64_t> job_queue_;  // queued jobs, oldest first (next_requeue_job)
  static constexpr size_t kJobsKept = 256;
  std::unordered_map<DeliveryId, std::shared_ptr<RequeueJob>> job_live_;
};

}  // namespace ringcast::engine
