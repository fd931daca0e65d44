// End to end (SPEC R12.1, R12.8, R12.10): UNKNOWN is a delivery state. A receiver that reads the
// request and resets the connection leaves every attempt UNKNOWN (the request was written: it may
// have acted). While such a delivery retries the API shows "outcome_pending": "unknown"; when its
// budget ends it ends `unknown` (needs review), not failed or dead — and auto-disable still applies
// to its endpoint. A later definitive answer settles it (delivered). `state=unknown` lists them; an
// operator resolves one as delivered or failed (API and CLI), which is kept in its history across a
// restart, and the metrics count the deliveries ended unknown, the resolutions and the time spent
// UNKNOWN.
#include <gtest/gtest.h>

#include "tests/e2e/daemon.h"

namespace ringcast::e2e {
namespace {

using test::SinkProcess;
using test::TempDir;

// A delivery detail, briefly, for failure messages.
std::string show(const Json& j) {
  const Json& d = j.has("delivery") ? j["delivery"] : j;
  std::string out = "status=" + d["status"].str() + " attempts=" + d["attempts"].str() +
                    " outcome_pending=" + d["outcome_pending"].str() + " state=" + d["state"].str();
  for (const Json& a : j["attempts"].items())
    out += " [" + a["kind"].str() + " " + a["outcome"].str() + " " + a["code"].str() + "]";
  return out;
}

TEST(E2eUnknown, UnknownEndsNeedingReviewAndAnOperatorResolvesIt) {
  Daemon d;
  ASSERT_NO_THROW(d.start());
  TempDir dir("e2e-unknown");
  SinkProcess sink = SinkProcess::start({"--quiet", "--fault", "/q=reset", "--fault", "/s=reset",
                                         "--fault", "/m=reset;limit=1", "--fault", "/r=status=400"},
                                        dir.path());
  const std::string t = "unknowns";
  // quick: 3 attempts, auto-disable on exhaustion; steady: 13 attempts over ~4.7 s, no disable.
  const std::string ep_q = endpoint_with_policy(d, t, sink.base_url() + "/q", "quick");
  const std::string ep_s = endpoint_with_policy(d, t, sink.base_url() + "/s", "steady");
  const std::string ep_m = endpoint_with_policy(d, t, sink.base_url() + "/m", "quick");
  const std::string ep_r = endpoint_with_policy(d, t, sink.base_url() + "/r", "quick");
  ASSERT_FALSE(ep_q.empty() || ep_s.empty() || ep_m.empty() || ep_r.empty());
  Reply in = submit_event(d, t, "u-1", "payment.captured", R"({"amount":4200})");
  ASSERT_EQ(in.status, 202) << in.describe();

  // Still retrying after an UNKNOWN attempt: shown as such.
  Json retrying = wait_delivery(
      d, t, ep_s, "u-1",
      [](const Json& j) {
        return j["delivery"]["attempts"].i64() >= 1 && j["delivery"]["status"].str() == "pending";
      },
      scaled(10s));
  EXPECT_EQ(retrying["delivery"]["status"].str(), "pending") << show(retrying);
  EXPECT_EQ(retrying["delivery"]["outcome_pending"].str(), "unknown") << show(retrying);

  // Budget spent on UNKNOWN outcomes: unknown, and the endpoint is auto-disabled all the same.
  Json q = wait_delivery(d, t, ep_q, "u-1", delivery_ended, scaled(10s));
  EXPECT_EQ(q["delivery"]["status"].str(), "unknown") << show(q);
  EXPECT_EQ(q["delivery"]["attempts"].i64(), 3);
  for (const Json& a : q["attempts"].items()) EXPECT_EQ(a["outcome"].str(), "unknown") << show(q);
  Json ep_q_now = get_endpoint(d, t, ep_q);
  EXPECT_EQ(ep_q_now["state"].str(), "disabled") << show(ep_q_now);

  // One UNKNOWN, then a 200: delivered, nothing pending.
  Json m = wait_delivery(d, t, ep_m, "u-1", delivery_ended, scaled(10s));
  EXPECT_EQ(m["delivery"]["status"].str(), "delivered") << show(m);
  EXPECT_EQ(m["delivery"]["attempts"].i64(), 2);
  EXPECT_TRUE(m["delivery"]["outcome_pending"].is_null()) << show(m);

  // Definitive failures (400, retried by smengo until spent): dead as before, not unknown.
  Json r = wait_delivery(d, t, ep_r, "u-1", delivery_ended, scaled(10s));
  EXPECT_EQ(r["delivery"]["status"].str(), "dead") << show(r);

  Json s = wait_delivery(d, t, ep_s, "u-1", delivery_ended, scaled(20s));
  EXPECT_EQ(s["delivery"]["status"].str(), "unknown") << show(s);
  EXPECT_EQ(get_endpoint(d, t, ep_s)["state"].str(), "enabled");

  // state=unknown lists exactly those two.
  Reply listed = d.call("GET", "/v1/tenants/" + t + "/deliveries?state=unknown");
  ASSERT_EQ(listed.status, 200) << listed.describe();
  Json lj = listed.json();
  std::vector<std::string> listed_ids;
  for (const Json& x : lj["deliveries"].items()) listed_ids.push_back(x["id"].str());
  std::sort(listed_ids.begin(), listed_ids.end());
  std::vector<std::string> want = {q["delivery"]["id"].str(), s["delivery"]["id"].str()};
  std::sort(want.begin(), want.end());
  EXPECT_EQ(listed_ids, want) << listed.body;

  // Resolve through the API.
  const std::string base = "/v1/tenants/" + t + "/deliveries/";
  const std::string q_id = q["delivery"]["id"].str();
  Reply bad = d.call("POST", base + q_id + "/resolve", R"({"outcome":"maybe"})");
  EXPECT_EQ(bad.status, 400) << bad.describe();
  EXPECT_EQ(bad.json()["error"]["field"].str(), "outcome") << bad.body;
  Reply missing = d.call("POST", base + q_id + "/resolve", R"({"note":"x"})");
  EXPECT_EQ(missing.status, 400) << missing.describe();
  EXPECT_EQ(missing.json()["error"]["field"].str(), "outcome") << missing.body;
  Reply long_note = d.call("POST", base + q_id + "/resolve",
                           "{\"outcome\":\"failed\",\"note\":\"" + std::string(513, 'n') + "\"}");
  EXPECT_EQ(long_note.status, 400) << long_note.describe();
  EXPECT_EQ(long_note.json()["error"]["field"].str(), "note") << long_note.body;
  EXPECT_EQ(d.call("POST", base + "424242424242/resolve", R"({"outcome":"failed"})").status, 404);
  Reply not_unknown =
      d.call("POST", base + r["delivery"]["id"].str() + "/resolve", R"({"outcome":"delivered"})");
  EXPECT_EQ(not_unknown.status, 409) << not_unknown.describe();
  EXPECT_EQ(not_unknown.json()["error"]["code"].str(), "not_unknown") << not_unknown.body;

  Reply resolved =
      d.call("POST", base + q_id + "/resolve",
             R"({"outcome":"delivered","note":"receiver confirmed: order 4200 paid"})");
  ASSERT_EQ(resolved.status, 200) << resolved.describe();
  Json rj = resolved.json();
  EXPECT_EQ(rj["delivery"]["status"].str(), "delivered") << resolved.body;
  EXPECT_EQ(history_kinds(rj),
            (std::vector<std::string>{"attempt", "attempt", "attempt", "resolution"}))
      << resolved.body;
  const Json& record = rj["attempts"][3];
  EXPECT_EQ(record["resolved_as"].str(), "delivered");
  EXPECT_EQ(record["note"].str(), "receiver confirmed: order 4200 paid");
  Reply twice = d.call("POST", base + q_id + "/resolve", R"({"outcome":"failed"})");
  EXPECT_EQ(twice.status, 409) << twice.describe();

  // Resolve through the CLI.
  int runs = 0;
  auto cli = [&](const std::vector<std::string>& args, bool* ok) {
    const std::string tag = "cli-" + std::to_string(++runs);
    test::ProcessOptions po;
    po.stdout_path = dir.file(tag + ".out");
    po.stderr_path = dir.file(tag + ".err");
    std::vector<std::string> argv = {ringcast_binary(), "--server",
                                     "127.0.0.1:" + std::to_string(d.port(0)), "--token",
                                     Daemon::kToken};
    argv.insert(argv.end(), args.begin(), args.end());
    test::Process p = test::Process::start(argv, std::move(po));
    auto st = p.wait(20s);
    *ok = st && st->ok();
    return test::read_file(dir.file(tag + ".out")) + test::read_file(dir.file(tag + ".err"));
  };
  const std::string s_id = s["delivery"]["id"].str();
  bool ok = true;
  std::string out = cli({"deliveries", "resolve", "-t", t, s_id, "--outcome", "sideways"}, &ok);
  EXPECT_FALSE(ok) << out;
  out = cli({"deliveries", "resolve", "-t", t, s_id, "--outcome", "failed", "--note",
             "receiver has no record of it"},
            &ok);
  EXPECT_TRUE(ok) << out;
  EXPECT_NE(out.find("resolved: failed"), std::string::npos) << out;
  out = cli({"deliveries", "list", "-t", t, "--state", "unknown"}, &ok);
  EXPECT_TRUE(ok) << out;
  EXPECT_NE(out.find("no deliveries"), std::string::npos) << out;

  // The metrics: two ended unknown, one resolution each way, three UNKNOWN spans measured (the
  // settled one and the two resolutions).
  Metrics mt = scrape_metrics(d);
  EXPECT_EQ(metric(mt, "ringcast_deliveries_ended_unknown_total"), 2);
  EXPECT_EQ(metric(mt, "ringcast_deliveries_resolved_total{outcome=\"delivered\"}"), 1);
  EXPECT_EQ(metric(mt, "ringcast_deliveries_resolved_total{outcome=\"failed\"}"), 1);
  EXPECT_EQ(metric(mt, "ringcast_unknown_duration_seconds_count"), 3);
  EXPECT_GT(metric(mt, "ringcast_unknown_duration_seconds_sum"), 0);

  // Durable: after a crash the verdicts and the whole history are still there.
  d.kill9();
  ASSERT_NO_THROW(d.start());
  Json q_after = get_delivery(d, t, q_id);
  EXPECT_EQ(q_after["delivery"]["status"].str(), "delivered") << show(q_after);
  EXPECT_EQ(history_kinds(q_after),
            (std::vector<std::string>{"attempt", "attempt", "attempt", "resolution"}))
      << show(q_after);
  Json s_after = get_delivery(d, t, s_id);
  EXPECT_EQ(s_after["delivery"]["status"].str(), "failed") << show(s_after);
  ASSERT_GE(s_after["attempts"].size(), 2u);
  const Json& last = s_after["attempts"][s_after["attempts"].size() - 1];
  EXPECT_EQ(last["kind"].str(), "resolution");
  EXPECT_EQ(last["resolved_as"].str(), "failed");
  EXPECT_EQ(last["note"].str(), "receiver has no record of it");
  EXPECT_EQ(s_after["attempts"].size(), 14u) << "13 attempts and the resolution";
}

}  // namespace
}  // namespace ringcast::e2e
