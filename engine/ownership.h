// The shard's lower layer: which partitions a shard serves and sends for, and at which epoch
// (docs/cluster.md "Fencing"). One node owns every partition of its shards for good: that is
// StaticOwnership, the null object (epoch 0, always sendable, never fenced), so the intake and
// the send path ask the same questions in both modes and branch on neither. In cluster mode the
// shard holds partitions under leases (LeasedOwnership): taken and loaded, handed over, lost —
// the hand-over (engine/handover.cc) moves them in and out of its table.
// Invariant: called on the shard thread only, except LeasedOwnership::snapshot() (any thread,
// under its lock; the table changes under the same lock).
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/time.h"
#include "core/types.h"
#include "engine/options.h"

namespace ringcast::engine {

class ShardOwnership {
 public:
  virtual ~ShardOwnership() = default;
  // Intake for p is taken here now (not being handed over).
  virtual bool serves(Partition p) const = 0;
  // p's attempts may go out now: held, not being handed over, its lease valid at `now` (and
  // held at `epoch`, when given).
  virtual bool sendable(Partition p, MonoTime now,
                        std::optional<uint64_t> epoch = std::nullopt) const = 0;
  // The store refused a write of p at `epoch` (its fence): what that write took in is not
  // acknowledged (SPEC R12.5).
  virtual bool fenced(Partition p, uint64_t epoch) const = 0;
  // The epoch p's intake is taken in at, checked against fenced() before the answer (0: there
  // is nothing to check).
  virtual uint64_t intake_epoch(Partition p) const = 0;
  // An attempt of p goes on the wire: the epoch it is sent at.
  virtual uint64_t sent(Partition p) = 0;
  // Its result came back: false when p is no longer held at `epoch` (lost, or lost and taken
  // again while it was out): the result is an orphan, the next owner retries the delivery.
  virtual bool completed(Partition p, uint64_t epoch) = 0;
};

// One node: every partition of the shard, for good.
class StaticOwnership final : public ShardOwnership {
 public:
  bool serves(Partition) const override { return true; }
  bool sendable(Partition, MonoTime, std::optional<uint64_t>) const override { return true; }
  bool fenced(Partition, uint64_t) const override { return false; }
  uint64_t intake_epoch(Partition) const override { return 0; }
  uint64_t sent(Partition) override { return 0; }
  bool completed(Partition, uint64_t) override { return true; }
};

// A partition held here in cluster mode.
struct HeldPartition {
  uint64_t epoch = 0;
  bool releasing = false;
  uint32_t in_flight = 0;    // attempts of p on the wire (sent at this epoch)
  bool flushed = false;      // releasing, nothing in flight: waiting for release_seq
  uint64_t release_seq = 0;  // the last batch with p's results; done once it is durable
  std::function<void()> done;
  std::string inbox_cursor;  // the last inbox entry taken in (empty: from the start)
  bool inbox_busy = false;   // a drain of p's inbox is in progress
};

// Cluster mode: the partitions this shard holds now, under the node's leases.
class LeasedOwnership final : public ShardOwnership {
 public:
  explicit LeasedOwnership(const PartitionOwnership& leases) : leases_(leases) {}

  bool serves(Partition p) const override;
  bool sendable(Partition p, MonoTime now, std::optional<uint64_t> epoch) const override;
  bool fenced(Partition p, uint64_t epoch) const override { return leases_.fenced(p, epoch); }
  uint64_t intake_epoch(Partition p) const override;
  uint64_t sent(Partition p) override;
  bool completed(Partition p, uint64_t epoch) override;

  // ---- the table, for the hand-over ------------------------------------------------------
  const PartitionOwnership& leases() const { return leases_; }
  HeldPartition* find(Partition p);
  // p is held from now at `epoch` (a fresh entry).
  void hold(Partition p, uint64_t epoch);
  // p is being handed over (counted until it is forgotten).
  void start_release(HeldPartition& h);
  void forget(const std::vector<Partition>& ps);
  bool empty() const { return held_.empty(); }
  uint32_t releasing() const { return releasing_; }
  std::unordered_map<Partition, HeldPartition>& held() { return held_; }
  // Partitions held now and their epochs, sorted (any thread).
  std::vector<std::pair<Partition, uint64_t>> snapshot() const;

 private:
  const PartitionOwnership& leases_;
  std::unordered_map<Partition, HeldPartition> held_;
  uint32_t releasing_ = 0;  // entries being handed over
  mutable std::mutex mu_;   // guards held_ for snapshot() (writes: the shard thread)
};

}  // namespace ringcast::engine
