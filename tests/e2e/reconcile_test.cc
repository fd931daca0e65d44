// End to end (seed 003, SPEC R12.11): reconciliation before a blind resend.
// ringcast-sink plays a receiver that can act and drop the connection (reset: recorded), lose a
// request before it saw it (drop: not recorded), hang, and serve a status URL (--status:
// GET .../status/<webhook id> → 200 when it has the id, 404 when not; a fault rule on the
// status path keeps it "processing"). The daemon's test config asks after 150 ms, then every
// 300 ms, and gives up after 2.5 s. Seed 003's cases:
//   (1) the request never arrived → the status says 404 → resent once, delivered;
//   (2) the receiver acted, the response was lost → 2xx → delivered with no second POST;
//   (3) the receiver stays "processing" → no false failure: needs review after the deadline,
//       never resent;
//   (6) the same event id with another payload is a conflict;
//   (7) ringcast killed after the receiver acted → after the restart the status check says
//       2xx → no second POST;
//   (8) an outage (receiver and its status URL down) → a bounded number of requests on the
//       schedule, then needs review, counted in the metrics an alert watches.
// Plus on_unknown = review (never resent) and the field validation. Both storage modes.
#include <gtest/gtest.h>

#include <algorithm>

#include "tests/e2e/daemon.h"

namespace ringcast::e2e {
namespace {

using test::SinkProcess;
using test::TempDir;

constexpr const char* kSecret = "whsec_cmVjb25jaWxlLWUyZS1zZWNyZXQta2V5LTAwMQ==";

std::string endpoint_with(const Daemon& d, const std::string& tenant, const std::string& url,
                          const std::string& on_unknown, const std::string& status_url) {
  std::string body =
      "{\"url\":" + quote(url) + ",\"policy\":\"steady\",\"on_unknown\":" + quote(on_unknown);
  if (!status_url.empty()) body += ",\"status_url\":" + quote(status_url);
  body += "}";
  Reply r = create_endpoint(d, tenant, body);
  EXPECT_EQ(r.status, 201) << r.describe();
  return r.json()["id"].str();
}

Json wait_ended(const Daemon& d, const std::string& t, const std::string& ep,
                const std::string& event_id, Millis timeout) {
  return wait_delivery(d, t, ep, event_id, delivery_ended, timeout);
}

// "attempt:unknown status_check:not_received attempt:success" — the history, for asserts.
std::string history(const Json& detail) {
  std::string out;
  for (const Json& a : detail["attempts"].items()) {
    if (!out.empty()) out += ' ';
    out += a["kind"].str() + ":" +
           (a["kind"].str() == "status_check" ? a["answer"].str() : a["outcome"].str());
  }
  return out;
}

size_t count_of(const std::string& text, const std::string& word) {
  size_t n = 0;
  for (size_t at = text.find(word); at != std::string::npos; at = text.find(word, at + 1)) ++n;
  return n;
}

TEST(E2eReconcile, SeedCasesAskBeforeResendingAndNeverResendWhatWasReceived) {
  Daemon d;
  ASSERT_NO_THROW(d.start());
  TempDir dir("e2e-reconcile");
  const std::string ids = dir.file("ids.txt");
  SinkProcess sink = SinkProcess::start({"--quiet",    "--status",
                                         "--ids-file", ids,
                                         "--secret",   kSecret,
                                         "--verify",   "standard",
                                         "--fault",    "/lost=drop;limit=1",
                                         "--fault",    "/acted=reset;limit=1",
                                         "--fault",    "/slow=reset",
                                         "--fault",    "/p3/status=status=202",
                                         "--fault",    "/down=reset",
                                         "--fault",    "/p8/status=status=503",
                                         "--fault",    "/rv=reset"},
                                        dir.path());
  const std::string base = sink.base_url();
  // One tenant per case: each receiver knows only its own webhooks (one event's webhook id is
  // the same on every endpoint it fans out to).
  struct Case {
    std::string tenant, ep, wid;
  };
  auto make = [&](const std::string& tenant, const std::string& path, const std::string& mode,
                  const std::string& status) {
    Case c;
    c.tenant = tenant;
    std::string body =
        "{\"url\":" + quote(base + path) +
        ",\"policy\":\"steady\",\"signature\":\"standard\",\"secret\":" + quote(kSecret) +
        ",\"on_unknown\":" + quote(mode);
    if (!status.empty()) body += ",\"status_url\":" + quote(base + status);
    body += "}";
    Reply r = create_endpoint(d, tenant, body);
    EXPECT_EQ(r.status, 201) << r.describe();
    c.ep = r.json()["id"].str();
    Reply in = submit_event(d, tenant, "r-1", "payment.captured", R"({"amount":990})");
    EXPECT_EQ(in.status, 202) << in.describe();
    c.wid = message_id_of(d, tenant, "r-1");
    EXPECT_FALSE(c.wid.empty());
    return c;
  };
  const Case c1 = make("recon-lost", "/lost", "reconcile", "/p1/status/{webhook_id}");
  const Case c2 = make("recon-acted", "/acted", "reconcile", "/p2/status/{webhook_id}");
  const Case c3 = make("recon-slow", "/slow", "reconcile", "/p3/status/{webhook_id}");
  const Case c8 = make("recon-down", "/down", "reconcile", "/p8/status/{webhook_id}");
  const Case cr = make("recon-review", "/rv", "review", "");
  Json shown = get_endpoint(d, c1.tenant, c1.ep);
  EXPECT_EQ(shown["on_unknown"].str(), "reconcile");
  EXPECT_EQ(shown["status_url"].str(), base + "/p1/status/{webhook_id}");

  // (1) never arrived: asked, 404, resent once, delivered.
  Json j1 = wait_ended(d, c1.tenant, c1.ep, "r-1", scaled(15s));
  EXPECT_EQ(j1["delivery"]["status"].str(), "delivered") << history(j1);
  EXPECT_EQ(history(j1), "attempt:unknown status_check:not_received attempt:success");
  EXPECT_EQ(j1["delivery"]["attempts"].i64(), 2);

  // (2) acted, answer lost: asked, 2xx, delivered, no second POST.
  Json j2 = wait_ended(d, c2.tenant, c2.ep, "r-1", scaled(15s));
  EXPECT_EQ(j2["delivery"]["status"].str(), "delivered") << history(j2);
  EXPECT_EQ(history(j2), "attempt:unknown status_check:confirmed");
  EXPECT_EQ(j2["delivery"]["attempts"].i64(), 1);

  // (3) processing: asked until the deadline, never resent, needs review.
  Json j3 = wait_ended(d, c3.tenant, c3.ep, "r-1", scaled(15s));
  EXPECT_EQ(j3["delivery"]["status"].str(), "unknown") << history(j3);
  EXPECT_EQ(j3["delivery"]["last_code"].str(), "reconcile_expired");
  EXPECT_EQ(j3["delivery"]["attempts"].i64(), 1) << "a blind resend happened: " << history(j3);
  const size_t checks3 = count_of(history(j3), "status_check:pending");
  EXPECT_GE(checks3, 3u) << history(j3);
  EXPECT_LE(checks3, 12u) << "more checks than the schedule allows: " << history(j3);

  // (8) outage: the status URL is down too: bounded checks, then review.
  Json j8 = wait_ended(d, c8.tenant, c8.ep, "r-1", scaled(15s));
  EXPECT_EQ(j8["delivery"]["status"].str(), "unknown") << history(j8);
  EXPECT_EQ(j8["delivery"]["attempts"].i64(), 1);
  EXPECT_LE(count_of(history(j8), "status_check"), 12u) << history(j8);

  // review: one UNKNOWN, never resent.
  Json jr = wait_ended(d, cr.tenant, cr.ep, "r-1", scaled(15s));
  EXPECT_EQ(jr["delivery"]["status"].str(), "unknown") << history(jr);
  EXPECT_EQ(history(jr), "attempt:unknown");

  // What the receivers saw: (1) only its resend (the first was lost unrecorded), every other
  // case exactly its one POST — all with their webhook id.
  const std::string lines = test::read_file(ids);
  EXPECT_EQ(count_of(lines, c1.wid + " "), 1u) << lines;
  EXPECT_EQ(count_of(lines, c1.wid + " 0 200"), 1u) << lines;
  for (const Case* c : {&c2, &c3, &c8, &cr}) {
    EXPECT_EQ(count_of(lines, c->wid + " "), 1u) << c->tenant << "\n" << lines;
  }

  // (6) the same id with another payload: a conflict, nothing sent.
  Reply conflict = submit_event(d, c2.tenant, "r-1", "payment.captured", R"({"amount":991})");
  EXPECT_EQ(conflict.status, 409) << conflict.describe();

  // The metrics an alert watches.
  Metrics m = scrape_metrics(d);
  EXPECT_EQ(metric(m, "ringcast_reconcile_checks_total{answer=\"confirmed\"}"), 1);
  EXPECT_EQ(metric(m, "ringcast_reconcile_checks_total{answer=\"not_received\"}"), 1);
  EXPECT_GE(metric(m, "ringcast_reconcile_checks_total{answer=\"pending\"}"), 6);
  EXPECT_EQ(metric(m, "ringcast_reconcile_expired_total"), 2);
  EXPECT_EQ(metric(m, "ringcast_deliveries_ended_unknown_total"), 3);
}

TEST(E2eReconcile, AKillAfterTheReceiverActedSendsNoSecondRequest) {
  // (7): the receiver reads and records the request and never answers; ringcast is SIGKILLed
  // with the attempt on the wire. After the restart the lease expired (UNKNOWN): the status
  // check finds the id → delivered, and the sink never sees a second POST.
  Daemon d;
  ASSERT_NO_THROW(d.start());
  TempDir dir("e2e-reconcile-kill");
  const std::string ids = dir.file("ids.txt");
  SinkProcess sink = SinkProcess::start(
      {"--quiet", "--status", "--ids-file", ids, "--fault", "/acted=hang"}, dir.path());
  const std::string t = "reconkill";
  const std::string ep = endpoint_with(d, t, sink.base_url() + "/acted", "reconcile",
                                       sink.base_url() + "/kstatus/status/{webhook_id}");
  ASSERT_FALSE(ep.empty());
  ASSERT_EQ(submit_event(d, t, "k-1", "order.paid", R"({"n":1})").status, 202);
  const std::string wid = message_id_of(d, t, "k-1");
  ASSERT_TRUE(wait_until([&] { return sink_lines_for(sink, wid) >= 1; }, scaled(10s), 10ms));
  d.kill9();
  ASSERT_NO_THROW(d.start());
  Json j = wait_ended(d, t, ep, "k-1", scaled(20s));
  EXPECT_EQ(j["delivery"]["status"].str(), "delivered") << history(j) << "\n" << d.output();
  EXPECT_EQ(history(j), "attempt:unknown status_check:confirmed");
  EXPECT_EQ(j["attempts"][0]["code"].str(), "lease_expired");
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(sink_lines_for(sink, wid), 1u) << test::read_file(ids);
}

TEST(E2eReconcile, TheFieldsAreCheckedAndShown) {
  Daemon d;
  ASSERT_NO_THROW(d.start());
  const std::string t = "reconfields";
  Reply no_status =
      create_endpoint(d, t, R"({"url":"http://127.0.0.1:9/x","on_unknown":"reconcile"})");
  EXPECT_EQ(no_status.status, 400) << no_status.describe();
  EXPECT_EQ(no_status.json()["error"]["field"].str(), "status_url") << no_status.body;
  Reply no_placeholder = create_endpoint(
      d, t,
      R"({"url":"http://127.0.0.1:9/x","on_unknown":"reconcile","status_url":"http://127.0.0.1:9/s"})");
  EXPECT_EQ(no_placeholder.status, 400) << no_placeholder.describe();
  EXPECT_EQ(no_placeholder.json()["error"]["field"].str(), "status_url");
  Reply bad_url = create_endpoint(
      d, t,
      R"({"url":"http://127.0.0.1:9/x","on_unknown":"reconcile","status_url":"ftp://h/{webhook_id}"})");
  EXPECT_EQ(bad_url.status, 422) << bad_url.describe();  // as for `url`: a URL rule's answer
  EXPECT_EQ(bad_url.json()["error"]["field"].str(), "status_url");
  Reply bad_mode = create_endpoint(d, t, R"({"url":"http://127.0.0.1:9/x","on_unknown":"hope"})");
  EXPECT_EQ(bad_mode.status, 400) << bad_mode.describe();
  EXPECT_EQ(bad_mode.json()["error"]["field"].str(), "on_unknown");

  Reply made = create_endpoint(d, t, R"({"url":"http://127.0.0.1:9/x"})");
  ASSERT_EQ(made.status, 201) << made.describe();
  EXPECT_EQ(made.json()["on_unknown"].str(), "retry");
  EXPECT_TRUE(made.json()["status_url"].is_null());
  const std::string path = "/v1/tenants/" + t + "/endpoints/" + made.json()["id"].str();
  Reply to_reconcile = d.call("PATCH", path, R"({"on_unknown":"reconcile"})");
  EXPECT_EQ(to_reconcile.status, 400) << to_reconcile.describe();
  Reply patched =
      d.call("PATCH", path,
             R"({"on_unknown":"reconcile","status_url":"http://127.0.0.1:9/s/{webhook_id}"})");
  ASSERT_EQ(patched.status, 200) << patched.describe();
  EXPECT_EQ(patched.json()["on_unknown"].str(), "reconcile");
  // Kept across a restart (the endpoint codec's version 6).
  d.kill9();
  ASSERT_NO_THROW(d.start());
  Json after;  // cluster mode: the partition may still be loading on its new owner (503)
  wait_until(
      [&] {
        after = get_endpoint(d, t, made.json()["id"].str());
        return !after["on_unknown"].str().empty();
      },
      scaled(10s), 50ms);
  EXPECT_EQ(after["on_unknown"].str(), "reconcile");
  EXPECT_EQ(after["status_url"].str(), "http://127.0.0.1:9/s/{webhook_id}");
}

}  // namespace
}  // namespace ringcast::e2e
