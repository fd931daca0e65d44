// What one retention pass (SPEC R10.1) removed: RocksStore::run_retention and
// RedisStore::run_retention report the same struct (engine/retention.h counts it for /metrics).
#pragma once

#include <cstdint>

namespace ringcast::storage {

struct RetentionStats {
  uint64_t deliveries = 0, attempts = 0, events = 0, notifications = 0;
  uint64_t payloads_moved = 0;    // payloads of long-lived events copied to the active segment
  uint64_t payload_segments = 0;  // payload log segments removed
  uint64_t expiry_entries = 0;    // index entries processed
  bool stopped = false;           // `stop` was seen: the rest waits for the next pass
};

}  // namespace ringcast::storage
