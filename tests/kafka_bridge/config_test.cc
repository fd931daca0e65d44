// ringcast-kafka-bridge's configuration (bridge/kafka/config.h, docs/operations.md §6 "Kafka
// bridge"): defaults, and every bad value refused with an error that names its key.
#include "bridge/kafka/config.h"

#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "tests/support/temp_dir.h"

namespace ringcast::kafka_bridge {
namespace {

const std::string kMinimal =
    "[kafka]\nbrokers = \"k1:9092\"\ntopics = [\"events\"]\n[ringcast]\ntoken = \"tok-123\"\n";

TEST(KafkaBridgeConfig, MinimalConfigGetsTheDocumentedDefaults) {
  BridgeConfig c = parse_config(kMinimal, "t.toml");
  EXPECT_EQ(c.kafka.brokers, "k1:9092");
  EXPECT_EQ(c.kafka.topics, std::vector<std::string>{"events"});
  EXPECT_EQ(c.kafka.group_id, "ringcast-kafka-bridge");
  EXPECT_EQ(c.kafka.client_id, "ringcast-kafka-bridge");
  EXPECT_EQ(c.ringcast.url.host, "127.0.0.1");
  EXPECT_EQ(c.ringcast.url.port, 8080);
  EXPECT_EQ(c.ringcast.url.prefix, "");
  EXPECT_EQ(c.ringcast.token, "tok-123");
  EXPECT_EQ(c.ringcast.batch_max_events, 1000u);
  EXPECT_EQ(c.ringcast.batch_max_wait, Millis(100));
  EXPECT_EQ(c.ringcast.batch_max_bytes, 16u << 20);
  EXPECT_EQ(c.ringcast.shutdown_grace, Millis(30000));
  EXPECT_EQ(c.mapping.source, MappingSource::kHeaders);
  EXPECT_EQ(c.mapping.id_from, IdFrom::kField);
  EXPECT_EQ(c.mapping.fields.tenant, "tenant");
  EXPECT_EQ(c.mapping.fields.payload, "payload");
  EXPECT_EQ(c.dead_letter.topic, "ringcast-dead-letter");
  EXPECT_EQ(c.metrics_listen, "127.0.0.1:9465");
  EXPECT_EQ(c.log_level, "info");
}

TEST(KafkaBridgeConfig, EveryKeyIsRead) {
  BridgeConfig c = parse_config(
      "[kafka]\nbrokers = [\"a:1\", \"b:2\"]\ntopics = [\"x\", \"^y.*\"]\ngroup_id = \"g\"\n"
      "client_id = \"c\"\n[kafka.properties]\n\"security.protocol\" = \"SASL_SSL\"\n"
      "\"socket.keepalive.enable\" = true\n[kafka.consumer_properties]\n"
      "\"max.poll.interval.ms\" = 600000\n[kafka.producer_properties]\n\"linger.ms\" = 1\n"
      "[ringcast]\nurl = \"http://[::1]:9000/rc/\"\ntoken = \"t\"\nbatch_max_events = 10\n"
      "batch_max_wait = \"5ms\"\nbatch_max_bytes = \"1MiB\"\nrequest_timeout = \"2s\"\n"
      "connect_timeout = \"1s\"\nretry_initial = \"10ms\"\nretry_max = \"1m\"\n"
      "shutdown_grace = \"0\"\n[mapping]\nsource = \"json\"\ntenant_field = \"t\"\n"
      "id_field = \"i\"\ntype_field = \"y\"\npayload_field = \"p\"\nordering_key_field = \"k\"\n"
      "default_tenant = \"acme\"\nid_from = \"topic-partition-offset\"\n[dead_letter]\n"
      "topic = \"dl\"\ntimeout = \"5s\"\n[metrics]\nlisten = \"\"\n[log]\nlevel = \"debug\"\n",
      "t.toml");
  EXPECT_EQ(c.kafka.brokers, "a:1,b:2");
  EXPECT_EQ(c.kafka.topics.size(), 2u);
  ASSERT_EQ(c.kafka.properties.size(), 2u);
  EXPECT_EQ(c.kafka.properties[1].second, "true");
  ASSERT_EQ(c.kafka.consumer_properties.size(), 1u);
  EXPECT_EQ(c.kafka.consumer_properties[0].second, "600000");
  EXPECT_EQ(c.ringcast.url.host, "::1");
  EXPECT_EQ(c.ringcast.url.port, 9000);
  EXPECT_EQ(c.ringcast.url.prefix, "/rc");
  EXPECT_EQ(c.ringcast.batch_max_bytes, 1u << 20);
  EXPECT_EQ(c.ringcast.retry_max, Millis(60000));
  EXPECT_EQ(c.ringcast.shutdown_grace, Millis(0));
  EXPECT_EQ(c.mapping.source, MappingSource::kJson);
  EXPECT_EQ(c.mapping.fields.payload, "p");
  EXPECT_EQ(c.mapping.default_tenant, "acme");
  EXPECT_EQ(c.mapping.id_from, IdFrom::kTopicPartitionOffset);
  EXPECT_EQ(c.dead_letter.topic, "dl");
  EXPECT_EQ(c.metrics_listen, "");
  EXPECT_EQ(c.log_level, "debug");
}

TEST(KafkaBridgeConfig, BadValuesNameTheirKey) {
  struct Case {
    std::string toml;
    std::string key;
  };
  const std::string k = "[kafka]\nbrokers = \"k:1\"\ntopics = [\"e\"]\n";
  const std::string r = "[ringcast]\ntoken = \"t\"\n";
  const std::vector<Case> cases = {
      {"[ringcast]\ntoken = \"t\"\n", "kafka.brokers"},
      {"[kafka]\nbrokers = \"k:1\"\n" + r, "kafka.topics"},
      {"[kafka]\nbrokers = \"k:1\"\ntopics = []\n" + r, "kafka.topics"},
      {"[kafka]\nbrokers = []\ntopics = [\"e\"]\n" + r, "kafka.brokers"},
      {k + "group_id = \"\"\n" + r, "kafka.group_id"},
      {k + "topic = [\"e\"]\n" + r, "kafka.topic"},  // misspelled: unknown key
      {k + "[kafka.properties]\n\"group.id\" = \"x\"\n" + r, "kafka.properties.group.id"},
      {k + "[kafka.consumer_properties]\n\"enable.auto.offset.store\" = true\n" + r,
       "kafka.consumer_properties.enable.auto.offset.store"},
      {k + "[kafka.properties]\n\"x\" = [1]\n" + r, "kafka.properties.x"},
      {k + "[ringcast]\n", "ringcast.token"},
      {k + "[ringcast]\ntoken = \"a\"\ntoken_file = \"/x\"\n", "ringcast.token_file"},
      {k + "[ringcast]\ntoken = \"a b\"\n", "ringcast.token"},
      {k + "[ringcast]\ntoken_file = \"/nonexistent/token\"\n", "ringcast.token_file"},
      {k + r + "url = \"https://h:1\"\n", "ringcast.url"},
      {k + r + "url = \"ftp://h\"\n", "ringcast.url"},
      {k + r + "url = \"http://user:pw@h:1\"\n", "ringcast.url"},
      {k + r + "url = \"http://h:99999\"\n", "ringcast.url"},
      {k + r + "url = \"http://h:1/?q=1\"\n", "ringcast.url"},
      {k + r + "batch_max_events = 0\n", "ringcast.batch_max_events"},
      {k + r + "batch_max_events = 100001\n", "ringcast.batch_max_events"},
      {k + r + "batch_max_wait = \"soon\"\n", "ringcast.batch_max_wait"},
      {k + r + "batch_max_wait = 5\n", "ringcast.batch_max_wait"},
      {k + r + "batch_max_bytes = \"1 parsec\"\n", "ringcast.batch_max_bytes"},
      {k + r + "retry_initial = \"2s\"\nretry_max = \"1s\"\n", "ringcast.retry_max"},
      {k + r + "[mapping]\nsource = \"avro\"\n", "mapping.source"},
      {k + r + "[mapping]\nid_from = \"uuid\"\n", "mapping.id_from"},
      {k + r + "[mapping]\ntenant_field = \"a b\"\n", "mapping.tenant_field"},
      {k + r + "[mapping]\ntenant_field = \"id\"\n", "mapping.tenant_field"},
      {k + r + "[mapping]\npayload_field = \"p\"\n", "mapping.payload_field"},
      {k + r + "[mapping]\ndefault_tenant = \"no spaces\"\n", "mapping.default_tenant"},
      {k + r + "[dead_letter]\ntopic = \"e\"\n", "dead_letter.topic"},
      {k + r + "[dead_letter]\ntopic = \"\"\n", "dead_letter.topic"},
      {k + r + "[metrics]\nlisten = \"9465\"\n", "metrics.listen"},
      {k + r + "[log]\nlevel = \"loud\"\n", "log.level"},
      {k + r + "[extra]\nx = 1\n", "[extra]"},
      {k + r + "[ringcast\n", "TOML syntax error"},
  };
  for (const Case& c : cases) {
    try {
      parse_config(c.toml, "t.toml");
      ADD_FAILURE() << c.key << ": accepted\n" << c.toml;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(c.key), std::string::npos) << c.key << ": " << e.what();
      EXPECT_EQ(std::string(e.what()).find("t.toml"), 0u) << e.what();
    }
  }
}

TEST(KafkaBridgeConfig, TheTokenComesFromItsFileTrimmedAndIsNeverInAnError) {
  test::TempDir dir("kafka-bridge-config");
  const std::string path = dir.file("token");
  {
    std::ofstream f(path);
    f << "  rck_secret-token-1\n\n";
  }
  BridgeConfig c = parse_config(
      "[kafka]\nbrokers = \"k:1\"\ntopics = [\"e\"]\n[ringcast]\ntoken_file = \"" + path + "\"\n",
      "t.toml");
  EXPECT_EQ(c.ringcast.token, "rck_secret-token-1");
  try {
    parse_config(
        "[kafka]\nbrokers = \"k:1\"\ntopics = [\"e\"]\n[ringcast]\ntoken = "
        "\"secret value\"\n",
        "t.toml");
    ADD_FAILURE() << "a token with a space was accepted";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()).find("secret"), std::string::npos) << e.what();
  }
}

TEST(KafkaBridgeConfig, DurationsSizesAndAddresses) {
  Millis d{0};
  EXPECT_TRUE(parse_duration("250ms", d));
  EXPECT_EQ(d, Millis(250));
  EXPECT_TRUE(parse_duration("2m", d));
  EXPECT_EQ(d, Millis(120000));
  EXPECT_TRUE(parse_duration("0", d));
  EXPECT_EQ(d, Millis(0));
  EXPECT_FALSE(parse_duration("1.5s", d));
  EXPECT_FALSE(parse_duration("10", d));
  EXPECT_FALSE(parse_duration("", d));
  uint64_t b = 0;
  EXPECT_TRUE(parse_bytes("512KiB", b));
  EXPECT_EQ(b, 512u << 10);
  EXPECT_TRUE(parse_bytes("8MB", b));
  EXPECT_EQ(b, 8000000u);
  EXPECT_TRUE(parse_bytes("123", b));
  EXPECT_EQ(b, 123u);
  EXPECT_FALSE(parse_bytes("MiB", b));
  std::string host;
  uint16_t port = 0;
  EXPECT_TRUE(split_host_port("127.0.0.1:9465", host, port));
  EXPECT_EQ(host, "127.0.0.1");
  EXPECT_EQ(port, 9465);
  EXPECT_TRUE(split_host_port("[::1]:80", host, port));
  EXPECT_EQ(host, "::1");
  EXPECT_FALSE(split_host_port("::1:80", host, port));
  EXPECT_FALSE(split_host_port("host", host, port));
  EXPECT_FALSE(split_host_port("host:http", host, port));
  ApiUrl u = parse_api_url("http://ringcast.internal", "ringcast.url");
  EXPECT_EQ(u.host, "ringcast.internal");
  EXPECT_EQ(u.port, 80);
}

}  // namespace
}  // namespace ringcast::kafka_bridge
