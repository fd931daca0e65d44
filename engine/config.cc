// The configuration's loading (docs/operations.md §2 "Configuration"): the TOML file walked key
// by key, the RINGCAST_* overrides, what is derived from them; the public parse/format helpers
// (§2 "Syntax"); the named policies as core RetryPolicy values (§2 "Named policies").
#include "engine/config.h"

#include <toml++/toml.h>
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "engine/config_internal.h"
#include "engine/version.h"

extern char** environ;

namespace ringcast {

using config_detail::assign;
using config_detail::config_keys;
using config_detail::fail;
using config_detail::Input;
using config_detail::KeyDef;
using config_detail::nats_intake_keys;
using config_detail::policy_keys;
using config_detail::redis_intake_keys;
using config_detail::trim;

namespace {

std::string env_name(std::string_view path) {
  std::string out = "RINGCAST_";
  for (char c : path) {
    out += (c == '.' || c == '-') ? '_'
                                  : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  }
  return out;
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
    if (path == "intake.nats") {
      const toml::array* arr = node.as_array();
      if (!arr) fail(where_of(node, origin), path, "expected [[intake.nats]] tables");
      for (const auto& el : *arr) {
        const toml::table* t = el.as_table();
        std::string ipath = "intake.nats[" + std::to_string(cfg.intake.nats.size()) + "]";
        if (!t) fail(where_of(el, origin), ipath, "expected a table");
        NatsIntakeConfig& nc = cfg.intake.nats.emplace_back();
        for (const auto& [nk, nv] : *t) {
          std::string key = ipath + "." + std::string(nk.str());
          const KeyDef* def = find_key(nats_intake_keys(), nk.str());
          if (!def) fail(where_of(nv, origin), key, "unknown key");
          assign(*def, key, &nc, Input{&nv, std::nullopt, where_of(nv, origin)});
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

// True when line `line` (1-based) of `text`, or the key = value line it continues (a
// multi-line string), names a secret's key (Kind::kSecret: api_token, password, secret…).
bool near_secret(std::string_view text, size_t line) {
  std::vector<std::string_view> lines;
  for (size_t from = 0; from <= text.size();) {
    size_t nl = text.find('\n', from);
    if (nl == std::string_view::npos) nl = text.size();
    lines.push_back(text.substr(from, nl - from));
    from = nl + 1;
  }
  if (line == 0 || line > lines.size()) return true;  // cannot tell: say nothing
  std::vector<std::string_view> names;
  for (const auto* table : {&config_keys(), &redis_intake_keys()}) {
    for (const KeyDef& k : *table) {
      if (k.kind != config_detail::Kind::kSecret) continue;
      std::string_view p = k.path;
      names.push_back(p.substr(p.rfind('.') == std::string_view::npos ? 0 : p.rfind('.') + 1));
    }
  }
  for (size_t i = line; i > 0; --i) {
    const std::string_view l = lines[i - 1];
    for (std::string_view n : names) {
      if (l.find(n) != std::string_view::npos) return true;
    }
    if (l.find('=') != std::string_view::npos) break;  // the key = value line it belongs to
  }
  return false;
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
  for (size_t i = 0; i < cfg.intake.nats.size(); ++i) {
    NatsIntakeConfig& n = cfg.intake.nats[i];
    if (n.name.empty()) n.name = "nats-" + std::to_string(i + 1);
    const bool json = n.envelope == "json";  // the envelope's own names (operations.md §6)
    for (auto [field, in_headers, in_json] :
         {std::tuple{&n.tenant_field, "Ringcast-Tenant", "tenant"},
          std::tuple{&n.id_field, "Ringcast-Id", "id"},
          std::tuple{&n.type_field, "Ringcast-Type", "type"},
          std::tuple{&n.ordering_key_field, "Ringcast-Ordering-Key", "ordering_key"}}) {
      if (field->empty()) *field = json ? in_json : in_headers;
    }
    if (json && n.payload_field.empty()) n.payload_field = "payload";
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
    std::string what = origin + ":" + std::to_string(b.line) + ":" + std::to_string(b.column);
    // SPEC R14: toml++ quotes what it saw ("saw 'tS'"): in a secret's value, not shown.
    if (near_secret(toml_text, b.line)) {
      what += ": TOML syntax error in a secret's value (not shown)";
    } else {
      what += ": TOML syntax error: ";
      what += e.description();
    }
    throw ConfigError(what);
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

}  // namespace ringcast
