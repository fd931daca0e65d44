#include "tests/e2e/daemon.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "core/types.h"
#include "tests/support/redis_server.h"

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
//
// Cluster mode adds the Redis store and [cluster] with the timings of docs/cluster.md "Timings"
// (tests column), as tests/e2e/cluster_test.cc runs them.
struct ClusterNodeConfig {
  std::string node_id, ns;
  std::vector<std::string> servers;
};

std::string config_toml(const DaemonOptions& o, const std::string& dir,
                        const ClusterNodeConfig* cluster) {
  std::ostringstream t;
  t << "# written by tests/e2e/daemon.cc\n"
    << "[server]\n"
    << "listen = \"127.0.0.1:0\"\n"
    << "api_token = \"" << Daemon::kToken
    << "\"\n"
    // The suites fail authentication on purpose, many times a minute, from 127.0.0.1
    // (E2eTrust.* tries the default).
    << "auth_failures_per_minute = 100000\n"
    << "shutdown_grace = \"5s\"\n"
    << "\n[storage]\n"
    << (cluster ? "backend = \"redis\"\n" : "") << "data_dir = \"" << dir
    << (cluster ? "/data-" + cluster->node_id : "/data") << "\"\n"
    << "sync = \"interval\"\n"
    << "sync_interval = \"5ms\"\n"
    << "\n[engine]\n"
    << "shards = " << o.shards << "\n"
    << "reconcile_schedule = [\"150ms\", \"300ms\"]\n"  // R12.11: status checks, fast
    << "reconcile_deadline = \"2500ms\"\n"
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
  if (cluster) {
    t << "\n[storage.redis]\nservers = [";
    for (size_t i = 0; i < cluster->servers.size(); ++i)
      t << (i ? ", " : "") << "\"" << cluster->servers[i] << "\"";
    t << "]\n"
      << "cluster = true\n"
      << "namespace = \"" << cluster->ns << "\"\n"
      << "wait_replicas = 1\n"
      << "wait_timeout = \"500ms\"\n"
      << "\n[cluster]\n"
      << "enabled = true\n"
      << "secret = \"" << Daemon::kClusterSecret << "\"\n"
      << "node_id = \"" << cluster->node_id << "\"\n"
      << "lease_ttl = \"1s\"\n"
      << "safety_margin = \"250ms\"\n"
      << "heartbeat_interval = \"200ms\"\n"
      << "member_ttl = \"700ms\"\n";
  }
  if (!o.extra_toml.empty()) t << "\n" << o.extra_toml << "\n";
  return t.str();
}

// From `source` (another loopback address, e.g. "127.0.0.2") when given.
int connect_port(uint16_t port, Millis timeout, const char* source = nullptr) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (source != nullptr) {
    sockaddr_in from{};
    from.sin_family = AF_INET;
    ::inet_pton(AF_INET, source, &from.sin_addr);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof from) != 0) {
      ::close(fd);
      return -1;
    }
  }
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
  return http_request_from(nullptr, port, method, target, body, headers, timeout);
}

int open_connection(uint16_t port, const char* source) {
  return connect_port(port, 5s, source);
}

Reply http_request_from(const char* source, uint16_t port, const std::string& method,
                        const std::string& target, const std::string& body,
                        const std::vector<std::string>& headers, Millis timeout) {
  std::string req = method + " " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n";
  for (const auto& h : headers) req += h + "\r\n";
  if (!body.empty() || method == "POST" || method == "PUT" || method == "PATCH") {
    req += "Content-Length: " + std::to_string(body.size()) + "\r\n";
  }
  req += "\r\n";
  req += body;
  return raw_request(port, req, timeout, source);
}

Reply raw_request(uint16_t port, const std::string& req, Millis timeout, const char* source) {
  Reply out;
  int fd = connect_port(port, timeout, source);
  if (fd < 0) return out;
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

std::string rfc3339_in(Millis from_now) {
  const int64_t ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                         (std::chrono::system_clock::now() + from_now).time_since_epoch())
                         .count();
  const std::time_t secs = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                static_cast<int>(ms % 1000));
  return buf;
}

std::string ringcast_binary() {
  return std::string(RINGCAST_BINARY_DIR) + "/tools/ringcast";
}

std::string sink_binary() {
  return std::string(RINGCAST_BINARY_DIR) + "/tools/ringcast-sink";
}

// ---------------------------------------------------------------------------------------------

bool cluster_mode() {
  static const bool on = [] {
    const char* v = std::getenv("RINGCAST_E2E_BACKEND");
    const bool cluster = v != nullptr && std::string(v) == "cluster";
    ::unsetenv("RINGCAST_E2E_BACKEND");
    return cluster;
  }();
  return on;
}

namespace {

// Read at start-up, before any child is started, and taken out of the environment: the daemons
// would warn about an unknown RINGCAST_ variable (and a test counts their stderr lines).
[[maybe_unused]] const bool kClusterModeAtStart = cluster_mode();

constexpr uint32_t kPartitionCount = 256;

// The Redis Cluster every Daemon of this test process shares in cluster mode: 3 primaries with
// a replica each (WAIT 1 needs one), started on first use — from the test's main thread, where
// Daemons are made (a process started from a helper thread dies with it) — and stopped at exit.
struct SharedRedis {
  std::unique_ptr<test::TempDir> dir;
  std::unique_ptr<test::RedisCluster> cluster;
  std::vector<std::string> seeds;  // the primaries
};

SharedRedis& shared_redis() {
  static SharedRedis r;
  if (!r.cluster) {
    if (!test::RedisServer::available())
      throw std::runtime_error("cluster mode needs redis-server (tools/install-deps.sh test)");
    r.dir = std::make_unique<test::TempDir>("e2e-redis-cluster");
    test::RedisClusterOptions co;
    co.primaries = 3;
    co.replicas_per_primary = 1;
    r.cluster = test::RedisCluster::start(r.dir->path(), co);
    for (size_t i = 0; i < 3; ++i) r.seeds.push_back(r.cluster->node(i).address());
  }
  return r;
}

// A namespace of its own for each Daemon of this process (its keys: {ns:p}:..., {ns}:members).
std::string next_namespace() {
  static std::atomic<int> n{0};
  return "e2e" + std::to_string(::getpid()) + "-" + std::to_string(++n);
}

// A 503 that another node (or this one in a moment) answers: the partition between owners, or
// an owner whose address is not published yet (it just took the partition). A load balancer
// retries both (Retry-After: 1).
bool is_not_owner(const Reply& r) {
  return r.status == 503 && (r.body.find("\"not_owner\"") != std::string::npos ||
                             r.body.find("\"owner_unreachable\"") != std::string::npos);
}

// "/v1/tenants/{tenant}/events" → tenant; "" for any other path.
std::string events_path_tenant(const std::string& path) {
  const std::string pre = "/v1/tenants/";
  if (path.compare(0, pre.size(), pre) != 0) return "";
  const size_t slash = path.find('/', pre.size());
  if (slash == std::string::npos || path.compare(slash, std::string::npos, "/events") != 0)
    return "";
  return path.substr(pre.size(), slash - pre.size());
}

}  // namespace

Daemon::Daemon(DaemonOptions options) : options_(std::move(options)), tmp_("ringcast-e2e") {
  const size_t n = cluster_mode() ? kClusterNodes : 1;
  std::optional<ClusterNodeConfig> cc;
  if (cluster_mode()) {
    cc.emplace();
    cc->ns = next_namespace();
    cc->servers = shared_redis().seeds;
  }
  for (size_t i = 0; i < n; ++i) {
    auto node = std::make_unique<Node>();
    if (cc) {
      node->id = "node-";
      node->id += static_cast<char>('a' + i);
      cc->node_id = node->id;
    }
    node->config_path = tmp_.file(cc ? "ringcast-" + node->id + ".toml" : "ringcast.toml");
    node->config_text = config_toml(options_, tmp_.path(), cc ? &*cc : nullptr);
    std::ofstream f(node->config_path);
    f << node->config_text;
    if (!f) throw std::runtime_error("cannot write " + node->config_path);
    nodes_.push_back(std::move(node));
  }
}

Daemon::~Daemon() {
  for (auto& n : nodes_) {
    if (n->process.running()) n->process.kill();
  }
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

std::string Daemon::log_file(size_t node, int run, const char* ext) const {
  std::string name = cluster_mode() ? nodes_[node]->id + "-run-" : "run-";
  name += std::to_string(run);
  name += ext;
  return tmp_.file(name);
}

void Daemon::start(Millis timeout) {
  for (auto& n : nodes_) {
    if (n->process.running()) throw std::runtime_error("Daemon::start: already running");
  }
  ++runs_;
  // Every node first, then their "listening on" lines: the nodes come up together.
  for (size_t i = 0; i < nodes_.size(); ++i) {
    test::ProcessOptions po;
    po.stdout_path = log_file(i, runs_, ".out");
    po.stderr_path = log_file(i, runs_, ".err");
    po.env = options_.env;
    po.cwd = tmp_.path();
    nodes_[i]->process = test::Process::start(
        {ringcast_binary(), "serve", "--config", nodes_[i]->config_path}, std::move(po));
  }
  const auto deadline = SteadyClock::now() + timeout;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    Node& n = *nodes_[i];
    const auto left =
        std::max(Millis(1), std::chrono::duration_cast<Millis>(deadline - SteadyClock::now()));
    auto line = n.process.wait_for_stdout_line("listening on ", left);
    if (!line) {
      std::string why =
          n.process.running()
              ? "no \"listening on\" line in time"
              : "it exited: " + (n.process.status() ? n.process.status()->str() : std::string("?"));
      for (auto& m : nodes_) m->process.kill();
      throw std::runtime_error("ringcast serve " + n.id + " did not start (" + why + ")\n" +
                               output());
    }
    // "ringcast: listening on 127.0.0.1:PORT ..."
    std::string addr = line->substr(line->find("listening on ") + 13);
    addr = addr.substr(0, addr.find(' '));
    size_t colon = addr.rfind(':');
    if (colon == std::string::npos) throw std::runtime_error("cannot parse: " + *line);
    n.port.store(static_cast<uint16_t>(std::stoi(addr.substr(colon + 1))));
  }
  if (nodes_.size() > 1) {
    const auto left =
        std::max(Millis(1), std::chrono::duration_cast<Millis>(deadline - SteadyClock::now()));
    if (!wait_until([&] { return converged() && addresses_known(); }, left, 25ms)) {
      for (auto& m : nodes_) m->process.kill();
      throw std::runtime_error(
          "the cluster's nodes did not take all 256 partitions (or learn each other's "
          "addresses) in time\n" +
          output());
    }
  }
}

bool Daemon::converged() const {
  if (nodes_.size() == 1) return true;
  std::vector<std::pair<std::string, Json>> live;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    Reply r = call_node(i, "GET", "/v1/cluster");
    live.emplace_back(nodes_[i]->id, r.status == 200 ? r.json() : Json());
  }
  return cluster_views_converged(live);
}

bool Daemon::addresses_known() const {
  if (nodes_.size() == 1) return true;
  std::vector<std::set<uint32_t>> owned(nodes_.size());
  for (size_t i = 0; i < nodes_.size(); ++i) {
    Reply r = call_node(i, "GET", "/v1/cluster");
    if (r.status != 200) return false;
    const Json view = r.json();  // (a temporary's member would dangle in the loop)
    for (const Json& o : view["owned"].items())
      owned[i].insert(static_cast<uint32_t>(o["partition"].i64()));
    if (owned[i].empty()) return false;
  }
  for (size_t to = 0; to < nodes_.size(); ++to) {
    std::string tenant;  // one that `to` holds (unknown to it: answered 404 there)
    for (int k = 0; k < 10000 && tenant.empty(); ++k) {
      const std::string t = "address-probe-" + std::to_string(k);
      if (owned[to].count(partition_of(t))) tenant = t;
    }
    if (tenant.empty()) return false;
    for (size_t from = 0; from < nodes_.size(); ++from) {
      if (from == to) continue;
      const Reply r = call_node(from, "GET", "/v1/tenants/" + tenant + "/endpoints");
      if (r.status == 503 && r.body.find("\"owner_unreachable\"") != std::string::npos)
        return false;
    }
  }
  return true;
}

void Daemon::kill9() {
  for (auto& n : nodes_) n->process.kill();
}

test::ExitStatus Daemon::terminate(Millis grace) {
  // SIGTERM to every node at once: one after the other, each would hand its partitions to the
  // next one to stop.
  for (auto& n : nodes_) {
    if (n->process.running()) n->process.signal(SIGTERM);
  }
  const auto deadline = SteadyClock::now() + grace;
  std::optional<test::ExitStatus> first_bad, first;
  for (auto& n : nodes_) {
    const auto left =
        std::max(Millis(0), std::chrono::duration_cast<Millis>(deadline - SteadyClock::now()));
    std::optional<test::ExitStatus> st = n->process.wait(left);
    if (!st) st = n->process.kill();
    if (!first) first = st;
    if (!st->ok() && !first_bad) first_bad = st;
  }
  return first_bad ? *first_bad : *first;
}

bool Daemon::running() {
  for (auto& n : nodes_) {
    if (!n->process.running()) return false;
  }
  return true;
}

std::string Daemon::output(size_t max_per_file) const {
  std::string out;
  for (size_t k = 0; k < nodes_.size(); ++k) {
    for (int i = 1; i <= runs_; ++i) {
      for (const char* ext : {".out", ".err"}) {
        const std::string path = log_file(k, i, ext);
        std::string text = test::read_file(path);
        if (text.size() > max_per_file) {
          text = "...\n" + text.substr(text.size() - max_per_file);
        }
        if (!text.empty()) out += "--- " + path.substr(path.rfind('/') + 1) + "\n" + text;
      }
    }
  }
  return out;
}

Reply Daemon::call(const std::string& method, const std::string& path,
                   const std::string& body) const {
  return call_with_auth(method, path, body, std::string("Bearer ") + kToken);
}

Reply Daemon::call_node(size_t node, const std::string& method, const std::string& path,
                        const std::string& body, const std::optional<std::string>& auth) const {
  std::vector<std::string> headers;
  if (auth) headers.push_back("Authorization: " + *auth);
  if (!body.empty()) {
    headers.push_back(path == "/v1/events/bulk" ? "Content-Type: application/x-ndjson"
                                                : "Content-Type: application/json");
  }
  // 5 s: a healthy daemon answers in milliseconds; a stuck shard must not stall a test for long.
  return http_request(port(node), method, path, body, headers, 5s);
}

Reply Daemon::call_with_auth(const std::string& method, const std::string& path,
                             const std::string& body,
                             const std::optional<std::string>& auth) const {
  if (nodes_.size() == 1) return call_node(0, method, path, body, auth);
  // Intake requests go out at once (a producer does not wait); any other call first waits until
  // the events queued so far are readable.
  if (!(method == "POST" && (path == "/v1/events/bulk" || !events_path_tenant(path).empty())))
    settle();
  Reply r = call_node(0, method, path, body, auth);
  // Endpoint and breaker changes run on the tenant's owner; the others answer 503 not_owner
  // (Retry-After: 1). Like a load balancer, try the next nodes (a few rounds: a partition can
  // be between owners for a moment).
  const auto deadline = SteadyClock::now() + 5s;
  for (size_t k = 1; is_not_owner(r) && SteadyClock::now() < deadline; ++k) {
    if (k % nodes_.size() == 0) std::this_thread::sleep_for(50ms);
    r = call_node(k % nodes_.size(), method, path, body, auth);
  }
  if (method == "POST" && (r.status == 200 || r.status == 202)) note_queued(path, body, r);
  return r;
}

void Daemon::note_queued(const std::string& path, const std::string& body, const Reply& r) const {
  std::vector<std::pair<std::string, std::string>> queued;  // tenant, event id
  if (path == "/v1/events/bulk") {
    std::vector<std::string> lines;
    std::istringstream in(body);
    for (std::string l; std::getline(in, l);) lines.push_back(l);
    const Json answer = r.json();  // (a temporary's member would dangle in the loop)
    for (const Json& res : answer["results"].items()) {
      if (!res["queued"].boolean()) continue;
      const size_t line = static_cast<size_t>(res["line"].i64());
      if (line == 0 || line > lines.size()) continue;
      queued.emplace_back(Json::parse(lines[line - 1])["tenant"].str(), res["event_id"].str());
    }
  } else if (const std::string tenant = events_path_tenant(path); !tenant.empty()) {
    Json j = r.json();
    if (j["queued"].boolean()) queued.emplace_back(tenant, j["event_id"].str());
  }
  std::lock_guard<std::mutex> lock(queued_mu_);
  queued_.insert(queued_.end(), queued.begin(), queued.end());
}

void Daemon::settle() const {
  std::vector<std::pair<std::string, std::string>> queued;
  {
    std::lock_guard<std::mutex> lock(queued_mu_);
    queued.swap(queued_);
  }
  if (queued.empty()) return;
  // The owner polls its inboxes every 100 ms (cluster.inbox_poll): 10 s is a hundred polls.
  const auto deadline = SteadyClock::now() + scaled(10s);
  for (const auto& [tenant, id] : queued) {
    Reply r;
    for (;;) {
      r = call_node(0, "GET", "/v1/tenants/" + tenant + "/events/" + id);
      if (r.status == 200 || SteadyClock::now() >= deadline) break;
      std::this_thread::sleep_for(10ms);
    }
    if (r.status != 200) {
      ADD_FAILURE() << "event " << id << " of tenant " << tenant
                    << " was queued (202 \"queued\": true) and never taken in by its partition's "
                       "owner within 10 s: GET answered "
                    << r.describe() << "\n"
                    << output();
      return;
    }
  }
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

std::string endpoint_with_policy(const Daemon& d, const std::string& tenant, const std::string& url,
                                 const std::string& policy) {
  Reply r =
      create_endpoint(d, tenant, "{\"url\":" + quote(url) + ",\"policy\":" + quote(policy) + "}");
  EXPECT_EQ(r.status, 201) << r.describe();
  return r.json()["id"].str();
}

bool delivery_ended(const Json& detail) {
  const std::string& s = detail["delivery"]["status"].str();
  return s == "delivered" || s == "failed" || s == "dead" || s == "unknown";
}

Json wait_delivery(const Daemon& d, const std::string& tenant, const std::string& endpoint_id,
                   const std::string& event_id, const std::function<bool(const Json&)>& pred,
                   Millis timeout) {
  Json last;
  wait_until(
      [&] {
        last = delivery_for_event(d, tenant, endpoint_id, event_id);
        return last.is_object() && pred(last);
      },
      timeout, 25ms);
  return last;
}

std::vector<std::string> history_kinds(const Json& detail) {
  std::vector<std::string> out;
  for (const Json& a : detail["attempts"].items()) out.push_back(a["kind"].str());
  return out;
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
  for (size_t node = 0; node < d.nodes(); ++node) {
    Reply r = d.call_node(node, "GET", "/metrics", "", std::string("Bearer ") + Daemon::kToken);
    if (r.status != 200) continue;
    std::istringstream in(r.body);
    std::string line;
    while (std::getline(in, line)) {
      if (line.empty() || line[0] == '#') continue;
      // The value follows the last space; label values never hold one in ringcast's metrics.
      const size_t sp = line.rfind(' ');
      if (sp == std::string::npos || sp == 0) continue;
      out[line.substr(0, sp)] += std::strtod(line.c_str() + sp + 1, nullptr);
    }
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

int64_t deliveries_made(const Daemon& d, const std::string& tenant, const std::string& event_id,
                        const Reply& intake_answer) {
  if (intake_answer.status != 200 && intake_answer.status != 202) return -1;
  const Json a = intake_answer.json();
  if (!a["queued"].boolean()) return a["deliveries"].i64();
  // Queued: d.call() first waits until the owner took it in (one batch: the event and its
  // deliveries), so the log has them all.
  Reply r = d.call("GET", "/v1/tenants/" + tenant + "/deliveries?limit=1000");
  if (r.status != 200) return -1;
  int64_t n = 0;
  const Json list = r.json();  // (a temporary's member would dangle in the loop)
  for (const Json& del : list["deliveries"].items()) n += del["event_id"].str() == event_id;
  return n;
}

bool cluster_views_converged(const std::vector<std::pair<std::string, Json>>& live) {
  uint32_t total = 0;
  for (const auto& [id, v] : live) {
    if (!v.is_object() || !v["synced"].boolean() || v["releasing"].i64() != 0) return false;
    const uint32_t owned = static_cast<uint32_t>(v["owned_count"].i64());
    uint32_t assigned = 0;
    size_t members = 0;
    for (const Json& m : v["members"].items()) {
      ++members;
      if (m["node_id"].str() == id) assigned = static_cast<uint32_t>(m["assigned"].i64());
    }
    if (members != live.size() || owned != assigned) return false;
    total += owned;
  }
  return !live.empty() && total == kPartitionCount;
}

std::string sample(const std::vector<std::string>& ids, size_t n) {
  std::string out;
  for (size_t i = 0; i < ids.size() && i < n; ++i) out += (i ? ", " : "") + ids[i];
  if (ids.size() > n) out += ", ... (" + std::to_string(ids.size()) + " in all)";
  return out;
}

}  // namespace ringcast::e2e
