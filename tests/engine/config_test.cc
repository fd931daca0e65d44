// engine/config: TOML parsing, durations and sizes, RINGCAST_* overrides, validation messages.
#include "engine/config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>

#include "engine/build.h"
#include "tests/engine/config_test_util.h"
#include "tests/support/temp_dir.h"
#include "tests/support/test_ca.h"

namespace ringcast {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

// The message of the ConfigError that `fn` throws ("" when it does not throw).
using testing_config::error_of;
using testing_config::load;

TEST(Duration, ParsesUnitsAndCompounds) {
  EXPECT_EQ(parse_duration("100ms"), milliseconds(100));
  EXPECT_EQ(parse_duration("15m"), minutes(15));
  EXPECT_EQ(parse_duration("2h"), hours(2));
  EXPECT_EQ(parse_duration("30d"), days(30));
  EXPECT_EQ(parse_duration("5s"), seconds(5));
  EXPECT_EQ(parse_duration("250us"), microseconds(250));
  EXPECT_EQ(parse_duration("7ns"), Duration(7));
  EXPECT_EQ(parse_duration("1h30m"), minutes(90));
  EXPECT_EQ(parse_duration("0"), Duration(0));
  EXPECT_EQ(parse_duration(" 10s "), seconds(10));
}

TEST(Duration, RejectsGarbage) {
  for (const char* bad : {"", "ms", "10", "10 s", "-5s", "1.5s", "10sec", "5x", "1h30",
                          "99999999999999999d", "s10"}) {
    EXPECT_EQ(parse_duration(bad), std::nullopt) << bad;
  }
}

TEST(Duration, FormatsShortestExactUnit) {
  EXPECT_EQ(format_duration(minutes(30)), "30m");
  EXPECT_EQ(format_duration(seconds(1800)), "30m");
  EXPECT_EQ(format_duration(minutes(90)), "90m");
  EXPECT_EQ(format_duration(days(30)), "30d");
  EXPECT_EQ(format_duration(milliseconds(1500)), "1500ms");
  EXPECT_EQ(format_duration(Duration(0)), "0s");
  for (const char* text : {"100ms", "15m", "2h", "30d", "1h30m", "3us"}) {
    auto d = parse_duration(text);
    ASSERT_TRUE(d);
    EXPECT_EQ(parse_duration(format_duration(*d)), d) << text;
  }
}

TEST(Bytes, ParsesAndFormats) {
  EXPECT_EQ(parse_bytes("1048576"), 1048576u);
  EXPECT_EQ(parse_bytes("1MiB"), 1048576u);
  EXPECT_EQ(parse_bytes("64KiB"), 65536u);
  EXPECT_EQ(parse_bytes("2GiB"), 2147483648u);
  EXPECT_EQ(parse_bytes("10MB"), 10'000'000u);
  EXPECT_EQ(parse_bytes("512B"), 512u);
  EXPECT_EQ(parse_bytes("1 MiB"), 1048576u);
  EXPECT_EQ(parse_bytes("1TiB"), std::nullopt);
  EXPECT_EQ(parse_bytes("-1"), std::nullopt);
  EXPECT_EQ(parse_bytes("MiB"), std::nullopt);
  EXPECT_EQ(parse_bytes("99999999999999999999GiB"), std::nullopt);
  EXPECT_EQ(format_bytes(1048576), "1MiB");
  EXPECT_EQ(format_bytes(65536), "64KiB");
  EXPECT_EQ(format_bytes(1000), "1000");
}

TEST(Listen, ParsesForms) {
  auto a = parse_listen("127.0.0.1:8080");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->first, IpAddress::v4(127, 0, 0, 1));
  EXPECT_EQ(a->second, 8080);
  auto b = parse_listen("[::1]:0");
  ASSERT_TRUE(b);
  EXPECT_FALSE(b->first.is_v4());
  EXPECT_EQ(b->second, 0);
  EXPECT_TRUE(parse_listen("localhost:9000"));
  EXPECT_FALSE(parse_listen("127.0.0.1"));
  EXPECT_FALSE(parse_listen("127.0.0.1:70000"));
  EXPECT_FALSE(parse_listen("::1:80"));
  EXPECT_FALSE(parse_listen("example.com:80"));
}

TEST(Config, DefaultsMatchTheIssue) {
  Config c = load("");
  EXPECT_EQ(c.server.listen, "127.0.0.1:8080");
  EXPECT_EQ(c.server.listen_port, 8080);
  EXPECT_EQ(c.storage.data_dir, "./ringcast-data");
  EXPECT_EQ(c.storage.sync, SyncPolicy::kInterval);
  EXPECT_EQ(c.storage.retention, days(30));
  EXPECT_GE(c.engine.shards, 1u);  // 0 resolved to the core count
  EXPECT_EQ(c.engine.fairness_cap, 50u);
  EXPECT_EQ(c.engine.breaker.window, minutes(5));
  EXPECT_EQ(c.engine.breaker.min_deliveries, 5u);
  EXPECT_DOUBLE_EQ(c.engine.breaker.failure_ratio, 0.8);
  EXPECT_EQ(c.engine.breaker.max_pause, minutes(30));
  EXPECT_EQ(c.transport.request_timeout, seconds(15));
  EXPECT_EQ(c.transport.pool_size, 32u);
  EXPECT_FALSE(c.transport.allow_http);
  EXPECT_EQ(c.transport.user_agent.rfind("ringcast/", 0), 0u);
  EXPECT_EQ(c.limits.max_body_bytes, 1024u * 1024);
  EXPECT_TRUE(c.policies.empty());
  EXPECT_TRUE(c.has_policy("smengo"));
  EXPECT_TRUE(c.has_policy("xhub"));
  EXPECT_FALSE(c.has_policy("fast"));
}

TEST(Config, ParsesEverySection) {
  Config c = load(R"(
[server]
listen = "[::1]:0"
api_token = "s3cret-token-0123456789abcdef01234"
shutdown_grace = "3s"

[storage]
data_dir = "/tmp/rc"
sync = "always"
sync_interval = "5ms"
retention = "7d"

[engine]
shards = 3
fairness_cap = 10
max_in_flight = 4

[engine.breaker]
window = "1m"
min_deliveries = 3
failure_ratio = 0.5
open_pause = "100ms"
max_pause = "1s"

[transport]
connect_timeout = "250ms"
request_timeout = "2s"
pool_size = 8
allow_http = true
allow_private = ["127.0.0.0/8", "::1/128"]
allowed_ports = [80, 8080, 9999]
user_agent = "test-agent"
max_response_drain_bytes = "2MiB"

[signing]
rotation_overlap = "15m"

[notifications]
webhook_url = "http://127.0.0.1:9999/ops"

[limits]
max_body_bytes = "256KiB"
max_bulk_body_bytes = 8388608

[policies.quick]
base = "smengo"
ladder = ["10ms", "20ms", "40ms"]
jitter = 0.0
auto_disable = true

[policies.money-fast]
base = "xhub"
ladder = ["1ms", "2ms"]
slow_ladder = ["5ms", "10ms"]
slow_ceiling = "1s"
max_age = "2s"
)");
  EXPECT_EQ(c.server.listen_port, 0);
  EXPECT_FALSE(c.server.listen_ip.is_v4());
  EXPECT_EQ(c.server.api_token, "s3cret-token-0123456789abcdef01234");
  EXPECT_EQ(c.server.shutdown_grace, seconds(3));
  EXPECT_EQ(c.storage.data_dir, "/tmp/rc");
  EXPECT_EQ(c.storage.sync, SyncPolicy::kAlways);
  EXPECT_EQ(c.storage.sync_interval, milliseconds(5));
  EXPECT_EQ(c.storage.retention, days(7));
  EXPECT_EQ(c.engine.shards, 3u);
  EXPECT_EQ(c.engine.fairness_cap, 10u);
  EXPECT_EQ(c.engine.max_in_flight, 4u);
  EXPECT_EQ(c.engine.breaker.window, minutes(1));
  EXPECT_EQ(c.engine.breaker.min_deliveries, 3u);
  EXPECT_DOUBLE_EQ(c.engine.breaker.failure_ratio, 0.5);
  EXPECT_EQ(c.engine.breaker.open_pause, milliseconds(100));
  EXPECT_EQ(c.transport.connect_timeout, milliseconds(250));
  EXPECT_EQ(c.transport.pool_size, 8u);
  EXPECT_TRUE(c.transport.allow_http);
  ASSERT_EQ(c.transport.allow_private_cidrs.size(), 2u);
  EXPECT_TRUE(c.transport.allow_private_cidrs[0].contains(IpAddress::v4(127, 0, 0, 2)));
  EXPECT_EQ(c.transport.allowed_ports, (std::vector<uint16_t>{80, 8080, 9999}));
  EXPECT_EQ(c.transport.user_agent, "test-agent");
  EXPECT_EQ(c.transport.max_response_drain_bytes, 2u * 1024 * 1024);
  EXPECT_EQ(c.signing.rotation_overlap, minutes(15));
  EXPECT_EQ(c.notifications.webhook_url, "http://127.0.0.1:9999/ops");
  EXPECT_EQ(c.limits.max_body_bytes, 256u * 1024);
  EXPECT_EQ(c.limits.max_bulk_body_bytes, 8u * 1024 * 1024);
  ASSERT_EQ(c.policies.size(), 2u);
  const PolicyConfig& q = c.policies.at("quick");
  EXPECT_EQ(q.name, "quick");
  EXPECT_EQ(q.base, "smengo");
  EXPECT_EQ(q.ladder,
            (std::vector<Duration>{milliseconds(10), milliseconds(20), milliseconds(40)}));
  EXPECT_EQ(q.jitter, 0.0);
  EXPECT_EQ(q.auto_disable, true);
  EXPECT_FALSE(q.max_age);
  const PolicyConfig& m = c.policies.at("money-fast");
  EXPECT_EQ(m.base, "xhub");
  EXPECT_EQ(m.slow_ladder.size(), 2u);
  EXPECT_EQ(m.slow_ceiling, seconds(1));
  EXPECT_EQ(m.max_age, seconds(2));
  EXPECT_TRUE(c.has_policy("money-fast"));
}

TEST(Config, CustomPoliciesBecomeCoreRetryPolicies) {
  Config c = load(R"(
[policies.quick]
base = "smengo"
ladder = ["10ms", "20ms", "40ms"]
jitter = 0.0
[policies.money-fast]
base = "xhub"
ladder = ["1ms", "2ms"]
slow_ladder = ["5ms", "10ms"]
slow_ceiling = "1s"
max_age = "2s"
breaker = false
money = [{type = "refund.completed"}, {type = "payment.status_changed", field = "status", values = ["paid"]}]
)");
  RetryPolicy q = to_retry_policy(c.policies.at("quick"));
  EXPECT_EQ(q.name, "quick");
  EXPECT_EQ(q.shape, PolicyShape::kFixedSchedule);
  EXPECT_EQ(q.fast_budget(), 4u);
  EXPECT_EQ(q.fast_pauses[1], milliseconds(20));
  EXPECT_EQ(q.jitter_permille, 0u);
  EXPECT_TRUE(q.disable_on_exhaustion);  // smengo's, not overridden
  RetryPolicy m = to_retry_policy(c.policies.at("money-fast"));
  EXPECT_EQ(m.shape, PolicyShape::kTwoLadder);
  EXPECT_EQ(m.fast_budget(), 3u);
  EXPECT_EQ(m.slow_budget(), 2u);
  EXPECT_EQ(m.slow_ceiling, seconds(1));
  EXPECT_EQ(m.absolute_ceiling, seconds(2));
  EXPECT_FALSE(m.use_breaker);
  ASSERT_EQ(m.money.rules.size(), 2u);
  EXPECT_TRUE(m.money.is_money("payment.status_changed", R"({"status":"paid"})"));
  EXPECT_FALSE(m.money.is_money("payment.status_changed", R"({"status":"failed"})"));
  EXPECT_FALSE(m.money.is_money("withdrawal.status_changed", R"({"status":"completed"})"));
  EXPECT_EQ(c.retry_policies().size(), 2u);
  PolicyRegistry reg;
  for (auto& p : c.retry_policies()) EXPECT_TRUE(reg.put(std::move(p)).ok());
  EXPECT_NE(reg.find("quick"), nullptr);
  // The money rules print and load back.
  Config again = load(c.to_toml(false));
  EXPECT_EQ(again.to_toml(false), c.to_toml(false));
}

TEST(Config, EnvironmentOverridesEveryKind) {
  Environment env = {
      {"RINGCAST_SERVER_LISTEN", "127.0.0.1:0"},
      {"RINGCAST_API_TOKEN", "from-env-0123456789abcdef0123456789"},
      {"RINGCAST_STORAGE_SYNC", "none"},
      {"RINGCAST_STORAGE_RETENTION", "2d"},
      {"RINGCAST_ENGINE_FAIRNESS_CAP", "7"},
      {"RINGCAST_ENGINE_BREAKER_FAILURE_RATIO", "0.9"},
      {"RINGCAST_TRANSPORT_ALLOW_HTTP", "true"},
      {"RINGCAST_TRANSPORT_ALLOW_PRIVATE", "127.0.0.0/8, ::1/128"},
      {"RINGCAST_TRANSPORT_ALLOWED_PORTS", "8080,8443"},
      {"RINGCAST_LIMITS_MAX_BODY_BYTES", "2MiB"},
      {"RINGCAST_POLICIES_QUICK_LADDER", "1ms,2ms"},
      {"RINGCAST_POLICIES_QUICK_AUTO_DISABLE", "false"},
  };
  Config c = load(R"(
[server]
listen = "127.0.0.1:9000"
api_token = "from-file-0123456789abcdef012345678"
[engine]
fairness_cap = 20
[policies.quick]
ladder = ["1s"]
)",
                  env);
  EXPECT_EQ(c.server.listen_port, 0);
  EXPECT_EQ(c.server.api_token, "from-env-0123456789abcdef0123456789");
  EXPECT_EQ(c.storage.sync, SyncPolicy::kNone);
  EXPECT_EQ(c.storage.retention, days(2));
  EXPECT_EQ(c.engine.fairness_cap, 7u);
  EXPECT_DOUBLE_EQ(c.engine.breaker.failure_ratio, 0.9);
  EXPECT_TRUE(c.transport.allow_http);
  EXPECT_EQ(c.transport.allow_private_cidrs.size(), 2u);
  EXPECT_EQ(c.transport.allowed_ports, (std::vector<uint16_t>{8080, 8443}));
  EXPECT_EQ(c.limits.max_body_bytes, 2u * 1024 * 1024);
  EXPECT_EQ(c.policies.at("quick").ladder,
            (std::vector<Duration>{milliseconds(1), milliseconds(2)}));
  EXPECT_EQ(c.policies.at("quick").auto_disable, false);
  EXPECT_TRUE(c.warnings.empty());
}

TEST(Config, LongTokenVariableWorksAndUnknownVariablesWarn) {
  Config c = load("", {{"RINGCAST_SERVER_API_TOKEN", "long-form-0123456789abcdef012345678"},
                       {"RINGCAST_SERVER_LISTN", "x"}});
  EXPECT_EQ(c.server.api_token, "long-form-0123456789abcdef012345678");
  ASSERT_EQ(c.warnings.size(), 1u);
  EXPECT_THAT(c.warnings[0], HasSubstr("RINGCAST_SERVER_LISTN"));
}

TEST(Config, BadValuesNameTheKeyAndTheSource) {
  struct Case {
    const char* toml;
    const char* want1;
    const char* want2;
  };
  const Case cases[] = {
      {"[engine]\nfairness_cap = -3\n", "engine.fairness_cap", "test.toml:2"},
      {"[engine]\nfairness_cap = \"many\"\n", "engine.fairness_cap", "integer"},
      {"[storage]\nretention = 30\n", "storage.retention", "duration like"},
      {"[storage]\nretention = \"30 days\"\n", "storage.retention", "\"30 days\""},
      {"[storage]\nsync = \"sometimes\"\n", "storage.sync", "\"always\", \"interval\" or \"none\""},
      {"[server]\nlisten = \"nowhere\"\n", "server.listen", "host:port"},
      {"[server]\nlissten = \"x\"\n", "server.lissten", "unknown key"},
      {"[servr]\nlisten = \"x\"\n", "[servr]", "unknown section"},
      {"[transport]\nallow_private = [\"10.0.0.0/33\"]\n", "transport.allow_private[0]", "CIDR"},
      {"[transport]\nallow_private = \"127.0.0.0/8\"\n", "transport.allow_private", "list"},
      {"[transport]\nallowed_ports = [0]\n", "transport.allowed_ports[0]", "1..65535"},
      {"[transport]\nallow_http = \"yes\"\n", "transport.allow_http", "true or false"},
      {"[transport]\nca_file = \"/nonexistent/ca.pem\"\n", "transport.ca_file", "cannot read"},
      {"[engine.breaker]\nopen_pause = \"10m\"\nmax_pause = \"5m\"\n", "engine.breaker.max_pause",
       "open_pause"},
      {"[engine.breaker]\nfailure_ratio = 1.5\n", "engine.breaker.failure_ratio", "number in"},
      {"[limits]\nmax_body_bytes = \"1 TiB\"\n", "limits.max_body_bytes", "size like"},
      {"[limits]\nmax_body_bytes = \"8MiB\"\nmax_bulk_body_bytes = \"4MiB\"\n",
       "limits.max_bulk_body_bytes", "max_body_bytes"},
      {"[transport]\nrequest_timeout = \"0s\"\n", "transport.request_timeout", "greater than 0s"},
      {"[notifications]\nwebhook_url = \"http://ops.example/x\"\n", "notifications.webhook_url",
       "not_https"},
      // The owner's e-mail relay (SPEC R8.4).
      {"[notifications.smtp]\nhost = \"mail.example\"\n", "notifications.smtp.from", "required"},
      {"[notifications.smtp]\nstarttls = \"maybe\"\n", "notifications.smtp.starttls",
       "\"required\", \"opportunistic\" or \"off\""},
      {"[notifications.smtp]\nhost = \"m.example\"\nfrom = \"a@b.example\"\nusername = \"u\"\n"
       "starttls = \"opportunistic\"\n",
       "notifications.smtp.starttls", "in clear"},
      {"[notifications.smtp]\npassword = \"p\"\n", "notifications.smtp.username", "password"},
      {"[notifications.smtp]\nport = 0\n", "notifications.smtp.port", "1..65535"},
      {"[notifications.smtp]\nca_file = \"/nonexistent/ca.pem\"\n", "notifications.smtp.ca_file",
       "cannot read"},
      {"[notifications.smtp]\ntimeout = \"0s\"\n", "notifications.smtp.timeout", "greater than 0s"},
      {"[notifications.email]\nportal_url = \"javascript:x\"\n", "notifications.email.portal_url",
       "http(s)"},
      {"[notifications.email]\nretry_ladder = [\"1s\", \"0s\"]\n",
       "notifications.email.retry_ladder[1]", "positive"},
      {"[notifications.email]\nqueue_max = 0\n", "notifications.email.queue_max", "1.."},
      {"[policies.smengo]\nbase = \"xhub\"\n", "policies.smengo", "preset"},
      {"[policies.Bad_Name]\n", "policies.Bad_Name", "policy name"},
      {"[policies.p]\nbase = \"svix\"\n", "policies.p.base", "\"smengo\" or \"xhub\""},
      {"[policies.p]\nladder = [\"1s\", \"soon\"]\n", "policies.p.ladder[1]", "duration"},
      {"[policies.p]\nbase = \"smengo\"\nslow_ladder = [\"1s\"]\n", "policies.p.slow_ladder",
       "xhub"},
      {"[policies.p]\nbogus = 1\n", "policies.p.bogus", "unknown key"},
      {"[policies.p]\njitter = 0.6\n", "policies.p.jitter", "number in"},
      {"[policies.p]\nladder = [\"0s\"]\n", "policies.p.ladder[0]", "greater than 0s"},
      {"[policies.p]\nmoney = [{field = \"status\"}]\n", "policies.p.money[0]", "required"},
      {"[policies.p]\nmoney = [{type = \"x\", field = \"status\"}]\n", "policies.p.money[0].values",
       "required"},
      {"[policies.p]\nmoney = [{type = \"x\", colour = \"red\"}]\n", "policies.p.money[0].colour",
       "unknown key"},
      {"[server\nlisten = 1\n", "test.toml:1", "TOML syntax error"},
      {"server = 5\n", "server", "expected a table"},
  };
  for (const auto& c : cases) {
    std::string msg = error_of([&] { (void)load(c.toml); });
    EXPECT_THAT(msg, HasSubstr(c.want1)) << c.toml;
    EXPECT_THAT(msg, HasSubstr(c.want2)) << c.toml;
  }
}

// Found by fuzz_config (corpus/config/nan_*): TOML's nan passed every range check, so
// failure_ratio = nan reached the breaker (a float-to-int cast of NaN in engine/build.cc) and
// jitter = nan the scheduler; and the printed "nan.0" did not load again.
TEST(Config, NanAndInfinityAreRefusedForEveryNumber) {
  for (const char* text :
       {"[engine.breaker]\nfailure_ratio = nan\n", "[engine.breaker]\nfailure_ratio = -nan\n",
        "[transport]\nhost_rate_per_second = nan\n", "[transport]\nhost_rate_per_second = +inf\n",
        "[policies.p]\njitter = nan\n", "[policies.p]\njitter = -inf\n"}) {
    SCOPED_TRACE(text);
    const std::string e = error_of([&] { load(text); });
    EXPECT_THAT(e, HasSubstr("expected a number in")) << e;
  }
  EXPECT_EQ(load("[policies.p]\njitter = 0.25\n").policies.at("p").jitter, 0.25);
}

TEST(Config, BadEnvironmentValueNamesTheVariable) {
  std::string msg = error_of([] { (void)load("", {{"RINGCAST_ENGINE_SHARDS", "lots"}}); });
  EXPECT_THAT(msg, HasSubstr("RINGCAST_ENGINE_SHARDS"));
  EXPECT_THAT(msg, HasSubstr("engine.shards"));
  msg = error_of([] { (void)load("", {{"RINGCAST_TRANSPORT_CONNECT_TIMEOUT", "5"}}); });
  EXPECT_THAT(msg, HasSubstr("transport.connect_timeout"));
}

TEST(Config, LoadsFromFileAndReportsMissingFile) {
  test::TempDir dir;
  std::string path = dir.file("ringcast.toml");
  {
    std::ofstream f(path);
    f << "[server]\nlisten = \"127.0.0.1:0\"\napi_token = \"t-0123456789abcdef0123456789abcdef\"\n";
  }
  Config c = load_config(path, {});
  EXPECT_EQ(c.source, path);
  EXPECT_EQ(c.server.api_token, "t-0123456789abcdef0123456789abcdef");
  std::string msg = error_of([&] { (void)load_config(dir.file("missing.toml"), {}); });
  EXPECT_THAT(msg, HasSubstr("missing.toml"));
  EXPECT_THAT(msg, HasSubstr("cannot open"));
  // No file: defaults plus environment.
  Config d = load_config("", {{"RINGCAST_API_TOKEN", "x-0123456789abcdef0123456789abcdef"}});
  EXPECT_EQ(d.server.api_token, "x-0123456789abcdef0123456789abcdef");
}

TEST(Config, PrintRoundTripsAndMasksSecrets) {
  Config c = load(R"(
[server]
api_token = "very-secret-0123456789abcdef012345"
[engine]
shards = 2
[transport]
allow_private = ["127.0.0.0/8"]
[policies.quick]
ladder = ["10ms", "1s"]
)");
  std::string masked = c.to_toml(true);
  EXPECT_THAT(masked, HasSubstr("api_token = \"***\""));
  EXPECT_EQ(masked.find("very-secret-0123456789abcdef012345"), std::string::npos);
  EXPECT_THAT(masked, HasSubstr("[engine.breaker]"));
  EXPECT_THAT(masked, HasSubstr("retention = \"30d\""));
  EXPECT_THAT(masked, HasSubstr("[policies.quick]"));
  EXPECT_THAT(masked, HasSubstr("ladder = [\"10ms\", \"1s\"]"));

  // The unmasked print is a config file that loads back to the same print.
  std::string plain = c.to_toml(false);
  EXPECT_THAT(plain, HasSubstr("very-secret-0123456789abcdef012345"));
  Config again = load(plain);
  EXPECT_EQ(again.to_toml(false), plain);
  EXPECT_EQ(again.server.api_token, "very-secret-0123456789abcdef012345");
  EXPECT_EQ(again.engine.shards, 2u);
}

}  // namespace
}  // namespace ringcast

namespace ringcast {
namespace {

// [[intake.redis]] sources (operations.md §6), their defaults, and errors that name the key.
TEST(Config, IntakeRedisSources) {
  Config c = load(
      "[intake]\nnode_id = \"n1\"\n"
      "[[intake.redis]]\nservers = [\"127.0.0.1:6379\"]\nstreams = [\"a\", \"b\"]\n"
      "password = \"pw\"\nbatch = 100\nclaim_idle = \"2s\"\n"
      "[[intake.redis]]\nname = \"orders\"\ncluster = true\nconsumer = \"c9\"\n"
      "servers = [\"127.0.0.1:7000\", \"127.0.0.1:7001\"]\nstreams = [\"{o}:in\"]\n"
      "tenant_field = \"org\"\ndead_letter_stream = \"{o}:dead\"\ndead_letter_max_len = 5000\n");
  ASSERT_EQ(c.intake.redis.size(), 2u);
  const auto& a = c.intake.redis[0];
  EXPECT_EQ(a.name, "redis-1");
  EXPECT_EQ(a.consumer, "n1");  // node_id is every source's default consumer
  EXPECT_EQ(a.group, "ringcast");
  EXPECT_EQ(a.batch, 100u);
  EXPECT_EQ(a.claim_idle, seconds(2));
  EXPECT_EQ(a.dead_letter_stream, "ringcast:dead-letter");
  EXPECT_EQ(a.tenant_field, "tenant");
  const auto& b = c.intake.redis[1];
  EXPECT_EQ(b.name, "orders");
  EXPECT_TRUE(b.cluster);
  EXPECT_EQ(b.consumer, "c9");
  EXPECT_EQ(b.tenant_field, "org");
  EXPECT_EQ(b.dead_letter_max_len, 5000u);
  EXPECT_EQ(a.dead_letter_max_len, 0u);  // never trimmed unless asked
  // Printed (the password masked) and read back the same.
  const std::string printed = c.to_toml();
  EXPECT_THAT(printed, HasSubstr("[[intake.redis]]"));
  EXPECT_THAT(printed, ::testing::Not(HasSubstr("\"pw\"")));
  Config again = load(c.to_toml(false));
  ASSERT_EQ(again.intake.redis.size(), 2u);
  EXPECT_EQ(again.intake.redis[1].streams, b.streams);
  EXPECT_EQ(again.intake.redis[0].password, "pw");

  struct Case {
    const char* toml;
    const char* want1;
    const char* want2;
  };
  const std::string ok = "[[intake.redis]]\nservers = [\"127.0.0.1:6379\"]\nstreams = [\"s\"]\n";
  const Case cases[] = {
      {"[[intake.redis]]\nstreams = [\"s\"]\n", "intake.redis[0].servers", "host:port"},
      {"[[intake.redis]]\nservers = [\"127.0.0.1:6379\"]\n", "intake.redis[0].streams", "1 and 64"},
      {"[[intake.redis]]\nservers = [\"localhost:6379\"]\nstreams = [\"s\"]\n",
       "intake.redis[0].servers[0]", "numeric"},
      {"[[intake.redis]]\nservers = [\"127.0.0.1:1\", \"127.0.0.1:2\"]\nstreams = [\"s\"]\n",
       "intake.redis[0].servers", "cluster = true"},
      {"[[intake.redis]]\nservers = [\"127.0.0.1:6379\"]\nstreams = [\"s\"]\nbatch = 0\n",
       "intake.redis[0].batch", "1..10000"},
      {"[[intake.redis]]\nservers = [\"127.0.0.1:6379\"]\nstreams = [\"s\"]\nbatch = 600\n"
       "max_unacked = 500\n",
       "intake.redis[0].max_unacked", "at least batch"},
      {"[[intake.redis]]\nservers = [\"127.0.0.1:6379\"]\nstreams = [\"s\"]\n"
       "dead_letter_stream = \"s\"\n",
       "intake.redis[0].dead_letter_stream", "streams read"},
      {"[[intake.redis]]\nservers = [\"127.0.0.1:6379\"]\nstreams = [\"s\"]\ncolour = 1\n",
       "intake.redis[0].colour", "unknown key"},
      {"[[intake.redis]]\nservers = [\"127.0.0.1:6379\"]\nstreams = [\"s\"]\nblock = \"2m\"\n",
       "intake.redis[0].block", "60s"},
      {"[intake]\nredis = 3\n", "intake.redis", "[[intake.redis]]"},
  };
  for (const auto& k : cases) {
    std::string msg = error_of([&] { (void)load(k.toml); });
    EXPECT_THAT(msg, HasSubstr(k.want1)) << k.toml;
    EXPECT_THAT(msg, HasSubstr(k.want2)) << k.toml;
  }
  EXPECT_EQ(error_of([&] { (void)load(ok); }), "");
  EXPECT_EQ(error_of([&] { (void)load(ok + ok); }), "");  // redis-1, redis-2
  std::string two = error_of([&] { (void)load(ok + "name = \"x\"\n" + ok + "name = \"x\"\n"); });
  EXPECT_THAT(two, HasSubstr("intake.redis[1].name"));
}

// Cluster mode (operations.md §8): storage.backend = "redis" and [cluster].
TEST(Config, RedisBackendAndClusterMode) {
  Config d = load("");
  EXPECT_EQ(d.storage.backend, "rocksdb");  // single-node mode stays the default
  EXPECT_FALSE(d.cluster.enabled);
  Config c = load(
      "[storage]\nbackend = \"redis\"\n"
      "[storage.redis]\nservers = [\"127.0.0.1:7000\", \"127.0.0.1:7001\"]\ncluster = true\n"
      "password = \"pw\"\nnamespace = \"rcx\"\nwait_replicas = 2\nwait_timeout = \"250ms\"\n"
      "[cluster]\nenabled = true\nsecret = \"0123456789abcdef0123456789abcdef\"\n"
      "node_id = \"n7\"\nlease_ttl = \"2s\"\n"
      "safety_margin = \"200ms\"\n");
  EXPECT_EQ(c.storage.backend, "redis");
  EXPECT_EQ(c.storage.redis.servers.size(), 2u);
  EXPECT_TRUE(c.storage.redis.cluster);
  EXPECT_EQ(c.storage.redis.ns, "rcx");
  EXPECT_EQ(c.storage.redis.wait_replicas, 2u);
  EXPECT_EQ(c.storage.redis.wait_timeout, milliseconds(250));
  EXPECT_TRUE(c.cluster.enabled);
  EXPECT_EQ(c.cluster.node_id, "n7");
  EXPECT_EQ(c.cluster.lease_ttl, seconds(2));
  const std::string printed = c.to_toml();
  EXPECT_THAT(printed, ::testing::Not(HasSubstr("\"pw\"")));
  Config again = load(c.to_toml(false));
  EXPECT_EQ(again.storage.redis.servers, c.storage.redis.servers);
  EXPECT_EQ(again.cluster.node_id, "n7");
  // From the environment, like every key.
  Config e = load("", {{"RINGCAST_STORAGE_BACKEND", "redis"},
                       {"RINGCAST_STORAGE_REDIS_SERVERS", "127.0.0.1:1,127.0.0.1:2"},
                       {"RINGCAST_STORAGE_REDIS_CLUSTER", "true"},
                       {"RINGCAST_CLUSTER_ENABLED", "true"},
                       {"RINGCAST_CLUSTER_SECRET", "0123456789abcdef0123456789abcdef"}});
  EXPECT_EQ(e.storage.redis.servers.size(), 2u);
  EXPECT_TRUE(e.cluster.enabled);
  // Bad combinations name the key.
  EXPECT_THAT(error_of([] { (void)load("[storage]\nbackend = \"etcd\"\n"); }),
              HasSubstr("storage.backend"));
  EXPECT_THAT(error_of([] { (void)load("[cluster]\nenabled = true\n"); }),
              HasSubstr("cluster.enabled"));
  EXPECT_THAT(error_of([] {
                (void)load(
                    "[storage]\nbackend = \"redis\"\n[storage.redis]\nservers = [\"a:1\", "
                    "\"b:2\"]\n");
              }),
              HasSubstr("storage.redis.servers"));
  EXPECT_THAT(error_of([] {
                (void)load(
                    "[storage]\nbackend = \"redis\"\n[cluster]\nenabled = true\nlease_ttl = "
                    "\"1s\"\nsafety_margin = \"400ms\"\n");
              }),
              HasSubstr("cluster.safety_margin"));
}

// The Redis store's memory high-water mark and size cap (docs/cluster.md "Memory back-pressure").
TEST(Config, RedisMemoryHighWaterAndSizeCap) {
  Config d = load("");
  EXPECT_DOUBLE_EQ(d.storage.redis.high_water, 0.85);
  EXPECT_EQ(d.storage.redis.max_memory_bytes, 0u);
  Config c = load(
      "[storage]\nbackend = \"redis\"\nretention = \"7d\"\n"
      "[storage.redis]\nhigh_water = 0.7\nmax_memory_bytes = \"512MiB\"\n");
  EXPECT_DOUBLE_EQ(c.storage.redis.high_water, 0.7);
  EXPECT_EQ(c.storage.redis.max_memory_bytes, uint64_t{512} << 20);
  EXPECT_EQ(c.storage.retention, days(7));
  Config again = load(c.to_toml(false));  // the effective TOML loads again, the same
  EXPECT_DOUBLE_EQ(again.storage.redis.high_water, 0.7);
  EXPECT_EQ(again.storage.redis.max_memory_bytes, uint64_t{512} << 20);
  Config e = load("", {{"RINGCAST_STORAGE_REDIS_HIGH_WATER", "0.9"},
                       {"RINGCAST_STORAGE_REDIS_MAX_MEMORY_BYTES", "2GiB"}});
  EXPECT_DOUBLE_EQ(e.storage.redis.high_water, 0.9);
  EXPECT_EQ(e.storage.redis.max_memory_bytes, uint64_t{2} << 30);
  // Out of range, or a cap too small to hold anything: the key is named.
  for (const char* bad : {"high_water = 0.05\n", "high_water = 1.5\n", "high_water = \"x\"\n"}) {
    EXPECT_THAT(
        error_of([&] {
          (void)load(std::string("[storage]\nbackend = \"redis\"\n[storage.redis]\n") + bad);
        }),
        HasSubstr("storage.redis.high_water"))
        << bad;
  }
  EXPECT_THAT(error_of([] {
                (void)load(
                    "[storage]\nbackend = \"redis\"\n[storage.redis]\nmax_memory_bytes = "
                    "\"64KiB\"\n");
              }),
              HasSubstr("storage.redis.max_memory_bytes"));
  EXPECT_THAT(error_of([] { (void)load("[storage.redis]\nmax_memory_bytes = -1\n"); }),
              HasSubstr("storage.redis.max_memory_bytes"));
}

// Cluster forwarding: where the other nodes reach this one. Derived from a concrete listener
// (port 0 included: the bound port is used), refused on a wildcard one without the key.
TEST(Config, ClusterAdvertiseUrl) {
  const std::string base =
      "[storage]\nbackend = \"redis\"\n[cluster]\nenabled = true\n"
      "secret = \"0123456789abcdef0123456789abcdef\"\n";
  Config c = load("[server]\nlisten = \"127.0.0.1:0\"\n" + base);
  EXPECT_EQ(c.cluster.advertise_url, "");
  EXPECT_EQ(c.cluster.forward_timeout, seconds(5));
  EXPECT_EQ(c.cluster.max_forwards, 16u);
  Config set = load("[server]\nlisten = \"0.0.0.0:8080\"\n" + base +
                    "advertise_url = \"http://10.0.0.7:8080\"\nforward_timeout = \"2s\"\n"
                    "max_forwards = 4\n");
  EXPECT_EQ(set.cluster.advertise_url, "http://10.0.0.7:8080");
  EXPECT_EQ(set.cluster.forward_timeout, seconds(2));
  EXPECT_EQ(set.cluster.max_forwards, 4u);
  Config again = load(set.to_toml(false));
  EXPECT_EQ(again.cluster.advertise_url, "http://10.0.0.7:8080");
  EXPECT_EQ(again.cluster.max_forwards, 4u);
  Config env = load("", {{"RINGCAST_STORAGE_BACKEND", "redis"},
                         {"RINGCAST_CLUSTER_ENABLED", "true"},
                         {"RINGCAST_CLUSTER_SECRET", "0123456789abcdef0123456789abcdef"},
                         {"RINGCAST_CLUSTER_ADVERTISE_URL", "http://[fd00::7]:80"}});
  EXPECT_EQ(env.cluster.advertise_url, "http://[fd00::7]:80");
  for (const char* wildcard : {"0.0.0.0:8080", "[::]:8080"}) {
    EXPECT_THAT(error_of([&] {
                  (void)load("[server]\nlisten = \"" + std::string(wildcard) + "\"\n" + base);
                }),
                HasSubstr("cluster.advertise_url"))
        << wildcard;
  }
  // Single-node mode never needs it.
  EXPECT_NO_THROW((void)load("[server]\nlisten = \"0.0.0.0:8080\"\n"));
  // https:// is an owner behind TLS (cluster.ca_file); a name or a missing port is not one.
  EXPECT_NO_THROW((void)load(base + "advertise_url = \"https://10.0.0.7:8443\"\n"));
  for (const char* bad : {"ftp://10.0.0.7:8080", "http://node-a:8080", "http://10.0.0.7"}) {
    EXPECT_THAT(
        error_of([&] { (void)load(base + "advertise_url = \"" + std::string(bad) + "\"\n"); }),
        HasSubstr("cluster.advertise_url"))
        << bad;
  }
  EXPECT_THAT(error_of([&] { (void)load(base + "forward_timeout = \"0s\"\n"); }),
              HasSubstr("cluster.forward_timeout"));
  EXPECT_THAT(error_of([&] { (void)load(base + "max_forwards = 0\n"); }),
              HasSubstr("cluster.max_forwards"));
}

// SPEC R8.4: [notifications.smtp] and [notifications.email] reach the mailer's options; the
// password from a file (its first line) or from RINGCAST_NOTIFICATIONS_SMTP_PASSWORD.
TEST(Config, SmtpAndEmailReachTheMailer) {
  test::TempDir dir("config-smtp");
  const std::string pw = dir.file("pw");
  test::write_file(pw, "from-file\nsecond line\n");
  Config c = load(
      "[notifications.smtp]\nhost = \"mail.example\"\nport = 2525\n"
      "from = \"alerts@ops.example\"\nfrom_name = \"Ops\"\n"
      "starttls = \"required\"\nusername = \"relay\"\npassword_file = \"" +
      pw +
      "\"\nhelo_name = \"rc1.example\"\ntimeout = \"7s\"\n"
      "[notifications.email]\nportal_url = \"https://p.example/{tenant}/{endpoint}\"\n"
      "queue_max = 50\nretry_ladder = [\"2s\", \"1m\"]\n");
  engine::MailerOptions m = engine::mailer_options(c);
  EXPECT_EQ(m.smtp.host, "mail.example");
  EXPECT_EQ(m.smtp.port, 2525);
  EXPECT_EQ(m.smtp.starttls, net::SmtpStartTls::kRequired);
  EXPECT_EQ(m.smtp.username, "relay");
  EXPECT_EQ(m.smtp.password, "from-file");
  EXPECT_EQ(m.smtp.helo_name, "rc1.example");
  EXPECT_EQ(m.smtp.timeout, seconds(7));
  EXPECT_EQ(m.from, "alerts@ops.example");
  EXPECT_EQ(m.from_name, "Ops");
  EXPECT_EQ(m.portal_url, "https://p.example/{tenant}/{endpoint}");
  EXPECT_EQ(m.queue_max, 50u);
  EXPECT_EQ(m.retry_ladder, (std::vector<Duration>{seconds(2), minutes(1)}));
  Config e = load(
      "[notifications.smtp]\nhost = \"m.example\"\nfrom = \"a@b.example\"\n"
      "username = \"u\"\n",
      Environment{{"RINGCAST_NOTIFICATIONS_SMTP_PASSWORD", "from-env"}});
  EXPECT_EQ(engine::mailer_options(e).smtp.password, "from-env");
  EXPECT_EQ(e.to_toml().find("from-env"), std::string::npos);  // masked
  // Off by default: no host.
  EXPECT_TRUE(load("").notifications.smtp.host.empty());
}

// SPEC R14 (docs/security.md "Secrets"): no secret short enough to guess offline from what a
// merchant holds (a portal link, a signed call); each refusal names its key.
TEST(Config, SecretsUnder32CharactersAreRefusedNamingTheKey) {
  const std::string strong(32, 'k');
  EXPECT_NO_THROW((void)load_config("", {{"RINGCAST_API_TOKEN", strong}}));
  EXPECT_THAT(error_of([&] {
                (void)load_config("", {{"RINGCAST_API_TOKEN", strong.substr(1)}});
              }),
              AllOf(HasSubstr("server.api_token"), HasSubstr("at least 32 characters")));
  EXPECT_THAT(error_of([&] {
                (void)load_config("", {{"RINGCAST_PORTAL_SECRET", "short"}});
              }),
              HasSubstr("portal.secret"));
  const Environment cluster = {{"RINGCAST_STORAGE_BACKEND", "redis"},
                               {"RINGCAST_STORAGE_REDIS_SERVERS", "127.0.0.1:6379"},
                               {"RINGCAST_CLUSTER_ENABLED", "true"},
                               {"RINGCAST_CLUSTER_ADVERTISE_URL", "http://127.0.0.1:8080"}};
  EXPECT_THAT(error_of([&] { (void)load_config("", cluster); }),
              AllOf(HasSubstr("cluster.secret"), HasSubstr("must be set")));
  Environment weak = cluster;
  weak["RINGCAST_CLUSTER_SECRET"] = "0123456789";
  EXPECT_THAT(error_of([&] { (void)load_config("", weak); }), HasSubstr("cluster.secret"));
  Environment good = cluster;
  good["RINGCAST_CLUSTER_SECRET"] = strong;
  EXPECT_EQ(load_config("", good).cluster.secret, strong);
  // Masked when printed, like every secret.
  EXPECT_EQ(load_config("", good).to_toml().find(strong), std::string::npos);
  EXPECT_THAT(error_of([&] {
                (void)load_config("", {{"RINGCAST_SERVER_METRICS_LISTEN", "x"}});
              }),
              HasSubstr("server.metrics_listen"));
}

}  // namespace
}  // namespace ringcast
