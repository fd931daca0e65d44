// The shard's life and its loop: construction, start (recovery of the partitions it owns), the
// thread and its turn (SPEC R12.2: poll, commit, then send), stop; ids. Its other parts are in
// engine/shard_*.cc (engine/shard_internal.h: what they share).
#include "engine/shard.h"

#include <pthread.h>

#include <algorithm>

#include <openssl/rand.h>

#include "engine/shard_internal.h"

namespace ringcast::engine {

Shard::Shard(uint32_t index, const EngineOptions& options, Store& store)
    : index_(index),
      options_(options),
      store_(store),
      batch_(index, store, metrics_, *this),
      mutations_(batch_.mutations()),
      payloads_(options.payload_cache_bytes / std::max<uint32_t>(1, options.shards)) {
  poster_.shard = this;
  if (options.ownership) {
    auto leased = std::make_unique<LeasedOwnership>(*options.ownership);
    leased_ = leased.get();
    ownership_ = std::move(leased);
  } else {
    ownership_ = std::make_unique<StaticOwnership>();
  }
}

void Shard::LoopPoster::post(std::function<void()> fn) {
  shard->loop_->post(std::move(fn));
}

Shard::~Shard() {
  stop();
  if (inline_ && !closed_) {
    // A crash (the simulation): nothing more is written or answered; the transport goes first,
    // while the slots its operations point at still exist.
    discarding_ = true;
    running_.store(false, std::memory_order_release);
    transport_.reset();
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

// xoshiro128+-style generator seeded from the system CSPRNG at thread start: 80 random bits per
// id, no syscall per event. Unpredictability is not needed (the id is not a secret), only
// uniqueness across processes and restarts, which the seed and the millisecond prefix give.
std::string Shard::new_message_id(WallTime now) {
  auto next = [this] {
    uint64_t s1 = msg_rng_[0];
    const uint64_t s0 = msg_rng_[1];
    const uint64_t out = s0 + s1;
    msg_rng_[0] = s0;
    s1 ^= s1 << 23;
    msg_rng_[1] = s1 ^ s0 ^ (s1 >> 18) ^ (s0 >> 5);
    return out;
  };
  const uint64_t hi = next();
  return make_message_id(now, hi, next());
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

void Shard::random_bytes(uint8_t* out, size_t n) {
  if (options_.entropy) {
    options_.entropy(out, n);
  } else {
    RAND_bytes(out, n);
  }
}

Result<void> Shard::open_parts(std::vector<Partition> partitions) {
  net::LoopOptions lo;
  lo.clock = options_.clock;
  auto loop = net::Loop::create(lo);
  if (!loop.ok()) return loop.error();
  loop_ = std::move(*loop);
  loop_->refresh_now();
  random_bytes(reinterpret_cast<uint8_t*>(msg_rng_), sizeof msg_rng_);
  if ((msg_rng_[0] | msg_rng_[1]) == 0) msg_rng_[1] = 1;  // xorshift must not start at zero
  WallTime now = loop_->wall_now();
  uint64_t seed = options_.rng_seed ? options_.rng_seed + index_
                                    : static_cast<uint64_t>(now.ns()) ^ (uint64_t{index_} << 32);
  scheduler_ = std::make_unique<Scheduler>(options_.scheduler, options_.policies, seed, now);
  scheduler_->set_id_allocator(&ids_);

  Recovery visitor(*this, now);
  for (Partition p : partitions) {
    auto stats = store_.recover(p, now, visitor);
    if (!stats.ok()) return stats.error();
    ids_.start_at(p, stats->next_sequence);
  }
  if (!missing_policies_.empty()) {
    return make_error(Errc::kInvalidArgument,
                      "stored endpoints use a retry policy that is not in the config", "policies",
                      "unknown_policy");
  }
  transport_ = options_.transport_factory(*loop_);
  if (!transport_) {  // the factory says why (engine/build.cc); never a null transport later
    return make_error(Errc::kInvalidArgument, "the HTTP transport could not be created",
                      "transport", "transport_failed");
  }
  running_.store(true, std::memory_order_release);
  return ok();
}

Duration Shard::next_wait() const {
  Duration wait = milliseconds(100);
  if (batch_.waiting() || !held_sends_.empty()) wait = options_.durable_poll;
  if (leased_ && leased_->releasing() > 0)
    wait = std::min(wait, options_.durable_poll);  // hand-overs wait
  if (!retry_loads_.empty()) wait = std::min<Duration>(wait, milliseconds(50));
  if (batch_.held() || store_.disk_health() == DiskHealth::kFull)
    wait = std::min(wait, TurnBatch::kDiskRetry);
  if (options_.inbox != nullptr && leased_ && !leased_->empty() && !inbox_polling_)
    wait =
        std::min<Duration>(wait, std::max<Duration>(Duration(0), next_inbox_poll_ - loop_->now()));
  if (!draining_) {
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
  if (stop_requested_.load(std::memory_order_acquire) && !draining_) {
    draining_ = true;
    drain_deadline_ = loop_->now() + options_.stop_grace;
  }
  turn();
  return !(draining_ && ((in_flight_ == 0 && loads_in_flight_ == 0 && lookups_by_gen_.empty() &&
                          inbox_ops_ == 0 && loading_.empty() && held_sends_.empty()) ||
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
  discarding_ = true;
  transport_.reset();
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
  if (!draining_ && !store_.degraded() && disk == DiskHealth::kOk && !batch_.held())
    scheduler_->poll(now, commands_, mutations_);
  const MonoTime mono = loop_->now();
  for (const SendCommand& cmd : commands_) {
    if (!ownership_->sendable(id_partition(cmd.delivery), mono)) {
      // Cluster mode: the partition is being handed over, or its ownership is past its local
      // deadline (a pause, Redis unreachable): not sent, no attempt spent (SPEC R2.3).
      TransportResult unsent;
      unsent.deferred = DeferReason::kConnections;
      unsent.not_before = now + milliseconds(200);
      scheduler_->on_result(cmd, unsent, now, now, mutations_);
      metrics_.sends_withheld.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    prepare_send(cmd);
  }
  commit();
  // Their leases are not written (a disk that refuses writes, a failed store): not sent.
  if (batch_.held() || batch_.failed()) withhold_sends();
  // A store that confirms later (Redis): this turn's sends wait until its batch is durable.
  const uint64_t written = batch_.last_written();
  const bool hold = !store_.durable_on_write() && store_.durable_seq() < written;
  for (SendSlot* slot : to_send_) {
    if (hold) {
      held_sends_.push_back({written, slot});
      continue;
    }
    send_now(slot, mono);
  }
  to_send_.clear();
  turn_loaded_.clear();
  batch_.flush_durable();
  release_held_sends();
  progress_releases();
  retry_failed_loads();
  if (options_.inbox != nullptr && !draining_ && !inbox_polling_ && leased_ && !leased_->empty() &&
      loop_->now() >= next_inbox_poll_)
    poll_inboxes();
  refresh_gauges();
}

}  // namespace ringcast::engine
