#include "bridge/kafka/config.h"

#include <toml++/toml.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <fstream>
#include <limits>
#include <sstream>

#include "bridge/kafka/log.h"

namespace ringcast::kafka_bridge {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// Reads one table's keys in turn; every key must be taken, so an unknown or misspelled one is an
// error naming it (a silently ignored "batch_max_event" would change nothing and say nothing).
class Reader {
 public:
  Reader(const toml::table* table, std::string section, const std::string& origin)
      : table_(table), section_(std::move(section)), origin_(origin) {}

  bool has(std::string_view key) const { return table_ && table_->contains(key); }

  [[noreturn]] void fail(std::string_view key, const std::string& message) const {
    std::string where = origin_;
    const toml::node* n = table_ ? table_->get(key) : nullptr;
    if (n && n->source().begin.line != 0) {
      where += ":" + std::to_string(n->source().begin.line) + ":" +
               std::to_string(n->source().begin.column);
    }
    where += ": ";
    where += path(key);
    where += ": ";
    where += message;
    throw ConfigError(where);
  }

  std::string path(std::string_view key) const {
    std::string p = section_;
    p += '.';
    p += key;
    return p;
  }

  const toml::node* take(std::string_view key) {
    if (!table_) return nullptr;
    const toml::node* n = table_->get(key);
    if (n) taken_.emplace_back(key);
    return n;
  }

  void string(std::string_view key, std::string& out) {
    const toml::node* n = take(key);
    if (!n) return;
    if (!n->is_string()) fail(key, "expected a string");
    out = n->as_string()->get();
  }

  void nonempty_string(std::string_view key, std::string& out) {
    string(key, out);
    if (has(key) && out.empty()) fail(key, "must not be empty");
  }

  void duration(std::string_view key, Millis& out, Millis min, Millis max) {
    const toml::node* n = take(key);
    if (!n) return;
    if (!n->is_string()) fail(key, "expected a duration string such as \"100ms\" or \"30s\"");
    Millis d{0};
    if (!parse_duration(n->as_string()->get(), d)) {
      fail(key, "not a duration (\"100ms\", \"30s\", \"2m\"): \"" + n->as_string()->get() + "\"");
    }
    if (d < min || d > max) {
      fail(key, "must be between " + std::to_string(min.count()) + "ms and " +
                    std::to_string(max.count()) + "ms");
    }
    out = d;
  }

  void integer(std::string_view key, uint32_t& out, int64_t min, int64_t max) {
    const toml::node* n = take(key);
    if (!n) return;
    if (!n->is_integer()) fail(key, "expected an integer");
    int64_t v = n->as_integer()->get();
    if (v < min || v > max) {
      fail(key, "must be between " + std::to_string(min) + " and " + std::to_string(max));
    }
    out = static_cast<uint32_t>(v);
  }

  void bytes(std::string_view key, size_t& out, uint64_t min, uint64_t max) {
    const toml::node* n = take(key);
    if (!n) return;
    uint64_t v = 0;
    if (n->is_integer() && n->as_integer()->get() >= 0) {
      v = static_cast<uint64_t>(n->as_integer()->get());
    } else if (!n->is_string() || !parse_bytes(n->as_string()->get(), v)) {
      fail(key, "expected a size such as \"16MiB\" or a number of bytes");
    }
    if (v < min || v > max) {
      fail(key,
           "must be between " + std::to_string(min) + " and " + std::to_string(max) + " bytes");
    }
    out = static_cast<size_t>(v);
  }

  // A string or an array of strings, joined with `sep`.
  void string_or_list(std::string_view key, std::string& out, char sep) {
    const toml::node* n = take(key);
    if (!n) return;
    if (n->is_string()) {
      out = n->as_string()->get();
      return;
    }
    const toml::array* a = n->as_array();
    if (!a) fail(key, "expected a string or an array of strings");
    out.clear();
    for (const auto& el : *a) {
      if (!el.is_string() || el.as_string()->get().empty()) {
        fail(key, "expected an array of non-empty strings");
      }
      if (!out.empty()) out += sep;
      out += el.as_string()->get();
    }
  }

  void string_list(std::string_view key, std::vector<std::string>& out) {
    const toml::node* n = take(key);
    if (!n) return;
    const toml::array* a = n->as_array();
    if (!a) fail(key, "expected an array of strings");
    out.clear();
    for (const auto& el : *a) {
      if (!el.is_string() || el.as_string()->get().empty()) {
        fail(key, "expected an array of non-empty strings");
      }
      out.push_back(el.as_string()->get());
    }
  }

  // A table of librdkafka properties: strings, integers, booleans and floats, passed on as text.
  void properties(std::string_view key, Properties& out) {
    const toml::node* n = take(key);
    if (!n) return;
    const toml::table* t = n->as_table();
    if (!t) fail(key, "expected a table of librdkafka properties");
    Reader sub(t, path(key), origin_);
    for (const auto& [k, v] : *t) {
      std::string name(k.str());
      std::string value;
      if (v.is_string()) {
        value = v.as_string()->get();
      } else if (v.is_integer()) {
        value = std::to_string(v.as_integer()->get());
      } else if (v.is_boolean()) {
        value = v.as_boolean()->get() ? "true" : "false";
      } else if (v.is_floating_point()) {
        std::ostringstream s;
        s << v.as_floating_point()->get();
        value = s.str();
      } else {
        sub.fail(name, "expected a string, number or boolean");
      }
      out.emplace_back(std::move(name), std::move(value));
    }
  }

  const toml::table* subtable(std::string_view key) {
    const toml::node* n = table_ ? table_->get(key) : nullptr;
    if (!n) return nullptr;
    if (!n->is_table()) fail(key, "expected a table");
    return n->as_table();
  }

  void done() const {
    if (!table_) return;
    for (const auto& [k, v] : *table_) {
      if (std::find(taken_.begin(), taken_.end(), k.str()) == taken_.end()) {
        Reader(table_, section_, origin_).fail(k.str(), "unknown key");
      }
    }
  }

 private:
  const toml::table* table_;
  std::string section_;
  const std::string& origin_;
  std::vector<std::string> taken_;
};

// The properties the bridge sets itself: its guarantees rest on them (docs/operations.md §6).
constexpr std::string_view kReservedConsumer[] = {
    "bootstrap.servers",   "metadata.broker.list", "group.id",
    "client.id",           "enable.auto.commit",   "enable.auto.offset.store",
    "enable.partition.eof"};
constexpr std::string_view kReservedProducer[] = {"bootstrap.servers", "metadata.broker.list",
                                                  "client.id"};

void check_reserved(const Properties& props, const std::string& section, bool consumer,
                    bool producer, const std::string& origin) {
  for (const auto& [name, value] : props) {
    auto hit = [&](auto& list) {
      return std::find(std::begin(list), std::end(list), name) != std::end(list);
    };
    if ((consumer && hit(kReservedConsumer)) || (producer && hit(kReservedProducer))) {
      std::string m = origin;
      m += ": ";
      m += section;
      m += '.';
      m += name;
      m += ": set by the bridge itself (brokers, group_id and client_id are [kafka] keys; offsets "
           "are stored and committed only once ringcast holds a record)";
      throw ConfigError(m);
    }
  }
}

bool valid_field_name(const std::string& s) {
  return !s.empty() && s.size() <= 256 && std::all_of(s.begin(), s.end(), [](char c) {
    return static_cast<unsigned char>(c) > 0x20 && static_cast<unsigned char>(c) < 0x7f;
  });
}

std::string read_token_file(const std::string& path, Reader& r) {
  std::ifstream f(path, std::ios::binary);
  if (!f) r.fail("token_file", "cannot read " + path);
  std::ostringstream s;
  s << f.rdbuf();
  std::string token(trim(s.str()));
  if (token.empty()) r.fail("token_file", path + " is empty");
  return token;
}

}  // namespace

const char* mapping_source_name(MappingSource s) {
  switch (s) {
    case MappingSource::kHeaders:
      return "headers";
    case MappingSource::kJson:
      return "json";
    case MappingSource::kKey:
      return "key";
  }
  return "headers";
}

const char* id_from_name(IdFrom f) {
  return f == IdFrom::kField ? "field" : "topic-partition-offset";
}

bool parse_duration(std::string_view text, Millis& out) {
  text = trim(text);
  if (text == "0") {
    out = Millis(0);
    return true;
  }
  size_t i = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i;
  if (i == 0 || i > 12) return false;
  int64_t n = 0;
  std::from_chars(text.data(), text.data() + i, n);
  std::string_view unit = text.substr(i);
  int64_t mul = 0;
  if (unit == "ms") {
    mul = 1;
  } else if (unit == "s") {
    mul = 1000;
  } else if (unit == "m") {
    mul = 60'000;
  } else if (unit == "h") {
    mul = 3'600'000;
  } else {
    return false;
  }
  out = Millis(n * mul);
  return true;
}

bool parse_bytes(std::string_view text, uint64_t& out) {
  text = trim(text);
  size_t i = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i;
  if (i == 0 || i > 15) return false;
  uint64_t n = 0;
  std::from_chars(text.data(), text.data() + i, n);
  std::string_view unit = trim(text.substr(i));
  uint64_t mul = 0;
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
    return false;
  }
  out = n * mul;
  return true;
}

bool split_host_port(std::string_view text, std::string& host, uint16_t& port) {
  size_t colon;
  if (!text.empty() && text.front() == '[') {
    size_t close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      return false;
    }
    host = std::string(text.substr(1, close - 1));
    colon = close + 1;
  } else {
    colon = text.rfind(':');
    if (colon == std::string_view::npos || colon == 0) return false;
    host = std::string(text.substr(0, colon));
    if (host.find(':') != std::string::npos) return false;  // IPv6 needs brackets
  }
  std::string_view p = text.substr(colon + 1);
  unsigned v = 0;
  auto [end, ec] = std::from_chars(p.data(), p.data() + p.size(), v);
  if (p.empty() || ec != std::errc() || end != p.data() + p.size() || v > 65535) return false;
  port = static_cast<uint16_t>(v);
  return !host.empty();
}

ApiUrl parse_api_url(std::string_view text, const char* key) {
  auto bad = [&](const std::string& why) -> ConfigError {
    std::string m = key;
    m += ": ";
    m += why;
    return ConfigError(m);
  };
  ApiUrl u;
  u.text = std::string(text);
  constexpr std::string_view kHttp = "http://";
  if (text.substr(0, 8) == "https://") {
    throw bad(
        "https is not supported: point the bridge at a plain-HTTP listener of the daemon on "
        "loopback or a private network, or at a local TLS-terminating proxy (docs/operations.md "
        "§6, Kafka bridge)");
  }
  if (text.substr(0, kHttp.size()) != kHttp) throw bad("must start with http://");
  std::string_view rest = text.substr(kHttp.size());
  size_t slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  std::string_view path = slash == std::string_view::npos ? "" : rest.substr(slash);
  if (authority.find('@') != std::string_view::npos) {
    throw bad("credentials in the URL are refused: use token or token_file");
  }
  if (path.find_first_of("?#") != std::string_view::npos) {
    throw bad("a query or fragment is not allowed");
  }
  if (authority.empty()) throw bad("no host");
  bool bracketed = authority.front() == '[';
  bool has_port = bracketed ? authority.find("]:") != std::string_view::npos
                            : authority.find(':') != std::string_view::npos;
  if (has_port) {
    if (!split_host_port(authority, u.host, u.port) || u.port == 0) throw bad("bad host:port");
  } else {
    u.host = std::string(bracketed ? authority.substr(1, authority.size() - 2) : authority);
    u.port = 80;
  }
  for (char c : u.host) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == ':')) {
      throw bad("bad host");
    }
  }
  while (!path.empty() && path.back() == '/') path.remove_suffix(1);
  for (char c : path) {
    if (static_cast<unsigned char>(c) <= 0x20 || static_cast<unsigned char>(c) >= 0x7f) {
      throw bad("bad path");
    }
  }
  u.prefix = std::string(path);
  return u;
}

BridgeConfig parse_config(std::string_view text, const std::string& origin) {
  toml::table root;
  try {
    root = toml::parse(text, origin);
  } catch (const toml::parse_error& e) {
    const auto& b = e.source().begin;
    throw ConfigError(origin + ":" + std::to_string(b.line) + ":" + std::to_string(b.column) +
                      ": TOML syntax error: " + std::string(e.description()));
  }
  BridgeConfig c;
  for (const auto& [k, v] : root) {
    static constexpr std::string_view kSections[] = {"kafka",       "ringcast", "mapping",
                                                     "dead_letter", "metrics",  "log"};
    if (std::find(std::begin(kSections), std::end(kSections), k.str()) == std::end(kSections)) {
      throw ConfigError(origin + ": [" + std::string(k.str()) + "]: unknown section");
    }
    if (!v.is_table()) {
      throw ConfigError(origin + ": " + std::string(k.str()) + ": expected a [section]");
    }
  }
  auto required = [&](const Reader& r, std::string_view key, const std::string& hint) {
    if (!r.has(key)) throw ConfigError(origin + ": " + r.path(key) + ": required" + hint);
  };

  // [kafka]
  Reader kafka(root["kafka"].as_table(), "kafka", origin);
  required(kafka, "brokers", " (\"host:9092\" or a list of them)");
  required(kafka, "topics", " (a list of topic names)");
  kafka.string_or_list("brokers", c.kafka.brokers, ',');
  if (c.kafka.brokers.empty()) kafka.fail("brokers", "must not be empty");
  kafka.nonempty_string("group_id", c.kafka.group_id);
  kafka.string_list("topics", c.kafka.topics);
  if (c.kafka.topics.empty()) kafka.fail("topics", "must name at least one topic");
  kafka.nonempty_string("client_id", c.kafka.client_id);
  kafka.properties("properties", c.kafka.properties);
  kafka.properties("consumer_properties", c.kafka.consumer_properties);
  kafka.properties("producer_properties", c.kafka.producer_properties);
  kafka.done();
  check_reserved(c.kafka.properties, "kafka.properties", true, true, origin);
  check_reserved(c.kafka.consumer_properties, "kafka.consumer_properties", true, false, origin);
  check_reserved(c.kafka.producer_properties, "kafka.producer_properties", false, true, origin);

  // [ringcast]
  Reader rc(root["ringcast"].as_table(), "ringcast", origin);
  std::string url = "http://127.0.0.1:8080";
  rc.string("url", url);
  try {
    c.ringcast.url = parse_api_url(url, "ringcast.url");
  } catch (const ConfigError& e) {
    throw ConfigError(origin + ": " + e.what());
  }
  if (rc.has("token") && rc.has("token_file")) {
    rc.fail("token_file", "give token or token_file, not both");
  }
  if (!rc.has("token") && !rc.has("token_file")) {
    throw ConfigError(origin +
                      ": ringcast.token_file: required (or ringcast.token): the admin token or a "
                      "tenant key the bridge sends as Bearer");
  }
  rc.string("token", c.ringcast.token);
  if (rc.has("token") && c.ringcast.token.empty()) rc.fail("token", "must not be empty");
  std::string token_file;
  rc.nonempty_string("token_file", token_file);
  if (!token_file.empty()) c.ringcast.token = read_token_file(token_file, rc);
  for (char ch : c.ringcast.token) {
    if (static_cast<unsigned char>(ch) <= 0x20 || static_cast<unsigned char>(ch) >= 0x7f) {
      rc.fail(rc.has("token") ? "token" : "token_file",
              "the token holds a space or a byte outside printable ASCII");
    }
  }
  rc.duration("connect_timeout", c.ringcast.connect_timeout, Millis(100), Millis(600'000));
  rc.duration("request_timeout", c.ringcast.request_timeout, Millis(100), Millis(3'600'000));
  rc.integer("batch_max_events", c.ringcast.batch_max_events, 1, 100'000);
  rc.duration("batch_max_wait", c.ringcast.batch_max_wait, Millis(0), Millis(60'000));
  rc.bytes("batch_max_bytes", c.ringcast.batch_max_bytes, 1024, 1ULL << 30);
  rc.duration("retry_initial", c.ringcast.retry_initial, Millis(1), Millis(600'000));
  rc.duration("retry_max", c.ringcast.retry_max, Millis(1), Millis(3'600'000));
  if (c.ringcast.retry_max < c.ringcast.retry_initial) {
    rc.fail("retry_max", "must not be below retry_initial");
  }
  rc.duration("shutdown_grace", c.ringcast.shutdown_grace, Millis(0), Millis(3'600'000));
  rc.done();

  // [mapping]
  Reader m(root["mapping"].as_table(), "mapping", origin);
  std::string source = "headers";
  m.string("source", source);
  if (source == "headers") {
    c.mapping.source = MappingSource::kHeaders;
  } else if (source == "json") {
    c.mapping.source = MappingSource::kJson;
  } else if (source == "key") {
    c.mapping.source = MappingSource::kKey;
  } else {
    m.fail("source", "must be \"headers\", \"json\" or \"key\"");
  }
  struct FieldKey {
    const char* key;
    std::string* out;
  };
  for (FieldKey f :
       {FieldKey{"tenant_field", &c.mapping.fields.tenant},
        FieldKey{"id_field", &c.mapping.fields.id}, FieldKey{"type_field", &c.mapping.fields.type},
        FieldKey{"payload_field", &c.mapping.fields.payload},
        FieldKey{"ordering_key_field", &c.mapping.fields.ordering_key}}) {
    m.string(f.key, *f.out);
    if (!valid_field_name(*f.out)) {
      m.fail(f.key, "1-256 printable ASCII characters without spaces");
    }
  }
  {
    const auto& f = c.mapping.fields;
    std::vector<std::string> names{f.tenant, f.id, f.type, f.ordering_key};
    if (c.mapping.source == MappingSource::kJson) names.push_back(f.payload);
    std::sort(names.begin(), names.end());
    if (std::adjacent_find(names.begin(), names.end()) != names.end()) {
      m.fail("tenant_field", "the *_field keys must name different fields");
    }
  }
  if (m.has("payload_field") && c.mapping.source != MappingSource::kJson) {
    m.fail("payload_field", "only with source = \"json\" (otherwise the payload is the value)");
  }
  m.string("default_tenant", c.mapping.default_tenant);
  if (!c.mapping.default_tenant.empty()) {
    if (auto e = check_tenant_name(c.mapping.default_tenant, 128)) {
      m.fail("default_tenant", e->message);
    }
  }
  std::string id_from = "field";
  m.string("id_from", id_from);
  if (id_from == "field") {
    c.mapping.id_from = IdFrom::kField;
  } else if (id_from == "topic-partition-offset") {
    c.mapping.id_from = IdFrom::kTopicPartitionOffset;
  } else {
    m.fail("id_from", "must be \"field\" or \"topic-partition-offset\"");
  }
  m.done();

  // [dead_letter]
  Reader dl(root["dead_letter"].as_table(), "dead_letter", origin);
  dl.nonempty_string("topic", c.dead_letter.topic);
  dl.duration("timeout", c.dead_letter.timeout, Millis(100), Millis(600'000));
  dl.done();
  if (std::find(c.kafka.topics.begin(), c.kafka.topics.end(), c.dead_letter.topic) !=
      c.kafka.topics.end()) {
    throw ConfigError(origin + ": dead_letter.topic: must not be one of kafka.topics");
  }

  // [metrics]
  Reader mt(root["metrics"].as_table(), "metrics", origin);
  mt.string("listen", c.metrics_listen);
  if (!c.metrics_listen.empty()) {
    std::string host;
    uint16_t port = 0;
    if (!split_host_port(c.metrics_listen, host, port)) {
      mt.fail("listen", "expected \"host:port\" (\"127.0.0.1:9465\"), or \"\" for none");
    }
  }
  mt.done();

  // [log]
  Reader lg(root["log"].as_table(), "log", origin);
  lg.string("level", c.log_level);
  log::Level level;
  if (!log::parse_level(c.log_level, level)) {
    lg.fail("level", "must be \"debug\", \"info\", \"warn\" or \"error\"");
  }
  lg.done();
  return c;
}

BridgeConfig load_config(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw ConfigError(path + ": cannot read the file");
  std::ostringstream s;
  s << f.rdbuf();
  return parse_config(s.str(), path);
}

}  // namespace ringcast::kafka_bridge
