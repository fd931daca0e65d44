// A shard's bounded cache of events for the send path: most deliveries go out within moments
// of intake, so their payload is taken from here instead of being read back from the store
// (a point lookup per attempt). Bounded by bytes with FIFO eviction; the store stays the
// source of truth (SPEC R12.2: payloads are durable before the first send), so a miss only
// costs a read. One per shard thread; not thread-safe.
#pragma once

#include <cstddef>
#include <deque>
#include <memory>
#include <unordered_map>

#include "core/types.h"

namespace ringcast::engine {

class PayloadCache {
 public:
  explicit PayloadCache(size_t max_bytes) : max_bytes_(max_bytes) {}

  std::shared_ptr<const Event> find(EventSeq seq) {
    auto it = map_.find(seq);
    if (it == map_.end()) {
      ++misses_;
      return nullptr;
    }
    ++hits_;
    return it->second;
  }

  // Keeps `ev` (no-op when already present or larger than the whole budget); evicts the
  // oldest entries to stay within the budget.
  void put(std::shared_ptr<const Event> ev) {
    const size_t c = cost(*ev);
    if (c > max_bytes_ || map_.count(ev->seq)) return;
    while (bytes_ + c > max_bytes_ && !fifo_.empty()) {
      auto it = map_.find(fifo_.front());
      fifo_.pop_front();
      if (it == map_.end()) continue;
      bytes_ -= cost(*it->second);
      map_.erase(it);
    }
    bytes_ += c;
    fifo_.push_back(ev->seq);
    map_.emplace(ev->seq, std::move(ev));
  }

  // Forgets every event of the partitions in ps (cluster mode: lost or handed over).
  // A later owner of p may give the same seqs to other events — a write of this node that the
  // store fenced never made it — so an entry kept past the partition would send another
  // event's payload and webhook id if this node took p again.
  void drop_partitions(const PartitionSet& ps) {
    for (auto it = map_.begin(); it != map_.end();) {
      if (!ps.test(id_partition(it->first))) {
        ++it;
        continue;
      }
      bytes_ -= cost(*it->second);
      it = map_.erase(it);
    }
  }

  size_t bytes() const { return bytes_; }
  size_t size() const { return map_.size(); }
  uint64_t hits() const { return hits_; }
  uint64_t misses() const { return misses_; }

  // What an entry is charged: its strings plus the node, control block and queue slot.
  static size_t cost(const Event& e) {
    return e.payload.size() + e.id.size() + e.type.size() + e.tenant.size() + 192;
  }

 private:
  size_t max_bytes_;
  size_t bytes_ = 0;
  uint64_t hits_ = 0;
  uint64_t misses_ = 0;
  std::unordered_map<EventSeq, std::shared_ptr<const Event>> map_;
  std::deque<EventSeq> fifo_;
};

}  // namespace ringcast::engine
