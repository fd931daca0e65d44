// Real redis-server processes (Debian redis-server 7.0) for the redis tests: one server with a
// generated config in a temp dir on a free 127.0.0.1 port, or a cluster of primaries, and a
// blocking hiredis client as the test's oracle (independent of redis/, which uses hiredis only
// as a codec). Invariants: servers listen on 127.0.0.1 only, persist nothing unless asked
// (`save ""`), write only under their dir, and die with the test (Process: SIGKILL on
// destruction and PR_SET_PDEATHSIG); every wait is bounded. A server with TLS (SPEC R14) listens
// on a tls-port besides its plain port: the oracle (cmd(), cmds(), the cluster helpers) keeps
// the plain port, the code under test is given tls_address().
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "tests/support/process.h"

namespace ringcast::test {

// A reply as the test oracle sees it.
struct SyncReply {
  enum class Type { kNil, kInteger, kStatus, kString, kError, kArray };
  Type type = Type::kNil;
  long long integer = 0;
  std::string str;
  std::vector<SyncReply> elements;
  bool is_error() const { return type == Type::kError; }
};

// (first slot, last slot, port) of each range of a CLUSTER SLOTS answer, sorted.
using SlotRanges = std::vector<std::tuple<long long, long long, long long>>;
SlotRanges slot_ranges(const SyncReply& r);

// TLS on a second port (redis-server built with TLS, as Debian's is): PEM files, e.g. from
// TestCa::write_files().
struct RedisServerTls {
  std::string cert_file;      // tls-cert-file (also the client certificate of replication / bus)
  std::string key_file;       // tls-key-file
  std::string ca_file;        // tls-ca-cert-file: what client certificates must chain to
  bool auth_clients = false;  // tls-auth-clients yes | no
  bool cluster = false;       // tls-cluster yes: the cluster bus on TLS, TLS ports announced
  bool replication = false;   // tls-replication yes: replicas connect to their primary on TLS
};

struct RedisServerOptions {
  std::string requirepass;
  bool appendonly = false;
  bool cluster = false;                   // cluster-enabled yes, cluster-node-timeout 1000
  std::vector<std::string> extra_config;  // more config lines
  std::optional<RedisServerTls> tls;      // also a tls-port (tls_port())
};

class RedisServer {
 public:
  static constexpr const char* kBinary = "/usr/bin/redis-server";
  static bool available();

  // Writes <dir>/redis.conf and starts redis-server on a free port (retrying another port if
  // the bind races), then waits until PING answers. Throws std::runtime_error with the log.
  static std::unique_ptr<RedisServer> start(
      const std::string& dir, const RedisServerOptions& options = {},
      std::chrono::milliseconds timeout = std::chrono::seconds(10));
  ~RedisServer();

  const std::string& host() const { return host_; }
  uint16_t port() const { return port_; }
  std::string address() const { return host_ + ":" + std::to_string(port_); }
  // The TLS port (0 without options.tls) and its "127.0.0.1:port".
  uint16_t tls_port() const { return tls_port_; }
  std::string tls_address() const { return host_ + ":" + std::to_string(tls_port_); }
  const std::string& dir() const { return dir_; }
  pid_t pid() const { return process_.pid(); }
  bool running() { return process_.running(); }

  // SIGTERM, then SIGKILL after `grace`.
  void stop(std::chrono::milliseconds grace = std::chrono::seconds(5));
  // stop() (if running), then start again on the same ports and dir; waits for PING.
  void restart(std::chrono::milliseconds timeout = std::chrono::seconds(10));
  void pause();   // SIGSTOP, and waits until the process is stopped
  void resume();  // SIGCONT
  void kill();    // SIGKILL and reap: a crash (restart() brings it back)

  // One command over a fresh blocking connection (AUTH first when requirepass is set).
  // Throws std::runtime_error on a connection or protocol failure; error replies are returned.
  SyncReply cmd(const std::vector<std::string>& args,
                std::chrono::milliseconds timeout = std::chrono::seconds(5)) const;
  // The same commands on one connection, in order (for SELECT / MULTI sequences).
  std::vector<SyncReply> cmds(const std::vector<std::vector<std::string>>& commands,
                              std::chrono::milliseconds timeout = std::chrono::seconds(5)) const;
  std::string log() const;
  // The client connections CLIENT LIST (asked on the plain port: the oracle is itself one of
  // that port's) shows on `port` of this server.
  int clients_on_port(uint16_t port) const;
  // `calls=` of one command (lower case, e.g. "zadd") in INFO commandstats: what ran since the
  // start or the last CONFIG RESETSTAT, commands run by scripts included; 0 when it never ran.
  long long calls(const std::string& command) const;

 private:
  RedisServer() = default;
  void launch();
  bool wait_ready(std::chrono::milliseconds timeout);
  std::string dir_;
  std::string host_ = "127.0.0.1";
  uint16_t port_ = 0;
  uint16_t tls_port_ = 0;
  RedisServerOptions options_;
  Process process_;
  int generation_ = 0;
};

struct RedisClusterOptions {
  int primaries = 3;
  // Replicas of each primary (CLUSTER REPLICATE), started after the primaries; start() waits
  // until every one reports master_link_status:up (a replica killed over before its first
  // sync would not be promoted: research/scale-out.md "Pitfall I hit").
  int replicas_per_primary = 0;
  std::chrono::milliseconds timeout = std::chrono::seconds(20);
  // Every node with TLS (set cluster = true in it for tls-cluster yes: the bus on TLS, the
  // TLS ports in CLUSTER SLOTS and MOVED for TLS clients; tls_addresses() lists them).
  std::optional<RedisServerTls> tls;
};

// N primaries (and optionally their replicas) forming one Redis Cluster, slots split evenly in
// order: node 0 has the lowest slots. Built by hand (ADDSLOTSRANGE, SET-CONFIG-EPOCH, MEET),
// which is faster and more predictable than redis-cli --cluster create. Node indexes: the
// primaries first, 0 .. primaries-1, then replica r of primary i at
// primaries + i * replicas_per_primary + r.
class RedisCluster {
 public:
  static std::unique_ptr<RedisCluster> start(
      const std::string& dir, int primaries = 3,
      std::chrono::milliseconds timeout = std::chrono::seconds(20),
      const std::optional<RedisServerTls>& tls = std::nullopt);
  static std::unique_ptr<RedisCluster> start(const std::string& dir,
                                             const RedisClusterOptions& options);
  RedisServer& node(size_t i) { return *nodes_[i]; }
  size_t size() const { return nodes_.size(); }
  // Waits until, among the nodes other than `dead` (killed or paused), every one reports
  // cluster_state:ok, all agree on the slot map, the map covers every slot, and no range is
  // served by `dead` any more (a replica took over).
  bool wait_failover(size_t dead, std::chrono::milliseconds timeout);
  // Waits until every replica of primary `primary` has acknowledged the primary's replication
  // offset as of this call (INFO replication: each slaveN offset >= master_repl_offset).
  // Replicas acknowledge once a second, so this takes up to about a second. (WAIT would not do:
  // it waits for the calling connection's own last write, and the test's connection wrote none.)
  bool wait_replicated(size_t primary, std::chrono::milliseconds timeout);
  std::vector<std::string> addresses() const;
  std::vector<std::string> tls_addresses() const;  // the nodes' TLS ports (options.tls)
  std::string node_id(size_t i) const;
  // The node that owns `slot` per CLUSTER SLOTS as node 0 sees it; -1 if none.
  int owner_of(int slot) const;
  int key_slot(const std::string& key) const;  // CLUSTER KEYSLOT on node 0
  // Waits until every node reports cluster_state:ok and the same owner for every slot range.
  bool wait_consistent(std::chrono::milliseconds timeout);

  // Slot migration, step by step (the MOVED/ASK/TRYAGAIN tests stop in between):
  void begin_migration(int slot, size_t from, size_t to);  // IMPORTING on to, MIGRATING on from
  void migrate_keys(int slot, size_t from, size_t to, const std::vector<std::string>& keys);
  void finish_migration(int slot, size_t to);  // SETSLOT NODE on every node (the target first)

 private:
  std::vector<std::unique_ptr<RedisServer>> nodes_;
  std::vector<std::string> ids_;
  bool tls_cluster_ = false;  // tls-cluster yes: node-to-node traffic (MIGRATE too) is TLS
};

}  // namespace ringcast::test
