// One process's store and engine, wired together: the store's durability hook wakes the
// engine's shards (intake acknowledgements wait for durability, SPEC R12.5), and stopping
// takes the engine down before the store closes. What `ringcast serve` and an embedding
// program both need; everything else (API server, notifier) is built around it.
// Two stores: RocksDB on the local disk (single-node mode, the default), or Redis / Redis Cluster
// (storage.backend = "redis", docs/cluster.md), where N nodes share the partitions by leases
// (cluster/lease.h) when `ownership` is given.
#pragma once

#include <atomic>
#include <memory>
#include <optional>

#include "cluster/lease.h"
#include "core/result.h"
#include "engine/engine_impl.h"
#include "engine/options.h"
#include "storage/redis_inbox.h"
#include "storage/redis_store.h"
#include "storage/rocks_store.h"

namespace ringcast::engine {

struct RedisModeOptions {
  storage::RedisStoreOptions store;
  // Set: cluster mode, this node owns the partitions the lease manager gives it (the store
  // fences its writes with their epochs; store.node_id is set from ownership->node_id). Unset:
  // this one node owns every partition on Redis (no other ringcast node may use the namespace).
  std::optional<cluster::LeaseOptions> ownership;
  // Graceful stop: how long the hand-over of the partitions may take.
  Duration release_grace = seconds(10);
};

class Embedded {
 public:
  // Opens the store (recovering it), then starts the engine on it. A caller's own
  // store.on_durable hook still runs, before the shards are woken.
  // `why`: as EngineImpl::start's.
  static Result<std::unique_ptr<Embedded>> open(storage::StoreOptions store, EngineOptions engine,
                                                std::string* why = nullptr);
  // The same on Redis (storage.backend = "redis"); with options.ownership, the lease manager
  // starts once the engine runs and hands it its partitions.
  static Result<std::unique_ptr<Embedded>> open_redis(RedisModeOptions options,
                                                      EngineOptions engine,
                                                      std::string* why = nullptr);
  ~Embedded() { close(); }
  Embedded(const Embedded&) = delete;
  Embedded& operator=(const Embedded&) = delete;

  EngineImpl& engine() { return *engine_; }  // until stop()
  // Until close(). Every role of the store (core/store.h) through one interface, whatever the
  // backend: what is the backend's own stays behind it.
  Store& store() { return *store_; }
  cluster::LeaseManager* ownership() { return ownership_.get(); }  // cluster mode only
  storage::RedisInbox* inbox() { return inbox_.get(); }            // cluster mode only

  // Graceful stop of the engine (SIGTERM semantics: no new work, in-flight attempts finish or
  // stay leased, the last batch flushed; in cluster mode the partitions are handed over
  // first); the store stays open until close(). Idempotent.
  void stop();
  // stop(), then closes the store. Idempotent; the destructor calls it.
  void close();

 private:
  Embedded() = default;

  std::atomic<EngineImpl*> live_{nullptr};  // read by the store's sync thread
  std::unique_ptr<Store> store_;
  // On Redis: the partition epochs and fences the engine's ownership drives, and the partition
  // loads to cancel when the engine stops. Null on RocksDB.
  storage::RedisStore* redis_ = nullptr;
  std::unique_ptr<EngineImpl> engine_;
  std::atomic<cluster::LeaseManager*> ownership_view_{nullptr};  // the shards' valid() checks
  std::unique_ptr<cluster::LeaseManager> ownership_;
  // Cluster mode: intake for partitions this node does not own (core/inbox.h). Closed after
  // the engine stopped (its answers are posted to the shards' loops, which live until the
  // engine is destroyed) and before the engine is destroyed.
  std::unique_ptr<storage::RedisInbox> inbox_;
  Duration release_grace_ = seconds(10);
};

}  // namespace ringcast::engine
