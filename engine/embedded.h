// One process's store and engine, wired together: the store's durability hook wakes the
// engine's shards (intake acknowledgements wait for durability, SPEC R12.5), and stopping
// takes the engine down before the store closes. What `ringcast serve` and an embedding
// program both need; everything else (API server, notifier) is built around it.
#pragma once

#include <atomic>
#include <memory>

#include "core/result.h"
#include "engine/engine_impl.h"
#include "engine/options.h"
#include "storage/rocks_store.h"

namespace ringcast::engine {

class Embedded {
 public:
  // Opens the store (recovering it), then starts the engine on it. A caller's own
  // store.on_durable hook still runs, before the shards are woken.
  // `why`: as EngineImpl::start's.
  static Result<std::unique_ptr<Embedded>> open(storage::StoreOptions store, EngineOptions engine,
                                                std::string* why = nullptr);
  ~Embedded() { close(); }
  Embedded(const Embedded&) = delete;
  Embedded& operator=(const Embedded&) = delete;

  EngineImpl& engine() { return *engine_; }         // until stop()
  storage::RocksStore& store() { return *store_; }  // until close()

  // Graceful stop of the engine (SIGTERM semantics: no new work, in-flight attempts finish or
  // stay leased, the last batch flushed); the store stays open until close(). Idempotent.
  void stop();
  // stop(), then closes the store. Idempotent; the destructor calls it.
  void close();

 private:
  Embedded() = default;

  std::atomic<EngineImpl*> live_{nullptr};  // read by the store's sync thread
  std::unique_ptr<storage::RocksStore> store_;
  std::unique_ptr<EngineImpl> engine_;
};

}  // namespace ringcast::engine
