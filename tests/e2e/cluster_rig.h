// The cluster-mode end-to-end rig (docs/cluster.md), shared by the cluster e2e tests: a Redis
// Cluster of three primaries and three replicas (WAIT 1), N `ringcast serve` nodes on it (node-a,
// node-b, ...; 1 s leases, 200 ms heartbeats) and a verifying ringcast-sink, all real processes on
// loopback; plus the views and waits the tests share. Invariant: every wait is bounded.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/types.h"
#include "tests/e2e/daemon.h"
#include "tests/support/redis_server.h"

namespace ringcast::e2e {

using SteadyClock = std::chrono::steady_clock;

inline constexpr const char* kSecret = "whsec_ZTJlLWNsdXN0ZXItc2VjcmV0LWtleS0wMDE=";
inline constexpr uint32_t kPartitionCount = 256;

inline double ms_since(SteadyClock::time_point t0) {
  return std::chrono::duration<double, std::milli>(SteadyClock::now() - t0).count();
}

// This node's view of the cluster (GET /v1/cluster); null Json when it does not answer.
inline Json cluster_view(const Daemon& d) {
  Reply r = d.call("GET", "/v1/cluster");
  if (r.status != 200) return Json();
  return r.json();
}

struct Rig {
  // `extra_env` ("RINGCAST_X=v") replaces the node setting of the same key, or is added.
  explicit Rig(int node_count, std::vector<std::string> extra_env = {})
      : extra_env_(std::move(extra_env)),
        redis_dir("e2e-cluster-redis"),
        dir("e2e-cluster"),
        // A small delay: attempts are on the wire when a node is killed, paused or stopped.
        sink(test::SinkProcess::start({"--verify", "standard", "--secret", kSecret, "--ids-file",
                                       dir.file("ids.txt"), "--fault", "delay=1ms-20ms", "--quiet"},
                                      dir.path())) {
    test::RedisClusterOptions co;
    co.primaries = 3;
    co.replicas_per_primary = 1;
    redis = test::RedisCluster::start(redis_dir.path(), co);
    for (int i = 0; i < node_count; ++i) add_node();
  }

  void add_node() {
    const int i = static_cast<int>(nodes.size());
    std::string servers;
    for (size_t k = 0; k < 3; ++k) {
      if (!servers.empty()) servers += ',';
      servers += redis->node(k).address();
    }
    DaemonOptions o;
    o.shards = 2;
    std::string id = "node-";
    id += static_cast<char>('a' + i);
    o.env = {"RINGCAST_STORAGE_BACKEND=redis",
             "RINGCAST_STORAGE_REDIS_SERVERS=" + servers,
             "RINGCAST_STORAGE_REDIS_CLUSTER=true",
             "RINGCAST_STORAGE_REDIS_WAIT_REPLICAS=1",
             "RINGCAST_STORAGE_REDIS_WAIT_TIMEOUT=500ms",
             "RINGCAST_CLUSTER_ENABLED=true",
             std::string("RINGCAST_CLUSTER_SECRET=") + Daemon::kClusterSecret,
             "RINGCAST_CLUSTER_NODE_ID=" + id,
             "RINGCAST_CLUSTER_LEASE_TTL=1s",
             "RINGCAST_CLUSTER_SAFETY_MARGIN=250ms",
             "RINGCAST_CLUSTER_HEARTBEAT_INTERVAL=200ms",
             "RINGCAST_CLUSTER_MEMBER_TTL=700ms"};
    for (const std::string& e : extra_env_) {
      const std::string key = e.substr(0, e.find('=') + 1);
      auto same = std::find_if(o.env.begin(), o.env.end(),
                               [&](const std::string& x) { return x.starts_with(key); });
      if (same != o.env.end()) {
        *same = e;
      } else {
        o.env.push_back(e);
      }
    }
    ids.push_back(id);
    nodes.push_back(std::make_unique<Daemon>(o));
    nodes.back()->start();
    up[static_cast<size_t>(i)] = true;
  }

  // Every node that is up agrees on the members, and together they hold every partition, each
  // node what rendezvous assigns it.
  bool converged() {
    std::vector<std::pair<std::string, Json>> live;
    for (size_t i = 0; i < nodes.size(); ++i) {
      if (up[i]) live.emplace_back(ids[i], cluster_view(*nodes[i]));
    }
    return cluster_views_converged(live);
  }

  // Partitions held by the nodes that are up (each counted once per holder).
  uint32_t owned_total() {
    uint32_t total = 0;
    for (size_t i = 0; i < nodes.size(); ++i) {
      if (!up[i]) continue;
      Json v = cluster_view(*nodes[i]);
      if (v.is_object()) total += static_cast<uint32_t>(v["owned_count"].i64());
    }
    return total;
  }

  // A call on the first node that is up and does not answer 503 (not the owner, or between
  // owners), from node `start` on, until `timeout`.
  Reply call_any(const std::string& method, const std::string& path, const std::string& body,
                 size_t start = 0, Millis timeout = 15s) {
    Reply last;
    const auto deadline = SteadyClock::now() + timeout;
    for (size_t k = start;; ++k) {
      const size_t i = k % nodes.size();
      if (up[i]) {
        last = nodes[i]->call(method, path, body);
        if (last.status != 503 && last.status != 0) return last;
      }
      if (SteadyClock::now() > deadline) return last;
      if (i + 1 == nodes.size()) std::this_thread::sleep_for(20ms);
    }
  }

  // A call on node `i`, sent again while it answers 503 (a partition its owner just took still
  // loads: the answer is 503 not_owner with Retry-After, and a client retries), until `timeout`.
  Reply call_served(size_t i, const std::string& method, const std::string& path,
                    const std::string& body = "", Millis timeout = 10s) {
    Reply last;
    const auto deadline = SteadyClock::now() + timeout;
    for (;;) {
      last = nodes[i]->call(method, path, body);
      if (last.status != 503 || SteadyClock::now() > deadline) return last;
      std::this_thread::sleep_for(50ms);
    }
  }

  // The index of the node that is up and holds `tenant`'s partition now; -1 when none does.
  int owner_of(const std::string& tenant) {
    const int64_t p = partition_of(tenant);
    for (size_t i = 0; i < nodes.size(); ++i) {
      if (!up[i]) continue;
      Json v = cluster_view(*nodes[i]);
      for (const Json& o : v["owned"].items())
        if (o["partition"].i64() == p) return static_cast<int>(i);
    }
    return -1;
  }

  const Daemon& any_up() const {
    for (size_t i = 0; i < nodes.size(); ++i)
      if (up[i]) return *nodes[i];
    throw std::runtime_error("no node is up");
  }

  std::vector<std::string> extra_env_;
  test::TempDir redis_dir;
  test::TempDir dir;
  test::SinkProcess sink;
  std::unique_ptr<test::RedisCluster> redis;
  std::vector<std::unique_ptr<Daemon>> nodes;
  std::vector<std::string> ids;
  std::array<std::atomic<bool>, 8> up{};  // the sender skips the others; set by the killer too
};

}  // namespace ringcast::e2e
