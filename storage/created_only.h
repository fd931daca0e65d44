// The deliveries a RocksStore holds only as their created record (docs/storage-schema.md "Created
// records"): created, not ended, and no state of theirs in deliveries_active (a lease of theirs
// may be in the lease log). A terminal write of such a delivery needs no tombstone in
// deliveries_active, and recovery finds them by scanning deliveries_created from the
// partition's floor. In memory, one bit per id sequence between a partition's floor and its
// newest created id; thread-safe (several shards write at once).
//
// Invariants: a partition's floor only rises; every delivery of p created below floor(p) has a
// record in deliveries_active or deliveries_archive. A floor is written into a batch only when
// the partition is authoritative (this process recovered it, so the set knows every such
// delivery) and no other batch that changed the partition's set is still being committed
// (begin_batch/end_batch): then every change the floor relies on is in the WAL before it.
#pragma once

#include <cstdint>
#include <deque>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "core/types.h"

namespace ringcast::storage {

class CreatedOnly {
 public:
  // id was created; nothing but its created record (and leases) will be stored for it. True
  // when it was not in the set before.
  bool add(DeliveryId id);
  // id got a record of another state: true when it was in the set (then deliveries_active has
  // no record of it that a terminal write must delete).
  bool take(DeliveryId id);
  bool contains(DeliveryId id) const;

  // A batch begins changing p's set / is committed (or failed).
  void begin_batch(Partition p);
  void end_batch(Partition p);
  // The floor to write for p in the batch that has just changed it, or 0 when none is due: p is
  // authoritative, this batch is the only one of p in flight, and the floor rose by `step` or
  // more since the last one written. floor_written() once that batch is committed.
  uint64_t floor_due(Partition p, uint64_t step) const;
  void floor_written(Partition p, uint64_t floor);

  // Recovery of p is done (its created-only deliveries were added): the set is authoritative
  // for p, whose stored floor is `stored_floor`.
  void recovered(Partition p, uint64_t stored_floor);
  // The lowest sequences of p still in the set, at most `n`, when p spans more than `span`
  // sequences (between its floor and its newest created id); else empty.
  std::vector<DeliveryId> oldest_beyond(Partition p, uint64_t span, size_t n) const;

  size_t size() const;

 private:
  struct Window {
    uint64_t base = 0;           // sequence of words.front()'s bit 0 (a multiple of 64)
    std::deque<uint64_t> words;  // bit i of word w: sequence base + 64 w + i is in the set
    uint64_t count = 0;          // bits set
    uint64_t high = 0;           // 1 + the highest sequence ever added
    uint64_t stored_floor = 0;   // the last floor written
    uint32_t batches = 0;        // batches of p between begin_batch and end_batch
    bool authoritative = false;
    uint64_t floor() const;  // lowest sequence that may be in the set
  };
  mutable std::mutex mu_;
  std::unordered_map<Partition, Window> parts_;
  size_t size_ = 0;
};

}  // namespace ringcast::storage
