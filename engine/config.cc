#include "engine/config.h"

#include <sys/stat.h>
#include <unistd.h>

#include <toml++/toml.h>
#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <set>
#include <sstream>
#include <thread>

#include "cluster/advertise_url.h"
#include "core/input_rules.h"
#include "core/url.h"
#include "engine/version.h"
#include "net/signing.h"
#include "net/tls.h"
#include "redis/connection.h"

extern char** environ;

namespace ringcast {
namespace {

// ---------------------------------------------------------------------------------------------
// Key registry: one entry per leaf key. `field` maps the root object (Config or PolicyConfig)
// to the member; `kind` says how to parse and print it.

enum class Kind : uint8_t {
  kString,
  kSecret,  // a string that is masked when printed
  kBool,
  kU32,
  kBytes,  // uint64, integer or "64KiB"
  kDouble,
  kDuration,
  kStringList,
  kPortList,
  kSync,
  kDurationList,
  kOptDouble,
  kOptDuration,
  kOptBool,
  kMoneyRules,  // std::optional<std::vector<MoneyRule>>; file only
};

struct KeyDef {
  const char* path;  // relative to the root: "server.listen" or (policies) "ladder"
  Kind kind;
  std::function<void*(void*)> field;
  double min = 0;
  double max = 0;
};

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

#undef RC_KEY
#undef RC_RKEY
#undef RC_PKEY

constexpr size_t kMaxLadderSteps = 1000;

[[noreturn]] void fail(const std::string& where, const std::string& key, const std::string& what) {
  throw ConfigError(where.empty() ? key + ": " + what : where + ": " + key + ": " + what);
}

std::string env_name(std::string_view path) {
  std::string out = "RINGCAST_";
  for (char c : path) {
    out += (c == '.' || c == '-') ? '_'
                                  : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  }
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

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

// A value to assign: either a TOML node or an environment string.
struct Input {
  const toml::node* node = nullptr;
  std::optional<std::string_view> text;  // from the environment
  std::string where;
};

std::string describe(const Input& in) {
  if (in.text) return "\"" + std::string(*in.text) + "\"";
  std::ostringstream os;
  if (in.node->is_string()) {
    os << '"' << in.node->as_string()->get() << '"';
  } else {
    in.node->visit([&](auto&& v) { os << v; });
  }
  return os.str();
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

void assign(const KeyDef& k, const std::string& key, void* root, const Input& in) {
  void* f = k.field(root);
  switch (k.kind) {
    case Kind::kMoneyRules:
      *static_cast<std::optional<std::vector<MoneyRule>>*>(f) = parse_money_rules(in, key);
      return;
    case Kind::kString:
    case Kind::kSecret: {
      auto s = as_string(in);
      if (!s) fail(in.where, key, "expected a string, got " + describe(in));
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

std::string where_of(const toml::node& n, const std::string& origin) {
  const auto& src = n.source();
  if (src.begin.line == 0) return origin;
  return origin + ":" + std::to_string(src.begin.line) + ":" + std::to_string(src.begin.column);
}

const KeyDef* find_key(const std::vector<KeyDef>& keys, std::string_view path) {
  for (const auto& k : keys) {
    if (path == k.path) return &k;
  }
  return nullptr;
}

bool is_section_prefix(std::string_view prefix) {
  for (const auto& k : config_keys()) {
    std::string_view p = k.path;
    if (p.size() > prefix.size() && p.substr(0, prefix.size()) == prefix &&
        p[prefix.size()] == '.') {
      return true;
    }
  }
  return false;
}

bool valid_policy_name(std::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  if (!std::islower(static_cast<unsigned char>(name[0])) &&
      !std::isdigit(static_cast<unsigned char>(name[0]))) {
    return false;
  }
  return std::all_of(name.begin(), name.end(), [](char c) {
    return std::islower(static_cast<unsigned char>(c)) ||
           std::isdigit(static_cast<unsigned char>(c)) || c == '_' || c == '-';
  });
}

void apply_table(Config& cfg, const toml::table& table, const std::string& prefix,
                 const std::string& origin) {
  for (const auto& [k, node] : table) {
    std::string path = prefix.empty() ? std::string(k.str()) : prefix + "." + std::string(k.str());
    if (path == "policies") {
      const toml::table* policies = node.as_table();
      if (!policies) fail(where_of(node, origin), path, "expected a table of named policies");
      for (const auto& [name_key, pnode] : *policies) {
        std::string name(name_key.str());
        std::string ppath = "policies." + name;
        if (!valid_policy_name(name))
          fail(where_of(pnode, origin), ppath,
               "a policy name is 1-64 characters of a-z, 0-9, '_' and '-'");
        if (name == "smengo" || name == "xhub")
          fail(where_of(pnode, origin), ppath,
               "\"" + name + "\" is a preset; give a custom policy another name");
        const toml::table* ptable = pnode.as_table();
        if (!ptable) fail(where_of(pnode, origin), ppath, "expected a table");
        PolicyConfig& pc = cfg.policies[name];
        pc.name = name;
        for (const auto& [pk, pv] : *ptable) {
          std::string key = ppath + "." + std::string(pk.str());
          const KeyDef* def = find_key(policy_keys(), pk.str());
          if (!def) fail(where_of(pv, origin), key, "unknown key");
          assign(*def, key, &pc, Input{&pv, std::nullopt, where_of(pv, origin)});
        }
      }
      continue;
    }
    if (path == "intake.redis") {
      const toml::array* arr = node.as_array();
      if (!arr) fail(where_of(node, origin), path, "expected [[intake.redis]] tables");
      for (const auto& el : *arr) {
        const toml::table* t = el.as_table();
        std::string ipath = "intake.redis[" + std::to_string(cfg.intake.redis.size()) + "]";
        if (!t) fail(where_of(el, origin), ipath, "expected a table");
        RedisIntakeConfig& rc = cfg.intake.redis.emplace_back();
        for (const auto& [rk, rv] : *t) {
          std::string key = ipath + "." + std::string(rk.str());
          const KeyDef* def = find_key(redis_intake_keys(), rk.str());
          if (!def) fail(where_of(rv, origin), key, "unknown key");
          assign(*def, key, &rc, Input{&rv, std::nullopt, where_of(rv, origin)});
        }
      }
      continue;
    }
    if (const toml::table* sub = node.as_table()) {
      if (!is_section_prefix(path))
        fail(where_of(node, origin), "[" + path + "]", "unknown section");
      apply_table(cfg, *sub, path, origin);
      continue;
    }
    const KeyDef* def = find_key(config_keys(), path);
    if (!def) {
      fail(where_of(node, origin), path,
           is_section_prefix(path) ? "expected a table (section)" : "unknown key");
    }
    assign(*def, path, &cfg, Input{&node, std::nullopt, where_of(node, origin)});
  }
}

void apply_environment(Config& cfg, const Environment& env) {
  // Besides the keys: the CLI's own variables.
  std::set<std::string> known = {"RINGCAST_API_TOKEN", "RINGCAST_CONFIG", "RINGCAST_SERVER",
                                 "RINGCAST_TOKEN", "RINGCAST_TENANT"};
  for (const auto& k : config_keys()) {
    std::string name = env_name(k.path);
    known.insert(name);
    auto it = env.find(name);
    if (it != env.end()) {
      assign(k, k.path, &cfg, Input{nullptr, std::string_view(it->second), "environment " + name});
    }
  }
  // RINGCAST_API_TOKEN is the documented short form (operations.md §2); it wins over the long one.
  if (auto it = env.find("RINGCAST_API_TOKEN"); it != env.end()) {
    cfg.server.api_token = it->second;
  }
  for (auto& [name, pc] : cfg.policies) {
    for (const auto& k : policy_keys()) {
      std::string path = "policies." + name + "." + k.path;
      std::string var = env_name(path);
      known.insert(var);
      auto it = env.find(var);
      if (it != env.end()) {
        assign(k, path, &pc, Input{nullptr, std::string_view(it->second), "environment " + var});
      }
    }
  }
  for (const auto& [name, value] : env) {
    if (name.rfind("RINGCAST_", 0) == 0 && !known.count(name) &&
        name.rfind("RINGCAST_TEST_", 0) != 0) {
      cfg.warnings.push_back("unknown environment variable " + name + " (ignored)");
    }
  }
}

void resolve(Config& cfg) {
  // SPEC R14: a merchant's owner_email is confirmed through a link to the portal; without the
  // portal's public URL the e-mail cannot carry one (docs/security.md "Owner e-mail").
  if (!cfg.notifications.smtp.host.empty() && cfg.portal.public_url.empty()) {
    cfg.warnings.push_back(
        "notifications.smtp is set but portal.public_url is not: an owner_email a merchant "
        "sets cannot be confirmed (its confirmation e-mail has no link) and gets no notices");
  }
  auto listen = parse_listen(cfg.server.listen);
  if (!listen)
    fail("", "server.listen",
         "expected host:port such as \"127.0.0.1:8080\" or \"[::1]:8080\", got \"" +
             cfg.server.listen + "\"");
  cfg.server.listen_ip = listen->first;
  cfg.server.listen_port = listen->second;
  cfg.transport.allow_private_cidrs.clear();
  for (size_t i = 0; i < cfg.transport.allow_private.size(); ++i) {
    auto cidr = parse_cidr(cfg.transport.allow_private[i]);
    if (!cidr)
      fail("", "transport.allow_private[" + std::to_string(i) + "]",
           "expected a CIDR such as \"127.0.0.0/8\" or \"::1/128\", got \"" +
               cfg.transport.allow_private[i] + "\"");
    cfg.transport.allow_private_cidrs.push_back(*cidr);
  }
  if (cfg.engine.shards == 0) {
    cfg.engine.shards = std::clamp(std::thread::hardware_concurrency(), 1u, 256u);
  }
  if (cfg.transport.user_agent.empty()) {
    cfg.transport.user_agent = std::string("ringcast/") + version_string();
  }
  for (size_t i = 0; i < cfg.intake.redis.size(); ++i) {
    if (cfg.intake.redis[i].name.empty())
      cfg.intake.redis[i].name = "redis-" + std::to_string(i + 1);
    if (cfg.intake.redis[i].consumer.empty()) cfg.intake.redis[i].consumer = cfg.intake.node_id;
  }
}

// --- printing --------------------------------------------------------------------------------

std::string toml_string(std::string_view s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (c < 0x20 || c == 0x7f) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

std::string format_double(double v) {
  std::ostringstream os;
  os.precision(15);
  os << v;
  std::string s = os.str();
  if (s.find_first_of(".eE") == std::string::npos) s += ".0";
  return s;
}

// The printed value, or nullopt when an optional is unset.
std::optional<std::string> format_value(const KeyDef& k, void* root, bool mask) {
  void* f = k.field(root);
  switch (k.kind) {
    case Kind::kString:
      return toml_string(*static_cast<std::string*>(f));
    case Kind::kSecret: {
      const auto& s = *static_cast<std::string*>(f);
      return toml_string(mask && !s.empty() ? "***" : s);
    }
    case Kind::kBool:
      return *static_cast<bool*>(f) ? "true" : "false";
    case Kind::kU32:
      return std::to_string(*static_cast<uint32_t*>(f));
    case Kind::kBytes: {
      uint64_t v = *static_cast<uint64_t*>(f);
      std::string s = format_bytes(v);
      return s == std::to_string(v) ? s : toml_string(s);
    }
    case Kind::kDouble:
      return format_double(*static_cast<double*>(f));
    case Kind::kDuration:
      return toml_string(format_duration(*static_cast<Duration*>(f)));
    case Kind::kSync: {
      switch (*static_cast<SyncPolicy*>(f)) {
        case SyncPolicy::kAlways:
          return "\"always\"";
        case SyncPolicy::kInterval:
          return "\"interval\"";
        case SyncPolicy::kNone:
          return "\"none\"";
      }
      return "\"interval\"";
    }
    case Kind::kStringList: {
      std::string out = "[";
      const auto& v = *static_cast<std::vector<std::string>*>(f);
      for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + toml_string(v[i]);
      return out + "]";
    }
    case Kind::kPortList: {
      std::string out = "[";
      const auto& v = *static_cast<std::vector<uint16_t>*>(f);
      for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + std::to_string(v[i]);
      return out + "]";
    }
    case Kind::kDurationList: {
      const auto& v = *static_cast<std::vector<Duration>*>(f);
      if (v.empty()) return std::nullopt;
      std::string out = "[";
      for (size_t i = 0; i < v.size(); ++i)
        out += (i ? ", " : "") + toml_string(format_duration(v[i]));
      return out + "]";
    }
    case Kind::kOptDouble: {
      const auto& v = *static_cast<std::optional<double>*>(f);
      if (!v) return std::nullopt;
      return format_double(*v);
    }
    case Kind::kOptDuration: {
      const auto& v = *static_cast<std::optional<Duration>*>(f);
      if (!v) return std::nullopt;
      return toml_string(format_duration(*v));
    }
    case Kind::kOptBool: {
      const auto& v = *static_cast<std::optional<bool>*>(f);
      if (!v) return std::nullopt;
      return *v ? "true" : "false";
    }
    case Kind::kMoneyRules: {
      const auto& v = *static_cast<std::optional<std::vector<MoneyRule>>*>(f);
      if (!v) return std::nullopt;
      std::string out = "[";
      for (size_t i = 0; i < v->size(); ++i) {
        const MoneyRule& r = (*v)[i];
        out += (i ? ", " : "") + std::string("{type = ") + toml_string(r.event_type);
        if (!r.field_path.empty()) {
          out += ", field = " + toml_string(r.field_path) + ", values = [";
          for (size_t j = 0; j < r.values.size(); ++j) {
            out += (j ? ", " : "") + toml_string(r.values[j]);
          }
          out += "]";
        }
        out += "}";
      }
      return out + "]";
    }
  }
  return std::nullopt;
}

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
// [[intake.redis]] (`prefix`): no tls_* key while tls is off (it would silently do nothing), a
// certificate with its key, files that can be read, and the context built once here as the
// connections will build it (a PEM that does not parse, a key that does not match its
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

}  // namespace

// --- public helpers ----------------------------------------------------------------------------

std::optional<Duration> parse_duration(std::string_view text) {
  text = trim(text);
  if (text.empty()) return std::nullopt;
  if (text == "0") return Duration(0);
  __int128 total = 0;
  size_t i = 0;
  while (i < text.size()) {
    size_t start = i;
    while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i;
    if (i == start || i - start > 15) return std::nullopt;
    uint64_t n = 0;
    std::from_chars(text.data() + start, text.data() + i, n);
    size_t ustart = i;
    while (i < text.size() && std::isalpha(static_cast<unsigned char>(text[i]))) ++i;
    std::string_view unit = text.substr(ustart, i - ustart);
    __int128 mul;
    if (unit == "ns") {
      mul = 1;
    } else if (unit == "us") {
      mul = 1'000;
    } else if (unit == "ms") {
      mul = 1'000'000;
    } else if (unit == "s") {
      mul = 1'000'000'000;
    } else if (unit == "m") {
      mul = 60LL * 1'000'000'000;
    } else if (unit == "h") {
      mul = 3600LL * 1'000'000'000;
    } else if (unit == "d") {
      mul = 86400LL * 1'000'000'000;
    } else {
      return std::nullopt;
    }
    total += static_cast<__int128>(n) * mul;
    if (total > std::numeric_limits<int64_t>::max()) return std::nullopt;
  }
  return Duration(static_cast<int64_t>(total));
}

std::string format_duration(Duration d) {
  int64_t ns = d.count();
  if (ns == 0) return "0s";
  struct Unit {
    int64_t ns;
    const char* name;
  };
  static constexpr Unit kUnits[] = {{86400LL * 1'000'000'000, "d"},
                                    {3600LL * 1'000'000'000, "h"},
                                    {60LL * 1'000'000'000, "m"},
                                    {1'000'000'000, "s"},
                                    {1'000'000, "ms"},
                                    {1'000, "us"},
                                    {1, "ns"}};
  for (const auto& u : kUnits) {
    if (ns % u.ns == 0) return std::to_string(ns / u.ns) + u.name;
  }
  return std::to_string(ns) + "ns";
}

std::optional<uint64_t> parse_bytes(std::string_view text) {
  text = trim(text);
  size_t i = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i;
  if (i == 0 || i > 19) return std::nullopt;
  uint64_t n = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + i, n);
  if (ec != std::errc()) return std::nullopt;
  std::string_view unit = trim(text.substr(i));
  uint64_t mul;
  if (unit.empty() || unit == "B") {
    mul = 1;
  } else if (unit == "KiB") {
    mul = 1ULL << 10;
  } else if (unit == "MiB") {
    mul = 1ULL << 20;
  } else if (unit == "GiB") {
    mul = 1ULL << 30;
  } else if (unit == "KB" || unit == "kB") {
    mul = 1000;
  } else if (unit == "MB") {
    mul = 1000 * 1000;
  } else if (unit == "GB") {
    mul = 1000ULL * 1000 * 1000;
  } else {
    return std::nullopt;
  }
  if (n > std::numeric_limits<uint64_t>::max() / mul) return std::nullopt;
  return n * mul;
}

std::string format_bytes(uint64_t bytes) {
  if (bytes != 0) {
    if (bytes % (1ULL << 30) == 0) return std::to_string(bytes >> 30) + "GiB";
    if (bytes % (1ULL << 20) == 0) return std::to_string(bytes >> 20) + "MiB";
    if (bytes % (1ULL << 10) == 0) return std::to_string(bytes >> 10) + "KiB";
  }
  return std::to_string(bytes);
}

std::optional<std::pair<IpAddress, uint16_t>> parse_listen(std::string_view text) {
  text = trim(text);
  std::string_view host;
  std::string_view port;
  if (!text.empty() && text.front() == '[') {
    size_t close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':')
      return std::nullopt;
    host = text.substr(1, close - 1);
    port = text.substr(close + 2);
  } else {
    size_t colon = text.rfind(':');
    if (colon == std::string_view::npos) return std::nullopt;
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
    if (host.find(':') != std::string_view::npos) return std::nullopt;  // v6 needs brackets
  }
  uint32_t p = 0;
  auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), p);
  if (port.empty() || ec != std::errc() || end != port.data() + port.size() || p > 65535)
    return std::nullopt;
  std::optional<IpAddress> ip;
  if (host == "localhost") {
    ip = IpAddress::v4(127, 0, 0, 1);
  } else if (host == "*" || host.empty()) {
    ip = IpAddress::v4(0, 0, 0, 0);
  } else {
    ip = parse_ip(host);
  }
  if (!ip) return std::nullopt;
  return std::make_pair(*ip, static_cast<uint16_t>(p));
}

Environment process_environment() {
  Environment env;
  for (char** e = environ; e && *e; ++e) {
    std::string_view kv(*e);
    size_t eq = kv.find('=');
    if (eq == std::string_view::npos) continue;
    if (kv.substr(0, 9) != "RINGCAST_") continue;
    if (eq + 1 == kv.size()) continue;  // an empty variable counts as unset
    env.emplace(std::string(kv.substr(0, eq)), std::string(kv.substr(eq + 1)));
  }
  return env;
}

Config load_config_from_string(std::string_view toml_text, const Environment& env,
                               const std::string& origin) {
  Config cfg;
  cfg.source = origin;
  toml::table table;
  try {
    table = toml::parse(toml_text, origin);
  } catch (const toml::parse_error& e) {
    const auto& b = e.source().begin;
    throw ConfigError(origin + ":" + std::to_string(b.line) + ":" + std::to_string(b.column) +
                      ": TOML syntax error: " + std::string(e.description()));
  }
  apply_table(cfg, table, "", origin);
  apply_environment(cfg, env);
  resolve(cfg);
  cfg.validate();
  return cfg;
}

Config load_config(const std::string& path, const Environment& env) {
  if (path.empty()) {
    Config cfg;
    apply_environment(cfg, env);
    resolve(cfg);
    cfg.validate();
    return cfg;
  }
  std::string text;
  {
    FILE* f = std::fopen(path.c_str(), "rb");
    if (!f) throw ConfigError(path + ": cannot open config file: " + std::strerror(errno));
    char buf[65536];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) {
      text.append(buf, n);
      if (text.size() > 16 * 1024 * 1024) {
        std::fclose(f);
        throw ConfigError(path + ": config file larger than 16 MiB");
      }
    }
    bool err = std::ferror(f);
    std::fclose(f);
    if (err) throw ConfigError(path + ": cannot read config file");
  }
  return load_config_from_string(text, env, path);
}

bool Config::has_policy(std::string_view name) const {
  return name == "smengo" || name == "xhub" || policies.count(std::string(name)) > 0;
}

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
  // limits
  if (limits.max_bulk_body_bytes < limits.max_body_bytes)
    fail("", "limits.max_bulk_body_bytes",
         "must be at least limits.max_body_bytes (" + format_bytes(limits.max_body_bytes) + ")");
  // signing
  if (signing.rotation_overlap < Duration(0))
    fail("", "signing.rotation_overlap", "must not be negative");
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
    for (const auto* f : {&r.tenant_field, &r.id_field, &r.type_field, &r.payload_field})
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

RetryPolicy to_retry_policy(const PolicyConfig& p) {
  RetryPolicy r = p.base == "xhub" ? RetryPolicy::xhub() : RetryPolicy::smengo();
  r.name = p.name;
  if (!p.ladder.empty()) r.fast_pauses = p.ladder;
  if (!p.slow_ladder.empty()) r.slow_pauses = p.slow_ladder;
  if (p.jitter) r.jitter_permille = static_cast<uint32_t>(std::lround(*p.jitter * 1000));
  if (p.slow_ceiling) r.slow_ceiling = *p.slow_ceiling;
  if (p.max_age) r.absolute_ceiling = *p.max_age;
  if (p.auto_disable) r.disable_on_exhaustion = *p.auto_disable;
  if (p.retry_other_4xx) r.retry_rejected = *p.retry_other_4xx;
  if (p.gone_disables)
    r.on_gone = *p.gone_disables ? GoneAction::kDisableEndpoint : GoneAction::kAsRejected;
  if (p.breaker) r.use_breaker = *p.breaker;
  if (p.money) r.money.rules = *p.money;
  return r;
}

std::vector<RetryPolicy> Config::retry_policies() const {
  std::vector<RetryPolicy> out;
  for (const auto& [name, p] : policies) out.push_back(to_retry_policy(p));
  return out;
}

std::string Config::to_toml(bool mask_secrets) const {
  std::string out;
  if (!source.empty()) out += "# effective configuration (" + source + " + environment)\n";
  std::string section;
  Config& self = const_cast<Config&>(*this);  // format_value only reads
  for (const auto& k : config_keys()) {
    std::string_view path = k.path;
    size_t dot = path.rfind('.');
    std::string sec(path.substr(0, dot));
    if (sec != section) {
      out += (out.empty() ? "[" : "\n[") + sec + "]\n";
      section = sec;
    }
    if (auto v = format_value(k, &self, mask_secrets)) {
      out += std::string(path.substr(dot + 1)) + " = " + *v + "\n";
    }
  }
  for (auto& [name, p] : self.policies) {
    out += "\n[policies." + name + "]\n";
    for (const auto& k : policy_keys()) {
      if (auto v = format_value(k, &p, mask_secrets))
        out += std::string(k.path) + " = " + *v + "\n";
    }
  }
  for (auto& r : self.intake.redis) {
    out += "\n[[intake.redis]]\n";
    for (const auto& k : redis_intake_keys()) {
      if (auto v = format_value(k, &r, mask_secrets))
        out += std::string(k.path) + " = " + *v + "\n";
    }
  }
  return out;
}

}  // namespace ringcast
