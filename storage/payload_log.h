// Event payloads, appended to segment files beside the RocksDB store (docs/storage-schema.md).
// The events column family keeps only a small head per event with a PayloadRef into this log,
// so the payload bytes go to disk once instead of through the WAL, the memtable and every
// compaction: intake spends about a third less CPU per event.
//
// Invariants:
// - A payload is appended (write(2) has returned) before the batch that references it is
//   written; sync() runs before the WAL sync that makes such a batch durable, and before every
//   memtable flush (RocksStore's flush listener), so a durable reference always has durable
//   bytes. The bytes are checked against the event's payload hash on every read.
// - Only the newest segment is appended to; a restart always starts a new one, so a torn tail
//   of an older run is never written over.
// - Each segment remembers the newest store stamp of the events appended to it. Retention
//   removes a segment once its expiry entries were all processed: every event in it was then
//   deleted or moved to the active segment.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"
#include "storage/segment_dir.h"

namespace ringcast::storage {

struct PayloadRef {
  uint64_t segment = 0;
  uint64_t offset = 0;
  uint32_t size = 0;
  friend bool operator==(const PayloadRef&, const PayloadRef&) = default;
};

class PayloadLog {
 public:
  // Opens (creating) `dir`, keeps the segments found there readable and starts a new one.
  // The segments found have stamp 0 until raise_stamps().
  static Result<std::unique_ptr<PayloadLog>> open(const std::string& dir, uint64_t segment_bytes);
  ~PayloadLog();
  PayloadLog(const PayloadLog&) = delete;
  PayloadLog& operator=(const PayloadLog&) = delete;

  // Appends the payloads in order (one pwritev per IOV_MAX of them) and sets refs[i] for each.
  // `stamp` (the store's expiry stamp of the batch) raises the stamp of the segment written.
  // Thread-safe; appends of different threads never interleave within one call.
  Result<void> append(const std::vector<std::string_view>& payloads, uint64_t stamp,
                      std::vector<PayloadRef>& refs);
  // Reads the bytes a ref names; kCorruption if the segment is gone or too short.
  Result<void> read(const PayloadRef& ref, std::string& out) const;
  // fdatasync of every segment written since the last sync (and the directory after a new
  // segment was created). Thread-safe.
  Result<void> sync();

  uint64_t active_segment() const;
  // Segment numbers with their stamps, the active one included.
  std::vector<std::pair<uint64_t, uint64_t>> segments() const;
  // Bytes a segment holds (written so far); 0 for an unknown segment.
  uint64_t segment_size(uint64_t segment) const;
  // Bytes all segments hold.
  uint64_t bytes() const;
  // Raises the stamp of every segment but the active one to at least `stamp` (at open).
  void raise_stamps(uint64_t stamp);
  // Deletes a segment other than the active one (retention).
  Result<void> remove(uint64_t segment);

 private:
  struct Segment {
    int fd = -1;
    std::atomic<uint64_t> size{0};   // written by the appender, read by segment_size()
    std::atomic<uint64_t> stamp{0};  // raised by the appender
  };
  PayloadLog(SegmentDir files, uint64_t segment_bytes);
  Result<void> start_segment(uint64_t number);  // with map_mu_ held exclusively

  const SegmentDir files_;
  const uint64_t segment_bytes_;
  mutable std::shared_mutex map_mu_;  // segments_: shared to read, exclusive to add or remove
  std::map<uint64_t, Segment> segments_;
  mutable std::mutex append_mu_;  // one appender at a time; guards active_ and dirty_
  uint64_t active_ = 0;
  std::vector<uint64_t> dirty_;  // written since the last sync
  bool dir_dirty_ = false;
};

}  // namespace ringcast::storage
