#include "engine/shard.h"

#include <pthread.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>

#include <openssl/rand.h>

#include "core/endpoint_headers.h"
#include "core/endpoint_rules.h"
#include "core/event_input.h"
#include "core/fanout.h"
#include "core/url.h"
#include "log/log.h"
#include "net/signing.h"

namespace ringcast::engine {

namespace {

Error unknown_tenant() {
  return make_error(Errc::kNotFound, "unknown tenant: create an endpoint first", "tenant",
                    "unknown_tenant");
}
Error invalid_event_id() {
  return make_error(Errc::kInvalidArgument,
                    "event id must be 1-256 printable ASCII characters without spaces", "id",
                    "invalid_event_id");
}
Error unknown_endpoint() {
  return make_error(Errc::kNotFound, "no such endpoint for this tenant", "endpoint",
                    "unknown_endpoint");
}
Error shutting_down() {
  return make_error(Errc::kUnavailable, "the engine is shutting down", nullptr, "shutting_down");
}

// Event ids travel in webhook headers (SPEC R11): the intakes' rule (core/event_input.h), here
// for what an embedder submits through the C++ API.
bool valid_event_id(std::string_view id) {
  return !check_event_id(id, kMaxEventIdBytes).has_value();
}

size_t status_class(uint16_t status) {
  return status >= 100 && status < 600 ? status / 100 : 0;
}

}  // namespace

// A pooled, pinned send operation (STYLE 4): one per attempt on the wire.
class Shard::SendSlot final : public SendOp {
 public:
  explicit SendSlot(Shard* shard) : shard_(shard) {}
  void on_complete() override { shard_->on_send_complete(this); }
  SendCommand cmd{};
  uint64_t epoch = 0;                  // cluster mode: the partition's epoch when it was taken
  std::shared_ptr<const Event> event;  // owns request.body while the request is out
  void release() {                     // the request is done: let go of its event
    request.body = {};
    event.reset();
  }

 private:
  Shard* shard_;
};

class Shard::Recovery final : public RecoveryVisitor {
 public:
  Recovery(Shard& s, WallTime now) : s_(s), now_(now) {}
  void on_endpoint(const Endpoint& e) override {
    s_.known_tenants_[e.tenant] = true;
    if (!s_.scheduler_->restore_endpoint(e).ok()) ++s_.missing_policies_[e.policy];
  }
  void on_tenant(const Tenant& t) override {
    s_.scheduler_->restore_tenant(t);
    s_.known_tenants_[t.name] = true;
  }
  void on_delivery(const Delivery& d) override { s_.scheduler_->restore_delivery(d, now_); }

 private:
  Shard& s_;
  WallTime now_;
};

Shard::Shard(uint32_t index, const EngineOptions& options, Store& store)
    : index_(index),
      options_(options),
      store_(store),
      dynamic_(options.ownership.has_value()),
      payloads_(options.payload_cache_bytes / std::max<uint32_t>(1, options.shards)) {
  poster_.shard = this;
}

void Shard::LoopPoster::post(std::function<void()> fn) {
  shard->loop_->post(std::move(fn));
}

uint64_t Shard::begin_lookup() {
  ++lookups_by_gen_[commit_gen_];
  return commit_gen_;
}

void Shard::end_lookup(uint64_t gen) {
  auto it = lookups_by_gen_.find(gen);
  if (it != lookups_by_gen_.end() && --it->second == 0) lookups_by_gen_.erase(it);
  prune_settling();
}

// A settling key committed in generation g is visible to every lookup issued after g.
void Shard::prune_settling() {
  if (settling_order_.empty()) return;
  const uint64_t oldest = lookups_by_gen_.empty() ? UINT64_MAX : lookups_by_gen_.begin()->first;
  while (!settling_order_.empty() && settling_order_.front().first <= oldest) {
    settling_.erase(settling_order_.front().second);
    settling_order_.pop_front();
  }
}

Shard::~Shard() {
  stop();
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

uint64_t Shard::next_id(Partition p) {
  return make_id(p, next_seq_[p]++);
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
  auto loop = net::Loop::create({});
  if (!loop.ok()) {
    started.set_value(loop.error());
    return;
  }
  loop_ = std::move(*loop);
  loop_->refresh_now();
  RAND_bytes(reinterpret_cast<uint8_t*>(msg_rng_), sizeof msg_rng_);
  if ((msg_rng_[0] | msg_rng_[1]) == 0) msg_rng_[1] = 1;  // xorshift must not start at zero
  WallTime now = loop_->wall_now();
  uint64_t seed = options_.rng_seed ? options_.rng_seed + index_
                                    : static_cast<uint64_t>(now.ns()) ^ (uint64_t{index_} << 32);
  scheduler_ = std::make_unique<Scheduler>(options_.scheduler, options_.policies, seed, now);
  scheduler_->set_id_allocator(this);

  Recovery visitor(*this, now);
  for (Partition p : partitions) {
    auto stats = store_.recover(p, now, visitor);
    if (!stats.ok()) {
      started.set_value(stats.error());
      return;
    }
    next_seq_[p] = stats->next_sequence;
  }
  if (!missing_policies_.empty()) {
    started.set_value(make_error(Errc::kInvalidArgument,
                                 "stored endpoints use a retry policy that is not in the config",
                                 "policies", "unknown_policy"));
    return;
  }
  transport_ = options_.transport_factory(*loop_);
  if (!transport_) {  // the factory says why (engine/build.cc); never a null transport later
    started.set_value(make_error(Errc::kInvalidArgument, "the HTTP transport could not be created",
                                 "transport", "transport_failed"));
    return;
  }
  running_.store(true, std::memory_order_release);
  started.set_value(ok());

  MonoTime drain_deadline;
  for (;;) {
    Duration wait = milliseconds(100);
    if (!acks_.empty() || !held_sends_.empty()) wait = options_.durable_poll;
    if (releasing_ > 0) wait = std::min(wait, options_.durable_poll);  // hand-overs wait
    if (!retry_loads_.empty()) wait = std::min<Duration>(wait, milliseconds(50));
    if (write_held_ || store_.disk_health() == DiskHealth::kFull) wait = std::min(wait, kDiskRetry);
    if (options_.inbox != nullptr && !owned_.empty() && !inbox_polling_)
      wait = std::min<Duration>(wait,
                                std::max<Duration>(Duration(0), next_inbox_poll_ - loop_->now()));
    if (!draining_) {
      if (auto next = scheduler_->next_wakeup()) {
        Duration until = *next - loop_->wall_now();
        // At least 1 ms when due work could not go out (in-flight limits): completions wake
        // the loop anyway, so this is no busy spin.
        if (until < milliseconds(1)) until = commands_.empty() ? milliseconds(1) : Duration(0);
        wait = std::min(wait, until);
      }
    }
    loop_->run_once(wait);
    if (stop_requested_.load(std::memory_order_acquire) && !draining_) {
      draining_ = true;
      drain_deadline = loop_->now() + options_.stop_grace;
    }
    turn();
    if (draining_ && ((in_flight_ == 0 && loads_in_flight_ == 0 && lookups_by_gen_.empty() &&
                       inbox_ops_ == 0 && loading_.empty() && held_sends_.empty()) ||
                      loop_->now() >= drain_deadline))
      break;
  }

  // Flush: the last batch is written; wait (bounded) until it is durable, then answer.
  next_disk_retry_ = loop_->now();  // a batch the disk refused is tried once more
  commit();
  MonoTime flush_deadline = loop_->now() + seconds(2);
  while (!acks_.empty() && loop_->now() < flush_deadline) {
    flush_durable_acks();
    if (!acks_.empty()) loop_->run_once(milliseconds(1));
  }
  if (!store_failed_ && store_.disk_health() == DiskHealth::kFailed)
    on_store_failed(make_error(Errc::kUnavailable, "the store failed", nullptr, "storage_failed"));
  if (store_.disk_health() == DiskHealth::kFull) {
    // Written, but a read-only disk may refuse the sync at close as well: not acknowledged.
    const Error full = make_error(Errc::kUnavailable,
                                  "the data dir is full or read-only: this write may not be "
                                  "durable; retry once space is freed",
                                  nullptr, "storage_full");
    for (auto& a : acks_) {
      if (a.lost) a.lost(full);
    }
    acks_.clear();
  }
  for (auto& a : acks_) a.fire();  // written to the WAL; the process exits normally
  acks_.clear();
  // A batch the disk still refuses is not written: its intake was answered 503 when it was
  // refused; other answers waiting for it are not given (the next start recovers without it).
  turn_acks_.clear();
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
  const DiskHealth disk = store_.disk_health();
  if (disk == DiskHealth::kFailed && !store_failed_)
    on_store_failed(make_error(Errc::kUnavailable, "the store failed", nullptr, "storage_failed"));
  // The disk refuses writes and no batch of ours waits to be written again: a small write now
  // and then finds out when it takes them again (so the refusal ends by itself).
  if (disk == DiskHealth::kFull && !write_held_ && loop_->now() >= next_disk_retry_) {
    next_disk_retry_ = loop_->now() + kDiskRetry;
    static_cast<void>(store_.retry_disk());
  }
  // A networked store that cannot confirm its writes: its server refuses writes it cannot
  // persist (Redis: MISCONF, its disk full), or it has been unreachable (or failing over) for
  // kUnconfirmedAnswerAfter. The batches are sent again until they are confirmed, which may be
  // long; intake waiting for them is answered 503 now instead of hanging (not acknowledged:
  // sent again under the same id, it is a 200 once the batch is written).
  if (!store_.durable_on_write()) {
    if (!store_.degraded()) {
      degraded_since_.reset();
    } else if (!degraded_since_) {
      degraded_since_ = loop_->now();
    }
    if (disk == DiskHealth::kFull) {
      answer_unpersisted_intake(make_error(
          Errc::kUnavailable,
          "the store cannot persist writes now (Redis' disk is full or failing): this one is "
          "not acknowledged; retry once space is freed",
          nullptr, "storage_full"));
    } else if (degraded_since_ && loop_->now() - *degraded_since_ >= kUnconfirmedAnswerAfter) {
      answer_unpersisted_intake(make_error(
          Errc::kUnavailable,
          "the store cannot confirm writes now (Redis unreachable or failing over): this one "
          "is not acknowledged yet; retry in a moment",
          nullptr, "store_unavailable"));
    }
  }
  // A networked store that cannot confirm its writes (Redis unreachable, failing over), or a
  // disk that refuses writes: no new attempts until it can (what is due stays due; SPEC R12.2
  // wants the lease durable).
  if (!draining_ && !store_.degraded() && disk == DiskHealth::kOk && !write_held_)
    scheduler_->poll(now, commands_, mutations_);
  const MonoTime mono = loop_->now();
  for (const SendCommand& cmd : commands_) {
    if (dynamic_ && !sendable(id_partition(cmd.delivery), mono)) {
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
  if (write_held_ || store_failed_) withhold_sends();
  // A store that confirms later (Redis): this turn's sends wait until its batch is durable.
  const bool hold = !store_.durable_on_write() && store_.durable_seq() < last_written_seq_;
  for (SendSlot* slot : to_send_) {
    if (hold) {
      held_sends_.push_back({last_written_seq_, slot});
      continue;
    }
    ++in_flight_;
    transport_->send(slot);
  }
  to_send_.clear();
  turn_loaded_.clear();
  flush_durable_acks();
  release_held_sends();
  if (dynamic_ && !owned_.empty()) progress_releases();
  if (dynamic_) retry_failed_loads();
  if (options_.inbox != nullptr && !draining_ && !inbox_polling_ && !owned_.empty() &&
      loop_->now() >= next_inbox_poll_)
    poll_inboxes();
  refresh_gauges();
}

// ---- cluster mode: the inboxes of the partitions held here (core/inbox.h) -------------------

void Shard::poll_inboxes() {
  const MonoTime now = loop_->now();
  next_inbox_poll_ = now + options_.inbox_poll;
  if (store_.degraded()) return;  // what is drained could not be written now
  std::vector<std::pair<Partition, std::string>> after;
  for (const auto& [p, o] : owned_) {
    if (o.releasing || o.inbox_busy) continue;
    after.emplace_back(p, o.inbox_cursor);
  }
  if (after.empty()) return;
  inbox_polling_ = true;
  ++inbox_ops_;
  // Every inbox now and then (a sweep: a ring can be lost, and what was queued before this
  // shard held a partition rang nobody's bell); between sweeps only the rung ones.
  if (now >= next_inbox_sweep_ || inbox_sweep_now_) {
    next_inbox_sweep_ = now + options_.inbox_poll * 20;
    inbox_sweep_now_ = false;
    return read_inboxes(std::move(after));
  }
  std::vector<Partition> mine;
  mine.reserve(after.size());
  for (const auto& a : after) mine.push_back(a.first);
  options_.inbox->take_rung(
      std::move(mine), poster_,
      [this, after = std::move(after)](Result<std::vector<Partition>> rung) mutable {
        if (!rung.ok() || rung->empty() || draining_) {
          --inbox_ops_;
          inbox_polling_ = false;
          return;
        }
        std::erase_if(after, [&](const auto& a) {
          return std::find(rung->begin(), rung->end(), a.first) == rung->end();
        });
        // The rung partitions are read even if their drain starts later: the ring is taken.
        for (auto& a : after) {
          if (auto it = owned_.find(a.first); it != owned_.end())
            a.second = it->second.inbox_cursor;
        }
        --inbox_ops_;
        inbox_polling_ = false;
        if (after.empty()) return;
        inbox_polling_ = true;
        ++inbox_ops_;
        read_inboxes(std::move(after));
      });
}

void Shard::read_inboxes(std::vector<std::pair<Partition, std::string>> after) {
  std::vector<uint64_t> epochs;
  epochs.reserve(after.size());
  for (const auto& a : after) {
    auto it = owned_.find(a.first);
    epochs.push_back(it == owned_.end() ? 0 : it->second.epoch);
  }
  const size_t max_each = std::clamp<size_t>(options_.max_batch_events, 1, 1000);
  options_.inbox->read(
      std::move(after), max_each, poster_,
      [this, epochs = std::move(epochs), max_each](Result<std::vector<InboxRead>> r) {
        --inbox_ops_;
        inbox_polling_ = false;
        if (!r.ok()) inbox_sweep_now_ = true;  // the rings taken for it are gone: read them all
        if (!r.ok() || draining_) return;
        for (size_t i = 0; i < r->size() && i < epochs.size(); ++i) {
          InboxRead& read = (*r)[i];
          if (read.entries.empty()) continue;
          const bool full = read.entries.size() >= max_each;
          drain_inbox(read.p, epochs[i], std::move(read.entries), full);
        }
      });
}

void Shard::drain_inbox(Partition p, uint64_t epoch, std::vector<InboxEntry> entries, bool full) {
  auto it = owned_.find(p);
  if (it == owned_.end() || it->second.epoch != epoch || it->second.releasing) return;
  it->second.inbox_busy = true;
  std::vector<EventInput> events;
  std::vector<std::string> ids;
  events.reserve(entries.size());
  ids.reserve(entries.size());
  for (InboxEntry& e : entries) {
    ids.push_back(std::move(e.id));
    events.push_back(std::move(e.event));
  }
  std::vector<std::string> fields;
  fields.reserve(events.size());
  for (const EventInput& e : events) {
    std::string f = e.tenant;
    f.push_back('\0');
    f += e.id;
    fields.push_back(std::move(f));
  }
  const std::string from = it->second.inbox_cursor;
  // Answered once what the events became is durable (and not fenced: a fenced write is
  // answered not_owner). Entries whose answer is final leave the inbox; the first one that
  // could not be taken in now (the store, p's ownership) and those after it stay for the next poll.
  submit_events(std::move(events), true,
                [this, p, epoch, full, from, ids = std::move(ids),
                 fields = std::move(fields)](std::vector<Result<SubmitResult>> rs) mutable {
                  std::vector<std::string> ack_ids, ack_fields;
                  std::string cursor = from;
                  bool stopped = false;
                  for (size_t k = 0; k < rs.size() && k < ids.size(); ++k) {
                    const Result<SubmitResult>& r = rs[k];
                    if (!r.ok()) {
                      const Error& e = r.error();
                      const bool final = e.code == Errc::kConflict || e.code == Errc::kNotFound ||
                                         e.code == Errc::kInvalidArgument;
                      if (!final) {
                        stopped = true;
                        break;
                      }
                      metrics_.inbox_dropped.fetch_add(1, std::memory_order_relaxed);
                      log::warn("shard {}: partition {}: queued event dropped ({}): {}", index_,
                                static_cast<unsigned>(p), e.reason_or_code(),
                                e.message ? e.message : "");
                    } else {
                      metrics_.inbox_drained.fetch_add(1, std::memory_order_relaxed);
                    }
                    ack_ids.push_back(std::move(ids[k]));
                    ack_fields.push_back(std::move(fields[k]));
                    cursor = ack_ids.back();
                  }
                  if (!ack_ids.empty())
                    options_.inbox->ack(p, std::move(ack_ids), std::move(ack_fields));
                  auto it = owned_.find(p);
                  if (it == owned_.end() || it->second.epoch != epoch) return;
                  it->second.inbox_busy = false;
                  it->second.inbox_cursor = std::move(cursor);
                  // More waiting (a full read), or some left for later (a transient error): read
                  // every inbox at the next poll — at once after a full read — since no ring says
                  // so.
                  if (full || stopped) inbox_sweep_now_ = true;
                  if (full && !stopped) next_inbox_poll_ = loop_->now();
                });
}

// ---- cluster mode: partitions change owners (docs/cluster.md) -------------------------------

Error not_owner_error() {
  return make_error(Errc::kUnavailable,
                    "this node does not own the tenant's partition now: retry on another node, "
                    "or here in a moment",
                    nullptr, "not_owner");
}

bool Shard::serves(std::string_view tenant) const {
  if (!dynamic_) return true;
  auto it = owned_.find(partition_of(tenant));
  return it != owned_.end() && !it->second.releasing;
}

bool Shard::sendable(Partition p, MonoTime now, std::optional<uint64_t> epoch) const {
  auto it = owned_.find(p);
  if (it == owned_.end() || it->second.releasing) return false;
  if (epoch && it->second.epoch != *epoch) return false;
  return options_.ownership->valid(p, it->second.epoch, now);
}

std::vector<std::pair<Partition, uint64_t>> Shard::owned_partitions() const {
  std::lock_guard<std::mutex> lock(owned_mu_);
  std::vector<std::pair<Partition, uint64_t>> out;
  for (const auto& [p, o] : owned_) out.emplace_back(p, o.epoch);
  std::sort(out.begin(), out.end());
  return out;
}

void Shard::acquire_partition(Partition p, uint64_t epoch) {
  if (!dynamic_) return;
  std::erase_if(retry_loads_, [&](const RetryLoad& r) { return r.p == p; });
  if (auto it = owned_.find(p); it != owned_.end()) {
    if (it->second.epoch == epoch) return;
    forget_partition(p);  // an older epoch of ours: what it had is reloaded below
  }
  if (store_.degraded()) {
    // Its writes could not be confirmed now (the load turns back leases and waits for that):
    // try when the store is back rather than block this loop for the load's whole timeout.
    retry_loads_.push_back({p, epoch, loop_->now() + milliseconds(200)});
    return;
  }
  if (auto it = loading_.find(p); it != loading_.end() && it->second == epoch) return;
  if (std::find(epoch_resets_.begin(), epoch_resets_.end(), p) != epoch_resets_.end()) {
    // What an older epoch of p took in this turn is not written yet: it must go out at that
    // epoch, not this one (its load would not see it). After this turn's commit.
    retry_loads_.push_back({p, epoch, loop_->now()});
    return;
  }
  options_.ownership->set_epoch(p, epoch);
  // The load runs off this thread (a networked store loads on a thread of its own): the shard
  // goes on serving its other partitions; p's events go to its inbox meanwhile. An answer for
  // an epoch this shard no longer takes p at (lost, handed over, taken again) is dropped.
  loading_[p] = epoch;
  store_.recover_async(p, loop_->wall_now(), poster_,
                       [this, p, epoch](Result<RecoveredPartition> r) {
                         auto it = loading_.find(p);
                         if (it == loading_.end() || it->second != epoch) return;
                         loading_.erase(it);
                         finish_acquire(p, epoch, std::move(r));
                       });
}

void Shard::finish_acquire(Partition p, uint64_t epoch, Result<RecoveredPartition> loaded) {
  if (!loaded.ok()) {
    // Not taken yet (Redis failing over, say): tried again every 200 ms while its ownership holds.
    // Nothing of p is sent here meanwhile; its intake goes to its inbox (or not_owner).
    log::warn("shard {}: partition {} (epoch {}) did not load: {}; trying again", index_,
              static_cast<unsigned>(p), static_cast<unsigned long long>(epoch),
              loaded.error().message);
    options_.ownership->set_epoch(p, 0);
    retry_loads_.push_back({p, epoch, loop_->now() + milliseconds(200)});
    return;
  }
  Recovery visitor(*this, loop_->wall_now());
  for (const Endpoint& e : loaded->endpoints) visitor.on_endpoint(e);
  for (const Tenant& t : loaded->tenants) visitor.on_tenant(t);
  for (const Delivery& d : loaded->deliveries) visitor.on_delivery(d);
  const RecoveryStats* stats = &loaded->stats;
  if (!missing_policies_.empty()) {
    for (const auto& [name, count] : missing_policies_) {
      log::warn(
          "shard {}: partition {}: {} stored endpoint(s) use policy \"{}\", "
          "which is not in the config: they are not served here",
          index_, static_cast<unsigned>(p), count, name.c_str());
    }
    missing_policies_.clear();
  }
  next_seq_[p] = stats->next_sequence;
  std::lock_guard<std::mutex> lock(owned_mu_);
  OwnedPart& o = owned_[p];
  o = OwnedPart{};
  o.epoch = epoch;
  next_inbox_poll_ = loop_->now();  // what was queued for p while nobody held it: a sweep
  inbox_sweep_now_ = true;
  metrics_.partitions_acquired.fetch_add(1, std::memory_order_relaxed);
  loop_->wake();
}

void Shard::retry_failed_loads() {
  if (retry_loads_.empty()) return;
  const MonoTime now = loop_->now();
  std::vector<RetryLoad> due;
  for (auto it = retry_loads_.begin(); it != retry_loads_.end();) {
    if (it->at <= now) {
      due.push_back(*it);
      it = retry_loads_.erase(it);
    } else {
      ++it;
    }
  }
  for (const RetryLoad& r : due) {
    // Until its ownership is lost (lose_partition drops the entry): an ownership past its
    // local deadline for a moment (Redis failing over) may be renewed at the same epoch.
    if (options_.ownership->valid(r.p, r.epoch, now)) {
      acquire_partition(r.p, r.epoch);
    } else {
      retry_loads_.push_back({r.p, r.epoch, now + milliseconds(200)});
    }
  }
}

void Shard::release_partition(Partition p, uint64_t epoch, std::function<void()> done) {
  std::erase_if(retry_loads_, [&](const RetryLoad& r) { return r.p == p && r.epoch <= epoch; });
  if (auto it = loading_.find(p); it != loading_.end() && it->second <= epoch) {
    loading_.erase(it);  // still loading: nothing of it here yet (its answer is dropped)
    options_.ownership->set_epoch(p, 0);
  }
  auto it = owned_.find(p);
  if (!dynamic_ || it == owned_.end() || it->second.epoch != epoch) {
    if (done) done();  // nothing of it here (lost meanwhile, or never loaded)
    return;
  }
  if (!it->second.releasing) ++releasing_;
  it->second.releasing = true;
  it->second.done = std::move(done);
  loop_->wake();
}

void Shard::lose_partition(Partition p, uint64_t epoch) {
  std::erase_if(retry_loads_, [&](const RetryLoad& r) { return r.p == p && r.epoch <= epoch; });
  if (auto it = loading_.find(p); it != loading_.end() && it->second <= epoch) {
    loading_.erase(it);
    options_.ownership->set_epoch(p, 0);
  }
  auto it = owned_.find(p);
  if (!dynamic_ || it == owned_.end() || it->second.epoch != epoch) return;
  std::function<void()> done = std::move(it->second.done);
  forget_partition(p);
  metrics_.partitions_lost.fetch_add(1, std::memory_order_relaxed);
  if (done) done();
}

// A releasing partition is done once nothing of it is on the wire and the batch that wrote
// its last results is durable: the next owner, which takes ownership only after done(),
// then reads everything this node did.
void Shard::progress_releases() {
  if (releasing_ == 0) return;  // every turn: no walk over the owned partitions for nothing
  std::vector<Partition> finished;
  for (auto& [p, o] : owned_) {
    if (!o.releasing || o.in_flight > 0) continue;
    if (!o.flushed) {
      o.flushed = true;
      o.release_seq = last_written_seq_;  // this turn's commit already ran
    }
    if (store_.durable_seq() >= o.release_seq) finished.push_back(p);
  }
  if (finished.empty()) return;
  std::vector<std::function<void()>> dones;
  for (Partition p : finished) dones.push_back(std::move(owned_[p].done));
  forget_partitions(finished);
  metrics_.partitions_released.fetch_add(finished.size(), std::memory_order_relaxed);
  for (auto& done : dones) {
    if (done) done();
  }
}

void Shard::forget_partition(Partition p) {
  forget_partitions({p});
}

void Shard::forget_partitions(const std::vector<Partition>& list) {
  PartitionSet ps;
  for (Partition p : list) ps.set(p);
  scheduler_->drop_partitions(ps);
  payloads_.drop_partitions(ps);  // the next owner may reuse seqs a fenced write of ours held
  std::erase_if(known_tenants_, [&](const auto& t) { return ps.test(partition_of(t.first)); });
  std::erase_if(unknown_since_, [&](const auto& u) { return ps.test(id_partition(u.first)); });
  // Requeue jobs of these partitions end here (their worker sees `cancel`); their deliveries
  // are the next owner's now.
  for (auto it = job_live_.begin(); it != job_live_.end();) {
    if (!ps.test(id_partition(it->first))) {
      ++it;
      continue;
    }
    it->second->live.fetch_sub(1, std::memory_order_relaxed);
    it = job_live_.erase(it);
  }
  for (auto& [jid, job] : jobs_) {
    if (!ps.test(id_partition(jid))) continue;
    job->cancel.store(true);
    std::lock_guard<std::mutex> jl(job->mu);
    if (job->view.state == JobView::State::kQueued) {  // never started: it ends here
      job->view.state = JobView::State::kFailed;
      job->view.error = "the tenant's partition moved to another node";
      job->view.finished_at = loop_->wall_now();
    }
  }
  for (Partition p : list) {
    next_seq_.erase(p);
    if (mutations_.empty()) {
      options_.ownership->set_epoch(p, 0);
    } else if (std::find(epoch_resets_.begin(), epoch_resets_.end(), p) == epoch_resets_.end()) {
      epoch_resets_.push_back(p);
    }
  }
  std::lock_guard<std::mutex> lock(owned_mu_);
  for (Partition p : list) {
    if (auto it = owned_.find(p); it != owned_.end() && it->second.releasing) --releasing_;
    owned_.erase(p);
  }
}

void Shard::reset_epochs_after_commit() {
  if (epoch_resets_.empty() || !mutations_.empty()) return;
  for (Partition p : epoch_resets_) {
    if (!owned_.count(p) && !loading_.count(p)) options_.ownership->set_epoch(p, 0);
  }
  epoch_resets_.clear();
}

void Shard::commit() {
  if (store_failed_) {
    // Nothing becomes durable any more: what the turn changed is dropped (the next start
    // recovers from the store; leases of attempts on the wire expire and are sent again).
    mutations_.clear();
    turn_events_.clear();
    turn_event_index_.clear();
    cache_after_commit_.clear();
    turn_acks_.clear();
    reset_epochs_after_commit();
    return;
  }
  // A batch the disk refused is written again at most every kDiskRetry; until then it stays,
  // and grows with what later turns change (results of attempts that were on the wire).
  if (write_held_ && loop_->now() < next_disk_retry_) return;
  if (!mutations_.empty()) {
    size_t records = mutations_.events.size() + mutations_.deliveries.size() +
                     mutations_.attempts.size() + mutations_.endpoints.size() +
                     mutations_.tenants.size() + mutations_.notifications.size();
    mutations_.event_keys_checked = turn_keys_checked_;
    Result<uint64_t> seq = store_.write(mutations_);
    if (!seq.ok()) {
      const Error& e = seq.error();
      const std::string_view reason = e.reason ? e.reason : "";
      if (reason == "storage_full") return hold_batch(e);
      if (reason == "storage_failed") return on_store_failed(e);
      // Anything else is a bug (a batch the store cannot take): crash-only, the next start
      // recovers from what is durable.
      log::error("shard {}: store write failed ({}: {}); stopping", index_, errc_name(e.code),
                 e.message);
      std::abort();
    }
    turn_keys_checked_ = true;
    if (write_held_) {
      write_held_ = false;
      log::info(
          "shard {}: the data dir takes writes again: the batch kept for {:.1f} s "
          "is written, intake resumes",
          index_, std::chrono::duration<double>(loop_->now() - held_since_).count());
    }
    last_written_seq_ = *seq;
    // Every way a delivery ends (a result, 410, delete, disable, a ceiling, the breaker's hold
    // limit) passes here once: the outcome counters, the UNKNOWN clock and the callback.
    const WallTime now = loop_->wall_now();
    for (const DeliveryPut& p : mutations_.deliveries) {
      const Delivery& d = p.delivery;
      if (!is_terminal(d.status) || p.rewrite) continue;
      switch (d.status) {
        case DeliveryStatus::kDelivered:
          metrics_.deliveries_delivered.fetch_add(1, std::memory_order_relaxed);
          metrics_.delivery_latency.observe(now - d.created_at);
          break;
        case DeliveryStatus::kFailed:
          metrics_.deliveries_failed.fetch_add(1, std::memory_order_relaxed);
          break;
        case DeliveryStatus::kUnknown:
          metrics_.deliveries_unknown.fetch_add(1, std::memory_order_relaxed);
          break;
        default:
          metrics_.deliveries_dead.fetch_add(1, std::memory_order_relaxed);
          break;
      }
      if (!unknown_since_.empty()) unknown_since_.erase(d.id);
      if (!job_live_.empty()) {  // a requeue job's delivery ended again
        if (auto it = job_live_.find(d.id); it != job_live_.end()) {
          it->second->live.fetch_sub(1, std::memory_order_relaxed);
          job_live_.erase(it);
        }
      }
      if (options_.on_delivery_done) {
        turn_acks_.push_back(Ack{0, [this, d] { options_.on_delivery_done(d); }, nullptr});
      }
    }
    if (options_.on_notification && !mutations_.notifications.empty()) {
      for (Notification& n : mutations_.notifications) {
        turn_acks_.push_back(
            Ack{0, [this, n = std::move(n)] { options_.on_notification(n); }, nullptr});
      }
    }
    metrics_.store_batches.fetch_add(1, std::memory_order_relaxed);
    metrics_.store_records.fetch_add(records, std::memory_order_relaxed);
    for (size_t i : cache_after_commit_) {
      payloads_.put(std::make_shared<const Event>(std::move(mutations_.events[i])));
    }
    mutations_.clear();
    ++commit_gen_;
    if (!lookups_by_gen_.empty()) {
      for (auto& [key, rec] : turn_events_) {
        settling_order_.emplace_back(commit_gen_, key);
        settling_[key] = rec;
      }
    }
    turn_events_.clear();
    turn_event_index_.clear();
  }
  cache_after_commit_.clear();
  reset_epochs_after_commit();
  for (Ack& a : turn_acks_) {
    a.seq = last_written_seq_;
    acks_.push_back(std::move(a));
  }
  turn_acks_.clear();
}

void Shard::hold_batch(const Error& why) {
  const MonoTime now = loop_->now();
  if (!write_held_) {
    held_since_ = now;
    log::warn(
        "shard {}: the store refused a batch ({}): it is kept and written again every {} ms; no "
        "new attempts; intake answers 503 storage_full",
        index_, why.message,
        static_cast<long long>(std::chrono::duration_cast<milliseconds>(kDiskRetry).count()));
  }
  write_held_ = true;
  next_disk_retry_ = now + kDiskRetry;
  // Intake that waits for this batch is answered now (503: not acknowledged). Its events stay
  // in the batch and are written with it: sent again, the same id is then a duplicate (200).
  refuse_waiting(turn_acks_, why);
}

void Shard::refuse_waiting(std::vector<Ack>& list, const Error& why) {
  std::vector<Ack> keep;
  for (Ack& a : list) {
    if (a.lost) {
      a.lost(why);
    } else {
      keep.push_back(std::move(a));
    }
  }
  list.swap(keep);
}

void Shard::answer_unpersisted_intake(const Error& why) {
  flush_durable_acks();
  refuse_waiting(acks_, why);
}

void Shard::on_store_failed(const Error& why) {
  if (store_failed_) return;
  store_failed_ = true;
  write_held_ = false;
  flush_durable_acks();  // what was durable before the failure is answered as usual
  Error e = why;
  e.code = Errc::kUnavailable;
  e.reason = "storage_failed";
  e.message = "the store failed: this write was not made durable; retry once the daemon restarted";
  size_t answered = 0;
  for (std::vector<Ack>* list : {&acks_, &turn_acks_}) {
    for (Ack& a : *list) {
      if (a.lost) {
        a.lost(e);
        ++answered;
      }
    }
    list->clear();
  }
  log::error(
      "shard {}: the store failed: {} intake answer(s) that waited for it "
      "were answered 503 storage_failed; nothing more is sent or written",
      index_, answered);
  commit();  // drops what the turn changed
}

void Shard::withhold_sends() {
  for (SendSlot* slot : to_send_) {
    slot->result = TransportResult{};
    slot->result.deferred = DeferReason::kConnections;
    slot->result.not_before = loop_->wall_now() + kDiskRetry;
    metrics_.sends_withheld.fetch_add(1, std::memory_order_relaxed);
    ++in_flight_;
    loop_->post([slot] { slot->on_complete(); });
  }
  to_send_.clear();
}

Result<void> Shard::check_disk() {
  if (store_failed_)
    return make_error(Errc::kUnavailable,
                      "the store failed (an fsync of the data dir failed): the daemon restarts; "
                      "retry in a moment",
                      nullptr, "storage_failed");
  const DiskHealth disk = store_.disk_health();
  if (write_held_ || disk == DiskHealth::kFull)
    return make_error(Errc::kUnavailable,
                      "the store's disk is full or read-only (the data dir, or Redis' AOF): "
                      "nothing can be made durable now; retry once space is freed",
                      nullptr, "storage_full");
  if (disk == DiskHealth::kFailed)
    return make_error(Errc::kUnavailable,
                      "the store failed (an fsync of the data dir failed): the daemon restarts; "
                      "retry in a moment",
                      nullptr, "storage_failed");
  return ok();
}

void Shard::flush_durable_acks() {
  if (acks_.empty()) return;
  uint64_t durable = store_.durable_seq();
  size_t n = 0;
  while (n < acks_.size() && acks_[n].seq <= durable) ++n;
  if (n == 0) return;
  std::vector<Ack> ready(std::make_move_iterator(acks_.begin()),
                         std::make_move_iterator(acks_.begin() + static_cast<ptrdiff_t>(n)));
  acks_.erase(acks_.begin(), acks_.begin() + static_cast<ptrdiff_t>(n));
  for (auto& a : ready) a.fire();
}

// Sends held until their batch is durable (Store::durable_on_write() false) go out now, or,
// when their partition is no longer sendable here (handed over, ownership past its deadline), come
// back unsent: no attempt spent, the scheduler releases the lease. Also when the partition is
// held at another epoch than the send was leased at (lost and taken again while the batch
// waited), or the store fenced that batch: its lease and event were never stored, and the
// owner at the new epoch read the partition without them and may have given their ids to other
// events — sent, the request would carry a webhook id nobody stored (E2eCluster.RedisPrimaryKill…:
// a Redis failover put the batch in a 3.6 s replay; the partition was lost and taken again
// meanwhile; the retried events got the same seqs under new webhook ids, and the held sends
// went out under the old ones).
void Shard::release_held_sends() {
  if (held_sends_.empty()) return;
  const uint64_t durable = store_.durable_seq();
  const MonoTime mono = loop_->now();
  while (!held_sends_.empty() && held_sends_.front().seq <= durable) {
    SendSlot* slot = held_sends_.front().slot;
    held_sends_.pop_front();
    ++in_flight_;
    const Partition p = id_partition(slot->cmd.delivery);
    if (discarding_ || (dynamic_ && (!sendable(p, mono, slot->epoch) ||
                                     options_.ownership->fenced(p, slot->epoch)))) {
      slot->result = TransportResult{};
      slot->result.deferred = DeferReason::kConnections;
      slot->result.not_before = loop_->wall_now() + milliseconds(200);
      metrics_.sends_withheld.fetch_add(1, std::memory_order_relaxed);
      loop_->post([slot] { slot->on_complete(); });
      continue;
    }
    transport_->send(slot);
  }
}

void Shard::after_durable(std::function<void()> fire, std::function<void(const Error&)> lost) {
  turn_acks_.push_back(Ack{0, std::move(fire), std::move(lost)});
}

void Shard::prepare_send(const SendCommand& cmd) {
  SendSlot* slot;
  if (!free_slots_.empty()) {
    slot = free_slots_.back();
    free_slots_.pop_back();
  } else {
    slots_.push_back(std::make_unique<SendSlot>(this));
    slot = slots_.back().get();
  }
  slot->cmd = cmd;
  slot->epoch = 0;
  if (dynamic_) {
    if (auto it = owned_.find(id_partition(cmd.delivery)); it != owned_.end()) {
      slot->epoch = it->second.epoch;
      ++it->second.in_flight;
    }
  }
  slot->result = TransportResult{};
  slot->started_at = loop_->wall_now();
  SendRequest& req = slot->request;
  req.delivery_id = cmd.delivery;
  req.attempt = cmd.attempt;
  req.pool_key = cmd.endpoint;
  req.body = {};

  std::shared_ptr<const Event> ev = payloads_.find(cmd.event);
  (ev ? metrics_.payload_cache_hits : metrics_.payload_cache_misses)
      .fetch_add(1, std::memory_order_relaxed);
  if (!ev) {
    if (const Event* fresh = turn_event(cmd.event)) {
      // Accepted in this very turn: not in the store until commit(), sent right after it.
      ev = std::make_shared<const Event>(*fresh);
      payloads_.put(ev);
    } else if (auto it = turn_loaded_.find(cmd.event); it != turn_loaded_.end()) {
      ev = it->second;
    } else {
      // Read back from the store: at once from a local store, on a later turn from a
      // networked one (the slot waits; the lease is held meanwhile).
      ++loads_in_flight_;
      store_.load_event_async(cmd.event, poster_,
                              [this, slot](Result<std::optional<Event>> loaded) {
                                --loads_in_flight_;
                                std::shared_ptr<const Event> got;
                                if (!loaded.ok()) {
                                  // An I/O error or a corrupt record: the attempt is recorded
                                  // internal_error and the scheduler retries it like any failed
                                  // attempt.
                                  metrics_.store_errors.fetch_add(1, std::memory_order_relaxed);
                                } else if (loaded->has_value()) {
                                  // Read back for this turn only: the cache admits events at
                                  // intake, so draining a backlog larger than the cache does not
                                  // evict the events the next turns need (a scan through an
                                  // LRU/FIFO cache would miss every time).
                                  got = std::make_shared<const Event>(std::move(**loaded));
                                  turn_loaded_.emplace(slot->cmd.event, got);
                                }
                                finish_prepare(slot, std::move(got));
                              });
      return;
    }
  }
  finish_prepare(slot, std::move(ev));
}

void Shard::finish_prepare(SendSlot* slot, std::shared_ptr<const Event> ev) {
  const SendCommand& cmd = slot->cmd;
  SendRequest& req = slot->request;
  // Looked up now, not before a load: the endpoint may have changed while it was outstanding.
  const Endpoint* ep = scheduler_->find_endpoint(cmd.endpoint);
  req.status_check = cmd.check;
  if (ep) {
    req.url = ep->url;
    req.profile = ep->signature;
    WallTime now = loop_->wall_now();
    size_t n = 0;  // raw key bytes, assigned into the slot's strings (no allocation per attempt)
    for (const Secret& s : ep->secrets) {
      if (s.expires_at <= now) continue;
      if (n < req.secrets.size()) {
        req.secrets[n].assign(s.key);
      } else {
        req.secrets.push_back(s.key);
      }
      ++n;
    }
    req.secrets.resize(n);
  } else {
    req.secrets.clear();
  }
  if (ev) {
    // The id receivers deduplicate by (R11.3): the event's message id, assigned at acceptance,
    // unique across tenants and time and the same on every attempt and endpoint (operations.md
    // "Events"; the producer's id is only the intake idempotency key, unique per tenant).
    req.message_id.assign(ev->message_id);
    req.body = ev->payload;
    if (cmd.check && ep) {  // R12.11: ask the status URL about this webhook id
      req.url = status_check_url(ep->status_url, ev->message_id);
      req.body = {};
    }
  }
  req.extra_headers.clear();  // the slot's buffer: no allocation once it has grown
  if (ep && ev) append_endpoint_headers(*ep, ev->message_id, req.extra_headers);
  if (!ep || !ev) {
    // Nothing to send (endpoint deleted under the lease, or the event is gone): complete it
    // on the next turn as an attempt that never left, so the scheduler decides its fate.
    slot->result.code =
        ErrorCode::of(ep ? ErrorCode::Kind::kInternalError : ErrorCode::Kind::kEndpointDeleted);
    ++in_flight_;
    loop_->post([slot] { slot->on_complete(); });
    return;
  }
  slot->event = std::move(ev);
  to_send_.push_back(slot);
}

const Event* Shard::turn_event(EventSeq seq) {
  if (mutations_.events.empty()) return nullptr;
  if (turn_event_index_.size() != mutations_.events.size()) {
    turn_event_index_.clear();
    for (const Event& e : mutations_.events) turn_event_index_.emplace(e.seq, &e);
  }
  auto it = turn_event_index_.find(seq);
  return it == turn_event_index_.end() ? nullptr : it->second;
}

void Shard::on_send_complete(SendSlot* slot) {
  --in_flight_;
  if (dynamic_ && !discarding_) {
    auto it = owned_.find(id_partition(slot->cmd.delivery));
    if (it == owned_.end() || it->second.epoch != slot->epoch) {
      // Its partition was lost (or lost and taken again) while it was out: the scheduler
      // frees the orphaned lease without writing anything; the new owner retries it.
      scheduler_->on_result(slot->cmd, slot->result, slot->started_at, loop_->wall_now(),
                            mutations_);
      slot->release();
      free_slots_.push_back(slot);
      return;
    }
    --it->second.in_flight;
  }
  if (discarding_) {  // stopping: the transport cancels what is left; the leases stay open
    slot->release();
    free_slots_.push_back(slot);
    return;
  }
  WallTime now = loop_->wall_now();
  const TransportResult& r = slot->result;
  if (r.deferred != DeferReason::kNone) {
    // Never sent (pacing, connection limits): no attempt, no outcome, no transport failure;
    // the scheduler releases the lease (SPEC R2.3). An UNKNOWN before it stays UNKNOWN.
    metrics_.sends_deferred[static_cast<size_t>(r.deferred)].fetch_add(1,
                                                                       std::memory_order_relaxed);
    scheduler_->on_result(slot->cmd, r, slot->started_at, now, mutations_);
    slot->release();
    free_slots_.push_back(slot);
    return;
  }
  if (slot->cmd.check) {
    // R12.11: a status check is no attempt: its own counters; a definitive answer (2xx: the
    // receiver has it; 404: it never got it) settles the delivery's UNKNOWN streak (R12.8).
    const uint16_t st = r.response_received ? r.http_status : 0;
    const size_t answer = st >= 200 && st < 300 && st != 202 ? 0 : st == 404 ? 1 : 2;
    metrics_.reconcile_checks[answer].fetch_add(1, std::memory_order_relaxed);
    if (answer != 2) {
      if (auto since = unknown_since_.find(slot->cmd.delivery); since != unknown_since_.end()) {
        const Duration spent = std::max(Duration(0), now - since->second);
        metrics_.unknown_seconds_us.fetch_add(static_cast<uint64_t>(spent.count() / 1000),
                                              std::memory_order_relaxed);
        metrics_.unknown_duration.observe(spent);
        unknown_since_.erase(since);
      }
    }
    const ResultReport report =
        scheduler_->on_result(slot->cmd, r, slot->started_at, now, mutations_);
    if (report.reconcile_expired)
      metrics_.reconcile_expired.fetch_add(1, std::memory_order_relaxed);
    slot->release();
    free_slots_.push_back(slot);
    return;
  }
  // The scheduler classifies the attempt (R12.1) and says what followed: its report, not a
  // second classification or a scan of mutations_, feeds the metrics.
  const ResultReport report =
      scheduler_->on_result(slot->cmd, r, slot->started_at, now, mutations_);
  if (report.endpoint_disabled) metrics_.endpoints_disabled.fetch_add(1, std::memory_order_relaxed);
  if (report.outcome)
    metrics_.attempts_by_outcome[static_cast<size_t>(*report.outcome)].fetch_add(
        1, std::memory_order_relaxed);
  metrics_.attempts_by_status_class[r.response_received ? status_class(r.http_status) : 0]
      .fetch_add(1, std::memory_order_relaxed);
  if (!r.response_received) {
    using K = ErrorCode::Kind;
    Counter* k = nullptr;
    switch (r.code.kind) {
      case K::kDnsFailed:
        k = &metrics_.transport_dns;
        break;
      case K::kTlsCert:
      case K::kTlsHandshake:
        k = &metrics_.transport_tls;
        break;
      case K::kTimeout:
        k = &metrics_.transport_timeout;
        break;
      case K::kNetwork:
        k = r.request_written ? &metrics_.transport_reset : &metrics_.transport_connect;
        break;
      default:
        k = &metrics_.transport_refused_before_send;
        break;
    }
    k->fetch_add(1, std::memory_order_relaxed);
  }
  metrics_.attempt_latency.observe(now - slot->started_at);
  // R12.8: a delivery is UNKNOWN from its first UNKNOWN attempt until a definitive answer
  // (or its end: a delivery that ends `unknown` is measured when it is resolved).
  DeliveryId id = slot->cmd.delivery;
  auto since = unknown_since_.find(id);
  if (report.outcome == Outcome::kUnknown) {
    metrics_.unknown_attempts.fetch_add(1, std::memory_order_relaxed);
    if (since == unknown_since_.end()) unknown_since_.emplace(id, slot->started_at);
  } else if (report.outcome && since != unknown_since_.end()) {
    const Duration spent = std::max(Duration(0), now - since->second);
    metrics_.unknown_seconds_us.fetch_add(static_cast<uint64_t>(spent.count() / 1000),
                                          std::memory_order_relaxed);
    metrics_.unknown_duration.observe(spent);
    unknown_since_.erase(since);
  }
  slot->release();
  free_slots_.push_back(slot);
}

void Shard::refresh_gauges() {
  SchedulerStats s = scheduler_->stats();
  metrics_.pending.store(static_cast<int64_t>(s.in_wheel), std::memory_order_relaxed);
  metrics_.ready.store(static_cast<int64_t>(s.ready), std::memory_order_relaxed);
  metrics_.in_flight.store(in_flight_, std::memory_order_relaxed);
  metrics_.held_by_breaker.store(static_cast<int64_t>(s.held_by_breaker),
                                 std::memory_order_relaxed);
  metrics_.held_by_retry_after.store(static_cast<int64_t>(s.held_by_retry_after),
                                     std::memory_order_relaxed);
  metrics_.deferred_waiting.store(static_cast<int64_t>(s.deferred_waiting),
                                  std::memory_order_relaxed);
  metrics_.unknown_live.store(static_cast<int64_t>(unknown_since_.size()),
                              std::memory_order_relaxed);
  metrics_.breakers_open.store(static_cast<int64_t>(s.breakers_open + s.breakers_half_open),
                               std::memory_order_relaxed);
  metrics_.endpoints.store(static_cast<int64_t>(s.endpoints), std::memory_order_relaxed);
  metrics_.intake_waiting_durable.store(static_cast<int64_t>(acks_.size()),
                                        std::memory_order_relaxed);
}

// ---- intake ----------------------------------------------------------------------------------

// Redis near maxmemory (Store::full(), docs/cluster.md "Memory back-pressure"): intake waits,
// deliveries go on.
Error Shard::store_full() {
  metrics_.intake_store_full.fetch_add(1, std::memory_order_relaxed);
  return make_error(Errc::kUnavailable,
                    "the store is near its memory limit (Redis maxmemory): retry in a moment",
                    nullptr, "store_full");
}

Result<void> Shard::check_event_input(const EventInput& in, bool* to_inbox) {
  if (draining_) return shutting_down();
  if (!serves(in.tenant)) {
    if (to_inbox == nullptr || options_.inbox == nullptr) return not_owner_error();
    // Another node owns the partition, or nobody does right now: the event goes to the
    // partition's inbox (its script checks the tenant and the id's uniqueness).
    if (!valid_event_id(in.id)) {
      metrics_.events_rejected.fetch_add(1, std::memory_order_relaxed);
      return invalid_event_id();
    }
    // Queued events take Redis memory too: the high-water mark holds for them as well. (Not
    // degraded(): the inbox confirms its own writes, and a store that cannot is why an inbox
    // helps.)
    if (store_.full()) return store_full();
    *to_inbox = true;
    return ok();
  }
  // A full disk first (Redis' too: it is also why the store is degraded then).
  if (auto d = check_disk(); !d.ok()) return d.error();
  if (store_.degraded()) {
    return make_error(Errc::kUnavailable,
                      "the store cannot confirm writes right now (Redis unreachable or failing "
                      "over): retry in a moment",
                      nullptr, "store_unavailable");
  }
  if (store_.full()) return store_full();  // deliveries and attempts still write
  if (!known_tenants_.count(in.tenant)) {
    metrics_.events_rejected.fetch_add(1, std::memory_order_relaxed);
    return unknown_tenant();
  }
  if (!valid_event_id(in.id)) {
    metrics_.events_rejected.fetch_add(1, std::memory_order_relaxed);
    return invalid_event_id();
  }
  return ok();
}

Result<SubmitResult> Shard::take_in(EventInput& in, const std::optional<EventKeyRecord>& stored) {
  if (!serves(in.tenant)) return not_owner_error();  // lost or handed over during the lookup
  uint64_t hash = payload_hash(in.payload);
  auto answer = [&](const EventKeyRecord& rec) -> Result<SubmitResult> {
    if (rec.payload_hash != hash) {
      metrics_.events_conflict.fetch_add(1, std::memory_order_relaxed);
      return make_error(Errc::kConflict, "an event with this id was accepted with another payload",
                        "id", "conflict");
    }
    metrics_.events_duplicate.fetch_add(1, std::memory_order_relaxed);
    // seq 0: the key is queued in the partition's inbox (Store::EventKeyRef), not taken in yet.
    return SubmitResult{SubmitResult::Kind::kDuplicate, rec.seq, rec.deliveries, rec.seq == 0};
  };
  std::string key = in.tenant;
  key.push_back('\0');
  key += in.id;
  // This turn's events first: the store does not have them yet.
  if (auto it = turn_events_.find(key); it != turn_events_.end()) return answer(it->second);
  // Then what was committed while this lookup was outstanding (it may not have seen it).
  if (!settling_.empty()) {
    if (auto it = settling_.find(key); it != settling_.end()) return answer(it->second);
  }
  if (stored) return answer(*stored);

  WallTime now = loop_->wall_now();
  Event ev;
  ev.seq = next_id(partition_of(in.tenant));
  ev.tenant = std::move(in.tenant);
  ev.id = std::move(in.id);
  ev.type = std::move(in.type);
  ev.payload = std::move(in.payload);
  ev.created_at = now;
  ev.payload_hash = hash;
  ev.message_id = new_message_id(now);
  const EventSeq seq = ev.seq;
  uint32_t n = scheduler_->fan_out(std::move(ev), now, *this, mutations_);
  if (n > 0) cache_after_commit_.push_back(mutations_.events.size() - 1);
  turn_events_.emplace(std::move(key), EventKeyRecord{seq, hash, n});
  metrics_.events_accepted.fetch_add(1, std::memory_order_relaxed);
  metrics_.deliveries_created.fetch_add(n, std::memory_order_relaxed);
  return SubmitResult{SubmitResult::Kind::kAccepted, seq, n};
}

void Shard::submit(EventInput in, std::function<void(Result<SubmitResult>)> done) {
  std::vector<EventInput> one;
  one.push_back(std::move(in));
  submit_batch(std::move(one), [done = std::move(done)](std::vector<Result<SubmitResult>> rs) {
    done(std::move(rs[0]));
  });
}

void Shard::submit_batch(std::vector<EventInput> events,
                         std::function<void(std::vector<Result<SubmitResult>>)> done) {
  submit_events(std::move(events), false, std::move(done));
}

void Shard::submit_events(std::vector<EventInput> events, bool from_inbox,
                          std::function<void(std::vector<Result<SubmitResult>>)> done) {
  // A turn takes at most max_batch_events of a batch (STYLE 5: bounded work per turn, and one
  // bounded WriteBatch per turn). A larger batch goes in parts: the next part is taken once the
  // part before it is durable (the ack of a part takes the next one, so the parts of a 100k-line
  // bulk request follow each other turn by turn, interleaved with the rest of the shard's work).
  // One answer, in input order, once the last part is durable. While the shard drains, what is
  // left is refused (shutting_down) at once: no part waits on a loop that is about to end.
  struct Parts {
    std::vector<EventInput> events;
    std::vector<Result<SubmitResult>> results;
    size_t next = 0;            // the first event not taken yet
    bool undurable = false;     // an event taken since the last durable point was accepted
    size_t part_first = 0;      // the first event of the part taken last (not durable yet)
    std::vector<size_t> valid;  // the part being looked up: indexes of well-formed events
    std::vector<Store::EventKeyRef> refs;
    bool from_inbox = false;       // drained from inboxes: never queued again
    std::vector<size_t> to_inbox;  // the part's events for partitions not served here
    std::vector<InboxPush> pushes;
    std::vector<uint64_t> push_hashes;  // the pushes' payload hashes (hashed once)
    uint32_t ops_left = 0;              // the part's lookup and inbox push outstanding
    // Cluster mode: the epoch each accepted event's partition was held at (0: none), to
    // withdraw the answer when the store fenced that write.
    std::vector<std::pair<Partition, uint64_t>> epochs;
    std::function<void(std::vector<Result<SubmitResult>>)> done;
  };
  auto parts = std::make_shared<Parts>();
  parts->results.assign(events.size(), Result<SubmitResult>(SubmitResult{}));
  parts->events = std::move(events);
  parts->done = std::move(done);
  parts->from_inbox = from_inbox;

  // Takes the next part: one key lookup for its well-formed events (one MultiGet instead of a
  // lookup each; answered at once by a local store, on a later turn by a networked one), then
  // take_in for each. `self` is this lambda, for the next part.
  // The answer, once what it reports is durable. Cluster mode: an event whose write the store
  // fenced (the partition moved between intake and the write) is answered 503, never 202.
  auto answer = [this](Parts& p) {
    if (dynamic_ && !p.epochs.empty()) {
      for (size_t i = 0; i < p.results.size(); ++i) {
        const auto [part, epoch] = p.epochs[i];
        if (epoch == 0 || !p.results[i].ok()) continue;
        if (options_.ownership->fenced(part, epoch)) {
          metrics_.intake_fenced.fetch_add(1, std::memory_order_relaxed);
          p.results[i] = not_owner_error();
        }
      }
    }
    p.done(std::move(p.results));
  };
  auto take_parts = [this, answer](const auto& self, std::shared_ptr<Parts> p) -> void {
    const size_t part_max = std::max<size_t>(1, options_.max_batch_events);
    const size_t first = p->next;
    const size_t last = std::min(p->events.size(), first + part_max);
    p->next = last;
    p->part_first = first;
    p->valid.clear();
    p->refs.clear();
    p->to_inbox.clear();
    p->pushes.clear();
    p->push_hashes.clear();
    for (size_t i = first; i < last; ++i) {
      bool queue = false;
      if (auto c = check_event_input(p->events[i], p->from_inbox ? nullptr : &queue); !c.ok()) {
        p->results[i] = c.error();
        continue;
      }
      if (queue) {
        p->to_inbox.push_back(i);
        p->pushes.push_back({&p->events[i], payload_hash(p->events[i].payload)});
        p->push_hashes.push_back(p->pushes.back().payload_hash);
        continue;
      }
      p->valid.push_back(i);
      p->refs.push_back({p->events[i].tenant, p->events[i].id, p->from_inbox});
    }
    // After this part: the next one (at once while draining, else once this one is durable),
    // or the answer.
    // The write of the part taken last cannot be confirmed (docs/operations.md "Disk full,
    // read-only and failed syncs"): its events and those not taken yet are answered `e`
    // (503), the earlier parts' answers stand (they are durable).
    auto lost = [p, answer](const Error& e) {
      for (size_t i = p->part_first; i < p->results.size(); ++i) {
        if (p->results[i].ok()) p->results[i] = e;
      }
      answer(*p);
    };
    auto after = [this, self, p, answer, lost] {
      if (p->next < p->events.size()) {
        if (draining_) return self(self, p);  // no part waits on a loop that is about to end
        // This part is committed at the end of the turn; the next one is taken once durable.
        p->undurable = false;
        after_durable([self, p]() mutable { self(self, std::move(p)); }, lost);
        loop_->wake();  // taken inside an ack: make the next turn commit it without waiting
        return;
      }
      // The last part. Earlier parts are durable already. Refusals only: final at once.
      // Otherwise the answer waits until this turn's commit is durable (a duplicate's original
      // may not be durable yet either).
      if (!p->undurable) return answer(*p);
      after_durable([p, answer]() mutable { answer(*p); }, lost);
    };
    if (p->valid.empty() && p->to_inbox.empty()) return after();
    p->ops_left = (p->valid.empty() ? 0 : 1) + (p->to_inbox.empty() ? 0 : 1);
    if (!p->to_inbox.empty()) {
      // Cluster mode: events of partitions another node owns (or none does now) are queued in
      // their partitions' inboxes; each answer is final once the inbox confirmed it.
      ++inbox_ops_;
      options_.inbox->push(
          std::move(p->pushes), poster_,
          [this, p, after](std::vector<Result<InboxAnswer>> answers) {
            --inbox_ops_;
            for (size_t k = 0; k < p->to_inbox.size(); ++k) {
              const size_t i = p->to_inbox[k];
              const uint64_t hash = p->push_hashes[k];
              if (k >= answers.size() || !answers[k].ok()) {
                p->results[i] = k < answers.size() ? answers[k].error()
                                                   : make_error(Errc::kInternal, "no answer");
                continue;
              }
              const InboxAnswer& a = *answers[k];
              using K = InboxAnswer::Kind;
              if (a.kind == K::kUnknownTenant) {
                metrics_.events_rejected.fetch_add(1, std::memory_order_relaxed);
                p->results[i] = unknown_tenant();
              } else if (a.kind != K::kQueued && a.payload_hash != hash) {
                metrics_.events_conflict.fetch_add(1, std::memory_order_relaxed);
                p->results[i] = make_error(
                    Errc::kConflict, "an event with this id was accepted with another payload",
                    "id", "conflict");
              } else if (a.kind == K::kQueued) {
                metrics_.inbox_queued.fetch_add(1, std::memory_order_relaxed);
                p->results[i] = SubmitResult{SubmitResult::Kind::kAccepted, 0, 0, true};
              } else if (a.kind == K::kAlreadyQueued) {
                metrics_.events_duplicate.fetch_add(1, std::memory_order_relaxed);
                p->results[i] = SubmitResult{SubmitResult::Kind::kDuplicate, 0, 0, true};
              } else {
                metrics_.events_duplicate.fetch_add(1, std::memory_order_relaxed);
                p->results[i] =
                    SubmitResult{SubmitResult::Kind::kDuplicate, a.stored.seq, a.stored.deliveries};
              }
            }
            if (--p->ops_left == 0) after();
          });
    }
    if (p->valid.empty()) return;
    const uint64_t gen = begin_lookup();
    store_.find_event_keys_async(
        p->refs, poster_,
        [this, p, gen, after](Result<std::vector<std::optional<EventKeyRecord>>> stored) {
          if (!stored.ok()) metrics_.store_errors.fetch_add(1, std::memory_order_relaxed);
          if (stored.ok() && stored->size() != p->valid.size()) {
            stored = make_error(Errc::kInternal, "the store answered another number of keys");
          }
          for (size_t k = 0; k < p->valid.size(); ++k) {
            const size_t i = p->valid[k];
            const Partition part = partition_of(p->events[i].tenant);
            p->results[i] = stored.ok() ? take_in(p->events[i], (*stored)[k])
                                        : Result<SubmitResult>(stored.error());
            p->undurable = p->undurable || p->results[i].ok();
            if (dynamic_ && p->results[i].ok()) {
              if (p->epochs.empty()) p->epochs.assign(p->events.size(), {Partition{0}, 0});
              if (auto it = owned_.find(part); it != owned_.end())
                p->epochs[i] = {part, it->second.epoch};
            }
          }
          end_lookup(gen);
          if (--p->ops_left == 0) after();
        });
  };
  take_parts(take_parts, std::move(parts));
}

// ---- endpoints -------------------------------------------------------------------------------

std::string Shard::new_secret() {
  uint8_t raw[24];
  RAND_bytes(raw, sizeof raw);
  return std::string(reinterpret_cast<char*>(raw), sizeof raw);
}

// Endpoint secrets are kept as raw key bytes; users see and give them as "whsec_<base64>"
// (Standard Webhooks) or as plain text, which is used as the key itself.
static Result<std::string> secret_key(const std::optional<std::string>& given,
                                      std::string generated) {
  if (!given) return generated;
  auto key = net::decode_secret(*given);
  if (!key || key->empty() || key->size() > 512)
    return make_error(Errc::kInvalidArgument,
                      "secret must be whsec_<base64> or 1-512 bytes of text", "secret",
                      "invalid_secret");
  return std::move(*key);
}

std::function<Result<void>(std::string_view)> Shard::url_check() const {
  return [this](std::string_view u) -> Result<void> {
    auto r = check_url(u, options_.url_policy);
    if (!r.ok()) return r.error();
    return ok();
  };
}

const Endpoint* Shard::owned_endpoint(const std::string& tenant, EndpointId id) const {
  const Endpoint* e = scheduler_->find_endpoint(id);
  return e && e->tenant == tenant ? e : nullptr;
}

void Shard::create_endpoint(std::string tenant, EndpointSpec spec, Callback<Endpoint> done) {
  if (draining_) return done(shutting_down());
  auto url = check_url(spec.url, options_.url_policy);
  if (!url.ok()) return done(url.error());
  if (!options_.policies.find(spec.policy))
    return done(
        make_error(Errc::kInvalidArgument, "no policy by this name", "policy", "unknown_policy"));
  if (auto h = check_endpoint_headers(spec.headers); !h.ok()) return done(h.error());
  WallTime now = loop_->wall_now();
  Endpoint e;
  e.on_unknown = spec.on_unknown;
  e.status_url = std::move(spec.status_url);
  if (auto rc = check_reconcile(e, url_check()); !rc.ok()) return done(rc.error());
  // SPEC R14: every endpoint multiplies each event toward a host of the tenant's choosing.
  if (scheduler_->endpoints_of(tenant).size() >= options_.max_endpoints_per_tenant) {
    return done(make_error(Errc::kLimitExceeded,
                           "this tenant has as many endpoints as it may: delete one first",
                           "limits.max_endpoints_per_tenant", "too_many_endpoints"));
  }
  e.id = next_id(partition_of(tenant));
  e.tenant = tenant;
  e.url = std::move(spec.url);
  e.event_types = std::move(spec.event_types);
  e.policy = std::move(spec.policy);
  e.signature = spec.signature;
  auto key = secret_key(spec.secret, new_secret());
  if (!key.ok()) return done(key.error());
  e.secrets.push_back(Secret{std::move(*key), WallTime::max()});
  e.rate_limit = spec.rate_limit;
  e.max_in_flight = spec.max_in_flight;
  e.headers = std::move(spec.headers);
  e.idempotency_key = spec.idempotency_key;
  e.created_at = e.updated_at = now;
  auto r = scheduler_->create_endpoint(std::move(e), now, mutations_);
  if (!r.ok()) return done(r.error());
  if (!known_tenants_.count(tenant)) {
    known_tenants_[tenant] = true;
    Tenant t;
    t.name = tenant;
    t.updated_at = now;
    scheduler_->restore_tenant(t);
    mutations_.tenants.push_back(std::move(t));
  }
  after_durable([done = std::move(done), ep = std::move(*r)]() mutable { done(std::move(ep)); });
}

// What the API shows of an endpoint: only the secrets that still sign (secrets_active).
Endpoint Shard::view(const Endpoint& e) const {
  Endpoint v = e;
  const WallTime now = loop_->wall_now();
  std::erase_if(v.secrets, [now](const Secret& s) { return s.expires_at <= now; });
  return v;
}

void Shard::list_endpoints(const std::string& tenant, Callback<std::vector<Endpoint>> done) {
  if (!known_tenants_.count(tenant)) return done(unknown_tenant());
  std::vector<Endpoint> out;
  for (const Endpoint* e : scheduler_->endpoints_of(tenant)) out.push_back(view(*e));
  done(std::move(out));
}

void Shard::get_endpoint(const std::string& tenant, EndpointId id, Callback<Endpoint> done) {
  const Endpoint* e = owned_endpoint(tenant, id);
  if (!e) return done(unknown_endpoint());
  done(view(*e));
}

void Shard::update_endpoint(const std::string& tenant, EndpointId id, EndpointPatch patch,
                            Callback<Endpoint> done) {
  if (draining_) return done(shutting_down());
  const Endpoint* cur = owned_endpoint(tenant, id);
  if (!cur) return done(unknown_endpoint());
  Endpoint e = *cur;
  if (patch.url) {
    auto url = check_url(*patch.url, options_.url_policy);
    if (!url.ok()) return done(url.error());
    e.url = std::move(*patch.url);
  }
  if (patch.policy) {
    if (!options_.policies.find(*patch.policy))
      return done(
          make_error(Errc::kInvalidArgument, "no policy by this name", "policy", "unknown_policy"));
    e.policy = std::move(*patch.policy);
  }
  if (patch.event_types) e.event_types = std::move(*patch.event_types);
  if (patch.signature) e.signature = *patch.signature;
  if (patch.rate_limit) e.rate_limit = *patch.rate_limit;
  if (patch.max_in_flight) e.max_in_flight = *patch.max_in_flight;
  if (patch.headers) {
    if (auto h = check_endpoint_headers(*patch.headers); !h.ok()) return done(h.error());
    e.headers = std::move(*patch.headers);
  }
  if (patch.idempotency_key) e.idempotency_key = *patch.idempotency_key;
  if (patch.on_unknown) e.on_unknown = *patch.on_unknown;
  if (patch.status_url) e.status_url = std::move(*patch.status_url);
  if (auto rc = check_reconcile(e, url_check()); !rc.ok()) return done(rc.error());
  WallTime now = loop_->wall_now();
  e.updated_at = now;
  auto r = scheduler_->update_endpoint(e, now, mutations_);
  if (!r.ok()) return done(r.error());
  after_durable([done = std::move(done), ep = view(*r)]() mutable { done(std::move(ep)); });
}

void Shard::delete_endpoint(const std::string& tenant, EndpointId id, Callback<bool> done) {
  if (draining_) return done(shutting_down());
  if (!owned_endpoint(tenant, id)) return done(unknown_endpoint());
  auto r = scheduler_->delete_endpoint(id, loop_->wall_now(), mutations_);
  if (!r.ok()) return done(r.error());
  after_durable([done = std::move(done)] { done(true); });
}

void Shard::endpoint_action(const std::string& tenant, EndpointId id, EndpointAction action,
                            Callback<Endpoint> done) {
  if (draining_) return done(shutting_down());
  if (!owned_endpoint(tenant, id)) return done(unknown_endpoint());
  auto r = scheduler_->endpoint_action(id, action, loop_->wall_now(), mutations_);
  if (!r.ok()) return done(r.error());
  after_durable([done = std::move(done), ep = view(*r)]() mutable { done(std::move(ep)); });
}

void Shard::test_endpoint(const std::string& tenant, EndpointId id, Callback<DeliveryId> done) {
  if (draining_) return done(shutting_down());
  const Endpoint* e = owned_endpoint(tenant, id);
  if (!e) return done(unknown_endpoint());
  WallTime now = loop_->wall_now();
  {  // SPEC R14: test sends are bounded per endpoint per minute (no amplifier toward a host).
    const int64_t minute = now.ms() / 60'000;
    if (minute != test_sends_minute_) {
      test_sends_.clear();
      test_sends_minute_ = minute;
    }
    TestSends& t = test_sends_[id];
    if (t.sent >= options_.test_sends_per_minute) {
      return done(make_error(Errc::kLimitExceeded,
                             "too many test sends to this endpoint this minute: retry later",
                             "limits.test_sends_per_minute", "too_many_test_sends"));
    }
    ++t.sent;
  }
  Event ev;
  ev.seq = next_id(partition_of(tenant));
  ev.tenant = tenant;
  // Ids in the API's form (decimal strings), so the operator can find it; like every event it
  // gets a message id of its own, its webhook id.
  ev.id = "test_" + std::to_string(ev.seq);
  ev.message_id = new_message_id(now);
  ev.type = "ringcast.test";
  char buf[160];
  std::snprintf(buf, sizeof buf,
                "{\"type\":\"ringcast.test\",\"endpoint_id\":\"%" PRIu64
                "\",\"sent_at_ms\":%" PRId64 "}",
                id, now.ms());
  ev.payload = buf;
  ev.created_at = now;
  ev.payload_hash = payload_hash(ev.payload);
  // A producer may have used this id: refuse rather than fail the turn's write (R12.5).
  auto held = std::make_shared<Event>(std::move(ev));
  const uint64_t gen = begin_lookup();
  store_.find_event_keys_async(
      {Store::EventKeyRef{held->tenant, held->id}}, poster_,
      [this, held, id, gen,
       done = std::move(done)](Result<std::vector<std::optional<EventKeyRecord>>> k) {
        end_lookup(gen);
        if (!k.ok()) return done(k.error());
        if (k->size() != 1 || (*k)[0].has_value())
          return done(make_error(Errc::kConflict, "an event with the test event's id exists", "id",
                                 "conflict"));
        if (!scheduler_->find_endpoint(id)) return done(unknown_endpoint());  // deleted meanwhile
        turn_keys_checked_ = false;  // the store's own check covers this event
        auto r = scheduler_->add_test_delivery(id, *held, loop_->wall_now(), *this, mutations_);
        if (!r.ok()) return done(r.error());
        after_durable([done, d = *r] { done(d); });
      });
}

void Shard::resolve_delivery(DeliveryDetail seen, Resolution verdict, std::string note,
                             Callback<Delivery> done) {
  if (draining_) return done(shutting_down());
  const DeliveryId id = seen.delivery.id;
  const auto changed = rewritten_.find(id);
  const bool stale = changed != rewritten_.end() && seen.attempts.size() < changed->second;
  if (stale || seen.delivery.status != DeliveryStatus::kUnknown) {
    return done(make_error(Errc::kConflict,
                           "only a delivery that ended unknown can be resolved, and this one is "
                           "not (any more)",
                           "state", "not_unknown"));
  }
  const WallTime now = loop_->wall_now();
  // The history: attempts, then records numbered from kHistoryRecordBase in their order.
  uint16_t number = kHistoryRecordBase;
  WallTime unknown_from = now;
  for (const Attempt& a : seen.attempts) {
    if (is_history_record(a.number)) {
      number = std::max<uint16_t>(number, static_cast<uint16_t>(a.number + 1));
      continue;
    }
    // Written again with the change (see DeliveryPut::rewrite): whichever of them the store
    // kept inside the ended record stays.
    mutations_.attempts.push_back(a);
    if (is_check_record(a.number)) continue;
    // R12.8: the UNKNOWN streak that ended it began at the first UNKNOWN after the last
    // definitive outcome.
    if (a.outcome == Outcome::kUnknown) {
      if (unknown_from == now) unknown_from = a.started_at;
    } else {
      unknown_from = now;
    }
  }
  Delivery d = seen.delivery;
  d.status =
      verdict == Resolution::kDelivered ? DeliveryStatus::kDelivered : DeliveryStatus::kFailed;
  d.flags &= static_cast<uint8_t>(~Delivery::kFlagLastUnknown);
  DeliveryPut put;
  put.delivery = d;
  put.tenant_hash = tenant_hash(seen.tenant);
  put.rewrite = true;
  mutations_.deliveries.push_back(put);
  Attempt rec;
  rec.delivery = id;
  rec.number = number;
  rec.outcome = verdict == Resolution::kDelivered ? Outcome::kSuccess : Outcome::kRejected;
  rec.code = ErrorCode::of(ErrorCode::Kind::kResolvedByOperator);
  rec.started_at = now;
  rec.response_prefix = std::move(note);
  mutations_.attempts.push_back(std::move(rec));

  if (rewritten_.emplace(id, seen.attempts.size() + 1).second) {
    rewritten_order_.push_back(id);
    if (rewritten_order_.size() > kRewrittenKept) {
      rewritten_.erase(rewritten_order_.front());
      rewritten_order_.pop_front();
    }
  } else {
    rewritten_[id] = seen.attempts.size() + 1;
  }
  (verdict == Resolution::kDelivered ? metrics_.resolved_delivered : metrics_.resolved_failed)
      .fetch_add(1, std::memory_order_relaxed);
  metrics_.unknown_duration.observe(std::max(Duration(0), now - unknown_from));
  after_durable([done = std::move(done), d] { done(d); });
}

// ---- replay (docs/operations.md "Delivery log") -------------------------------------------------

void Shard::note_rewritten(DeliveryId id, size_t history) {
  if (rewritten_.emplace(id, history).second) {
    rewritten_order_.push_back(id);
    if (rewritten_order_.size() > kRewrittenKept) {
      rewritten_.erase(rewritten_order_.front());
      rewritten_order_.pop_front();
    }
  } else {
    rewritten_[id] = history;
  }
}

Result<Delivery> Shard::resend_one(const DeliveryDetail& seen, const std::string& note,
                                   const std::shared_ptr<RequeueJob>& job) {
  const DeliveryId id = seen.delivery.id;
  // A store read older than a change this shard made (a resend racing another, or a
  // resolution): the delivery may be pending again already — the idempotency rule.
  const auto changed = rewritten_.find(id);
  if (changed != rewritten_.end() && seen.attempts.size() < changed->second) {
    return make_error(Errc::kConflict, "the delivery changed meanwhile: it is pending again",
                      "state", "delivery_pending");
  }
  if (!owned_endpoint(seen.tenant, seen.delivery.endpoint)) {
    return make_error(Errc::kNotFound, "the delivery's endpoint was deleted", "endpoint",
                      "unknown_endpoint");
  }
  const WallTime now = loop_->wall_now();
  uint16_t number = kHistoryRecordBase;
  for (const Attempt& a : seen.attempts) {
    if (is_history_record(a.number))
      number = std::max<uint16_t>(number, static_cast<uint16_t>(a.number + 1));
  }
  auto r = scheduler_->reopen_delivery(seen.delivery, now, mutations_);
  if (!r.ok()) return r.error();
  // RocksStore keeps the record that ended a delivery (an attempt or a status check) inside
  // its ended record, which the reopening removes: every record is written again with it (see
  // DeliveryPut::rewrite).
  for (const Attempt& a : seen.attempts) {
    if (!is_history_record(a.number)) mutations_.attempts.push_back(a);
  }
  Attempt rec;
  rec.delivery = id;
  rec.number = number;
  rec.outcome = Outcome::kRetryable;
  rec.code = ErrorCode::of(ErrorCode::Kind::kResent);
  rec.started_at = now;
  rec.response_prefix = note.substr(0, kResolutionNoteBytes);
  mutations_.attempts.push_back(std::move(rec));
  note_rewritten(id, seen.attempts.size() + 1);
  if (unknown_since_.count(id) != 0) unknown_since_.erase(id);
  if (job) {
    auto [it, added] = job_live_.emplace(id, job);
    if (added) job->live.fetch_add(1, std::memory_order_relaxed);
  }
  return r;
}

void Shard::resend_delivery(DeliveryDetail seen, std::string note, Callback<Delivery> done) {
  if (draining_) return done(shutting_down());
  auto r = resend_one(seen, note, nullptr);
  if (!r.ok()) return done(r.error());
  after_durable([done = std::move(done), d = *r] { done(d); });
}

void Shard::replay_event(Event ev, std::vector<EndpointId> have, Callback<uint32_t> done) {
  if (draining_) return done(shutting_down());
  if (auto it = replayed_.find(ev.seq); it != replayed_.end()) {
    have.insert(have.end(), it->second.begin(), it->second.end());
  }
  std::sort(have.begin(), have.end());
  std::vector<EndpointId> created;
  const uint32_t n =
      scheduler_->fan_out_missing(ev, have, loop_->wall_now(), *this, mutations_, &created);
  if (n > 0) {
    auto [it, added] = replayed_.try_emplace(ev.seq);
    it->second.insert(it->second.end(), created.begin(), created.end());
    if (added) {
      replayed_order_.push_back(ev.seq);
      if (replayed_order_.size() > kReplayedKept) {
        replayed_.erase(replayed_order_.front());
        replayed_order_.pop_front();
      }
    }
  }
  after_durable([done = std::move(done), n] { done(n); });
}

void Shard::start_requeue_job(const std::string& tenant, EndpointId id, WallTime since,
                              WallTime until, Callback<std::shared_ptr<RequeueJob>> done) {
  if (draining_) return done(shutting_down());
  const Endpoint* e = owned_endpoint(tenant, id);
  if (!e) return done(unknown_endpoint());
  if (e->state == EndpointState::kDisabled) {  // SPEC R8.5
    return done(make_error(Errc::kConflict, "the endpoint is disabled: enable it first", "endpoint",
                           "endpoint_disabled"));
  }
  // SPEC R14 quotas: one job per tenant, running or queued, so one tenant cannot take the
  // shard's job slots or its queue from the others; past the running slots a bounded FIFO.
  uint32_t running = 0;
  for (const auto& [jid, job] : jobs_) {
    const JobView::State st = job->snapshot().state;
    if (st != JobView::State::kRunning && st != JobView::State::kQueued) continue;
    if (st == JobView::State::kRunning) ++running;
    if (job->view.tenant == tenant) {
      return done(make_error(Errc::kLimitExceeded,
                             "a recover job of this tenant is running or queued: wait for it to "
                             "end (one per tenant)",
                             "tenant", "too_many_jobs"));
    }
  }
  const bool queue = running >= std::max<uint32_t>(1, options_.max_requeue_jobs);
  if (queue && job_queue_.size() >= options_.max_queued_requeue_jobs) {
    return done(make_error(Errc::kLimitExceeded,
                           "too many recover jobs are running and queued on this node",
                           "limits.recover_jobs_queued", "too_many_jobs"));
  }
  auto job = std::make_shared<RequeueJob>();
  job->view.id = next_id(partition_of(tenant));
  job->view.tenant = tenant;
  job->view.endpoint = id;
  job->view.since = since;
  job->view.until = until;
  job->view.queued_at = loop_->wall_now();
  if (queue) {
    job->view.state = JobView::State::kQueued;
    job_queue_.push_back(job->view.id);
  } else {
    job->view.started_at = job->view.queued_at;
  }
  jobs_.emplace(job->view.id, job);
  jobs_order_.push_back(job->view.id);
  // Forget the oldest jobs that have ended (a running or queued one stays).
  for (size_t tries = jobs_order_.size(); jobs_order_.size() > kJobsKept && tries > 0; --tries) {
    const uint64_t oldest = jobs_order_.front();
    jobs_order_.pop_front();
    auto it = jobs_.find(oldest);
    const JobView::State st =
        it != jobs_.end() ? it->second->snapshot().state : JobView::State::kDone;
    if (st == JobView::State::kRunning || st == JobView::State::kQueued) {
      jobs_order_.push_back(oldest);
    } else if (it != jobs_.end()) {
      jobs_.erase(it);
    }
  }
  done(job);
}

std::shared_ptr<RequeueJob> Shard::next_requeue_job() {
  uint32_t running = 0;
  for (const auto& [jid, job] : jobs_) {
    if (job->snapshot().state == JobView::State::kRunning) ++running;
  }
  while (!job_queue_.empty() && running < std::max<uint32_t>(1, options_.max_requeue_jobs)) {
    const uint64_t id = job_queue_.front();
    job_queue_.pop_front();
    auto it = jobs_.find(id);
    if (it == jobs_.end()) continue;
    std::shared_ptr<RequeueJob> job = it->second;
    std::lock_guard<std::mutex> lock(job->mu);
    if (job->view.state != JobView::State::kQueued) continue;  // ended while it waited
    job->view.state = JobView::State::kRunning;
    job->view.started_at = loop_->wall_now();
    return job;
  }
  return nullptr;
}

void Shard::resend_batch(std::vector<DeliveryDetail> seen, std::shared_ptr<RequeueJob> job,
                         Callback<ResendCounts> done) {
  if (draining_) return done(shutting_down());
  if (job->cancel.load()) {
    return done(make_error(Errc::kUnavailable, "the tenant's partition moved to another node",
                           nullptr, "not_owner"));
  }
  ResendCounts c;
  const std::string note = "recover job " + std::to_string(job->view.id);
  for (const DeliveryDetail& d : seen) {
    auto r = resend_one(d, note, job);
    if (r.ok()) {
      ++c.requeued;
      continue;
    }
    const char* reason = r.error().reason;
    const std::string_view why = reason != nullptr ? reason : "";
    if (why == "endpoint_disabled" || why == "unknown_endpoint") {
      Error err = r.error();
      after_durable([done, err] { done(err); });  // what was re-queued before it is written
      return;
    }
    ++c.skipped;  // pending again, or a test delivery
  }
  after_durable([done = std::move(done), c] { done(c); });
}

void Shard::get_job(const std::string& tenant, uint64_t id, Callback<JobView> done) {
  auto it = jobs_.find(id);
  if (it == jobs_.end() || it->second->view.tenant != tenant) {
    return done(make_error(Errc::kNotFound, "no such job for this tenant", "job", "unknown_job"));
  }
  done(it->second->snapshot());
}

void Shard::rotate_secret(const std::string& tenant, EndpointId id,
                          std::optional<std::string> secret, Callback<Endpoint> done) {
  if (draining_) return done(shutting_down());
  const Endpoint* cur = owned_endpoint(tenant, id);
  if (!cur) return done(unknown_endpoint());
  WallTime now = loop_->wall_now();
  Endpoint e = *cur;
  auto key = secret_key(secret, new_secret());
  if (!key.ok()) return done(key.error());
  std::vector<Secret> kept;
  kept.push_back(Secret{std::move(*key), WallTime::max()});
  for (Secret s : e.secrets) {
    if (s.expires_at <= now) continue;  // expired: no longer signs, pruned
    // At most kMaxSigningSecrets sign at once (newest first): rotating faster than the
    // overlap drops the oldest instead of growing every request's signature header.
    if (kept.size() >= kMaxSigningSecrets) break;
    s.expires_at = std::min(s.expires_at, now + options_.secret_rotation_overlap);
    kept.push_back(std::move(s));
  }
  e.secrets = std::move(kept);
  e.updated_at = now;
  auto r = scheduler_->update_endpoint(e, now, mutations_);
  if (!r.ok()) return done(r.error());
  after_durable([done = std::move(done), ep = std::move(*r)]() mutable { done(std::move(ep)); });
}

// ---- tenant-wide -----------------------------------------------------------------------------

void Shard::get_breaker(const std::string& tenant, Callback<BreakerView> done) {
  if (!known_tenants_.count(tenant)) return done(unknown_tenant());
  done(scheduler_->breaker_view(tenant, loop_->wall_now()));
}

void Shard::reset_breaker(const std::string& tenant, Callback<BreakerView> done) {
  if (!known_tenants_.count(tenant)) return done(unknown_tenant());
  WallTime now = loop_->wall_now();
  scheduler_->reset_breaker(tenant, now, mutations_);
  after_durable([this, done = std::move(done), tenant] {
    done(scheduler_->breaker_view(tenant, loop_->wall_now()));
  });
}

TenantSettings Shard::tenant_settings(const std::string& tenant) const {
  const Scheduler::OwnerEmail e = scheduler_->owner_email(tenant);
  TenantSettings s;
  s.owner_email = e.address;
  s.owner_email_confirmed = e.confirmed;
  s.confirmation_sent_at = e.asked_at;
  return s;
}

void Shard::get_tenant_settings(const std::string& tenant, Callback<TenantSettings> done) {
  if (!known_tenants_.count(tenant)) return done(unknown_tenant());
  done(tenant_settings(tenant));
}

void Shard::set_tenant_settings(const std::string& tenant, TenantSettings settings,
                                Callback<TenantSettings> done) {
  if (draining_) return done(shutting_down());
  if (!known_tenants_.count(tenant)) return done(unknown_tenant());
  auto sent = scheduler_->set_owner_email(tenant, settings.owner_email, settings.by_platform,
                                          options_.owner_email_confirm_interval, loop_->wall_now(),
                                          mutations_);
  if (!sent) return done(sent.error());
  after_durable([this, done = std::move(done), tenant, sent = *sent] {
    TenantSettings now = tenant_settings(tenant);
    now.confirmation_sent = sent;
    done(std::move(now));
  });
}

void Shard::confirm_owner_email(const std::string& tenant, const std::string& email,
                                Callback<TenantSettings> done) {
  if (draining_) return done(shutting_down());
  if (!known_tenants_.count(tenant)) return done(unknown_tenant());
  auto r = scheduler_->confirm_owner_email(tenant, email, loop_->wall_now(), mutations_);
  if (!r.ok()) return done(r.error());
  after_durable([this, done = std::move(done), tenant] { done(tenant_settings(tenant)); });
}

void Shard::set_subscription(const std::string& tenant, bool active, Callback<bool> done) {
  if (!known_tenants_.count(tenant)) return done(unknown_tenant());
  scheduler_->set_subscription(tenant, active, loop_->wall_now(), mutations_);
  after_durable([done = std::move(done), active] { done(active); });
}

}  // namespace ringcast::engine
