// Leases of stored deliveries, appended to segment files beside the RocksDB store
// (docs/storage-schema.md "lease log"). A lease (SPEC R12.2: the kInFlight record written
// before the request goes on the wire) is short-lived: the attempt's result replaces it a few
// milliseconds later. Kept in the deliveries_active column family it cost a memtable insert,
// WAL bytes and a later overwrite per attempt; here it is a few dozen bytes of one pwrite per
// batch, and nothing once it is resolved.
//
// Invariants:
// - A lease is appended right after the batch it belongs to was written, before that write
//   returns: it reaches the file before its request reaches the wire, and never belongs to a
//   batch that was not committed. sync() runs with the WAL sync. (Under `always`, where a lease
//   must be durable before the send, RocksStore keeps leases in the synced batch instead.)
// - A lease is live from its append until resolve() names its delivery (called after the
//   batch holding the delivery's next state was written to the WAL). A segment other than the
//   active one whose leases are all resolved may be removed once those writes are durable:
//   resolved_segments() before the WAL sync, remove() after it.
// - Only the newest segment is appended to; a restart starts a new one. The segments of
//   earlier runs are read once at open (read_old: the last lease per delivery, a torn tail
//   ignored) and removed after the store applied what they held (remove_old).
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/result.h"
#include "core/types.h"
#include "storage/id_map.h"
#include "storage/segment_dir.h"

namespace ringcast::storage {

// The leases of one write, framed for the log.
class LeaseBatch {
 public:
  void add(DeliveryId id, std::string_view record);
  bool empty() const { return at_.empty(); }
  // Empties it and keeps its buffers (a batch reused per writing thread allocates nothing once
  // grown); a buffer past `keep_bytes` is given back instead.
  void clear(size_t keep_bytes);

 private:
  friend class LeaseLog;
  std::string buf_;                                  // entries, back to back
  std::vector<std::pair<DeliveryId, uint32_t>> at_;  // delivery, offset of its entry in buf_
};

class LeaseLog {
 public:
  // Opens (creating) `dir`; the segments found there are the old ones (read_old, remove_old);
  // a new active segment is started.
  static Result<std::unique_ptr<LeaseLog>> open(const std::string& dir, uint64_t segment_bytes);
  ~LeaseLog();
  LeaseLog(const LeaseLog&) = delete;
  LeaseLog& operator=(const LeaseLog&) = delete;

  // The last lease per delivery in the old segments, in log order. An entry that is short or
  // fails its check ends its segment (a torn tail: cut by a power loss before the log's sync,
  // the same window `interval` leaves the WAL).
  Result<std::unordered_map<DeliveryId, std::string>> read_old() const;
  // Removes the old segments (their leases were applied to the store, durably).
  Result<void> remove_old();

  // Appends the batch (one pwrite); each lease becomes its delivery's live lease. Thread-safe.
  Result<void> append(const LeaseBatch& batch);
  // The deliveries' leases are resolved (their next state is in the WAL).
  void resolve(const DeliveryId* ids, size_t n);
  // The live lease of a delivery, read back; false when it has none.
  Result<bool> lookup(DeliveryId id, std::string& record) const;
  bool any_live() const { return live_count_.load(std::memory_order_acquire) > 0; }

  // fdatasync of the segments written since the last sync (and the directory after a change).
  Result<void> sync();
  // Segments other than the active one without a live lease.
  std::vector<uint64_t> resolved_segments() const;
  bool has_resolved_segments() const { return resolved_.load(std::memory_order_acquire) > 0; }
  // Deletes the given segments if they still have no live lease.
  Result<void> remove(const std::vector<uint64_t>& segments);

  uint64_t bytes() const;
  size_t segment_count() const;  // the active one and those not yet removed, old ones included

 private:
  struct Segment {
    int fd = -1;
    uint64_t size = 0;
    uint64_t live = 0;  // leases not yet resolved
  };
  struct Loc {
    uint64_t segment;
    uint64_t offset;  // of the entry
    uint32_t size;    // of the entry
  };
  LeaseLog(SegmentDir files, uint64_t segment_bytes);
  Result<void> start_segment(uint64_t number);  // with mu_ held
  void count_resolved();                        // with mu_ held

  const SegmentDir files_;
  const uint64_t segment_bytes_;
  std::vector<uint64_t> old_;  // segments of earlier runs, oldest first
  std::mutex sync_mu_;         // sync() and remove(): a descriptor is not closed while synced
  mutable std::mutex mu_;      // everything below; appends never wait for a sync
  std::map<uint64_t, Segment> segments_;  // of this run
  IdMap<Loc> live_;                       // no allocation per lease (id_map.h)
  uint64_t active_ = 0;
  std::vector<uint64_t> dirty_;
  bool dir_dirty_ = false;
  std::atomic<size_t> live_count_{0};
  std::atomic<size_t> resolved_{0};  // segments resolved_segments() would return
};

}  // namespace ringcast::storage
