#include "storage/rocks_options.h"

#include <rocksdb/filter_policy.h>
#include <rocksdb/slice_transform.h>
#include <rocksdb/table.h>
#include <rocksdb/utilities/table_properties_collectors.h>

#include <algorithm>

namespace ringcast::storage {

rocksdb::ColumnFamilyOptions column_family_options(Cf c, const StoreOptions& o,
                                                   const std::shared_ptr<rocksdb::Cache>& cache) {
  rocksdb::ColumnFamilyOptions cfo;
  rocksdb::BlockBasedTableOptions t;
  t.block_cache = cache;
  t.format_version = 5;
  const bool large =
      c == kCfEvents || c == kCfActive || c == kCfArchive || c == kCfAttempts || c == kCfCreated;
  // Point lookups (intake's idempotency check misses almost always) get a Bloom filter.
  const bool point = c == kCfEvents || c == kCfActive || c == kCfArchive || c == kCfCreated ||
                     c == kCfEndpoints || c == kCfIdempotency || c == kCfMeta;
  if (point) t.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10));
  t.block_size = large ? 16 * 1024 : 4 * 1024;
  cfo.table_factory.reset(rocksdb::NewBlockBasedTableFactory(t));
  // L0 and the base level hold the newest data and are rewritten soonest: compressing them
  // costs the flush and the first compaction CPU for bytes that are rewritten soon after.
  cfo.compression = rocksdb::kLZ4Compression;
  cfo.compression_per_level = {rocksdb::kNoCompression,  rocksdb::kNoCompression,
                               rocksdb::kLZ4Compression, rocksdb::kLZ4Compression,
                               rocksdb::kLZ4Compression, rocksdb::kLZ4Compression,
                               rocksdb::kLZ4Compression};
  cfo.bottommost_compression = rocksdb::kZSTD;
  cfo.level_compaction_dynamic_level_bytes = true;
  cfo.write_buffer_size =
      large ? o.write_buffer_bytes : std::min<size_t>(o.write_buffer_bytes, 16 << 20);
  cfo.max_write_buffer_number = 4;
  // New keys land next to the previous key of the same prefix (ids grow within a partition,
  // attempts are mostly for recent deliveries, index keys grow per tenant or endpoint): an
  // insert hint per prefix saves most of the memtable's skiplist search (2.5x in the bench).
  size_t hint_prefix = 2;                                                       // the partition
  if (c == kCfTenantIndex || c == kCfNotifications) hint_prefix = 10;           // + tenant hash
  if (c == kCfEndpointIndex) hint_prefix = 18;                                  // + endpoint
  if (c == kCfMeta || c == kCfIdempotency || c == kCfTenants) hint_prefix = 0;  // names
  if (hint_prefix > 0) {
    cfo.memtable_insert_with_hint_prefix_extractor.reset(
        rocksdb::NewFixedPrefixTransform(hint_prefix));
  }
  if (c == kCfIdempotency) {
    // Intake looks every new event's key up twice (the shard's duplicate check, the batch's
    // overwrite guard) and almost always misses: a whole-key Bloom filter on the memtable
    // answers those misses without a skiplist search.
    cfo.memtable_prefix_bloom_size_ratio = 0.05;
    cfo.memtable_whole_key_filtering = true;
  }
  if (c == kCfActive || c == kCfExpiry) {
    // Queue-like column families (records are deleted soon after they were written): compact
    // files dense with tombstones early so that recovery and retention scans stay fast.
    cfo.table_properties_collector_factories.emplace_back(
        rocksdb::NewCompactOnDeletionCollectorFactory(4096, 2048));
  }
  return cfo;
}

rocksdb::DBOptions db_options(const StoreOptions& o) {
  rocksdb::DBOptions d;
  d.create_if_missing = o.create_if_missing;
  d.max_background_jobs = std::max(2, o.background_jobs);
  d.bytes_per_sync = 1 << 20;
  d.max_total_wal_size = o.max_total_wal_bytes;
  d.db_write_buffer_size = o.total_write_buffer_bytes;
  d.wal_recovery_mode = rocksdb::WALRecoveryMode::kPointInTimeRecovery;
  // Replaying the WAL is most of a restart after a crash: bound it (max_total_wal_bytes forces
  // flushes) and do not flush again at the end of the replay.
  d.avoid_flush_during_recovery = true;
  d.manual_wal_flush = false;  // every write reaches the OS at once; SyncWAL makes it durable
  d.keep_log_file_num = 4;
  d.max_log_file_size = 8 << 20;
  d.stats_dump_period_sec = 0;
  d.info_log_level = rocksdb::InfoLogLevel::WARN_LEVEL;
  return d;
}

}  // namespace ringcast::storage
