// One shard: a thread with its own io_uring loop, scheduler (timer wheel, breakers, endpoint
// states), transport and pools, owning a set of partitions (ARCHITECTURE.md). Everything that
// touches a tenant runs on this thread, so the delivery path takes no locks. Each loop turn
// reads the clock once, polls the scheduler, commits everything the turn changed as ONE store
// batch (leases included), and only then puts the turn's requests on the wire (SPEC R12.2).
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/engine.h"
#include "core/scheduler.h"
#include "core/store.h"
#include "core/transport.h"
#include "engine/metrics.h"
#include "engine/options.h"
#include "engine/ownership.h"
#include "engine/partition_ids.h"
#include "engine/payload_cache.h"
#include "engine/turn_batch.h"
#include "net/loop.h"

namespace ringcast::engine {

// Cluster mode: the tenant's partition is owned by another node, or between owners (503).
Error not_owner_error();

// SPEC R11.2: every unexpired secret signs during a rotation; at most this many at once.
inline constexpr size_t kMaxSigningSecrets = 10;

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

class Shard final : private TurnBatch::Listener {
 public:
  Shard(uint32_t index, const EngineOptions& options, Store& store);
  ~Shard() override;
  Shard(const Shard&) = delete;
  Shard& operator=(const Shard&) = delete;

  // Starts the thread, recovers the owned partitions from the store, and returns once the
  // shard serves (or recovery failed).
  Result<void> start(std::vector<Partition> partitions);
  // Graceful stop (SIGTERM): no new work; in-flight attempts get stop_grace to finish; the
  // last batch is flushed; the thread joins.
  void stop();

  // Makes a blocked loop turn return (any thread).
  void wake() {
    if (running()) loop_->wake();
  }
  // Runs `fn` on the shard thread (any thread may call).
  void post(std::function<void(Shard&)> fn);

  // ---- shard-thread API (call from inside post()) -------------------------------------------
  void submit(EventInput in, std::function<void(Result<SubmitResult>)> done);
  // Many events, one answer (in input order) once they are durable; one key lookup for all.
  // submit() is a batch of one.
  void submit_batch(std::vector<EventInput> events,
                    std::function<void(std::vector<Result<SubmitResult>>)> done);
  void create_endpoint(std::string tenant, EndpointSpec spec, Callback<Endpoint> done);
  void list_endpoints(const std::string& tenant, Callback<std::vector<Endpoint>> done);
  void get_endpoint(const std::string& tenant, EndpointId id, Callback<Endpoint> done);
  void update_endpoint(const std::string& tenant, EndpointId id, EndpointPatch patch,
                       Callback<Endpoint> done);
  void delete_endpoint(const std::string& tenant, EndpointId id, Callback<bool> done);
  void endpoint_action(const std::string& tenant, EndpointId id, EndpointAction action,
                       Callback<Endpoint> done);
  void test_endpoint(const std::string& tenant, EndpointId id, Callback<DeliveryId> done);
  // The endpoint URL's rules (UrlPolicy), for a status URL (R12.11).
  std::function<Result<void>(std::string_view)> url_check() const;
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
  void rotate_secret(const std::string& tenant, EndpointId id, std::optional<std::string> secret,
                     Callback<Endpoint> done);
  void get_breaker(const std::string& tenant, Callback<BreakerView> done);
  void reset_breaker(const std::string& tenant, Callback<BreakerView> done);
  void set_subscription(const std::string& tenant, bool active, Callback<bool> done);
  void get_tenant_settings(const std::string& tenant, Callback<TenantSettings> done);
  void set_tenant_settings(const std::string& tenant, TenantSettings settings,
                           Callback<TenantSettings> done);
  void confirm_owner_email(const std::string& tenant, const std::string& email,
                           Callback<TenantSettings> done);
  TenantSettings tenant_settings(const std::string& tenant) const;

  // ---- cluster mode (EngineOptions::ownership): partitions change owners at run time -----
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
  // Whether this shard takes calls for `tenant` now (always, outside cluster mode).
  bool serves(std::string_view tenant) const;
  // Partitions held now and their epochs (any thread: a snapshot under a lock).
  std::vector<std::pair<Partition, uint64_t>> owned_partitions() const;

  // (partition << 48) | next sequence of that partition (engine/partition_ids.h).
  uint64_t next_id(Partition p) { return ids_.next_id(p); }

  // ---- the shard's parts on the caller's thread (the seeded simulation, tests/sim) ----------
  // start() without a thread: recovery on the caller's thread, which is then the shard thread.
  // run_turn() is one loop turn that waits at most `max_wait` (a manual clock never moves by
  // itself: the simulation passes zero and moves it); false once a requested stop (stop_inline)
  // has drained. close_inline() then ends it as stop() does, one step a call: true while the
  // last batch waits to be durable (the caller moves the clock and calls again). next_wait() is
  // how long the shard would sleep now. Destroying an inline shard that was not closed is a
  // crash: nothing more is written, attempts on the wire stay leased.
  Result<void> start_inline(std::vector<Partition> partitions);
  bool run_turn(Duration max_wait);
  Duration next_wait() const;
  void stop_inline() { stop_requested_.store(true, std::memory_order_release); }
  bool close_inline();

  const ShardMetrics& metrics() const { return metrics_; }
  uint32_t index() const { return index_; }
  // After a start() that failed with reason "unknown_policy": stored endpoints whose policy is
  // not in the config, by policy name (operations.md "Validation": no silent fall-back).
  const std::map<std::string, uint32_t>& missing_policies() const { return missing_policies_; }
  bool running() const { return running_.load(std::memory_order_acquire); }

 private:
  class SendSlot;
  class Recovery;

  void thread_main(std::vector<Partition> partitions, std::promise<Result<void>> started);
  // thread_main's three parts: the loop, the scheduler and the recovered partitions; one turn of
  // the loop (false once a stop has drained); the last batch flushed and the transport gone.
  Result<void> open_parts(std::vector<Partition> partitions);
  bool loop_turn(std::optional<Duration> max_wait);
  void close_parts();
  // close_parts in steps: the last commit; one wait for durability (true: wait more); the end.
  void begin_close();
  bool flush_step();
  void end_close();
  bool closing_ = false;
  MonoTime flush_deadline_;
  // EngineOptions::entropy, or the system CSPRNG.
  void random_bytes(uint8_t* out, size_t n);
  bool inline_ = false;  // started by start_inline: no thread
  bool closed_ = false;  // close_parts ran
  MonoTime drain_deadline_;
  void turn();
  void commit() { batch_.commit(loop_->now()); }
  // The turn's batch and its durability (engine/turn_batch.h): TurnBatch::after_durable.
  void after_durable(std::function<void()> fire, std::function<void(const Error&)> lost = nullptr) {
    batch_.after_durable(std::move(fire), std::move(lost));
  }
  // TurnBatch::Listener: what a written batch means to the parts above (the ended deliveries'
  // bookkeeping, the operator's notifications, the payload cache, the keys that settle), and
  // what every commit clears (the turn's events; the epochs of partitions forgotten this turn).
  void on_written(Mutations& m, uint64_t seq) override;
  void after_commit(bool dropped) override;
  void release_held_sends();
  // A prepared send whose batch is durable goes on the wire, or, when its partition is not
  // sendable here at the epoch it was leased at (handed over, lost, its ownership past its
  // deadline) or that batch was fenced, comes back unsent: no attempt spent, the scheduler
  // releases the lease (SPEC R2.3).
  void send_now(SendSlot* slot, MonoTime mono);
  // `to_inbox` (null: never): set when the event is well-formed but its partition is not
  // served here and goes to its inbox instead (cluster mode, EngineOptions::inbox).
  Result<void> check_event_input(const EventInput& in, bool* to_inbox);
  Error store_full();  // the answer while the store is over its memory high-water mark
  // submit_batch; `from_inbox`: the events were drained from their partitions' inboxes (they
  // never go back to one, and their own queued keys do not count as taken).
  void submit_events(std::vector<EventInput> events, bool from_inbox,
                     std::function<void(std::vector<Result<SubmitResult>>)> done);
  // Cluster mode's inboxes (core/inbox.h): poll those of the partitions held here, and take
  // a partition's queued events in through the normal intake; entries are removed once what
  // they became is durable.
  void poll_inboxes();
  void read_inboxes(std::vector<std::pair<Partition, std::string>> after);
  void drain_inbox(Partition p, uint64_t epoch, std::vector<InboxEntry> entries, bool full);
  // Takes one checked event in (fan-out into this turn's mutations), or answers it as a
  // duplicate or conflict of this turn's events or of `stored`, the store's record for its key.
  Result<SubmitResult> take_in(EventInput& in, const std::optional<EventKeyRecord>& stored);
  void prepare_send(const SendCommand& cmd);
  // The rest of prepare_send once the event is known (from the cache, this turn, or the store).
  void finish_prepare(SendSlot* slot, std::shared_ptr<const Event> ev);
  // Asynchronous key lookups (Store::find_event_keys_async): begin returns the commit
  // generation the lookup was issued after; end settles it.
  uint64_t begin_lookup();
  void end_lookup(uint64_t gen);
  void prune_settling();
  void on_send_complete(SendSlot* slot);
  // An event accepted in this turn (still in mutations_), or nullptr.
  const Event* turn_event(EventSeq seq);
  const Endpoint* owned_endpoint(const std::string& tenant, EndpointId id) const;
  std::string new_secret();
  std::string new_message_id(WallTime now);
  Endpoint view(const Endpoint& e) const;
  void refresh_gauges();

  const uint32_t index_;
  const EngineOptions& options_;
  Store& store_;
  std::unique_ptr<net::Loop> loop_;
  std::unique_ptr<Transport> transport_;
  std::unique_ptr<Scheduler> scheduler_;
  std::thread thread_;
  std::atomic<bool> running_{false};
  std::atomic<bool> stop_requested_{false};
  bool draining_ = false;
  bool discarding_ = false;

  // Which partitions this shard serves and sends for (engine/ownership.h): all of its
  // partitions for good (one node), or those it holds under leases (cluster mode: leased_, the
  // same object, for the hand-over and the inboxes; null for one node).
  std::unique_ptr<ShardOwnership> ownership_;
  LeasedOwnership* leased_ = nullptr;
  bool inbox_polling_ = false;  // one inbox poll at a time per shard
  MonoTime next_inbox_poll_;
  MonoTime next_inbox_sweep_;     // every inbox held is read then (20 polls apart)
  bool inbox_sweep_now_ = false;  // a partition was taken: sweep at the next poll
  uint32_t inbox_ops_ = 0;        // inbox pushes and reads outstanding (a stop waits for them)
  void retry_failed_loads();
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
  void reset_epochs_after_commit();
  void finish_acquire(Partition p, uint64_t epoch, Result<RecoveredPartition> loaded);
  void forget_partition(Partition p);
  // One pass for many (progress_releases: a SIGTERM hands every partition over in one turn).
  void forget_partitions(const std::vector<Partition>& ps);
  void progress_releases();

  // Per-partition id sequences of the partitions this shard owns.
  PartitionIds ids_;
  std::unordered_map<std::string, bool> known_tenants_;  // tenant → exists (has had endpoints)
  std::map<std::string, uint32_t> missing_policies_;     // found by recovery (see above)
  uint64_t msg_rng_[2] = {};                             // new_message_id()'s state

  // The turn's work: one Mutations, one commit (the lower layer's; mutations_ is its batch).
  TurnBatch batch_;
  Mutations& mutations_;
  std::vector<SendCommand> commands_;
  std::vector<SendSlot*> to_send_;  // prepared this turn, sent after the commit
  // Store::durable_on_write() false: prepared sends waiting for their batch (seq) to be durable.
  struct HeldSend {
    uint64_t seq;
    SendSlot* slot;
  };
  std::deque<HeldSend> held_sends_;
  // Events accepted in this turn, not yet in the store: same-turn duplicates see them.
  std::unordered_map<std::string, EventKeyRecord> turn_events_;
  std::unordered_map<EventSeq, const Event*> turn_event_index_;  // into mutations_.events
  // Recent events for the send path (fan-out sends one event to many endpoints at once, and
  // most deliveries go out right after intake), and the events of this turn's batch that got
  // deliveries: they join the cache once written.
  PayloadCache payloads_;
  std::vector<size_t> cache_after_commit_;  // indexes into mutations_.events
  // Events read back from the store this turn (one event fanned out to many endpoints).
  std::unordered_map<EventSeq, std::shared_ptr<const Event>> turn_loaded_;

  // Asynchronous store answers come back through this (Store::find_event_keys_async).
  struct LoopPoster final : Poster {
    Shard* shard = nullptr;
    void post(std::function<void()> fn) override;
  };
  LoopPoster poster_;
  // Key lookups outstanding, by the commit generation they were issued after. A lookup may
  // not see what later commits wrote, so keys accepted while one is outstanding stay here
  // (settling_) until every lookup issued before their commit has answered. With a local
  // store (answers before returning) nothing is ever outstanding at a commit: settling_ stays
  // empty.
  uint64_t commit_gen_ = 0;
  std::map<uint64_t, uint32_t> lookups_by_gen_;
  std::unordered_map<std::string, EventKeyRecord> settling_;
  std::deque<std::pair<uint64_t, std::string>> settling_order_;  // (commit gen, key)
  uint32_t loads_in_flight_ = 0;  // payload loads outstanding (their slots wait)

  // Sends prepared in a turn whose batch was not written go back unsent (no attempt spent).
  void withhold_sends();

  std::vector<std::unique_ptr<SendSlot>> slots_;
  std::vector<SendSlot*> free_slots_;
  uint32_t in_flight_ = 0;

  // Deliveries whose latest attempt was UNKNOWN: when that UNKNOWN streak began (R12.8).
  std::unordered_map<DeliveryId, WallTime> unknown_since_;
  // Ended deliveries this shard changed lately (resolve_delivery) → their history length after
  // the change: a store read older than that (a request racing the change) is refused.
  std::unordered_map<DeliveryId, size_t> rewritten_;
  std::deque<DeliveryId> rewritten_order_;  // FIFO, at most kRewrittenKept
  static constexpr size_t kRewrittenKept = 4096;
  void note_rewritten(DeliveryId id, size_t history);
  // Resend `seen`: reopen it in the scheduler, its history records into mutations_.
  Result<Delivery> resend_one(const DeliveryDetail& seen, const std::string& note,
                              const std::shared_ptr<RequeueJob>& job);
  // Events replayed lately → the endpoints that got a delivery of it then: a replay racing
  // the store's index (not yet showing them) creates none twice. FIFO, at most kReplayedKept.
  std::unordered_map<EventSeq, std::vector<EndpointId>> replayed_;
  std::deque<EventSeq> replayed_order_;
  static constexpr size_t kReplayedKept = 4096;
  // Requeue jobs of this shard's tenants (kept after they end, at most kJobsKept), and the
  // live deliveries they re-queued (their ends counted back in commit()).
  std::unordered_map<uint64_t, std::shared_ptr<RequeueJob>> jobs_;
  std::deque<uint64_t> jobs_order_;
  std::deque<uint64_t> job_queue_;  // queued jobs, oldest first (next_requeue_job)
  static constexpr size_t kJobsKept = 256;
  std::unordered_map<DeliveryId, std::shared_ptr<RequeueJob>> job_live_;
  // Test sends per endpoint in the current minute (EngineOptions::test_sends_per_minute);
  // entries of earlier minutes go when the minute turns.
  struct TestSends {
    int64_t minute = 0;
    uint32_t sent = 0;
  };
  std::unordered_map<EndpointId, TestSends> test_sends_;
  int64_t test_sends_minute_ = 0;

  ShardMetrics metrics_;
};

}  // namespace ringcast::engine
