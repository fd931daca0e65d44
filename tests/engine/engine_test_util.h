// Helpers shared by the engine tests: a bounded wait for an engine callback, and the config of
// an engine that delivers to a loopback receiver with a fast retry policy.
#pragma once

#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "core/result.h"
#include "engine/config.h"

namespace ringcast::test {

inline constexpr auto kEngineWait = std::chrono::seconds(10);  // generous for ASan on 2 cores

// Engine callbacks run on a shard thread: wait for them on a future, bounded. The promise is
// shared, so a callback that comes after a timeout is still safe.
template <class T, class Call>
Result<T> await(Call call) {
  auto promise = std::make_shared<std::promise<Result<T>>>();
  auto future = promise->get_future();
  call([promise](Result<T> r) { promise->set_value(std::move(r)); });
  if (future.wait_for(kEngineWait) != std::future_status::ready)
    return make_error(Errc::kInternal, "no answer from the engine within the wait bound");
  return future.get();
}

// `shards` shards, plain HTTP to 127.0.0.0/8 allowed, and a policy "fast" that retries every
// `step` for `steps` attempts without jitter and off the tenant breaker (R4), so that a
// retried delivery fits in a test and one endpoint's failures cannot hold the others.
inline Config loopback_config(uint32_t shards, int steps, Duration step) {
  Config cfg;
  cfg.engine.shards = shards;
  cfg.transport.allow_http = true;
  cfg.transport.allow_private = {"127.0.0.0/8"};
  PolicyConfig fast;
  fast.name = "fast";
  fast.ladder = std::vector<Duration>(static_cast<size_t>(steps), step);
  fast.jitter = 0.0;
  fast.breaker = false;
  cfg.policies["fast"] = fast;
  return cfg;
}

}  // namespace ringcast::test
