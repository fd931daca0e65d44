// `ringcast-kafka-bridge`: feeds Kafka topics into ringcast through its bulk route
// (docs/operations.md §6, "Kafka bridge"). Its own process: librdkafka links OpenSSL, the daemon
// BoringSSL, and the two must never share an address space. Exit codes: 0 stopped by a signal,
// 1 a fatal Kafka error or a failure at start, 2 a bad command line or configuration.
#include <signal.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <cstdio>
#include <exception>
#include <memory>
#include <string>

#include "bridge/kafka/bridge.h"
#include "bridge/kafka/config.h"
#include "bridge/kafka/log.h"
#include "bridge/kafka/metrics.h"

namespace {

std::atomic<int> g_stop{0};
static_assert(std::atomic<int>::is_always_lock_free, "set from a signal handler");

extern "C" void on_signal(int) {
  // The first signal asks for a graceful stop, a second one for leaving at once.
  int s = g_stop.load();
  g_stop.store(s < 2 ? s + 1 : 2);
}

constexpr const char* kDescription =
    "ringcast-kafka-bridge: feeds Kafka topics into ringcast.\n"
    "\n"
    "A member of a Kafka consumer group that sends each poll cycle's records to ringcast's bulk\n"
    "route (POST /v1/events/bulk) and commits a partition's offset only once every record up to\n"
    "it is held by ringcast (202 accepted, 200 duplicate) or by the dead-letter topic.\n";

constexpr const char* kFooter =
    "\nCONFIGURATION (TOML; every key but kafka.brokers, kafka.topics and the token has a "
    "default)\n"
    "  [kafka]        brokers = [\"kafka1:9092\"], topics = [\"events\"], group_id, client_id;\n"
    "                 [kafka.properties] librdkafka properties for both clients "
    "(security.protocol,\n"
    "                 sasl.*, ssl.*), [kafka.consumer_properties], [kafka.producer_properties]\n"
    "  [ringcast]     url = \"http://127.0.0.1:8080\", token_file (or token): the admin token or\n"
    "                 a tenant key; batch_max_events = 1000, batch_max_wait = \"100ms\",\n"
    "                 batch_max_bytes = \"16MiB\", request_timeout = \"30s\", retry_initial =\n"
    "                 \"200ms\", retry_max = \"10s\", shutdown_grace = \"30s\"\n"
    "  [mapping]      source = \"headers\" | \"json\" | \"key\"; tenant_field, id_field, "
    "type_field,\n"
    "                 ordering_key_field, payload_field (json); default_tenant;\n"
    "                 id_from = \"field\" | \"topic-partition-offset\"\n"
    "  [dead_letter]  topic = \"ringcast-dead-letter\", timeout = \"30s\"\n"
    "  [metrics]      listen = \"127.0.0.1:9465\" (\"\": none): GET /metrics, GET /healthz\n"
    "  [log]          level = \"info\"\n"
    "\n"
    "MAPPING\n"
    "  headers  tenant, id, type and ordering key are record headers; the payload is the value\n"
    "  json     the value is a JSON object holding them; the payload is its payload_field member\n"
    "  key      the record key is a JSON object holding them; the payload is the value\n"
    "  The payload must be one JSON value and is delivered byte for byte (SPEC R1).\n"
    "\n"
    "SEMANTICS (at-least-once; ringcast's idempotency on the event id absorbs re-reads)\n"
    "  accepted/duplicate  done\n"
    "  400, 404 unknown_tenant, 409, 413, 422, a record that maps to no event\n"
    "                      produced to the dead-letter topic with headers ringcast-error-code,\n"
    "                      ringcast-error-message, ringcast-source-topic, -partition, -offset;\n"
    "                      done once its delivery is reported\n"
    "  429, 5xx, 401/403, no answer\n"
    "                      sent again with backoff, never skipped\n"
    "  Offsets are committed synchronously once every record of the batch is done. SIGTERM:\n"
    "  stop consuming, finish the batch (shutdown_grace), commit, leave the group; a second\n"
    "  signal leaves at once without committing what is not done.\n"
    "\n"
    "EXIT STATUS\n"
    "  0 stopped by a signal, 1 a fatal Kafka error or a failure at start, 2 bad usage or "
    "config\n"
    "\n"
    "See docs/operations.md section 6, \"Kafka bridge\".";

}  // namespace

int main(int argc, char** argv) {
  using namespace ringcast::kafka_bridge;
  CLI::App app{kDescription, "ringcast-kafka-bridge"};
  app.footer(kFooter);
  std::string config_path;
  bool check_only = false;
  app.add_option("-c,--config", config_path, "the bridge's TOML configuration file")
      ->check(CLI::ExistingFile);
  app.add_flag("--check-config", check_only,
               "read and check the configuration (and the token file), then exit: 0 when it is "
               "valid, 2 with the error naming the key");
  app.set_version_flag("-V,--version", std::string("ringcast-kafka-bridge ") + RINGCAST_VERSION,
                       "print the version and exit");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (config_path.empty()) {
    std::fprintf(stderr, "ringcast-kafka-bridge: --config is required (see --help)\n");
    return 2;
  }
  BridgeConfig config;
  try {
    config = load_config(config_path);
  } catch (const ConfigError& e) {
    std::fprintf(stderr, "ringcast-kafka-bridge: config: %s\n", e.what());
    return 2;
  }
  if (check_only) return 0;
  log::Level level = log::Level::kInfo;
  log::parse_level(config.log_level, level);
  log::set_level(level);

  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);

  Counters counters;
  try {
    std::unique_ptr<MetricsListener> metrics;
    if (!config.metrics_listen.empty()) {
      metrics = std::make_unique<MetricsListener>(config.metrics_listen, counters);
      log::info("metrics listening on " + metrics->address());
    }
    Bridge bridge(config, counters);
    return bridge.run(g_stop);
  } catch (const std::exception& e) {
    log::error(e.what());
    return 1;
  }
}
