// End to end: the owner's e-mail on auto-disable (SPEC R8.4, ISSUE 18 part 3). The daemon runs
// with [notifications.smtp] pointing at a local SMTP sink (Debian's aiosmtpd,
// tests/support/smtp_sink) that offers STARTTLS with a certificate of a test CA made at run time
// (starttls = "required", the CA in notifications.smtp.ca_file); the tenant's owner_email is set
// through PUT /v1/tenants/{t}/settings; an endpoint answering 410 is disabled at once (R8.1) and
// one e-mail arrives over TLS with the expected headers and content, counted by /metrics. An
// e-mail the relay refused with 451 when the daemon was killed arrives after the restart with the
// same Message-ID (the store's mail outbox: RocksDB, or the partition's T om on Redis), and only
// once. Both storage modes.
#include <gtest/gtest.h>

#include "tests/e2e/daemon.h"
#include "tests/support/smtp_sink.h"
#include "tests/support/test_ca.h"

namespace ringcast::e2e {
namespace {

using test::SinkMessage;
using test::SinkProcess;
using test::SmtpSink;
using test::SmtpSinkOptions;
using test::TempDir;

constexpr const char* kOwner = "owner@shop.example";

// A test CA, a certificate for 127.0.0.1 it issued, and a sink that requires STARTTLS with it.
struct MailRelay {
  TempDir dir{"e2e-mail-ca"};
  test::TestCa ca = test::TestCa::create();
  test::CertFiles files = ca.write_localhost(dir.path());
  std::unique_ptr<SmtpSink> sink;

  explicit MailRelay(int fail_code = 0, int fail_count = 0) {
    SmtpSinkOptions o;
    o.tls_cert = files.cert;
    o.tls_key = files.key;
    o.require_starttls = true;
    o.fail_code = fail_code;
    o.fail_count = fail_count;
    sink = SmtpSink::start(o);
  }

  DaemonOptions daemon_options() const {
    DaemonOptions o;
    o.extra_toml =
        "[notifications.smtp]\nhost = \"127.0.0.1\"\nport = " + std::to_string(sink->port()) +
        "\nfrom = \"ringcast@ops.example\"\nstarttls = \"required\"\nca_file = " + quote(files.ca) +
        "\ntimeout = \"3s\"\n"
        "\n[notifications.email]\n"
        "portal_url = \"https://platform.example/m/{tenant}/webhooks/{endpoint}\"\n"
        "retry_ladder = [\"300ms\", \"300ms\", \"300ms\", \"300ms\", \"300ms\", "
        "\"300ms\", \"300ms\", \"300ms\", \"300ms\", \"300ms\", \"300ms\", \"300ms\", "
        "\"300ms\", \"300ms\", \"300ms\", \"300ms\", \"300ms\", \"300ms\", \"300ms\", "
        "\"300ms\"]\n";
    return o;
  }
};

// The notification for `endpoint` listed by GET /v1/tenants/{tenant}/notifications ({} if none).
Json notification_for(const Daemon& d, const std::string& tenant, const std::string& endpoint) {
  Json notes = d.call("GET", "/v1/tenants/" + tenant + "/notifications").json()["notifications"];
  for (const Json& n : notes.items()) {
    if (n["endpoint"].str() == endpoint) return n;
  }
  return Json();
}

int64_t email_metric(const Daemon& d, const std::string& result) {
  return static_cast<int64_t>(
      metric(scrape_metrics(d), "ringcast_owner_emails_total{result=\"" + result + "\"}"));
}

// An endpoint on a ringcast-sink path answering 410, the tenant's owner e-mail set, one event:
// the endpoint is disabled at once (R8.1). Returns the endpoint id.
std::string disable_by_gone(const Daemon& d, const SinkProcess& receiver, const std::string& t) {
  Reply r = create_endpoint(
      d, t, "{\"url\":" + quote(receiver.base_url() + "/gone") + ",\"policy\":\"quick\"}");
  EXPECT_EQ(r.status, 201) << r.describe();
  const std::string ep = r.json()["id"].str();
  Reply s = d.call("PUT", "/v1/tenants/" + t + "/settings",
                   std::string("{\"owner_email\":\"") + kOwner + "\"}");
  EXPECT_EQ(s.status, 200) << s.describe();
  EXPECT_EQ(submit_event(d, t, "g-1", "a.b", "{\"v\":1}").status, 202);
  return ep;
}

TEST(E2eOwnerEmail, AnAutoDisabledEndpointEmailsTheOwnerOverStartTls) {
  RINGCAST_REQUIRE_SMTP_SINK();
  MailRelay relay;
  Daemon d(relay.daemon_options());
  ASSERT_NO_THROW(d.start());
  TempDir dir("e2e-mail");
  SinkProcess receiver = SinkProcess::start({"--quiet", "--fault", "/gone=status=410"}, dir.path());
  const std::string t = "mail-shop";
  const std::string ep = disable_by_gone(d, receiver, t);
  ASSERT_FALSE(ep.empty());

  auto got = relay.sink->wait_messages(1, scaled(15s));
  ASSERT_EQ(got.size(), 1u) << relay.sink->output() << "\n" << d.output();
  const SinkMessage& m = got[0];
  Json note = notification_for(d, t, ep);
  ASSERT_TRUE(note.is_object());
  EXPECT_EQ(note["reason"].str(), "gone");
  EXPECT_EQ(m.result, 250);
  EXPECT_TRUE(m.tls);  // STARTTLS, verified against the test CA
  EXPECT_EQ(m.mail_from, "ringcast@ops.example");
  EXPECT_EQ(m.rcpt_to, std::vector<std::string>{kOwner});
  EXPECT_EQ(m.header("To"), std::string("<") + kOwner + ">");
  EXPECT_EQ(m.header("From"), "\"ringcast\" <ringcast@ops.example>");
  EXPECT_EQ(m.header("Subject"), "[ringcast] Webhook endpoint disabled: 127.0.0.1");
  EXPECT_EQ(m.header("Message-ID"), "<ntf_" + note["seq"].str() + ".ringcast@ops.example>");
  EXPECT_EQ(m.header("Content-Type"), "text/plain; charset=utf-8");
  EXPECT_FALSE(m.header("Date").empty());
  const std::string body = m.body();
  for (const std::string& want :
       {"Endpoint:    " + ep, "URL:         " + receiver.base_url() + "/gone",
        std::string("Reason:      gone"), std::string("Last error:  HTTP 410 (gone)"),
        std::string("3. Enable the endpoint again"),
        "Manage this endpoint: https://platform.example/m/" + t + "/webhooks/" + ep}) {
    EXPECT_NE(body.find(want), std::string::npos) << want << "\n---\n" << body;
  }
  EXPECT_TRUE(wait_until([&] { return email_metric(d, "sent") == 1; }, scaled(5s)))
      << d.call("GET", "/metrics").body;
  EXPECT_EQ(email_metric(d, "failed"), 0);
  // One e-mail, not one per node or per retry.
  EXPECT_FALSE(wait_until([&] { return relay.sink->messages().size() > 1; }, scaled(1s)));
  auto st = d.terminate();
  EXPECT_TRUE(st.ok()) << st.str() << "\n" << d.output();
}

TEST(E2eOwnerEmail, AnEmailTheRelayDeferredBeforeACrashIsSentAfterTheRestart) {
  RINGCAST_REQUIRE_SMTP_SINK();
  MailRelay relay(451, 1'000'000);  // "try again later" until told otherwise
  Daemon d(relay.daemon_options());
  ASSERT_NO_THROW(d.start());
  TempDir dir("e2e-mail-crash");
  SinkProcess receiver = SinkProcess::start({"--quiet", "--fault", "/gone=status=410"}, dir.path());
  const std::string t = "mail-crash";
  const std::string ep = disable_by_gone(d, receiver, t);
  ASSERT_FALSE(ep.empty());
  auto got = relay.sink->wait_messages(1, scaled(15s));
  ASSERT_FALSE(got.empty()) << relay.sink->output() << "\n" << d.output();
  ASSERT_EQ(got[0].result, 451);
  const std::string id = got[0].header("Message-ID");
  ASSERT_FALSE(id.empty());
  d.kill9();

  // The relay takes mail again; the restarted daemon finds the e-mail in its outbox.
  relay.sink->set_failures(0, 0);
  const size_t before = relay.sink->messages().size();
  ASSERT_NO_THROW(d.start());
  ASSERT_TRUE(wait_until(
      [&] {
        for (const SinkMessage& m : relay.sink->messages())
          if (m.result == 250) return true;
        return false;
      },
      scaled(15s)))
      << relay.sink->output() << "\n"
      << d.output();
  std::vector<SinkMessage> all = relay.sink->messages();
  ASSERT_GT(all.size(), before);
  size_t accepted = 0;
  for (const SinkMessage& m : all) {
    EXPECT_EQ(m.header("Message-ID"), id);  // the same e-mail every time
    if (m.result == 250) ++accepted;
  }
  EXPECT_EQ(accepted, 1u);
  EXPECT_TRUE(wait_until([&] { return email_metric(d, "sent") == 1; }, scaled(5s)));

  // Sent: it left the outbox, so another restart sends nothing more.
  auto st = d.terminate();
  EXPECT_TRUE(st.ok()) << st.str() << "\n" << d.output();
  const size_t after = relay.sink->messages().size();
  ASSERT_NO_THROW(d.start());
  EXPECT_FALSE(wait_until([&] { return relay.sink->messages().size() > after; }, scaled(1500ms)));
  st = d.terminate();
  EXPECT_TRUE(st.ok()) << st.str() << "\n" << d.output();
}

}  // namespace
}  // namespace ringcast::e2e
