// Helpers for the cluster tests: a thread-safe recorder of lease callbacks (with steady-clock
// timestamps, to order events across managers), a node = id + recorder + LeaseManager, and
// bounded waits.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "cluster/lease.h"
#include "core/rendezvous.h"

namespace ringcast::cluster::testing {

using SteadyClock = std::chrono::steady_clock;

inline MonoTime mono_now() {
  return MonoTime::from_ns(
      std::chrono::duration_cast<std::chrono::nanoseconds>(SteadyClock::now().time_since_epoch())
          .count());
}

struct Event {
  enum class Kind { kAcquire, kRelease, kLose } kind = Kind::kAcquire;
  Partition p = 0;
  uint64_t epoch = 0;
  LoseReason reason = LoseReason::kLost;
  SteadyClock::time_point at;
};

class Recorder {
 public:
  // hold_releases: on_release keeps done() for the test to call (take_dones); otherwise it is
  // called at once.
  explicit Recorder(bool hold_releases = false) : hold_(hold_releases) {}
  // From now on (or no longer), on_release keeps done() for the test.
  void hold_releases(bool hold) { hold_.store(hold); }

  LeaseCallbacks callbacks() {
    LeaseCallbacks cb;
    cb.on_acquire = [this](Partition p, uint64_t e) { add(Event::Kind::kAcquire, p, e); };
    cb.on_release = [this](Partition p, uint64_t e, std::function<void()> done) {
      add(Event::Kind::kRelease, p, e);
      if (!hold_.load()) return done();
      std::lock_guard lock(mu_);
      dones_.push_back(std::move(done));
    };
    cb.on_lose = [this](Partition p, uint64_t e, LoseReason r) {
      add(Event::Kind::kLose, p, e, r);
    };
    return cb;
  }
  std::vector<Event> events() const {
    std::lock_guard lock(mu_);
    return events_;
  }
  std::vector<std::function<void()>> take_dones() {
    std::lock_guard lock(mu_);
    return std::move(dones_);
  }
  size_t held_dones() const {
    std::lock_guard lock(mu_);
    return dones_.size();
  }
  size_t count(Event::Kind k) const {
    std::lock_guard lock(mu_);
    size_t n = 0;
    for (const auto& e : events_) n += e.kind == k;
    return n;
  }

 private:
  void add(Event::Kind kind, Partition p, uint64_t epoch, LoseReason r = LoseReason::kLost) {
    Event e;
    e.kind = kind;
    e.p = p;
    e.epoch = epoch;
    e.reason = r;
    e.at = SteadyClock::now();
    std::lock_guard lock(mu_);
    events_.push_back(e);
  }
  std::atomic<bool> hold_;
  mutable std::mutex mu_;
  std::vector<Event> events_;
  std::vector<std::function<void()>> dones_;
};

struct Node {
  std::string id;
  std::unique_ptr<Recorder> rec;
  std::unique_ptr<LeaseManager> m;

  std::map<Partition, uint64_t> owned() const {
    std::map<Partition, uint64_t> out;
    if (m)
      for (const auto& o : m->owned()) out[o.partition] = o.epoch;
    return out;
  }
};

// Short timings for tests (docs/cluster.md "Timings": 1 s lease, 200 ms heartbeat).
inline LeaseOptions test_options(const std::string& id, const std::string& ns) {
  LeaseOptions o;
  o.node_id = id;
  o.ns = ns;
  o.lease_ttl = seconds(1);
  o.safety_margin = milliseconds(250);  // headroom for a loaded CI machine (< ttl / 3)
  o.heartbeat_interval = milliseconds(200);
  o.member_ttl = milliseconds(700);
  o.forget_after = seconds(30);
  o.command_timeout = milliseconds(300);
  return o;
}

inline std::unique_ptr<Node> start_node(LeaseOptions o, bool hold_releases = false) {
  auto n = std::make_unique<Node>();
  n->id = o.node_id;
  n->rec = std::make_unique<Recorder>(hold_releases);
  auto m = LeaseManager::start(std::move(o), n->rec->callbacks());
  EXPECT_TRUE(m.ok()) << (m.ok() ? "" : m.error().message);
  if (m.ok()) n->m = std::move(m).value();
  return n;
}

template <class Pred>
bool wait_until(Pred done, std::chrono::milliseconds limit) {
  const auto end = SteadyClock::now() + limit;
  while (!done() && SteadyClock::now() < end)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  return done();
}

// Every node sees exactly these nodes as members and owns exactly what rendezvous over all
// their ids gives it (so together: a disjoint cover of all partitions). The views count too:
// a node that has not seen the others yet can hold its fair share for a moment by chance
// (the others were refused what they wanted), and the cover is not settled then.
inline bool converged(const std::vector<const Node*>& nodes) {
  std::vector<std::string> ids;
  for (const auto* n : nodes) ids.push_back(n->id);
  std::vector<std::string> sorted = ids;
  std::sort(sorted.begin(), sorted.end());
  for (const auto* n : nodes) {
    if (!n->m || n->m->status().members != sorted) return false;
    const auto want = owned_by(n->id, ids);
    const auto have = n->owned();
    if (have.size() != want.size()) return false;
    for (Partition p : want)
      if (!have.count(p)) return false;
  }
  return true;
}

inline double ms_since(SteadyClock::time_point t) {
  return std::chrono::duration<double, std::milli>(SteadyClock::now() - t).count();
}

}  // namespace ringcast::cluster::testing
