// End to end: operator notifications (SPEC R8.4) reach the operator webhook. The daemon runs with
// notifications.webhook_url pointing at a ringcast-sink that checks Standard Webhooks signatures
// (R11.2) with notifications.webhook_secret (given through its RINGCAST_* variable); an endpoint
// auto-disabled by exhaustion (R8.1) produces a notification that the GET route lists and the
// webhook receives as ntf_<seq>, and /metrics counts it. Without the allow-list the operator URL
// on loopback is refused like an endpoint's (R6 private_address): nothing reaches it. A
// notification the daemon had not POSTed when it was killed is POSTed after the restart.
#include <gtest/gtest.h>

#include "tests/e2e/daemon.h"

namespace ringcast::e2e {
namespace {

using test::SinkProcess;
using test::TempDir;

constexpr const char* kOpsSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSwMfKQ9r8GKYo=";

DaemonOptions with_webhook(const std::string& url, bool allow_private) {
  DaemonOptions o;
  o.allow_private = allow_private;
  o.extra_toml = "[notifications]\nwebhook_url = " + quote(url) + "\n";
  o.env = {std::string("RINGCAST_NOTIFICATIONS_WEBHOOK_SECRET=") + kOpsSecret};
  return o;
}

std::string make_endpoint(const Daemon& d, const std::string& tenant, const std::string& url) {
  Reply r = create_endpoint(d, tenant, "{\"url\":" + quote(url) + ",\"policy\":\"quick\"}");
  EXPECT_EQ(r.status, 201) << r.describe();
  return r.json()["id"].str();
}

// The notification for `endpoint` listed by GET /v1/tenants/{tenant}/notifications ({} if none).
Json notification_for(const Daemon& d, const std::string& tenant, const std::string& endpoint) {
  Json notes = d.call("GET", "/v1/tenants/" + tenant + "/notifications").json()["notifications"];
  for (const Json& n : notes.items()) {
    if (n["endpoint"].str() == endpoint) return n;
  }
  return Json();
}

// The value of one `ringcast_notifications_webhook_total{outcome="..."}` sample (summed over
// the nodes in cluster mode); -1 if absent.
int64_t webhook_metric(const Daemon& d, const std::string& outcome) {
  return static_cast<int64_t>(metric(
      scrape_metrics(d), "ringcast_notifications_webhook_total{outcome=\"" + outcome + "\"}"));
}

TEST(E2eNotification, AnAutoDisabledEndpointNotifiesTheOperatorWebhook) {
  TempDir ops_dir("e2e-ntf-ops");
  // The operator's receiver answers 503 once: the notifier retries (its first pause is 1 s).
  SinkProcess ops = SinkProcess::start({"--quiet", "--secret", kOpsSecret, "--verify", "standard",
                                        "--fault", "/ops=status=503;limit=1"},
                                       ops_dir.path());
  Daemon d(with_webhook(ops.base_url() + "/ops", /*allow_private=*/true));
  ASSERT_NO_THROW(d.start());
  TempDir dir("e2e-ntf");
  SinkProcess sink = SinkProcess::start({"--quiet", "--fault", "/down=status=500"}, dir.path());
  const std::string t = "ntf";
  std::string ep = make_endpoint(d, t, sink.base_url() + "/down");
  ASSERT_FALSE(ep.empty());
  ASSERT_EQ(submit_event(d, t, "n-1", "a.b", "{\"v\":1}").status, 202);

  // R8.1, R8.4: exhaustion disables the endpoint and stores a notification.
  Json note;
  ASSERT_TRUE(wait_until(
      [&] {
        note = notification_for(d, t, ep);
        return note.is_object();
      },
      scaled(10s)))
      << d.call("GET", "/v1/tenants/" + t + "/notifications").body << "\n"
      << d.output();
  EXPECT_EQ(note["kind"].str(), "endpoint_disabled");
  const std::string id = "ntf_" + note["seq"].str();

  // The webhook gets it: a 503 first, then the retry with the same id, signed (else 401).
  ASSERT_TRUE(wait_until([&] { return !sink_ids_with_status(ops, "200").empty(); }, scaled(10s)))
      << test::read_file(ops.ids_file) << "\n"
      << d.output();
  EXPECT_EQ(sink_ids_with_status(ops, "200"), std::vector<std::string>{id})
      << test::read_file(ops.ids_file);
  EXPECT_EQ(sink_ids_with_status(ops, "503"), std::vector<std::string>{id})
      << test::read_file(ops.ids_file);
  EXPECT_EQ(ops.stats_value("bad_signatures"), 0) << ops.stats_json();
  EXPECT_EQ(sink_lines_for(ops, id), 2u) << test::read_file(ops.ids_file);

  EXPECT_EQ(webhook_metric(d, "delivered"), 1);
  EXPECT_EQ(webhook_metric(d, "failed"), 0);
  EXPECT_EQ(webhook_metric(d, "dropped"), 0);
  auto st = d.terminate();
  EXPECT_TRUE(st.ok()) << st.str() << "\n" << d.output();
}

TEST(E2eNotification, ANotificationNotPostedBeforeACrashIsPostedAfterTheRestart) {
  // Both storage modes: RocksDB's outbox, or the partition's outbox on Redis (T ob), sent by
  // the node that takes the partition after the restart.
  TempDir ops_dir("e2e-ntf-crash-ops");
  // The first POST gets a 503; the notifier would retry 1 s later, but the daemon dies first.
  SinkProcess ops = SinkProcess::start({"--quiet", "--secret", kOpsSecret, "--verify", "standard",
                                        "--fault", "/ops=status=503;limit=1"},
                                       ops_dir.path());
  Daemon d(with_webhook(ops.base_url() + "/ops", /*allow_private=*/true));
  ASSERT_NO_THROW(d.start());
  TempDir dir("e2e-ntf-crash");
  SinkProcess sink = SinkProcess::start({"--quiet", "--fault", "/down=status=500"}, dir.path());
  const std::string t = "ntf-crash";
  std::string ep = make_endpoint(d, t, sink.base_url() + "/down");
  ASSERT_FALSE(ep.empty());
  ASSERT_EQ(submit_event(d, t, "c-1", "a.b", "{\"v\":1}").status, 202);
  ASSERT_TRUE(wait_until([&] { return !sink_ids_with_status(ops, "503").empty(); }, scaled(10s)))
      << test::read_file(ops.ids_file) << "\n"
      << d.output();
  d.kill9();
  const std::string id = sink_ids_with_status(ops, "503").at(0);
  ASSERT_TRUE(sink_ids_with_status(ops, "200").empty()) << "the retry came before the kill";

  // The restart finds it in the outbox and POSTs it again, with the same webhook-id.
  ASSERT_NO_THROW(d.start());
  ASSERT_TRUE(wait_until([&] { return !sink_ids_with_status(ops, "200").empty(); }, scaled(10s)))
      << test::read_file(ops.ids_file) << "\n"
      << d.output();
  EXPECT_EQ(sink_ids_with_status(ops, "200"), std::vector<std::string>{id});
  EXPECT_EQ(ops.stats_value("bad_signatures"), 0) << ops.stats_json();
  EXPECT_EQ(webhook_metric(d, "delivered"), 1);

  // Once delivered it leaves the outbox: another restart sends nothing more.
  auto st = d.terminate();
  EXPECT_TRUE(st.ok()) << st.str() << "\n" << d.output();
  ASSERT_NO_THROW(d.start());
  EXPECT_FALSE(wait_until([&] { return sink_lines_for(ops, id) > 2; }, scaled(1500ms)))
      << test::read_file(ops.ids_file);
  EXPECT_EQ(webhook_metric(d, "delivered"), 0);
  st = d.terminate();
  EXPECT_TRUE(st.ok()) << st.str() << "\n" << d.output();
}

TEST(E2eNotification, TheOperatorUrlGetsTheEndpointsAddressGuard) {
  TempDir ops_dir("e2e-ntf-ssrf-ops");
  SinkProcess ops = SinkProcess::start({"--quiet", "--secret", kOpsSecret}, ops_dir.path());
  // No allow-list: loopback is a private address for endpoints and the operator URL alike.
  Daemon d(with_webhook(ops.base_url() + "/ops", /*allow_private=*/false));
  ASSERT_NO_THROW(d.start());
  TempDir dir("e2e-ntf-ssrf");
  SinkProcess sink = SinkProcess::start({"--quiet"}, dir.path());
  const std::string t = "ntf-ssrf";
  std::string ep = make_endpoint(d, t, sink.base_url() + "/x");
  ASSERT_FALSE(ep.empty());
  ASSERT_EQ(submit_event(d, t, "s-1", "a.b", "{}").status, 202);
  // Every attempt is private_address; the ladder runs out and the endpoint is disabled.
  ASSERT_TRUE(wait_until([&] { return notification_for(d, t, ep).is_object(); }, scaled(10s)))
      << d.output();
  EXPECT_EQ(notification_for(d, t, ep)["reason"].str(), "private_address");
  ASSERT_TRUE(wait_until([&] { return webhook_metric(d, "failed") == 1; }, scaled(5s)))
      << d.call("GET", "/metrics").body;
  EXPECT_EQ(webhook_metric(d, "delivered"), 0);
  EXPECT_EQ(ops.stats_value("requests"), 0) << ops.stats_json();
  EXPECT_EQ(sink.stats_value("requests"), 0) << sink.stats_json();
  auto st = d.terminate();
  EXPECT_TRUE(st.ok()) << st.str() << "\n" << d.output();
}

}  // namespace
}  // namespace ringcast::e2e
