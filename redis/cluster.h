// The Redis Cluster client (docs/redis.md): seeds -> CLUSTER SLOTS -> one redis::Connection per
// primary, commands routed by the key's slot (redis/slot.h), behind the same redis::Client
// interface as a standalone connection.
// Invariants (beyond client.h's):
//   - routing: args[key_index] picks the slot; the slot map comes from CLUSTER SLOTS and is
//     patched by every MOVED; a full refresh runs after MOVED, CLUSTERDOWN or a lost node, at
//     most once per refresh_min_interval;
//   - MOVED re-sends to the named node, ASK sends ASKING + the command to the named node once
//     (without touching the map), TRYAGAIN and CLUSTERDOWN are retried after a small backoff;
//     all of these only within the command's one deadline (MOVED + ASK also at most
//     max_redirects times). Re-sending is safe: each of these replies means it did not run;
//   - a command that may have executed (kTimeout, kConnectionLost, ...) is never re-sent;
//   - a command whose slot has no known node waits (bounded by max_pending and its deadline)
//     for the next refresh; past the deadline it fails with kNoRoute (not sent);
//   - nodes are never forgotten while the client lives (at most max_nodes): a node that left
//     the cluster keeps an idle connection that reconnects with backoff. Replicas are not used.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "redis/client.h"
#include "redis/connection.h"

namespace ringcast::redis {

struct ClusterOptions {
  std::vector<std::string> seeds;  // "127.0.0.1:7000", "[::1]:7001"
  // Per node; host and port are replaced. Its TLS settings hold for every node (one context,
  // SPEC R14): on a cluster with tls-cluster yes, CLUSTER SLOTS and MOVED name the TLS ports.
  ConnectionOptions connection;
  uint32_t max_redirects = 8;  // MOVED + ASK per command
  Duration refresh_min_interval = milliseconds(100);
  Duration retry_min = milliseconds(10);  // TRYAGAIN / CLUSTERDOWN backoff, doubling
  Duration retry_max = milliseconds(200);
  uint32_t max_nodes = 64;
  uint32_t max_pending = 1u << 16;  // commands held by the cluster layer (in flight or waiting)
};

struct ClusterStats {
  uint64_t commands = 0;
  uint64_t moved = 0;
  uint64_t ask = 0;
  uint64_t tryagain = 0;
  uint64_t clusterdown = 0;
  uint64_t refreshes = 0;         // CLUSTER SLOTS replies applied
  uint64_t refresh_failures = 0;  // a node could not give a usable map
  uint64_t waited_for_route = 0;  // commands that had to wait for a map
  uint64_t refused = 0;           // kQueueFull, kClosed, kBadCommand, kTooManyRedirects
  uint32_t nodes = 0;
  uint32_t pending = 0;
};

class ClusterClient final : public Client {
 public:
  // Starts connecting to the seeds and asks them for the slot map at once. kInvalidArgument
  // for no seeds or a seed that is not "numeric-host:port".
  static Result<std::unique_ptr<ClusterClient>> create(net::Loop& loop,
                                                       const ClusterOptions& options);
  // Fails what is still held with kClosed / kConnectionLost and closes every connection.
  ~ClusterClient() override;
  ClusterClient(const ClusterClient&) = delete;
  ClusterClient& operator=(const ClusterClient&) = delete;

  using Client::command;
  void command(std::span<const std::string_view> args, Callback cb,
               const CommandOptions& options) override;

  // True once a slot map covering all 16384 slots was applied.
  bool map_complete() const;
  // The node ("host:port") the map currently sends `slot` to; "" when none.
  std::string node_for_slot(uint16_t slot) const;
  const ClusterStats& stats() const;
  // How many times a command was sent again, or held, instead of running where the map sent it
  // first (MOVED, ASK, TRYAGAIN, CLUSTERDOWN, a wait for a route). A caller that pipelines a
  // command to a node's connection right behind a routed one (WAIT after a write) can tell by
  // this not moving that the routed one ran there, on that connection, before it.
  uint64_t reroutes() const;
  // The connection to "host:port" if the client has one (for tests and metrics).
  Connection* connection(const std::string& address);
  net::Loop& loop() override;
  Duration default_timeout() const override;

  struct Impl;

 private:
  explicit ClusterClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Splits "host:port" / "[v6]:port"; false if malformed.
bool parse_address(std::string_view address, std::string* host, uint16_t* port);

// The client for a server list: a ClusterClient over `servers` as seeds when `cluster`, else a
// Connection to the one server (numeric host:port; kInvalidArgument naming "servers"
// otherwise). `connection` holds everything but host and port.
Result<std::unique_ptr<Client>> make_client(net::Loop& loop,
                                            const std::vector<std::string>& servers, bool cluster,
                                            ConnectionOptions connection);

}  // namespace ringcast::redis
