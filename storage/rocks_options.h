// The RocksDB options of the store, per column family (docs/storage-schema.md). Public so that
// benchmarks can give their raw-RocksDB peer the very same options, and tools can open a store.
#pragma once

#include <rocksdb/cache.h>
#include <rocksdb/options.h>

#include <memory>

#include "storage/rocks_store.h"
#include "storage/schema.h"

namespace ringcast::storage {

rocksdb::ColumnFamilyOptions column_family_options(Cf c, const StoreOptions& o,
                                                   const std::shared_ptr<rocksdb::Cache>& cache);
rocksdb::DBOptions db_options(const StoreOptions& o);

}  // namespace ringcast::storage
