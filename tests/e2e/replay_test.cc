// End to end, replay (operations.md "Delivery log"): resend a delivery that ended (the same
// delivery and webhook id, attempts numbered on, its history shows the resend), refused while its
// endpoint is disabled (R8.5) and while it is pending again (idempotent), kept across a crash
// between the resend and the send; "replay missing" fans an event out to the endpoints that never
// had a delivery of it, once; a recover job re-queues an endpoint's ended deliveries of a time
// window, within the configured in-flight bound, with progress at GET .../jobs/{id}.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <thread>

#include "tests/e2e/daemon.h"

namespace ringcast::e2e {
namespace {

using test::SinkProcess;
using test::TempDir;

std::string show(const Json& j) {
  const Json& d = j.has("delivery") ? j["delivery"] : j;
  std::string out = "status=" + d["status"].str() + " attempts=" + d["attempts"].str();
  for (const Json& a : j["attempts"].items())
    out += " [" + a["kind"].str() + " " + a["number"].str() + " " + a["code"].str() + "]";
  return out;
}

Reply action(const Daemon& d, const std::string& t, const std::string& ep, const char* what) {
  return d.call("POST", "/v1/tenants/" + t + "/endpoints/" + ep + "/" + what);
}

TEST(E2eReplay, ResendReopensTheDeliveryWithTheSameWebhookId) {
  Daemon d;
  ASSERT_NO_THROW(d.start());
  TempDir dir("e2e-replay");
  // /u: three resets (UNKNOWN each), then 200. /a: three 500s, then 200.
  SinkProcess sink = SinkProcess::start(
      {"--quiet", "--fault", "/u=reset;limit=3", "--fault", "/a=status=500;limit=3"}, dir.path());
  const std::string t = "replays";
  const std::string ep_u = endpoint_with_policy(d, t, sink.base_url() + "/u", "quick");
  const std::string ep_a = endpoint_with_policy(d, t, sink.base_url() + "/a", "quick");
  ASSERT_FALSE(ep_u.empty() || ep_a.empty());
  Reply in = submit_event(d, t, "r-1", "order.paid", R"({"n":1})");
  ASSERT_EQ(in.status, 202) << in.describe();
  const std::string msg = message_id_of(d, t, "r-1");
  ASSERT_FALSE(msg.empty());

  // Both end (unknown, dead) and auto-disable their endpoints (quick: R8.1).
  Json u = wait_delivery(d, t, ep_u, "r-1", delivery_ended, scaled(10s));
  ASSERT_EQ(u["delivery"]["status"].str(), "unknown") << show(u);
  Json a = wait_delivery(d, t, ep_a, "r-1", delivery_ended, scaled(10s));
  ASSERT_EQ(a["delivery"]["status"].str(), "dead") << show(a);
  ASSERT_TRUE(wait_until([&] { return get_endpoint(d, t, ep_a)["state"].str() == "disabled"; },
                         scaled(5s)));
  const std::string base = "/v1/tenants/" + t + "/deliveries/";
  const std::string u_id = u["delivery"]["id"].str();
  const std::string a_id = a["delivery"]["id"].str();

  // R8.5: a disabled endpoint refuses a resend until it is enabled.
  Reply refused = d.call("POST", base + a_id + "/resend");
  EXPECT_EQ(refused.status, 409) << refused.describe();
  EXPECT_EQ(refused.json()["error"]["code"].str(), "endpoint_disabled") << refused.body;
  EXPECT_EQ(d.call("POST", base + "424242424242/resend").status, 404);
  Reply bad_field = d.call("POST", base + a_id + "/resend", R"({"nope":1})");
  EXPECT_EQ(bad_field.status, 400) << bad_field.describe();
  EXPECT_EQ(bad_field.json()["error"]["field"].str(), "nope") << bad_field.body;

  ASSERT_EQ(action(d, t, ep_a, "enable").status, 200);
  Reply resent = d.call("POST", base + a_id + "/resend", R"({"note":"receiver fixed"})");
  ASSERT_EQ(resent.status, 202) << resent.describe();
  Json a2 = wait_delivery(d, t, ep_a, "r-1", delivery_ended, scaled(10s));
  EXPECT_EQ(a2["delivery"]["status"].str(), "delivered") << show(a2);
  EXPECT_EQ(a2["delivery"]["id"].str(), a_id);
  EXPECT_EQ(a2["delivery"]["attempts"].i64(), 4) << show(a2);
  EXPECT_EQ(history_kinds(a2),
            (std::vector<std::string>{"attempt", "attempt", "attempt", "resend", "attempt"}))
      << show(a2);
  if (a2["attempts"].size() == 5) {
    EXPECT_EQ(a2["attempts"][3]["note"].str(), "receiver fixed");
    EXPECT_EQ(a2["attempts"][4]["number"].i64(), 4);
  }

  // The unknown one: enabled but paused, so that the resend stays pending.
  if (get_endpoint(d, t, ep_u)["state"].str() == "disabled") {
    ASSERT_EQ(action(d, t, ep_u, "enable").status, 200);
  }
  ASSERT_EQ(action(d, t, ep_u, "pause").status, 200);
  Reply r1 = d.call("POST", base + u_id + "/resend");
  ASSERT_EQ(r1.status, 202) << r1.describe();
  EXPECT_EQ(r1.json()["delivery"]["status"].str(), "pending") << r1.body;
  Reply r2 = d.call("POST", base + u_id + "/resend");
  EXPECT_EQ(r2.status, 409) << r2.describe();
  EXPECT_EQ(r2.json()["error"]["code"].str(), "delivery_pending") << r2.body;

  // A crash between the resend and its send: the store holds it as live again.
  d.kill9();
  ASSERT_NO_THROW(d.start());
  Json after = get_delivery(d, t, u_id);
  EXPECT_EQ(after["delivery"]["status"].str(), "pending") << show(after);
  EXPECT_EQ(history_kinds(after),
            (std::vector<std::string>{"attempt", "attempt", "attempt", "resend"}))
      << show(after);
  // Cluster mode: a node that just took the partition answers 503 (Retry-After) while it
  // loads it; resume is idempotent, so retry as a client does.
  ASSERT_TRUE(wait_until([&] { return action(d, t, ep_u, "resume").status == 200; }, scaled(10s)));
  Json u2 = wait_delivery(d, t, ep_u, "r-1", delivery_ended, scaled(10s));
  EXPECT_EQ(u2["delivery"]["status"].str(), "delivered") << show(u2);
  EXPECT_EQ(u2["delivery"]["attempts"].i64(), 4) << show(u2);

  // The receivers saw one webhook id: 3 + 1 requests each, one 200 each, nothing more.
  std::this_thread::sleep_for(scaled(300ms));
  EXPECT_EQ(sink_lines_for(sink, msg), 8u);
  EXPECT_TRUE(missing_ids(sink, {msg}).empty());
}

TEST(E2eReplay, ReplayMissingReachesOnlyNewEndpointsOnce) {
  Daemon d;
  ASSERT_NO_THROW(d.start());
  TempDir dir("e2e-replay-missing");
  SinkProcess sink = SinkProcess::start({"--quiet"}, dir.path());
  const std::string t = "replay-missing";
  const std::string ep1 = endpoint_with_policy(d, t, sink.base_url() + "/one", "fast");
  ASSERT_FALSE(ep1.empty());
  ASSERT_EQ(submit_event(d, t, "m-1", "order.paid", R"({"n":1})").status, 202);
  const std::string msg = message_id_of(d, t, "m-1");
  Json first = wait_delivery(d, t, ep1, "m-1", delivery_ended, scaled(10s));
  ASSERT_EQ(first["delivery"]["status"].str(), "delivered") << show(first);

  const std::string ep2 = endpoint_with_policy(d, t, sink.base_url() + "/two", "fast");
  const std::string ep3 = endpoint_with_policy(d, t, sink.base_url() + "/three", "fast");
  ASSERT_EQ(action(d, t, ep3, "pause").status, 200);  // R9.1: a paused endpoint gets none
  const std::string path = "/v1/tenants/" + t + "/events/m-1/replay";
  Reply r = d.call("POST", path);
  ASSERT_EQ(r.status, 202) << r.describe();
  EXPECT_EQ(r.json()["deliveries"].i64(), 1) << r.body;
  EXPECT_EQ(r.json()["event_id"].str(), "m-1") << r.body;
  Reply again = d.call("POST", path);
  ASSERT_EQ(again.status, 202) << again.describe();
  EXPECT_EQ(again.json()["deliveries"].i64(), 0) << again.body;
  Json second = wait_delivery(d, t, ep2, "m-1", delivery_ended, scaled(10s));
  EXPECT_EQ(second["delivery"]["status"].str(), "delivered") << show(second);
  EXPECT_TRUE(delivery_for_event(d, t, ep3, "m-1").is_null() ||
              !delivery_for_event(d, t, ep3, "m-1").is_object());
  std::this_thread::sleep_for(scaled(300ms));
  EXPECT_EQ(sink_lines_for(sink, msg), 2u);
  Reply unknown = d.call("POST", "/v1/tenants/" + t + "/events/nope/replay");
  EXPECT_EQ(unknown.status, 404) << unknown.describe();
  EXPECT_EQ(unknown.json()["error"]["code"].str(), "unknown_event") << unknown.body;
}

TEST(E2eReplay, RecoverRequeuesTheWindowWithinTheBound) {
  DaemonOptions o;
  o.extra_toml = "\n[limits]\nrecover_max_in_flight = 2\n";
  Daemon d(o);
  ASSERT_NO_THROW(d.start());
  TempDir dir("e2e-recover");
  SinkProcess sink = SinkProcess::start({"--quiet", "--fault", "/bad=status=500"}, dir.path());
  const std::string t = "recovers";
  const std::string ep = endpoint_with_policy(d, t, sink.base_url() + "/bad", "quick");
  ASSERT_FALSE(ep.empty());
  auto all_ended = [&](const std::vector<std::string>& ids) {
    for (const std::string& id : ids) {
      Json j = wait_delivery(d, t, ep, id, delivery_ended, scaled(10s));
      if (!j.is_object() || !delivery_ended(j)) return false;
    }
    return true;
  };
  // Outside the window: before `since`.
  const std::vector<std::string> outside = {"o-1", "o-2"};
  for (const auto& id : outside) ASSERT_EQ(submit_event(d, t, id, "x.y", "{}").status, 202);
  ASSERT_TRUE(all_ended(outside));
  ASSERT_EQ(action(d, t, ep, "enable").status, 200);
  std::this_thread::sleep_for(50ms);
  const std::string since = rfc3339_in();
  std::this_thread::sleep_for(50ms);
  std::vector<std::string> inside;
  for (int i = 0; i < 5; ++i) inside.push_back("w-" + std::to_string(i));
  for (const auto& id : inside) ASSERT_EQ(submit_event(d, t, id, "x.y", "{}").status, 202);
  ASSERT_TRUE(all_ended(inside));
  std::this_thread::sleep_for(50ms);
  const std::string until = rfc3339_in();

  const std::string rec = "/v1/tenants/" + t + "/endpoints/" + ep + "/recover";
  const std::string window = "{\"since\":" + quote(since) + ",\"until\":" + quote(until) + "}";
  Reply disabled = d.call("POST", rec, window);
  EXPECT_EQ(disabled.status, 409) << disabled.describe();
  EXPECT_EQ(disabled.json()["error"]["code"].str(), "endpoint_disabled") << disabled.body;
  Reply bad = d.call("POST", rec, R"({"since":"yesterday"})");
  EXPECT_EQ(bad.status, 400) << bad.describe();
  EXPECT_EQ(bad.json()["error"]["field"].str(), "since") << bad.body;
  Reply missing = d.call("POST", rec, "{}");
  EXPECT_EQ(missing.status, 400) << missing.describe();

  // The receiver is fixed (a new URL); paused, so the bound is visible.
  Reply patched = d.call("PATCH", "/v1/tenants/" + t + "/endpoints/" + ep,
                         "{\"url\":" + quote(sink.base_url() + "/good") + "}");
  ASSERT_EQ(patched.status, 200) << patched.describe();
  ASSERT_EQ(action(d, t, ep, "enable").status, 200);
  ASSERT_EQ(action(d, t, ep, "pause").status, 200);
  Reply started = d.call("POST", rec, window);
  ASSERT_EQ(started.status, 202) << started.describe();
  const std::string job = started.json()["job"]["id"].str();
  ASSERT_FALSE(job.empty()) << started.body;
  const std::string job_path = "/v1/tenants/" + t + "/jobs/" + job;
  Json j;
  std::string body;
  auto poll = [&] {
    Reply g = d.call("GET", job_path);
    body = g.body;
    if (g.status != 200) return false;
    j = g.json()["job"];
    return true;
  };
  EXPECT_TRUE(wait_until([&] { return poll() && j["requeued"].i64() == 2; }, scaled(10s))) << body;
  std::this_thread::sleep_for(scaled(300ms));
  ASSERT_TRUE(poll());
  EXPECT_EQ(j["requeued"].i64(), 2) << "the bound: 2 in flight at most: " << body;
  EXPECT_EQ(j["in_flight"].i64(), 2) << body;
  EXPECT_EQ(j["state"].str(), "running") << body;
  EXPECT_EQ(j["total"].i64(), 5) << body;

  ASSERT_EQ(action(d, t, ep, "resume").status, 200);
  EXPECT_TRUE(wait_until([&] { return poll() && j["state"].str() == "done"; }, scaled(20s)))
      << body;
  EXPECT_EQ(j["total"].i64(), 5) << body;
  EXPECT_EQ(j["requeued"].i64(), 5) << body;
  EXPECT_EQ(j["skipped"].i64(), 0) << body;
  EXPECT_EQ(j["scanned"].i64(), 7) << body;
  EXPECT_FALSE(j["finished_at"].is_null()) << body;
  for (const auto& id : inside) {
    Json x = wait_delivery(
        d, t, ep, id, [](const Json& y) { return y["delivery"]["status"].str() == "delivered"; },
        scaled(10s));
    EXPECT_EQ(x["delivery"]["status"].str(), "delivered") << id << " " << show(x);
  }
  for (const auto& id : outside) {
    EXPECT_EQ(delivery_for_event(d, t, ep, id)["delivery"]["status"].str(), "dead") << id;
  }
  const auto ok_ids = sink_ids_with_status(sink);
  EXPECT_EQ(ok_ids.size(), 5u);
  EXPECT_EQ(d.call("GET", "/v1/tenants/" + t + "/jobs/12345").status, 404);
  // Again: nothing left to re-queue in the window.
  Reply rerun = d.call("POST", rec, window);
  ASSERT_EQ(rerun.status, 202) << rerun.describe();
  const std::string job2 = rerun.json()["job"]["id"].str();
  EXPECT_TRUE(wait_until(
      [&] {
        Reply g = d.call("GET", "/v1/tenants/" + t + "/jobs/" + job2);
        body = g.body;
        if (g.status != 200) return false;
        j = g.json()["job"];
        return j["state"].str() == "done";
      },
      scaled(10s)))
      << body;
  EXPECT_EQ(j["requeued"].i64(), 0) << body;
}

// The CLI of part 3: `deliveries resend`, `endpoints recover` (follows the job with a progress
// line on stderr until it is done, then prints the job), `jobs get`, `events replay`; bad input
// is a message and a non-zero exit.
TEST(E2eReplay, TheCliResendsRecoversAndReplays) {
  Daemon d;
  ASSERT_NO_THROW(d.start());
  TempDir dir("e2e-replay-cli");
  // A 400 is FAILED at once under the xhub-based policy (no auto-disable); then the receiver
  // is fixed (the limit) and everything re-sent is delivered.
  SinkProcess sink =
      SinkProcess::start({"--quiet", "--fault", "/c=status=400;limit=3"}, dir.path());
  const std::string t = "replaycli";
  const std::string ep = endpoint_with_policy(d, t, sink.base_url() + "/c", "hub");
  ASSERT_FALSE(ep.empty());
  const std::string since = rfc3339_in();
  std::this_thread::sleep_for(20ms);
  for (const char* id : {"c-1", "c-2", "c-3"})
    ASSERT_EQ(submit_event(d, t, id, "x.y", "{}").status, 202);
  for (const char* id : {"c-1", "c-2", "c-3"}) {
    Json j = wait_delivery(d, t, ep, id, delivery_ended, scaled(10s));
    ASSERT_EQ(j["delivery"]["status"].str(), "failed") << show(j);
  }

  int runs = 0;
  auto cli = [&](const std::vector<std::string>& args, bool* ok, std::string* err = nullptr) {
    const std::string tag = "cli-" + std::to_string(++runs);
    test::ProcessOptions po;
    po.stdout_path = dir.file(tag + ".out");
    po.stderr_path = dir.file(tag + ".err");
    std::vector<std::string> argv = {ringcast_binary(), "--server",
                                     "127.0.0.1:" + std::to_string(d.port(0)), "--token",
                                     Daemon::kToken};
    argv.insert(argv.end(), args.begin(), args.end());
    test::Process p = test::Process::start(argv, std::move(po));
    auto st = p.wait(30s);
    *ok = st && st->ok();
    if (err != nullptr) *err = test::read_file(dir.file(tag + ".err"));
    return test::read_file(dir.file(tag + ".out"));
  };
  bool ok = false;
  const std::string d1 = wait_delivery(d, t, ep, "c-1", delivery_ended, 1s)["delivery"]["id"].str();
  std::string out = cli({"deliveries", "resend", "-t", t, d1, "--note", "receiver fixed"}, &ok);
  EXPECT_TRUE(ok) << out;
  EXPECT_NE(out.find("queued again"), std::string::npos) << out;
  Json j1 = wait_delivery(
      d, t, ep, "c-1", [](const Json& j) { return j["delivery"]["status"].str() == "delivered"; },
      scaled(10s));
  EXPECT_EQ(j1["delivery"]["status"].str(), "delivered") << show(j1);
  out = cli({"deliveries", "resend", "-t", t, "424242424242"}, &ok);
  EXPECT_FALSE(ok) << "an unknown delivery must fail the command";

  // Recover the window: c-2 and c-3 (c-1 is delivered now), followed to the end.
  std::string err;
  out = cli({"--json", "endpoints", "recover", "-t", t, ep, "--since", since, "--poll", "0.1",
             "--timeout", "20"},
            &ok, &err);
  ASSERT_TRUE(ok) << out << err;
  EXPECT_NE(err.find("requeued"), std::string::npos) << "no progress line: " << err;
  Json job = Json::parse(out)["job"];
  EXPECT_EQ(job["state"].str(), "done") << out;
  EXPECT_EQ(job["requeued"].i64(), 2) << out;
  for (const char* id : {"c-2", "c-3"}) {
    Json j = wait_delivery(
        d, t, ep, id, [](const Json& x) { return x["delivery"]["status"].str() == "delivered"; },
        scaled(10s));
    EXPECT_EQ(j["delivery"]["status"].str(), "delivered") << id << " " << show(j);
  }
  out = cli({"jobs", "get", "-t", t, job["id"].str()}, &ok);
  EXPECT_TRUE(ok) << out;
  EXPECT_NE(out.find("done"), std::string::npos) << out;
  out = cli({"endpoints", "recover", "-t", t, ep, "--since", "last tuesday"}, &ok, &err);
  EXPECT_FALSE(ok) << out;
  EXPECT_NE(err.find("since"), std::string::npos) << err;

  // Replay missing: nothing to do, then one new endpoint gets it.
  out = cli({"events", "replay", "-t", t, "c-1"}, &ok);
  EXPECT_TRUE(ok) << out;
  EXPECT_NE(out.find(": 0 new deliveries"), std::string::npos) << out;
  const std::string ep2 = endpoint_with_policy(d, t, sink.base_url() + "/other", "hub");
  ASSERT_FALSE(ep2.empty());
  out = cli({"events", "replay", "-t", t, "c-1"}, &ok);
  EXPECT_TRUE(ok) << out;
  EXPECT_NE(out.find(": 1 new deliveries"), std::string::npos) << out;
  Json j2 = wait_delivery(
      d, t, ep2, "c-1", [](const Json& x) { return x["delivery"]["status"].str() == "delivered"; },
      scaled(10s));
  EXPECT_EQ(j2["delivery"]["status"].str(), "delivered") << show(j2);
}

}  // namespace
}  // namespace ringcast::e2e
