#include "tests/support/nats_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <signal.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <thread>
#include <tuple>

namespace ringcast::test {
namespace {

using SteadyClock = std::chrono::steady_clock;

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
  if (!out) throw std::runtime_error("cannot write " + path);
}

std::string json_quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  out.push_back('"');
  return out;
}

// One blocking connection of the oracle: CONNECT (auth as the server wants), a wildcard inbox
// subscription, and reads with a deadline.
class Oracle {
 public:
  Oracle(uint16_t port, const NatsServerOptions& o, std::chrono::milliseconds timeout)
      : deadline_(SteadyClock::now() + timeout) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd_ < 0) throw std::runtime_error("nats oracle: socket()");
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0)
      throw std::runtime_error("nats oracle: cannot connect to port " + std::to_string(port));
    const int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    const std::string info = line();
    if (info.rfind("INFO ", 0) != 0) throw std::runtime_error("nats oracle: no INFO: " + info);
    std::string c = "CONNECT {\"verbose\":false,\"pedantic\":false,\"headers\":true,";
    c += "\"no_responders\":true,\"name\":\"test-oracle\"";
    if (!o.token.empty()) c += ",\"auth_token\":" + json_quote(o.token);
    if (!o.user.empty()) {
      c += ",\"user\":" + json_quote(o.user);
      c += ",\"pass\":" + json_quote(o.password);
    }
    c += "}\r\nSUB _INBOX.oracle.* 1\r\nPING\r\n";
    send(c);
    wait_pong();
  }
  ~Oracle() {
    if (fd_ >= 0) ::close(fd_);
  }
  Oracle(const Oracle&) = delete;
  Oracle& operator=(const Oracle&) = delete;

  void send(const std::string& bytes) {
    size_t off = 0;
    while (off < bytes.size()) {
      const ssize_t n = ::send(fd_, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
      if (n <= 0) throw std::runtime_error("nats oracle: send failed");
      off += static_cast<size_t>(n);
    }
  }
  void wait_pong() {
    for (;;) {
      const std::string l = line();
      if (l == "PONG") return;
      if (l == "PING") send("PONG\r\n");
      if (l.rfind("-ERR", 0) == 0) throw std::runtime_error("nats oracle: " + l);
      if (l.rfind("MSG ", 0) == 0 || l.rfind("HMSG ", 0) == 0) skip_payload(l);
    }
  }
  // The next MSG / HMSG.
  NatsReply next_msg() {
    for (;;) {
      const std::string l = line();
      if (l == "PING") {
        send("PONG\r\n");
        continue;
      }
      if (l.rfind("-ERR", 0) == 0) throw std::runtime_error("nats oracle: " + l);
      const bool h = l.rfind("HMSG ", 0) == 0;
      if (!h && l.rfind("MSG ", 0) != 0) continue;
      std::vector<std::string> t = split(l);
      NatsReply r;
      const size_t total = std::stoul(t.back());
      const size_t hdr = h ? std::stoul(t[t.size() - 2]) : 0;
      const std::string body = bytes(total + 2);
      r.headers = body.substr(0, hdr);
      r.data = body.substr(hdr, total - hdr);
      if (r.headers.rfind("NATS/1.0 ", 0) == 0) r.status = std::atoi(r.headers.c_str() + 9);
      return r;
    }
  }

 private:
  static std::vector<std::string> split(const std::string& l) {
    std::vector<std::string> t;
    size_t i = 0;
    while (i < l.size()) {
      while (i < l.size() && l[i] == ' ') ++i;
      size_t j = i;
      while (j < l.size() && l[j] != ' ') ++j;
      if (j > i) t.push_back(l.substr(i, j - i));
      i = j;
    }
    return t;
  }
  void skip_payload(const std::string& l) {
    std::vector<std::string> t = split(l);
    (void)bytes(std::stoul(t.back()) + 2);
  }
  void fill() {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - SteadyClock::now());
    if (left.count() <= 0) throw std::runtime_error("nats oracle: timed out");
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0)
      throw std::runtime_error("nats oracle: timed out");
    char b[65536];
    const ssize_t n = ::recv(fd_, b, sizeof b, 0);
    if (n <= 0) throw std::runtime_error("nats oracle: connection closed");
    buf_.append(b, static_cast<size_t>(n));
  }
  std::string line() {
    for (;;) {
      const size_t at = buf_.find("\r\n");
      if (at != std::string::npos) {
        std::string l = buf_.substr(0, at);
        buf_.erase(0, at + 2);
        return l;
      }
      fill();
    }
  }
  std::string bytes(size_t n) {
    while (buf_.size() < n) fill();
    std::string out = buf_.substr(0, n);
    buf_.erase(0, n);
    return out;
  }

  int fd_ = -1;
  std::string buf_;
  SteadyClock::time_point deadline_;
};

std::string pub_bytes(const std::string& subject, const std::string& reply,
                      const std::string& headers, const std::string& data) {
  std::string out = headers.empty() ? "PUB " : "HPUB ";
  out += subject;
  out += ' ';
  if (!reply.empty()) {
    out += reply;
    out += ' ';
  }
  if (!headers.empty()) {
    out += std::to_string(headers.size());
    out += ' ';
  }
  out += std::to_string(headers.size() + data.size());
  out += "\r\n";
  out += headers;
  out += data;
  out += "\r\n";
  return out;
}

}  // namespace

std::string NatsReply::header(const std::string& key) const {
  const std::string needle = "\r\n" + key + ":";
  const size_t at = headers.find(needle);
  if (at == std::string::npos) return "";
  size_t from = at + needle.size();
  while (from < headers.size() && headers[from] == ' ') ++from;
  return headers.substr(from, headers.find("\r\n", from) - from);
}

bool NatsServer::available() {
  return ::access(kBinary, X_OK) == 0;
}

std::unique_ptr<NatsServer> NatsServer::start(const std::string& dir,
                                              const NatsServerOptions& options,
                                              std::chrono::milliseconds timeout) {
  if (!available())
    throw std::runtime_error("nats-server is not installed (tools/install-deps.sh: nats-server)");
  std::unique_ptr<NatsServer> s(new NatsServer());
  s->dir_ = dir;
  s->options_ = options;
  for (int attempt = 0; attempt < 5; ++attempt) {
    s->port_ = free_tcp_port();
    s->launch();
    if (s->wait_ready(timeout)) return s;
    s->process_.kill();
  }
  throw std::runtime_error("nats-server did not start: " + s->log());
}

NatsServer::~NatsServer() {
  if (process_.pid() > 0) {
    process_.signal(SIGCONT);
    process_.stop(std::chrono::seconds(2));
  }
}

void NatsServer::launch() {
  std::vector<std::string> argv = {
      kBinary, "-js", "-a", "127.0.0.1", "-p", std::to_string(port_), "-sd", dir_ + "/js"};
  const NatsServerOptions& o = options_;
  if (!o.token.empty() || !o.user.empty() || !o.nkey.empty() || o.tls) {
    std::string c;
    if (!o.token.empty()) c += "authorization { token: " + json_quote(o.token) + " }\n";
    if (!o.nkey.empty()) {
      // With user + password too: both may connect (the oracle is the latter).
      c += "authorization { users = [ { nkey: " + json_quote(o.nkey) + " }";
      if (!o.user.empty())
        c += ", { user: " + json_quote(o.user) + ", password: " + json_quote(o.password) + " }";
      c += " ] }\n";
    } else if (!o.user.empty()) {
      c += "authorization { user: " + json_quote(o.user) + ", password: " + json_quote(o.password) +
           " }\n";
    }
    if (o.tls) {
      c += "tls { cert_file: " + json_quote(o.tls->cert_file) +
           ", key_file: " + json_quote(o.tls->key_file) + " }\n";
    }
    write_text(dir_ + "/nats.conf", c);
    argv.push_back("-c");
    argv.push_back(dir_ + "/nats.conf");
  }
  ProcessOptions po;
  generation_++;
  po.stdout_path = dir_ + "/nats-" + std::to_string(generation_) + ".out";
  po.stderr_path = dir_ + "/nats-" + std::to_string(generation_) + ".log";
  po.cwd = dir_;
  process_ = Process::start(argv, po);
}

bool NatsServer::wait_ready(std::chrono::milliseconds timeout) {
  const auto deadline = SteadyClock::now() + timeout;
  const std::string path = dir_ + "/nats-" + std::to_string(generation_) + ".log";
  while (SteadyClock::now() < deadline) {
    if (!process_.running()) return false;
    if (read_file(path).find("Server is ready") != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

void NatsServer::stop(std::chrono::milliseconds grace) {
  process_.signal(SIGCONT);
  process_.stop(grace);
}

void NatsServer::restart(std::chrono::milliseconds timeout) {
  if (process_.running()) stop();
  launch();
  if (!wait_ready(timeout)) throw std::runtime_error("nats-server did not restart: " + log());
}

void NatsServer::kill() {
  resume();
  process_.kill();
}

void NatsServer::pause() {
  process_.signal(SIGSTOP);
  const std::string stat = "/proc/" + std::to_string(process_.pid()) + "/stat";
  const auto deadline = SteadyClock::now() + std::chrono::seconds(2);
  while (SteadyClock::now() < deadline) {
    const std::string s = read_file(stat);
    const size_t paren = s.rfind(')');
    if (paren != std::string::npos && paren + 2 < s.size() && s[paren + 2] == 'T') return;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

void NatsServer::resume() {
  process_.signal(SIGCONT);
}

std::string NatsServer::log() const {
  std::string out;
  for (int g = 1; g <= generation_; ++g)
    out += read_file(dir_ + "/nats-" + std::to_string(g) + ".log");
  return out.size() > 8000 ? out.substr(out.size() - 8000) : out;
}

NatsReply NatsServer::request(const std::string& subject, const std::string& data,
                              const std::string& headers, std::chrono::milliseconds timeout) const {
  Oracle o(port_, options_, timeout);
  o.send(pub_bytes(subject, "_INBOX.oracle.1", headers, data));
  return o.next_msg();
}

void NatsServer::publish(
    const std::vector<std::tuple<std::string, std::string, std::string>>& msgs) const {
  Oracle o(port_, options_, std::chrono::seconds(30));
  std::string out;
  for (const auto& [subject, headers, data] : msgs) {
    out += pub_bytes(subject, "", headers, data);
    if (out.size() > (1u << 20)) {
      o.send(out);
      out.clear();
    }
  }
  out += "PING\r\n";
  o.send(out);
  o.wait_pong();
}

std::string NatsServer::api(const std::string& what, const std::string& body) const {
  return request("$JS.API." + what, body).data;
}

void NatsServer::create_stream(const std::string& name,
                               const std::vector<std::string>& subjects) const {
  std::string b = "{\"name\":" + json_quote(name) + ",\"subjects\":[";
  for (size_t i = 0; i < subjects.size(); ++i) {
    if (i) b += ',';
    b += json_quote(subjects[i]);
  }
  b += "],\"storage\":\"file\",\"allow_direct\":true}";
  const std::string answer = api("STREAM.CREATE." + name, b);
  if (answer.find("\"error\"") != std::string::npos)
    throw std::runtime_error("STREAM.CREATE " + name + ": " + answer);
}

std::vector<NatsReply> NatsServer::stream_messages(const std::string& stream) const {
  const std::string info = api("STREAM.INFO." + stream);
  const int64_t first = json_int(info, "first_seq");
  const int64_t last = json_int(info, "last_seq");
  std::vector<NatsReply> out;
  if (first < 1 || last < first) return out;
  Oracle o(port_, options_, std::chrono::seconds(30));
  int64_t n = 0;
  for (int64_t seq = first; seq <= last; ++seq) {
    o.send(pub_bytes("$JS.API.DIRECT.GET." + stream, "_INBOX.oracle." + std::to_string(++n), "",
                     "{\"seq\":" + std::to_string(seq) + "}"));
    NatsReply r = o.next_msg();
    if (r.status == 0 || r.status == 200) out.push_back(std::move(r));
  }
  return out;
}

int64_t NatsServer::json_int(const std::string& json, const std::string& key) {
  const std::string needle = "\"" + key + "\":";
  const size_t at = json.find(needle);
  if (at == std::string::npos) return -1;
  return std::atoll(json.c_str() + at + needle.size());
}

}  // namespace ringcast::test
