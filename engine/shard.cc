// The shard's life and its loop: construction, start (recovery of the partitions it owns), the
// thread and its turn (SPEC R12.2: poll, commit, then send), stop; what a written batch means to
// the parts (TurnBatch::Listener). The parts are classes of their own (engine/shard_core.h: what
// they share; docs/architecture.md "The shard in layers").
#include "engine/shard.h"

#include <pthread.h>

#include <algorithm>

namespace ringcast::engine {

namespace {

// All of the shard's partitions for good (one node), or those it holds under leases.
std::unique_ptr<ShardOwnership> make_ownership(const EngineOptions& options) {
  if (options.ownership) return std::make_unique<LeasedOwnership>(*options.ownership);
  return std::make_unique<StaticOwnership>();
}

}  // namespace

Shard::Shard(uint32_t index, const EngineOptions& options, Store& store)
    : index_(index),
      options_(options),
      store_(store),
      ownership_(make_ownership(options)),
      leased_(options.ownership ? static_cast<LeasedOwnership*>(ownership_.get()) : nullptr),
      batch_(index, store, metrics_, *this),
      payloads_(options.payload_cache_bytes / std::max<uint32_t>(1, options.shards)),
      core_(index, options, store, metrics_, batch_, *ownership_, leased_, ids_, payloads_,
            poster_),
      intake_(core_),
      send_(core_, intake_),
      requeue_(core_, send_),
      admin_(core_, intake_),
      handover_(core_, intake_, send_, requeue_) {
  poster_.shard = this;
}

void Shard::LoopPoster::post(std::function<void()> fn) {
  shard->loop_->post(std::move(fn));
}

Shard::~Shard() {
  stop();
  if (inline_ && !closed_) {
    // A crash (the simulation): nothing more is written or answered; the transport goes first,
    // while the slots its operations point at still exist.
    core_.discarding = true;
    running_.store(false, std::memory_order_release);
    transport_.reset();
    core_.transport = nullptr;
  }
}

Result<void> Shard::start_inline(std::vector<Partition> partitions) {
  inline_ = true;
  return open_parts(std::move(partitions));
}

bool Shard::run_turn(Duration max_wait) {
  return loop_turn(max_wait);
}

bool Shard::close_inline() {
  if (closed_) return false;
  if (!closing_) begin_close();
  loop_->run_once(Duration(0));
  if (flush_step()) return true;
  end_close();
  return false;
}

Result<void> Shard::start(std::vector<Partition> partitions) {
  std::promise<Result<void>> started;
  auto fut = started.get_future();
  thread_ = std::thread(&Shard::thread_main, this, std::move(partitions), std::move(started));
  Result<void> r = fut.get();
  if (!r.ok() && thread_.joinable()) thread_.join();
  return r;
}

void Shard::stop() {
  if (!thread_.joinable()) return;
  stop_requested_.store(true, std::memory_order_release);
  if (loop_) loop_->wake();
  thread_.join();
}

void Shard::post(std::function<void(Shard&)> fn) {
  loop_->post([this, fn = std::move(fn)] { fn(*this); });
}

void Shard::thread_main(std::vector<Partition> partitions, std::promise<Result<void>> started) {
  const std::string name = "rc-shard-" + std::to_string(index_);  // top -H, perf, gdb
  ::pthread_setname_np(::pthread_self(), name.c_str());
  Result<void> opened = open_parts(std::move(partitions));
  const bool serving = opened.ok();
  started.set_value(std::move(opened));
  if (!serving) return;
  while (loop_turn(std::nullopt)) {
  }
  close_parts();
}

Result<void> Shard::open_parts(std::vector<Partition> partitions) {
  net::LoopOptions lo;
  lo.clock = options_.clock;
  auto loop = net::Loop::create(lo);
  if (!loop.ok()) return loop.error();
  loop_ = std::move(*loop);
  core_.loop = loop_.get();
  loop_->refresh_now();
  core_.random_bytes(reinterpret_cast<uint8_t*>(core_.msg_rng), sizeof core_.msg_rng);
  if ((core_.msg_rng[0] | core_.msg_rng[1]) == 0)
    core_.msg_rng[1] = 1;  // xorshift must not start at zero
  WallTime now = loop_->wall_now();
  uint64_t seed = options_.rng_seed ? options_.rng_seed + index_
                                    : static_cast<uint64_t>(now.ns()) ^ (uint64_t{index_} << 32);
  scheduler_ = std::make_unique<Scheduler>(options_.scheduler, options_.policies, seed, now);
  core_.scheduler = scheduler_.get();
  scheduler_->set_id_allocator(&ids_);

  ShardRecovery visitor(core_, now);
  for (Partition p : partitions) {
    auto stats = store_.recover(p, now, visitor);
    if (!stats.ok()) return stats.error();
    ids_.start_at(p, stats->next_sequence);
  }
  if (!core_.missing_policies.empty()) {
    return make_error(Errc::kInvalidArgument,
                      "stored endpoints use a retry policy that is not in the config", "policies",
                      "unknown_policy");
  }
  transport_ = options_.transport_factory(*loop_);
  core_.transport = transport_.get();
  if (!transport_) {  // the factory says why (engine/build.cc); never a null transport later
    return make_error(Errc::kInvalidArgument, "the HTTP transport could not be created",
                      "transport", "transport_failed");
  }
  running_.store(true, std::memory_order_release);
  return ok();
}

Duration Shard::next_wait() const {
  Duration wait = milliseconds(100);
  if (batch_.waiting() || send_.holding()) wait = options_.durable_poll;
  if (leased_ && leased_->releasing() > 0)
    wait = std::min(wait, options_.durable_poll);  // hand-overs wait
  if (handover_.retrying()) wait = std::min<Duration>(wait, milliseconds(50));
  if (batch_.held() || store_.disk_health() == DiskHealth::kFull)
    wait = std::min(wait, TurnBatch::kDiskRetry);
  if (options_.inbox != nullptr && leased_ && !leased_->empty() && !handover_.inbox_polling())
    wait = std::min<Duration>(
        wait, std::max<Duration>(Duration(0), handover_.next_inbox_poll() - loop_->now()));
  if (!core_.draining) {
    if (auto next = scheduler_->next_wakeup()) {
      Duration until = *next - loop_->wall_now();
      // At least 1 ms when due work could not go out (in-flight limits): completions wake
      // the loop anyway, so this is no busy spin.
      if (until < milliseconds(1)) until = commands_.empty() ? milliseconds(1) : Duration(0);
      wait = std::min(wait, until);
    }
  }
  return wait;
}

bool Shard::loop_turn(std::optional<Duration> max_wait) {
  Duration wait = next_wait();
  if (max_wait) wait = std::min(wait, *max_wait);
  loop_->run_once(wait);
  if (stop_requested_.load(std::memory_order_acquire) && !core_.draining) {
    core_.draining = true;
    drain_deadline_ = loop_->now() + options_.stop_grace;
  }
  turn();
  return !(core_.draining &&
           ((send_.in_flight() == 0 && send_.loads_in_flight() == 0 &&
             !intake_.lookups_outstanding() && intake_.inbox_pushes() == 0 &&
             handover_.inbox_ops() == 0 && !handover_.loading() && !send_.holding()) ||
            loop_->now() >= drain_deadline_));
}

void Shard::close_parts() {
  begin_close();
  while (flush_step()) loop_->run_once(milliseconds(1));
  end_close();
}

// Flush: the last batch is written; wait (bounded) until it is durable, then answer.
void Shard::begin_close() {
  closing_ = true;
  batch_.commit_last(loop_->now());  // a batch the disk refused is tried once more
  flush_deadline_ = loop_->now() + seconds(2);
}

bool Shard::flush_step() {
  batch_.flush_durable();
  return batch_.waiting() && loop_->now() < flush_deadline_;
}

void Shard::end_close() {
  closed_ = true;
  batch_.close();
  running_.store(false, std::memory_order_release);
  // Attempts still on the wire stay leased (kInFlight) in the store: the next start records
  // them as lease_expired and retries them with the same id.
  core_.discarding = true;
  transport_.reset();
  core_.transport = nullptr;
  // The loop itself stays until ~Shard: stop(), wake() and post() run on other threads and may
  // still touch loop_ after this thread has left (stop() sets the flag, then wakes the loop; if
  // the thread saw the flag on its own and got here first, a reset here was a use-after-free —
  // ASan caught it in the e2e SIGTERM path, Loop::wake() from Shard::stop()).
}

void Shard::turn() {
  WallTime now = loop_->wall_now();
  commands_.clear();
  const DiskHealth disk = batch_.begin_turn(loop_->now());
  // A networked store that cannot confirm its writes (Redis unreachable, failing over), or a
  // disk that refuses writes: no new attempts until it can (what is due stays due; SPEC R12.2
  // wants the lease durable).
  if (!core_.draining && !store_.degraded() && disk == DiskHealth::kOk && !batch_.held())
    scheduler_->poll(now, commands_, batch_.mutations());
  const MonoTime mono = loop_->now();
  for (const SendCommand& cmd : commands_) {
    if (!ownership_->sendable(id_partition(cmd.delivery), mono)) {
      // Cluster mode: the partition is being handed over, or its ownership is past its local
      // deadline (a pause, Redis unreachable): not sent, no attempt spent (SPEC R2.3).
      TransportResult unsent;
      unsent.deferred = DeferReason::kConnections;
      unsent.not_before = now + milliseconds(200);
      scheduler_->on_result(cmd, unsent, now, now, batch_.mutations());
      metrics_.sends_withheld.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    send_.prepare_send(cmd);
  }
  commit();
  // Their leases are not written (a disk that refuses writes, a failed store): not sent.
  if (batch_.held() || batch_.failed()) send_.withhold_sends();
  // On the wire, or, with a store that confirms later (Redis), held until durable.
  send_.send_turn(mono);
  batch_.flush_durable();
  send_.release_held_sends();
  handover_.progress_releases();
  handover_.retry_failed_loads();
  if (options_.inbox != nullptr && !core_.draining && !handover_.inbox_polling() && leased_ &&
      !leased_->empty() && loop_->now() >= handover_.next_inbox_poll())
    handover_.poll_inboxes();
  send_.refresh_gauges();
}

std::vector<std::pair<Partition, uint64_t>> Shard::owned_partitions() const {
  if (leased_ == nullptr) return {};  // one node: every partition, for good (none handed over)
  return leased_->snapshot();
}

// A written batch (TurnBatch::Listener): every way a delivery ends (a result, 410, delete,
// disable, a ceiling, the breaker's hold limit) passes here once: the outcome counters and the
// UNKNOWN clock (the send path), a requeue job's live count and the embedder's callback; then
// the operator's notifications, the payloads to cache, and the keys a lookup still outstanding
// may not see (the intake).
void Shard::on_written(Mutations& m, uint64_t seq) {
  static_cast<void>(seq);
  const WallTime now = loop_->wall_now();
  const uint64_t batch = ++ended_batch_;
  bool reported = false;
  for (const DeliveryPut& p : m.deliveries) {
    const Delivery& d = p.delivery;
    if (!is_terminal(d.status) || p.rewrite) continue;
    send_.delivery_ended(d, now);
    requeue_.delivery_ended(d.id);
    if (options_.on_delivery_done) {
      ended_.emplace_back(batch, d);
      reported = true;
    }
  }
  if (reported) {
    core_.after_durable([this, batch] {
      for (; ended_head_ < ended_.size() && ended_[ended_head_].first <= batch; ++ended_head_) {
        if (ended_[ended_head_].first == batch)
          options_.on_delivery_done(ended_[ended_head_].second);
      }
      if (ended_head_ == ended_.size()) {
        ended_.clear();
        ended_head_ = 0;
      } else if (ended_head_ >= 1024 && ended_head_ * 2 >= ended_.size()) {
        ended_.erase(ended_.begin(), ended_.begin() + static_cast<ptrdiff_t>(ended_head_));
        ended_head_ = 0;
      }
    });
  }
  if (options_.on_notification && !m.notifications.empty()) {
    for (Notification& n : m.notifications)
      core_.after_durable([this, n = std::move(n)] { options_.on_notification(n); });
  }
  intake_.on_written(m);
}

void Shard::after_commit(bool dropped) {
  intake_.after_commit(dropped);
  handover_.reset_epochs_after_commit();
}

}  // namespace ringcast::engine
