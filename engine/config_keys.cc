// The configuration's key table (docs/operations.md §2 "Keys"): every key with its kind and
// range, and how a value from the TOML file or the environment is converted and assigned to it
// (§2 "Syntax").
#include "engine/config_internal.h"

#include <toml++/toml.h>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/config.h"

namespace ringcast::config_detail {

#define RC_KEY(path, kind, member, ...)                                                  \
  KeyDef {                                                                               \
    path, Kind::kind, [](void* r) -> void* { return &static_cast<Config*>(r)->member; }, \
        ##__VA_ARGS__                                                                    \
  }
#define RC_RKEY(path, kind, member, ...)                                              \
  KeyDef {                                                                            \
    path, Kind::kind,                                                                 \
        [](void* r) -> void* { return &static_cast<RedisIntakeConfig*>(r)->member; }, \
        ##__VA_ARGS__                                                                 \
  }
#define RC_NKEY(path, kind, member, ...)                                                           \
  KeyDef {                                                                                         \
    path, Kind::kind, [](void* r) -> void* { return &static_cast<NatsIntakeConfig*>(r)->member; }, \
        ##__VA_ARGS__                                                                              \
  }
#define RC_PKEY(path, kind, member, ...)                                                       \
  KeyDef {                                                                                     \
    path, Kind::kind, [](void* r) -> void* { return &static_cast<PolicyConfig*>(r)->member; }, \
        ##__VA_ARGS__                                                                          \
  }

const std::vector<KeyDef>& config_keys() {
  static const std::vector<KeyDef> kKeys = {
      RC_KEY("server.listen", kString, server.listen),
      RC_KEY("server.api_token", kSecret, server.api_token),
      RC_KEY("server.metrics_public", kBool, server.metrics_public),
      RC_KEY("server.metrics_listen", kString, server.metrics_listen),
      RC_KEY("server.tls_cert", kString, server.tls_cert),
      RC_KEY("server.tls_key", kString, server.tls_key),
      RC_KEY("server.max_connections_per_ip", kU32, server.max_connections_per_ip, 0, 1'000'000),
      RC_KEY("server.auth_failures_per_minute", kU32, server.auth_failures_per_minute, 0,
             1'000'000),
      RC_KEY("server.key_refresh", kDuration, server.key_refresh),
      RC_KEY("server.shutdown_grace", kDuration, server.shutdown_grace),
      RC_KEY("server.max_connections", kU32, server.max_connections, 1, 1'000'000),
      RC_KEY("server.idle_timeout", kDuration, server.idle_timeout),
      RC_KEY("server.read_threads", kU32, server.read_threads, 1, 256),

      RC_KEY("storage.data_dir", kString, storage.data_dir),
      RC_KEY("storage.sync", kSync, storage.sync),
      RC_KEY("storage.sync_interval", kDuration, storage.sync_interval),
      RC_KEY("storage.retention", kDuration, storage.retention),
      RC_KEY("storage.retention_interval", kDuration, storage.retention_interval),
      RC_KEY("storage.backend", kString, storage.backend),
      RC_KEY("storage.redis.servers", kStringList, storage.redis.servers),
      RC_KEY("storage.redis.cluster", kBool, storage.redis.cluster),
      RC_KEY("storage.redis.password", kSecret, storage.redis.password),
      RC_KEY("storage.redis.username", kString, storage.redis.username),
      RC_KEY("storage.redis.tls", kBool, storage.redis.tls),
      RC_KEY("storage.redis.tls_ca_file", kString, storage.redis.tls_ca_file),
      RC_KEY("storage.redis.tls_cert_file", kString, storage.redis.tls_cert_file),
      RC_KEY("storage.redis.tls_key_file", kString, storage.redis.tls_key_file),
      RC_KEY("storage.redis.tls_server_name", kString, storage.redis.tls_server_name),
      RC_KEY("storage.redis.namespace", kString, storage.redis.ns),
      RC_KEY("storage.redis.wait_replicas", kU32, storage.redis.wait_replicas, 0, 16),
      RC_KEY("storage.redis.wait_timeout", kDuration, storage.redis.wait_timeout),
      RC_KEY("storage.redis.command_timeout", kDuration, storage.redis.command_timeout),
      RC_KEY("storage.redis.high_water", kDouble, storage.redis.high_water, 0.1, 1.0),
      RC_KEY("storage.redis.max_memory_bytes", kBytes, storage.redis.max_memory_bytes, 0,
             1024.0 * 1024 * 1024 * 1024 * 1024),
      RC_KEY("cluster.enabled", kBool, cluster.enabled),
      RC_KEY("cluster.node_id", kString, cluster.node_id),
      RC_KEY("cluster.lease_ttl", kDuration, cluster.lease_ttl),
      RC_KEY("cluster.heartbeat_interval", kDuration, cluster.heartbeat_interval),
      RC_KEY("cluster.member_ttl", kDuration, cluster.member_ttl),
      RC_KEY("cluster.safety_margin", kDuration, cluster.safety_margin),
      RC_KEY("cluster.inbox_poll", kDuration, cluster.inbox_poll),
      RC_KEY("cluster.advertise_url", kString, cluster.advertise_url),
      RC_KEY("cluster.secret", kSecret, cluster.secret),
      RC_KEY("cluster.ca_file", kString, cluster.ca_file),
      RC_KEY("cluster.forward_timeout", kDuration, cluster.forward_timeout),
      RC_KEY("cluster.max_forwards", kU32, cluster.max_forwards, 1, 1024),

      RC_KEY("engine.shards", kU32, engine.shards, 0, 256),
      RC_KEY("engine.fairness_cap", kU32, engine.fairness_cap, 1, 1'000'000),
      RC_KEY("engine.max_in_flight", kU32, engine.max_in_flight, 1, 1'000'000),
      RC_KEY("engine.payload_cache", kBytes, engine.payload_cache_bytes, 0,
             64.0 * 1024 * 1024 * 1024),
      RC_KEY("engine.subscription_postpone", kDuration, engine.subscription_postpone),
      RC_KEY("engine.reconcile_schedule", kDurationList, engine.reconcile_schedule),
      RC_KEY("engine.reconcile_deadline", kDuration, engine.reconcile_deadline),
      RC_KEY("engine.max_lease_expiries", kU32, engine.max_lease_expiries, 1, 255),
      RC_KEY("engine.breaker.window", kDuration, engine.breaker.window),
      RC_KEY("engine.breaker.min_deliveries", kU32, engine.breaker.min_deliveries, 1, 1'000'000),
      RC_KEY("engine.breaker.failure_ratio", kDouble, engine.breaker.failure_ratio, 0.01, 1.0),
      RC_KEY("engine.breaker.open_pause", kDuration, engine.breaker.open_pause),
      RC_KEY("engine.breaker.max_pause", kDuration, engine.breaker.max_pause),
      RC_KEY("engine.breaker.probe_recheck", kDuration, engine.breaker.probe_recheck),
      RC_KEY("engine.breaker.hold_ceiling", kDuration, engine.breaker.hold_ceiling),

      RC_KEY("transport.connect_timeout", kDuration, transport.connect_timeout),
      RC_KEY("transport.tls_timeout", kDuration, transport.tls_timeout),
      RC_KEY("transport.request_timeout", kDuration, transport.request_timeout),
      RC_KEY("transport.dns_timeout", kDuration, transport.dns_timeout),
      RC_KEY("transport.dns_cache_max_ttl", kDuration, transport.dns_cache_max_ttl),
      RC_KEY("transport.pool_size", kU32, transport.pool_size, 1, 100'000),
      RC_KEY("transport.idle_timeout", kDuration, transport.idle_timeout),
      RC_KEY("transport.allow_http", kBool, transport.allow_http),
      RC_KEY("transport.allow_private", kStringList, transport.allow_private),
      RC_KEY("transport.allowed_ports", kPortList, transport.allowed_ports),
      RC_KEY("transport.max_url_bytes", kU32, transport.max_url_bytes, 12, 65'536),
      RC_KEY("transport.ca_file", kString, transport.ca_file),
      RC_KEY("transport.user_agent", kString, transport.user_agent),
      RC_KEY("transport.max_response_header_bytes", kBytes, transport.max_response_header_bytes,
             1024, 64.0 * 1024 * 1024),
      RC_KEY("transport.max_response_drain_bytes", kBytes, transport.max_response_drain_bytes, 0,
             1024.0 * 1024 * 1024),
      RC_KEY("transport.host_rate_per_second", kDouble, transport.host_rate_per_second, 0, 1e9),
      RC_KEY("transport.host_burst", kU32, transport.host_burst, 0, 1e9),
      RC_KEY("transport.max_queue_wait", kDuration, transport.max_queue_wait),
      RC_KEY("transport.max_queued_per_host", kU32, transport.max_queued_per_host, 1, 1'000'000),

      RC_KEY("signing.rotation_overlap", kDuration, signing.rotation_overlap),

      RC_KEY("notifications.webhook_url", kString, notifications.webhook_url),
      RC_KEY("notifications.webhook_secret", kSecret, notifications.webhook_secret),
      RC_KEY("notifications.smtp.host", kString, notifications.smtp.host),
      RC_KEY("notifications.smtp.port", kU32, notifications.smtp.port, 1, 65'535),
      RC_KEY("notifications.smtp.from", kString, notifications.smtp.from),
      RC_KEY("notifications.smtp.from_name", kString, notifications.smtp.from_name),
      RC_KEY("notifications.smtp.starttls", kString, notifications.smtp.starttls),
      RC_KEY("notifications.smtp.ca_file", kString, notifications.smtp.ca_file),
      RC_KEY("notifications.smtp.username", kString, notifications.smtp.username),
      RC_KEY("notifications.smtp.password", kSecret, notifications.smtp.password),
      RC_KEY("notifications.smtp.password_file", kString, notifications.smtp.password_file),
      RC_KEY("notifications.smtp.allow_auth_without_tls", kBool,
             notifications.smtp.allow_auth_without_tls),
      RC_KEY("notifications.smtp.helo_name", kString, notifications.smtp.helo_name),
      RC_KEY("notifications.smtp.timeout", kDuration, notifications.smtp.timeout),
      RC_KEY("notifications.email.portal_url", kString, notifications.email.portal_url),
      RC_KEY("notifications.email.queue_max", kU32, notifications.email.queue_max, 1, 1'000'000),
      RC_KEY("notifications.email.retry_ladder", kDurationList, notifications.email.retry_ladder),
      RC_KEY("notifications.email.confirm_interval", kDuration,
             notifications.email.confirm_interval),
      RC_KEY("notifications.email.confirm_link_ttl", kDuration,
             notifications.email.confirm_link_ttl),

      RC_KEY("tracing.endpoint", kString, tracing.endpoint),
      RC_KEY("tracing.service_name", kString, tracing.service_name),
      RC_KEY("tracing.queue_max", kU32, tracing.queue_max, 1, 1'000'000),
      RC_KEY("tracing.sample_ratio", kDouble, tracing.sample_ratio, 0.0, 1.0),

      RC_KEY("portal.secret", kSecret, portal.secret),
      RC_KEY("portal.public_url", kString, portal.public_url),
      RC_KEY("portal.link_ttl", kDuration, portal.link_ttl),
      RC_KEY("portal.link_ttl_max", kDuration, portal.link_ttl_max),
      RC_KEY("portal.session_ttl", kDuration, portal.session_ttl),
      RC_KEY("portal.frame_ancestors", kStringList, portal.frame_ancestors),

      RC_KEY("limits.max_header_bytes", kBytes, limits.max_header_bytes, 1024, 16.0 * 1024 * 1024),
      RC_KEY("limits.max_body_bytes", kBytes, limits.max_body_bytes, 1024, 1024.0 * 1024 * 1024),
      RC_KEY("limits.max_bulk_body_bytes", kBytes, limits.max_bulk_body_bytes, 1024,
             4.0 * 1024 * 1024 * 1024),
      RC_KEY("limits.max_bulk_events", kU32, limits.max_bulk_events, 1, 10'000'000),
      RC_KEY("limits.max_id_bytes", kU32, limits.max_id_bytes, 1, 256),  // header-safe ids
      RC_KEY("limits.max_tenant_bytes", kU32, limits.max_tenant_bytes, 1, 1024),
      RC_KEY("limits.max_type_bytes", kU32, limits.max_type_bytes, 1, 256),
      RC_KEY("limits.max_event_types", kU32, limits.max_event_types, 1, 256),
      RC_KEY("limits.max_list_limit", kU32, limits.max_list_limit, 1, 100'000),
      RC_KEY("limits.recover_max_in_flight", kU32, limits.recover_max_in_flight, 1, 1'000'000),
      RC_KEY("limits.recover_jobs_running", kU32, limits.recover_jobs_running, 1, 1024),
      RC_KEY("limits.recover_jobs_queued", kU32, limits.recover_jobs_queued, 0, 100'000),
      RC_KEY("limits.max_endpoints_per_tenant", kU32, limits.max_endpoints_per_tenant, 1,
             1'000'000),
      RC_KEY("limits.test_sends_per_minute", kU32, limits.test_sends_per_minute, 1, 1'000'000),
      RC_KEY("limits.tenant_events_per_second", kDouble, limits.tenant_events_per_second, 0, 1e9),
      RC_KEY("limits.stats_max_rows", kU32, limits.stats_max_rows, 1, 10'000'000),
      RC_KEY("limits.stats_max_time", kDuration, limits.stats_max_time),

      RC_KEY("intake.node_id", kString, intake.node_id),

      RC_KEY("log.level", kString, log.level),
      RC_KEY("log.format", kString, log.format),
      RC_KEY("log.rate_per_second", kDouble, log.rate_per_second, 0, 1e6),
      RC_KEY("log.burst", kU32, log.burst, 1, 1'000'000),
  };
  return kKeys;
}

const std::vector<KeyDef>& policy_keys() {
  static const std::vector<KeyDef> kKeys = {
      RC_PKEY("base", kString, base),
      RC_PKEY("ladder", kDurationList, ladder),
      RC_PKEY("jitter", kOptDouble, jitter, 0.0, 0.5),
      RC_PKEY("slow_ladder", kDurationList, slow_ladder),
      RC_PKEY("slow_ceiling", kOptDuration, slow_ceiling),
      RC_PKEY("max_age", kOptDuration, max_age),
      RC_PKEY("auto_disable", kOptBool, auto_disable),
      RC_PKEY("retry_other_4xx", kOptBool, retry_other_4xx),
      RC_PKEY("gone_disables", kOptBool, gone_disables),
      RC_PKEY("breaker", kOptBool, breaker),
      RC_PKEY("money", kMoneyRules, money),
  };
  return kKeys;
}

// Keys of one [[intake.redis]] table.
const std::vector<KeyDef>& redis_intake_keys() {
  static const std::vector<KeyDef> kKeys = {
      RC_RKEY("name", kString, name),
      RC_RKEY("servers", kStringList, servers),
      RC_RKEY("cluster", kBool, cluster),
      RC_RKEY("username", kString, username),
      RC_RKEY("password", kSecret, password),
      RC_RKEY("tls", kBool, tls),
      RC_RKEY("tls_ca_file", kString, tls_ca_file),
      RC_RKEY("tls_cert_file", kString, tls_cert_file),
      RC_RKEY("tls_key_file", kString, tls_key_file),
      RC_RKEY("tls_server_name", kString, tls_server_name),
      RC_RKEY("db", kU32, db, 0, 15),
      RC_RKEY("streams", kStringList, streams),
      RC_RKEY("group", kString, group),
      RC_RKEY("consumer", kString, consumer),
      RC_RKEY("tenant_field", kString, tenant_field),
      RC_RKEY("id_field", kString, id_field),
      RC_RKEY("type_field", kString, type_field),
      RC_RKEY("payload_field", kString, payload_field),
      RC_RKEY("ordering_key_field", kString, ordering_key_field),
      RC_RKEY("dead_letter_stream", kString, dead_letter_stream),
      RC_RKEY("dead_letter_max_len", kU32, dead_letter_max_len, 0, 4'000'000'000),
      RC_RKEY("batch", kU32, batch, 1, 10'000),
      RC_RKEY("block", kDuration, block),
      RC_RKEY("max_unacked", kU32, max_unacked, 1, 1'000'000),
      RC_RKEY("claim_idle", kDuration, claim_idle),
      RC_RKEY("claim_interval", kDuration, claim_interval),
  };
  return kKeys;
}

// Keys of one [[intake.nats]] table.
const std::vector<KeyDef>& nats_intake_keys() {
  static const std::vector<KeyDef> kKeys = {
      RC_NKEY("name", kString, name),
      RC_NKEY("servers", kStringList, servers),
      RC_NKEY("token", kSecret, token),
      RC_NKEY("user", kString, user),
      RC_NKEY("password", kSecret, password),
      RC_NKEY("nkey_seed_file", kString, nkey_seed_file),
      RC_NKEY("tls", kBool, tls),
      RC_NKEY("tls_ca_file", kString, tls_ca_file),
      RC_NKEY("tls_cert_file", kString, tls_cert_file),
      RC_NKEY("tls_key_file", kString, tls_key_file),
      RC_NKEY("tls_server_name", kString, tls_server_name),
      RC_NKEY("stream", kString, stream),
      RC_NKEY("durable", kString, durable),
      RC_NKEY("filter_subject", kString, filter_subject),
      RC_NKEY("envelope", kString, envelope),
      RC_NKEY("tenant_field", kString, tenant_field),
      RC_NKEY("id_field", kString, id_field),
      RC_NKEY("type_field", kString, type_field),
      RC_NKEY("payload_field", kString, payload_field),
      RC_NKEY("ordering_key_field", kString, ordering_key_field),
      RC_NKEY("dead_letter_subject", kString, dead_letter_subject),
      RC_NKEY("batch", kU32, batch, 1, 10'000),
      RC_NKEY("expires", kDuration, expires),
      RC_NKEY("max_unacked", kU32, max_unacked, 1, 1'000'000),
      RC_NKEY("max_ack_pending", kU32, max_ack_pending, 0, 100'000'000),
      RC_NKEY("ack_wait", kDuration, ack_wait),
      RC_NKEY("nak_delay", kDuration, nak_delay),
  };
  return kKeys;
}

#undef RC_KEY
#undef RC_NKEY
#undef RC_RKEY
#undef RC_PKEY

[[noreturn]] void fail(const std::string& where, const std::string& key, const std::string& what) {
  throw ConfigError(where.empty() ? key + ": " + what : where + ": " + key + ": " + what);
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

namespace {

constexpr size_t kMaxLadderSteps = 1000;

std::vector<std::string> split_list(std::string_view s) {
  std::vector<std::string> out;
  s = trim(s);
  if (s.empty()) return out;
  size_t start = 0;
  while (true) {
    size_t comma = s.find(',', start);
    std::string_view part =
        trim(s.substr(start, comma == std::string_view::npos ? s.npos : comma - start));
    out.emplace_back(part);
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return out;
}

std::string range_text(const KeyDef& k) {
  std::ostringstream os;
  os << k.min << ".." << k.max;
  return os.str();
}

constexpr const char* kDurationHint =
    "expected a duration like \"100ms\", \"15m\", \"2h\", \"30d\"";

std::string describe(const Input& in) {
  std::ostringstream os;
  if (in.text) {  // streamed, not "\"" + std::string: GCC 12's false -Wrestrict at -O3
    os << '"' << *in.text << '"';
    return os.str();
  }
  if (in.node->is_string()) {
    os << '"' << in.node->as_string()->get() << '"';
  } else {
    in.node->visit([&](auto&& v) { os << v; });
  }
  return os.str();
}

// What a value is without what it says, for a secret's key (SPEC R14: a config error never
// echoes a secret, docs/operations.md §5 "Logs").
std::string kind_of(const Input& in) {
  if (in.text) return "a string";
  switch (in.node->type()) {
    case toml::node_type::string:
      return "a string";
    case toml::node_type::integer:
    case toml::node_type::floating_point:
      return "a number";
    case toml::node_type::boolean:
      return "a boolean";
    case toml::node_type::array:
      return "a list";
    case toml::node_type::table:
      return "a table";
    default:
      return "a date or time";
  }
}

std::optional<std::string> as_string(const Input& in) {
  if (in.text) return std::string(*in.text);
  if (auto s = in.node->as_string()) return s->get();
  return std::nullopt;
}

bool parse_bool_text(std::string_view t, bool& out) {
  if (t == "true" || t == "1" || t == "yes" || t == "on") return out = true, true;
  if (t == "false" || t == "0" || t == "no" || t == "off") return out = false, true;
  return false;
}

std::optional<int64_t> as_integer(const Input& in) {
  if (in.text) {
    std::string_view t = trim(*in.text);
    int64_t v = 0;
    auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
    if (ec != std::errc() || p != t.data() + t.size() || t.empty()) return std::nullopt;
    return v;
  }
  if (auto i = in.node->as_integer()) return i->get();
  return std::nullopt;
}

std::optional<double> as_double(const Input& in) {
  if (in.text) {
    std::string t(trim(*in.text));
    if (t.empty()) return std::nullopt;
    char* end = nullptr;
    double v = std::strtod(t.c_str(), &end);
    if (end != t.c_str() + t.size() || !std::isfinite(v)) return std::nullopt;
    return v;
  }
  // TOML has nan and inf literals: refused like the environment's, since a NaN passes every
  // range check (NaN < min and NaN > max are both false).
  if (auto f = in.node->as_floating_point()) {
    if (!std::isfinite(f->get())) return std::nullopt;
    return f->get();
  }
  if (auto i = in.node->as_integer()) return static_cast<double>(i->get());
  return std::nullopt;
}

Duration need_duration(const Input& in, const std::string& key) {
  auto s = as_string(in);
  if (!s) fail(in.where, key, std::string(kDurationHint) + ", got " + describe(in));
  auto d = parse_duration(*s);
  if (!d) fail(in.where, key, std::string(kDurationHint) + ", got " + describe(in));
  return *d;
}

std::vector<MoneyRule> parse_money_rules(const Input& in, const std::string& key) {
  if (in.text) fail(in.where, key, "money rules can be set in the config file only");
  const toml::array* arr = in.node->as_array();
  if (!arr)
    fail(in.where, key,
         "expected a list of tables like [{type = \"payment.status_changed\", field = "
         "\"status\", values = [\"paid\"]}]");
  std::vector<MoneyRule> rules;
  for (size_t i = 0; i < arr->size(); ++i) {
    std::string ekey = key + "[" + std::to_string(i) + "]";
    const toml::table* t = (*arr)[i].as_table();
    if (!t) fail(in.where, ekey, "expected a table {type, field?, values?}");
    MoneyRule r;
    for (const auto& [k, v] : *t) {
      std::string fkey = ekey + "." + std::string(k.str());
      if (k.str() == "type" && v.is_string()) {
        r.event_type = v.as_string()->get();
      } else if (k.str() == "field" && v.is_string()) {
        r.field_path = v.as_string()->get();
      } else if (k.str() == "values" && v.is_array()) {
        for (const auto& el : *v.as_array()) {
          if (!el.is_string()) fail(in.where, fkey, "expected a list of strings");
          r.values.push_back(el.as_string()->get());
        }
      } else if (k.str() == "type" || k.str() == "field") {
        fail(in.where, fkey, "expected a string");
      } else if (k.str() == "values") {
        fail(in.where, fkey, "expected a list of strings");
      } else {
        fail(in.where, fkey, "unknown key (type, field, values)");
      }
    }
    if (r.event_type.empty()) fail(in.where, ekey + ".type", "is required");
    if (!r.field_path.empty() && r.values.empty())
      fail(in.where, ekey + ".values", "is required when field is set");
    if (r.field_path.empty() && !r.values.empty())
      fail(in.where, ekey + ".field", "is required when values are set");
    rules.push_back(std::move(r));
  }
  return rules;
}

}  // namespace

void assign(const KeyDef& k, const std::string& key, void* root, const Input& in) {
  void* f = k.field(root);
  switch (k.kind) {
    case Kind::kMoneyRules:
      *static_cast<std::optional<std::vector<MoneyRule>>*>(f) = parse_money_rules(in, key);
      return;
    case Kind::kString:
    case Kind::kSecret: {
      auto s = as_string(in);
      if (!s) {
        fail(in.where, key,
             "expected a string, got " + (k.kind == Kind::kSecret ? kind_of(in) : describe(in)));
      }
      *static_cast<std::string*>(f) = *s;
      return;
    }
    case Kind::kBool:
    case Kind::kOptBool: {
      bool v = false;
      if (in.text) {
        if (!parse_bool_text(trim(*in.text), v))
          fail(in.where, key, "expected true or false, got " + describe(in));
      } else if (auto b = in.node->as_boolean()) {
        v = b->get();
      } else {
        fail(in.where, key, "expected true or false, got " + describe(in));
      }
      if (k.kind == Kind::kBool) {
        *static_cast<bool*>(f) = v;
      } else {
        *static_cast<std::optional<bool>*>(f) = v;
      }
      return;
    }
    case Kind::kU32: {
      auto v = as_integer(in);
      if (!v || *v < k.min || *v > k.max)
        fail(in.where, key, "expected an integer in " + range_text(k) + ", got " + describe(in));
      *static_cast<uint32_t*>(f) = static_cast<uint32_t>(*v);
      return;
    }
    case Kind::kBytes: {
      std::optional<uint64_t> v;
      if (auto i = (in.text ? std::optional<int64_t>() : as_integer(in))) {
        if (*i >= 0) v = static_cast<uint64_t>(*i);
      } else if (auto s = as_string(in)) {
        v = parse_bytes(*s);
      }
      if (!v)
        fail(in.where, key, "expected a size like 65536, \"64KiB\", \"1MiB\", got " + describe(in));
      if (static_cast<double>(*v) < k.min || static_cast<double>(*v) > k.max)
        fail(in.where, key,
             "must be between " + format_bytes(static_cast<uint64_t>(k.min)) + " and " +
                 format_bytes(static_cast<uint64_t>(k.max)) + ", got " + describe(in));
      *static_cast<uint64_t*>(f) = *v;
      return;
    }
    case Kind::kDouble:
    case Kind::kOptDouble: {
      auto v = as_double(in);
      if (!v || *v < k.min || *v > k.max)
        fail(in.where, key, "expected a number in " + range_text(k) + ", got " + describe(in));
      if (k.kind == Kind::kDouble) {
        *static_cast<double*>(f) = *v;
      } else {
        *static_cast<std::optional<double>*>(f) = *v;
      }
      return;
    }
    case Kind::kDuration:
      *static_cast<Duration*>(f) = need_duration(in, key);
      return;
    case Kind::kOptDuration:
      *static_cast<std::optional<Duration>*>(f) = need_duration(in, key);
      return;
    case Kind::kSync: {
      auto s = as_string(in);
      SyncPolicy p;
      if (s && *s == "always") {
        p = SyncPolicy::kAlways;
      } else if (s && *s == "interval") {
        p = SyncPolicy::kInterval;
      } else if (s && *s == "none") {
        p = SyncPolicy::kNone;
      } else {
        fail(in.where, key, "expected \"always\", \"interval\" or \"none\", got " + describe(in));
      }
      *static_cast<SyncPolicy*>(f) = p;
      return;
    }
    case Kind::kStringList:
    case Kind::kPortList:
    case Kind::kDurationList: {
      // Gather the elements as inputs (environment text is split on commas).
      std::vector<std::string> texts;
      std::vector<Input> items;
      if (in.text) {
        texts = split_list(*in.text);
        for (const auto& t : texts) items.push_back(Input{nullptr, std::string_view(t), in.where});
      } else {
        const toml::array* arr = in.node->as_array();
        if (!arr) fail(in.where, key, "expected a list, got " + describe(in));
        for (const auto& el : *arr) {
          std::string where = in.where;
          items.push_back(Input{&el, std::nullopt, where});
        }
      }
      if (k.kind == Kind::kStringList) {
        std::vector<std::string> out;
        for (size_t i = 0; i < items.size(); ++i) {
          auto s = as_string(items[i]);
          if (!s)
            fail(in.where, key + "[" + std::to_string(i) + "]",
                 "expected a string, got " + describe(items[i]));
          out.push_back(*s);
        }
        *static_cast<std::vector<std::string>*>(f) = std::move(out);
      } else if (k.kind == Kind::kPortList) {
        std::vector<uint16_t> out;
        for (size_t i = 0; i < items.size(); ++i) {
          auto v = as_integer(items[i]);
          if (!v || *v < 1 || *v > 65535)
            fail(in.where, key + "[" + std::to_string(i) + "]",
                 "expected a port in 1..65535, got " + describe(items[i]));
          out.push_back(static_cast<uint16_t>(*v));
        }
        *static_cast<std::vector<uint16_t>*>(f) = std::move(out);
      } else {
        if (items.size() > kMaxLadderSteps)
          fail(in.where, key, "at most " + std::to_string(kMaxLadderSteps) + " steps");
        std::vector<Duration> out;
        for (size_t i = 0; i < items.size(); ++i) {
          out.push_back(need_duration(items[i], key + "[" + std::to_string(i) + "]"));
        }
        *static_cast<std::vector<Duration>*>(f) = std::move(out);
      }
      return;
    }
  }
}

}  // namespace ringcast::config_detail
