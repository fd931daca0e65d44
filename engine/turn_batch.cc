// The turn's batch and its durability (engine/turn_batch.h; SPEC R12.2; docs/operations.md
// "Disk full, read-only and failed syncs").
#include "engine/turn_batch.h"

#include <chrono>
#include <cstdlib>
#include <iterator>
#include <string_view>

#include "log/log.h"

namespace ringcast::engine {

DiskHealth TurnBatch::begin_turn(MonoTime now) {
  const DiskHealth disk = store_.disk_health();
  if (disk == DiskHealth::kFailed && !store_failed_)
    on_store_failed(make_error(Errc::kUnavailable, "the store failed", nullptr, "storage_failed"));
  // The disk refuses writes and no batch of ours waits to be written again: a small write now
  // and then finds out when it takes them again (so the refusal ends by itself).
  if (disk == DiskHealth::kFull && !write_held_ && now >= next_disk_retry_) {
    next_disk_retry_ = now + kDiskRetry;
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
      degraded_since_ = now;
    }
    if (disk == DiskHealth::kFull) {
      answer_unpersisted(make_error(
          Errc::kUnavailable,
          "the store cannot persist writes now (Redis' disk is full or failing): this one is "
          "not acknowledged; retry once space is freed",
          nullptr, "storage_full"));
    } else if (degraded_since_ && now - *degraded_since_ >= kUnconfirmedAnswerAfter) {
      answer_unpersisted(make_error(
          Errc::kUnavailable,
          "the store cannot confirm writes now (Redis unreachable or failing over): this one "
          "is not acknowledged yet; retry in a moment",
          nullptr, "store_unavailable"));
    }
  }
  return disk;
}

void TurnBatch::commit(MonoTime now) {
  if (store_failed_) {
    // Nothing becomes durable any more: what the turn changed is dropped (the next start
    // recovers from the store; leases of attempts on the wire expire and are sent again).
    mutations_.clear();
    turn_acks_.clear();
    listener_.after_commit(true);
    return;
  }
  // A batch the disk refused is written again at most every kDiskRetry; until then it stays,
  // and grows with what later turns change (results of attempts that were on the wire).
  if (write_held_ && now < next_disk_retry_) return;
  if (!mutations_.empty()) {
    const size_t records = mutations_.events.size() + mutations_.deliveries.size() +
                           mutations_.attempts.size() + mutations_.endpoints.size() +
                           mutations_.tenants.size() + mutations_.notifications.size();
    mutations_.event_keys_checked = keys_checked_;
    Result<uint64_t> seq = store_.write(mutations_);
    if (!seq.ok()) {
      const Error& e = seq.error();
      const std::string_view reason = e.reason ? e.reason : "";
      if (reason == "storage_full") return hold(e, now);
      if (reason == "storage_failed") return on_store_failed(e);
      // Anything else is a bug (a batch the store cannot take): crash-only, the next start
      // recovers from what is durable.
      log::error("shard_store_write_failed",
                 {{"shard", shard_}, {"code", errc_name(e.code)}, {"error", e.message}},
                 "shard {}: store write failed ({}: {}); stopping", shard_, errc_name(e.code),
                 e.message);
      log::flush();  // abort() runs no exit handlers: the line goes out first
      std::abort();
    }
    keys_checked_ = true;
    if (write_held_) {
      write_held_ = false;
      log::info("shard_store_resumed",
                {{"shard", shard_},
                 {"held_seconds", std::chrono::duration<double>(now - held_since_).count()}},
                "shard {}: the data dir takes writes again: the batch kept for {:.1f} s "
                "is written, intake resumes",
                shard_, std::chrono::duration<double>(now - held_since_).count());
    }
    last_written_seq_ = *seq;
    listener_.on_written(mutations_, *seq);
    metrics_.store_batches.fetch_add(1, std::memory_order_relaxed);
    metrics_.store_records.fetch_add(records, std::memory_order_relaxed);
    mutations_.clear();
  }
  listener_.after_commit(false);
  for (Ack& a : turn_acks_) {
    a.seq = last_written_seq_;
    acks_.push_back(std::move(a));
  }
  turn_acks_.clear();
}

void TurnBatch::hold(const Error& why, MonoTime now) {
  if (!write_held_) {
    held_since_ = now;
    log::warn(
        "shard_store_held", {{"shard", shard_}, {"error", why.message}},
        "shard {}: the store refused a batch ({}): it is kept and written again every {} ms; no "
        "new attempts; intake answers 503 storage_full",
        shard_, why.message,
        static_cast<long long>(std::chrono::duration_cast<milliseconds>(kDiskRetry).count()));
  }
  write_held_ = true;
  next_disk_retry_ = now + kDiskRetry;
  // Intake that waits for this batch is answered now (503: not acknowledged). Its events stay
  // in the batch and are written with it: sent again, the same id is then a duplicate (200).
  refuse_waiting(turn_acks_, why);
}

void TurnBatch::refuse_waiting(std::vector<Ack>& list, const Error& why) {
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

void TurnBatch::answer_unpersisted(const Error& why) {
  flush_durable();
  refuse_waiting(acks_, why);
}

void TurnBatch::on_store_failed(const Error& why) {
  if (store_failed_) return;
  store_failed_ = true;
  write_held_ = false;
  flush_durable();  // what was durable before the failure is answered as usual
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
  log::error("shard_store_failed", {{"shard", shard_}, {"answered", answered}},
             "shard {}: the store failed: {} intake answer(s) that waited for it "
             "were answered 503 storage_failed; nothing more is sent or written",
             shard_, answered);
  commit(MonoTime());  // drops what the turn changed
}

Result<void> TurnBatch::check_disk() const {
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

void TurnBatch::flush_durable() {
  if (acks_.empty()) return;
  const uint64_t durable = store_.durable_seq();
  size_t n = 0;
  while (n < acks_.size() && acks_[n].seq <= durable) ++n;
  if (n == 0) return;
  // The spare buffer keeps its capacity from flush to flush (no allocation per batch); an
  // answer that flushes again meanwhile finds it taken and uses a fresh one.
  std::vector<Ack> ready;
  ready.swap(ready_spare_);
  ready.assign(std::make_move_iterator(acks_.begin()),
               std::make_move_iterator(acks_.begin() + static_cast<ptrdiff_t>(n)));
  acks_.erase(acks_.begin(), acks_.begin() + static_cast<ptrdiff_t>(n));
  for (auto& a : ready) a.fire();
  ready.clear();
  if (ready.capacity() > ready_spare_.capacity()) ready_spare_.swap(ready);
}

void TurnBatch::after_durable(std::function<void()> fire, std::function<void(const Error&)> lost) {
  turn_acks_.push_back(Ack{0, std::move(fire), std::move(lost)});
}

void TurnBatch::close() {
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
}

}  // namespace ringcast::engine
