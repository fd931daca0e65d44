// ringcast-kafka-bridge's configuration (docs/operations.md §6, "Kafka bridge"): a TOML file read
// once at start-up. Invariant: load_config() either returns a complete, checked config or throws
// ConfigError whose message starts with the offending key ("ringcast.url: ..."); nothing is
// defaulted silently past a bad value. The token is kept here and never printed.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "intake/entry.h"

namespace ringcast::kafka_bridge {

using Millis = std::chrono::milliseconds;

class ConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Where a record's tenant, id, type and ordering key are read (SPEC R1, R13.1).
enum class MappingSource : uint8_t {
  kHeaders,  // record headers named by the *_field keys; the payload is the record's value
  kJson,     // top-level members of the value (a JSON object); the payload is its payload_field
  kKey,      // top-level members of the record key (a JSON object); the payload is the value
};
const char* mapping_source_name(MappingSource s);

enum class IdFrom : uint8_t {
  kField,                 // the producer's id, from id_field
  kTopicPartitionOffset,  // "<topic>-<partition>-<offset>": a re-read is a duplicate (SPEC R12.5)
};
const char* id_from_name(IdFrom f);

using Properties = std::vector<std::pair<std::string, std::string>>;

struct KafkaSection {
  std::string brokers;  // bootstrap.servers, comma-separated
  std::string group_id = "ringcast-kafka-bridge";
  std::vector<std::string> topics;  // names, or "^regex" subscriptions (librdkafka)
  std::string client_id = "ringcast-kafka-bridge";
  Properties properties;           // [kafka.properties]: consumer and dead-letter producer
  Properties consumer_properties;  // [kafka.consumer_properties]
  Properties producer_properties;  // [kafka.producer_properties]
};

// A parsed http:// URL of the daemon's API.
struct ApiUrl {
  std::string host;  // a name, an IPv4 address, or an IPv6 address without brackets
  uint16_t port = 80;
  std::string prefix;  // path before /v1 ("" or "/ringcast", never a trailing slash)
  std::string text;    // as configured (it holds no secret: userinfo is refused)
};
// Throws ConfigError("<key>: ...").
ApiUrl parse_api_url(std::string_view text, const char* key);

struct RingcastSection {
  ApiUrl url;
  std::string token;  // admin token or a tenant key (rck_…); never logged
  Millis connect_timeout{5000};
  Millis request_timeout{30000};  // a bulk answer comes once every line is durable
  uint32_t batch_max_events = 1000;
  Millis batch_max_wait{100};
  size_t batch_max_bytes = 16u << 20;  // NDJSON body; the daemon's max_bulk_body_bytes is 64 MiB
  Millis retry_initial{200};           // transient refusals: backoff from here ...
  Millis retry_max{10000};             // ... doubling up to here, with jitter
  Millis shutdown_grace{30000};        // SIGTERM: time to finish the batch in hand
};

struct MappingSection {
  MappingSource source = MappingSource::kHeaders;
  intake::FieldNames fields;   // payload_field is read in json mode only
  std::string default_tenant;  // "": a record must name its tenant
  IdFrom id_from = IdFrom::kField;
};

struct DeadLetterSection {
  std::string topic = "ringcast-dead-letter";
  Millis timeout{30000};  // one produce's delivery report; a failure is retried, never skipped
};

struct BridgeConfig {
  KafkaSection kafka;
  RingcastSection ringcast;
  MappingSection mapping;
  DeadLetterSection dead_letter;
  std::string metrics_listen = "127.0.0.1:9465";  // "": no metrics listener
  std::string log_level = "info";
};

// Reads and checks the file; throws ConfigError.
BridgeConfig load_config(const std::string& path);
// The same from TOML text (`origin` names it in messages); tests use it.
BridgeConfig parse_config(std::string_view toml, const std::string& origin);

// "100ms", "1s", "1.5s" is refused (whole units), "2m", "1h"; a bare "0" is zero.
bool parse_duration(std::string_view text, Millis& out);
// "16MiB", "512KiB", "1000000", "8MB".
bool parse_bytes(std::string_view text, uint64_t& out);
// "host:port" (IPv4, a name, or [IPv6]:port): false when malformed.
bool split_host_port(std::string_view text, std::string& host, uint16_t& port);

}  // namespace ringcast::kafka_bridge
