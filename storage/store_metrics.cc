#include "storage/store_metrics.h"

#include <utility>

namespace ringcast::storage {

std::string render_store_metrics(uint64_t sst, uint64_t wal, uint64_t memtable,
                                 uint64_t payload_log, uint64_t lease_log) {
  std::string out =
      "# HELP ringcast_store_bytes Bytes the store holds: SST files, WAL, memtables, payload "
      "and lease log segments.\n"
      "# TYPE ringcast_store_bytes gauge\n";
  const std::pair<const char*, uint64_t> rows[] = {{"sst", sst},
                                                   {"wal", wal},
                                                   {"memtable", memtable},
                                                   {"payload_log", payload_log},
                                                   {"lease_log", lease_log}};
  for (const auto& [part, v] : rows) {
    out += "ringcast_store_bytes{part=\"";
    out += part;
    out += "\"} ";
    out += std::to_string(v);
    out += '\n';
  }
  return out;
}

std::string render_redis_memory_metrics(const RedisMemoryView& m) {
  std::string out;
  auto one = [&out](const char* name, const char* type, const char* help, uint64_t v) {
    out += "# HELP ";
    out += name;
    out += ' ';
    out += help;
    out += "\n# TYPE ";
    out += name;
    out += ' ';
    out += type;
    out += '\n';
    out += name;
    out += ' ';
    out += std::to_string(v);
    out += '\n';
  };
  one("ringcast_redis_used_memory_bytes", "gauge",
      "used_memory of the Redis primary closest to its limit (INFO memory, polled each second).",
      m.used_bytes);
  one("ringcast_redis_memory_limit_bytes", "gauge",
      "That primary's limit: maxmemory, or storage.redis.max_memory_bytes (0: none).",
      m.limit_bytes);
  one("ringcast_redis_memory_high_water_bytes", "gauge",
      "storage.redis.high_water x the limit: above it intake answers 503 store_full.",
      m.mark_bytes);
  one("ringcast_redis_store_full", "gauge", "1 while intake is refused for memory (store_full).",
      m.full ? 1 : 0);
  one("ringcast_redis_store_full_spells_total", "counter",
      "How often the store went over the high-water mark.", m.full_spells);
  one("ringcast_redis_memory_poll_errors_total", "counter",
      "INFO memory polls no primary answered.", m.poll_errors);
  one("ringcast_retention_fenced_total", "counter",
      "Retention chunks the fence refused (the partition had moved to another node).",
      m.retention_fenced);
  return out;
}

}  // namespace ringcast::storage
