// What the two seeded simulations share (STYLE 11; docs/durability.md "The seeded
// simulation"): the presets on a millisecond scale, the scheduler's options, a receiver's fault
// modes and what a receiver in each mode answers. Both draw from their seed's Rng in the same
// order, so a seed tells the same story wherever it runs.
#pragma once

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/policy.h"
#include "core/scheduler.h"
#include "core/transport.h"

namespace ringcast::sim {

// Debug + ASan runs ~40x slower: keep every seed, with fewer events each.
#if defined(__SANITIZE_ADDRESS__)
inline constexpr int kScaleDown = 3;
#else
inline constexpr int kScaleDown = 1;
#endif

// Millisecond-scale versions of the presets, so a run covers whole ladders in seconds.
inline PolicyRegistry policies() {
  PolicyRegistry reg;
  RetryPolicy sm = RetryPolicy::smengo();
  sm.name = "smengo-sim";
  sm.fast_pauses = {milliseconds(20),  milliseconds(50),   milliseconds(100), milliseconds(200),
                    milliseconds(500), milliseconds(1000), milliseconds(1000)};
  sm.absolute_ceiling = seconds(60);
  (void)reg.put(sm);
  RetryPolicy x = RetryPolicy::xhub();
  x.name = "xhub-sim";
  x.fast_pauses.clear();
  for (int i = 0; i < 9; ++i) x.fast_pauses.push_back(milliseconds(10 << i));  // 10 ms..2.56 s
  x.slow_pauses = {milliseconds(100), milliseconds(200), milliseconds(400), milliseconds(800),
                   milliseconds(1600)};
  x.slow_ceiling = seconds(5);
  x.absolute_ceiling = seconds(60);
  (void)reg.put(x);
  return reg;
}

inline SchedulerOptions scheduler_options() {
  SchedulerOptions o;
  o.fairness_cap = 5;
  o.default_max_in_flight = 4;
  o.max_sends_per_poll = 16;
  o.max_fire_per_poll = 64;
  o.breaker_recheck = milliseconds(300);
  o.subscription_postpone = seconds(2);
  o.breaker.window = seconds(5);
  o.breaker.first_pause = milliseconds(500);
  o.breaker.max_pause = seconds(3);
  o.breaker.hold_ceiling = seconds(5);  // short: some holds must expire (R4.7)
  o.breaker.probe_timeout = seconds(2);
  o.slab_chunk_size = 256;
  return o;
}

enum class Mode : uint8_t {
  kHealthy,
  k5xx,
  kRefused,
  kTimeout,
  kResetAfterActing,
  k4xx,
  k429,
  k502,
};

// A receiver in `mode` got a request: what the transport reports, whether the receiver acted on
// it (whatever the sender learns), and whether it hangs to the whole-request deadline.
struct Answer {
  TransportResult result;
  bool acted = false;
  bool hangs = false;
};
inline Answer answer_in(Mode mode, Rng& rng) {
  auto chance = [&rng](int percent) { return rng.below(100) < static_cast<uint64_t>(percent); };
  Answer a;
  TransportResult& r = a.result;
  r.connect_attempted = true;
  auto respond = [&](int status) {
    r.response_received = r.request_written = true;
    r.http_status = static_cast<uint16_t>(status);
    a.acted = status >= 200 && status < 300;
  };
  switch (mode) {
    case Mode::kHealthy:
      respond(chance(80) ? 200 : 204);
      break;
    case Mode::k5xx:
      respond(chance(70) ? 503 : 500);
      if (chance(30)) r.retry_after = "1";
      break;
    case Mode::k4xx:
      respond(chance(50) ? 400 : 422);
      break;
    case Mode::k429:
      respond(429);
      r.retry_after = chance(50) ? "1" : "0";
      break;
    case Mode::k502:
      respond(502);
      a.acted = chance(50);  // the upstream may have acted (R12.1)
      break;
    case Mode::kRefused:
      r.code = ErrorCode::network(ECONNREFUSED);
      break;
    case Mode::kTimeout:
      r.request_written = true;
      r.code = ErrorCode::of(ErrorCode::Kind::kTimeout);
      a.hangs = true;
      a.acted = chance(50);
      break;
    case Mode::kResetAfterActing:  // R12.9: the receiver recorded it, the response was lost
      r.request_written = true;
      r.code = ErrorCode::network(ECONNRESET);
      a.acted = true;
      break;
  }
  return a;
}

inline uint64_t env_u64(const char* name, uint64_t def) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return def;
  return std::strtoull(v, nullptr, 10);
}

// Runs World(seed).run() for each seed — RINGCAST_SIM_SEED=N: that one; else 1 ..
// RINGCAST_SIM_SEEDS (default `seeds`) — adding each run's figures to `sum`; stops at the
// first seed that fails (one seed's story is enough to debug) and names it. The seeds run.
template <class World, class Summary>
size_t run_seeds(uint64_t seeds, Summary& sum) {
  std::vector<uint64_t> list;
  if (const char* one = std::getenv("RINGCAST_SIM_SEED"); one != nullptr && *one != '\0') {
    list.push_back(std::strtoull(one, nullptr, 10));
  } else {
    const uint64_t n = env_u64("RINGCAST_SIM_SEEDS", seeds);
    for (uint64_t s = 1; s <= n; ++s) list.push_back(s);
  }
  for (uint64_t seed : list) {
    std::string rerun = "seed ";
    rerun += std::to_string(seed);
    rerun += " (rerun: RINGCAST_SIM_SEED=";
    rerun += std::to_string(seed);
    rerun += ")";
    SCOPED_TRACE(rerun);
    World world(seed);
    world.run();
    world.add_to(sum);
    if (::testing::Test::HasFailure()) {
      ADD_FAILURE() << "simulation failed for seed " << seed
                    << "; rerun with RINGCAST_SIM_SEED=" << seed;
      break;
    }
  }
  return list.size();
}

}  // namespace ringcast::sim
