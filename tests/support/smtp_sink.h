// A local SMTP sink for the e-mail tests (SPEC R8.4): tests/support/smtp_sink.py (Debian's
// python3-aiosmtpd) as a child process on a free 127.0.0.1 port, writing each message it got
// to its temp dir (the data as received, the envelope, whether it came over TLS and
// authenticated, and the answer given). Options: STARTTLS with a certificate of the test CA,
// AUTH required (PLAIN and/or LOGIN, one user), failing the next N messages with 451 or 550.
// Invariant: the sink dies with its SmtpSink (Process: SIGKILL on destruction, and with the
// test process), and every wait is bounded.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tests/support/process.h"
#include "tests/support/require.h"
#include "tests/support/temp_dir.h"

namespace ringcast::test {

struct SmtpSinkOptions {
  std::string tls_cert, tls_key;                // offer STARTTLS with this certificate (PEM files)
  bool require_starttls = false;                // refuse MAIL before STARTTLS
  std::string auth_user, auth_password;         // set: AUTH required (only after STARTTLS unless
  std::string auth_mechanisms = "PLAIN,LOGIN";  // auth_allow_clear)
  bool auth_allow_clear = false;
  int fail_code = 0;  // 451 or 550: the next fail_count messages get it at the end of DATA
  int fail_count = 0;
  uint16_t port = 0;  // 0: a free port; set: that one (a restart on the same port)
};

// One message the sink received (accepted or refused at the end of DATA).
struct SinkMessage {
  std::string mail_from;
  std::vector<std::string> rcpt_to;
  bool tls = false;
  std::string auth;  // the authenticated user, "-" when none
  int result = 0;    // the answer's code: 250, 451, 550
  std::string data;  // the message as received (CRLF, dot-unstuffed)
  // The value of header `name` (case-insensitive, unfolded), "" if absent.
  std::string header(const std::string& name) const;
  std::string body() const;  // after the blank line, quoted-printable decoded
};

// Skips the test when python3-aiosmtpd is missing (tools/install-deps.sh test installs it).
#define RINGCAST_REQUIRE_SMTP_SINK()                         \
  do {                                                       \
    if (!::ringcast::test::SmtpSink::available())            \
      RINGCAST_SKIP_MISSING() << "python3-aiosmtpd missing"; \
  } while (0)

class SmtpSink {
 public:
  static bool available();  // /usr/bin/python3 with the aiosmtpd module
  // Starts the sink and waits for it to listen; throws std::runtime_error with its output.
  static std::unique_ptr<SmtpSink> start(
      const SmtpSinkOptions& options = {},
      std::chrono::milliseconds timeout = std::chrono::seconds(10));
  ~SmtpSink();

  uint16_t port() const { return port_; }
  const std::string& dir() const { return dir_->path(); }
  // Every message received so far, in order.
  std::vector<SinkMessage> messages() const;
  // Waits until at least n messages were received (bounded); returns messages().
  std::vector<SinkMessage> wait_messages(size_t n, std::chrono::milliseconds timeout) const;
  // The next `count` messages get `code` (451, 550; 0 turns failures off), from now on.
  void set_failures(int code, int count);
  void stop();     // SIGKILL and reap
  void restart();  // start again on the same port and dir, the same options (failures kept)
  std::string output() const;

 private:
  SmtpSink() = default;
  void launch(std::chrono::milliseconds timeout);
  SmtpSinkOptions options_;
  std::unique_ptr<TempDir> dir_;
  std::string msg_dir_;
  Process process_;
  uint16_t port_ = 0;
  int runs_ = 0;
};

}  // namespace ringcast::test
