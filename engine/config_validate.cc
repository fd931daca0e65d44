// Config::validate() (docs/operations.md §2 "Validation"): every value in range and every
// relation between keys, checked at start-up, and TLS to Redis as docs/security.md "Redis" says.
#include "engine/config.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <utility>

#include "cluster/advertise_url.h"
#include "core/input_rules.h"
#include "core/result.h"
#include "core/url.h"
#include "engine/config_internal.h"
#include "net/signing.h"
#include "net/tls.h"
#include "redis/tls_options.h"

namespace ringcast {

using config_detail::fail;

namespace {

bool file_readable(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), R_OK) == 0;
}

// A DNS name or an IP literal (what a certificate's SAN can carry), nothing else.
bool valid_server_name(const std::string& name) {
  if (name.empty() || name.size() > 253 || name.front() == '.' || name.front() == '-') return false;
  return std::all_of(name.begin(), name.end(), [](unsigned char c) {
    return std::isalnum(c) || c == '.' || c == '-' || c == ':';
  });
}

// TLS to Redis (SPEC R14, docs/security.md "Redis"), for storage.redis and each
// [[intake.redis]] and [[intake.nats]] (`prefix`): no tls_* key while tls is off (it would silently
// do nothing), a certificate with its key, files that can be read, and the context built once here
// as the connections will build it (a PEM that does not parse, a key that does not match its
// certificate, no trust anchors at all) so that `config check` finds it, naming the key.
void check_redis_tls(const std::string& prefix, bool tls, const std::string& ca,
                     const std::string& cert, const std::string& key,
                     const std::string& server_name) {
  const std::pair<const char*, const std::string*> keys[] = {{"tls_ca_file", &ca},
                                                             {"tls_cert_file", &cert},
                                                             {"tls_key_file", &key},
                                                             {"tls_server_name", &server_name}};
  if (!tls) {
    for (const auto& [k, v] : keys) {
      if (!v->empty())
        fail("", prefix + "." + k, "is set but " + prefix + ".tls is false: set tls = true");
    }
    return;
  }
  if (cert.empty() != key.empty()) {
    const std::string have = prefix + (cert.empty() ? ".tls_key_file" : ".tls_cert_file");
    const std::string missing = prefix + (cert.empty() ? ".tls_cert_file" : ".tls_key_file");
    fail("", missing, "must be set together with " + have + " (a client certificate and its key)");
  }
  for (const auto& [k, v] : keys) {
    if (v == &server_name || v->empty()) continue;
    if (!file_readable(*v)) fail("", prefix + "." + k, "cannot read \"" + *v + "\"");
  }
  if (!server_name.empty() && !valid_server_name(server_name))
    fail("", prefix + ".tls_server_name",
         "expected a DNS name or an IP address, got \"" + server_name + "\"");
  redis::TlsOptions o;
  o.enabled = true;
  o.ca_file = ca;
  o.cert_file = cert;
  o.key_file = key;
  o.server_name = server_name;
  auto ctx = redis::make_tls_context(o);
  if (!ctx.ok()) {
    const char* field = ctx.error().field != nullptr ? ctx.error().field : "tls_ca_file";
    std::string what = ctx.error().message;
    if (std::string_view(field) == "tls_ca_file" && ca.empty())
      what += " (the system CA bundle is missing: set " + prefix + ".tls_ca_file)";
    fail("", prefix + "." + field, what);
  }
}

// A NATS subject (`wildcards`: with "*" tokens and a final ">"): dot-separated tokens of
// printable ASCII without spaces, none empty.
bool nats_subject(std::string_view s, bool wildcards) {
  if (s.empty()) return false;
  size_t start = 0;
  for (;;) {
    const size_t dot = s.find('.', start);
    const std::string_view tok = s.substr(start, dot == std::string_view::npos ? dot : dot - start);
    if (tok.empty()) return false;
    for (char c : tok)
      if (static_cast<unsigned char>(c) <= 0x20 || static_cast<unsigned char>(c) >= 0x7f)
        return false;
    if ((tok == "*" || tok == ">") && (!wildcards || (tok == ">" && dot != std::string_view::npos)))
      return false;
    if (dot == std::string_view::npos) return true;
    start = dot + 1;
  }
}

// Whether the subject `filter` (wildcards allowed) matches the literal subject `s`.
bool nats_matches(std::string_view filter, std::string_view s) {
  for (;;) {
    const size_t fd = filter.find('.'), sd = s.find('.');
    const std::string_view ft = filter.substr(0, fd), st = s.substr(0, sd);
    if (ft == ">") return true;
    if (ft != "*" && ft != st) return false;
    if (fd == std::string_view::npos || sd == std::string_view::npos)
      return fd == std::string_view::npos && sd == std::string_view::npos;
    filter.remove_prefix(fd + 1);
    s.remove_prefix(sd + 1);
  }
}

// [[intake.nats]] (operations.md §6 "NATS JetStream"), `key` its prefix.
void check_nats_intake(const NatsIntakeConfig& n, const std::string& key) {
  if (n.servers.empty()) fail("", key + ".servers", "at least one \"host:port\" is required");
  for (size_t j = 0; j < n.servers.size(); ++j) {
    std::string_view a = n.servers[j];
    for (std::string_view scheme : {"nats://", "tls://"})
      if (a.substr(0, scheme.size()) == scheme) a.remove_prefix(scheme.size());
    auto at = parse_listen(std::string(a));
    const bool numeric =
        !a.empty() && (std::isdigit(static_cast<unsigned char>(a[0])) || a[0] == '[');
    if (!at || at->second == 0 || !numeric)
      fail("", key + ".servers[" + std::to_string(j) + "]",
           "expected a numeric host:port such as \"127.0.0.1:4222\", got \"" + n.servers[j] + "\"");
  }
  if (!n.token.empty() + !n.user.empty() + !n.nkey_seed_file.empty() > 1)
    fail("", key + (n.token.empty() ? ".nkey_seed_file" : ".token"),
         "a source authenticates by one of token, user + password or nkey_seed_file, not both");
  if (!n.nkey_seed_file.empty() && !file_readable(n.nkey_seed_file))
    fail("", key + ".nkey_seed_file", "cannot read \"" + n.nkey_seed_file + "\"");
  if (n.user.empty() != n.password.empty())
    fail("", n.user.empty() ? key + ".user" : key + ".password", "user and password go together");
  auto name_ok = [](const std::string& s) {
    return nats_subject(s, false) && s.find('.') == std::string::npos;
  };
  if (!name_ok(n.stream))
    fail("", key + ".stream", "a JetStream stream name is required (no dots, spaces or wildcards)");
  if (!name_ok(n.durable))
    fail("", key + ".durable", "must be a consumer name (no dots, spaces or wildcards)");
  if (!n.filter_subject.empty() && !nats_subject(n.filter_subject, true))
    fail("", key + ".filter_subject", "is not a NATS subject: \"" + n.filter_subject + "\"");
  if (!nats_subject(n.dead_letter_subject, false))
    fail("", key + ".dead_letter_subject",
         "must be a NATS subject without wildcards, got \"" + n.dead_letter_subject + "\"");
  if (!n.filter_subject.empty() && nats_matches(n.filter_subject, n.dead_letter_subject))
    fail("", key + ".dead_letter_subject",
         "is matched by filter_subject: the source would read its own dead letters");
  const bool json = n.envelope == "json";
  if (!json && n.envelope != "headers")
    fail("", key + ".envelope", "expected \"headers\" or \"json\", got \"" + n.envelope + "\"");
  if (!json && !n.payload_field.empty())
    fail("", key + ".payload_field",
         "is for envelope = \"json\" only: with headers the message body is the payload");
  for (auto [k, v] :
       {std::pair{".tenant_field", &n.tenant_field}, std::pair{".id_field", &n.id_field},
        std::pair{".type_field", &n.type_field}, std::pair{".payload_field", &n.payload_field},
        std::pair{".ordering_key_field", &n.ordering_key_field}}) {
    if (!json && v == &n.payload_field) continue;
    if (v->empty()) fail("", key + k, "a field name must not be empty");
    if (!json && v->find_first_of(": \t\r\n") != std::string::npos)
      fail("", key + k, "a header name has no ':', spaces or line breaks");
  }
  if (n.max_unacked < n.batch)
    fail("", key + ".max_unacked", "must be at least batch (" + std::to_string(n.batch) + ")");
  if (n.max_ack_pending != 0 && n.max_ack_pending < n.max_unacked)
    fail("", key + ".max_ack_pending", "must be 0 (4 x max_unacked) or at least max_unacked");
  if (n.expires < milliseconds(10) || n.expires > seconds(300))
    fail("", key + ".expires", "must be between 10ms and 5m");
  if (n.ack_wait < seconds(1)) fail("", key + ".ack_wait", "must be at least 1s");
  if (n.nak_delay < Duration(0) || n.nak_delay > std::chrono::hours(1))
    fail("", key + ".nak_delay", "must be between 0s and 1h");
  check_redis_tls(key, n.tls, n.tls_ca_file, n.tls_cert_file, n.tls_key_file, n.tls_server_name);
}

}  // namespace

void Config::validate() const {
  auto positive = [](const char* key, Duration d) {
    if (d <= Duration(0)) fail("", key, "must be greater than 0s");
  };
  // server
  auto listen = parse_listen(server.listen);
  if (!listen) fail("", "server.listen", "expected host:port, got \"" + server.listen + "\"");
  // SPEC R14 (docs/security.md "Secrets"): no secret short enough to guess offline.
  auto strong = [](const char* key, const std::string& v, bool required) {
    if (v.empty()) {
      if (required) fail("", key, "must be set (at least 32 characters: openssl rand -hex 32)");
      return;
    }
    for (unsigned char c : v) {
      if (c <= 0x20 || c >= 0x7f) fail("", key, "must be printable ASCII without spaces");
    }
    if (v.size() < 32) {
      fail("", key,
           "must be at least 32 characters (has " + std::to_string(v.size()) +
               "): openssl rand -hex 32");
    }
  };
  strong("server.api_token", server.api_token, false);
  strong("portal.secret", portal.secret, false);
  if (!cluster.enabled) strong("cluster.secret", cluster.secret, false);
  if (server.tls_cert.empty() != server.tls_key.empty()) {
    fail("", server.tls_cert.empty() ? "server.tls_cert" : "server.tls_key",
         "must be set together with " +
             std::string(server.tls_cert.empty() ? "server.tls_key" : "server.tls_cert"));
  }
  if (!server.metrics_listen.empty() && !parse_listen(server.metrics_listen)) {
    fail("", "server.metrics_listen", "expected host:port, got \"" + server.metrics_listen + "\"");
  }
  positive("server.shutdown_grace", server.shutdown_grace);
  positive("server.idle_timeout", server.idle_timeout);
  positive("limits.stats_max_time", limits.stats_max_time);
  // storage
  if (storage.data_dir.empty()) fail("", "storage.data_dir", "must not be empty");
  positive("storage.sync_interval", storage.sync_interval);
  if (storage.retention < hours(1)) fail("", "storage.retention", "must be at least 1h");
  positive("storage.retention_interval", storage.retention_interval);
  if (storage.backend != "rocksdb" && storage.backend != "redis")
    fail("", "storage.backend", "must be \"rocksdb\" or \"redis\"");
  if (storage.backend == "redis") {
    if (storage.redis.servers.empty())
      fail("", "storage.redis.servers", "must name at least one host:port");
    if (storage.redis.servers.size() > 1 && !storage.redis.cluster)
      fail("", "storage.redis.servers", "several servers only with storage.redis.cluster = true");
    if (storage.redis.ns.empty() || storage.redis.ns.find_first_of("{}") != std::string::npos)
      fail("", "storage.redis.namespace", "must be non-empty, without { or }");
    positive("storage.redis.wait_timeout", storage.redis.wait_timeout);
    positive("storage.redis.command_timeout", storage.redis.command_timeout);
    if (storage.redis.max_memory_bytes != 0 && storage.redis.max_memory_bytes < (uint64_t{1} << 20))
      fail("", "storage.redis.max_memory_bytes", "must be 0 (the servers' maxmemory) or >= 1MiB");
    const RedisStorageConfig& r = storage.redis;
    check_redis_tls("storage.redis", r.tls, r.tls_ca_file, r.tls_cert_file, r.tls_key_file,
                    r.tls_server_name);
  }
  if (cluster.enabled) {
    if (storage.backend != "redis")
      fail("", "cluster.enabled", "cluster mode needs storage.backend = \"redis\"");
    positive("cluster.lease_ttl", cluster.lease_ttl);
    positive("cluster.heartbeat_interval", cluster.heartbeat_interval);
    positive("cluster.member_ttl", cluster.member_ttl);
    positive("cluster.inbox_poll", cluster.inbox_poll);
    if (cluster.safety_margin * 3 >= cluster.lease_ttl)
      fail("", "cluster.safety_margin", "must be less than cluster.lease_ttl / 3");
    positive("cluster.forward_timeout", cluster.forward_timeout);
    if (!cluster.advertise_url.empty()) {
      if (!cluster::parse_advertise_url(cluster.advertise_url))
        fail("", "cluster.advertise_url",
             "expected http://<IP>:<port> such as \"http://10.0.0.7:8080\" (an IP address, "
             "not a name), got \"" +
                 cluster.advertise_url + "\"");
    } else if (!cluster::derive_advertise_url(listen->first, 1)) {
      fail("", "cluster.advertise_url",
           "server.listen = \"" + server.listen +
               "\" listens on every address, so it names none the other nodes could reach this "
               "one at: set cluster.advertise_url = \"http://<this node's IP>:<port>\"");
    }
    // Last, so that a wrong cluster setting is named before a missing secret.
    strong("cluster.secret", cluster.secret, true);
  }
  // engine
  if (engine.shards == 0) fail("", "engine.shards", "must be resolved to at least 1");
  positive("engine.subscription_postpone", engine.subscription_postpone);
  positive("engine.reconcile_deadline", engine.reconcile_deadline);
  if (engine.reconcile_schedule.empty())
    fail("", "engine.reconcile_schedule", "must name at least one pause");
  for (size_t i = 0; i < engine.reconcile_schedule.size(); ++i) {
    if (engine.reconcile_schedule[i] > Duration(0)) continue;
    std::string key = "engine.reconcile_schedule[";  // piece by piece: GCC 12's -Wrestrict
    key += std::to_string(i);
    key += ']';
    fail("", key, "must be greater than 0s");
  }
  const auto& b = engine.breaker;
  positive("engine.breaker.window", b.window);
  positive("engine.breaker.open_pause", b.open_pause);
  positive("engine.breaker.probe_recheck", b.probe_recheck);
  positive("engine.breaker.hold_ceiling", b.hold_ceiling);
  if (b.max_pause < b.open_pause)
    fail("", "engine.breaker.max_pause",
         "must be at least engine.breaker.open_pause (" + format_duration(b.open_pause) + ")");
  // transport
  positive("transport.connect_timeout", transport.connect_timeout);
  positive("transport.tls_timeout", transport.tls_timeout);
  positive("transport.request_timeout", transport.request_timeout);
  positive("transport.max_queue_wait", transport.max_queue_wait);
  positive("transport.dns_timeout", transport.dns_timeout);
  positive("transport.idle_timeout", transport.idle_timeout);
  for (size_t i = 0; i < transport.allow_private.size(); ++i) {
    if (!parse_cidr(transport.allow_private[i]))
      fail("", "transport.allow_private[" + std::to_string(i) + "]",
           "expected a CIDR, got \"" + transport.allow_private[i] + "\"");
  }
  if (!transport.ca_file.empty() && !file_readable(transport.ca_file))
    fail("", "transport.ca_file", "cannot read \"" + transport.ca_file + "\"");
  if (transport.user_agent.find_first_of("\r\n") != std::string::npos)
    fail("", "transport.user_agent", "must be one line");
  // portal (operations.md §9)
  if (!portal.public_url.empty() && !portal.public_url.starts_with("https://") &&
      !portal.public_url.starts_with("http://")) {
    fail("", "portal.public_url", "must start with https:// (or http:// behind nothing)");
  }
  if (portal.link_ttl <= Duration::zero() || portal.link_ttl > portal.link_ttl_max) {
    fail("", "portal.link_ttl", "must be above 0 and at most portal.link_ttl_max");
  }
  if (portal.session_ttl <= Duration::zero()) fail("", "portal.session_ttl", "must be above 0");
  for (const auto& o : portal.frame_ancestors) {
    if (o == "'self'") continue;
    const bool origin = o.starts_with("https://") || o.starts_with("http://");
    if (!origin || o.find_first_of(" ;,'\"\r\n") != std::string::npos) {
      fail("", "portal.frame_ancestors", "each entry is an origin (https://host[:port]) or 'self'");
    }
  }
  if (server.key_refresh <= Duration::zero()) fail("", "server.key_refresh", "must be above 0");
  // notifications
  if (!notifications.webhook_url.empty()) {
    UrlPolicy up;
    up.allow_http = transport.allow_http;
    up.max_bytes = transport.max_url_bytes;
    if (!transport.allowed_ports.empty()) up.allowed_ports = transport.allowed_ports;
    auto url = check_url(notifications.webhook_url, up);
    if (!url.ok())
      fail("", "notifications.webhook_url",
           std::string(url.error().reason_or_code()) + ": " + url.error().message);
  }
  if (!notifications.webhook_secret.empty()) {
    auto key = net::decode_secret(notifications.webhook_secret);
    if (!key || key->empty())
      fail("", "notifications.webhook_secret", "a whsec_ secret must be valid, non-empty base64");
  }
  {  // the owner's e-mail (SPEC R8.4)
    const auto& sm = notifications.smtp;
    auto one_line = [](const std::string& v) { return v.find_first_of("\r\n") == v.npos; };
    if (sm.starttls != "required" && sm.starttls != "opportunistic" && sm.starttls != "off")
      fail("", "notifications.smtp.starttls",
           "expected \"required\", \"opportunistic\" or \"off\", got \"" + sm.starttls + "\"");
    if (!one_line(sm.host)) fail("", "notifications.smtp.host", "must be one line");
    if (!sm.host.empty() && !valid_email(sm.from))
      fail("", "notifications.smtp.from",
           "a plain address (local@domain) is required when notifications.smtp.host is set");
    if (!one_line(sm.from_name)) fail("", "notifications.smtp.from_name", "must be one line");
    if (!sm.helo_name.empty() &&
        (!one_line(sm.helo_name) || sm.helo_name.find(' ') != std::string::npos))
      fail("", "notifications.smtp.helo_name", "must be a host name");
    if (!sm.ca_file.empty() && !file_readable(sm.ca_file))
      fail("", "notifications.smtp.ca_file", "cannot read \"" + sm.ca_file + "\"");
    if (!sm.password_file.empty() && !file_readable(sm.password_file))
      fail("", "notifications.smtp.password_file", "cannot read \"" + sm.password_file + "\"");
    if (!sm.password.empty() && !sm.password_file.empty())
      fail("", "notifications.smtp.password_file", "set password or password_file, not both");
    if ((!sm.password.empty() || !sm.password_file.empty()) && sm.username.empty())
      fail("", "notifications.smtp.username", "required with a password");
    if (!sm.username.empty() && !sm.allow_auth_without_tls && sm.starttls != "required")
      fail("", "notifications.smtp.starttls",
           "must be \"required\" with a username (credentials never go out in clear) unless "
           "notifications.smtp.allow_auth_without_tls = true");
    positive("notifications.smtp.timeout", sm.timeout);
    const auto& em = notifications.email;
    if (!one_line(em.portal_url)) fail("", "notifications.email.portal_url", "must be one line");
    if (em.confirm_interval < Duration::zero())
      fail("", "notifications.email.confirm_interval", "must not be negative");
    if (em.confirm_link_ttl <= Duration::zero())
      fail("", "notifications.email.confirm_link_ttl", "must be positive");
    if (!em.portal_url.empty() && em.portal_url.rfind("https://", 0) != 0 &&
        em.portal_url.rfind("http://", 0) != 0)
      fail("", "notifications.email.portal_url", "must be an http(s):// URL template");
    for (size_t i = 0; i < em.retry_ladder.size(); ++i) {
      if (em.retry_ladder[i] <= Duration(0))
        fail("", "notifications.email.retry_ladder[" + std::to_string(i) + "]", "must be positive");
    }
  }
  // tracing (docs/tracing.md): the collector is an operator's address like the notifications
  // webhook, so it passes the same URL rules (and at run time the same address guard).
  if (!tracing.endpoint.empty()) {
    UrlPolicy up;
    up.allow_http = transport.allow_http;
    up.max_bytes = transport.max_url_bytes;
    if (!transport.allowed_ports.empty()) up.allowed_ports = transport.allowed_ports;
    auto url = check_url(tracing.endpoint, up);
    if (!url.ok())
      fail("", "tracing.endpoint",
           std::string(url.error().reason_or_code()) + ": " + url.error().message +
               (url.error().reason_or_code() == std::string_view("not_https")
                    ? " (an http:// collector needs transport.allow_http = true)"
                    : ""));
  }
  if (tracing.service_name.empty() || tracing.service_name.size() > 256 ||
      !std::all_of(tracing.service_name.begin(), tracing.service_name.end(),
                   [](unsigned char c) { return c >= 0x20 && c < 0x7f; })) {
    fail("", "tracing.service_name", "must be 1-256 printable ASCII characters");
  }
  // limits
  if (limits.max_bulk_body_bytes < limits.max_body_bytes)
    fail("", "limits.max_bulk_body_bytes",
         "must be at least limits.max_body_bytes (" + format_bytes(limits.max_body_bytes) + ")");
  // signing
  if (signing.rotation_overlap < Duration(0))
    fail("", "signing.rotation_overlap", "must not be negative");
  // log (operations.md §5 "Logs")
  if (log.level != "debug" && log.level != "info" && log.level != "warn" && log.level != "error") {
    std::string what = "expected \"debug\", \"info\", \"warn\" or \"error\", got \"";
    what += log.level;
    what += '"';
    fail("", "log.level", what);
  }
  if (log.format != "text" && log.format != "json") {
    std::string what = "expected \"text\" or \"json\", got \"";
    what += log.format;
    what += '"';
    fail("", "log.format", what);
  }
  // intake (operations.md §6)
  std::set<std::string> intake_names;
  for (size_t i = 0; i < intake.redis.size(); ++i) {
    const RedisIntakeConfig& r = intake.redis[i];
    const std::string key = "intake.redis[" + std::to_string(i) + "]";
    if (!intake_names.insert(r.name).second)
      fail("", key + ".name", "two sources are named \"" + r.name + "\"");
    if (r.servers.empty()) fail("", key + ".servers", "at least one \"host:port\" is required");
    if (!r.cluster && r.servers.size() > 1)
      fail("", key + ".servers", "several servers are cluster seeds: set cluster = true");
    for (size_t j = 0; j < r.servers.size(); ++j) {
      auto a = parse_listen(r.servers[j]);
      if (!a || a->second == 0 || r.servers[j].rfind("localhost", 0) == 0)
        fail("", key + ".servers[" + std::to_string(j) + "]",
             "expected a numeric host:port such as \"127.0.0.1:6379\", got \"" + r.servers[j] +
                 "\"");
    }
    if (r.streams.empty() || r.streams.size() > 64)
      fail("", key + ".streams", "between 1 and 64 stream keys are required");
    for (const auto& s : r.streams) {
      if (s.empty()) fail("", key + ".streams", "a stream key must not be empty");
      if (s == r.dead_letter_stream)
        fail("", key + ".dead_letter_stream", "must not be one of the streams read");
    }
    if (r.dead_letter_stream.empty()) fail("", key + ".dead_letter_stream", "must not be empty");
    if (r.group.empty()) fail("", key + ".group", "must not be empty");
    for (const auto* f :
         {&r.tenant_field, &r.id_field, &r.type_field, &r.payload_field, &r.ordering_key_field})
      if (f->empty()) fail("", key + ".*_field", "a field name must not be empty");
    if (r.block < milliseconds(1) || r.block > seconds(60))
      fail("", key + ".block", "must be between 1ms and 60s");
    if (r.max_unacked < r.batch)
      fail("", key + ".max_unacked", "must be at least batch (" + std::to_string(r.batch) + ")");
    if (r.claim_idle < milliseconds(100)) fail("", key + ".claim_idle", "must be at least 100ms");
    if (r.claim_interval < milliseconds(10))
      fail("", key + ".claim_interval", "must be at least 10ms");
    check_redis_tls(key, r.tls, r.tls_ca_file, r.tls_cert_file, r.tls_key_file, r.tls_server_name);
  }
  for (size_t i = 0; i < intake.nats.size(); ++i) {
    const std::string key = "intake.nats[" + std::to_string(i) + "]";
    if (!intake_names.insert(intake.nats[i].name).second)
      fail("", key + ".name", "two sources are named \"" + intake.nats[i].name + "\"");
    check_nats_intake(intake.nats[i], key);
  }
  // policies
  for (const auto& [name, p] : policies) {
    std::string key = "policies." + name;
    if (p.base != "smengo" && p.base != "xhub")
      fail("", key + ".base", "expected \"smengo\" or \"xhub\", got \"" + p.base + "\"");
    for (size_t i = 0; i < p.ladder.size(); ++i) {
      if (p.ladder[i] <= Duration(0))
        fail("", key + ".ladder[" + std::to_string(i) + "]", "must be greater than 0s");
    }
    for (size_t i = 0; i < p.slow_ladder.size(); ++i) {
      if (p.slow_ladder[i] <= Duration(0))
        fail("", key + ".slow_ladder[" + std::to_string(i) + "]", "must be greater than 0s");
    }
    if (p.ladder.size() + 1 > 255) fail("", key + ".ladder", "at most 254 pauses");
    if (p.slow_ladder.size() > 255) fail("", key + ".slow_ladder", "at most 255 pauses");
    if (!p.slow_ladder.empty() && p.base != "xhub")
      fail("", key + ".slow_ladder", "only a policy with base = \"xhub\" has a slow ladder");
    if (p.slow_ceiling && p.base != "xhub")
      fail("", key + ".slow_ceiling", "only a policy with base = \"xhub\" has a slow ladder");
    if (p.slow_ceiling && *p.slow_ceiling < Duration(0))
      fail("", key + ".slow_ceiling", "must not be negative");
    if (p.max_age && *p.max_age < Duration(0)) fail("", key + ".max_age", "must not be negative");
    Result<void> v = to_retry_policy(p).validate();
    if (!v) fail("", key, std::string("invalid policy: ") + v.error().message);
  }
}

}  // namespace ringcast
