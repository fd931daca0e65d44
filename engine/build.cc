#include "engine/build.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <thread>

#include "log/log.h"
#include "net/signing.h"

namespace ringcast::engine {

storage::StoreOptions store_options(const Config& cfg) {
  storage::StoreOptions o;
  o.path = cfg.storage.data_dir;
  o.sync = cfg.storage.sync;
  o.sync_interval = cfg.storage.sync_interval;
  o.retention = cfg.storage.retention;
  return o;
}

namespace {
template <class C>
redis::TlsOptions tls_of(const C& r) {
  redis::TlsOptions t;
  t.enabled = r.tls;
  t.ca_file = r.tls_ca_file;
  t.cert_file = r.tls_cert_file;
  t.key_file = r.tls_key_file;
  t.server_name = r.tls_server_name;
  return t;
}
}  // namespace

redis::TlsOptions redis_tls_options(const RedisStorageConfig& r) {
  return tls_of(r);
}
redis::TlsOptions redis_tls_options(const RedisIntakeConfig& r) {
  return tls_of(r);
}

RedisModeOptions redis_mode_options(const Config& cfg) {
  RedisModeOptions o;
  const RedisStorageConfig& r = cfg.storage.redis;
  o.store.servers = r.servers;
  o.store.cluster = r.cluster;
  o.store.username = r.username;
  o.store.password = r.password;
  o.store.tls = redis_tls_options(r);  // SPEC R14: the store, the leases, the inboxes alike
  o.store.ns = r.ns;
  o.store.wait_replicas = r.wait_replicas;
  o.store.wait_timeout = r.wait_timeout;
  o.store.command_timeout = r.command_timeout;
  o.store.retention = cfg.storage.retention;  // SPEC R10.1
  o.store.high_water = r.high_water;
  o.store.max_memory_bytes = r.max_memory_bytes;
  o.release_grace = cfg.server.shutdown_grace;
  if (cfg.cluster.enabled) {
    cluster::LeaseOptions l;
    l.servers = r.servers;
    l.cluster = r.cluster;
    l.username = r.username;
    l.password = r.password;
    l.tls = o.store.tls;
    l.ns = r.ns;
    l.node_id = !cfg.cluster.node_id.empty() ? cfg.cluster.node_id : cfg.intake.node_id;
    l.lease_ttl = cfg.cluster.lease_ttl;
    l.safety_margin = cfg.cluster.safety_margin;
    l.heartbeat_interval = cfg.cluster.heartbeat_interval;
    l.member_ttl = cfg.cluster.member_ttl;
    o.ownership = std::move(l);
  }
  return o;
}

static UrlPolicy url_policy(const Config& cfg) {
  UrlPolicy u;
  u.allow_http = cfg.transport.allow_http;
  u.max_bytes = cfg.transport.max_url_bytes;
  u.allowed_ports = cfg.transport.allowed_ports;
  return u;
}

net::HttpTransportOptions transport_options(const Config& cfg) {
  net::HttpTransportOptions t;
  t.exchange_timeout = cfg.transport.request_timeout;
  t.connect_timeout = cfg.transport.connect_timeout;
  t.tls_handshake_timeout = cfg.transport.tls_timeout;
  t.idle_timeout = cfg.transport.idle_timeout;
  t.max_connections_per_host = cfg.transport.pool_size;
  t.response.header_bytes_max = cfg.transport.max_response_header_bytes;
  t.response.body_drain_max = cfg.transport.max_response_drain_bytes;
  t.default_rate = RateLimit{cfg.transport.host_rate_per_second, cfg.transport.host_burst};
  t.max_queue_wait = cfg.transport.max_queue_wait;
  t.max_queued_per_host = cfg.transport.max_queued_per_host;
  t.url_policy = url_policy(cfg);
  // From the text (validate() refuses what does not parse), so that a Config built in code
  // needs only allow_private, like a TOML file.
  for (const std::string& c : cfg.transport.allow_private) {
    if (auto cidr = parse_cidr(c)) t.allow_list.push_back(*cidr);
  }
  t.tls.extra_ca_file = cfg.transport.ca_file;
  t.dns.deadline = cfg.transport.dns_timeout;
  t.dns.ttl_max = cfg.transport.dns_cache_max_ttl;
  if (!cfg.transport.user_agent.empty()) t.user_agent = cfg.transport.user_agent;
  return t;
}

EngineOptions engine_options(const Config& cfg) {
  EngineOptions e;
  // 0 (one per core) is resolved by load_config(); a Config built in code may still hold it.
  e.shards = cfg.engine.shards ? cfg.engine.shards
                               : std::clamp(std::thread::hardware_concurrency(), 1u, 256u);
  e.payload_cache_bytes = static_cast<size_t>(cfg.engine.payload_cache_bytes);
  e.inbox_poll = cfg.cluster.inbox_poll;  // used in cluster mode only (Embedded::open_redis)
  e.scheduler.fairness_cap = cfg.engine.fairness_cap;
  e.scheduler.default_max_in_flight = cfg.engine.max_in_flight;
  e.scheduler.subscription_postpone = cfg.engine.subscription_postpone;
  e.scheduler.reconcile_schedule = cfg.engine.reconcile_schedule;
  e.scheduler.reconcile_deadline = cfg.engine.reconcile_deadline;
  e.scheduler.max_lease_expiries = cfg.engine.max_lease_expiries;
  const BreakerSettings& b = cfg.engine.breaker;
  e.scheduler.breaker.window = b.window;
  e.scheduler.breaker.min_deliveries = b.min_deliveries;
  e.scheduler.breaker.failure_percent = static_cast<uint32_t>(b.failure_ratio * 100.0 + 0.5);
  e.scheduler.breaker.first_pause = b.open_pause;
  e.scheduler.breaker.max_pause = b.max_pause;
  e.scheduler.breaker.recheck = b.probe_recheck;
  e.scheduler.breaker.hold_ceiling = b.hold_ceiling;
  e.scheduler.breaker_recheck = b.probe_recheck;
  for (RetryPolicy& p : cfg.retry_policies()) {
    auto r = e.policies.put(std::move(p));
    if (!r.ok()) throw ConfigError(std::string("policies: ") + r.error().message);
  }
  e.url_policy = url_policy(cfg);
  e.secret_rotation_overlap = cfg.signing.rotation_overlap;
  e.stop_grace = cfg.server.shutdown_grace;
  e.recover_max_in_flight = cfg.limits.recover_max_in_flight;
  e.max_requeue_jobs = cfg.limits.recover_jobs_running;
  e.max_queued_requeue_jobs = cfg.limits.recover_jobs_queued;
  e.max_endpoints_per_tenant = cfg.limits.max_endpoints_per_tenant;
  e.owner_email_confirm_interval = cfg.notifications.email.confirm_interval;
  e.test_sends_per_minute = cfg.limits.test_sends_per_minute;
  e.tenant_events_per_second = cfg.limits.tenant_events_per_second;
  net::HttpTransportOptions topts = transport_options(cfg);
  e.transport_factory = [topts](net::Loop& loop) -> std::unique_ptr<Transport> {
    auto t = net::HttpTransport::create(loop, topts);
    if (!t.ok()) {
      log::warn("transport_failed", {{"error", t.error().message}}, "transport: {}",
                t.error().message);
      return nullptr;
    }
    return std::move(*t);
  };
  return e;
}

std::string transport_problem(const Config& cfg) {
  const net::TlsClientOptions tls = transport_options(cfg).tls;
  auto ctx = net::TlsClientContext::create(tls);
  if (ctx.ok()) return "";
  const char* field = ctx.error().field ? ctx.error().field : "";
  if (std::string_view(field) == "extra_ca_file") {
    return "transport.ca_file: \"" + cfg.transport.ca_file +
           "\" holds no PEM certificate BoringSSL can load";
  }
  if (std::string_view(field) == "ca_file") {
    return "transport.ca_file: no TLS trust anchors: the system CA bundle " + tls.ca_file +
           " is missing (install ca-certificates) and transport.ca_file is not set";
  }
  return "transport: " + std::string(ctx.error().message) + " (system CA bundle " + tls.ca_file +
         ")";
}

NotifierOptions notifier_options(const Config& cfg) {
  NotifierOptions n;
  n.url = cfg.notifications.webhook_url;
  if (!cfg.notifications.webhook_secret.empty()) {
    n.secret = net::decode_secret(cfg.notifications.webhook_secret).value_or("");  // validated
  }
  n.transport = transport_options(cfg);
  // A few connections to one host: a smaller receive ring and pool than a shard's.
  n.transport.recv_buffers = 16;
  n.transport.max_connections_per_host = n.max_in_flight;
  n.transport.max_connections_total = n.max_in_flight;
  return n;
}

trace::TracerOptions tracer_options(const Config& cfg, const std::string& instance) {
  trace::TracerOptions t;
  t.url = cfg.tracing.endpoint;
  t.resource.service_name = cfg.tracing.service_name;
  t.resource.service_version = RINGCAST_VERSION;
  t.resource.service_instance = instance;
  t.queue_max = cfg.tracing.queue_max;
  t.sample_ratio = cfg.tracing.sample_ratio;
  t.transport = transport_options(cfg);
  // One POST at a time to one host: a small receive ring and pool.
  t.transport.recv_buffers = 16;
  t.transport.max_connections_per_host = 2;
  t.transport.max_connections_total = 2;
  return t;
}

MailerOptions mailer_options(const Config& cfg) {
  const auto& sm = cfg.notifications.smtp;
  MailerOptions m;
  m.smtp.host = sm.host;
  m.smtp.port = static_cast<uint16_t>(sm.port);
  if (sm.starttls == "opportunistic") {
    m.smtp.starttls = net::SmtpStartTls::kOpportunistic;
  } else if (sm.starttls == "off") {
    m.smtp.starttls = net::SmtpStartTls::kOff;
  } else {
    m.smtp.starttls = net::SmtpStartTls::kRequired;
  }
  if (!sm.ca_file.empty()) m.smtp.extra_ca_file = sm.ca_file;
  m.smtp.username = sm.username;
  m.smtp.password = sm.password;
  if (!sm.password_file.empty()) {
    std::ifstream in(sm.password_file);
    if (!in)
      throw ConfigError("notifications.smtp.password_file: cannot read \"" + sm.password_file +
                        "\"");
    std::getline(in, m.smtp.password);
    if (!m.smtp.password.empty() && m.smtp.password.back() == '\r') m.smtp.password.pop_back();
  }
  m.smtp.allow_auth_without_tls = sm.allow_auth_without_tls;
  m.smtp.timeout = sm.timeout;
  m.smtp.helo_name = sm.helo_name;
  if (m.smtp.helo_name.empty()) {
    char host[256] = {};
    if (::gethostname(host, sizeof(host) - 1) == 0 && host[0] != '\0') m.smtp.helo_name = host;
    if (m.smtp.helo_name.empty() || m.smtp.helo_name.find_first_of(" \r\n") != std::string::npos)
      m.smtp.helo_name = "localhost";
  }
  m.from = sm.from;
  m.from_name = sm.from_name;
  m.portal_url = cfg.notifications.email.portal_url;
  m.queue_max = cfg.notifications.email.queue_max;
  m.retry_ladder = cfg.notifications.email.retry_ladder;
  return m;
}

net::HttpServerOptions server_options(const Config& cfg) {
  net::HttpServerOptions s;
  s.address = cfg.server.listen_ip;
  s.port = cfg.server.listen_port;
  s.max_header_bytes = cfg.limits.max_header_bytes;
  s.max_connections = cfg.server.max_connections;
  s.max_connections_per_ip = cfg.server.max_connections_per_ip;
  s.tls_cert_file = cfg.server.tls_cert;
  s.tls_key_file = cfg.server.tls_key;
  s.idle_timeout = cfg.server.idle_timeout;
  return s;
}

}  // namespace ringcast::engine
