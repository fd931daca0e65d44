// From Config to the parts of a running daemon: store options, engine options (policies,
// scheduler limits, URL policy, a transport factory per shard) and the HTTP server's options
// (the REST API's: api/from_config.h).
// Shared by `ringcast serve`, the embedding example and the end-to-end benchmark.
#pragma once

#include "engine/config.h"
#include "engine/embedded.h"
#include "engine/mailer.h"
#include "engine/notifier.h"
#include "engine/options.h"
#include "net/http_client.h"
#include "net/http_server.h"
#include "redis/tls_options.h"
#include "storage/rocks_store.h"
#include "trace/tracer.h"

namespace ringcast::engine {

storage::StoreOptions store_options(const Config& cfg);
// storage.backend = "redis": the store's options and, with cluster.enabled, the ownership's (a
// node_id left empty by the config is for the caller to fill in).
RedisModeOptions redis_mode_options(const Config& cfg);
// TLS to Redis (SPEC R14): storage.redis.tls* / [[intake.redis]] tls* as connection options.
redis::TlsOptions redis_tls_options(const RedisStorageConfig& r);
redis::TlsOptions redis_tls_options(const RedisIntakeConfig& r);
net::HttpTransportOptions transport_options(const Config& cfg);
// Throws ConfigError when a named policy does not validate.
EngineOptions engine_options(const Config& cfg);
// The operator webhook (SPEC R8.4): the shards' transport options (same address guard,
// allow-list, URL policy and CA) and the decoded secret. url is empty when none is configured.
NotifierOptions notifier_options(const Config& cfg);
// The owner's e-mail (SPEC R8.4): [notifications.smtp] and [notifications.email]; the password
// read from password_file (its first line). smtp.host is empty when none is configured.
// Throws ConfigError when password_file cannot be read.
MailerOptions mailer_options(const Config& cfg);
// The span exporter (docs/tracing.md): [tracing], the shards' transport options (the collector
// gets the operator webhook's checks) on a smaller pool; `instance` names the node
// (service.instance.id; empty: left out). url is empty when tracing is off.
trace::TracerOptions tracer_options(const Config& cfg, const std::string& instance);
net::HttpServerOptions server_options(const Config& cfg);

// What would keep the shards' HTTP transport from being created (operations.md "Validation"): one
// line naming the key and the reason (a transport.ca_file that is not PEM, no system CA bundle), or
// "" when it can be. `ringcast serve` refuses to start on it; `config check` reports it.
std::string transport_problem(const Config& cfg);

}  // namespace ringcast::engine
