// The shard's lower layer: ids. Every id a shard mints (events, deliveries, endpoints, jobs) is
// (partition << 48) | that partition's next sequence (core/types.h make_id), so an id names its
// partition and a partition's ids never collide across the nodes that held it in turn: a
// partition's sequence starts where its recovery found the store's highest (RecoveryStats::
// next_sequence). Single-threaded: the shard thread only.
#pragma once

#include <cstdint>
#include <unordered_map>

#include "core/scheduler.h"
#include "core/types.h"

namespace ringcast::engine {

class PartitionIds final : public IdAllocator {
 public:
  uint64_t next_id(Partition p) override { return make_id(p, next_[p]++); }
  // p was recovered (taken): its ids continue from `next_sequence`.
  void start_at(Partition p, uint64_t next_sequence) { next_[p] = next_sequence; }
  // p left this shard: the next owner continues its sequence.
  void forget(Partition p) { next_.erase(p); }

 private:
  std::unordered_map<Partition, uint64_t> next_;
};

}  // namespace ringcast::engine
