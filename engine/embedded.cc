#include "engine/embedded.h"

#include <atomic>
#include <cstdio>
#include <utility>
#include <vector>

namespace ringcast::engine {

Result<std::unique_ptr<Embedded>> Embedded::open(storage::StoreOptions store, EngineOptions engine,
                                                 std::string* why) {
  std::unique_ptr<Embedded> e(new Embedded());
  auto user_hook = std::move(store.on_durable);
  // The hook runs on the store's sync thread, also before the engine exists and while it
  // stops: it only wakes what is live.
  store.on_durable = [self = e.get(), user_hook = std::move(user_hook)](uint64_t seq) {
    if (user_hook) user_hook(seq);
    if (EngineImpl* live = self->live_.load(std::memory_order_acquire)) live->wake_all();
  };
  auto opened = storage::RocksStore::open(std::move(store));
  if (!opened.ok()) return opened.error();
  e->store_ = std::move(*opened);
  auto started = EngineImpl::start(std::move(engine), *e->store_, why);
  if (!started.ok()) return started.error();
  e->engine_ = std::move(*started);
  e->live_.store(e->engine_.get(), std::memory_order_release);
  return e;
}

Result<std::unique_ptr<Embedded>> Embedded::open_redis(RedisModeOptions options,
                                                       EngineOptions engine, std::string* why) {
  std::unique_ptr<Embedded> e(new Embedded());
  e->release_grace_ = options.release_grace;
  if (options.ownership) {
    options.store.node_id = options.ownership->node_id;  // the store fences with the leases
    options.ownership->ns = options.store.ns;            // same hash tags: one slot per partition
    // Retention covers the partitions the lease manager holds, each fenced at its epoch
    // (docs/cluster.md "Retention"); none once it has stopped. Without ownership the store
    // covers every partition itself (alone on Redis).
    options.store.retention_owned = [self = e.get()] {
      std::vector<storage::OwnedEpoch> owned;
      if (cluster::LeaseManager* lm = self->ownership_view_.load(std::memory_order_acquire)) {
        for (const cluster::OwnedPartition& o : lm->owned())
          owned.push_back({o.partition, o.epoch});
      }
      return owned;
    };
    storage::RedisInboxOptions io;
    io.servers = options.store.servers;
    io.cluster = options.store.cluster;
    io.username = options.store.username;
    io.password = options.store.password;
    io.tls = options.store.tls;
    io.ns = options.store.ns;
    io.command_timeout = options.store.command_timeout;
    io.wait_replicas = options.store.wait_replicas;
    io.wait_timeout = options.store.wait_timeout;
    auto inbox = storage::RedisInbox::open(std::move(io));
    if (!inbox.ok()) return inbox.error();
    e->inbox_ = std::move(*inbox);
    engine.inbox = e->inbox_.get();
  }
  auto opened = storage::RedisStore::open(std::move(options.store));
  if (!opened.ok()) return opened.error();
  e->redis_ = opened->get();
  e->store_ = std::move(*opened);
  if (options.ownership) {
    Embedded* self = e.get();
    storage::RedisStore* redis = e->redis_;
    engine.ownership = PartitionOwnership{
        [self](Partition p, uint64_t epoch, MonoTime now) {
          cluster::LeaseManager* lm = self->ownership_view_.load(std::memory_order_acquire);
          return lm != nullptr && lm->valid(p, epoch, now);
        },
        [redis](Partition p, uint64_t epoch) { redis->set_partition_epoch(p, epoch); },
        [redis](Partition p, uint64_t epoch) { return redis->fenced(p, epoch); }};
  }
  auto started = EngineImpl::start(std::move(engine), *e->store_, why);
  if (!started.ok()) return started.error();
  e->engine_ = std::move(*started);
  e->live_.store(e->engine_.get(), std::memory_order_release);
  if (options.ownership) {
    EngineImpl* eng = e->engine_.get();
    cluster::LeaseCallbacks cb;
    cb.on_acquire = [eng](Partition p, uint64_t epoch) { eng->acquire_partition(p, epoch); };
    cb.on_release = [eng](Partition p, uint64_t epoch, std::function<void()> done) {
      eng->release_partition(p, epoch, std::move(done));
    };
    cb.on_lose = [eng](Partition p, uint64_t epoch, cluster::LoseReason) {
      eng->lose_partition(p, epoch);
    };
    auto lm = cluster::LeaseManager::start(std::move(*options.ownership), std::move(cb));
    if (!lm.ok()) return lm.error();
    e->ownership_ = std::move(*lm);
    e->ownership_view_.store(e->ownership_.get(), std::memory_order_release);
  }
  return e;
}

void Embedded::stop() {
  if (ownership_) {
    // Hand the partitions over first (each shard finishes its attempts of a partition and
    // writes them before its ownership goes), while the engine still runs.
    ownership_->stop(release_grace_);
    ownership_view_.store(nullptr, std::memory_order_release);
  }
  live_.store(nullptr, std::memory_order_release);
  if (engine_) {
    engine_->stop();
    if (redis_) redis_->cancel_recovers();  // no partition load answers a destroyed shard
    inbox_.reset();  // what it still owes the shards is posted to their (stopped) loops
    engine_.reset();
  }
  inbox_.reset();
  ownership_.reset();
}

void Embedded::close() {
  stop();
  store_.reset();
  redis_ = nullptr;
}

}  // namespace ringcast::engine
