#include "tests/e2e/daemon.h"

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace ringcast::e2e {

namespace {

using SteadyClock = std::chrono::steady_clock;

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// The fixture's config. Policies (SPEC R5 / R2 shapes with millisecond ladders, no jitter so
// attempt times can be checked):
//   fast   smengo shape, 4 attempts: pauses 100, 200, 300 ms
//   quick  smengo shape, 3 attempts: pauses 50, 50 ms (exhaustion auto-disables, R8.1)
//   steady smengo shape, 13 attempts up to 500 ms apart, no auto-disable (crash tests)
//   hub    xhub shape, 11 attempts 100 ms apart, breaker on (R4)
std::string config_toml(const DaemonOptions& o, const std::string& dir) {
  std::ostringstream t;
  t << "# written by tests/e2e/daemon.cc\n"
    << "[server]\n"
    << "listen = \"127.0.0.1:0\"\n"
    << "api_token = \"" << Daemon::kToken << "\"\n"
    << "shutdown_grace = \"5s\"\n"
    << "\n[storage]\n"
    << "data_dir = \"" << dir << "/data\"\n"
    << "sync = \"interval\"\n"
    << "sync_interval = \"5ms\"\n"
    << "\n[engine]\n"
    << "shards = " << o.shards << "\n"
    << "\n[engine.breaker]\n"
    << "window = \"30s\"\n"
    << "min_deliveries = 3\n"
    << "failure_ratio = 0.8\n"
    << "open_pause = \"400ms\"\n"
    << "max_pause = \"800ms\"\n"
    << "probe_recheck = \"100ms\"\n"
    << "\n[transport]\n"
    << "allow_http = true\n"
    << "allow_private = [" << (o.allow_private ? "\"127.0.0.0/8\"" : "") << "]\n"
    << "connect_timeout = \"1s\"\n"
    << "tls_timeout = \"1s\"\n"
    << "request_timeout = \"3s\"\n"
    << "dns_timeout = \"1s\"\n"
    << "\n[policies.fast]\n"
    << "base = \"smengo\"\n"
    << "ladder = [\"100ms\", \"200ms\", \"300ms\"]\n"
    << "jitter = 0.0\n"
    << "\n[policies.quick]\n"
    << "base = \"smengo\"\n"
    << "ladder = [\"50ms\", \"50ms\"]\n"
    << "jitter = 0.0\n"
    << "\n[policies.steady]\n"
    << "base = \"smengo\"\n"
    << "ladder = [\"50ms\", \"100ms\", \"200ms\", \"300ms\", \"500ms\", \"500ms\", \"500ms\", "
       "\"500ms\", \"500ms\", \"500ms\", \"500ms\", \"500ms\"]\n"
    << "jitter = 0.0\n"
    << "auto_disable = false\n"
    << "\n[policies.hub]\n"
    << "base = \"xhub\"\n"
    << "ladder = [\"100ms\", \"100ms\", \"100ms\", \"100ms\", \"100ms\", \"100ms\", \"100ms\", "
       "\"100ms\", \"100ms\", \"100ms\"]\n"
    << "jitter = 0.0\n"
    << "breaker = true\n";
  if (!o.extra_toml.empty()) t << "\n" << o.extra_toml << "\n";
  return t.str();
}

int connect_port(uint16_t port, Millis timeout) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  timeval tv{static_cast<time_t>(timeout.count() / 1000),
             static_cast<suseconds_t>((timeout.count() % 1000) * 1000)};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

}  // namespace

std::string Reply::describe() const {
  return std::to_string(status) + " " + body;
}

Reply http_request(uint16_t port, const std::string& method, const std::string& target,
                   const std::string& body, const std::vector<std::string>& headers,
                   Millis timeout) {
  Reply out;
  int fd = connect_port(port, timeout);
  if (fd < 0) return out;
  std::string req = method + " " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n";
  for (const auto& h : headers) req += h + "\r\n";
  if (!body.empty() || method == "POST" || method == "PUT" || method == "PATCH") {
    req += "Content-Length: " + std::to_string(body.size()) + "\r\n";
  }
  req += "\r\n";
  req += body;
  size_t off = 0;
  while (off < req.size()) {
    ssize_t n = ::send(fd, req.data() + off, req.size() - off, MSG_NOSIGNAL);
    if (n <= 0) break;  // the server may have answered early (413) and closed; read below
    off += static_cast<size_t>(n);
  }
  std::string got;
  char buf[16384];
  const auto deadline = SteadyClock::now() + timeout;
  size_t head_end = std::string::npos;
  size_t want = std::string::npos;
  for (;;) {
    if (head_end == std::string::npos) {
      head_end = got.find("\r\n\r\n");
      if (head_end != std::string::npos) {
        std::string head = lower(got.substr(0, head_end));
        size_t cl = head.find("\r\ncontent-length:");
        if (cl != std::string::npos) want = std::strtoull(head.c_str() + cl + 17, nullptr, 10);
      }
    }
    if (head_end != std::string::npos && want != std::string::npos &&
        got.size() >= head_end + 4 + want) {
      break;
    }
    if (SteadyClock::now() >= deadline) break;
    ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    got.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  if (got.compare(0, 9, "HTTP/1.1 ") != 0 && got.compare(0, 9, "HTTP/1.0 ") != 0) return out;
  size_t he = got.find("\r\n\r\n");
  if (he == std::string::npos) return out;
  out.status = std::atoi(got.c_str() + 9);
  out.headers = got.substr(0, he);
  out.body = got.substr(he + 4);
  if (want != std::string::npos && out.body.size() > want) out.body.resize(want);
  return out;
}

bool wait_until(const std::function<bool()>& pred, Millis timeout, Millis interval) {
  const auto deadline = SteadyClock::now() + timeout;
  for (;;) {
    if (pred()) return true;
    if (SteadyClock::now() >= deadline) return pred();
    std::this_thread::sleep_for(interval);
  }
}

std::string ringcast_binary() {
  return std::string(RINGCAST_BINARY_DIR) + "/tools/ringcast";
}

std::string sink_binary() {
  return std::string(RINGCAST_BINARY_DIR) + "/tools/ringcast-sink";
}

// ---------------------------------------------------------------------------------------------

Daemon::Daemon(DaemonOptions options) : options_(std::move(options)), tmp_("ringcast-e2e") {
  config_path_ = tmp_.file("ringcast.toml");
  config_text_ = config_toml(options_, tmp_.path());
  std::ofstream f(config_path_);
  f << config_text_;
  if (!f) throw std::runtime_error("cannot write " + config_path_);
}

Daemon::~Daemon() {
  if (process_.running()) process_.kill();
  // A sanitizer report in any run fails the test, also for runs that ended with SIGKILL.
  const std::string out = output(std::string::npos);
  for (const char* needle : {"ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:"}) {
    size_t p = out.find(needle);
    if (p != std::string::npos) {
      ADD_FAILURE() << "the daemon reported: " << out.substr(p > 200 ? p - 200 : 0, 3000);
      break;
    }
  }
}

void Daemon::start(Millis timeout) {
  if (process_.running()) throw std::runtime_error("Daemon::start: already running");
  ++runs_;
  test::ProcessOptions po;
  po.stdout_path = tmp_.file("run-" + std::to_string(runs_) + ".out");
  po.stderr_path = tmp_.file("run-" + std::to_string(runs_) + ".err");
  po.env = options_.env;
  po.cwd = tmp_.path();
  process_ =
      test::Process::start({ringcast_binary(), "serve", "--config", config_path_}, std::move(po));
  auto line = process_.wait_for_stdout_line("listening on ", timeout);
  if (!line) {
    std::string why =
        process_.running()
            ? "no \"listening on\" line in time"
            : "it exited: " + (process_.status() ? process_.status()->str() : std::string("?"));
    process_.kill();
    throw std::runtime_error("ringcast serve did not start (" + why + ")\n" + output());
  }
  // "ringcast: listening on 127.0.0.1:PORT ..."
  std::string addr = line->substr(line->find("listening on ") + 13);
  addr = addr.substr(0, addr.find(' '));
  size_t colon = addr.rfind(':');
  if (colon == std::string::npos) throw std::runtime_error("cannot parse: " + *line);
  port_.store(static_cast<uint16_t>(std::stoi(addr.substr(colon + 1))));
}

void Daemon::kill9() {
  process_.kill();
}

test::ExitStatus Daemon::terminate(Millis grace) {
  return process_.stop(grace);
}

bool Daemon::running() {
  return process_.running();
}

std::string Daemon::output(size_t max_per_file) const {
  std::string out;
  for (int i = 1; i <= runs_; ++i) {
    for (const char* ext : {".out", ".err"}) {
      std::string name = "run-" + std::to_string(i) + ext;
      std::string text = test::read_file(tmp_.file(name));
      if (text.size() > max_per_file) {
        text = "...\n" + text.substr(text.size() - max_per_file);
      }
      if (!text.empty()) out += "--- " + name + "\n" + text;
    }
  }
  return out;
}

Reply Daemon::call(const std::string& method, const std::string& path,
                   const std::string& body) const {
  return call_with_auth(method, path, body, std::string("Bearer ") + kToken);
}

Reply Daemon::call_with_auth(const std::string& method, const std::string& path,
                             const std::string& body,
                             const std::optional<std::string>& auth) const {
  std::vector<std::string> headers;
  if (auth) headers.push_back("Authorization: " + *auth);
  if (!body.empty()) {
    headers.push_back(path == "/v1/events/bulk" ? "Content-Type: application/x-ndjson"
                                                : "Content-Type: application/json");
  }
  // 5 s: a healthy daemon answers in milliseconds; a stuck shard must not stall a test for long.
  return http_request(port(), method, path, body, headers, 5s);
}

// ---------------------------------------------------------------------------------------------

std::string quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

Reply create_endpoint(const Daemon& d, const std::string& tenant, const std::string& body) {
  return d.call("POST", "/v1/tenants/" + tenant + "/endpoints", body);
}

Reply submit_event(const Daemon& d, const std::string& tenant, const std::string& id,
                   const std::string& type, const std::string& payload) {
  return d.call(
      "POST", "/v1/tenants/" + tenant + "/events",
      "{\"id\":" + quote(id) + ",\"type\":" + quote(type) + ",\"payload\":" + payload + "}");
}

Json list_deliveries(const Daemon& d, const std::string& tenant, const std::string& endpoint_id) {
  Reply r = d.call("GET",
                   "/v1/tenants/" + tenant + "/deliveries?endpoint=" + endpoint_id + "&limit=1000");
  return r.json()["deliveries"];
}

Json get_delivery(const Daemon& d, const std::string& tenant, const std::string& delivery_id) {
  return d.call("GET", "/v1/tenants/" + tenant + "/deliveries/" + delivery_id).json();
}

Json delivery_for_event(const Daemon& d, const std::string& tenant, const std::string& endpoint_id,
                        const std::string& event_id) {
  Json ev = d.call("GET", "/v1/tenants/" + tenant + "/events/" + event_id).json();
  const std::string& seq = ev["seq"].str();
  if (seq.empty()) return Json();
  Json list = list_deliveries(d, tenant, endpoint_id);
  for (const Json& del : list.items()) {
    if (del["event_seq"].str() == seq) return get_delivery(d, tenant, del["id"].str());
  }
  return Json();
}

Json get_endpoint(const Daemon& d, const std::string& tenant, const std::string& endpoint_id) {
  return d.call("GET", "/v1/tenants/" + tenant + "/endpoints/" + endpoint_id).json();
}

std::string message_id_of(const Daemon& d, const std::string& tenant, const std::string& event_id) {
  Reply r = d.call("GET", "/v1/tenants/" + tenant + "/events/" + event_id);
  if (r.status != 200) return "";
  Json j = r.json();
  return j.has("event") ? j["event"]["message_id"].str() : j["message_id"].str();
}

std::vector<std::string> message_ids_of(const Daemon& d, const std::string& tenant,
                                        const std::vector<std::string>& event_ids) {
  std::vector<std::string> out;
  out.reserve(event_ids.size());
  for (const std::string& id : event_ids) out.push_back(message_id_of(d, tenant, id));
  return out;
}

std::vector<std::string> sink_ids_with_status(const test::SinkProcess& sink,
                                              const std::string& status) {
  std::set<std::string> ids;
  for (const auto& l : sink.ids()) {
    if (l.status == status) ids.insert(l.id);
  }
  return {ids.begin(), ids.end()};
}

size_t sink_lines_for(const test::SinkProcess& sink, const std::string& id) {
  size_t n = 0;
  for (const auto& l : sink.ids()) n += l.id == id;
  return n;
}

std::vector<std::string> missing_ids(const test::SinkProcess& sink,
                                     const std::vector<std::string>& want,
                                     const std::string& status) {
  std::set<std::string> got;
  for (const auto& l : sink.ids()) {
    if (l.status == status) got.insert(l.id);
  }
  std::vector<std::string> out;
  for (const auto& id : want) {
    if (!got.count(id)) out.push_back(id);
  }
  return out;
}

Metrics scrape_metrics(const Daemon& d) {
  Metrics out;
  Reply r = d.call_with_auth("GET", "/metrics", "", std::nullopt);
  if (r.status != 200) return out;
  std::istringstream in(r.body);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    // The value follows the last space; label values never hold one in ringcast's metrics.
    const size_t sp = line.rfind(' ');
    if (sp == std::string::npos || sp == 0) continue;
    out[line.substr(0, sp)] = std::strtod(line.c_str() + sp + 1, nullptr);
  }
  return out;
}

double metric(const Metrics& m, const std::string& sample) {
  auto it = m.find(sample);
  return it == m.end() ? -1 : it->second;
}

double metric_sum(const Metrics& m, const std::string& name) {
  double sum = 0;
  bool any = false;
  for (auto it = m.lower_bound(name); it != m.end() && it->first.compare(0, name.size(), name) == 0;
       ++it) {
    const std::string& k = it->first;
    if (k.size() != name.size() && k[name.size()] != '{') continue;  // a longer metric name
    sum += it->second;
    any = true;
  }
  return any ? sum : -1;
}

std::string sample(const std::vector<std::string>& ids, size_t n) {
  std::string out;
  for (size_t i = 0; i < ids.size() && i < n; ++i) out += (i ? ", " : "") + ids[i];
  if (ids.size() > n) out += ", ... (" + std::to_string(ids.size()) + " in all)";
  return out;
}

}  // namespace ringcast::e2e
