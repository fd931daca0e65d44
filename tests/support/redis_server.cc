#include "tests/support/redis_server.h"

#include <arpa/inet.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <thread>
#include <tuple>

namespace ringcast::test {
namespace {

using SteadyClock = std::chrono::steady_clock;

timeval to_timeval(std::chrono::milliseconds ms) {
  return timeval{static_cast<time_t>(ms.count() / 1000),
                 static_cast<suseconds_t>((ms.count() % 1000) * 1000)};
}

SyncReply convert(const redisReply* r) {
  SyncReply s;
  switch (r->type) {
    case REDIS_REPLY_INTEGER:
      s.type = SyncReply::Type::kInteger;
      s.integer = r->integer;
      break;
    case REDIS_REPLY_STATUS:
      s.type = SyncReply::Type::kStatus;
      s.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_STRING:
      s.type = SyncReply::Type::kString;
      s.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_ERROR:
      s.type = SyncReply::Type::kError;
      s.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_ARRAY:
      s.type = SyncReply::Type::kArray;
      for (size_t i = 0; i < r->elements; ++i) s.elements.push_back(convert(r->element[i]));
      break;
    default:
      break;
  }
  return s;
}

struct Ctx {
  redisContext* c = nullptr;
  ~Ctx() {
    if (c != nullptr) redisFree(c);
  }
};

// Connects and AUTHs; nullptr-free context or an exception.
void open(Ctx& ctx, const std::string& host, uint16_t port, const std::string& password,
          std::chrono::milliseconds timeout) {
  ctx.c = redisConnectWithTimeout(host.c_str(), port, to_timeval(timeout));
  if (ctx.c == nullptr || ctx.c->err != 0) {
    throw std::runtime_error("redis test client: cannot connect to " + host + ":" +
                             std::to_string(port) + ": " + (ctx.c ? ctx.c->errstr : "oom"));
  }
  redisSetTimeout(ctx.c, to_timeval(timeout));
  if (!password.empty()) {
    auto* r =
        static_cast<redisReply*>(redisCommand(ctx.c, "AUTH %b", password.data(), password.size()));
    if (r == nullptr) throw std::runtime_error("redis test client: AUTH failed (I/O)");
    freeReplyObject(r);
  }
}

SyncReply run(Ctx& ctx, const std::vector<std::string>& args) {
  std::vector<const char*> argv;
  std::vector<size_t> lens;
  for (const auto& a : args) {
    argv.push_back(a.data());
    lens.push_back(a.size());
  }
  auto* r = static_cast<redisReply*>(
      redisCommandArgv(ctx.c, static_cast<int>(args.size()), argv.data(), lens.data()));
  if (r == nullptr) {
    throw std::runtime_error(std::string("redis test client: ") + ctx.c->errstr + " running " +
                             (args.empty() ? "" : args[0]));
  }
  SyncReply s = convert(r);
  freeReplyObject(r);
  return s;
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
  if (!out) throw std::runtime_error("cannot write " + path);
}

}  // namespace

namespace {

bool port_free(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  ::close(fd);
  return ok;
}

// A cluster node also listens on its port + 10000 (the cluster bus), so Redis refuses a port
// above 55535; the kernel's ephemeral ports go up to 60999. Take a free port whose bus port is
// free too.
uint16_t free_cluster_port() {
  constexpr uint16_t kBusOffset = 10000;
  constexpr uint16_t kMaxPort = 65535 - kBusOffset;
  for (int i = 0; i < 1000; ++i) {
    const uint16_t p = free_tcp_port();
    if (p <= kMaxPort && port_free(static_cast<uint16_t>(p + kBusOffset))) return p;
  }
  throw std::runtime_error("no free port pair (port, port + 10000) for a cluster node");
}

}  // namespace

bool RedisServer::available() {
  return ::access(kBinary, X_OK) == 0;
}

std::unique_ptr<RedisServer> RedisServer::start(const std::string& dir,
                                                const RedisServerOptions& options,
                                                std::chrono::milliseconds timeout) {
  if (!available())
    throw std::runtime_error("redis-server is not installed (tools/install-deps.sh)");
  std::unique_ptr<RedisServer> s(new RedisServer());
  s->dir_ = dir;
  s->options_ = options;
  // Redis has no "port 0": take a port that was free a moment ago, retry if the bind races.
  for (int attempt = 0; attempt < 5; ++attempt) {
    s->port_ = options.cluster ? free_cluster_port() : free_tcp_port();
    if (options.tls) {
      // With tls-cluster the bus is at the TLS port + 10000: that one must be a cluster port.
      do {
        s->tls_port_ = options.cluster ? free_cluster_port() : free_tcp_port();
      } while (s->tls_port_ == s->port_);
    }
    s->launch();
    if (s->wait_ready(timeout)) return s;
    s->process_.kill();
  }
  throw std::runtime_error("redis-server did not start: " + s->log());
}

RedisServer::~RedisServer() {
  if (process_.pid() > 0) {
    resume();  // a stopped process does not act on SIGTERM
    process_.stop(std::chrono::seconds(2));
  }
}

void RedisServer::launch() {
  std::string c;
  c += "bind 127.0.0.1\n";
  c += "port " + std::to_string(port_) + "\n";
  c += "dir " + dir_ + "\n";
  c += "daemonize no\n";
  c += "save \"\"\n";
  c += "logfile " + dir_ + "/redis.log\n";
  c += "appendonly " + std::string(options_.appendonly ? "yes" : "no") + "\n";
  if (options_.appendonly) c += "appendfsync always\n";
  if (!options_.requirepass.empty()) c += "requirepass " + options_.requirepass + "\n";
  if (options_.cluster) {
    c += "cluster-enabled yes\n";
    c += "cluster-config-file " + dir_ + "/nodes.conf\n";
    c += "cluster-node-timeout 1000\n";
    c += "cluster-require-full-coverage no\n";
  }
  if (options_.tls) {
    const RedisServerTls& t = *options_.tls;
    c += "tls-port " + std::to_string(tls_port_) + "\n";
    c += "tls-cert-file " + t.cert_file + "\n";
    c += "tls-key-file " + t.key_file + "\n";
    c += "tls-ca-cert-file " + t.ca_file + "\n";
    c += "tls-auth-clients " + std::string(t.auth_clients ? "yes" : "no") + "\n";
    if (t.cluster) c += "tls-cluster yes\n";
    if (t.replication) c += "tls-replication yes\n";
  }
  for (const auto& line : options_.extra_config) c += line + "\n";
  const std::string conf = dir_ + "/redis.conf";
  write_text(conf, c);
  ProcessOptions po;
  po.stdout_path = dir_ + "/redis.stdout";
  po.stderr_path = dir_ + "/redis.stderr";
  po.cwd = dir_;
  process_ = Process::start({kBinary, conf}, po);
  generation_++;
}

bool RedisServer::wait_ready(std::chrono::milliseconds timeout) {
  const auto deadline = SteadyClock::now() + timeout;
  while (SteadyClock::now() < deadline) {
    if (!process_.running()) return false;
    try {
      SyncReply r = cmd({"PING"}, std::chrono::milliseconds(200));
      if (r.type == SyncReply::Type::kStatus && r.str == "PONG") return true;
    } catch (const std::runtime_error&) {
      // not listening yet
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

void RedisServer::stop(std::chrono::milliseconds grace) {
  resume();
  process_.stop(grace);
}

void RedisServer::restart(std::chrono::milliseconds timeout) {
  if (process_.running()) stop();
  launch();
  if (!wait_ready(timeout)) throw std::runtime_error("redis-server did not restart: " + log());
}

void RedisServer::pause() {
  process_.signal(SIGSTOP);
  // SIGSTOP is asynchronous: wait (bounded) until the kernel reports the process stopped, so
  // that nothing sent after pause() is answered.
  const std::string stat = "/proc/" + std::to_string(process_.pid()) + "/stat";
  const auto deadline = SteadyClock::now() + std::chrono::seconds(2);
  while (SteadyClock::now() < deadline) {
    const std::string s = read_file(stat);
    const size_t paren = s.rfind(')');
    if (paren != std::string::npos && paren + 2 < s.size() && s[paren + 2] == 'T') return;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}
void RedisServer::resume() {
  process_.signal(SIGCONT);
}
void RedisServer::kill() {
  resume();
  process_.kill();
}

long long RedisServer::calls(const std::string& command) const {
  const std::string info = cmd({"INFO", "commandstats"}).str;
  const std::string key = "cmdstat_" + command + ":calls=";
  const size_t at = info.find(key);
  return at == std::string::npos ? 0 : std::stoll(info.substr(at + key.size()));
}

int RedisServer::clients_on_port(uint16_t port) const {
  const std::string list = cmd({"CLIENT", "LIST"}).str;
  std::string needle = "laddr=127.0.0.1:";
  needle += std::to_string(port);
  needle += ' ';
  int n = 0;
  for (size_t at = list.find(needle); at != std::string::npos; at = list.find(needle, at + 1)) n++;
  return n;
}

SyncReply RedisServer::cmd(const std::vector<std::string>& args,
                           std::chrono::milliseconds timeout) const {
  Ctx ctx;
  open(ctx, host_, port_, options_.requirepass, timeout);
  return run(ctx, args);
}

std::vector<SyncReply> RedisServer::cmds(const std::vector<std::vector<std::string>>& commands,
                                         std::chrono::milliseconds timeout) const {
  Ctx ctx;
  open(ctx, host_, port_, options_.requirepass, timeout);
  std::vector<SyncReply> out;
  for (const auto& c : commands) out.push_back(run(ctx, c));
  return out;
}

std::string RedisServer::log() const {
  return read_file(dir_ + "/redis.log");
}

// --- RedisCluster --------------------------------------------------------------------------------

namespace {

// The port CLUSTER MEET is given: the node's announced one, TLS with tls-cluster yes (the bus
// is that port + 10000).
uint16_t meet_port(const RedisServer& s, const std::optional<RedisServerTls>& tls) {
  return tls && tls->cluster ? s.tls_port() : s.port();
}

}  // namespace

std::unique_ptr<RedisCluster> RedisCluster::start(const std::string& dir, int primaries,
                                                  std::chrono::milliseconds timeout,
                                                  const std::optional<RedisServerTls>& tls) {
  auto c = std::make_unique<RedisCluster>();
  RedisServerOptions o;
  o.cluster = true;
  o.tls = tls;
  c->tls_cluster_ = tls && tls->cluster;
  for (int i = 0; i < primaries; ++i) {
    const std::string d = dir + "/node-" + std::to_string(i);
    if (::mkdir(d.c_str(), 0755) != 0 && errno != EEXIST) {
      throw std::runtime_error("cannot create " + d);
    }
    c->nodes_.push_back(RedisServer::start(d, o));
  }
  const int n = primaries;
  for (int i = 0; i < n; ++i) {
    const int lo = 16384 * i / n;
    const int hi = 16384 * (i + 1) / n - 1;
    RedisServer& s = *c->nodes_[static_cast<size_t>(i)];
    SyncReply r = s.cmd({"CLUSTER", "ADDSLOTSRANGE", std::to_string(lo), std::to_string(hi)});
    if (r.is_error()) throw std::runtime_error("ADDSLOTSRANGE: " + r.str);
    r = s.cmd({"CLUSTER", "SET-CONFIG-EPOCH", std::to_string(i + 1)});
    if (r.is_error()) throw std::runtime_error("SET-CONFIG-EPOCH: " + r.str);
    c->ids_.push_back(s.cmd({"CLUSTER", "MYID"}).str);
  }
  for (int i = 1; i < n; ++i) {
    SyncReply r =
        c->nodes_[0]->cmd({"CLUSTER", "MEET", "127.0.0.1",
                           std::to_string(meet_port(*c->nodes_[static_cast<size_t>(i)], tls))});
    if (r.is_error()) throw std::runtime_error("MEET: " + r.str);
  }
  if (!c->wait_consistent(timeout)) {
    throw std::runtime_error("cluster did not converge: " + c->nodes_[0]->log());
  }
  return c;
}

std::unique_ptr<RedisCluster> RedisCluster::start(const std::string& dir,
                                                  const RedisClusterOptions& options) {
  auto c = start(dir, options.primaries, options.timeout, options.tls);
  if (options.replicas_per_primary <= 0) return c;
  const auto deadline = SteadyClock::now() + options.timeout;
  for (const auto& n : c->nodes_) n->cmd({"CONFIG", "SET", "repl-diskless-sync-delay", "0"});
  RedisServerOptions o;
  o.cluster = true;
  o.extra_config = {"repl-diskless-sync yes", "repl-diskless-sync-delay 0"};
  o.tls = options.tls;
  std::vector<std::pair<size_t, size_t>> replicas;  // (replica index, primary index)
  for (int i = 0; i < options.primaries; ++i) {
    for (int r = 0; r < options.replicas_per_primary; ++r) {
      const std::string d = dir + "/replica-" + std::to_string(i) + "-" + std::to_string(r);
      if (::mkdir(d.c_str(), 0755) != 0 && errno != EEXIST) {
        throw std::runtime_error("cannot create " + d);
      }
      c->nodes_.push_back(RedisServer::start(d, o));
      RedisServer& s = *c->nodes_.back();
      c->ids_.push_back(s.cmd({"CLUSTER", "MYID"}).str);
      SyncReply m = s.cmd(
          {"CLUSTER", "MEET", "127.0.0.1", std::to_string(meet_port(*c->nodes_[0], options.tls))});
      if (m.is_error()) throw std::runtime_error("MEET: " + m.str);
      replicas.emplace_back(c->nodes_.size() - 1, static_cast<size_t>(i));
    }
  }
  // REPLICATE needs the replica to know its primary (gossip), so it is retried until then.
  for (const auto& [ri, pi] : replicas) {
    for (;;) {
      SyncReply r = c->nodes_[ri]->cmd({"CLUSTER", "REPLICATE", c->ids_[pi]});
      if (!r.is_error()) break;
      if (SteadyClock::now() > deadline) throw std::runtime_error("REPLICATE: " + r.str);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  for (const auto& [ri, pi] : replicas) {
    (void)pi;
    for (;;) {
      const std::string info = c->nodes_[ri]->cmd({"INFO", "replication"}).str;
      if (info.find("master_link_status:up") != std::string::npos) break;
      if (SteadyClock::now() > deadline) {
        throw std::runtime_error("replica did not sync: " + c->nodes_[ri]->log());
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  if (!c->wait_consistent(
          deadline - SteadyClock::now() > std::chrono::milliseconds(0)
              ? std::chrono::duration_cast<std::chrono::milliseconds>(deadline - SteadyClock::now())
              : std::chrono::milliseconds(0))) {
    throw std::runtime_error("cluster with replicas did not converge: " + c->nodes_[0]->log());
  }
  return c;
}

namespace {

// The integer after `field` (e.g. "master_repl_offset:") in an INFO text; -1 if absent.
long long info_integer(const std::string& info, const std::string& field, size_t from = 0) {
  const size_t at = info.find(field, from);
  if (at == std::string::npos) return -1;
  return std::atoll(info.c_str() + at + field.size());
}

}  // namespace

bool RedisCluster::wait_replicated(size_t primary, std::chrono::milliseconds timeout) {
  const auto deadline = SteadyClock::now() + timeout;
  const long long target =
      info_integer(nodes_[primary]->cmd({"INFO", "replication"}).str, "master_repl_offset:");
  if (target < 0) return false;
  for (;;) {
    const std::string info = nodes_[primary]->cmd({"INFO", "replication"}).str;
    const long long replicas = info_integer(info, "connected_slaves:");
    bool ok = replicas > 0;
    for (long long i = 0; ok && i < replicas; ++i) {
      const std::string line = "slave" + std::to_string(i) + ":";
      const size_t at = info.find(line);
      ok = at != std::string::npos && info_integer(info, "offset=", at) >= target;
    }
    if (ok) return true;
    if (SteadyClock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

std::vector<std::string> RedisCluster::addresses() const {
  std::vector<std::string> out;
  for (const auto& n : nodes_) out.push_back(n->address());
  return out;
}

std::vector<std::string> RedisCluster::tls_addresses() const {
  std::vector<std::string> out;
  for (const auto& n : nodes_) out.push_back(n->tls_address());
  return out;
}

std::string RedisCluster::node_id(size_t i) const {
  return ids_[i];
}

SlotRanges slot_ranges(const SyncReply& r) {
  SlotRanges out;
  for (const auto& e : r.elements) {
    if (e.elements.size() < 3 || e.elements[2].elements.size() < 2) continue;
    out.emplace_back(e.elements[0].integer, e.elements[1].integer,
                     e.elements[2].elements[1].integer);
  }
  std::sort(out.begin(), out.end());
  return out;
}

int RedisCluster::owner_of(int slot) const {
  for (const auto& [lo, hi, port] : slot_ranges(nodes_[0]->cmd({"CLUSTER", "SLOTS"}))) {
    if (slot < lo || slot > hi) continue;
    for (size_t i = 0; i < nodes_.size(); ++i) {
      if (nodes_[i]->port() == port) return static_cast<int>(i);
    }
  }
  return -1;
}

int RedisCluster::key_slot(const std::string& key) const {
  return static_cast<int>(nodes_[0]->cmd({"CLUSTER", "KEYSLOT", key}).integer);
}

bool RedisCluster::wait_consistent(std::chrono::milliseconds timeout) {
  const auto deadline = SteadyClock::now() + timeout;
  const std::string known = "cluster_known_nodes:" + std::to_string(nodes_.size());
  while (SteadyClock::now() < deadline) {
    bool ok = true;
    std::vector<std::tuple<long long, long long, long long>> first;
    for (size_t i = 0; i < nodes_.size() && ok; ++i) {
      const std::string info = nodes_[i]->cmd({"CLUSTER", "INFO"}).str;
      ok = info.find("cluster_state:ok") != std::string::npos &&
           info.find(known) != std::string::npos;
      if (!ok) break;
      auto ranges = slot_ranges(nodes_[i]->cmd({"CLUSTER", "SLOTS"}));
      if (i == 0) {
        first = ranges;
      } else {
        ok = ranges == first;
      }
    }
    if (ok) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

bool RedisCluster::wait_failover(size_t dead, std::chrono::milliseconds timeout) {
  const auto deadline = SteadyClock::now() + timeout;
  const long long dead_port = nodes_[dead]->port();
  while (SteadyClock::now() < deadline) {
    bool ok = true;
    bool have_first = false;
    std::vector<std::tuple<long long, long long, long long>> first;
    try {
      for (size_t i = 0; i < nodes_.size() && ok; ++i) {
        if (i == dead) continue;
        const std::string info =
            nodes_[i]->cmd({"CLUSTER", "INFO"}, std::chrono::milliseconds(500)).str;
        ok = info.find("cluster_state:ok") != std::string::npos;
        if (!ok) break;
        auto ranges = slot_ranges(nodes_[i]->cmd({"CLUSTER", "SLOTS"}));
        long long covered = 0;
        for (const auto& [lo, hi, port] : ranges) {
          covered += hi - lo + 1;
          if (port == dead_port) ok = false;
        }
        ok = ok && covered == 16384;
        if (!have_first) {
          first = ranges;
          have_first = true;
        } else {
          ok = ok && ranges == first;
        }
      }
    } catch (const std::runtime_error&) {
      ok = false;  // a node not answering yet
    }
    if (ok) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

void RedisCluster::begin_migration(int slot, size_t from, size_t to) {
  SyncReply r =
      nodes_[to]->cmd({"CLUSTER", "SETSLOT", std::to_string(slot), "IMPORTING", ids_[from]});
  if (r.is_error()) throw std::runtime_error("SETSLOT IMPORTING: " + r.str);
  r = nodes_[from]->cmd({"CLUSTER", "SETSLOT", std::to_string(slot), "MIGRATING", ids_[to]});
  if (r.is_error()) throw std::runtime_error("SETSLOT MIGRATING: " + r.str);
}

void RedisCluster::migrate_keys(int slot, size_t from, size_t to,
                                const std::vector<std::string>& keys) {
  (void)slot;
  if (keys.empty()) return;
  // With tls-cluster yes MIGRATE connects over TLS: the target's TLS port.
  const uint16_t port = tls_cluster_ ? nodes_[to]->tls_port() : nodes_[to]->port();
  std::vector<std::string> args{
      "MIGRATE", nodes_[to]->host(), std::to_string(port), "", "0", "5000", "KEYS"};
  args.insert(args.end(), keys.begin(), keys.end());
  SyncReply r = nodes_[from]->cmd(args);
  if (r.is_error()) throw std::runtime_error("MIGRATE: " + r.str);
}

void RedisCluster::finish_migration(int slot, size_t to) {
  std::vector<size_t> order{to};
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (i != to) order.push_back(i);
  }
  for (size_t i : order) {
    SyncReply r = nodes_[i]->cmd({"CLUSTER", "SETSLOT", std::to_string(slot), "NODE", ids_[to]});
    if (r.is_error()) throw std::runtime_error("SETSLOT NODE: " + r.str);
  }
}

}  // namespace ringcast::test
