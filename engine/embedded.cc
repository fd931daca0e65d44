#include "engine/embedded.h"

#include <utility>

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

void Embedded::stop() {
  live_.store(nullptr, std::memory_order_release);
  if (engine_) {
    engine_->stop();
    engine_.reset();
  }
}

void Embedded::close() {
  stop();
  store_.reset();
}

}  // namespace ringcast::engine
