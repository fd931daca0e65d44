// Helpers shared by the engine tests: a bounded wait for an engine callback or a condition, an
// unlabelled metric's value, and the config of an engine that delivers to a loopback receiver
// with a fast retry policy.
#pragma once

#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/result.h"
#include "engine/build.h"
#include "engine/config.h"
#include "engine/engine_impl.h"

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

// Polls `pred` every 10 ms until it holds or kEngineWait passed.
inline bool wait_until(const std::function<bool()>& pred) {
  const auto deadline = std::chrono::steady_clock::now() + kEngineWait;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

// The value of an unlabelled counter or gauge in the engine's Prometheus text; -1 if absent.
inline int64_t metric(engine::EngineImpl& e, const std::string& name) {
  const std::string text = e.metrics_text();
  const std::string key = "\n" + name + " ";
  const size_t at = text.find(key);
  return at == std::string::npos ? -1 : std::stoll(text.substr(at + key.size()));
}

// Cluster mode, once a partition was just acquired: creates the endpoint as soon as the
// partition has loaded (a create before that answers not_owner), within kEngineWait.
inline Result<Endpoint> create_endpoint_once_loaded(engine::EngineImpl& eng,
                                                    const std::string& tenant,
                                                    const EndpointSpec& spec) {
  Result<Endpoint> ep = make_error(Errc::kUnavailable, "not tried");
  wait_until([&] {
    ep = await<Endpoint>([&](auto done) { eng.create_endpoint(tenant, spec, done); });
    return ep.ok();
  });
  return ep;
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

// One shard on loopback_config(1, 5, 500ms) in cluster mode: `ownership` is the test playing the
// lease manager (which partitions this node holds, at which epoch).
inline engine::EngineOptions owned_engine_options(engine::PartitionOwnership ownership) {
  Config cfg = loopback_config(1, 5, std::chrono::milliseconds(500));
  cfg.validate();
  engine::EngineOptions eopts = engine::engine_options(cfg);
  eopts.ownership = std::move(ownership);
  return eopts;
}

}  // namespace ringcast::test
