// The SMTP client (net/smtp_client.h, SPEC R8.4) against a real SMTP server: Debian's aiosmtpd
// (tests/support/smtp_sink) on loopback, with STARTTLS certificates from a test CA made at run
// time. Plain and STARTTLS sessions, certificate verification (a wrong CA is refused), a required
// STARTTLS that is not offered, AUTH PLAIN and LOGIN (never in clear unless allowed), dot-stuffing
// and CRLF normalisation, header and command injection refused, 4xx transient and 5xx permanent;
// and the message builder's headers, RFC 2047 subjects and quoted-printable body.
#include "net/smtp_client.h"

#include <gtest/gtest.h>

#include "net/signing.h"
#include "tests/support/process.h"
#include "tests/support/smtp_sink.h"
#include "tests/support/temp_dir.h"
#include "tests/support/test_ca.h"

namespace ringcast::net {
namespace {

using test::SmtpSink;
using test::SmtpSinkOptions;

SmtpOptions plain_options(const SmtpSink& sink) {
  SmtpOptions o;
  o.host = "127.0.0.1";
  o.port = sink.port();
  o.starttls = SmtpStartTls::kOff;
  o.timeout = seconds(5);
  return o;
}

std::string simple_message(const std::string& subject, const std::string& body) {
  MailMessage m;
  m.from = "ringcast@ops.example";
  m.to = "owner@shop.example";
  m.subject = subject;
  m.message_id = "ntf_1.ringcast@ops.example";
  m.date = WallTime::from_ms(1'800'000'000'000);
  m.body = body;
  std::string out, why;
  EXPECT_TRUE(build_mail_message(m, out, &why)) << why;
  return out;
}

const SmtpEnvelope kEnv{"ringcast@ops.example", {"owner@shop.example"}};

// A CA, a localhost certificate it issued, and a sink offering STARTTLS with it.
struct TlsSetup {
  test::TempDir dir{"smtp-tls"};
  test::TestCa ca = test::TestCa::create();
  test::CertFiles files = ca.write_localhost(dir.path());
  SmtpSinkOptions sink_options() const {
    SmtpSinkOptions o;
    o.tls_cert = files.cert;
    o.tls_key = files.key;
    return o;
  }
  SmtpOptions client(const SmtpSink& sink) const {
    SmtpOptions o = plain_options(sink);
    o.starttls = SmtpStartTls::kRequired;
    o.ca_file = "";  // only the test CA
    o.extra_ca_file = files.ca;
    return o;
  }
};

TEST(SmtpClient, PlainSessionDeliversTheMessage) {
  RINGCAST_REQUIRE_SMTP_SINK();
  auto sink = SmtpSink::start();
  SmtpSendInfo info;
  SmtpResult r =
      smtp_send(plain_options(*sink), kEnv, simple_message("hello", "line 1\nline 2\n"), &info);
  ASSERT_TRUE(r.ok()) << r.error().describe() << "\n" << sink->output();
  EXPECT_FALSE(info.tls);
  EXPECT_EQ(info.final_code, 250);
  auto got = sink->wait_messages(1, std::chrono::seconds(5));
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].mail_from, "ringcast@ops.example");
  EXPECT_EQ(got[0].rcpt_to, std::vector<std::string>{"owner@shop.example"});
  EXPECT_FALSE(got[0].tls);
  EXPECT_EQ(got[0].header("Subject"), "hello");
  EXPECT_EQ(got[0].header("Message-ID"), "<ntf_1.ringcast@ops.example>");
  EXPECT_EQ(got[0].header("MIME-Version"), "1.0");
  EXPECT_EQ(got[0].header("Content-Type"), "text/plain; charset=utf-8");
  EXPECT_EQ(got[0].header("Date"), "Fri, 15 Jan 2027 08:00:00 +0000");
  EXPECT_EQ(got[0].body(), "line 1\r\nline 2\r\n\r\n");
}

TEST(SmtpClient, StartTlsVerifiedAgainstTheTestCa) {
  RINGCAST_REQUIRE_SMTP_SINK();
  TlsSetup tls;
  auto sink = SmtpSink::start(tls.sink_options());
  SmtpSendInfo info;
  SmtpResult r = smtp_send(tls.client(*sink), kEnv, simple_message("over tls", "x"), &info);
  ASSERT_TRUE(r.ok()) << r.error().describe() << "\n" << sink->output();
  EXPECT_TRUE(info.tls);
  auto got = sink->wait_messages(1, std::chrono::seconds(5));
  ASSERT_EQ(got.size(), 1u);
  EXPECT_TRUE(got[0].tls);
}

TEST(SmtpClient, StartTlsChecksTheRelaysName) {
  RINGCAST_REQUIRE_SMTP_SINK();
  // A certificate of the trusted CA, but for another name than the one connected to.
  TlsSetup tls;
  test::TempDir other_dir("smtp-other-name");
  test::CertFiles files = tls.ca.write_files(other_dir.path(), tls.ca.issue({"mail.example"}));
  SmtpSinkOptions so;
  so.tls_cert = files.cert;
  so.tls_key = files.key;
  auto sink = SmtpSink::start(so);
  SmtpResult r = smtp_send(tls.client(*sink), kEnv, simple_message("x", "x"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().stage, "tls") << r.error().describe();
  EXPECT_FALSE(r.error().transient);
  EXPECT_TRUE(sink->messages().empty());
}

TEST(SmtpClient, StartTlsWithAnotherCaIsRefusedAndNothingIsSent) {
  RINGCAST_REQUIRE_SMTP_SINK();
  TlsSetup tls;
  auto sink = SmtpSink::start(tls.sink_options());
  test::TempDir other_dir("smtp-other-ca");
  test::TestCa other = test::TestCa::create("another CA");
  const std::string other_ca = other_dir.file("ca.pem");
  test::write_file(other_ca, other.ca_pem);
  SmtpOptions o = tls.client(*sink);
  o.extra_ca_file = other_ca;
  SmtpResult r = smtp_send(o, kEnv, simple_message("x", "x"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().stage, "tls") << r.error().describe();
  EXPECT_FALSE(r.error().transient);
  EXPECT_EQ(r.error().code, 0);
  EXPECT_TRUE(sink->messages().empty());
  // Opportunistic does not fall back to clear text after a failed handshake either.
  o.starttls = SmtpStartTls::kOpportunistic;
  r = smtp_send(o, kEnv, simple_message("x", "x"));
  EXPECT_FALSE(r.ok());
  EXPECT_TRUE(sink->messages().empty());
}

TEST(SmtpClient, RequiredStartTlsNotOfferedIsRefused) {
  RINGCAST_REQUIRE_SMTP_SINK();
  auto sink = SmtpSink::start();  // no certificate: no STARTTLS in the EHLO answer
  SmtpOptions o = plain_options(*sink);
  o.starttls = SmtpStartTls::kRequired;
  SmtpResult r = smtp_send(o, kEnv, simple_message("x", "x"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().stage, "starttls");
  EXPECT_FALSE(r.error().transient);
  EXPECT_TRUE(sink->messages().empty());
  // Opportunistic sends in clear when it is not offered.
  o.starttls = SmtpStartTls::kOpportunistic;
  SmtpSendInfo info;
  r = smtp_send(o, kEnv, simple_message("x", "x"), &info);
  ASSERT_TRUE(r.ok()) << r.error().describe();
  EXPECT_FALSE(info.tls);
  EXPECT_EQ(sink->wait_messages(1, std::chrono::seconds(5)).size(), 1u);
}

TEST(SmtpClient, AuthPlainAndLoginOverTls) {
  RINGCAST_REQUIRE_SMTP_SINK();
  TlsSetup tls;
  for (const char* mech : {"PLAIN", "LOGIN"}) {
    SCOPED_TRACE(mech);
    SmtpSinkOptions so = tls.sink_options();
    so.auth_user = "relay-user";
    so.auth_password = "s3cret pa:ss";
    so.auth_mechanisms = mech;
    auto sink = SmtpSink::start(so);
    SmtpOptions o = tls.client(*sink);
    // Without credentials the relay refuses MAIL (530): permanent.
    SmtpResult r = smtp_send(o, kEnv, simple_message("x", "x"));
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().stage, "mail");
    EXPECT_EQ(r.error().code, 530);
    EXPECT_FALSE(r.error().transient);
    // A wrong password: 535, permanent.
    o.username = "relay-user";
    o.password = "wrong";
    r = smtp_send(o, kEnv, simple_message("x", "x"));
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().stage, "auth");
    EXPECT_EQ(r.error().code, 535);
    EXPECT_FALSE(r.error().transient);
    o.password = "s3cret pa:ss";
    SmtpSendInfo info;
    r = smtp_send(o, kEnv, simple_message("x", "x"), &info);
    ASSERT_TRUE(r.ok()) << r.error().describe() << "\n" << sink->output();
    EXPECT_TRUE(info.auth);
    EXPECT_EQ(info.auth_mechanism, mech);
    auto got = sink->wait_messages(1, std::chrono::seconds(5));
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0].auth, "relay-user");
    EXPECT_TRUE(got[0].tls);
  }
}

TEST(SmtpClient, CredentialsNeverGoOutInClearUnlessAllowed) {
  RINGCAST_REQUIRE_SMTP_SINK();
  SmtpSinkOptions so;
  so.auth_user = "u";
  so.auth_password = "p";
  so.auth_allow_clear = true;  // the server would take them
  auto sink = SmtpSink::start(so);
  SmtpOptions o = plain_options(*sink);
  o.username = "u";
  o.password = "p";
  SmtpResult r = smtp_send(o, kEnv, simple_message("x", "x"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().stage, "auth");
  EXPECT_EQ(r.error().code, 0);  // refused here, before sending anything
  EXPECT_TRUE(sink->messages().empty());
  o.allow_auth_without_tls = true;
  SmtpSendInfo info;
  r = smtp_send(o, kEnv, simple_message("x", "x"), &info);
  ASSERT_TRUE(r.ok()) << r.error().describe() << "\n" << sink->output();
  EXPECT_EQ(info.auth_mechanism, "PLAIN");
  EXPECT_EQ(sink->wait_messages(1, std::chrono::seconds(5)).at(0).auth, "u");
}

TEST(SmtpClient, DotStuffingAndLineEndings) {
  RINGCAST_REQUIRE_SMTP_SINK();
  auto sink = SmtpSink::start();
  // Lines that would end DATA early (".") or lose a dot (".x") without stuffing, bare LF and
  // bare CR line ends, no final line end.
  const std::string msg =
      "Subject: dots\r\nMessage-ID: <d@x.example>\r\n\r\nfirst\n.\n..two\r.three\r\n. four\nlast";
  SmtpResult r = smtp_send(plain_options(*sink), kEnv, msg);
  ASSERT_TRUE(r.ok()) << r.error().describe();
  auto got = sink->wait_messages(1, std::chrono::seconds(5));
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].data,
            "Subject: dots\r\nMessage-ID: <d@x.example>\r\n\r\nfirst\r\n.\r\n..two\r\n.three\r\n. "
            "four\r\nlast\r\n");
  EXPECT_EQ(smtp_dot_stuff(".a\n.\n"), "..a\r\n..\r\n.\r\n");
  EXPECT_EQ(smtp_dot_stuff(""), ".\r\n");
}

TEST(SmtpClient, HeaderAndCommandInjectionAreRefused) {
  MailMessage m;
  m.from = "ringcast@ops.example";
  m.to = "owner@shop.example";
  m.subject = "ok";
  m.message_id = "a@b.example";
  m.body = "x";
  std::string out, why;
  ASSERT_TRUE(build_mail_message(m, out, &why)) << why;
  for (const char* evil : {"x\r\nBcc: victim@else.example", "x\nBcc: v@e.example", "x\rY"}) {
    MailMessage bad = m;
    bad.subject = evil;
    EXPECT_FALSE(build_mail_message(bad, out, &why)) << evil;
    bad = m;
    bad.to = std::string("owner@shop.example") + evil;
    EXPECT_FALSE(build_mail_message(bad, out, &why)) << evil;
    bad = m;
    bad.from_name = evil;
    EXPECT_FALSE(build_mail_message(bad, out, &why)) << evil;
    bad = m;
    bad.message_id = std::string("a@b") + evil;
    EXPECT_FALSE(build_mail_message(bad, out, &why)) << evil;
  }
  for (const char* addr : {"", "nobody", "a b@c.example", "<a@b.example>", "a@b.example>x",
                           "@b.example", "a@", "a@b\r\nRCPT TO:<c@d.example>"}) {
    EXPECT_FALSE(smtp_address_ok(addr)) << addr;
  }
  EXPECT_TRUE(smtp_address_ok("first.last+tag@sub.shop.example"));
  // The envelope is checked before connecting: nothing reaches a server (port 9 is unused).
  SmtpOptions o;
  o.host = "127.0.0.1";
  o.port = 9;
  o.starttls = SmtpStartTls::kOff;
  SmtpResult r = smtp_send(o, {"a@b.example", {"c@d.example>\r\nRCPT TO:<e@f.example"}}, "x");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().stage, "message");
  EXPECT_FALSE(r.error().transient);
}

TEST(SmtpClient, TransientAndPermanentReplies) {
  RINGCAST_REQUIRE_SMTP_SINK();
  SmtpSinkOptions so;
  so.fail_code = 451;
  so.fail_count = 1;
  auto sink = SmtpSink::start(so);
  SmtpResult r = smtp_send(plain_options(*sink), kEnv, simple_message("x", "x"));
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(r.error().transient);
  EXPECT_EQ(r.error().code, 451);
  EXPECT_EQ(r.error().stage, "data");
  EXPECT_NE(r.error().text.find("try again later"), std::string::npos) << r.error().text;
  r = smtp_send(plain_options(*sink), kEnv, simple_message("x", "x"));
  EXPECT_TRUE(r.ok()) << r.error().describe();

  sink->set_failures(550, 1);
  r = smtp_send(plain_options(*sink), kEnv, simple_message("x", "x"));
  ASSERT_FALSE(r.ok());
  EXPECT_FALSE(r.error().transient);
  EXPECT_EQ(r.error().code, 550);
  EXPECT_EQ(r.error().describe(), "data: 550 5.7.1 rejected for good");
  auto got = sink->wait_messages(3, std::chrono::seconds(5));
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].result, 451);
  EXPECT_EQ(got[1].result, 250);
  EXPECT_EQ(got[2].result, 550);

  // No server: a connection failure is transient.
  const uint16_t port = sink->port();
  sink->stop();
  SmtpOptions o = plain_options(*sink);
  o.port = port;
  r = smtp_send(o, kEnv, simple_message("x", "x"));
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(r.error().transient);
  EXPECT_EQ(r.error().stage, "connect");
}

TEST(SmtpMessage, NonAsciiSubjectIsEncodedAndTheBodyIsQuotedPrintable) {
  const std::string subject = "Webhook désactivé — ✓ " + std::string(40, 'x') + " ünïcödé";
  MailMessage m;
  m.from = "ringcast@ops.example";
  m.from_name = "Ringcast Ops";
  m.to = "owner@shop.example";
  m.subject = subject;
  m.message_id = "ntf_7.ringcast@ops.example";
  m.body = "Grüße = 100%\nlong " + std::string(100, 'y') + "\n.dot first\ntrailing space \n";
  std::string out, why;
  ASSERT_TRUE(build_mail_message(m, out, &why)) << why;
  // Every line is short (RFC 5322 2.1.1: 78 recommended) and plain ASCII.
  size_t at = 0;
  while (at < out.size()) {
    size_t eol = out.find("\r\n", at);
    ASSERT_NE(eol, std::string::npos);
    EXPECT_LE(eol - at, 78u) << out.substr(at, eol - at);
    for (size_t i = at; i < eol; ++i) EXPECT_LT(static_cast<unsigned char>(out[i]), 0x80);
    at = eol + 2;
  }
  EXPECT_NE(out.find("From: \"Ringcast Ops\" <ringcast@ops.example>\r\n"), std::string::npos);
  // Decoding the encoded words gives the subject back.
  size_t s = out.find("Subject: ");
  size_t e = out.find("\r\nDate:");
  std::string encoded = out.substr(s + 9, e - s - 9), decoded;
  for (size_t p = 0; (p = encoded.find("=?UTF-8?B?", p)) != std::string::npos;) {
    size_t q = encoded.find("?=", p + 10);
    auto part = base64_decode(encoded.substr(p + 10, q - p - 10));
    ASSERT_TRUE(part.has_value());
    decoded += *part;
    p = q + 2;
  }
  EXPECT_EQ(decoded, subject);
  EXPECT_NE(out.find("Gr=C3=BC=C3=9Fe =3D 100%"), std::string::npos) << out;
  EXPECT_NE(out.find("=2Edot first"), std::string::npos) << out;
  EXPECT_NE(out.find("trailing space=20\r\n"), std::string::npos) << out;
  EXPECT_EQ(rfc2047_encode("plain"), "plain");
}

}  // namespace
}  // namespace ringcast::net
