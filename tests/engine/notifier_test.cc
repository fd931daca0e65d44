// The operator webhook (engine/notifier.h, SPEC R8.4) against a real ringcast-sink on loopback:
// signed POSTs (R11.2), retries on a 503 and giving up after the ladder (R6), no retry on a 4xx,
// a hanging receiver never blocks enqueue() and the queue stays bounded, the address guard
// refuses a private address without the allow-list (R6 private_address), and every notification
// is accounted for exactly once after stop().
#include "engine/notifier.h"

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <string>
#include <thread>

#include "engine/build.h"
#include "engine/config.h"
#include "net/signing.h"
#include "tests/support/process.h"
#include "tests/support/temp_dir.h"

namespace ringcast::engine {
namespace {

using namespace std::chrono_literals;
using test::SinkProcess;
using test::TempDir;

// 32 bytes, base64: the secret the sink checks and the notifier signs with.
constexpr const char* kSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSwMfKQ9r8GKYo=";

bool wait_until(const std::function<bool()>& pred, std::chrono::milliseconds timeout = 10s) {
  auto end = std::chrono::steady_clock::now() + timeout;
  while (!pred()) {
    if (std::chrono::steady_clock::now() >= end) return pred();
    std::this_thread::sleep_for(10ms);
  }
  return true;
}

Notification note(uint64_t seq, EndpointId endpoint = 77) {
  Notification n;
  n.seq = seq;
  n.tenant = "acme";
  n.endpoint = endpoint;
  n.kind = "endpoint_disabled";
  n.reason = ErrorCode::http(500);
  n.at = WallTime::from_ms(1'767'225'600'123);  // 2026-01-01T00:00:00.123Z
  n.message = "all attempts \"exhausted\"";
  return n;
}

NotifierOptions options_for(const std::string& url, bool allow_loopback = true) {
  NotifierOptions o;
  o.url = url;
  o.secret = *net::decode_secret(kSecret);
  o.transport.url_policy.allow_http = true;
  if (allow_loopback) o.transport.allow_list = {*parse_cidr("127.0.0.0/8")};
  o.transport.exchange_timeout = seconds(5);
  o.transport.recv_buffers = 16;
  o.retry_ladder = {milliseconds(50), milliseconds(50)};
  o.stop_drain = milliseconds(500);
  return o;
}

std::unique_ptr<Notifier> start(NotifierOptions o) {
  auto n = Notifier::start(std::move(o));
  EXPECT_TRUE(n.ok()) << (n.ok() ? "" : n.error().message);
  return n.ok() ? std::move(*n) : nullptr;
}

// The ids-file lines of `id`, their statuses in order.
std::vector<std::string> statuses_of(const SinkProcess& sink, const std::string& id) {
  std::vector<std::string> out;
  for (const auto& l : sink.ids()) {
    if (l.id == id) out.push_back(l.status);
  }
  return out;
}

std::string describe(const NotifierStats& s) {
  return "delivered=" + std::to_string(s.delivered) + " failed=" + std::to_string(s.failed) +
         " dropped=" + std::to_string(s.dropped) + " queued=" + std::to_string(s.queued) +
         " attempts=" + std::to_string(s.attempts) + " last_error=" + s.last_error;
}

TEST(NotifierJson, CarriesTheApiFieldsAndTheEnvelopeType) {
  EXPECT_EQ(notification_json(note(281474976710657)),
            "{\"type\":\"ringcast.notification\",\"seq\":\"281474976710657\","
            "\"tenant\":\"acme\",\"endpoint\":\"77\",\"kind\":\"endpoint_disabled\","
            "\"reason\":\"http_500\",\"at\":\"2026-01-01T00:00:00.123Z\","
            "\"message\":\"all attempts \\\"exhausted\\\"\",\"endpoint_url\":null,"
            "\"delivery\":null,\"attempts\":null,\"last_http_status\":null}");
  Notification n = note(5, 0);
  n.reason = ErrorCode::none();
  std::string j = notification_json(n);
  EXPECT_NE(j.find("\"endpoint\":null"), std::string::npos) << j;
  EXPECT_NE(j.find("\"reason\":null"), std::string::npos) << j;
  EXPECT_EQ(notification_message_id(n), "ntf_5");
}

TEST(NotifierJson, MetricsNameEveryOutcome) {
  NotifierMetrics m;
  m.delivered = 3;
  m.dropped = 1;
  std::string text = render_notifier_metrics(m);
  EXPECT_NE(text.find("ringcast_notifications_webhook_total{outcome=\"delivered\"} 3\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("ringcast_notifications_webhook_total{outcome=\"failed\"} 0\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("ringcast_notifications_webhook_total{outcome=\"dropped\"} 1\n"),
            std::string::npos)
      << text;
}

TEST(NotifierConfig, TheSecretKeyHasAnEnvironmentOverrideIsMaskedAndIsDecoded) {
  const std::string toml =
      "[transport]\nallow_http = true\nallow_private = [\"127.0.0.0/8\"]\n"
      "[notifications]\nwebhook_url = \"http://127.0.0.1:9/ops\"\n"
      "webhook_secret = \"raw-file-secret\"\n";
  Config file_only = load_config_from_string(toml, {});
  EXPECT_EQ(file_only.notifications.webhook_secret, "raw-file-secret");
  EXPECT_EQ(notifier_options(file_only).secret, "raw-file-secret");  // not whsec_: raw bytes

  Config c = load_config_from_string(toml, {{"RINGCAST_NOTIFICATIONS_WEBHOOK_SECRET", kSecret}});
  EXPECT_EQ(c.notifications.webhook_secret, kSecret);
  EXPECT_EQ(c.to_toml(true).find(kSecret), std::string::npos) << "printed unmasked";
  EXPECT_NE(c.to_toml(false).find(kSecret), std::string::npos);
  NotifierOptions o = notifier_options(c);
  EXPECT_EQ(o.url, "http://127.0.0.1:9/ops");
  EXPECT_EQ(o.secret, *net::decode_secret(kSecret));
  EXPECT_EQ(o.secret.size(), 32u);
  // The shards' guard: the same allow-list and URL policy.
  EXPECT_EQ(o.transport.allow_list.size(), 1u);
  EXPECT_TRUE(o.transport.url_policy.allow_http);

  EXPECT_THROW(load_config_from_string(
                   toml, {{"RINGCAST_NOTIFICATIONS_WEBHOOK_SECRET", "whsec_%%%not-base64"}}),
               ConfigError);
}

TEST(Notifier, PostsASignedNotificationTheSinkVerifies) {
  TempDir dir("notifier-signed");
  SinkProcess sink =
      SinkProcess::start({"--quiet", "--secret", kSecret, "--verify", "standard"}, dir.path());
  auto n = start(options_for(sink.base_url() + "/ops"));
  ASSERT_TRUE(n);
  n->enqueue(note(42));
  ASSERT_TRUE(wait_until([&] { return n->stats().delivered == 1; })) << describe(n->stats());
  EXPECT_EQ(statuses_of(sink, "ntf_42"), std::vector<std::string>{"200"});
  EXPECT_EQ(sink.stats_value("bad_signatures"), 0) << sink.stats_json();
  n->stop();
  NotifierStats s = n->stats();
  EXPECT_EQ(s.failed, 0u);
  EXPECT_EQ(s.dropped, 0u);
  EXPECT_EQ(s.queued, 0u);
  EXPECT_EQ(n->metrics().delivered.load(), 1u);
}

TEST(Notifier, AWrongSecretGets401AndIsNotRetried) {
  TempDir dir("notifier-401");
  SinkProcess sink =
      SinkProcess::start({"--quiet", "--secret", kSecret, "--verify", "standard"}, dir.path());
  NotifierOptions o = options_for(sink.base_url() + "/ops");
  o.secret = "not-the-sinks-secret";
  auto n = start(std::move(o));
  ASSERT_TRUE(n);
  n->enqueue(note(7));
  ASSERT_TRUE(wait_until([&] { return n->stats().failed == 1; })) << describe(n->stats());
  std::this_thread::sleep_for(200ms);  // the ladder's pauses are 50 ms: a retry would show
  EXPECT_EQ(statuses_of(sink, "ntf_7"), std::vector<std::string>{"401"});
  EXPECT_EQ(n->stats().last_error, "http_401");
  EXPECT_EQ(n->stats().delivered, 0u);
}

TEST(Notifier, RetriesAfterA503WithTheSameId) {
  TempDir dir("notifier-503");
  SinkProcess sink = SinkProcess::start(
      {"--quiet", "--secret", kSecret, "--fault", "/ops=status=503;limit=1"}, dir.path());
  auto n = start(options_for(sink.base_url() + "/ops"));
  ASSERT_TRUE(n);
  n->enqueue(note(9));
  ASSERT_TRUE(wait_until([&] { return n->stats().delivered == 1; })) << describe(n->stats());
  EXPECT_EQ(statuses_of(sink, "ntf_9"), (std::vector<std::string>{"503", "200"}));
  EXPECT_EQ(n->stats().attempts, 2u);
  EXPECT_EQ(n->stats().failed, 0u);
}

TEST(Notifier, GivesUpAfterTheLadder) {
  TempDir dir("notifier-ladder");
  SinkProcess sink = SinkProcess::start({"--quiet", "--fault", "/ops=status=503"}, dir.path());
  auto n = start(options_for(sink.base_url() + "/ops"));  // 2 pauses: 3 attempts
  ASSERT_TRUE(n);
  n->enqueue(note(11));
  ASSERT_TRUE(wait_until([&] { return n->stats().failed == 1; })) << describe(n->stats());
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(statuses_of(sink, "ntf_11"), (std::vector<std::string>{"503", "503", "503"}));
  EXPECT_EQ(n->stats().last_error, "http_503");
  EXPECT_EQ(n->stats().delivered, 0u);
  EXPECT_EQ(n->stats().queued, 0u);
}

TEST(Notifier, AHangingReceiverNeverBlocksEnqueueAndTheQueueStaysBounded) {
  TempDir dir("notifier-hang");
  SinkProcess sink = SinkProcess::start({"--quiet", "--fault", "/ops=hang"}, dir.path());
  NotifierOptions o = options_for(sink.base_url() + "/ops");
  o.queue_max = 8;
  o.max_in_flight = 2;
  o.transport.exchange_timeout = seconds(60);  // the POSTs stay on the wire until stop()
  o.stop_drain = milliseconds(300);
  auto n = start(std::move(o));
  ASSERT_TRUE(n);
  constexpr uint64_t kCount = 200;
  for (uint64_t i = 1; i <= kCount; ++i) n->enqueue(note(i));  // returns although nothing answers
  ASSERT_TRUE(wait_until([&] { return sink.stats_value("hangs") >= 2; }))
      << sink.stats_json() << "\n"
      << describe(n->stats());
  NotifierStats s = n->stats();
  // Held: at most queue_max in the queue plus queue_max on the notifier's side.
  EXPECT_LE(s.queued, 16u) << describe(s);
  EXPECT_GE(s.dropped, kCount - 16) << describe(s);
  EXPECT_EQ(s.delivered + s.failed, 0u) << describe(s);
  n->stop();  // bounded by stop_drain: the hung POSTs are cancelled
  s = n->stats();
  EXPECT_EQ(s.delivered + s.failed + s.dropped, kCount) << describe(s);
  EXPECT_EQ(s.queued, 0u) << describe(s);
  n->enqueue(note(kCount + 1));  // after stop: dropped, counted
  EXPECT_EQ(n->stats().dropped, s.dropped + 1);
}

TEST(Notifier, RefusesALoopbackUrlWithoutTheAllowList) {
  TempDir dir("notifier-ssrf");
  SinkProcess sink = SinkProcess::start({"--quiet"}, dir.path());
  auto n = start(options_for(sink.base_url() + "/ops", /*allow_loopback=*/false));
  ASSERT_TRUE(n);
  n->enqueue(note(13));
  ASSERT_TRUE(wait_until([&] { return n->stats().failed == 1; })) << describe(n->stats());
  EXPECT_EQ(n->stats().last_error, "private_address");
  EXPECT_EQ(n->stats().attempts, 1u) << "a refusal by our own guard is not retried";
  EXPECT_EQ(sink.stats_value("requests"), 0) << sink.stats_json();
  EXPECT_TRUE(sink.ids().empty());
}

}  // namespace
}  // namespace ringcast::engine
