// What every part of one shard uses (docs/architecture.md "The shard in layers"): the lower
// layer (the turn's batch, ownership, ids), the loop, scheduler and transport once the shard
// opens, the tenants it knows, and the shard's stop as the parts see it. Owned by Shard, it
// outlives the parts. Single-threaded: the shard thread only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "core/result.h"
#include "core/scheduler.h"
#include "core/store.h"
#include "core/time.h"
#include "core/transport.h"
#include "core/types.h"
#include "engine/metrics.h"
#include "engine/options.h"
#include "engine/ownership.h"
#include "engine/partition_ids.h"
#include "engine/payload_cache.h"
#include "engine/turn_batch.h"
#include "net/loop.h"

namespace ringcast::engine {

// Cluster mode: the tenant's partition is owned by another node, or between owners (503).
Error not_owner_error();

struct ShardCore {
  ShardCore(uint32_t index, const EngineOptions& options, Store& store, ShardMetrics& metrics,
            TurnBatch& batch, ShardOwnership& ownership, LeasedOwnership* leased, PartitionIds& ids,
            PayloadCache& payloads, Poster& poster)
      : index(index),
        options(options),
        store(store),
        metrics(metrics),
        batch(batch),
        ownership(ownership),
        leased(leased),
        ids(ids),
        payloads(payloads),
        poster(poster) {}
  ShardCore(const ShardCore&) = delete;
  ShardCore& operator=(const ShardCore&) = delete;

  const uint32_t index;
  const EngineOptions& options;
  Store& store;
  ShardMetrics& metrics;
  // The turn's work: one Mutations, one commit (the lower layer's, engine/turn_batch.h).
  TurnBatch& batch;
  // Which partitions this shard serves and sends for (engine/ownership.h): all of its
  // partitions for good (one node), or those it holds under leases (cluster mode: leased, the
  // same object, for the hand-over and the inboxes; null for one node).
  ShardOwnership& ownership;
  LeasedOwnership* const leased;
  // Per-partition id sequences of the partitions this shard owns.
  PartitionIds& ids;
  // Recent events for the send path (fan-out sends one event to many endpoints at once, and
  // most deliveries go out right after intake).
  PayloadCache& payloads;
  // Asynchronous store answers come back through this (Store::find_event_keys_async).
  Poster& poster;
  // Set when the shard opens (Shard::open_parts); the transport is gone once it closed.
  net::Loop* loop = nullptr;
  Scheduler* scheduler = nullptr;
  Transport* transport = nullptr;
  // The shard's stop, seen by the parts: no new work (draining); stopping, results and
  // answers are dropped (discarding).
  bool draining = false;
  bool discarding = false;

  std::unordered_map<std::string, bool> known_tenants;  // tenant → exists (has had endpoints)
  // Found by recovery: stored endpoints whose policy is not in the config, by policy name
  // (operations.md "Validation": no silent fall-back).
  std::map<std::string, uint32_t> missing_policies;
  uint64_t msg_rng[2] = {};  // new_message_id()'s state (seeded at open)

  Mutations& mutations() { return batch.mutations(); }
  // The turn's batch and its durability (engine/turn_batch.h): TurnBatch::after_durable.
  void after_durable(std::function<void()> fire, std::function<void(const Error&)> lost = nullptr) {
    batch.after_durable(std::move(fire), std::move(lost));
  }
  // (partition << 48) | next sequence of that partition (engine/partition_ids.h).
  uint64_t next_id(Partition p) { return ids.next_id(p); }
  // Whether this shard takes calls for `tenant` now (always, outside cluster mode).
  bool serves(std::string_view tenant) const { return ownership.serves(partition_of(tenant)); }
  const Endpoint* owned_endpoint(const std::string& tenant, EndpointId id) const {
    const Endpoint* e = scheduler->find_endpoint(id);
    return e && e->tenant == tenant ? e : nullptr;
  }
  // EngineOptions::entropy, or the system CSPRNG.
  void random_bytes(uint8_t* out, size_t n);
  std::string new_message_id(WallTime now);
  MessageIdBits new_message_bits(WallTime now);  // the same id as bits
};

// The recovery visitor: a partition's endpoints, tenants and pending deliveries into the
// scheduler (Shard::open_parts for the partitions owned at start, HandOver::finish_acquire for
// one taken in cluster mode).
class ShardRecovery final : public RecoveryVisitor {
 public:
  ShardRecovery(ShardCore& core, WallTime now) : core_(core), now_(now) {}
  void on_endpoint(const Endpoint& e) override {
    core_.known_tenants[e.tenant] = true;
    if (!core_.scheduler->restore_endpoint(e).ok()) ++core_.missing_policies[e.policy];
  }
  void on_tenant(const Tenant& t) override {
    core_.scheduler->restore_tenant(t);
    core_.known_tenants[t.name] = true;
  }
  void on_delivery(const Delivery& d) override { core_.scheduler->restore_delivery(d, now_); }

 private:
  ShardCore& core_;
  WallTime now_;
};

}  // namespace ringcast::engine
