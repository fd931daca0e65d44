// The turn's batch and its durability (SPEC R12.2: a turn's leases are committed before its
// sends go out): commit(), the answers that wait for durability, a store that refuses or fails
// (docs/operations.md "Disk full, read-only and failed syncs"), and the key lookups' settling.
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
