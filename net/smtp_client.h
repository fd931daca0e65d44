// An SMTP client (RFC 5321) for one message at a time, and the RFC 5322 message it sends: the
// owner's e-mail on auto-disable (SPEC R8.4; docs/notifications.md "The owner's e-mail").
// Blocking sockets with deadlines, for a dedicated thread (engine/mailer.h), never a shard loop.
// Invariants: every exchange is bounded (each connect, read and write by `timeout`, replies by
// kSmtpReplyMax); with STARTTLS the relay is verified like an endpoint (chain against the CA
// file, then the host name or IP, TLS 1.2+: net/tls.h); credentials never go out in clear
// unless allow_auth_without_tls; nothing the caller passes can add a header or an SMTP command
// (CR, LF and NUL in addresses, header values and the Message-ID are refused).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/time.h"

namespace ringcast::net {

enum class SmtpStartTls : uint8_t {
  kRequired,       // no STARTTLS offered (or it fails): refused, nothing is sent in clear
  kOpportunistic,  // STARTTLS when offered, else clear text (a failed handshake still fails)
  kOff,            // never
};
const char* smtp_starttls_name(SmtpStartTls s);

struct SmtpOptions {
  std::string host;  // a name or an IP literal; TLS verifies the certificate against it
  uint16_t port = 25;
  std::string helo_name = "localhost";  // the EHLO argument (this host's name)
  SmtpStartTls starttls = SmtpStartTls::kRequired;
  std::string ca_file = "/etc/ssl/certs/ca-certificates.crt";  // system trust store
  std::string extra_ca_file;                                   // more anchors (tests, private CA)
  std::string username;  // AUTH when set: PLAIN if offered, else LOGIN
  std::string password;
  bool allow_auth_without_tls = false;  // credentials over a clear connection (loopback relays)
  Duration timeout = seconds(30);       // connect, TLS handshake, each command's answer
};

// One failure: the stage it happened in, the server's reply code (0: no reply — connection,
// TLS, timeout, or refused before sending), and its text or ours.
struct SmtpError {
  bool transient = true;  // 4xx, a connection or timeout failure: try again later
  int code = 0;           // the SMTP reply code, 0 when none
  std::string stage;      // "connect", "greeting", "ehlo", "starttls", "tls", "auth", "mail",
                          // "rcpt", "data", "message" (refused before connecting)
  std::string text;
  std::string describe() const;  // "rcpt: 550 no such user" / "tls: certificate ..."
};

// Result of one send: ok, or the error (SMTP code and text, transient or permanent).
class [[nodiscard]] SmtpResult {
 public:
  SmtpResult() = default;
  SmtpResult(SmtpError e) : ok_(false), error_(std::move(e)) {}  // NOLINT: implicit
  bool ok() const { return ok_; }
  explicit operator bool() const { return ok_; }
  const SmtpError& error() const { return error_; }

 private:
  bool ok_ = true;
  SmtpError error_;
};

struct SmtpEnvelope {
  std::string from;             // MAIL FROM (an addr-spec, "" is the null sender <>)
  std::vector<std::string> to;  // RCPT TO, at least one
};

struct SmtpSendInfo {
  bool tls = false;   // the message went over TLS (STARTTLS)
  bool auth = false;  // AUTH succeeded
  std::string auth_mechanism;
  int final_code = 0;  // the answer to the end of DATA (250)
  std::string final_text;
};

// Sends `message` (an RFC 5322 message, any line endings: normalised to CRLF and dot-stuffed)
// in one session: greeting, EHLO, STARTTLS + EHLO, AUTH, MAIL, RCPT, DATA, QUIT.
SmtpResult smtp_send(const SmtpOptions& options, const SmtpEnvelope& envelope,
                     std::string_view message, SmtpSendInfo* info = nullptr);

// ---- pieces, exposed for tests ---------------------------------------------------------------

// An address usable in MAIL FROM / RCPT TO and a header: local@domain, printable ASCII, no
// space, no <>, no control characters; at most 254 bytes.
bool smtp_address_ok(std::string_view addr);
// The DATA payload: CRLF line endings (bare CR and LF become CRLF), a '.' doubled at the start
// of each line (RFC 5321 4.5.2), a final CRLF, then the terminating ".\r\n".
std::string smtp_dot_stuff(std::string_view message);
// RFC 2047 "B" encoded words for a non-ASCII header value (UTF-8), folded so that no encoded
// word is longer than 75 bytes; ASCII text is returned as is.
std::string rfc2047_encode(std::string_view utf8);
// Quoted-printable (RFC 2045 6.7) of UTF-8 text with CRLF line breaks: lines of at most 76
// characters (soft breaks), '=' and non-ASCII as =XX, trailing space encoded.
std::string quoted_printable(std::string_view text);
// "Wed, 02 Dec 2026 11:35:33 +0000" (RFC 5322 3.3, UTC).
std::string rfc5322_date(WallTime t);

struct MailMessage {
  std::string from;        // addr-spec
  std::string from_name;   // optional display name (RFC 2047-encoded when non-ASCII)
  std::string to;          // addr-spec
  std::string subject;     // UTF-8
  std::string message_id;  // without <>: "ntf_123.rc@example.com"; the same on every resend
  WallTime date;           // the Date header
  std::string body;        // UTF-8 text, '\n' line breaks
};

// The RFC 5322 message (headers + quoted-printable text/plain; charset=utf-8 body, CRLF).
// Refuses (ok false, `why` set) a value that could inject a header: CR, LF or NUL in any field,
// an address that is not smtp_address_ok, a Message-ID with space or <>.
bool build_mail_message(const MailMessage& m, std::string& out, std::string* why = nullptr);

}  // namespace ringcast::net
