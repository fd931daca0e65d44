#include "tests/support/smtp_sink.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace ringcast::test {
namespace {

constexpr const char* kPython = "/usr/bin/python3";

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string qp_decode(const std::string& in) {
  std::string out;
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] != '=') {
      out += in[i];
      continue;
    }
    if (i + 2 < in.size() && in[i + 1] == '\r' && in[i + 2] == '\n') {
      i += 2;  // soft line break
      continue;
    }
    if (i + 2 < in.size() && std::isxdigit(static_cast<unsigned char>(in[i + 1])) &&
        std::isxdigit(static_cast<unsigned char>(in[i + 2]))) {
      out += static_cast<char>(std::stoi(in.substr(i + 1, 2), nullptr, 16));
      i += 2;
      continue;
    }
    out += '=';
  }
  return out;
}

}  // namespace

std::string SinkMessage::header(const std::string& name) const {
  const std::string want = lower(name) + ":";
  size_t end = data.find("\r\n\r\n");
  std::string head = data.substr(0, end == std::string::npos ? data.size() : end + 2);
  size_t at = 0;
  while (at < head.size()) {
    size_t eol = head.find("\r\n", at);
    if (eol == std::string::npos) eol = head.size();
    std::string line = head.substr(at, eol - at);
    if (lower(line.substr(0, want.size())) == want) {
      std::string v = line.substr(want.size());
      // Unfold continuation lines.
      size_t next = eol + 2;
      while (next < head.size() && (head[next] == ' ' || head[next] == '\t')) {
        size_t e2 = head.find("\r\n", next);
        if (e2 == std::string::npos) e2 = head.size();
        v += head.substr(next, e2 - next);
        next = e2 + 2;
      }
      size_t b = v.find_first_not_of(" \t");
      return b == std::string::npos ? std::string() : v.substr(b);
    }
    at = eol + 2;
  }
  return "";
}

std::string SinkMessage::body() const {
  size_t end = data.find("\r\n\r\n");
  if (end == std::string::npos) return "";
  std::string raw = data.substr(end + 4);
  if (lower(header("Content-Transfer-Encoding")) == "quoted-printable") return qp_decode(raw);
  return raw;
}

bool SmtpSink::available() {
  if (::access(kPython, X_OK) != 0) return false;
  return ::system("/usr/bin/python3 -c 'import aiosmtpd' >/dev/null 2>&1") == 0;
}

std::unique_ptr<SmtpSink> SmtpSink::start(const SmtpSinkOptions& options,
                                          std::chrono::milliseconds timeout) {
  std::unique_ptr<SmtpSink> s(new SmtpSink());
  s->options_ = options;
  s->dir_ = std::make_unique<TempDir>("smtp-sink");
  s->msg_dir_ = s->dir_->file("messages");
  ::mkdir(s->msg_dir_.c_str(), 0700);
  s->port_ = options.port;
  s->launch(timeout);
  return s;
}

SmtpSink::~SmtpSink() {
  stop();
}

void SmtpSink::launch(std::chrono::milliseconds timeout) {
  std::vector<std::string> argv = {
      kPython,  std::string(RINGCAST_SOURCE_DIR) + "/tests/support/smtp_sink.py",
      "--dir",  msg_dir_,
      "--port", std::to_string(port_)};
  const SmtpSinkOptions& o = options_;
  if (!o.tls_cert.empty()) {
    argv.insert(argv.end(), {"--tls-cert", o.tls_cert, "--tls-key", o.tls_key});
  }
  if (o.require_starttls) argv.push_back("--require-starttls");
  if (!o.auth_user.empty()) {
    argv.insert(argv.end(), {"--auth-user", o.auth_user, "--auth-password", o.auth_password,
                             "--auth-mechanisms", o.auth_mechanisms});
    if (o.auth_allow_clear) argv.push_back("--auth-allow-clear");
  }
  if (o.fail_code != 0 && runs_ == 0) {
    argv.insert(argv.end(), {"--fail-code", std::to_string(o.fail_code), "--fail-count",
                             std::to_string(o.fail_count)});
  }
  ++runs_;
  ProcessOptions po;
  po.stdout_path = dir_->file("sink-" + std::to_string(runs_) + ".out");
  po.stderr_path = dir_->file("sink-" + std::to_string(runs_) + ".err");
  po.env = {"PYTHONUNBUFFERED=1"};
  process_ = Process::start(argv, po);
  auto line = process_.wait_for_stdout_line("listening on 127.0.0.1:", timeout);
  if (!line) throw std::runtime_error("smtp sink did not start: " + output());
  port_ = static_cast<uint16_t>(std::stoi(line->substr(line->rfind(':') + 1)));
}

std::vector<SinkMessage> SmtpSink::messages() const {
  std::vector<std::string> names;
  if (DIR* d = ::opendir(msg_dir_.c_str())) {
    while (dirent* e = ::readdir(d)) {
      std::string n = e->d_name;
      if (n.size() > 4 && n.compare(n.size() - 4, 4, ".env") == 0 && n[0] != '.')
        names.push_back(n.substr(0, n.size() - 4));
    }
    ::closedir(d);
  }
  // Names are the sink's counter ("0001"; a restart goes on from the files already there).
  std::sort(names.begin(), names.end());
  std::vector<SinkMessage> out;
  for (const std::string& n : names) {
    SinkMessage m;
    std::ifstream env(msg_dir_ + "/" + n + ".env");
    std::string line;
    while (std::getline(env, line)) {
      size_t eq = line.find('=');
      if (eq == std::string::npos) continue;
      std::string k = line.substr(0, eq), v = line.substr(eq + 1);
      if (k == "mail_from") m.mail_from = v;
      if (k == "rcpt_to") {
        std::stringstream ss(v);
        std::string r;
        while (std::getline(ss, r, ',')) m.rcpt_to.push_back(r);
      }
      if (k == "tls") m.tls = v == "yes";
      if (k == "auth") m.auth = v;
      if (k == "result") m.result = std::atoi(v.c_str());
    }
    m.data = read_file(msg_dir_ + "/" + n + ".eml");
    out.push_back(std::move(m));
  }
  return out;
}

std::vector<SinkMessage> SmtpSink::wait_messages(size_t n,
                                                 std::chrono::milliseconds timeout) const {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    auto got = messages();
    if (got.size() >= n || std::chrono::steady_clock::now() >= deadline) return got;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

void SmtpSink::set_failures(int code, int count) {
  const std::string tmp = msg_dir_ + "/.control.tmp";
  {
    std::ofstream f(tmp, std::ios::trunc);
    f << code << ' ' << count << '\n';
  }
  ::rename(tmp.c_str(), (msg_dir_ + "/control").c_str());
}

void SmtpSink::stop() {
  if (process_.running()) process_.kill();
}

void SmtpSink::restart() {
  stop();
  launch(std::chrono::seconds(10));
}

std::string SmtpSink::output() const {
  std::string out;
  for (int r = 1; r <= runs_; ++r) {
    out += read_file(dir_->file("sink-" + std::to_string(r) + ".out"));
    out += read_file(dir_->file("sink-" + std::to_string(r) + ".err"));
  }
  return out;
}

}  // namespace ringcast::test
