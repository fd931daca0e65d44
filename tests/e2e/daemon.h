// The `ringcast serve` daemon as a real child process for the end-to-end tests: a TOML config in
// a TempDir (loopback listener on port 0, RocksDB data dir in the temp dir, millisecond policies,
// a fast breaker), readiness on the "listening on" line, a Bearer-authenticated JSON client, and
// SIGKILL / restart on the same data dir.
//
// Cluster mode (RINGCAST_E2E_BACKEND=cluster, CONTRIBUTING.md): the same suites run against a
// cluster. A Daemon is then kClusterNodes `ringcast serve` nodes (storage.backend = "redis",
// [cluster] with the short test timings, WAIT 1) on one Redis Cluster of 3 primaries + 3 replicas
// that the test process starts once and shares; each Daemon has a namespace of its own. start()
// returns once the nodes hold every partition; call() goes to node 0 and, like a load balancer,
// retries a 503 not_owner on the other nodes; an event a non-owner queued (202 "queued": true) is
// waited for until its owner took it in, so it reads back like on one node; kill9() / terminate() /
// start() act on every node (a whole-cluster crash: what was acknowledged is in Redis);
// scrape_metrics() sums the nodes; output() joins their logs.
//
// Invariant: a Daemon never outlives its processes (the destructor SIGKILLs children that still
// run) and every wait it offers is bounded.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tests/e2e/json.h"
#include "tests/support/process.h"
#include "tests/support/temp_dir.h"

namespace ringcast::e2e {

using namespace std::chrono_literals;
using Millis = std::chrono::milliseconds;

// True when the tests run in an ASan build (slower: scale counts and waits).
#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool kSanitized = true;
#else
inline constexpr bool kSanitized = false;
#endif
#else
inline constexpr bool kSanitized = false;
#endif

// Waits scale with this factor under ASan.
inline Millis scaled(Millis m) {
  return kSanitized ? m * 3 : m;
}

// True when RINGCAST_E2E_BACKEND=cluster: every Daemon is a cluster of kClusterNodes nodes.
bool cluster_mode();
inline constexpr size_t kClusterNodes = 3;

// Skips a test that cannot run in cluster mode, with the reason (one line).
#define RINGCAST_E2E_SINGLE_NODE_ONLY(why)                                              \
  do {                                                                                  \
    if (::ringcast::e2e::cluster_mode()) GTEST_SKIP() << "single node only: " << (why); \
  } while (0)

struct DaemonOptions {
  // transport.allow_private = ["127.0.0.0/8"]; false keeps the SSRF guard on for loopback.
  bool allow_private = true;
  uint32_t shards = 2;  // per node
  // More TOML appended to the file (new [policies.<name>] sections, say). Keys of the sections
  // the fixture writes are overridden with `env` (RINGCAST_SECTION_KEY=value) instead.
  std::string extra_toml;
  std::vector<std::string> env;
};

// One HTTP answer. status 0: no answer (connection refused, reset, timeout).
struct Reply {
  int status = 0;
  std::string headers;  // raw header block
  std::string body;
  Json json() const { return Json::parse(body); }
  // "<status> <body>" for assertion messages.
  std::string describe() const;
};

// A blocking HTTP/1.1 request on a fresh loopback connection (Connection: close). Keeps reading
// even if sending failed part way (the server may answer 413 and close early).
Reply http_request(uint16_t port, const std::string& method, const std::string& target,
                   const std::string& body, const std::vector<std::string>& headers,
                   Millis timeout = 10s);

// The same from another loopback source address (`source` "127.0.0.2": a second client).
Reply http_request_from(const char* source, uint16_t port, const std::string& method,
                        const std::string& target, const std::string& body,
                        const std::vector<std::string>& headers, Millis timeout = 10s);
// Request bytes as they are (a captured request, say) on a fresh loopback connection; the
// answer is read as http_request() reads it.
Reply raw_request(uint16_t port, const std::string& bytes, Millis timeout = 10s,
                  const char* source = nullptr);
// A connected socket to `port` (from `source` when given), or -1; the caller closes it.
int open_connection(uint16_t port, const char* source = nullptr);

// Polls `pred` every `interval` until it holds or `timeout` passes; returns its last value.
bool wait_until(const std::function<bool()>& pred, Millis timeout, Millis interval = 20ms);

// The wall clock `from_now` from now as RFC 3339 UTC with milliseconds (the API's times).
std::string rfc3339_in(Millis from_now = Millis(0));

// The built binaries (RINGCAST_BINARY_DIR/tools/...).
std::string ringcast_binary();
std::string sink_binary();

class Daemon {
 public:
  // At least 32 characters (config refuses shorter secrets, SPEC R14).
  static constexpr const char* kToken = "e2e-token-4f9a-0123456789abcdef0123";
  static constexpr const char* kClusterSecret = "e2e-cluster-secret-0123456789abcdef";

  // Writes the config; does not start (call start()).
  explicit Daemon(DaemonOptions options = {});
  ~Daemon();
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  // Starts `ringcast serve --config FILE` and waits for "listening on" (cluster mode: on every
  // node, then until the nodes hold every partition); throws std::runtime_error with the
  // daemon's output when it does not come up.
  void start(Millis timeout = 20s);
  // SIGKILL and reap (crash) every node. The data dir (the Redis namespace) stays.
  void kill9();
  // SIGTERM to every node at once and wait up to `grace` (then SIGKILL); the exit status (the
  // first that is not a clean exit, in cluster mode).
  test::ExitStatus terminate(Millis grace = 20s);
  bool running();  // every node runs
  pid_t pid() const { return nodes_[0]->process.pid(); }

  // Node 0's port; nodes() and port(i) reach the others (cluster mode).
  uint16_t port() const { return port(0); }
  size_t nodes() const { return nodes_.size(); }
  uint16_t port(size_t node) const { return nodes_[node]->port.load(); }
  const std::string& dir() const { return tmp_.path(); }
  // Node 0's config.
  const std::string& config_path() const { return nodes_[0]->config_path; }
  const std::string& config_text() const { return nodes_[0]->config_text; }
  // Cluster mode: every node that runs answers GET /v1/cluster synced, holds what rendezvous
  // assigns it, releases nothing, and together they hold all 256 partitions. True on one node.
  bool converged() const;
  // Cluster mode: every node forwards to every other (it has read their published addresses):
  // a tenant call from each node for a partition each other node holds is not answered
  // owner_unreachable. True on one node.
  bool addresses_known() const;
  // stdout and stderr of every run so far (for failure messages), the last `max_per_file`
  // bytes of each file.
  std::string output(size_t max_per_file = 6000) const;
  int runs() const { return runs_; }

  // An authenticated request (Bearer kToken); body is sent as application/json when not empty.
  Reply call(const std::string& method, const std::string& path,
             const std::string& body = "") const;
  // The same with another Authorization value; nullopt sends no Authorization header.
  Reply call_with_auth(const std::string& method, const std::string& path, const std::string& body,
                       const std::optional<std::string>& auth) const;
  // One request to one node, as is (no retry on another node, no wait for queued events).
  Reply call_node(size_t node, const std::string& method, const std::string& path,
                  const std::string& body = "",
                  const std::optional<std::string>& auth = std::string("Bearer ") + kToken) const;

 private:
  struct Node {
    std::string id;  // cluster.node_id ("" on one node)
    std::string config_path, config_text;
    test::Process process;
    std::atomic<uint16_t> port{0};
  };
  std::string log_file(size_t node, int run, const char* ext) const;
  // Cluster mode: notes the events of a 2xx intake answer that a node queued for another
  // node's partition ("queued": true), and settle() waits until those are readable (their owner
  // took them in), failing the test when one is not within 10 s. Every call but intake settles
  // first: the tests read their own writes as on one node, while a series of submissions goes
  // out at a producer's pace.
  void note_queued(const std::string& path, const std::string& body, const Reply& r) const;
  void settle() const;

  DaemonOptions options_;
  test::TempDir tmp_;
  std::vector<std::unique_ptr<Node>> nodes_;
  int runs_ = 0;
  mutable std::mutex queued_mu_;
  mutable std::vector<std::pair<std::string, std::string>> queued_;  // tenant, event id
};

// --- API helpers (status checks are left to the tests) ---------------------------------------

// JSON string literal of `s` (quotes and escapes).
std::string quote(const std::string& s);

// POST /v1/tenants/{tenant}/endpoints with the given JSON body.
Reply create_endpoint(const Daemon& d, const std::string& tenant, const std::string& body);
// POST /v1/tenants/{tenant}/events {"id","type","payload"} (payload is raw JSON).
Reply submit_event(const Daemon& d, const std::string& tenant, const std::string& id,
                   const std::string& type, const std::string& payload);
// GET /v1/tenants/{tenant}/deliveries?endpoint=... (limit 1000): the "deliveries" array.
Json list_deliveries(const Daemon& d, const std::string& tenant, const std::string& endpoint_id);
// GET /v1/tenants/{tenant}/deliveries/{id}: {"delivery", "attempts", "event"}.
Json get_delivery(const Daemon& d, const std::string& tenant, const std::string& delivery_id);
// The delivery of `event_id` to `endpoint_id` ({} when none): looks up the event's seq.
Json delivery_for_event(const Daemon& d, const std::string& tenant, const std::string& endpoint_id,
                        const std::string& event_id);
// POST an endpoint {"url", "policy"}; expects 201 (a test failure otherwise); its id ("" on
// failure).
std::string endpoint_with_policy(const Daemon& d, const std::string& tenant, const std::string& url,
                                 const std::string& policy);
// True once a delivery detail's status is terminal: delivered, failed, dead or unknown.
bool delivery_ended(const Json& detail);
// Waits (bounded) until the delivery of `event_id` to `endpoint_id` satisfies `pred`; returns
// the last detail read ({} when there was none).
Json wait_delivery(const Daemon& d, const std::string& tenant, const std::string& endpoint_id,
                   const std::string& event_id, const std::function<bool(const Json&)>& pred,
                   Millis timeout);
// The "kind" of each record of a delivery's history, in order ("attempt", "resolution", ...).
std::vector<std::string> history_kinds(const Json& detail);
// GET /v1/tenants/{tenant}/endpoints/{id}.
Json get_endpoint(const Daemon& d, const std::string& tenant, const std::string& endpoint_id);

// The webhook id receivers see for an event: its message id (SPEC R11.3), from
// GET /v1/tenants/{tenant}/events/{id}; "" when the event is unknown. The sink records these.
std::string message_id_of(const Daemon& d, const std::string& tenant, const std::string& event_id);
std::vector<std::string> message_ids_of(const Daemon& d, const std::string& tenant,
                                        const std::vector<std::string>& event_ids);

// The sink's ids file as a set of ids that got `status` ("200" by default).
std::vector<std::string> sink_ids_with_status(const test::SinkProcess& sink,
                                              const std::string& status = "200");
// How many ids-file lines carry `id` (any status).
size_t sink_lines_for(const test::SinkProcess& sink, const std::string& id);
// The ids of `want` that have no ids-file line with `status` yet.
std::vector<std::string> missing_ids(const test::SinkProcess& sink,
                                     const std::vector<std::string>& want,
                                     const std::string& status = "200");
// GET /metrics, parsed: each sample line as "name{labels}" exactly as rendered (or "name" when
// it has no labels) → value. Empty when the daemon did not answer 200. Cluster mode: the sum of
// every node's sample (counters and gauges alike) over the nodes that answered.
using Metrics = std::map<std::string, double>;
Metrics scrape_metrics(const Daemon& d);
// One sample of `m`, e.g. metric(m, "ringcast_sends_deferred_total{reason=\"pacing\"}");
// -1 when the sample is absent (so a missing metric fails a ">= 0" or "== 0" check).
double metric(const Metrics& m, const std::string& sample);
// The sum of every sample of the metric `name` (all label values), -1 when there is none.
double metric_sum(const Metrics& m, const std::string& name);

// How many deliveries an accepted event made (its fan-out): the intake answer's "deliveries",
// or, when the answer says "queued": true (cluster mode: a node that does not own the tenant's
// partition queued it; its owner fanned it out), the deliveries of `event_id` in the tenant's
// log. -1 when the answer is not a 2xx.
int64_t deliveries_made(const Daemon& d, const std::string& tenant, const std::string& event_id,
                        const Reply& intake_answer);

// Cluster mode's steady state, from GET /v1/cluster of every live node (its node id and the
// answer's JSON, null when it did not answer 200): each is synced, releases nothing, holds what
// rendezvous assigns it and sees exactly the live nodes, and together they hold all 256
// partitions.
bool cluster_views_converged(const std::vector<std::pair<std::string, Json>>& live);

// First few entries of `ids`, comma-separated (assertion messages).
std::string sample(const std::vector<std::string>& ids, size_t n = 10);

}  // namespace ringcast::e2e
