// End to end: GET /metrics is Prometheus text that Prometheus' own linter accepts, and the Grafana
// dashboard (docs/grafana/ringcast.json, docs/packaging.md "Dashboard") asks only for metrics the
// daemon exposes (docs/operations.md §4). A daemon (cluster mode: each node) with every optional
// family on — the operator webhook, the owner's e-mail relay, a Redis Stream intake — runs
// deliveries that succeed and deliveries that fail until their endpoint is auto-disabled (SPEC
// R8.1), so the histograms and the labelled counters have samples; each node's scrape goes to a
// file, and `promtool check metrics` (Debian's prometheus) must exit 0 and print nothing (no
// error, no lint problem); then every metric name in the dashboard's queries must be in a scrape
// (the other storage mode's store figures excepted: that mode's run checks them), so the
// dashboard cannot drift from the code.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "tests/e2e/daemon.h"
#include "tests/support/redis_server.h"
#include "tests/support/require.h"

namespace ringcast::e2e {
namespace {

using test::RedisServer;
using test::SinkProcess;
using test::TempDir;

constexpr const char* kTenant = "metrics-fmt";
constexpr size_t kEvents = 4;  // per intake (the API and the stream)

// `prefix` followed by `n` (built by appends: GCC 12's -Wrestrict misfires on "literal" + string).
std::string numbered(const char* prefix, size_t n) {
  std::string s = prefix;
  s += std::to_string(n);
  return s;
}

// An endpoint body {"url": url, "policy": policy}.
std::string endpoint_body(const std::string& url, const char* policy) {
  std::string b = "{\"url\":";
  b += quote(url);
  b += ",\"policy\":";
  b += quote(policy);
  b += '}';
  return b;
}

// promtool on PATH (Debian's prometheus package), "" when there is none.
std::string find_promtool() {
  const char* env = std::getenv("PATH");
  const std::string path = env != nullptr ? env : "/usr/local/bin:/usr/bin:/bin";
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find(':', start);
    if (end == std::string::npos) end = path.size();
    if (end > start) {
      std::string candidate = path.substr(start, end - start);
      candidate += "/promtool";
      if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    }
    start = end + 1;
  }
  return "";
}

// `promtool check metrics < file`: its exit status and everything it printed.
struct LintResult {
  test::ExitStatus status;
  std::string output;
};
LintResult promtool_check(const std::string& promtool, const std::string& file, const TempDir& dir,
                          size_t node) {
  test::ProcessOptions po;
  po.stdout_path = dir.file(numbered("promtool-", node) + ".out");
  po.stderr_path = dir.file(numbered("promtool-", node) + ".err");
  // promtool reads the metrics on stdin; the paths travel as the shell's $0 and $1.
  test::Process p = test::Process::start(
      {"/bin/sh", "-c", "exec \"$0\" check metrics < \"$1\"", promtool, file}, po);
  LintResult r;
  auto st = p.wait(scaled(30s));
  r.status = st ? *st : p.kill();
  r.output = test::read_file(po.stdout_path);
  r.output += test::read_file(po.stderr_path);
  return r;
}

// The metric names of an exposition: every sample's name and every # HELP / # TYPE family.
void collect_names(const std::string& text, std::set<std::string>& names) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("# HELP ", 0) == 0 || line.rfind("# TYPE ", 0) == 0) {
      const size_t from = 7;
      names.insert(line.substr(from, line.find(' ', from) - from));
    } else if (!line.empty() && line[0] != '#') {
      names.insert(line.substr(0, line.find_first_of("{ ")));
    }
  }
}

bool name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == ':';
}

// The ringcast_* metric names a PromQL expression uses.
void metric_names_in(const std::string& expr, std::set<std::string>& out) {
  const std::string prefix = "ringcast_";
  for (size_t at = expr.find(prefix); at != std::string::npos; at = expr.find(prefix, at + 1)) {
    if (at > 0 && name_char(expr[at - 1])) continue;  // inside another identifier
    size_t end = at;
    while (end < expr.size() && name_char(expr[end])) ++end;
    out.insert(expr.substr(at, end - at));
  }
}

// Every query of the dashboard: panel targets' `expr` and the template variables' `query` /
// `definition` strings, wherever they are nested (rows hold panels too).
void collect_queries(const Json& j, std::vector<std::string>& out) {
  if (j.is_object()) {
    for (size_t i = 0; i < j.keys().size(); ++i) {
      const std::string& key = j.keys()[i];
      const Json& v = j.items()[i];
      if (v.is_string() && (key == "expr" || key == "query" || key == "definition")) {
        out.push_back(v.str());
      } else {
        collect_queries(v, out);
      }
    }
  } else if (j.is_array()) {
    for (const Json& v : j.items()) collect_queries(v, out);
  }
}

// Every panel with queries names the dashboard's Prometheus input as its data source.
void expect_panels_use_the_input(const Json& panels) {
  for (const Json& p : panels.items()) {
    if (p["targets"].size() > 0) {
      EXPECT_EQ(p["datasource"]["uid"].str(), "${DS_PROMETHEUS}") << p["title"].str();
      for (const Json& t : p["targets"].items()) {
        EXPECT_FALSE(t["expr"].str().empty()) << p["title"].str();
      }
    }
    expect_panels_use_the_input(p["panels"]);  // a collapsed row's own
  }
}

TEST(E2eMetricsFormat, PromtoolAcceptsEveryScrapeAndTheDashboardAsksOnlyForExposedMetrics) {
  const std::string promtool = find_promtool();
  if (promtool.empty()) {
    RINGCAST_SKIP_MISSING()
        << "promtool is not installed (Debian prometheus; tools/install-deps.sh)";
  }
  if (!RedisServer::available()) RINGCAST_SKIP_MISSING() << "redis-server is not installed";

  TempDir dir("e2e-metrics-fmt");
  TempDir redis_dir("e2e-metrics-fmt-redis");
  std::unique_ptr<RedisServer> redis = RedisServer::start(redis_dir.path());
  // /ok answers 200; /down 500 (its endpoint is disabled after its "quick" ladder, R8.1); /ops is
  // the operator webhook (200). The owner's relay listens nowhere: its e-mail fails.
  SinkProcess sink = SinkProcess::start({"--quiet", "--fault", "/down=status=500"}, dir.path());
  const uint16_t no_relay = test::free_tcp_port();
  DaemonOptions o;
  std::string toml = "[notifications]\nwebhook_url = ";
  toml += quote(sink.base_url() + "/ops");
  toml += "\n\n[notifications.smtp]\nhost = \"127.0.0.1\"\nport = ";
  toml += std::to_string(no_relay);
  toml += "\nfrom = \"ringcast@ops.example\"\nstarttls = \"off\"\ntimeout = \"1s\"\n";
  toml += "\n[notifications.email]\nretry_ladder = [\"100ms\", \"100ms\"]\n";
  toml += "\n[[intake.redis]]\nname = \"bus\"\nservers = [";
  toml += quote(redis->address());
  toml += "]\nstreams = [\"events\"]\ndead_letter_stream = \"events:dead\"\nblock = \"200ms\"\n";
  o.extra_toml = toml;
  Daemon d(o);
  ASSERT_NO_THROW(d.start()) << d.output();

  Reply r = create_endpoint(d, kTenant, endpoint_body(sink.base_url() + "/ok", "fast"));
  ASSERT_EQ(r.status, 201) << r.describe();
  r = create_endpoint(d, kTenant, endpoint_body(sink.base_url() + "/down", "quick"));
  ASSERT_EQ(r.status, 201) << r.describe();
  // The platform sets the owner's address: trusted at once, so the auto-disable mails it.
  r = d.call("PUT", std::string("/v1/tenants/") + kTenant + "/settings",
             R"({"owner_email":"owner@merchant.example"})");
  ASSERT_EQ(r.status, 200) << r.describe();

  for (size_t i = 0; i < kEvents; ++i) {
    r = submit_event(d, kTenant, numbered("api-", i), "order.paid", numbered("{\"n\":", i) + "}");
    ASSERT_TRUE(r.status == 202 || r.status == 200) << r.describe();
  }
  for (size_t i = 0; i < kEvents; ++i) {
    auto rep = redis->cmd({"XADD", "events", "*", "tenant", kTenant, "id", numbered("bus-", i),
                           "type", "order.paid", "payload", numbered("{\"n\":", i) + "}"});
    ASSERT_FALSE(rep.is_error()) << rep.str;
  }

  // Successes and failures counted, the endpoint disabled, the operator told, the e-mail given
  // up, the stream's entries taken: every family the dashboard charts has moved.
  Metrics m;
  const bool settled = wait_until(
      [&] {
        m = scrape_metrics(d);
        return metric_sum(m, "ringcast_deliveries_delivered_total") >= 2 * kEvents &&
               metric(m, "ringcast_attempts_total{outcome=\"retryable\"}") >= 3 &&
               metric_sum(m, "ringcast_endpoints_disabled_total") >= 1 &&
               metric(m, "ringcast_notifications_webhook_total{outcome=\"delivered\"}") >= 1 &&
               metric(m, "ringcast_owner_emails_total{result=\"failed\"}") >= 1 &&
               metric(m, "ringcast_intake_entries_total{source=\"bus\",result=\"accepted\"}") >=
                   kEvents;
      },
      scaled(30s), 100ms);
  ASSERT_TRUE(settled)
      << "delivered " << metric_sum(m, "ringcast_deliveries_delivered_total") << ", retryable "
      << metric(m, "ringcast_attempts_total{outcome=\"retryable\"}") << ", disabled "
      << metric_sum(m, "ringcast_endpoints_disabled_total") << ", webhook "
      << metric(m, "ringcast_notifications_webhook_total{outcome=\"delivered\"}")
      << ", e-mails failed " << metric(m, "ringcast_owner_emails_total{result=\"failed\"}")
      << ", bus accepted "
      << metric(m, "ringcast_intake_entries_total{source=\"bus\",result=\"accepted\"}") << "\n"
      << d.output();
  EXPECT_GE(metric(m, "ringcast_attempt_duration_seconds_count"), 2 * kEvents + 3);
  EXPECT_GE(metric(m, "ringcast_delivery_latency_seconds_count"), 2 * kEvents);

  // Each node's scrape, as a scraper gets it, through promtool.
  std::set<std::string> exposed;
  for (size_t node = 0; node < d.nodes(); ++node) {
    Reply scrape = d.call_node(node, "GET", "/metrics");
    ASSERT_EQ(scrape.status, 200) << "node " << node << ": " << scrape.describe();
    collect_names(scrape.body, exposed);
    const std::string file = dir.file(numbered("node-", node) + ".prom");
    {
      std::ofstream f(file, std::ios::binary);
      f << scrape.body;
      ASSERT_TRUE(f.good()) << file;
    }
    const LintResult lint = promtool_check(promtool, file, dir, node);
    EXPECT_TRUE(lint.status.ok() && lint.output.empty())
        << "promtool check metrics on node " << node << "'s scrape (" << scrape.body.size()
        << " bytes): " << lint.status.str() << "\n"
        << lint.output;
  }
  ASSERT_GT(exposed.size(), 50u) << "too few metric names in the scrapes";

  // The dashboard: valid JSON with the Prometheus input, and only exposed metric names.
  const std::string path = std::string(RINGCAST_SOURCE_DIR) + "/docs/grafana/ringcast.json";
  const Json dash = Json::parse(test::read_file(path));
  ASSERT_TRUE(dash.is_object()) << path << " is not a JSON object";
  bool has_input = false;
  for (const Json& in : dash["__inputs"].items()) {
    has_input |= in["name"].str() == "DS_PROMETHEUS" && in["pluginId"].str() == "prometheus";
  }
  EXPECT_TRUE(has_input) << "no __inputs entry DS_PROMETHEUS (prometheus)";
  expect_panels_use_the_input(dash["panels"]);
  std::vector<std::string> queries;
  collect_queries(dash, queries);
  ASSERT_GE(queries.size(), 15u) << "the dashboard has too few queries";
  std::set<std::string> used;
  for (const std::string& q : queries) metric_names_in(q, used);
  ASSERT_GE(used.size(), 15u);
  // The store's own figures differ by storage mode: a name of the other mode's store must be
  // absent here (the other run of this test, single node or cluster, finds it).
  const std::set<std::string> rocksdb_only = {"ringcast_store_bytes"};
  const std::set<std::string> redis_only = {"ringcast_redis_used_memory_bytes",
                                            "ringcast_redis_memory_high_water_bytes"};
  const std::set<std::string>& other_mode = cluster_mode() ? rocksdb_only : redis_only;
  for (const std::string& name : used) {
    if (other_mode.count(name) == 1) {
      EXPECT_EQ(exposed.count(name), 0u) << name << " is not of this storage mode's store";
      continue;
    }
    EXPECT_EQ(exposed.count(name), 1u)
        << "the dashboard asks for " << name << ", which no node's /metrics has";
  }
}

}  // namespace
}  // namespace ringcast::e2e
