#include "net/smtp_client.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <memory>
#include <optional>

#include "net/signing.h"
#include "net/tls.h"

namespace ringcast::net {
namespace {

// Bounds (STYLE 6): a reply line (RFC 5321 4.5.3.1.5 says 512; servers send longer EHLO
// lines), a whole multi-line reply.
constexpr size_t kSmtpLineMax = 4096;
constexpr size_t kSmtpReplyMax = 64 * 1024;
constexpr size_t kSmtpAddressMax = 254;

using Clock = std::chrono::steady_clock;

SmtpError fail(bool transient, int code, std::string stage, std::string text) {
  SmtpError e;
  e.transient = transient;
  e.code = code;
  e.stage = std::move(stage);
  e.text = std::move(text);
  return e;
}

struct Reply {
  int code = 0;
  std::string text;                // the lines' texts joined by '\n'
  std::vector<std::string> lines;  // each line's text (after the code and separator)
};

// One SMTP connection: a blocking socket with deadlines, optionally inside TLS (memory BIOs).
class Conn {
 public:
  ~Conn() {
    if (fd_ >= 0) ::close(fd_);
  }

  std::optional<SmtpError> connect(const SmtpOptions& o) {
    timeout_ = o.timeout;
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_ADDRCONFIG;
    addrinfo* res = nullptr;
    const std::string port = std::to_string(o.port);
    int rc = ::getaddrinfo(o.host.c_str(), port.c_str(), &hints, &res);
    if (rc != 0 || res == nullptr)
      return fail(true, 0, "connect", "cannot resolve " + o.host + ": " + ::gai_strerror(rc));
    std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> guard(res, &::freeaddrinfo);
    std::string last = "no address";
    for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
      int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
      if (fd < 0) {
        last = std::strerror(errno);
        continue;
      }
      if (::connect(fd, a->ai_addr, a->ai_addrlen) != 0 && errno != EINPROGRESS) {
        last = std::strerror(errno);
        ::close(fd);
        continue;
      }
      pollfd p{fd, POLLOUT, 0};
      int n = ::poll(&p, 1, static_cast<int>(ms(timeout_)));
      int err = 0;
      socklen_t len = sizeof(err);
      if (n <= 0) {
        last = n == 0 ? "connect timed out" : std::strerror(errno);
        ::close(fd);
        continue;
      }
      ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
      if (err != 0) {
        last = std::strerror(err);
        ::close(fd);
        continue;
      }
      int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      fd_ = fd;
      return std::nullopt;
    }
    return fail(true, 0, "connect", o.host + ":" + port + ": " + last);
  }

  std::optional<SmtpError> start_tls(const SmtpOptions& o) {
    TlsClientOptions to;
    to.ca_file = o.ca_file;
    to.extra_ca_file = o.extra_ca_file;
    to.session_resumption = false;
    auto ctx = TlsClientContext::create(to);
    if (!ctx.ok()) return fail(false, 0, "tls", std::string("TLS setup: ") + ctx.error().message);
    ctx_ = std::move(*ctx);
    tls_ = std::make_unique<TlsStream>();
    in6_addr a6;
    in_addr a4;
    const bool is_ip = ::inet_pton(AF_INET, o.host.c_str(), &a4) == 1 ||
                       ::inet_pton(AF_INET6, o.host.c_str(), &a6) == 1;
    if (auto r = tls_->init(*ctx_, o.host, is_ip, o.host); !r.ok())
      return fail(false, 0, "tls", std::string("TLS setup: ") + r.error().message);
    // Whatever the server sent after its 220 before the handshake is not to be trusted.
    rbuf_.clear();
    const auto deadline = Clock::now() + timeout_;
    for (;;) {
      TlsStream::Status st = tls_->handshake();
      if (auto e = flush_tls(deadline)) return e;
      if (st == TlsStream::Status::kOk) break;
      if (st == TlsStream::Status::kCertError)
        return fail(false, 0, "tls",
                    "the relay's certificate did not verify (X509 error " +
                        std::to_string(tls_->verify_result()) + ")");
      if (st != TlsStream::Status::kWantRead) return fail(true, 0, "tls", "TLS handshake failed");
      char buf[16384];
      ssize_t n = raw_read(buf, sizeof(buf), deadline);
      if (n < 0) return fail(true, 0, "tls", "TLS handshake: " + io_error_);
      if (n == 0) {
        tls_->feed_eof();
      } else {
        tls_->feed(buf, static_cast<size_t>(n));
      }
    }
    return std::nullopt;
  }

  bool tls() const { return tls_ != nullptr; }

  std::optional<SmtpError> write(std::string_view data, const char* stage) {
    const auto deadline = Clock::now() + timeout_;
    if (tls_) {
      if (tls_->write(data.data(), data.size()) != TlsStream::Status::kOk)
        return fail(true, 0, stage, "TLS write failed");
      return flush_tls(deadline, stage);
    }
    if (!raw_write(data, deadline)) return fail(true, 0, stage, io_error_);
    return std::nullopt;
  }

  // One reply (RFC 5321 4.2: "ddd-text" lines, then "ddd text" or "ddd").
  std::optional<SmtpError> read_reply(Reply& out, const char* stage) {
    out = Reply{};
    const auto deadline = Clock::now() + timeout_;
    size_t total = 0;
    for (;;) {
      std::string line;
      if (auto e = read_line(line, deadline, stage)) return e;
      total += line.size();
      if (total > kSmtpReplyMax) return fail(true, 0, stage, "reply too long");
      if (line.size() < 3 || !std::isdigit(static_cast<unsigned char>(line[0])) ||
          !std::isdigit(static_cast<unsigned char>(line[1])) ||
          !std::isdigit(static_cast<unsigned char>(line[2])) ||
          (line.size() > 3 && line[3] != ' ' && line[3] != '-'))
        return fail(true, 0, stage, "malformed reply: " + line.substr(0, 80));
      const int code = (line[0] - '0') * 100 + (line[1] - '0') * 10 + (line[2] - '0');
      if (out.code != 0 && code != out.code)
        return fail(true, 0, stage, "malformed multi-line reply");
      out.code = code;
      std::string text = line.size() > 4 ? line.substr(4) : std::string();
      if (!out.text.empty()) out.text += '\n';
      out.text += text;
      out.lines.push_back(std::move(text));
      if (line.size() == 3 || line[3] == ' ') return std::nullopt;
    }
  }

 private:
  static int64_t ms(Duration d) {
    return std::max<int64_t>(0, std::chrono::duration_cast<std::chrono::milliseconds>(d).count());
  }
  static int left_ms(Clock::time_point deadline) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    return static_cast<int>(std::max<int64_t>(0, left.count()));
  }

  // Bytes from the socket: > 0, 0 at EOF, -1 on an error or the deadline (io_error_ says).
  ssize_t raw_read(char* buf, size_t len, Clock::time_point deadline) {
    for (;;) {
      ssize_t n = ::recv(fd_, buf, len, 0);
      if (n >= 0) return n;
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        io_error_ = std::strerror(errno);
        return -1;
      }
      pollfd p{fd_, POLLIN, 0};
      int r = ::poll(&p, 1, left_ms(deadline));
      if (r == 0) {
        io_error_ = "timed out waiting for the server";
        return -1;
      }
      if (r < 0 && errno != EINTR) {
        io_error_ = std::strerror(errno);
        return -1;
      }
    }
  }

  bool raw_write(std::string_view data, Clock::time_point deadline) {
    while (!data.empty()) {
      ssize_t n = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
      if (n > 0) {
        data.remove_prefix(static_cast<size_t>(n));
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
        io_error_ = std::strerror(errno);
        return false;
      }
      pollfd p{fd_, POLLOUT, 0};
      int r = ::poll(&p, 1, left_ms(deadline));
      if (r == 0) {
        io_error_ = "timed out writing to the server";
        return false;
      }
    }
    return true;
  }

  std::optional<SmtpError> flush_tls(Clock::time_point deadline, const char* stage = "tls") {
    if (tls_->pending_output() == 0) return std::nullopt;
    std::string out;
    tls_->take_output(out);
    if (!raw_write(out, deadline)) return fail(true, 0, stage, io_error_);
    return std::nullopt;
  }

  // Plaintext into rbuf_: false at EOF or on an error (io_error_ says).
  bool fill(Clock::time_point deadline) {
    char buf[16384];
    if (!tls_) {
      ssize_t n = raw_read(buf, sizeof(buf), deadline);
      if (n <= 0) {
        if (n == 0) io_error_ = "the server closed the connection";
        return false;
      }
      rbuf_.append(buf, static_cast<size_t>(n));
      return true;
    }
    for (;;) {
      TlsStream::Status st = TlsStream::Status::kOk;
      size_t n = tls_->read(buf, sizeof(buf), &st);
      if (n > 0) {
        rbuf_.append(buf, n);
        return true;
      }
      if (flush_tls(deadline)) return false;
      if (st == TlsStream::Status::kClosed) {
        io_error_ = "the server closed the connection";
        return false;
      }
      if (st != TlsStream::Status::kWantRead) {
        io_error_ = "TLS read failed";
        return false;
      }
      ssize_t got = raw_read(buf, sizeof(buf), deadline);
      if (got < 0) return false;
      if (got == 0) {
        tls_->feed_eof();
      } else {
        tls_->feed(buf, static_cast<size_t>(got));
      }
    }
  }

  std::optional<SmtpError> read_line(std::string& line, Clock::time_point deadline,
                                     const char* stage) {
    for (;;) {
      size_t eol = rbuf_.find('\n');
      if (eol != std::string::npos) {
        line.assign(rbuf_, 0, eol);
        rbuf_.erase(0, eol + 1);
        if (!line.empty() && line.back() == '\r') line.pop_back();
        return std::nullopt;
      }
      if (rbuf_.size() > kSmtpLineMax) return fail(true, 0, stage, "reply line too long");
      if (!fill(deadline)) return fail(true, 0, stage, io_error_);
    }
  }

  int fd_ = -1;
  Duration timeout_ = seconds(30);
  std::unique_ptr<TlsClientContext> ctx_;
  std::unique_ptr<TlsStream> tls_;
  std::string rbuf_;
  std::string io_error_;
};

// A reply that is not `want` (or, with want2, not that either) as an error of `stage`:
// 4xx transient, 5xx (and anything else) permanent (RFC 5321 4.2.1).
std::optional<SmtpError> expect(const Reply& r, int want, const char* stage, int want2 = 0) {
  if (r.code == want || (want2 != 0 && r.code == want2)) return std::nullopt;
  return fail(r.code >= 400 && r.code < 500, r.code, stage, r.text);
}

std::string upper(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

struct Extensions {
  bool starttls = false;
  bool auth_plain = false;
  bool auth_login = false;
};

Extensions parse_ehlo(const Reply& r) {
  Extensions x;
  for (size_t i = 1; i < r.lines.size(); ++i) {  // line 0 is the greeting
    const std::string l = upper(r.lines[i]);
    if (l == "STARTTLS") x.starttls = true;
    if (l.rfind("AUTH", 0) == 0 && l.size() > 4 && (l[4] == ' ' || l[4] == '=')) {
      // Built piece by piece: GCC 12's -O3 -Wrestrict misfires on `" " + std::string&&`.
      std::string mechs = " ";
      mechs += std::string_view(l).substr(5);
      mechs += ' ';
      if (mechs.find(" PLAIN ") != std::string::npos) x.auth_plain = true;
      if (mechs.find(" LOGIN ") != std::string::npos) x.auth_login = true;
    }
  }
  return x;
}

bool has_ctl(std::string_view s) {
  for (char c : s) {
    if (c == '\r' || c == '\n' || c == '\0') return true;
  }
  return false;
}

}  // namespace

const char* smtp_starttls_name(SmtpStartTls s) {
  switch (s) {
    case SmtpStartTls::kRequired:
      return "required";
    case SmtpStartTls::kOpportunistic:
      return "opportunistic";
    case SmtpStartTls::kOff:
      return "off";
  }
  return "?";
}

std::string SmtpError::describe() const {
  std::string out = stage;
  out += ": ";
  if (code != 0) {
    out += std::to_string(code);
    out += ' ';
  }
  out += text;
  return out;
}

bool smtp_address_ok(std::string_view addr) {
  if (addr.empty() || addr.size() > kSmtpAddressMax) return false;
  const size_t at = addr.rfind('@');
  if (at == std::string_view::npos || at == 0 || at + 1 == addr.size()) return false;
  for (char c : addr) {
    const auto u = static_cast<unsigned char>(c);
    if (u <= 0x20 || u >= 0x7f || c == '<' || c == '>' || c == '(' || c == ')' || c == ',' ||
        c == ';' || c == ':' || c == '\\' || c == '"' || c == '[' || c == ']')
      return false;
  }
  return true;
}

std::string smtp_dot_stuff(std::string_view message) {
  std::string out;
  out.reserve(message.size() + message.size() / 32 + 8);
  bool line_start = true;
  for (size_t i = 0; i < message.size(); ++i) {
    const char c = message[i];
    if (c == '\r' || c == '\n') {
      out += "\r\n";
      if (c == '\r' && i + 1 < message.size() && message[i + 1] == '\n') ++i;
      line_start = true;
      continue;
    }
    if (line_start && c == '.') out += '.';  // RFC 5321 4.5.2
    out += c;
    line_start = false;
  }
  if (!line_start) out += "\r\n";
  out += ".\r\n";
  return out;
}

std::string rfc2047_encode(std::string_view utf8) {
  bool ascii = true;
  for (char c : utf8) {
    if (static_cast<unsigned char>(c) >= 0x80) ascii = false;
  }
  if (ascii) return std::string(utf8);
  // "=?UTF-8?B?" + base64 + "?=": 36 bytes of text per word (48 base64 chars, a 60-char word,
  // a line of 69 after "Subject: ": RFC 2047 2 wants <= 76),
  // cut on UTF-8 character boundaries (RFC 2047 5: a character is not split between words).
  constexpr size_t kChunk = 36;
  std::string out;
  size_t at = 0;
  while (at < utf8.size()) {
    size_t end = std::min(utf8.size(), at + kChunk);
    while (end < utf8.size() && end > at && (static_cast<unsigned char>(utf8[end]) & 0xC0) == 0x80)
      --end;                                                  // not in the middle of a character
    if (end == at) end = std::min(utf8.size(), at + kChunk);  // not UTF-8: cut anyway
    if (!out.empty()) out += "\r\n ";  // folding white space between encoded words
    out += "=?UTF-8?B?";
    out += base64_encode(utf8.substr(at, end - at));
    out += "?=";
    at = end;
  }
  return out;
}

std::string quoted_printable(std::string_view text) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  size_t col = 0;
  auto put = [&](std::string_view piece) {
    if (col + piece.size() > 75) {  // soft break: "=" ends the line at 76
      out += "=\r\n";
      col = 0;
    }
    out += piece;
    col += piece.size();
  };
  for (size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c == '\r' && i + 1 < text.size() && text[i + 1] == '\n') continue;  // the '\n' breaks
    if (c == '\n' || c == '\r') {
      out += "\r\n";
      col = 0;
      continue;
    }
    const bool at_eol = i + 1 == text.size() || text[i + 1] == '\n' || text[i + 1] == '\r';
    const bool literal = (c >= 33 && c <= 126 && c != '=') || ((c == ' ' || c == '\t') && !at_eol);
    // A '.' at the start of a line is left to dot-stuffing; encoding it avoids relays that
    // mangle it anyway.
    if (literal && !(c == '.' && col == 0)) {
      const char ch = static_cast<char>(c);
      put(std::string_view(&ch, 1));
    } else {
      const char enc[3] = {'=', kHex[c >> 4], kHex[c & 15]};
      put(std::string_view(enc, 3));
    }
  }
  return out;
}

std::string rfc5322_date(WallTime t) {
  const std::time_t secs = static_cast<std::time_t>(t.ns() / 1'000'000'000);
  std::tm tm{};
  ::gmtime_r(&secs, &tm);
  static constexpr const char* kDays[] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
  static constexpr const char* kMonths[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                            "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%s, %02d %s %04d %02d:%02d:%02d +0000", kDays[tm.tm_wday],
                tm.tm_mday, kMonths[tm.tm_mon], tm.tm_year + 1900, tm.tm_hour, tm.tm_min,
                tm.tm_sec);
  return buf;
}

bool build_mail_message(const MailMessage& m, std::string& out, std::string* why) {
  auto refuse = [&](const char* w) {
    if (why) *why = w;
    return false;
  };
  if (!smtp_address_ok(m.from)) return refuse("from: not a plain address");
  if (!smtp_address_ok(m.to)) return refuse("to: not a plain address");
  if (has_ctl(m.from_name)) return refuse("from_name: CR, LF or NUL");
  if (has_ctl(m.subject)) return refuse("subject: CR, LF or NUL");
  if (m.message_id.empty() || !smtp_address_ok(m.message_id))
    return refuse("message_id: must look like local@domain, without <> or spaces");
  out.clear();
  out += "From: ";
  if (!m.from_name.empty()) {
    bool ascii = true;
    for (char c : m.from_name) {
      if (static_cast<unsigned char>(c) >= 0x80) ascii = false;
    }
    if (ascii) {  // a quoted string: backslash-escape '"' and '\'
      out += '"';
      for (char c : m.from_name) {
        if (c == '"' || c == '\\') out += '\\';
        out += c;
      }
      out += '"';
    } else {
      out += rfc2047_encode(m.from_name);
    }
    out += ' ';
  }
  out += '<';
  out += m.from;
  out += ">\r\nTo: <";
  out += m.to;
  out += ">\r\nSubject: ";
  out += rfc2047_encode(m.subject);
  out += "\r\nDate: ";
  out += rfc5322_date(m.date);
  out += "\r\nMessage-ID: <";
  out += m.message_id;
  out += ">\r\nMIME-Version: 1.0\r\nContent-Type: text/plain; charset=utf-8\r\n";
  out += "Content-Transfer-Encoding: quoted-printable\r\nAuto-Submitted: auto-generated\r\n\r\n";
  out += quoted_printable(m.body);
  out += "\r\n";
  return true;
}

SmtpResult smtp_send(const SmtpOptions& o, const SmtpEnvelope& env, std::string_view message,
                     SmtpSendInfo* info) {
  if (!env.from.empty() && !smtp_address_ok(env.from))
    return fail(false, 0, "message", "the sender is not a plain address");
  if (env.to.empty()) return fail(false, 0, "message", "no recipient");
  for (const std::string& to : env.to) {
    if (!smtp_address_ok(to))
      return fail(false, 0, "message", "a recipient is not a plain address");
  }
  if (has_ctl(o.helo_name) || o.helo_name.empty() || o.helo_name.find(' ') != std::string::npos)
    return fail(false, 0, "message", "helo_name: not a host name");
  if (o.host.empty()) return fail(false, 0, "connect", "no SMTP host");
  SmtpSendInfo local;
  SmtpSendInfo& inf = info ? *info : local;
  inf = SmtpSendInfo{};

  Conn c;
  if (auto e = c.connect(o)) return *e;
  Reply r;
  if (auto e = c.read_reply(r, "greeting")) return *e;
  if (auto e = expect(r, 220, "greeting")) return *e;

  auto command = [&](const std::string& line, const char* stage) -> std::optional<SmtpError> {
    if (auto e = c.write(line + "\r\n", stage)) return e;
    return c.read_reply(r, stage);
  };
  const std::string ehlo = "EHLO " + o.helo_name;
  if (auto e = command(ehlo, "ehlo")) return *e;
  if (auto e = expect(r, 250, "ehlo")) return *e;
  Extensions x = parse_ehlo(r);

  if (o.starttls != SmtpStartTls::kOff) {
    if (x.starttls) {
      if (auto e = command("STARTTLS", "starttls")) return *e;
      if (auto e = expect(r, 220, "starttls")) return *e;
      if (auto e = c.start_tls(o)) return *e;
      inf.tls = true;
      // RFC 3207 4.2: forget what was learnt in clear, ask again.
      if (auto e = command(ehlo, "ehlo")) return *e;
      if (auto e = expect(r, 250, "ehlo")) return *e;
      x = parse_ehlo(r);
    } else if (o.starttls == SmtpStartTls::kRequired) {
      (void)command("QUIT", "quit");
      return fail(false, 0, "starttls",
                  "the relay does not offer STARTTLS and starttls = \"required\": nothing sent");
    }
  }

  if (!o.username.empty()) {
    if (!c.tls() && !o.allow_auth_without_tls) {
      (void)command("QUIT", "quit");
      return fail(false, 0, "auth", "refusing to send credentials over a clear connection");
    }
    if (x.auth_plain) {
      std::string creds;
      creds += '\0';
      creds += o.username;
      creds += '\0';
      creds += o.password;
      if (auto e = command("AUTH PLAIN " + base64_encode(creds), "auth")) return *e;
      if (auto e = expect(r, 235, "auth")) return *e;
      inf.auth_mechanism = "PLAIN";
    } else if (x.auth_login) {
      if (auto e = command("AUTH LOGIN", "auth")) return *e;
      if (auto e = expect(r, 334, "auth")) return *e;
      if (auto e = command(base64_encode(o.username), "auth")) return *e;
      if (auto e = expect(r, 334, "auth")) return *e;
      if (auto e = command(base64_encode(o.password), "auth")) return *e;
      if (auto e = expect(r, 235, "auth")) return *e;
      inf.auth_mechanism = "LOGIN";
    } else {
      (void)command("QUIT", "quit");
      return fail(false, 0, "auth", "the relay offers neither AUTH PLAIN nor AUTH LOGIN");
    }
    inf.auth = true;
  }

  if (auto e = command("MAIL FROM:<" + env.from + ">", "mail")) return *e;
  if (auto e = expect(r, 250, "mail")) return *e;
  for (const std::string& to : env.to) {
    if (auto e = command("RCPT TO:<" + to + ">", "rcpt")) return *e;
    if (auto e = expect(r, 250, "rcpt", 251)) return *e;
  }
  if (auto e = command("DATA", "data")) return *e;
  if (auto e = expect(r, 354, "data")) return *e;
  if (auto e = c.write(smtp_dot_stuff(message), "data")) return *e;
  if (auto e = c.read_reply(r, "data")) return *e;
  if (auto e = expect(r, 250, "data")) return *e;
  inf.final_code = r.code;
  inf.final_text = r.text;
  (void)command("QUIT", "quit");  // the message is accepted; the answer does not matter
  return SmtpResult();
}

}  // namespace ringcast::net
