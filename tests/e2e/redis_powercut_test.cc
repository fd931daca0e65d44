// End to end, cluster mode: power cuts of a Redis primary (docs/cluster.md "Power cuts of a Redis
// primary"). Every redis-server of a Redis Cluster keeps its data dir (AOF, nodes.conf) on a
// power-cut filesystem of its own — one machine each, so a cut drops what that server did not
// fsync and nothing of the others (tests/support/powercut, docs/powercut-fs.md; journaled like
// ext4, which Redis 7 needs: it never fsyncs the directory that holds appendonlydir). Two
// `ringcast serve` nodes (storage.backend = "redis", [cluster], the test timings) take events
// from a producer under load while a primary is SIGKILLed, its filesystem loses power, and it
// comes back on the same dir and port.
//  - appendfsync always, wait_replicas = 1 (3 primaries + 3 replicas): nothing acknowledged is
//    lost (SPEC R12.2, docs/cluster.md "Writes"), whether the primary restarts from its own AOF
//    (its replica is told not to fail over) or its replica is promoted and it returns as that
//    one's replica. The cuts alternate between the two.
//  - appendfsync everysec, wait_replicas = 0, no replica (3 primaries): a cut loses what the
//    primary applied since its last fsync. The kill is timed 800 ms into a wall-clock second
//    (Redis fsyncs when its clock's second changes), and the test measures how long before the
//    kill the oldest lost event was acknowledged: within Redis' bound of 2 s.
// RINGCAST_REDIS_POWERCUTS sets the number of cuts of each test (default 2);
// RINGCAST_REDIS_AOF_REWRITE_MB (default: Redis' own 64 MB) lowers auto-aof-rewrite-min-size, so
// that cuts fall around AOF rewrites too (a new INCR file, the manifest renamed).
// Invariant: every wait is bounded; the servers go before their filesystems.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "core/types.h"
#include "tests/e2e/cluster_rig.h"
#include "tests/e2e/daemon.h"
#include "tests/e2e/powercut_mount.h"
#include "tests/support/redis_server.h"
#include "tests/support/require.h"

namespace ringcast::e2e {
namespace {

using test::CutReport;
using test::PowerCutFs;
using test::RedisServer;
using test::RedisServerOptions;
using test::SinkProcess;
using test::SyncReply;
using test::TempDir;

constexpr size_t kRingcastNodes = 2;
constexpr size_t kTenantsPerPrimary = 4;
constexpr size_t kBulkLines = 20;
constexpr long long kSlots = 16384;
// Redis' own bound for appendfsync everysec: about a second of writes, two when a background
// fsync is slow (writes are postponed for up to 2 s, then go out without waiting for it).
constexpr double kEverysecBoundMs = 2000;
// The kill's place in a wall-clock second (everysec: near the largest regular unsynced span).
constexpr int kKillAtMsIntoSecond = 800;

// Read once and taken out of the environment: the daemons warn about unknown RINGCAST_ variables.
const int kPowerCuts = [] {
  const char* v = std::getenv("RINGCAST_REDIS_POWERCUTS");
  const int n = v != nullptr ? std::atoi(v) : 2;
  ::unsetenv("RINGCAST_REDIS_POWERCUTS");
  return std::max(1, n);
}();

const int kRewriteMb = [] {
  const char* v = std::getenv("RINGCAST_REDIS_AOF_REWRITE_MB");
  const int n = v != nullptr ? std::atoi(v) : 0;
  ::unsetenv("RINGCAST_REDIS_AOF_REWRITE_MB");
  return std::max(0, n);
}();

// Concatenation piece by piece (`"literal" + std::string` trips GCC 12's false -Wrestrict at -O3).
std::string piece(const std::string& s) {
  return s;
}
std::string piece(const char* s) {
  return s;
}
template <typename T>
std::string piece(T v) {
  return std::to_string(v);
}
template <typename... Parts>
std::string cat(const Parts&... parts) {
  std::string out;
  ((out += piece(parts)), ...);
  return out;
}

std::string event_id_of(int n) {
  return cat("pc-", n);
}

using Ranges = test::SlotRanges;
using test::slot_ranges;

double ms_between(SteadyClock::time_point from, SteadyClock::time_point to) {
  return std::chrono::duration<double, std::milli>(to - from).count();
}

// Sleeps until the wall clock is `ms` into a second (Redis' everysec follows the wall clock's
// seconds: it fsyncs when its cached unixtime changes).
void sleep_until_ms_into_second(int ms) {
  const int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
  const int64_t wait = (ms - now_ms % 1000 + 1000) % 1000;
  std::this_thread::sleep_for(Millis(wait));
}

// Submits events in NDJSON bulk requests of kBulkLines from its own thread, to the nodes in
// turn, until stopped; records when each line was acknowledged (202, or a 200 duplicate). Lines
// answered 503 or not answered are sent again (same id and payload, SPEC R12.5) before new ones.
class Producer {
 public:
  struct Ack {
    int n = 0;
    SteadyClock::time_point at;    // the answer came
    SteadyClock::time_point sent;  // the request that got it went out (the write is later)
    int status = 0;                // 202, or 200 (a duplicate of an event already stored)
    bool queued = false;           // a node that did not own the partition queued it
    size_t node = 0;               // the node the request went to
  };
  Producer(std::vector<const Daemon*> nodes, std::vector<std::string> tenants)
      : nodes_(std::move(nodes)), tenants_(std::move(tenants)) {}
  ~Producer() { stop(); }
  void start() {
    thread_ = std::thread([this] { run(); });
  }
  void stop() {
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
  }
  const std::string& tenant_of(int n) const {
    return tenants_[static_cast<size_t>(n) % tenants_.size()];
  }
  std::vector<Ack> acks() const {
    std::lock_guard<std::mutex> lock(mu_);
    return acks_;
  }
  // Lines acknowledged after `t`.
  size_t acks_since(SteadyClock::time_point t) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = std::upper_bound(acks_.begin(), acks_.end(), t,
                               [](SteadyClock::time_point x, const Ack& a) { return x < a.at; });
    return static_cast<size_t>(acks_.end() - it);
  }
  // The first acknowledgement after `t` (t itself when none came).
  SteadyClock::time_point first_ack_after(SteadyClock::time_point t) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = std::upper_bound(acks_.begin(), acks_.end(), t,
                               [](SteadyClock::time_point x, const Ack& a) { return x < a.at; });
    return it == acks_.end() ? t : it->at;
  }
  // The last acknowledgement before `t` (t itself when none came).
  SteadyClock::time_point last_ack_before(SteadyClock::time_point t) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = std::lower_bound(acks_.begin(), acks_.end(), t,
                               [](const Ack& a, SteadyClock::time_point x) { return a.at < x; });
    return it == acks_.begin() ? t : std::prev(it)->at;
  }
  std::string refusals() const {
    std::lock_guard<std::mutex> lock(mu_);
    std::string out;
    for (const auto& [why, n] : refusals_) out += cat(out.empty() ? "" : ", ", why, " x", n);
    return out.empty() ? std::string("none") : out;
  }

 private:
  std::string line(int n) const {
    return cat("{\"tenant\":", quote(tenant_of(n)), ",\"id\":", quote(event_id_of(n)),
               ",\"type\":\"order.paid\",\"payload\":{\"n\":", n, "}}\n");
  }

  void run() {
    int next = 0;
    size_t turn = 0;
    std::deque<int> again;
    while (!stop_.load()) {
      std::vector<int> batch;
      while (batch.size() < kBulkLines && !again.empty()) {
        batch.push_back(again.front());
        again.pop_front();
      }
      while (batch.size() < kBulkLines) batch.push_back(next++);
      std::string body;
      for (int n : batch) body += line(n);
      const size_t node = turn++ % nodes_.size();
      const Daemon& d = *nodes_[node];
      const auto sent = SteadyClock::now();
      const Reply r = d.call("POST", "/v1/events/bulk", body);
      const auto now = SteadyClock::now();
      std::vector<int64_t> status(batch.size(), 0);
      std::vector<std::string> code(batch.size());
      std::vector<bool> queued(batch.size(), false);
      if (r.status == 200) {
        const Json j = r.json();  // named: a temporary's items() would dangle in the loop
        for (const Json& l : j["results"].items()) {
          const size_t k = static_cast<size_t>(l["line"].i64()) - 1;
          if (k >= batch.size()) continue;
          status[k] = l["status"].i64();
          queued[k] = l["queued"].boolean();
          code[k] = l["error"]["code"].str();
        }
      }
      bool refused = false;
      {
        std::lock_guard<std::mutex> lock(mu_);
        for (size_t k = 0; k < batch.size(); ++k) {
          if (status[k] == 202 || status[k] == 200) {
            acks_.push_back({batch[k], now, sent, static_cast<int>(status[k]), queued[k], node});
            continue;
          }
          refused = true;
          if (r.status != 200) {
            if (k == 0) ++refusals_[cat("http ", r.status)];
            again.push_back(batch[k]);
          } else if (status[k] == 503 || status[k] == 0) {
            ++refusals_[cat("503 ", code[k])];
            again.push_back(batch[k]);
          } else {
            ++refusals_[cat(status[k], " ", code[k], " (not sent again)")];
          }
        }
      }
      if (refused) std::this_thread::sleep_for(50ms);
    }
  }

  const std::vector<const Daemon*> nodes_;
  const std::vector<std::string> tenants_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  mutable std::mutex mu_;
  std::vector<Ack> acks_;  // in time order (one thread appends)
  std::map<std::string, int> refusals_;
};

// One redis-server on a power-cut filesystem of its own: one machine.
struct Machine {
  std::unique_ptr<PowerCutFs> fs;
  std::unique_ptr<RedisServer> redis;
  std::string log_path;  // outside the filesystem: a cut would drop the log's unsynced lines
};

// One power cut as it happened.
struct Cut {
  size_t victim = 0;
  std::string address;
  bool failover = false;  // the replica was promoted (else: restarted from its own AOF)
  SteadyClock::time_point killed, back;
  CutReport report;
};

// What became of the acknowledged events.
struct Outcome {
  size_t acknowledged = 0, stored = 0, delivered = 0;
  std::map<int, Producer::Ack> lost;     // acknowledged, unknown to the store (404)
  std::vector<std::string> undelivered;  // webhook ids of stored events with no 200
};

class E2eRedisPowerCut : public ::testing::Test {
 protected:
  void SetUp() override {
    RINGCAST_E2E_SINGLE_NODE_ONLY("starts a Redis Cluster of its own on power-cut filesystems");
    if (!RedisServer::available()) RINGCAST_SKIP_MISSING() << "redis-server is not installed";
    // A Redis Cluster and two nodes under sanitizers is too slow for CI's budget; the Release
    // run covers it (like ringcast_e2e_cluster, CONTRIBUTING.md).
    if (kSanitized) GTEST_SKIP() << "Release builds only";
  }

  void TearDown() override {
    if (producer_) producer_->stop();
    nodes_.clear();  // the ringcast nodes go before the Redis servers
    sink_.reset();
    for (Machine& m : machines_) m.redis.reset();  // each server before its filesystem
    for (Machine& m : machines_) {
      if (m.fs) m.fs->unmount();
    }
    machines_.clear();
  }

  // --- Redis -----------------------------------------------------------------------------------

  // One command; a connection failure comes back as an error reply.
  SyncReply ask(size_t i, const std::vector<std::string>& args, Millis timeout = 1s) const {
    try {
      return machines_[i].redis->cmd(args, timeout);
    } catch (const std::exception& e) {
      SyncReply r;
      r.type = SyncReply::Type::kError;
      r.str = e.what();
      return r;
    }
  }
  std::string info(size_t i, const char* section) const {
    const SyncReply r = ask(i, {"INFO", section});
    return r.is_error() ? std::string() : r.str;
  }
  bool up(size_t i) { return machines_[i].redis->running(); }
  int machine_of_port(long long port) const {
    for (size_t i = 0; i < machines_.size(); ++i) {
      if (machines_[i].redis && machines_[i].redis->port() == port) return static_cast<int>(i);
    }
    return -1;
  }
  // AOF rewrites the servers finished, from their logs (every start included).
  size_t aof_rewrites() const {
    size_t n = 0;
    for (const Machine& m : machines_) {
      const std::string log = test::read_file(m.log_path);
      for (size_t at = log.find("Background AOF rewrite finished successfully");
           at != std::string::npos;
           at = log.find("Background AOF rewrite finished successfully", at + 1))
        ++n;
    }
    return n;
  }

  std::string logs() const {
    std::string out;
    for (size_t i = 0; i < machines_.size(); ++i) {
      std::string text = test::read_file(machines_[i].log_path);
      if (text.size() > 3000) text = cat("...\n", text.substr(text.size() - 3000));
      const std::string address = machines_[i].redis ? machines_[i].redis->address() : "-";
      out += cat("--- redis ", i, " (", address, ")\n", text);
    }
    return out;
  }

  // Mounts a filesystem per server and starts `primaries` primaries with `replicas` replicas
  // each, AOF on with `appendfsync`, formed into one cluster by hand as RedisCluster does
  // (tests/support/redis_server.h: slots split evenly in order, primary i at machine i, replica
  // of primary i at machine primaries + i). Skips (fails under CI=true) without FUSE.
  void start_redis(int primaries, int replicas, const std::string& appendfsync) {
    const size_t total = static_cast<size_t>(primaries * (1 + replicas));
    for (size_t i = 0; i < total; ++i) {
      const std::string dir = cat(mnt_.path(), "/m", i);
      ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0) << dir;
      PowerCutFs::Options fo;
      fo.journaled_namespace = true;  // ext4 / xfs as they behave in practice
      Machine m;
      mount_powercut_or_skip(dir, fo, m.fs);
      if (m.fs == nullptr) return;
      m.log_path = logs_.file(cat("redis-", i, ".log"));
      RedisServerOptions o;
      o.cluster = true;
      o.appendonly = true;
      // Later lines win over the fixture's (appendfsync always, logfile in the dir).
      o.extra_config = {cat("appendfsync ", appendfsync), cat("logfile ", m.log_path),
                        "repl-diskless-sync yes", "repl-diskless-sync-delay 0"};
      if (kRewriteMb > 0) {
        o.extra_config.push_back(cat("auto-aof-rewrite-min-size ", kRewriteMb, "mb"));
        o.extra_config.push_back("auto-aof-rewrite-percentage 10");
      }
      try {
        m.redis = RedisServer::start(m.fs->mount_point(), o);
      } catch (const std::exception& e) {
        machines_.push_back(std::move(m));
        FAIL() << e.what() << "\n" << logs();
      }
      machines_.push_back(std::move(m));
    }
    std::vector<std::string> ids;
    for (int i = 0; i < primaries; ++i) {
      const size_t k = static_cast<size_t>(i);
      const SyncReply a =
          ask(k, {"CLUSTER", "ADDSLOTSRANGE", std::to_string(kSlots * i / primaries),
                  std::to_string(kSlots * (i + 1) / primaries - 1)});
      ASSERT_FALSE(a.is_error()) << "ADDSLOTSRANGE: " << a.str;
      const SyncReply e = ask(k, {"CLUSTER", "SET-CONFIG-EPOCH", std::to_string(i + 1)});
      ASSERT_FALSE(e.is_error()) << "SET-CONFIG-EPOCH: " << e.str;
      ids.push_back(ask(k, {"CLUSTER", "MYID"}).str);
    }
    for (size_t i = 1; i < total; ++i) {
      const SyncReply r =
          ask(i, {"CLUSTER", "MEET", "127.0.0.1", std::to_string(machines_[0].redis->port())});
      ASSERT_FALSE(r.is_error()) << "MEET: " << r.str;
    }
    // REPLICATE needs the replica to know its primary (gossip): asked again until it does.
    for (int i = 0; i < primaries; ++i) {
      for (int r = 0; r < replicas; ++r) {
        const size_t k = static_cast<size_t>(primaries + i * replicas + r);
        SyncReply last;
        ASSERT_TRUE(wait_until(
            [&] {
              last = ask(k, {"CLUSTER", "REPLICATE", ids[static_cast<size_t>(i)]});
              return !last.is_error();
            },
            20s, 20ms))
            << "REPLICATE: " << last.str;
      }
    }
    ASSERT_TRUE(wait_consistent(30s)) << "the cluster did not form\n" << logs();
    // What the machines hold now is set up, not under test (docs/powercut-fs.md: a data dir the
    // test created).
    for (Machine& m : machines_) m.fs->make_durable();
  }

  // Every server runs and says cluster_state:ok, knows every other, all agree on a slot map that
  // covers every slot, and every replica's link to its primary is up.
  bool consistent_now() {
    Ranges first;
    const std::string known = cat("cluster_known_nodes:", machines_.size(), "\r");
    for (size_t i = 0; i < machines_.size(); ++i) {
      if (!up(i)) return false;
      const SyncReply ci = ask(i, {"CLUSTER", "INFO"});
      if (ci.str.find("cluster_state:ok") == std::string::npos ||
          ci.str.find(known) == std::string::npos)
        return false;
      const Ranges ranges = slot_ranges(ask(i, {"CLUSTER", "SLOTS"}));
      long long covered = 0;
      for (const auto& [lo, hi, port] : ranges) covered += hi - lo + 1;
      if (covered != kSlots) return false;
      if (i == 0) {
        first = ranges;
      } else if (ranges != first) {
        return false;
      }
      const std::string repl = info(i, "replication");
      if (repl.find("role:slave") != std::string::npos &&
          repl.find("master_link_status:up") == std::string::npos)
        return false;
    }
    return true;
  }
  bool wait_consistent(Millis timeout) {
    return wait_until([&] { return consistent_now(); }, timeout, 50ms);
  }

  // The servers other than `dead` agree on a map covering every slot in which `dead` serves
  // nothing: a replica took its slots over.
  bool wait_failover(size_t dead, Millis timeout) {
    const long long dead_port = machines_[dead].redis->port();
    return wait_until(
        [&] {
          Ranges first;
          bool have = false;
          for (size_t i = 0; i < machines_.size(); ++i) {
            if (i == dead) continue;
            if (ask(i, {"CLUSTER", "INFO"}).str.find("cluster_state:ok") == std::string::npos)
              return false;
            const Ranges ranges = slot_ranges(ask(i, {"CLUSTER", "SLOTS"}));
            long long covered = 0;
            for (const auto& [lo, hi, port] : ranges) {
              covered += hi - lo + 1;
              if (port == dead_port) return false;
            }
            if (covered != kSlots || (have && ranges != first)) return false;
            first = ranges;
            have = true;
          }
          return have;
        },
        timeout, 50ms);
  }

  // The machine that serves `slot` as the first server that answers sees it; -1 when none.
  int primary_of(long long slot) {
    for (size_t i = 0; i < machines_.size(); ++i) {
      if (!up(i)) continue;
      const SyncReply r = ask(i, {"CLUSTER", "SLOTS"});
      if (r.is_error()) continue;
      for (const auto& [lo, hi, port] : slot_ranges(r)) {
        if (slot >= lo && slot <= hi) return machine_of_port(port);
      }
      return -1;
    }
    return -1;
  }

  // The machines that replicate `primary` now.
  std::vector<size_t> replicas_of(size_t primary) {
    const std::string port = cat("master_port:", machines_[primary].redis->port(), "\r");
    std::vector<size_t> out;
    for (size_t i = 0; i < machines_.size(); ++i) {
      if (i == primary || !up(i)) continue;
      const std::string repl = info(i, "replication");
      if (repl.find("role:slave") != std::string::npos && repl.find(port) != std::string::npos)
        out.push_back(i);
    }
    return out;
  }

  // The slot of partition p's keys (hash tag "{rc:p}", docs/cluster.md "Keys").
  long long slot_of_partition(Partition p) const {
    return ask(0, {"CLUSTER", "KEYSLOT", cat("{rc:", static_cast<uint64_t>(p), "}")}).integer;
  }

  // --- ringcast ------------------------------------------------------------------------------

  // The sink, the ringcast nodes on the primaries (WAIT `wait_replicas`), converged; then the
  // tenants: kTenantsPerPrimary whose partitions live on each primary (tenants_of_[machine]),
  // one endpoint each at the verifying sink.
  void start_ringcast(int primaries, int wait_replicas) {
    sink_ = std::make_unique<SinkProcess>(SinkProcess::start(
        {"--quiet", "--verify", "standard", "--secret", kSecret}, sink_dir_.path()));
    std::string servers;
    for (int i = 0; i < primaries; ++i)
      servers += cat(i ? "," : "", machines_[static_cast<size_t>(i)].redis->address());
    for (size_t i = 0; i < kRingcastNodes; ++i) {
      std::string id = "node-";
      id += static_cast<char>('a' + i);
      DaemonOptions o;
      o.shards = 2;
      o.env = {"RINGCAST_STORAGE_BACKEND=redis",
               cat("RINGCAST_STORAGE_REDIS_SERVERS=", servers),
               "RINGCAST_STORAGE_REDIS_CLUSTER=true",
               cat("RINGCAST_STORAGE_REDIS_WAIT_REPLICAS=", wait_replicas),
               "RINGCAST_STORAGE_REDIS_WAIT_TIMEOUT=500ms",
               "RINGCAST_CLUSTER_ENABLED=true",
               cat("RINGCAST_CLUSTER_SECRET=", Daemon::kClusterSecret),
               cat("RINGCAST_CLUSTER_NODE_ID=", id),
               "RINGCAST_CLUSTER_LEASE_TTL=1s",
               "RINGCAST_CLUSTER_SAFETY_MARGIN=250ms",
               "RINGCAST_CLUSTER_HEARTBEAT_INTERVAL=200ms",
               "RINGCAST_CLUSTER_MEMBER_TTL=700ms"};
      node_ids_.push_back(id);
      nodes_.push_back(std::make_unique<Daemon>(o));
      ASSERT_NO_THROW(nodes_.back()->start()) << logs();
    }
    ASSERT_TRUE(wait_until([&] { return converged(); }, scaled(20s), 50ms))
        << "the ringcast nodes did not take all partitions\n"
        << nodes_[0]->output();

    tenants_of_.assign(static_cast<size_t>(primaries), {});
    for (int k = 0; k < 10000 && tenants_.size() < kTenantsPerPrimary * tenants_of_.size(); ++k) {
      std::string t = cat("pc", k);
      const long long slot = slot_of_partition(partition_of(t));
      const int machine = primary_of(slot);  // machine i is primary i before any cut
      ASSERT_TRUE(machine >= 0 && machine < primaries) << "slot " << slot;
      if (tenants_of_[static_cast<size_t>(machine)].size() >= kTenantsPerPrimary) continue;
      const Reply r = read_any("POST", cat("/v1/tenants/", t, "/endpoints"),
                               cat("{\"url\":", quote(sink_->base_url() + "/hooks"),
                                   ",\"policy\":\"steady\",\"signature\":\"standard\",\"secret\":",
                                   quote(kSecret), "}"));
      ASSERT_EQ(r.status, 201) << r.describe();
      tenants_of_[static_cast<size_t>(machine)].push_back(t);
      tenant_slot_[t] = slot;
      tenants_.push_back(t);
    }
    ASSERT_EQ(tenants_.size(), kTenantsPerPrimary * tenants_of_.size());
    std::vector<const Daemon*> nodes;
    for (const auto& d : nodes_) nodes.push_back(d.get());
    producer_ = std::make_unique<Producer>(nodes, tenants_);
  }

  // Every node answers GET /v1/cluster synced, holds what rendezvous assigns it, releases
  // nothing, and together they hold all 256 partitions (as tests/e2e/cluster_rig.h's Rig).
  bool converged() const {
    std::vector<std::pair<std::string, Json>> live;
    for (size_t i = 0; i < nodes_.size(); ++i)
      live.emplace_back(node_ids_[i], cluster_view(*nodes_[i]));
    return cluster_views_converged(live);
  }

  // A call on the nodes in turn until one answers something else than a 503 (not the owner,
  // between owners, store unavailable) or nothing; the last answer after 15 s.
  Reply read_any(const std::string& method, const std::string& path,
                 const std::string& body = "") const {
    Reply last;
    const auto deadline = SteadyClock::now() + scaled(15s);
    for (size_t k = 0;; ++k) {
      last = nodes_[k % nodes_.size()]->call(method, path, body);
      if ((last.status != 503 && last.status != 0) || SteadyClock::now() > deadline) return last;
      if (k % nodes_.size() == nodes_.size() - 1) std::this_thread::sleep_for(50ms);
    }
  }

  // --- the cut -------------------------------------------------------------------------------

  // Waits until the producer has had `acks` more acknowledgements and at least `at_least` has
  // passed: the cluster is under load.
  void wait_under_load(size_t acks, Millis at_least) {
    const auto t0 = SteadyClock::now();
    ASSERT_TRUE(wait_until(
        [&] { return producer_->acks_since(t0) >= acks && SteadyClock::now() - t0 >= at_least; },
        scaled(30s), 20ms))
        << "intake is not flowing: " << producer_->acks_since(t0)
        << " acknowledged in 30 s; refusals: " << producer_->refusals() << "\n"
        << nodes_[0]->output() << logs();
  }

  // SIGKILL of `victim`, its power cut, then (failover: once its replica took over) its restart
  // on the same dir and port, from the main thread (tests/support/process.h).
  Cut power_cut(size_t victim, bool failover) {
    Cut c;
    c.victim = victim;
    c.address = machines_[victim].redis->address();
    c.failover = failover;
    c.killed = SteadyClock::now();
    machines_[victim].redis->kill();
    c.report = machines_[victim].fs->cut_power();
    EXPECT_TRUE(c.report.ok()) << c.report.error;
    // A fork child of the server (a sync, a rewrite) can outlive it and hold the old mount: the
    // cut still happened, the child gets ENOTCONN (docs/powercut-fs.md).
    if (c.report.lazy_unmount)
      std::printf("[ redis-cut ] %s: its filesystem was still in use; detached\n",
                  c.address.c_str());
    if (failover) {
      EXPECT_TRUE(wait_failover(victim, scaled(20s)))
          << "no replica took over from " << c.address << "\n"
          << logs();
    }
    try {
      machines_[victim].redis->restart(scaled(20s));
    } catch (const std::exception& e) {
      ADD_FAILURE() << e.what() << "\n" << logs();
    }
    c.back = SteadyClock::now();
    return c;
  }

  // After a cut: the cluster is whole again, intake flows, the nodes hold every partition.
  // Returns when intake resumed (the first acknowledgement after the restart).
  SteadyClock::time_point wait_recovered(const Cut& c) {
    EXPECT_TRUE(wait_consistent(scaled(30s))) << "the cluster did not recover\n" << logs();
    EXPECT_TRUE(wait_until([&] { return producer_->acks_since(c.back) >= 50; }, scaled(30s), 20ms))
        << "intake did not resume after the cut of " << c.address
        << "; refusals: " << producer_->refusals() << "\n"
        << nodes_[0]->output() << logs();
    EXPECT_TRUE(wait_until([&] { return converged(); }, scaled(20s), 50ms))
        << "the ringcast nodes did not take all partitions back\n"
        << nodes_[0]->output();
    for (size_t i = 0; i < nodes_.size(); ++i)
      EXPECT_TRUE(nodes_[i]->running()) << node_ids_[i] << " exited\n" << nodes_[i]->output();
    return producer_->first_ack_after(c.back);
  }

  // --- the outcome ---------------------------------------------------------------------------

  // Every listed delivery of the tenants (one endpoint each: one delivery per event) as event
  // id → its webhook id; an event whose record is gone is not named. False when a page could
  // not be read.
  bool list_events(std::map<std::string, std::string>* out) const {
    for (const std::string& t : tenants_) {
      std::string cursor;
      for (int page = 0; page < 1000; ++page) {
        std::string path = cat("/v1/tenants/", t, "/deliveries?limit=1000");
        if (!cursor.empty()) path += cat("&cursor=", cursor);
        const Reply r = read_any("GET", path);
        if (r.status != 200) {
          ADD_FAILURE() << "GET " << path << ": " << r.describe();
          return false;
        }
        const Json list = r.json();  // named: a temporary's items() would dangle in the loop
        for (const Json& del : list["deliveries"].items()) {
          if (!del["event_id"].str().empty())
            (*out)[del["event_id"].str()] = del["message_id"].str();
        }
        if (list["next_cursor"].is_null() || list["next_cursor"].str().empty()) break;
        cursor = list["next_cursor"].str();
      }
    }
    return true;
  }

  // Stops the producer, then: which acknowledged events the store still knows (an event a node
  // queued is taken in by its owner within a poll: the listing is read until it stops changing),
  // which it does not (GET answers 404: lost), and whether each known one reaches the sink with
  // a 200 under its webhook id within `delivery_wait`.
  Outcome settle(Millis delivery_wait) {
    producer_->stop();
    Outcome o;
    std::map<int, Producer::Ack> acked;  // the first answer of each event
    for (const Producer::Ack& a : producer_->acks()) acked.emplace(a.n, a);
    o.acknowledged = acked.size();
    std::map<std::string, std::string> listed;
    std::vector<int> unknown;
    size_t previous = SIZE_MAX;
    const auto deadline = SteadyClock::now() + scaled(15s);
    for (;;) {
      listed.clear();
      if (!list_events(&listed)) return o;
      unknown.clear();
      for (const auto& [n, at] : acked)
        if (!listed.count(event_id_of(n))) unknown.push_back(n);
      if (unknown.empty() || unknown.size() == previous || SteadyClock::now() > deadline) break;
      previous = unknown.size();
      std::this_thread::sleep_for(500ms);
    }
    std::vector<std::string> want;
    for (const auto& [n, at] : acked) {
      auto it = listed.find(event_id_of(n));
      if (it != listed.end()) want.push_back(it->second);
    }
    for (int n : unknown) {
      const std::string path =
          cat("/v1/tenants/", producer_->tenant_of(n), "/events/", event_id_of(n));
      const Reply r = read_any("GET", path);
      if (r.status == 404) {
        o.lost[n] = acked[n];
      } else if (r.status == 200) {
        const Json j = r.json();
        want.push_back(j.has("event") ? j["event"]["message_id"].str() : j["message_id"].str());
      } else {
        ADD_FAILURE() << "GET " << path << ": " << r.describe();
      }
    }
    o.stored = want.size();
    wait_until(
        [&] {
          o.undelivered = missing_ids(*sink_, want);
          return o.undelivered.empty();
        },
        delivery_wait, 250ms);
    o.delivered = want.size() - o.undelivered.size();
    return o;
  }

  TempDir mnt_{"e2e-redis-cut"};
  TempDir logs_{"e2e-redis-cut-logs"};
  TempDir sink_dir_{"e2e-redis-cut-sink"};
  std::vector<Machine> machines_;
  std::unique_ptr<SinkProcess> sink_;
  std::vector<std::unique_ptr<Daemon>> nodes_;
  std::vector<std::string> node_ids_;
  std::vector<std::string> tenants_;
  std::vector<std::vector<std::string>> tenants_of_;  // by the machine of their partition's slot
  std::map<std::string, long long> tenant_slot_;      // the slot of each tenant's partition
  std::unique_ptr<Producer> producer_;
};

// appendfsync always and WAIT 1: a primary's power cut loses nothing acknowledged (SPEC R12.2).
// Even cuts: the primary comes back from its own AOF (its replica may not fail over meanwhile:
// cluster-replica-no-failover), so what ringcast was told is applied must be in the AOF (Redis
// answers only after the fsync). Odd cuts: the replica is promoted (cluster-node-timeout 1 s)
// and the old primary returns as its replica; what WAIT 1 confirmed is on the replica. Either
// way intake answers 503 until WAIT 1 can be met again, and every event answered 202 or 200 is
// in the store and delivered with a 200 under its webhook id.
TEST_F(E2eRedisPowerCut, AppendfsyncAlwaysWithWaitOneLosesNothingAcknowledged) {
  constexpr int kPrimaries = 3;
  ASSERT_NO_FATAL_FAILURE(start_redis(kPrimaries, 1, "always"));
  if (IsSkipped()) return;
  ASSERT_NO_FATAL_FAILURE(start_ringcast(kPrimaries, 1));
  producer_->start();

  std::vector<Cut> cuts;
  for (int k = 0; k < kPowerCuts; ++k) {
    ASSERT_NO_FATAL_FAILURE(wait_under_load(200, 1s));
    const std::string& tenant = tenants_of_[static_cast<size_t>(k % kPrimaries)].front();
    const int victim = primary_of(tenant_slot_.at(tenant));
    ASSERT_GE(victim, 0) << "no primary serves the slot of tenant " << tenant;
    const size_t v = static_cast<size_t>(victim);
    const std::vector<size_t> replicas = replicas_of(v);
    ASSERT_EQ(replicas.size(), 1u) << "primary " << machines_[v].redis->address();
    const bool failover = k % 2 == 1;
    if (!failover) {
      const SyncReply r = ask(replicas[0], {"CONFIG", "SET", "cluster-replica-no-failover", "yes"});
      ASSERT_FALSE(r.is_error()) << r.str;
    }
    cuts.push_back(power_cut(v, failover));
    const Cut& c = cuts.back();
    std::string role = "?";
    long long keys = -1;
    if (!failover) {
      // Back from its AOF as the primary it was, with its data.
      wait_until([&] { return info(v, "persistence").find("loading:0") != std::string::npos; },
                 scaled(20s), 20ms);
      const SyncReply r = ask(v, {"ROLE"});
      if (!r.elements.empty()) role = r.elements[0].str;
      keys = ask(v, {"DBSIZE"}).integer;
      EXPECT_EQ(role, "master") << logs();
      EXPECT_GT(keys, 0) << "the AOF came back empty\n" << logs();
      ask(replicas[0], {"CONFIG", "SET", "cluster-replica-no-failover", "no"});
    }
    const auto resumed = wait_recovered(c);
    if (failover) {
      const SyncReply r = ask(v, {"ROLE"});
      if (!r.elements.empty()) role = r.elements[0].str;
      keys = ask(v, {"DBSIZE"}).integer;
      EXPECT_EQ(role, "slave") << "the old primary did not come back as a replica\n" << logs();
    }
    std::printf(
        "[ redis-cut ] cut %d/%d: primary %s (slots of tenant %s) SIGKILLed and its power cut "
        "(%llu unsynced bytes dropped); %s; back after %.0f ms (%s, %lld keys), intake resumed "
        "%.0f ms after the kill (no acknowledgement for %.0f ms)\n",
        k + 1, kPowerCuts, c.address.c_str(), tenant.c_str(),
        static_cast<unsigned long long>(c.report.stats.dropped_bytes),
        failover ? "its replica was promoted, it returned as that one's replica"
                 : "restarted from its own AOF",
        ms_between(c.killed, c.back), role.c_str(), keys, ms_between(c.killed, resumed),
        ms_between(producer_->last_ack_before(c.killed), resumed));
    std::fflush(stdout);
  }
  ASSERT_NO_FATAL_FAILURE(wait_under_load(200, 500ms));

  const Outcome o = settle(scaled(60s));
  const size_t lost = o.lost.size() + o.undelivered.size();
  std::printf(
      "[ redis-cut ] appendfsync=always wait_replicas=1 cuts=%d acknowledged=%zu delivered=%zu "
      "lost=%zu (unknown to the store %zu, never delivered %zu); refusals: %s\n",
      kPowerCuts, o.acknowledged, o.delivered, lost, o.lost.size(), o.undelivered.size(),
      producer_->refusals().c_str());
  std::vector<std::string> lost_ids;
  for (const auto& [n, at] : o.lost) lost_ids.push_back(event_id_of(n));
  EXPECT_TRUE(o.lost.empty()) << o.lost.size()
                              << " acknowledged events unknown to the store after the cuts: "
                              << sample(lost_ids) << "\n"
                              << logs();
  EXPECT_TRUE(o.undelivered.empty())
      << o.undelivered.size() << " acknowledged events never delivered: " << sample(o.undelivered)
      << "\n"
      << nodes_[0]->output() << nodes_[1]->output();
  EXPECT_GT(o.acknowledged, 0u);
}

// appendfsync everysec, wait_replicas = 0, no replica: a primary's power cut loses the events
// it applied since its last fsync — acknowledged ones included — and no older one. The kill
// comes 800 ms into a wall-clock second (Redis fsyncs when its clock's second changes, so about
// 0.7 s of writes are unsynced then); the oldest lost event was acknowledged at most 2 s before
// the kill (Redis' bound), and every event the cut kept is still delivered.
TEST_F(E2eRedisPowerCut, AppendfsyncEverysecLosesAtMostTheLastTwoSecondsAcknowledged) {
  constexpr int kPrimaries = 3;
  ASSERT_NO_FATAL_FAILURE(start_redis(kPrimaries, 0, "everysec"));
  if (IsSkipped()) return;
  ASSERT_NO_FATAL_FAILURE(start_ringcast(kPrimaries, 0));
  producer_->start();

  std::vector<Cut> cuts;
  for (int k = 0; k < kPowerCuts; ++k) {
    ASSERT_NO_FATAL_FAILURE(wait_under_load(200, 1500ms));
    const size_t victim = static_cast<size_t>(k % kPrimaries);  // no failover: stays primary
    sleep_until_ms_into_second(kKillAtMsIntoSecond);
    cuts.push_back(power_cut(victim, false));
    const Cut& c = cuts.back();
    wait_until([&] { return info(victim, "persistence").find("loading:0") != std::string::npos; },
               scaled(20s), 20ms);
    const auto resumed = wait_recovered(c);
    std::printf(
        "[ redis-cut ] cut %d/%d: primary %s SIGKILLed %d ms into a second and its power cut "
        "(%llu unsynced bytes dropped); restarted from its AOF after %.0f ms, intake resumed "
        "%.0f ms after the kill\n",
        k + 1, kPowerCuts, c.address.c_str(), kKillAtMsIntoSecond,
        static_cast<unsigned long long>(c.report.stats.dropped_bytes), ms_between(c.killed, c.back),
        ms_between(c.killed, resumed));
    std::fflush(stdout);
  }
  ASSERT_NO_FATAL_FAILURE(wait_under_load(200, 500ms));

  const Outcome o = settle(scaled(60s));
  const std::vector<Producer::Ack> acks = producer_->acks();
  // Each lost event belongs to the first cut, after its request went out, of the server that
  // holds its tenant's partition. Its write happened between that request and its answer; an
  // answer can come after the kill (a bulk answers once all its parts are durable, and a part
  // confirmed before the kill may wait for another one that waited out the outage), so the age
  // of the loss is measured from the answer, or from the kill when the answer came later.
  std::vector<std::vector<Producer::Ack>> by_cut(cuts.size());
  std::vector<std::string> outside;
  for (const auto& [n, ack] : o.lost) {
    const std::string& tenant = producer_->tenant_of(n);
    size_t k = 0;
    while (k < cuts.size() && !(ack.sent < cuts[k].killed &&
                                std::count(tenants_of_[cuts[k].victim].begin(),
                                           tenants_of_[cuts[k].victim].end(), tenant) > 0))
      ++k;
    if (k == cuts.size()) {
      outside.push_back(cat(event_id_of(n), " (", tenant, ")"));
      continue;
    }
    by_cut[k].push_back(ack);
  }
  EXPECT_TRUE(outside.empty()) << "lost, but no cut of its tenant's server came after its request: "
                               << sample(outside);
  double worst = 0;
  for (size_t k = 0; k < cuts.size(); ++k) {
    const Cut& c = cuts[k];
    // What was at risk: the victim's tenants' events acknowledged in the bound before the kill.
    const std::set<std::string> victims(tenants_of_[c.victim].begin(), tenants_of_[c.victim].end());
    size_t at_risk = 0;
    for (const Producer::Ack& a : acks) {
      const double before = ms_between(a.at, c.killed);
      if (before >= 0 && before <= kEverysecBoundMs && victims.count(producer_->tenant_of(a.n)))
        ++at_risk;
    }
    double oldest = 0, newest = -1e9;  // ms before the kill; ms after it
    for (const Producer::Ack& a : by_cut[k]) {
      oldest = std::max(oldest, a.at < c.killed ? ms_between(a.at, c.killed) : 0.0);
      newest = std::max(newest, ms_between(c.killed, a.at));
    }
    worst = std::max(worst, oldest);
    for (const Producer::Ack& a : by_cut[k]) {
      if (a.at < c.killed && ms_between(a.at, c.killed) > kEverysecBoundMs) {
        std::printf(
            "[ redis-cut ] out of the bound: %s (tenant %s) answered %d%s by node %zu, "
            "sent %.0f ms and answered %.0f ms before the kill\n",
            event_id_of(a.n).c_str(), producer_->tenant_of(a.n).c_str(), a.status,
            a.queued ? " queued" : "", a.node, ms_between(a.sent, c.killed),
            ms_between(a.at, c.killed));
      }
    }
    EXPECT_LE(oldest, kEverysecBoundMs)
        << "cut " << k + 1 << ": an event acknowledged " << oldest
        << " ms before the kill was lost (appendfsync everysec: at most 2 s)";
    const std::string late = newest > 0 ? cat(" (the newest answer reached the producer ",
                                              static_cast<long long>(newest), " ms after it)")
                                        : std::string();
    std::printf(
        "[ redis-cut ] cut %zu/%zu (%s): lost %zu of the %zu events of its tenants acknowledged "
        "in the 2 s before the kill; the oldest lost was acknowledged %.0f ms before the kill%s\n",
        k + 1, cuts.size(), c.address.c_str(), by_cut[k].size(), at_risk, oldest, late.c_str());
  }
  std::printf(
      "[ redis-cut ] appendfsync=everysec wait_replicas=0 cuts=%d acknowledged=%zu lost=%zu "
      "(window %.0f ms at most, bound %.0f ms); of the %zu kept, delivered=%zu; refusals: %s; "
      "AOF rewrites %zu\n",
      kPowerCuts, o.acknowledged, o.lost.size(), worst, kEverysecBoundMs, o.stored, o.delivered,
      producer_->refusals().c_str(), aof_rewrites());
  // The kill comes ~0.7 s after the last fsync under load: a cut that loses nothing did not
  // model a power cut at all.
  EXPECT_GT(o.lost.size(), 0u) << "no acknowledged event was lost: the cuts dropped nothing\n"
                               << logs();
  EXPECT_TRUE(o.undelivered.empty())
      << o.undelivered.size()
      << " acknowledged events the cuts kept were never delivered: " << sample(o.undelivered)
      << "\n"
      << nodes_[0]->output() << nodes_[1]->output();
}

}  // namespace
}  // namespace ringcast::e2e
