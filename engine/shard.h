// One shard: a thread with its own io_uring loop, scheduler (timer wheel, breakers, endpoint
// states), transport and pools, owning a set of partitions (ARCHITECTURE.md). Everything that
// touches a tenant runs on this thread, so the delivery path takes no locks. Each loop turn
// reads the clock once, polls the scheduler, commits everything the turn changed as ONE store
// batch (leases included), and only then puts the turn's requests on the wire (SPEC R12.2).
// Shard is the thread, the loop and the order of a turn; its parts are classes of their own
// (docs/architecture.md "The shard in layers"): the lower layer (TurnBatch, ShardOwnership,
// PartitionIds) and the upper one (ShardIntake, SendPath, HandOver, AdminCalls, Requeue), which
// share a ShardCore and never see Shard. Its shard-thread API forwards to them.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "core/engine.h"
#include "core/scheduler.h"
#include "core/store.h"
#include "core/transport.h"
#include "engine/admin_calls.h"
#include "engine/handover.h"
#include "engine/intake_part.h"
#include "engine/metrics.h"
#include "engine/options.h"
#include "engine/ownership.h"
#include "engine/partition_ids.h"
#include "engine/payload_cache.h"
#include "engine/requeue_part.h"
#include "engine/send_path.h"
#include "engine/shard_core.h"
#include "engine/turn_batch.h"
#include "net/loop.h"

namespace ringcast::engine {

// not_owner_error() (engine/shard_core.h), kMaxSigningSecrets (engine/admin_calls.h),
// RequeueJob and ResendCounts (engine/requeue_part.h) come with this header.

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
  void submit(EventInput in, std::function<void(Result<SubmitResult>)> done) {
    intake_.submit(std::move(in), std::move(done));
  }
  // Many events, one answer (in input order) once they are durable; one key lookup for all.
  // submit() is a batch of one.
  void submit_batch(std::vector<EventInput> events,
                    std::function<void(std::vector<Result<SubmitResult>>)> done) {
    intake_.submit_batch(std::move(events), std::move(done));
  }
  void create_endpoint(std::string tenant, EndpointSpec spec, Callback<Endpoint> done) {
    admin_.create_endpoint(std::move(tenant), std::move(spec), std::move(done));
  }
  void list_endpoints(const std::string& tenant, Callback<std::vector<Endpoint>> done) {
    admin_.list_endpoints(tenant, std::move(done));
  }
  void get_endpoint(const std::string& tenant, EndpointId id, Callback<Endpoint> done) {
    admin_.get_endpoint(tenant, id, std::move(done));
  }
  void update_endpoint(const std::string& tenant, EndpointId id, EndpointPatch patch,
                       Callback<Endpoint> done) {
    admin_.update_endpoint(tenant, id, std::move(patch), std::move(done));
  }
  void delete_endpoint(const std::string& tenant, EndpointId id, Callback<bool> done) {
    admin_.delete_endpoint(tenant, id, std::move(done));
  }
  void endpoint_action(const std::string& tenant, EndpointId id, EndpointAction action,
                       Callback<Endpoint> done) {
    admin_.endpoint_action(tenant, id, action, std::move(done));
  }
  void test_endpoint(const std::string& tenant, EndpointId id, Callback<DeliveryId> done) {
    admin_.test_endpoint(tenant, id, std::move(done));
  }
  // The endpoint URL's rules (UrlPolicy), for a status URL (R12.11).
  std::function<Result<void>(std::string_view)> url_check() const { return admin_.url_check(); }
  // Engine::resolve_delivery on the owner: `seen` is the delivery as read from the store.
  void resolve_delivery(DeliveryDetail seen, Resolution verdict, std::string note,
                        Callback<Delivery> done) {
    requeue_.resolve_delivery(std::move(seen), verdict, std::move(note), std::move(done));
  }
  // Replay (Engine::resend_delivery, replay_event, requeue_endpoint, get_job) on the
  // owner: `seen` as read from the store; `have`: the endpoints that have a delivery of `ev`.
  void resend_delivery(DeliveryDetail seen, std::string note, Callback<Delivery> done) {
    requeue_.resend_delivery(std::move(seen), std::move(note), std::move(done));
  }
  void replay_event(Event ev, std::vector<EndpointId> have, Callback<uint32_t> done) {
    requeue_.replay_event(std::move(ev), std::move(have), std::move(done));
  }
  // A new job: running (the caller starts its worker) or queued (SPEC R14 quotas: past
  // max_requeue_jobs running, at most max_queued_requeue_jobs wait in FIFO order); 429
  // too_many_jobs for a tenant that has one running or queued, or a full queue.
  void start_requeue_job(const std::string& tenant, EndpointId id, WallTime since, WallTime until,
                         Callback<std::shared_ptr<RequeueJob>> done) {
    requeue_.start_requeue_job(tenant, id, since, until, std::move(done));
  }
  // After a job ended: the oldest queued job, now running (the caller starts its worker), or
  // nullptr when none waits or every slot is taken.
  std::shared_ptr<RequeueJob> next_requeue_job() { return requeue_.next_requeue_job(); }
  // A requeue job's resends: each is re-queued or skipped (not ended, or a store read older
  // than a change); an error (endpoint deleted or disabled, shutting down) ends the job.
  void resend_batch(std::vector<DeliveryDetail> seen, std::shared_ptr<RequeueJob> job,
                    Callback<ResendCounts> done) {
    requeue_.resend_batch(std::move(seen), std::move(job), std::move(done));
  }
  void get_job(const std::string& tenant, uint64_t id, Callback<JobView> done) {
    requeue_.get_job(tenant, id, std::move(done));
  }
  void rotate_secret(const std::string& tenant, EndpointId id, std::optional<std::string> secret,
                     Callback<Endpoint> done) {
    admin_.rotate_secret(tenant, id, std::move(secret), std::move(done));
  }
  void get_breaker(const std::string& tenant, Callback<BreakerView> done) {
    admin_.get_breaker(tenant, std::move(done));
  }
  void order_keys(const std::string& tenant, EndpointId id, size_t limit,
                  Callback<std::vector<OrderKeyView>> done) {
    admin_.order_keys(tenant, id, limit, std::move(done));
  }
  void reset_breaker(const std::string& tenant, Callback<BreakerView> done) {
    admin_.reset_breaker(tenant, std::move(done));
  }
  void set_subscription(const std::string& tenant, bool active, Callback<bool> done) {
    admin_.set_subscription(tenant, active, std::move(done));
  }
  void get_tenant_settings(const std::string& tenant, Callback<TenantSettings> done) {
    admin_.get_tenant_settings(tenant, std::move(done));
  }
  void set_tenant_settings(const std::string& tenant, TenantSettings settings,
                           Callback<TenantSettings> done) {
    admin_.set_tenant_settings(tenant, std::move(settings), std::move(done));
  }
  void confirm_owner_email(const std::string& tenant, const std::string& email,
                           Callback<TenantSettings> done) {
    admin_.confirm_owner_email(tenant, email, std::move(done));
  }
  TenantSettings tenant_settings(const std::string& tenant) const {
    return admin_.tenant_settings(tenant);
  }

  // ---- cluster mode (EngineOptions::ownership): partitions change owners at run time -----
  // Takes p at `epoch`: the store fences p's writes with it, and p's state (endpoints,
  // tenants, breakers, pending deliveries with their attempt counts) is loaded from the store
  // (Store::recover_async: off this thread on Redis); p is served once it is loaded.
  void acquire_partition(Partition p, uint64_t epoch) { handover_.acquire_partition(p, epoch); }
  // Graceful hand-over: no new intake or sends for p; once its attempts on the wire have
  // completed and their results are durable, p is forgotten and `done` runs (on this thread).
  void release_partition(Partition p, uint64_t epoch, std::function<void()> done) {
    handover_.release_partition(p, epoch, std::move(done));
  }
  // Its ownership is gone (expired or fenced): p is forgotten at once; results of its attempts
  // still on the wire are dropped (their writes would be fenced).
  void lose_partition(Partition p, uint64_t epoch) { handover_.lose_partition(p, epoch); }
  // Whether this shard takes calls for `tenant` now (always, outside cluster mode).
  bool serves(std::string_view tenant) const { return core_.serves(tenant); }
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
  const std::map<std::string, uint32_t>& missing_policies() const { return core_.missing_policies; }
  bool running() const { return running_.load(std::memory_order_acquire); }

 private:
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
  void turn();
  void commit() { batch_.commit(loop_->now()); }
  // TurnBatch::Listener: what a written batch means to the parts above (the ended deliveries'
  // bookkeeping, the operator's notifications, the payload cache, the keys that settle), and
  // what every commit clears (the turn's events; the epochs of partitions forgotten this turn).
  void on_written(Mutations& m, uint64_t seq) override;
  void after_commit(bool dropped) override;

  const uint32_t index_;
  const EngineOptions& options_;
  Store& store_;
  std::unique_ptr<net::Loop> loop_;
  std::unique_ptr<Transport> transport_;
  std::unique_ptr<Scheduler> scheduler_;
  std::thread thread_;
  std::atomic<bool> running_{false};
  std::atomic<bool> stop_requested_{false};
  bool closing_ = false;
  MonoTime flush_deadline_;
  bool inline_ = false;  // started by start_inline: no thread
  bool closed_ = false;  // close_parts ran
  MonoTime drain_deadline_;

  ShardMetrics metrics_;
  // The lower layer (engine/ownership.h, engine/partition_ids.h, engine/turn_batch.h): which
  // partitions this shard serves and sends for (leased_: the same object in cluster mode, null
  // for one node), its ids, and the turn's batch (one Mutations, one commit).
  std::unique_ptr<ShardOwnership> ownership_;
  LeasedOwnership* leased_ = nullptr;
  PartitionIds ids_;
  TurnBatch batch_;
  // Recent events for the send path (engine/payload_cache.h).
  PayloadCache payloads_;
  // Asynchronous store answers come back through this (Store::find_event_keys_async).
  struct LoopPoster final : Poster {
    Shard* shard = nullptr;
    void post(std::function<void()> fn) override;
  };
  LoopPoster poster_;

  // What the parts share, then the upper layer's parts (each depends on those before it).
  ShardCore core_;
  ShardIntake intake_;
  SendPath send_;
  Requeue requeue_;
  AdminCalls admin_;
  HandOver handover_;

  std::vector<SendCommand> commands_;  // the turn's due sends (Scheduler::poll)
  // EngineOptions::on_delivery_done: the deliveries a written batch ended, each with that
  // batch's number, reported once the batch is durable by one callback per batch (a callback
  // per delivery allocated its captured copy every time). Batches become durable in order; the
  // entries of a batch whose answers were dropped (a stop) are skipped by the next one.
  // A queue in a vector that keeps its capacity (a deque allocates a block every few entries):
  // entries before ended_head_ were reported.
  std::vector<std::pair<uint64_t, Delivery>> ended_;
  size_t ended_head_ = 0;
  uint64_t ended_batch_ = 0;
};

}  // namespace ringcast::engine
