// `ringcast intake status`: each message-bus intake source's state, lag and counters, Redis
// Streams and NATS JetStream alike (GET /v1/intake, docs/operations.md §6).
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "tools/ringcast/cli_commands.h"

namespace ringcast::cli {
namespace {

// The sum of the samples of `name` whose labels contain `label` ("" for all), in Prometheus text.
// `negative_unknown`: a negative sample (a partition's lag not known yet) makes the sum -1.
double metric_sum(std::string_view text, std::string_view name, std::string_view label = {},
                  bool negative_unknown = false) {
  double sum = 0;
  bool unknown = false;
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find('\n', at);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(at, end - at);
    at = end + 1;
    if (line.empty() || line[0] == '#' || line.substr(0, name.size()) != name) continue;
    const std::string_view rest = line.substr(name.size());
    if (rest.empty() || (rest[0] != ' ' && rest[0] != '{')) continue;  // another metric's prefix
    const size_t close = rest[0] == '{' ? rest.find('}') : 0;
    if (close == std::string_view::npos) continue;
    if (!label.empty() && rest.substr(0, close).find(label) == std::string_view::npos) continue;
    const std::string value(rest.substr(close + 1));
    const double v = std::strtod(value.c_str(), nullptr);
    unknown = unknown || (negative_unknown && v < 0);
    sum += v;
  }
  return unknown ? -1 : sum;
}

// A Kafka bridge is a process of its own (docs/operations.md §6 "Kafka bridge"): the daemon does
// not know it, so `--kafka-bridge ADDRESS` reads the bridge's metrics listener for its row.
struct BridgeStatus {
  std::string address;
  std::string error;  // empty: read
  std::string metrics;
};

BridgeStatus read_bridge(const std::string& address) {
  BridgeStatus b;
  b.address = address;
  std::string error;
  auto server = parse_server(address, &error);
  if (!server) throw CliError("--kafka-bridge " + address + ": " + error);
  HttpClient client(*server, "", std::chrono::seconds(5));
  HttpOutcome o = client.request("GET", "/metrics");
  if (!o.ok) {
    b.error = o.error;
  } else if (o.reply.status != 200) {
    b.error = "HTTP " + std::to_string(o.reply.status);
  } else {
    b.metrics = std::move(o.reply.body);
  }
  return b;
}

std::string count(const BridgeStatus& b, std::string_view name, std::string_view label = {}) {
  if (!b.error.empty()) return "?";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.0f", metric_sum(b.metrics, name, label));
  return buf;
}

// The sum of the partitions' lag; -1 ("?" in the table) while one is not known.
std::string lag(const BridgeStatus& b, bool table) {
  const double v =
      b.error.empty() ? metric_sum(b.metrics, "ringcast_kafka_bridge_lag", {}, true) : -1;
  if (v < 0) return table ? "?" : "-1";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.0f", v);
  return buf;
}

void run_status(GlobalOptions& g, const std::vector<std::string>& bridges) {
  std::vector<BridgeStatus> kafka;
  for (const std::string& a : bridges) kafka.push_back(read_bridge(a));
  auto client = make_client(g);
  simdjson::dom::parser p;
  JsonReply r = call_json(*client, p, "GET", "/v1/intake");
  if (g.json) {
    if (kafka.empty()) return print_json(r.body);
    // {"sources": [...], "kafka_bridges": [{"address", "state", "lag", "acked", ...}]}
    std::string out(r.body.substr(0, r.body.rfind('}')));
    out += ",\"kafka_bridges\":[";
    for (size_t i = 0; i < kafka.size(); ++i) {
      const BridgeStatus& b = kafka[i];
      if (i) out += ',';
      out += "{\"address\":\"";
      out += b.address;  // a host:port the caller gave: no quote or backslash in it (parse_server)
      out += "\",\"state\":\"";
      out += b.error.empty() ? "up" : "unreachable";
      out += '"';
      if (b.error.empty()) {
        out += ",\"lag\":";
        out += lag(b, false);
        for (auto [key, name, label] :
             {std::tuple{"consumed", "ringcast_kafka_bridge_records_total", "\"consumed\""},
              std::tuple{"acked", "ringcast_kafka_bridge_records_total", "\"acked\""},
              std::tuple{"duplicate", "ringcast_kafka_bridge_records_total", "\"duplicate\""},
              std::tuple{"dead_lettered", "ringcast_kafka_bridge_records_total",
                         "\"dead_lettered\""},
              std::tuple{"committed", "ringcast_kafka_bridge_records_total", "\"committed\""},
              std::tuple{"rebalances", "ringcast_kafka_bridge_rebalances_total", ""}}) {
          out += ",\"";
          out += key;
          out += "\":";
          out += count(b, name, label);
        }
      }
      out += '}';
    }
    out += "]}";
    return print_json(out);
  }
  simdjson::dom::array items;
  if (r.root["sources"].get(items)) throw CliError("unexpected answer: " + clip(r.body, 200));
  Table t({"SOURCE", "KIND", "STATE", "STREAMS", "GROUP/CONSUMER", "LAG", "PENDING", "UNACKED",
           "READ", "ACCEPTED", "DUPLICATE", "DEAD-LETTERED", "REDELIVERED", "RECONNECTS"});
  auto kind_of = [](simdjson::dom::element s) {
    const std::string k = jstr(s, "kind");
    return k.empty() ? std::string("redis") : k;
  };
  for (auto s : items) {
    const bool nats = kind_of(s) == "nats";
    std::string streams;
    simdjson::dom::array keys;
    if (!s["streams"].get(keys)) {
      for (auto k : keys) {
        std::string_view v;
        if (!k.get(v)) streams += (streams.empty() ? "" : ",") + std::string(v);
      }
    }
    // JetStream: the stream (and the consumer's filter), and the durable consumer.
    if (nats && !jstr(s, "filter_subject").empty())
      streams += " (" + jstr(s, "filter_subject") + ")";
    const int64_t lag = jint(s, "lag");
    t.add({jstr(s, "name"), kind_of(s), jstr(s, "state"), streams,
           nats ? jstr(s, "durable") : jstr(s, "group") + "/" + jstr(s, "consumer"),
           lag < 0 ? "?" : std::to_string(lag), std::to_string(jint(s, "pending")),
           std::to_string(jint(s, "unacked")), std::to_string(jint(s, "read")),
           std::to_string(jint(s, "accepted")), std::to_string(jint(s, "duplicate")),
           std::to_string(jint(s, "dead_lettered")),
           nats ? std::to_string(jint(s, "redelivered")) : std::string("-"),
           std::to_string(jint(s, "reconnects"))});
  }
  // Each Kafka bridge asked for: lag = the sum over its assigned partitions; redelivered = the
  // records ringcast answered as duplicates (re-read after a restart or a rebalance, SPEC R12.5).
  for (const BridgeStatus& b : kafka) {
    const char* rec = "ringcast_kafka_bridge_records_total";
    t.add({b.address, "kafka", b.error.empty() ? "up" : "unreachable", "-", "-", lag(b, true), "-",
           count(b, "ringcast_kafka_bridge_in_flight"), count(b, rec, "\"consumed\""),
           count(b, rec, "\"acked\""), count(b, rec, "\"duplicate\""),
           count(b, rec, "\"dead_lettered\""), count(b, rec, "\"duplicate\""), "-"});
  }
  t.print("no intake sources are configured");
  for (const BridgeStatus& b : kafka) {
    if (!b.error.empty())
      std::printf("%s: Kafka bridge unreachable: %s\n", b.address.c_str(), b.error.c_str());
  }
  // A source that cannot reach its bus says why (a TLS, ACL or credential refusal, SPEC R14; a
  // JetStream stream or consumer that is missing).
  for (auto s : items) {
    const std::string down = jstr(s, "connection_error");
    if (down.empty()) continue;
    if (kind_of(s) == "nats") {
      std::printf("%s: %s\n", jstr(s, "name").c_str(), down.c_str());
    } else {
      std::printf("%s: Redis connection down: %s\n", jstr(s, "name").c_str(), down.c_str());
    }
  }
}

}  // namespace

void add_intake_commands(CLI::App& app, GlobalOptions& g) {
  CLI::App* in = app.add_subcommand(
      "intake", "message-bus intake sources ([[intake.redis]], [[intake.nats]])");
  in->require_subcommand(1);
  CLI::App* status = in->add_subcommand("status", "each source's state, lag and counters");
  auto bridges = std::make_shared<std::vector<std::string>>();
  status->add_option("--kafka-bridge", *bridges,
                     "a ringcast-kafka-bridge's metrics listener (host:port), read for its row; "
                     "repeatable");
  status->callback([&g, bridges] { run_status(g, *bridges); });
}

}  // namespace ringcast::cli
