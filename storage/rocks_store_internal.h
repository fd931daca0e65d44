// Internal to the RocksDB store's files (storage/rocks_store.cc, rocks_journal.cc,
// rocks_reads.cc, rocks_recovery.cc, rocks_retention.cc): the helpers they share (Slice views
// of keys and strings, a prefix scan's bound, a partition's key prefix, the per-thread
// perf-counter switch) and the write probe's file name; RocksStore's members are declared in
// rocks_store.h. Invariants: sl() and sv() copy nothing (a view lives as long as the bytes it
// views); prefix_successor(p) is the smallest key above every key that starts with p (empty:
// none); partition_prefix(p) is the 2-byte big-endian prefix of every tenant-keyed record
// (docs/storage-schema.md "Keys: partition first").
#pragma once

#include <rocksdb/perf_level.h>
#include <rocksdb/slice.h>

#include <cstddef>
#include <cstring>
#include <string>
#include <string_view>

#include "core/types.h"
#include "storage/codec.h"

namespace ringcast::storage::rocks_detail {

using rocksdb::Slice;

// RocksDB counts perf_context statistics on every operation by default (kEnableCount): a
// thread-local access per key comparison, through __tls_get_addr since RocksDB is a shared
// library. Nothing reads them here, so each thread that drives the store turns them off once.
inline void no_perf_counters() {
  thread_local const bool done = [] {
    rocksdb::SetPerfLevel(rocksdb::PerfLevel::kDisable);
    return true;
  }();
  (void)done;
}

inline Slice sl(std::string_view s) {
  return Slice(s.data(), s.size());
}
template <size_t N>
Slice sl(const FixedKey<N>& k) {
  return Slice(k.data, N);
}
inline std::string_view sv(const Slice& s) {
  return {s.data(), s.size()};
}

// The smallest key greater than every key with this prefix; empty: none (all 0xff).
inline std::string prefix_successor(std::string p) {
  while (!p.empty()) {
    auto& c = reinterpret_cast<unsigned char&>(p.back());
    if (c != 0xff) {
      ++c;
      return p;
    }
    p.pop_back();
  }
  return p;
}

inline std::string partition_prefix(Partition p) {
  std::string k;
  put_be16(k, p);
  return k;
}

inline bool starts_with(const Slice& s, std::string_view prefix) {
  return s.size() >= prefix.size() && std::memcmp(s.data(), prefix.data(), prefix.size()) == 0;
}

inline constexpr const char* kProbeFile = "/write-probe";

}  // namespace ringcast::storage::rocks_detail
