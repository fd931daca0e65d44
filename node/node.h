// One ringcast node as a library (docs/architecture.md "The node"): from one Config, the store
// and the engine on it, the operator webhook's notifier and the owner's mailer, the tenant keys,
// the bus intake sources, the REST API with the portal's pages beside it on the HTTP server
// (api/front.h; and the metrics listener), and retention — each a service of node/services.h,
// started in that order and stopped in the reverse one; the store closes after the last.
// `ringcast serve` keeps the signals and what it prints; an embedding program gets the same node.
//
// Invariants: open() answers a running node, or an Error with `why` set to one line naming the
// part that did not start and the reason (what started before it is stopped again, the store
// closed); stop() is graceful (SIGTERM
// semantics: no new requests, in-flight attempts finish or stay leased, the last batch flushed,
// in cluster mode the partitions handed over) and idempotent; the destructor stops.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/result.h"
#include "engine/config.h"

namespace ringcast::engine {
class EngineImpl;
}

namespace ringcast::node {

struct NodeHooks {
  // The store failed for good (RocksDB: an fsync of the data dir failed; docs/operations.md
  // "Disk full, read-only and failed syncs"). Called on the store's thread, once.
  std::function<void()> on_store_failed;
};

// What a started node tells its operator (`ringcast serve` prints it).
struct NodeInfo {
  struct Intake {
    std::string name, consumer, group;
    size_t streams = 0;
  };
  std::vector<Intake> intakes;
  std::string node_id, advertise_url;  // cluster mode only
  std::string metrics_address;         // "IP:port" of server.metrics_listen, when set
  std::string listen_address;          // "IP:port" of the API
  uint16_t port = 0;                   // the API's, once bound
  uint32_t shards = 0;
  std::string data;  // where the data is: the data dir, or "Redis <server> [over TLS] [as …]"
};

class Node {
 public:
  static Result<std::unique_ptr<Node>> open(const Config& cfg, NodeHooks hooks, std::string& why);
  ~Node();
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  void stop();
  const NodeInfo& info() const;
  // GET /metrics as the API answers it (engine, store, intake, notifier, mailer, retention,
  // Redis connections, forwarding, authentication).
  std::string metrics_text() const;
  // The store failed for good (NodeHooks::on_store_failed was called).
  bool store_failed() const;
  engine::EngineImpl& engine();  // until stop()

 private:
  struct Parts;
  Node();
  std::unique_ptr<Parts> parts_;
};

}  // namespace ringcast::node
