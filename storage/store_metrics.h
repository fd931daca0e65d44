// The stores' own figures for /metrics (StoreInfo::metrics_text, core/store.h), as Prometheus
// text: RocksStore's bytes on disk and in memory, RedisStore's memory view (docs/operations.md
// "4. Metrics").
#pragma once

#include <cstdint>
#include <string>

namespace ringcast::storage {

// `ringcast_store_bytes{part="sst|wal|memtable|payload_log|lease_log"}`: what the store holds
// on disk and in memory (RocksStore::sizes()).
std::string render_store_metrics(uint64_t sst, uint64_t wal, uint64_t memtable,
                                 uint64_t payload_log, uint64_t lease_log);

// The Redis store's memory view (RedisMemory, docs/cluster.md "Memory back-pressure"): the
// fullest primary's used_memory, its limit and high-water mark, whether intake is refused, the INFO
// polls.
struct RedisMemoryView {
  uint64_t used_bytes = 0, limit_bytes = 0, mark_bytes = 0;
  bool full = false;
  uint64_t poll_errors = 0, full_spells = 0, retention_fenced = 0;
};
std::string render_redis_memory_metrics(const RedisMemoryView& m);

}  // namespace ringcast::storage
