// The owner's e-mail sender (engine/mailer.h, SPEC R8.4) against a real SMTP server (Debian's
// aiosmtpd, tests/support/smtp_sink) on loopback: a 451 is retried on the ladder and the e-mail
// arrives once more with the same Message-ID; a 550 is given up; the queue is bounded (the oldest
// waiting one is dropped); a stop drops what is left without finishing it (the store's outbox keeps
// it); notifications without an owner_email are not taken; and the e-mail's content (subject,
// reason, last error, recovery steps, portal link).
#include "engine/mailer.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>
#include <thread>

#include "tests/support/smtp_sink.h"
#include "tests/support/temp_dir.h"
#include "tests/support/test_ca.h"

namespace ringcast::engine {
namespace {

using test::SmtpSink;
using test::SmtpSinkOptions;

Notification disabled(uint64_t seq, const std::string& to = "owner@shop.example") {
  Notification n;
  n.seq = seq;
  n.tenant = "acme";
  n.endpoint = 281474976710657ull;
  n.kind = "endpoint_disabled";
  n.reason = ErrorCode::of(ErrorCode::Kind::kGone);
  n.at = WallTime::from_ms(1'800'000'000'000);
  n.message = "endpoint https://hooks.shop.example/in answered 410 Gone";
  n.owner_email = to;
  n.endpoint_url = "https://hooks.shop.example:8443/in?x=1";
  n.trigger = 281474976710660ull;
  n.attempts = 1;
  n.last_http_status = 410;
  return n;
}

MailerOptions options_for(const SmtpSink& sink) {
  MailerOptions o;
  o.smtp.host = "127.0.0.1";
  o.smtp.port = sink.port();
  o.smtp.starttls = net::SmtpStartTls::kOff;
  o.smtp.timeout = seconds(5);
  o.from = "ringcast@ops.example";
  o.retry_ladder = {milliseconds(100), milliseconds(100)};
  return o;
}

bool wait_for(const std::function<bool()>& pred, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!pred()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

struct Finished {
  std::mutex mu;
  std::vector<uint64_t> seqs;
  std::function<void(const Notification&)> hook() {
    return [this](const Notification& n) {
      std::lock_guard lk(mu);
      seqs.push_back(n.seq);
    };
  }
  std::vector<uint64_t> get() {
    std::lock_guard lk(mu);
    return seqs;
  }
};

TEST(Mailer, A451IsRetriedAndTheEmailIsSentOnceWithTheSameMessageId) {
  RINGCAST_REQUIRE_SMTP_SINK();
  SmtpSinkOptions so;
  so.fail_code = 451;
  so.fail_count = 1;
  auto sink = SmtpSink::start(so);
  Finished finished;
  MailerOptions o = options_for(*sink);
  o.on_finished = finished.hook();
  auto m = Mailer::start(o);
  ASSERT_TRUE(m.ok()) << m.error().message;
  EXPECT_TRUE((*m)->enqueue(disabled(42)));
  ASSERT_TRUE(wait_for([&] { return (*m)->stats().sent == 1; }, std::chrono::seconds(10)))
      << (*m)->stats().last_error << "\n"
      << sink->output();
  auto got = sink->messages();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].result, 451);
  EXPECT_EQ(got[1].result, 250);
  EXPECT_EQ(got[0].header("Message-ID"), "<ntf_42.ringcast@ops.example>");
  EXPECT_EQ(got[1].header("Message-ID"), got[0].header("Message-ID"));
  EXPECT_EQ(got[1].rcpt_to, std::vector<std::string>{"owner@shop.example"});
  (*m)->stop();
  MailerStats st = (*m)->stats();
  EXPECT_EQ(st.sent, 1u);
  EXPECT_EQ(st.failed, 0u);
  EXPECT_EQ(st.dropped, 0u);
  EXPECT_EQ(st.attempts, 2u);
  EXPECT_NE(st.last_error.find("451"), std::string::npos) << st.last_error;
  EXPECT_EQ(finished.get(), std::vector<uint64_t>{42});
  EXPECT_EQ((*m)->metrics().queued.load(), 0);
  const std::string text = render_mailer_metrics((*m)->metrics());
  EXPECT_NE(text.find("ringcast_owner_emails_total{result=\"sent\"} 1\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("ringcast_owner_emails_queued 0\n"), std::string::npos) << text;
}

TEST(Mailer, A550IsGivenUpAtOnce) {
  RINGCAST_REQUIRE_SMTP_SINK();
  SmtpSinkOptions so;
  so.fail_code = 550;
  so.fail_count = 10;
  auto sink = SmtpSink::start(so);
  Finished finished;
  MailerOptions o = options_for(*sink);
  o.on_finished = finished.hook();
  auto m = Mailer::start(o);
  ASSERT_TRUE(m.ok());
  (*m)->enqueue(disabled(7));
  ASSERT_TRUE(wait_for([&] { return (*m)->stats().failed == 1; }, std::chrono::seconds(10)))
      << sink->output();
  // Given up: no retry comes after it.
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  EXPECT_EQ(sink->messages().size(), 1u);
  (*m)->stop();
  EXPECT_EQ((*m)->stats().attempts, 1u);
  EXPECT_EQ((*m)->stats().sent, 0u);
  EXPECT_EQ(finished.get(), std::vector<uint64_t>{7});  // done with: its outbox entry goes
}

TEST(Mailer, TransientFailuresUseUpTheLadderThenGiveUp) {
  RINGCAST_REQUIRE_SMTP_SINK();
  auto sink = SmtpSink::start();
  const uint16_t port = sink->port();
  sink->stop();  // connection refused: transient
  MailerOptions o = options_for(*sink);
  o.smtp.port = port;
  auto m = Mailer::start(o);
  ASSERT_TRUE(m.ok());
  (*m)->enqueue(disabled(9));
  ASSERT_TRUE(wait_for([&] { return (*m)->stats().failed == 1; }, std::chrono::seconds(10)));
  EXPECT_EQ((*m)->stats().attempts, 3u);  // the first and one per ladder step
  EXPECT_NE((*m)->stats().last_error.find("connect"), std::string::npos);
}

TEST(Mailer, TheQueueIsBoundedAndAStopDropsWhatIsLeft) {
  // A relay that holds the first session until released: everything else waits in the queue.
  std::mutex mu;
  std::condition_variable cv;
  bool release = false;
  int sessions = 0;
  MailerOptions o;
  o.from = "ringcast@ops.example";
  o.queue_max = 3;
  o.stop_drain = milliseconds(0);
  Finished finished;
  o.on_finished = finished.hook();
  o.send = [&](const net::SmtpOptions&, const net::SmtpEnvelope&, std::string_view) {
    std::unique_lock lk(mu);
    ++sessions;
    cv.notify_all();
    cv.wait(lk, [&] { return release; });
    return net::SmtpResult();
  };
  auto m = Mailer::start(o);
  ASSERT_TRUE(m.ok());
  (*m)->enqueue(disabled(1));
  {
    std::unique_lock lk(mu);
    ASSERT_TRUE(cv.wait_for(lk, std::chrono::seconds(5), [&] { return sessions == 1; }));
  }
  for (uint64_t seq = 2; seq <= 6; ++seq) (*m)->enqueue(disabled(seq));
  // 1 being sent + at most 2 waiting (5 and 6): 2, 3 and 4 were dropped, the oldest first.
  EXPECT_EQ((*m)->stats().queued, 3u);
  EXPECT_EQ((*m)->stats().dropped, 3u);
  EXPECT_EQ((*m)->metrics().queued.load(), 3);
  std::thread stopper([&] { (*m)->stop(); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  {
    std::lock_guard lk(mu);
    release = true;
  }
  cv.notify_all();
  stopper.join();
  MailerStats st = (*m)->stats();
  // The session under way finished; the waiting ones are dropped at stop, not finished (the
  // store's outbox sends them after a restart).
  EXPECT_EQ(st.sent, 1u);
  EXPECT_EQ(st.dropped, 5u);
  EXPECT_EQ(st.sent + st.failed + st.dropped, 6u);
  EXPECT_EQ(finished.get(), std::vector<uint64_t>{1});
  EXPECT_FALSE((*m)->enqueue(disabled(8, "")));  // no owner e-mail: not taken
  (*m)->enqueue(disabled(9));                    // after stop: dropped
  EXPECT_EQ((*m)->stats().dropped, 6u);
}

TEST(Mailer, OnlyDisabledNotificationsWithAnOwnerAreTaken) {
  MailerOptions o;
  o.from = "ringcast@ops.example";
  int calls = 0;
  o.send = [&](const net::SmtpOptions&, const net::SmtpEnvelope&, std::string_view) {
    ++calls;
    return net::SmtpResult();
  };
  auto m = Mailer::start(o);
  ASSERT_TRUE(m.ok());
  EXPECT_FALSE((*m)->enqueue(disabled(1, "")));
  Notification other = disabled(2);
  other.kind = "something_else";
  EXPECT_FALSE((*m)->enqueue(other));
  // An address that cannot be used is given up (permanent), not sent.
  EXPECT_TRUE((*m)->enqueue(disabled(3, "owner@shop.example\r\nBcc: x@y.example")));
  ASSERT_TRUE(wait_for([&] { return (*m)->stats().failed == 1; }, std::chrono::seconds(5)));
  (*m)->stop();
  EXPECT_EQ(calls, 0);
  EXPECT_FALSE(Mailer::start(MailerOptions{}).ok());  // no sender address
  // STARTTLS with a CA file that holds no certificate: refused at start, naming the key.
  test::TempDir dir("mailer-bad-ca");
  const std::string bad = dir.file("ca.pem");
  test::write_file(bad, "not a certificate\n");
  MailerOptions tls;
  tls.from = "ringcast@ops.example";
  tls.smtp.ca_file = "";
  tls.smtp.extra_ca_file = bad;
  auto refused = Mailer::start(tls);
  ASSERT_FALSE(refused.ok());
  EXPECT_STREQ(refused.error().field, "ca_file");
}

TEST(Mailer, TheEmailSaysWhatHappenedAndHowToRecover) {
  MailerOptions o;
  o.from = "alerts@ops.example";
  o.portal_url = "https://platform.example/merchants/{tenant}/webhooks/{endpoint}";
  Notification n = disabled(5);
  n.tenant = "acme shop";
  std::string msg, why;
  ASSERT_TRUE(owner_email_message(o, n, msg, &why)) << why;
  EXPECT_NE(msg.find("Subject: [ringcast] Webhook endpoint disabled: hooks.shop.example\r\n"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("To: <owner@shop.example>\r\n"), std::string::npos);
  EXPECT_NE(msg.find("Message-ID: <ntf_5.ringcast@ops.example>\r\n"), std::string::npos);
  EXPECT_NE(msg.find("Date: Fri, 15 Jan 2027 08:00:00 +0000\r\n"), std::string::npos);
  test::SinkMessage parsed;
  parsed.data = msg;
  const std::string body = parsed.body();
  for (const char* want :
       {"Endpoint:    281474976710657", "URL:         https://hooks.shop.example:8443/in?x=1",
        "Reason:      gone", "410 Gone", "Last error:  HTTP 410 (gone)",
        "Delivery:    281474976710660, 1 attempt", "Disabled at: 2027-01-15T08:00:00.000Z",
        "1. Fix the receiver", "2. Send a test event", "3. Enable the endpoint again",
        "Manage this endpoint: https://platform.example/merchants/acme%20shop/webhooks/"
        "281474976710657"}) {
    EXPECT_NE(body.find(want), std::string::npos) << want << "\n" << body;
  }
  // Exhaustion by 503s: the sentence and the last status say so.
  n.reason = ErrorCode::http(503);
  n.attempts = 8;
  n.last_http_status = 503;
  EXPECT_EQ(disable_reason_sentence(n),
            "The receiver answered HTTP 503 on every attempt until the retry schedule was used "
            "up (8 attempts).");
  n.reason = ErrorCode::of(ErrorCode::Kind::kTimeout);
  n.last_http_status = 0;
  ASSERT_TRUE(owner_email_message(o, n, msg, &why));
  parsed.data = msg;
  EXPECT_NE(parsed.body().find("Last error:  timeout (no HTTP answer)"), std::string::npos)
      << parsed.body();
  // No portal URL configured: no link.
  o.portal_url.clear();
  ASSERT_TRUE(owner_email_message(o, n, msg, &why));
  EXPECT_EQ(msg.find("Manage this endpoint"), std::string::npos);
}

}  // namespace
}  // namespace ringcast::engine
