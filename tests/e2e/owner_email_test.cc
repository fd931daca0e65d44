// End to end: the owner's e-mail on auto-disable (SPEC R8.4). The daemon runs with
// [notifications.smtp] pointing at a local SMTP sink (Debian's aiosmtpd, tests/support/smtp_sink)
// that offers STARTTLS with a certificate of a test CA made at run time (starttls = "required", the
// CA in notifications.smtp.ca_file); the tenant's owner_email is set through PUT
// /v1/tenants/{t}/settings; an endpoint answering 410 is disabled at once (R8.1) and one e-mail
// arrives over TLS with the expected headers and content, counted by /metrics. An e-mail the relay
// refused with 451 when the daemon was killed arrives after the restart with the same Message-ID
// (the store's mail outbox: RocksDB, or the partition's T om on Redis), and only once. Both storage
// modes.
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

// SPEC R14 (docs/security.md "Owner e-mail"): an address a merchant sets (its read-write key)
// gets one confirmation e-mail with a signed link, a second address within the interval is
// refused, and no notice goes to it until the link's page is confirmed; then the next
// auto-disable e-mails it. An address the platform sets needs no confirmation.
TEST(E2eOwnerEmail, AnAddressAMerchantSetsGetsNoticesOnlyOnceItsLinkConfirmedIt) {
  RINGCAST_REQUIRE_SMTP_SINK();
  MailRelay relay;
  DaemonOptions o = relay.daemon_options();
  o.env = {"RINGCAST_PORTAL_PUBLIC_URL=https://hooks.example.test",
           "RINGCAST_NOTIFICATIONS_EMAIL_CONFIRM_INTERVAL=10m"};
  Daemon d(o);
  ASSERT_NO_THROW(d.start());
  TempDir dir("e2e-mail-confirm");
  SinkProcess receiver = SinkProcess::start({"--quiet", "--fault", "/gone=status=410"}, dir.path());
  const std::string t = "mail-confirm";
  const std::string base = "/v1/tenants/" + t;
  auto gone_endpoint = [&] {
    Reply r = create_endpoint(
        d, t, "{\"url\":" + quote(receiver.base_url() + "/gone") + ",\"policy\":\"quick\"}");
    EXPECT_EQ(r.status, 201) << r.describe();
    return r.json()["id"].str();
  };
  const std::string first = gone_endpoint();
  ASSERT_FALSE(first.empty());
  Reply key = d.call("POST", base + "/keys", R"({"name":"merchant"})");
  ASSERT_EQ(key.status, 201) << key.describe();
  const std::string merchant = "Bearer " + key.json()["key"].str();

  Reply set = d.call_with_auth("PUT", base + "/settings",
                               std::string("{\"owner_email\":\"") + kOwner + "\"}", merchant);
  ASSERT_EQ(set.status, 200) << set.describe();
  EXPECT_EQ(set.json()["owner_email"].str(), kOwner);
  EXPECT_FALSE(set.json()["owner_email_confirmed"].boolean()) << set.body;
  EXPECT_TRUE(set.json()["confirmation_sent"].boolean()) << set.body;
  EXPECT_TRUE(set.json()["confirmation_sent_at"].is_string()) << set.body;

  auto got = relay.sink->wait_messages(1, scaled(15s));
  ASSERT_EQ(got.size(), 1u) << relay.sink->output() << "\n" << d.output();
  EXPECT_EQ(got[0].rcpt_to, std::vector<std::string>{kOwner});
  EXPECT_EQ(got[0].header("Subject"), "[ringcast] Confirm this address for webhook notices");
  const std::string body = got[0].body();
  const std::string prefix = "https://hooks.example.test/portal/confirm-email?token=";
  const size_t at = body.find(prefix);
  ASSERT_NE(at, std::string::npos) << body;
  const size_t end = body.find_first_of(" \r\n", at);
  const std::string token = body.substr(at + prefix.size(), end - at - prefix.size());
  ASSERT_FALSE(token.empty());
  EXPECT_NE(body.find(t), std::string::npos) << body;

  // Another address at once: refused; nothing more is mailed.
  Reply other =
      d.call_with_auth("PUT", base + "/settings", R"({"owner_email":"x@else.example"})", merchant);
  EXPECT_EQ(other.status, 429) << other.describe();
  EXPECT_EQ(other.json()["error"]["code"].str(), "too_many_confirmations") << other.body;
  EXPECT_EQ(d.call("GET", base + "/settings").json()["owner_email"].str(), kOwner);

  // Disabled while unconfirmed: a notice, but no e-mail.
  ASSERT_EQ(submit_event(d, t, "g-1", "a.b", "{}").status, 202);
  ASSERT_TRUE(wait_until([&] { return notification_for(d, t, first).is_object(); }, scaled(15s)));
  EXPECT_FALSE(wait_until([&] { return relay.sink->messages().size() > 1; }, scaled(1500ms)))
      << relay.sink->messages().back().data;

  // The link's page: a tampered token is refused; the right one shows a form; only its POST
  // confirms.
  std::string bad = token;
  bad[bad.size() / 2] = bad[bad.size() / 2] == 'A' ? 'B' : 'A';
  Reply refused = http_request(d.port(), "GET", "/portal/confirm-email?token=" + bad, "", {});
  EXPECT_EQ(refused.status, 400) << refused.describe();
  Reply page = http_request(d.port(), "GET", "/portal/confirm-email?token=" + token, "", {});
  ASSERT_EQ(page.status, 200) << page.describe();
  EXPECT_NE(page.headers.find("text/html"), std::string::npos) << page.headers;
  EXPECT_NE(page.headers.find("Content-Security-Policy"), std::string::npos) << page.headers;
  EXPECT_NE(page.body.find("value=\"" + token + "\""), std::string::npos) << page.body;
  EXPECT_FALSE(d.call("GET", base + "/settings").json()["owner_email_confirmed"].boolean());
  Reply confirmed = http_request(d.port(), "POST", "/portal/confirm-email", "token=" + token,
                                 {"Content-Type: application/x-www-form-urlencoded"});
  ASSERT_EQ(confirmed.status, 200) << confirmed.describe() << "\n" << d.output();
  EXPECT_NE(confirmed.body.find("Address confirmed"), std::string::npos) << confirmed.body;
  Reply now = d.call_with_auth("GET", base + "/settings", "", merchant);
  EXPECT_TRUE(now.json()["owner_email_confirmed"].boolean()) << now.body;

  // The next auto-disable e-mails the owner.
  const std::string second = gone_endpoint();
  ASSERT_FALSE(second.empty());
  ASSERT_EQ(submit_event(d, t, "g-2", "a.b", "{}").status, 202);
  got = relay.sink->wait_messages(2, scaled(15s));
  ASSERT_EQ(got.size(), 2u) << relay.sink->output();
  EXPECT_EQ(got[1].header("Subject"), "[ringcast] Webhook endpoint disabled: 127.0.0.1");
  EXPECT_NE(got[1].body().find("Endpoint:    " + second), std::string::npos) << got[1].body();

  // The platform's address is confirmed at once and mailed nothing; the old link is void now.
  Reply ops = d.call("PUT", base + "/settings", R"({"owner_email":"ops@shop.example"})");
  ASSERT_EQ(ops.status, 200) << ops.describe();
  EXPECT_TRUE(ops.json()["owner_email_confirmed"].boolean()) << ops.body;
  EXPECT_FALSE(ops.json()["confirmation_sent"].boolean()) << ops.body;
  Reply stale = http_request(d.port(), "POST", "/portal/confirm-email", "token=" + token,
                             {"Content-Type: application/x-www-form-urlencoded"});
  EXPECT_EQ(stale.status, 409) << stale.describe();
  EXPECT_FALSE(wait_until([&] { return relay.sink->messages().size() > 2; }, scaled(1s)));
  auto st = d.terminate();
  EXPECT_TRUE(st.ok()) << st.str() << "\n" << d.output();
}

}  // namespace
}  // namespace ringcast::e2e
