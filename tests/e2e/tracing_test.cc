// End to end: OpenTelemetry traces (docs/tracing.md). The daemon runs with [tracing] endpoint
// pointing at an OTLP/HTTP receiver in this process (tests/support/http_recorder.h) and
// sample_ratio 1; a tenant has an endpoint with send_traceparent on a ringcast-sink path that
// answers its first request 503, and one without the option. An event submitted with a
// producer's `traceparent` gets an intake span child of the producer's span in the producer's
// trace, one delivery span per endpoint child of it, and an attempt span per attempt child of its
// delivery's (503 then 200: ERROR then OK). The receiver of the option's endpoint gets a
// `traceparent` whose trace id is the producer's and whose parent id is the attempt's span id,
// the other endpoint none. The daemon is killed between the two attempts (the second waits out a
// 5 s pause): the trace context is in the event record (RocksDB, or Redis in cluster mode), so
// the attempt after the restart is in the same trace under the same delivery span. Events
// without a traceparent, or with one that does not parse, are accepted in a trace of their own.
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "tests/e2e/daemon.h"
#include "tests/support/http_recorder.h"

namespace ringcast::e2e {
namespace {

using test::HttpRecorder;
using test::SinkProcess;
using test::TempDir;

constexpr const char* kTrace = "4bf92f3577b34da6a3ce929d0e0e4736";
constexpr const char* kProducerSpan = "00f067aa0ba902b7";

// Every span the collector got, from every POST (of every node).
std::vector<Json> spans_of(const HttpRecorder& collector) {
  std::vector<Json> out;
  for (const auto& r : collector.requests()) {
    const Json body = Json::parse(r.body);
    for (const Json& rs : body["resourceSpans"].items()) {
      for (const Json& ss : rs["scopeSpans"].items()) {
        for (const Json& s : ss["spans"].items()) out.push_back(s);
      }
    }
  }
  return out;
}

// A span attribute as text (a string, or an int64 as OTLP/JSON writes it); "" when absent.
std::string attr(const Json& span, const std::string& key) {
  for (const Json& a : span["attributes"].items()) {
    if (a["key"].str() != key) continue;
    const Json& v = a["value"];
    return v.has("stringValue") ? v["stringValue"].str() : v["intValue"].str();
  }
  return "";
}

// The spans named `name` whose attribute `key` is `value` (any when `key` is empty).
std::vector<Json> named(const std::vector<Json>& spans, const std::string& name,
                        const std::string& key = "", const std::string& value = "") {
  std::vector<Json> out;
  for (const Json& s : spans) {
    if (s["name"].str() == name && (key.empty() || attr(s, key) == value)) out.push_back(s);
  }
  return out;
}

std::string describe(const std::vector<Json>& spans) {
  std::string out;
  for (const Json& s : spans) {
    out += s["name"].str() + " trace=" + s["traceId"].str() + " span=" + s["spanId"].str() +
           " parent=" + s["parentSpanId"].str() + " status=" + s["status"]["code"].str();
    for (const Json& a : s["attributes"].items()) {
      out += ' ';
      out += a["key"].str();
      out += '=';
      out += attr(s, a["key"].str());
    }
    out += "\n";
  }
  return out;
}

// One request the sink recorded (--headers-file): its webhook id, answer and traceparent.
struct Seen {
  std::string id, status;
  std::optional<std::string> traceparent;
};

std::vector<Seen> seen_on(const std::string& file, const std::string& target,
                          const std::string& id) {
  std::vector<Seen> out;
  std::istringstream in(test::read_file(file));
  for (std::string line; std::getline(in, line);) {
    const Json j = Json::parse(line);
    if (!j.is_object() || j["target"].str() != target || j["id"].str() != id) continue;
    Seen s{j["id"].str(), j["status"].str(), std::nullopt};
    for (const Json& h : j["headers"].items()) {
      std::string name = h[0].str();
      for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      if (name == "traceparent") s.traceparent = h[1].str();
    }
    out.push_back(std::move(s));
  }
  return out;
}

// POST .../events with the producer's `traceparent` header (none when nullopt). Cluster mode: a
// node between owners answers 503; the next node is asked, like a load balancer would.
Reply submit_traced(const Daemon& d, const std::string& tenant, const std::string& id,
                    const std::optional<std::string>& traceparent) {
  std::string body = "{\"id\":";
  body += quote(id);
  body += ",\"type\":\"order.paid\",\"payload\":{\"n\":1}}";
  std::vector<std::string> headers = {std::string("Authorization: Bearer ") + Daemon::kToken,
                                      "Content-Type: application/json"};
  if (traceparent) headers.push_back(std::string("traceparent: ") + *traceparent);
  Reply r;
  for (size_t round = 0; round < 3; ++round) {
    for (size_t n = 0; n < d.nodes(); ++n) {
      r = http_request(d.port(n), "POST", "/v1/tenants/" + tenant + "/events", body, headers, 5s);
      if (r.status != 503) return r;
    }
  }
  return r;
}

std::string endpoint_body(const std::string& url, const std::string& policy, bool traceparent) {
  std::string b = "{\"url\":";
  b += quote(url);
  b += ",\"policy\":";
  b += quote(policy);
  if (traceparent) b += ",\"send_traceparent\":true";
  b += "}";
  return b;
}

TEST(E2eTracing, SpansFollowAnEventIntoTheReceiversTraceparentAcrossARestart) {
  HttpRecorder collector;
  TempDir dir("e2e-trace");
  const std::string headers_file = dir.file("headers.jsonl");
  SinkProcess sink = SinkProcess::start(
      {"--quiet", "--headers-file", headers_file, "--fault", "/traced=status=503;limit=1"},
      dir.path());
  DaemonOptions o;
  o.extra_toml = std::string("[tracing]\nendpoint = ") + quote(collector.url("/v1/traces")) +
                 "\nsample_ratio = 1.0\nservice_name = \"ringcast-e2e\"\n"
                 "\n[policies.paced]\nbase = \"smengo\"\nladder = [\"5s\", \"50ms\"]\n"
                 "jitter = 0.0\n";
  Daemon d(o);
  ASSERT_NO_THROW(d.start());
  const std::string t = "trace-tenant";

  Reply r = create_endpoint(d, t, endpoint_body(sink.base_url() + "/traced", "paced", true));
  ASSERT_EQ(r.status, 201) << r.describe();
  const std::string ep_traced = r.json()["id"].str();
  EXPECT_TRUE(r.json()["send_traceparent"].boolean()) << r.body;
  r = create_endpoint(d, t, endpoint_body(sink.base_url() + "/plain", "quick", false));
  ASSERT_EQ(r.status, 201) << r.describe();
  const std::string ep_plain = r.json()["id"].str();
  EXPECT_FALSE(r.json()["send_traceparent"].boolean()) << r.body;
  EXPECT_TRUE(get_endpoint(d, t, ep_traced)["send_traceparent"].boolean());

  // A custom header named traceparent beside the option would send two: refused.
  r = d.call("PATCH", "/v1/tenants/" + t + "/endpoints/" + ep_traced,
             "{\"headers\":{\"traceparent\":\"x\"}}");
  EXPECT_EQ(r.status, 400) << r.describe();

  const std::string producer = std::string("00-") + kTrace + "-" + kProducerSpan + "-01";
  const Reply e1 = submit_traced(d, t, "e1", producer);
  ASSERT_EQ(e1.status, 202) << e1.describe();
  const bool queued = e1.json()["queued"].boolean();  // cluster mode: another node's partition
  // Its webhook id (cluster mode: once the owner took a queued event in).
  std::string msg1;
  ASSERT_TRUE(wait_until(
      [&] {
        msg1 = message_id_of(d, t, "e1");
        return !msg1.empty();
      },
      scaled(10s)));

  // Before the restart: the intake span, the first attempt to /traced (503) and the plain
  // endpoint's whole delivery reach the collector (batches go out within a second).
  auto in_trace = [&] {
    std::vector<Json> out;
    for (const Json& s : spans_of(collector)) {
      if (s["traceId"].str() == kTrace) out.push_back(s);
    }
    return out;
  };
  ASSERT_TRUE(wait_until(
      [&] {
        const auto spans = in_trace();
        return !named(spans, "intake").empty() &&
               !named(spans, "attempt", "http.response.status_code", "503").empty() &&
               !named(spans, "delivery", "ringcast.endpoint.id", ep_plain).empty();
      },
      scaled(15s)))
      << describe(spans_of(collector)) << d.output();
  // The second attempt to /traced waits out its 5 s pause: the daemon dies before it.
  for (const Seen& s : seen_on(headers_file, "/traced", msg1)) {
    ASSERT_NE(s.status, "200") << "the second attempt came before the kill";
  }
  d.kill9();
  ASSERT_NO_THROW(d.start());
  ASSERT_TRUE(wait_until(
      [&] { return !named(in_trace(), "delivery", "ringcast.endpoint.id", ep_traced).empty(); },
      scaled(20s)))
      << describe(spans_of(collector)) << d.output();

  const std::vector<Json> spans = in_trace();
  SCOPED_TRACE(describe(spans));
  // The intake span: a child of the producer's span, in the producer's trace.
  const auto intake = named(spans, "intake");
  ASSERT_EQ(intake.size(), 1u);
  EXPECT_EQ(intake[0]["parentSpanId"].str(), kProducerSpan);
  if (!queued) {
    EXPECT_EQ(intake[0]["kind"].i64(), 2);  // SERVER (an inbox drain: INTERNAL)
  }
  EXPECT_EQ(attr(intake[0], "ringcast.tenant"), t);
  EXPECT_EQ(attr(intake[0], "ringcast.event.id"), "e1");
  EXPECT_EQ(attr(intake[0], "ringcast.message_id"), msg1);
  EXPECT_EQ(attr(intake[0], "ringcast.event.type"), "order.paid");
  EXPECT_EQ(attr(intake[0], "ringcast.deliveries"), "2");
  EXPECT_EQ(intake[0]["status"]["code"].i64(), 1);  // OK
  const std::string intake_id = intake[0]["spanId"].str();

  // One delivery span per endpoint, children of the intake span.
  const auto traced = named(spans, "delivery", "ringcast.endpoint.id", ep_traced);
  const auto plain = named(spans, "delivery", "ringcast.endpoint.id", ep_plain);
  ASSERT_EQ(traced.size(), 1u);
  ASSERT_EQ(plain.size(), 1u);
  for (const Json& s : {traced[0], plain[0]}) {
    EXPECT_EQ(s["parentSpanId"].str(), intake_id);
    EXPECT_EQ(attr(s, "ringcast.delivery.status"), "delivered");
    EXPECT_EQ(s["status"]["code"].i64(), 1);
  }
  EXPECT_EQ(attr(traced[0], "ringcast.delivery.attempts"), "2");
  EXPECT_EQ(attr(plain[0], "ringcast.delivery.attempts"), "1");
  EXPECT_NE(traced[0]["spanId"].str(), plain[0]["spanId"].str());

  // Two attempt spans under the traced delivery: 503 (ERROR http_503), then, after the restart,
  // 200 (OK). CLIENT spans naming the receiver by address and port, never by path.
  const auto attempts =
      named(spans, "attempt", "ringcast.delivery.id", attr(traced[0], "ringcast.delivery.id"));
  ASSERT_EQ(attempts.size(), 2u);
  const Json& a1 = attr(attempts[0], "ringcast.attempt.number") == "1" ? attempts[0] : attempts[1];
  const Json& a2 = &a1 == &attempts[0] ? attempts[1] : attempts[0];
  EXPECT_EQ(attr(a1, "ringcast.attempt.number"), "1");
  EXPECT_EQ(attr(a2, "ringcast.attempt.number"), "2");
  for (const Json* a : {&a1, &a2}) {
    EXPECT_EQ((*a)["parentSpanId"].str(), traced[0]["spanId"].str());
    EXPECT_EQ((*a)["kind"].i64(), 3);  // CLIENT
    EXPECT_EQ(attr(*a, "server.address"), "127.0.0.1");
    EXPECT_EQ(attr(*a, "ringcast.endpoint.id"), ep_traced);
    for (const Json& at : (*a)["attributes"].items()) {
      EXPECT_EQ(attr(*a, at["key"].str()).find("/traced"), std::string::npos) << at["key"].str();
    }
  }
  EXPECT_EQ(attr(a1, "http.response.status_code"), "503");
  EXPECT_EQ(attr(a1, "ringcast.attempt.code"), "http_503");
  EXPECT_EQ(a1["status"]["code"].i64(), 2);  // ERROR
  EXPECT_EQ(attr(a2, "http.response.status_code"), "200");
  EXPECT_EQ(a2["status"]["code"].i64(), 1);  // OK
  ASSERT_EQ(named(spans, "attempt", "ringcast.endpoint.id", ep_plain).size(), 1u);

  // What the receivers got: the option's endpoint a traceparent per attempt naming the
  // producer's trace and that attempt's span; the other endpoint none.
  const auto got = seen_on(headers_file, "/traced", msg1);
  ASSERT_EQ(got.size(), 2u);
  for (const Seen& s : got) {
    const Json& a = s.status == "503" ? a1 : a2;
    ASSERT_TRUE(s.traceparent.has_value()) << s.status;
    EXPECT_EQ(*s.traceparent, std::string("00-") + kTrace + "-" + a["spanId"].str() + "-01");
  }
  const auto plain_got = seen_on(headers_file, "/plain", msg1);
  ASSERT_EQ(plain_got.size(), 1u);
  EXPECT_FALSE(plain_got[0].traceparent.has_value()) << *plain_got[0].traceparent;

  // An event without a traceparent, and one whose traceparent does not parse: accepted, each in
  // a trace of its own (a root intake span); the receiver's traceparent names that trace.
  ASSERT_EQ(submit_traced(d, t, "e2", std::nullopt).status, 202);
  ASSERT_EQ(submit_traced(d, t, "e3", std::string("00-not-a-trace-01")).status, 202);
  for (const std::string id : {"e2", "e3"}) {
    std::string msg;
    ASSERT_TRUE(wait_until(
        [&] {
          msg = message_id_of(d, t, id);
          return !msg.empty();
        },
        scaled(10s)))
        << id;
    std::vector<Json> mine;
    ASSERT_TRUE(wait_until(
        [&] {
          mine = named(spans_of(collector), "intake", "ringcast.event.id", id);
          const auto seen = seen_on(headers_file, "/traced", msg);
          return !mine.empty() && !seen.empty() && seen.back().status == "200";
        },
        scaled(10s)))
        << id << "\n"
        << describe(spans_of(collector));
    ASSERT_EQ(mine.size(), 1u);
    EXPECT_FALSE(mine[0].has("parentSpanId")) << id;
    const std::string trace_id = mine[0]["traceId"].str();
    EXPECT_EQ(trace_id.size(), 32u);
    EXPECT_NE(trace_id, kTrace);
    const auto seen = seen_on(headers_file, "/traced", msg);
    ASSERT_TRUE(seen.back().traceparent.has_value()) << id;
    EXPECT_EQ(seen.back().traceparent->substr(0, 36), std::string("00-") + trace_id + "-") << id;
    EXPECT_EQ(seen.back().traceparent->substr(53), "01") << id;  // sampled: ratio 1
  }

  const Metrics m = scrape_metrics(d);
  EXPECT_GT(metric(m, "ringcast_trace_spans_exported_total"), 0);
  EXPECT_EQ(metric(m, "ringcast_trace_spans_dropped_total"), 0);
  for (const auto& req : collector.requests()) {
    EXPECT_EQ(req.method, "POST");
    EXPECT_EQ(req.target, "/v1/traces");
    EXPECT_EQ(req.header("content-type").value_or(""), "application/json");
  }
}

}  // namespace
}  // namespace ringcast::e2e
