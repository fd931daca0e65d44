// End to end: retries follow a custom millisecond ladder (SPEC R5.1 shape, R2.2 budget), and
// Retry-After postpones but never hastens and is capped at 1 hour (SPEC R7). Attempt times come
// from GET /v1/tenants/{t}/deliveries/{id}; the sink's ids file counts what went on the wire.
#include <gtest/gtest.h>

#include <ctime>

#include "tests/e2e/daemon.h"

namespace ringcast::e2e {
namespace {

using test::SinkProcess;
using test::TempDir;

// Start times (ms since the epoch) of the delivery's attempts, in order.
std::vector<int64_t> attempt_starts(const Json& detail) {
  std::vector<int64_t> out;
  for (const Json& a : detail["attempts"].items()) out.push_back(rfc3339_ms(a["started_at"].str()));
  return out;
}

bool is_terminal(const Json& detail) {
  const std::string& s = detail["delivery"]["status"].str();
  return s == "delivered" || s == "failed" || s == "dead";
}

TEST(E2eRetry, AttemptsFollowTheMillisecondLadder) {
  Daemon d;
  ASSERT_NO_THROW(d.start());
  TempDir dir("e2e-ladder");
  SinkProcess sink = SinkProcess::start({"--fault", "/fail=status=503", "--quiet"}, dir.path());
  const std::string t = "ladder";
  std::string ep = endpoint_with_policy(d, t, sink.base_url() + "/fail", "fast");  // 100/200/300 ms
  ASSERT_FALSE(ep.empty());
  ASSERT_EQ(submit_event(d, t, "ladder-1", "job.done", "{\"k\":1}").status, 202);

  Json det = wait_delivery(d, t, ep, "ladder-1", is_terminal, scaled(10s));
  ASSERT_TRUE(is_terminal(det)) << det["delivery"]["status"].str() << "\n" << d.output();
  const std::vector<int64_t> pauses_ms = {100, 200, 300};
  std::vector<int64_t> starts = attempt_starts(det);
  ASSERT_EQ(starts.size(), pauses_ms.size() + 1) << "the budget is 4 attempts";
  EXPECT_EQ(det["delivery"]["attempts"].i64(), 4);
  for (size_t i = 0; i < det["attempts"].size(); ++i) {
    const Json& a = det["attempts"][i];
    EXPECT_EQ(a["number"].i64(), static_cast<int64_t>(i + 1));
    EXPECT_EQ(a["code"].str(), "http_503");
    EXPECT_EQ(a["http_status"].i64(), 503);
    EXPECT_GT(starts[i], 0) << a["started_at"].str();
  }
  for (size_t i = 0; i < pauses_ms.size(); ++i) {
    int64_t gap = starts[i + 1] - starts[i];
    // started_at has millisecond resolution: allow 2 ms of rounding below the pause.
    EXPECT_GE(gap, pauses_ms[i] - 2) << "pause " << i + 1;
    EXPECT_LT(gap, pauses_ms[i] + 2500) << "pause " << i + 1 << " is not the custom ladder";
  }
  // Nothing beyond the budget goes on the wire.
  std::this_thread::sleep_for(500ms);
  EXPECT_EQ(sink_lines_for(sink, message_id_of(d, t, "ladder-1")), 4u)
      << test::read_file(sink.ids_file);
  auto st = d.terminate();
  EXPECT_TRUE(st.ok()) << st.str() << "\n" << d.output();
}

std::string http_date(time_t t) {
  char buf[64];
  struct tm tm {};
  gmtime_r(&t, &tm);
  std::strftime(buf, sizeof buf, "%a, %d %b %Y %H:%M:%S GMT", &tm);
  return buf;
}

TEST(E2eRetry, RetryAfterPostponesNeverHastensAndIsCapped) {
  Daemon d;
  ASSERT_NO_THROW(d.start());
  TempDir dir("e2e-ra");
  SinkProcess sink = SinkProcess::start(
      {"--quiet", "--fault", "/ra1=status=503;retry_after=1;limit=1", "--fault",
       "/ra0=status=503;retry_after=0;limit=2", "--fault", "/racap=status=503;retry_after=7200"},
      dir.path());
  // HTTP-date form (R7.1): a date ~4 s ahead, on a sink of its own started just now.
  TempDir dir2("e2e-ra-date");
  const time_t date = ::time(nullptr) + 4;
  SinkProcess date_sink = SinkProcess::start(
      {"--quiet", "--fault", "/radate=status=503;retry_after=" + http_date(date) + ";limit=1"},
      dir2.path());

  const std::string t = "ra";
  std::string ep1 = endpoint_with_policy(d, t, sink.base_url() + "/ra1", "fast");
  std::string ep0 = endpoint_with_policy(d, t, sink.base_url() + "/ra0", "fast");
  std::string epcap = endpoint_with_policy(d, t, sink.base_url() + "/racap", "fast");
  std::string epdate = endpoint_with_policy(d, t, date_sink.base_url() + "/radate", "fast");
  ASSERT_FALSE(ep1.empty() || ep0.empty() || epcap.empty() || epdate.empty());
  // Each event goes to all four endpoints; each endpoint's rule decides its fate.
  ASSERT_EQ(submit_event(d, t, "ra-1", "x.y", "{}").status, 202);

  auto delivered = [](const Json& j) { return j["delivery"]["status"].str() == "delivered"; };

  // Retry-After: 1 s over a 100 ms ladder pause: the receiver postpones (R7.2).
  Json det = wait_delivery(d, t, ep1, "ra-1", delivered, scaled(10s));
  ASSERT_TRUE(delivered(det)) << det["delivery"]["status"].str() << "\n" << d.output();
  auto s1 = attempt_starts(det);
  ASSERT_EQ(s1.size(), 2u);
  EXPECT_GE(s1[1] - s1[0], 998) << "Retry-After: 1 must postpone the 100 ms pause";

  // Retry-After: 0 does not hasten (R7.3): the ladder's 100 and 200 ms still hold.
  det = wait_delivery(d, t, ep0, "ra-1", delivered, scaled(10s));
  ASSERT_TRUE(delivered(det)) << det["delivery"]["status"].str();
  auto s0 = attempt_starts(det);
  ASSERT_EQ(s0.size(), 3u);
  EXPECT_GE(s0[1] - s0[0], 98);
  EXPECT_GE(s0[2] - s0[1], 198);

  // Retry-After: 7200 is capped at 1 h (R7.2): the next attempt is ~1 h after the first.
  det = wait_delivery(
      d, t, epcap, "ra-1",
      [](const Json& j) {
        return j["attempts"].size() >= 1 && j["delivery"]["status"].str() == "pending";
      },
      scaled(10s));
  ASSERT_EQ(det["attempts"].size(), 1u) << det["delivery"]["status"].str();
  int64_t first = rfc3339_ms(det["attempts"][0]["started_at"].str());
  int64_t next = rfc3339_ms(det["delivery"]["next_attempt_at"].str());
  ASSERT_GT(next, 0) << det["delivery"]["next_attempt_at"].str();
  EXPECT_GE(next - first, 3600'000 - 5'000) << "postponed less than the 1 h cap";
  EXPECT_LE(next - first, 3600'000 + 5'000) << "Retry-After 7200 s was not capped at 1 h";
  EXPECT_EQ(det["delivery"]["last_code"].str(), "http_503");

  // HTTP-date form: the retry waits for the date.
  det = wait_delivery(d, t, epdate, "ra-1", delivered, scaled(12s));
  ASSERT_TRUE(delivered(det)) << det["delivery"]["status"].str();
  auto sd = attempt_starts(det);
  ASSERT_EQ(sd.size(), 2u);
  EXPECT_GE(sd[1], static_cast<int64_t>(date) * 1000 - 2) << "retried before the Retry-After date";

  EXPECT_EQ(sink_lines_for(sink, message_id_of(d, t, "ra-1")), 2u + 3u + 1u)
      << test::read_file(sink.ids_file);
  auto st = d.terminate();
  EXPECT_TRUE(st.ok()) << st.str() << "\n" << d.output();
}

// SPEC R12.1, R12.9: the receiver records the id and drops the connection (RST after reading
// the request). The attempt is UNKNOWN, not FAILED, and the retry carries the same id; the
// smengo profile shows the attempt number going up (R5.4).
TEST(E2eRetry, ReceiverActedResponseLostRetriesWithTheSameId) {
  Daemon d;
  ASSERT_NO_THROW(d.start());
  TempDir dir("e2e-lost");
  SinkProcess sink = SinkProcess::start({"--quiet", "--fault", "/lost=reset;limit=1"}, dir.path());
  const std::string t = "lost";
  Reply cr = create_endpoint(d, t,
                             "{\"url\":" + quote(sink.base_url() + "/lost") +
                                 ",\"policy\":\"fast\",\"signature\":\"smengo\"}");
  ASSERT_EQ(cr.status, 201) << cr.describe();
  const std::string ep = cr.json()["id"].str();
  ASSERT_EQ(submit_event(d, t, "lost-1", "payment.status_changed", "{\"status\":\"paid\"}").status,
            202);
  Json det = wait_delivery(
      d, t, ep, "lost-1",
      [](const Json& j) { return j["delivery"]["status"].str() == "delivered"; }, scaled(10s));
  ASSERT_EQ(det["delivery"]["status"].str(), "delivered") << d.output();
  ASSERT_EQ(det["attempts"].size(), 2u);
  EXPECT_EQ(det["attempts"][0]["outcome"].str(), "unknown");
  EXPECT_TRUE(det["attempts"][0]["request_written"].boolean());
  EXPECT_TRUE(det["attempts"][0]["http_status"].is_null());
  EXPECT_EQ(det["attempts"][1]["outcome"].str(), "success");

  auto lines = sink.ids();
  ASSERT_EQ(lines.size(), 2u) << test::read_file(sink.ids_file);
  EXPECT_EQ(lines[0].id, message_id_of(d, t, "lost-1"));
  EXPECT_EQ(lines[0].status, "reset");
  EXPECT_EQ(lines[0].attempt, 1u);
  EXPECT_EQ(lines[1].id, lines[0].id) << "the retry must carry the same id";
  EXPECT_EQ(lines[1].status, "200");
  EXPECT_EQ(lines[1].attempt, 2u);
  auto st = d.terminate();
  EXPECT_TRUE(st.ok()) << st.str() << "\n" << d.output();
}

}  // namespace
}  // namespace ringcast::e2e
