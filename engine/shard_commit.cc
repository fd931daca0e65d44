// The shard's side of the turn's batch (the batch and its durability are the lower layer's,
// engine/turn_batch.h; SPEC R12.2: a turn's leases are committed before its sends go out): what
// a written batch means to the parts above, sends whose batch was not written or not yet
// durable, and the key lookups' settling.
#include "engine/shard.h"

#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <iterator>

#include "engine/shard_internal.h"
#include "log/log.h"

namespace ringcast::engine {

void Shard::reset_epochs_after_commit() {
  if (epoch_resets_.empty() || !mutations_.empty()) return;
  for (Partition p : epoch_resets_) {
    if (!leased_->find(p) && !loading_.count(p)) options_.ownership->set_epoch(p, 0);
  }
  epoch_resets_.clear();
}

// A written batch (TurnBatch::Listener): every way a delivery ends (a result, 410, delete,
// disable, a ceiling, the breaker's hold limit) passes here once: the outcome counters, the
// UNKNOWN clock, a requeue job's live count and the embedder's callback; then the operator's
// notifications, the payloads to cache, and the keys a lookup still outstanding may not see.
void Shard::on_written(Mutations& m, uint64_t seq) {
  static_cast<void>(seq);
  const WallTime now = loop_->wall_now();
  for (const DeliveryPut& p : m.deliveries) {
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
    if (options_.on_delivery_done) after_durable([this, d] { options_.on_delivery_done(d); });
  }
  if (options_.on_notification && !m.notifications.empty()) {
    for (Notification& n : m.notifications)
      after_durable([this, n = std::move(n)] { options_.on_notification(n); });
  }
  for (size_t i : cache_after_commit_) {
    payloads_.put(std::make_shared<const Event>(std::move(m.events[i])));
  }
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

void Shard::after_commit(bool dropped) {
  if (dropped) {
    turn_events_.clear();
    turn_event_index_.clear();
  }
  cache_after_commit_.clear();
  reset_epochs_after_commit();
}

void Shard::withhold_sends() {
  for (SendSlot* slot : to_send_) {
    slot->result = TransportResult{};
    slot->result.deferred = DeferReason::kConnections;
    slot->result.not_before = loop_->wall_now() + TurnBatch::kDiskRetry;
    metrics_.sends_withheld.fetch_add(1, std::memory_order_relaxed);
    ++in_flight_;
    loop_->post([slot] { slot->on_complete(); });
  }
  to_send_.clear();
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
    send_now(slot, mono);
  }
}

// Also a send whose payload was read back after its partition started to be handed over (the
// read answers on a later turn): no new sends for a partition being handed over (docs/cluster.md).
void Shard::send_now(SendSlot* slot, MonoTime mono) {
  ++in_flight_;
  const Partition p = id_partition(slot->cmd.delivery);
  if (discarding_ || !ownership_->sendable(p, mono, slot->epoch) ||
      ownership_->fenced(p, slot->epoch)) {
    slot->result = TransportResult{};
    slot->result.deferred = DeferReason::kConnections;
    slot->result.not_before = loop_->wall_now() + milliseconds(200);
    metrics_.sends_withheld.fetch_add(1, std::memory_order_relaxed);
    loop_->post([slot] { slot->on_complete(); });
    return;
  }
  transport_->send(slot);
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

}  // namespace ringcast::engine
