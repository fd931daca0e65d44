// The shard's lower layer: the turn's batch and its durability. Everything a loop turn changes
// goes into one Mutations and is written as ONE store batch at the end of the turn (commit());
// an answer that reports a change waits until that batch is durable (after_durable(), SPEC
// R12.2: nothing is acknowledged that is not durable). A store that refuses or fails is handled
// here (docs/operations.md "Disk full, read-only and failed syncs"): a refused batch is kept and
// written again every kDiskRetry, the intake waiting for it answered 503 storage_full; a failed
// store makes nothing durable any more, the intake waiting for it answered 503 storage_failed.
// A networked store that cannot confirm its writes for kUnconfirmedAnswerAfter gets the same
// 503 for the intake waiting on it (begin_turn()).
// The parts above (intake, send path, hand-over, jobs) learn of a written batch through the
// Listener before its records are cleared. Single-threaded: the shard thread only.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "core/result.h"
#include "core/store.h"
#include "core/time.h"
#include "engine/metrics.h"

namespace ringcast::engine {

class TurnBatch {
 public:
  class Listener {
   public:
    virtual ~Listener() = default;
    // `m` was written as batch `seq`: take from it what outlives it (after_durable() here
    // joins this batch's answers).
    virtual void on_written(Mutations& m, uint64_t seq) = 0;
    // After every commit(): written, kept for a later write, or dropped (`dropped`: the store
    // failed and what the turn changed is gone).
    virtual void after_commit(bool dropped) = 0;
  };

  static constexpr Duration kDiskRetry = milliseconds(200);
  static constexpr Duration kUnconfirmedAnswerAfter = seconds(2);

  TurnBatch(uint32_t shard, Store& store, ShardMetrics& metrics, Listener& listener)
      : shard_(shard), store_(store), metrics_(metrics), listener_(listener) {}
  TurnBatch(const TurnBatch&) = delete;
  TurnBatch& operator=(const TurnBatch&) = delete;

  Mutations& mutations() { return mutations_; }
  // An event of this turn was not looked up by the shard (the store checks its key itself).
  void keys_unchecked() { keys_checked_ = false; }

  // The store's health at the start of a turn: a failed store is taken note of, a disk that
  // refuses writes is probed now and then, intake waiting on a networked store that cannot
  // confirm is answered 503. The disk's health, for the turn.
  DiskHealth begin_turn(MonoTime now);
  // Writes the turn's batch (kept when the disk refuses it, dropped once the store failed).
  void commit(MonoTime now);
  // Runs `fire` once everything written so far is durable (after this turn's commit). `lost`
  // (may be empty) runs instead, with the reason, once that write can no longer be confirmed in
  // time: the disk refused it (the write is kept and done later, but its waiting answer goes
  // now) or the store failed. Without `lost` the answer waits for the write, or is never given
  // when the store failed (no false success).
  void after_durable(std::function<void()> fire, std::function<void(const Error&)> lost = nullptr);
  // Answers what is durable now.
  void flush_durable();
  // The intake refusal while the disk refuses writes or the store failed; ok() otherwise.
  Result<void> check_disk() const;
  // The store failed for good: what is not durable never will be.
  void on_store_failed(const Error& why);

  bool held() const { return write_held_; }        // the disk refused the batch: kept
  bool failed() const { return store_failed_; }    // nothing becomes durable any more
  bool waiting() const { return !acks_.empty(); }  // answers wait for durability
  size_t answers_waiting() const { return acks_.size(); }
  uint64_t last_written() const { return last_written_seq_; }

  // The graceful stop: the last batch is written (a refused one tried once more), its answers
  // given as it becomes durable (flush_durable()), then close() answers or drops the rest.
  void commit_last(MonoTime now) {
    next_disk_retry_ = now;
    commit(now);
  }
  void close();

 private:
  struct Ack {
    uint64_t seq;
    std::function<void()> fire;
    std::function<void(const Error&)> lost;  // may be empty (after_durable)
  };
  // The disk refused this turn's batch: keep it (and the answers that wait for it) for a later
  // write; answer the waiting intake now.
  void hold(const Error& why, MonoTime now);
  // Answers the waiting intake of `list` 503 `why` (its `lost`); keeps the acks without one.
  static void refuse_waiting(std::vector<Ack>& list, const Error& why);
  void answer_unpersisted(const Error& why);

  const uint32_t shard_;
  Store& store_;
  ShardMetrics& metrics_;
  Listener& listener_;
  Mutations mutations_;
  // Every event of this turn came through the intake's key lookup: see Mutations.
  bool keys_checked_ = true;
  std::vector<Ack> acks_;         // waiting for durable_seq() >= seq
  std::vector<Ack> turn_acks_;    // wait for this turn's commit (seq set then)
  std::vector<Ack> ready_spare_;  // flush_durable()'s buffer, kept between flushes
  uint64_t last_written_seq_ = 0;
  // write_held_: the store refused mutations_ (DiskHealth::kFull); they stay, with turn_acks_,
  // and are written again every kDiskRetry; nothing new is sent and intake answers 503
  // storage_full until a write succeeds.
  bool write_held_ = false;
  bool store_failed_ = false;  // DiskHealth::kFailed seen: on_store_failed() ran
  MonoTime next_disk_retry_;
  MonoTime held_since_;
  std::optional<MonoTime> degraded_since_;  // a networked store degraded since
};

}  // namespace ringcast::engine
