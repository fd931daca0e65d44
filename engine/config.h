// ringcast's configuration: one TOML file, every key overridable by a RINGCAST_* environment
// variable (docs/operations.md §2). Invariant: a Config returned by load_config() has passed
// validate(): every value is in range and every cross-key relation holds.
//
// Key names and their environment variables: `section.key` ↔ RINGCAST_SECTION_KEY
// (`engine.breaker.window` ↔ RINGCAST_ENGINE_BREAKER_WINDOW, `server.api_token` ↔
// RINGCAST_SERVER_API_TOKEN, also RINGCAST_API_TOKEN). Lists in the environment are
// comma-separated. Durations are `100ms`, `15m`, `2h`, `30d` (also compound `1h30m`; units
// ns us ms s m h d); byte sizes are an integer or `64KiB`, `1MiB`, `1GiB`, `1MB`.
// Parsing throws ConfigError (start-up only, STYLE 7); the message names the key and where the
// value came from.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "core/ip_address.h"
#include "core/money.h"
#include "core/policy.h"
#include "core/store.h"
#include "core/time.h"

namespace ringcast {

class ConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct ServerConfig {
  std::string listen = "127.0.0.1:8080";  // host:port, [v6]:port; port 0 = any free port
  IpAddress listen_ip = IpAddress::v4(127, 0, 0, 1);  // parsed from `listen`
  uint16_t listen_port = 8080;
  std::string api_token;                  // Bearer token for /v1 (secret; masked when printed)
  Duration shutdown_grace = seconds(10);  // SIGTERM: bound on finishing what is in flight
  uint32_t max_connections = 1024;
  Duration idle_timeout = seconds(60);  // keep-alive connections with no request
  uint32_t read_threads = 2;  // REST API delivery-log reads (RocksDB) run on these, off the loop
  // Tenant-scoped API keys (SPEC R14.1): how often a node checks the store for a key another
  // node made or revoked (cluster mode; a single node makes every change itself).
  Duration key_refresh = seconds(1);
  // GET /metrics (SPEC R14, docs/security.md "The listener"): needs the admin token unless
  // metrics_public, or unless metrics_listen puts the figures on a listener of their own (no
  // credential there: bind it where only the scraper reaches it).
  bool metrics_public = false;
  std::string metrics_listen;  // host:port; empty: none
  // Open connections from one client address (behind a proxy every client is the proxy's
  // address: raise it or set 0 there); 0: no cap.
  uint32_t max_connections_per_ip = 256;
  // 401s from one client address in a minute before its /v1 calls are 429 for the rest of
  // the minute (api/auth_throttle.h); 0: off.
  uint32_t auth_failures_per_minute = 30;
  // TLS on the API listener (BoringSSL): the certificate chain and its key, PEM files; both or
  // neither (plain HTTP). In cluster mode the advertised URL is then https://.
  std::string tls_cert;
  std::string tls_key;
};

// [portal] (docs/operations.md "The portal"): the merchant portal and its links (portal/portal.h).
struct PortalConfig {
  // Signs links and sessions (at least 32 characters); empty: a random 256-bit secret made
  // once and kept in the store (shared by every node through Redis), never derived from
  // another secret (SPEC R14).
  std::string secret;
  std::string public_url;  // what browsers reach the portal at; empty: the request's Host
  Duration link_ttl = minutes(10);
  Duration link_ttl_max = hours(24);
  Duration session_ttl = hours(1);
  std::vector<std::string> frame_ancestors;  // origins allowed to embed it; empty: none
};

// [storage.redis] (storage.backend = "redis"): Redis or Redis Cluster as the system
// of record (storage/redis_store.h, docs/cluster.md).
struct RedisStorageConfig {
  std::vector<std::string> servers{"127.0.0.1:6379"};  // several (seeds) only with cluster
  bool cluster = false;
  std::string username;  // a Redis ACL user (AUTH user password); empty: AUTH password
  std::string password;  // secret; masked when printed
  // TLS to Redis (SPEC R14, docs/security.md "Redis"), for the store, the leases and the
  // cluster inboxes alike: the server is verified against tls_ca_file (empty: the system
  // bundle) and tls_server_name (empty: the numeric address as an IP SAN); tls_cert_file +
  // tls_key_file (both or neither) for tls-auth-clients yes.
  bool tls = false;
  std::string tls_ca_file;
  std::string tls_cert_file;
  std::string tls_key_file;
  std::string tls_server_name;
  std::string ns = "rc";  // key `namespace`: the hash tag is {<ns>:<partition>}
  // Durable = on the primary and acknowledged by this many replicas (WAIT) before a 202 or
  // an XACK; 0 on a Redis without replicas (then a primary's crash can lose its last second).
  uint32_t wait_replicas = 1;
  Duration wait_timeout = milliseconds(100);
  Duration command_timeout = seconds(2);
  // Memory back-pressure (docs/cluster.md "Memory back-pressure"): intake answers 503 store_full
  // once a primary's used_memory reaches high_water x its limit (maxmemory, or max_memory_bytes
  // when the server's is 0; the smaller when both are set), until it is 5 points below again.
  double high_water = 0.85;
  uint64_t max_memory_bytes = 0;  // 0: the servers' maxmemory only
};

struct StorageConfig {
  std::string backend = "rocksdb";  // "rocksdb" (one node, local disk) | "redis"
  RedisStorageConfig redis;
  std::string data_dir = "./ringcast-data";
  SyncPolicy sync = SyncPolicy::kInterval;
  Duration sync_interval = milliseconds(10);
  Duration retention = days(30);  // SPEC R10.1
  // How often `ringcast serve` runs a retention pass (on its own thread; also one at start).
  Duration retention_interval = hours(1);
};

// SPEC R4: the per-tenant circuit breaker.
struct BreakerSettings {                 // the [engine.breaker] section; becomes core BreakerConfig
  Duration window = minutes(5);          // R4.1 sliding window
  uint32_t min_deliveries = 5;           // R4.1
  double failure_ratio = 0.8;            // R4.1
  Duration open_pause = minutes(5);      // R4.2 first pause
  Duration max_pause = minutes(30);      // R4.2 cap
  Duration probe_recheck = seconds(30);  // R4.3 others ask again after this
  Duration hold_ceiling = days(30);      // R4.7
};

struct EngineConfig {
  uint32_t shards = 0;          // 0 in the file = one per core; load_config() resolves it (>= 1)
  uint32_t fairness_cap = 50;   // SPEC R5.3: deliveries per endpoint per pass
  uint32_t max_in_flight = 16;  // per endpoint, unless the endpoint sets its own
  uint64_t payload_cache_bytes = 32 << 20;    // recent events kept for the send path (all shards)
  Duration subscription_postpone = hours(1);  // SPEC R6 subscription_inactive
  // Reconciliation (SPEC R12.11; core/scheduler.h SchedulerOptions): pauses between status checks
  // (the last repeats) and the deadline after which an unanswered delivery needs review.
  std::vector<Duration> reconcile_schedule = {seconds(5), seconds(10), seconds(15), seconds(30),
                                              minutes(1), minutes(2),  minutes(5),  minutes(10)};
  Duration reconcile_deadline = minutes(30);
  uint32_t max_lease_expiries = 10;  // crashes with a delivery in flight before it ends unknown
  BreakerSettings breaker;
};

struct TransportConfig {
  Duration connect_timeout = seconds(5);   // SPEC R12.4
  Duration tls_timeout = seconds(10);      // SPEC R12.4
  Duration request_timeout = seconds(15);  // SPEC R6 "no answer within 15 s", R12.4
  Duration dns_timeout = seconds(5);
  Duration dns_cache_max_ttl = minutes(5);
  uint32_t pool_size = 32;                 // connections per host
  Duration idle_timeout = seconds(60);     // pooled connection idle time
  bool allow_http = false;                 // plain http:// endpoints (tests, private nets)
  std::vector<std::string> allow_private;  // CIDR allow-list over the address guard
  std::vector<Cidr> allow_private_cidrs;   // parsed from allow_private
  std::vector<uint16_t> allowed_ports;     // empty: any port not on the deny list
  uint32_t max_url_bytes = 2048;
  std::string ca_file;     // extra CA bundle (PEM), on top of the system's
  std::string user_agent;  // default "ringcast/<version>"
  uint64_t max_response_header_bytes = 64 * 1024;
  uint64_t max_response_drain_bytes = 1024 * 1024;
  double host_rate_per_second = 0;  // pacing per host; 0 = unlimited
  uint32_t host_burst = 0;
  // SPEC R2.3: how long a send waits in its host's queue (pacing, connection limits)
  // before it is given back deferred — not sent, not an attempt — and how many may wait.
  Duration max_queue_wait = seconds(5);
  uint32_t max_queued_per_host = 4096;
};

// A named policy from [policies.<name>]: a preset (`base`) with some parts replaced; unset
// fields keep the preset's value. It becomes a core RetryPolicy (core/policy.h) through
// to_retry_policy(). Ladders are the pauses between attempts: the first attempt is immediate,
// so a `ladder` of n pauses means n + 1 attempts (smengo's is [5s, 5m, 30m, 2h, 5h, 10h, 10h],
// SPEC R5.1). Money rules in TOML: money = [{type = "refund.completed"},
// {type = "payment.status_changed", field = "status", values = ["paid"]}] (file only).
struct PolicyConfig {
  std::string name;
  std::string base = "smengo";           // "smengo" | "xhub"
  std::vector<Duration> ladder;          // fast ladder (xhub) / schedule (smengo); empty: base's
  std::optional<double> jitter;          // fraction, 0..0.5 (SPEC R5.2: 0.1 = ±10 %)
  std::vector<Duration> slow_ladder;     // xhub: money events answered 4xx (SPEC R3.1)
  std::optional<Duration> slow_ceiling;  // SPEC R3.2 (from the first slow step); 0s = none
  std::optional<Duration> max_age;       // SPEC R3.3 absolute ceiling; 0s = none
  std::optional<bool> auto_disable;      // SPEC R8.1 exhaustion disables the endpoint
  std::optional<bool> retry_other_4xx;   // SPEC R6 "other 4xx" (smengo: retried)
  std::optional<bool> gone_disables;     // SPEC R6/R8.1: 410 disables the endpoint
  std::optional<bool> breaker;           // SPEC R4: feeds and obeys the tenant breaker
  std::optional<std::vector<MoneyRule>> money;  // SPEC R3.5; unset: the base's rules
};

// The core policy for `p` (the preset named by p.base with p's fields applied).
RetryPolicy to_retry_policy(const PolicyConfig& p);

struct SigningConfig {
  Duration rotation_overlap = hours(24);  // old secret keeps signing this long after rotate
};

struct NotificationsConfig {
  std::string webhook_url;  // operator notifications (SPEC R8.4) are POSTed here when set
  // Signs those POSTs with the Standard Webhooks profile (SPEC R11.2) when set: "whsec_<base64>"
  // or raw text, like an endpoint secret (secret; masked when printed).
  std::string webhook_secret;
  // The owner's e-mail on auto-disable (SPEC R8.4): [notifications.smtp] is
  // the relay (off while host is empty), [notifications.email] what is sent and how it is
  // retried. The recipient is the tenant's owner_email.
  struct Smtp {
    std::string host;  // empty: no owner e-mail
    uint32_t port = 587;
    std::string from;                     // sender address (envelope and From:), required with host
    std::string from_name = "ringcast";   // the From: display name
    std::string starttls = "required";    // "required" | "opportunistic" | "off"
    std::string ca_file;                  // trusted for the relay's certificate; empty: system
    std::string username;                 // AUTH PLAIN/LOGIN when set
    std::string password;                 // secret; or password_file
    std::string password_file;            // the password read from a file (one line)
    bool allow_auth_without_tls = false;  // credentials over a clear connection
    std::string helo_name;                // the EHLO name; empty: this host's name
    Duration timeout = seconds(30);       // connect, TLS handshake, each reply
  } smtp;
  struct Email {
    // The embedding platform's page for one endpoint: {tenant} and {endpoint} are replaced.
    std::string portal_url;
    uint32_t queue_max = 1'000;
    std::vector<Duration> retry_ladder = {seconds(1), seconds(5), seconds(30), minutes(2),
                                          minutes(10)};
    // An owner_email a merchant sets is confirmed through a signed link mailed to it (SPEC
    // R14): one such e-mail per tenant per confirm_interval; the link lives confirm_link_ttl.
    Duration confirm_interval = minutes(10);
    Duration confirm_link_ttl = hours(72);
  } email;
};

// [tracing] (docs/tracing.md): OpenTelemetry spans of intake, deliveries and attempts, POSTed
// as OTLP/HTTP JSON to `endpoint`, an operator-configured collector checked like the operator
// webhook's URL (the endpoint URL rules, the address guard and transport.allow_private).
struct TracingConfig {
  std::string endpoint;                   // "http://collector:4318/v1/traces"; empty: tracing off
  std::string service_name = "ringcast";  // the spans' resource attribute service.name
  uint32_t queue_max = 8192;              // spans waiting for the exporter; beyond: dropped
  double sample_ratio = 1.0;              // share of traces recorded that no producer sampled
};

struct LimitsConfig {
  uint64_t max_header_bytes = 64 * 1024;            // request line + headers
  uint64_t max_body_bytes = 1024 * 1024;            // JSON request bodies
  uint64_t max_bulk_body_bytes = 64 * 1024 * 1024;  // NDJSON bulk intake bodies
  uint32_t max_bulk_events = 100'000;               // lines per bulk request
  uint32_t max_id_bytes = 256;                      // event id
  uint32_t max_tenant_bytes = 128;
  uint32_t max_type_bytes = 256;
  uint32_t max_event_types = 64;   // filter entries per endpoint
  uint32_t max_list_limit = 1000;  // ?limit= on delivery listings
  // A requeue job has at most this many of its re-queued deliveries live at once; per shard
  // this many jobs run and this many more wait queued (SPEC R14 quotas). The keys keep the
  // route's word, recover (POST .../endpoints/{id}/recover).
  uint32_t recover_max_in_flight = 1000;
  uint32_t recover_jobs_running = 4;
  uint32_t recover_jobs_queued = 64;
  // Quotas (SPEC R14, docs/security.md "Quotas"), each a 429 naming the key.
  uint32_t max_endpoints_per_tenant = 100;
  uint32_t test_sends_per_minute = 10;  // per endpoint
  double tenant_events_per_second = 0;  // per tenant per node, every intake; 0: no limit
  // The attempts chart's scan (GET .../stats/attempts): deliveries read, with attempts or not,
  // and time, before it answers "truncated" (SPEC R14: it shares the read pool).
  uint32_t stats_max_rows = 20'000;
  Duration stats_max_time = std::chrono::milliseconds(500);
};

// One `[[intake.redis]]` source (operations.md §6): a Redis Streams consumer group that feeds the
// same intake as the HTTP API (intake/redis_source.h). File only (no RINGCAST_* variables: it is a
// list of tables).
struct RedisIntakeConfig {
  std::string name;                  // metrics label; default "redis-<n>" (1-based)
  std::vector<std::string> servers;  // "127.0.0.1:6379"; several only with cluster = true (seeds)
  bool cluster = false;
  std::string username;
  std::string password;  // secret; masked when printed
  bool tls = false;      // TLS to this Redis, the tls_* keys as storage.redis's (SPEC R14)
  std::string tls_ca_file;
  std::string tls_cert_file;
  std::string tls_key_file;
  std::string tls_server_name;
  uint32_t db = 0;
  std::vector<std::string> streams;
  std::string group = "ringcast";
  std::string consumer;  // default: intake.node_id, else "<hostname>-<hash of the data dir>"
  std::string tenant_field = "tenant";
  std::string id_field = "id";
  std::string type_field = "type";
  std::string payload_field = "payload";
  std::string ordering_key_field = "ordering_key";  // SPEC R13.1: optional in an entry
  std::string dead_letter_stream = "ringcast:dead-letter";
  uint32_t dead_letter_max_len = 0;      // XADD MAXLEN ~ on the dead-letter stream; 0: untrimmed
  uint32_t batch = 512;                  // COUNT per XREADGROUP
  Duration block = seconds(1);           // BLOCK per XREADGROUP
  uint32_t max_unacked = 16384;          // read, not yet durable + acked (memory bound)
  Duration claim_idle = seconds(30);     // XAUTOCLAIM min-idle-time (a dead consumer's entries)
  Duration claim_interval = seconds(5);  // how often to look for them
};

// One `[[intake.nats]]` source (operations.md §6 "NATS JetStream"): a durable pull consumer on a
// JetStream stream that feeds the same intake (intake/nats_source.h). File only, like
// [[intake.redis]].
struct NatsIntakeConfig {
  std::string name;                  // metrics label; default "nats-<n>" (1-based)
  std::vector<std::string> servers;  // "127.0.0.1:4222" (nats:// or tls:// prefix allowed)
  std::string token;                 // secret; masked when printed
  std::string user;
  std::string password;        // secret
  std::string nkey_seed_file;  // NKEY auth: a file holding the user's seed ("SU…")
  bool tls = false;            // SPEC R14
  std::string tls_ca_file;
  std::string tls_cert_file;
  std::string tls_key_file;
  std::string tls_server_name;
  std::string stream;
  std::string durable = "ringcast";
  std::string filter_subject;        // empty: every subject of the stream
  std::string envelope = "headers";  // "headers" | "json"
  // Empty: the envelope's default (headers: Ringcast-Tenant, Ringcast-Id, Ringcast-Type,
  // Ringcast-Ordering-Key, the body is the payload; json: tenant, id, type, payload,
  // ordering_key).
  std::string tenant_field;
  std::string id_field;
  std::string type_field;
  std::string payload_field;
  std::string ordering_key_field;
  std::string dead_letter_subject = "ringcast.dead-letter";
  uint32_t batch = 256;                    // messages per pull request
  Duration expires = seconds(1);           // a pull request's expiry
  uint32_t max_unacked = 16384;            // held, not yet durable + acked (memory bound)
  uint32_t max_ack_pending = 0;            // the consumer's; 0: 4 x max_unacked
  Duration ack_wait = seconds(30);         // the consumer's: when a dead node's messages come back
  Duration nak_delay = milliseconds(500);  // transient refusals are redelivered after this
};

struct IntakeConfig {
  std::string node_id;  // the default consumer name of every source (stable per node)
  std::vector<RedisIntakeConfig> redis;
  std::vector<NatsIntakeConfig> nats{};
};

// [cluster] (storage.backend = "redis"): N ringcast nodes share the partitions by fenced
// leases (cluster/lease.h). enabled = false: this one node owns every partition on Redis.
struct ClusterConfig {
  bool enabled = false;
  std::string node_id;  // stable per node, unique in the cluster; default: intake.node_id, else
                        // "<hostname>-<listen port>"
  Duration lease_ttl = seconds(3);
  Duration heartbeat_interval = seconds(1);
  Duration member_ttl = seconds(3);
  Duration safety_margin = milliseconds(300);
  // How often a shard looks into the inboxes of the partitions it owns (events other nodes
  // queued for them, core/inbox.h): the most a queued event waits before its fan-out.
  Duration inbox_poll = milliseconds(100);
  // Where the other nodes reach this node's API ("http://<IP>:<port>"): published with the
  // heartbeat; calls for partitions this node owns are forwarded there (api/forward.h).
  // Empty: derived from server.listen (with the bound port when it is 0); a listener on
  // 0.0.0.0 / :: names no address, so it then must be set.
  std::string advertise_url;
  // Signs what one node forwards to another (api/forward_auth.h): required in cluster mode, at
  // least 32 characters, the same on every node, and used for nothing else.
  std::string secret;
  // The CA that signed the nodes' certificates (server.tls_cert), PEM: an https:// advertised
  // URL is forwarded to over TLS and verified against it; empty: the system's trust store.
  std::string ca_file;
  Duration forward_timeout = seconds(5);  // a forwarded call is answered within this
  uint32_t max_forwards = 16;             // forwarded calls at once (as many more may wait)
};

// [log] (docs/operations.md §5 "Logs"): the daemon's log (log/log.h), set up by `serve`.
struct LogConfig {
  std::string level = "info";   // "debug" | "info" | "warn" | "error"
  std::string format = "text";  // "text": "ringcast: <message>"; "json": an object per line
  double rate_per_second = 20;  // lines per second per event kind, past the burst; 0: no limit
  uint32_t burst = 100;
};

struct Config {
  ServerConfig server;
  ClusterConfig cluster;
  StorageConfig storage;
  EngineConfig engine;
  TransportConfig transport;
  std::map<std::string, PolicyConfig> policies;  // by name; never "smengo" / "xhub"
  SigningConfig signing;
  NotificationsConfig notifications;
  PortalConfig portal;
  LimitsConfig limits;
  IntakeConfig intake;
  TracingConfig tracing;
  LogConfig log{};

  std::string source;                 // the file it came from, or "" for defaults only
  std::vector<std::string> warnings;  // e.g. unknown RINGCAST_* variables; printed by `check`

  // Throws ConfigError naming the first key at fault. load_config() calls it.
  void validate() const;
  // The effective configuration as TOML; secrets are shown as "***" when `mask_secrets`.
  std::string to_toml(bool mask_secrets = true) const;
  // True for "smengo", "xhub" and every [policies.<name>].
  bool has_policy(std::string_view name) const;
  // Every [policies.<name>] as a core RetryPolicy (validated), ready for PolicyRegistry::put().
  std::vector<RetryPolicy> retry_policies() const;
};

// The process environment's RINGCAST_* variables as a map, for load_config(). A variable set
// to the empty string counts as unset. (Explicit, STYLE 9: tests pass their own.)
using Environment = std::map<std::string, std::string>;
Environment process_environment();

// Loads `path` (empty: defaults only), applies RINGCAST_* overrides from `env`, resolves
// `engine.shards = 0` to the core count, validates. Throws ConfigError.
Config load_config(const std::string& path, const Environment& env);
// The same from TOML text; `origin` names it in messages.
Config load_config_from_string(std::string_view toml_text, const Environment& env,
                               const std::string& origin = "<string>");

// "100ms", "15m", "1h30m", "30d" → Duration; nullopt on bad text or overflow.
std::optional<Duration> parse_duration(std::string_view text);
// The shortest exact spelling: 1800s → "30m", 90 min → "90m", 0 → "0s".
std::string format_duration(Duration d);
// "1048576", "1MiB", "64KiB", "2GiB", "10MB", "512B" → bytes; nullopt on bad text or overflow.
std::optional<uint64_t> parse_bytes(std::string_view text);
std::string format_bytes(uint64_t bytes);
// "127.0.0.1:8080", "[::1]:0", "localhost:8080" → address and port.
std::optional<std::pair<IpAddress, uint16_t>> parse_listen(std::string_view text);

}  // namespace ringcast
