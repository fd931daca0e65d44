// The span exporter (trace/tracer.h, docs/tracing.md) against a real HTTP receiver on loopback
// (tests/support/http_recorder.h), and its OTLP/HTTP JSON encoding (trace/otlp_json.h): the body
// a collector gets, batches POSTed as application/json, a 503 asked again and then accepted, a
// refusal dropped without asking again, a full queue dropping spans and never blocking emit(),
// the collector on loopback refused by the address guard without the allow-list (like the
// operator webhook), and every span accounted for once after stop().
#include "trace/tracer.h"

#include <gtest/gtest.h>
#include <simdjson.h>

#include <chrono>
#include <functional>
#include <string>
#include <thread>

#include "core/ip_address.h"
#include "core/trace_context.h"
#include "tests/support/http_recorder.h"
#include "trace/otlp_json.h"

namespace ringcast::trace {
namespace {

using namespace std::chrono_literals;
using test::HttpRecorder;

bool wait_until(const std::function<bool()>& pred, std::chrono::milliseconds timeout = 10s) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (!pred()) {
    if (std::chrono::steady_clock::now() >= end) return pred();
    std::this_thread::sleep_for(10ms);
  }
  return true;
}

Span span(uint64_t n) {
  Span s;
  s.trace_id =
      parse_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")->trace_id;
  s.span_id = delivery_span_id(s.trace_id, n);
  s.name = "attempt";
  s.kind = SpanKind::kClient;
  s.start_unix_ns = 1'700'000'000'000'000'000 + static_cast<int64_t>(n);
  s.end_unix_ns = s.start_unix_ns + 5'000'000;
  return s;
}

TracerOptions options_for(const std::string& url, bool allow_loopback = true) {
  TracerOptions o;
  o.url = url;
  o.resource.service_name = "ringcast-test";
  o.resource.service_version = "9.9.9";
  o.transport.url_policy.allow_http = true;
  if (allow_loopback) o.transport.allow_list = {*parse_cidr("127.0.0.0/8")};
  o.transport.exchange_timeout = seconds(5);
  o.transport.recv_buffers = 16;
  o.batch_delay = milliseconds(100);
  o.retry_pauses = {milliseconds(50), milliseconds(50)};
  o.stop_drain = seconds(2);
  return o;
}

std::unique_ptr<Tracer> start(TracerOptions o) {
  auto t = Tracer::start(std::move(o));
  EXPECT_TRUE(t.ok()) << (t.ok() ? "" : t.error().message);
  return t.ok() ? std::move(*t) : nullptr;
}

using El = simdjson::simdjson_result<simdjson::dom::element>;

std::string text(El e) {
  std::string_view v;
  if (e.get(v)) return "<none>";
  return std::string(v);
}

int64_t number(El e) {
  int64_t v = -1;
  if (e.get(v)) return -1;
  return v;
}

// The spans of an OTLP/JSON body, parsed.
size_t span_count(const std::string& body) {
  simdjson::dom::parser p;
  simdjson::dom::element root;
  simdjson::dom::array rs;
  if (p.parse(body).get(root) || root["resourceSpans"].get(rs)) return 0;
  size_t n = 0;
  for (simdjson::dom::element r : rs) {
    simdjson::dom::array scopes;
    if (r["scopeSpans"].get(scopes)) continue;
    for (simdjson::dom::element sc : scopes) {
      simdjson::dom::array spans;
      if (!sc["spans"].get(spans)) n += spans.size();
    }
  }
  return n;
}

TEST(OtlpJson, WritesTheCollectorsShapeWithHexIdsAndNanosecondStrings) {
  Span a = span(1);
  a.parent_span_id = intake_span_id(a.trace_id, "msg_x");
  a.status = SpanStatus::kError;
  a.status_message = "http_503";
  a.add("http.response.status_code", int64_t{503}).add("ringcast.tenant", "a \"quoted\"\n name");
  Span root = span(2);
  root.name = "intake";
  root.kind = SpanKind::kServer;
  root.status = SpanStatus::kOk;
  const Span both[] = {a, root};
  Resource r;
  r.service_name = "svc";
  r.service_version = "1.2.3";
  r.service_instance = "node-a";
  const std::string body = encode_otlp_json(r, both, 2);

  simdjson::dom::parser p;
  simdjson::dom::element doc;
  ASSERT_FALSE(p.parse(body).get(doc)) << body;
  El rs = doc["resourceSpans"].at(0);
  El attrs = rs["resource"]["attributes"];
  EXPECT_EQ(text(attrs.at(0)["key"]), "service.name");
  EXPECT_EQ(text(attrs.at(0)["value"]["stringValue"]), "svc");
  EXPECT_EQ(text(attrs.at(1)["key"]), "service.version");
  EXPECT_EQ(text(attrs.at(2)["key"]), "service.instance.id");
  EXPECT_EQ(text(attrs.at(2)["value"]["stringValue"]), "node-a");
  El scope = rs["scopeSpans"].at(0);
  EXPECT_EQ(text(scope["scope"]["name"]), "ringcast");
  El s0 = scope["spans"].at(0);
  EXPECT_EQ(text(s0["traceId"]), "4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_EQ(text(s0["spanId"]), hex_id(a.span_id));
  EXPECT_EQ(text(s0["parentSpanId"]), hex_id(a.parent_span_id));
  EXPECT_EQ(text(s0["name"]), "attempt");
  EXPECT_EQ(number(s0["kind"]), 3);  // SPAN_KIND_CLIENT
  EXPECT_EQ(text(s0["startTimeUnixNano"]), "1700000000000000001");
  EXPECT_EQ(text(s0["endTimeUnixNano"]), "1700000000005000001");
  EXPECT_EQ(text(s0["attributes"].at(0)["key"]), "http.response.status_code");
  EXPECT_EQ(text(s0["attributes"].at(0)["value"]["intValue"]), "503");
  EXPECT_EQ(text(s0["attributes"].at(1)["value"]["stringValue"]), "a \"quoted\"\n name");
  EXPECT_EQ(number(s0["status"]["code"]), 2);  // STATUS_CODE_ERROR
  EXPECT_EQ(text(s0["status"]["message"]), "http_503");
  El s1 = scope["spans"].at(1);
  EXPECT_EQ(s1["parentSpanId"].error(), simdjson::NO_SUCH_FIELD);  // a root span has none
  EXPECT_EQ(number(s1["kind"]), 2);                                // SPAN_KIND_SERVER
  EXPECT_EQ(number(s1["status"]["code"]), 1);                      // STATUS_CODE_OK
}

TEST(Tracer, PostsBatchesAsOtlpJsonAndCountsWhatTheCollectorAccepted) {
  HttpRecorder collector;
  auto t = start(options_for(collector.url("/v1/traces")));
  ASSERT_TRUE(t);
  for (uint64_t i = 1; i <= 3; ++i) t->emit(span(i));
  ASSERT_TRUE(wait_until([&] { return t->metrics().exported.load() == 3; }))
      << "posts: " << collector.count();
  const auto reqs = collector.requests();
  ASSERT_FALSE(reqs.empty());
  EXPECT_EQ(reqs[0].method, "POST");
  EXPECT_EQ(reqs[0].target, "/v1/traces");
  EXPECT_EQ(reqs[0].header("content-type").value_or(""), "application/json");
  size_t spans = 0;
  for (const auto& r : reqs) spans += span_count(r.body);
  EXPECT_EQ(spans, 3u);
  t->stop();
  EXPECT_EQ(t->metrics().dropped.load(), 0u);
}

TEST(Tracer, AsksA503AgainThenDropsAFailingBatchAndNeverRetriesA400) {
  HttpRecorder collector;
  collector.answer_next({503});
  auto t = start(options_for(collector.url("/v1/traces")));
  ASSERT_TRUE(t);
  t->emit(span(1));
  ASSERT_TRUE(wait_until([&] { return t->metrics().exported.load() == 1; }));
  EXPECT_EQ(collector.count(), 2u);  // the 503, then the same batch accepted
  const auto reqs = collector.requests();
  EXPECT_EQ(reqs[0].body, reqs[1].body);

  // Busy every time: asked again twice (retry_pauses), then dropped.
  collector.answer_next({503, 503, 503});
  t->emit(span(2));
  ASSERT_TRUE(wait_until([&] { return t->metrics().dropped.load() == 1; }));
  EXPECT_EQ(collector.count(), 5u);

  // A refusal is not asked again.
  collector.answer_next({400});
  t->emit(span(3));
  ASSERT_TRUE(wait_until([&] { return t->metrics().dropped.load() == 2; }));
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(collector.count(), 6u);
  t->stop();
  EXPECT_EQ(t->metrics().exported.load(), 1u);
}

TEST(Tracer, AFullQueueDropsNewSpansWithoutBlockingAndStopAccountsForEveryOne) {
  HttpRecorder collector;
  TracerOptions o = options_for(collector.url("/v1/traces"));
  o.queue_max = 4;
  o.batch_delay = seconds(30);  // nothing leaves before stop(): the queue fills
  auto t = start(std::move(o));
  ASSERT_TRUE(t);
  const auto began = std::chrono::steady_clock::now();
  for (uint64_t i = 1; i <= 10; ++i) t->emit(span(i));
  EXPECT_LT(std::chrono::steady_clock::now() - began, 1s);
  EXPECT_EQ(t->metrics().dropped.load(), 6u);
  EXPECT_EQ(collector.count(), 0u);
  t->stop();  // what is queued goes out within stop_drain
  EXPECT_EQ(t->metrics().exported.load(), 4u);
  EXPECT_EQ(t->metrics().dropped.load(), 6u);
  t->emit(span(11));  // after stop: dropped, counted
  EXPECT_EQ(t->metrics().dropped.load(), 7u);
}

TEST(Tracer, ACollectorOnLoopbackIsRefusedWithoutTheAllowList) {
  HttpRecorder collector;
  auto t = start(options_for(collector.url("/v1/traces"), /*allow_loopback=*/false));
  ASSERT_TRUE(t);
  t->emit(span(1));
  ASSERT_TRUE(wait_until([&] { return t->metrics().dropped.load() == 1; }));
  t->stop();
  EXPECT_EQ(collector.count(), 0u);
  EXPECT_EQ(t->metrics().exported.load(), 0u);
}

}  // namespace
}  // namespace ringcast::trace
