// End to end: ringcast-kafka-bridge (docs/operations.md §6, "Kafka bridge") with real processes — a
// librdkafka mock cluster (ringcast-kafka-mock: its brokers are loopback listeners), the bridge,
// the daemon(s) and a receiver. This test binary links BoringSSL through the e2e support, so it
// never links librdkafka: the mock cluster lives in its own process and is driven over HTTP.
// Records are delivered once and byte for byte; every permanent refusal ends on the dead-letter
// topic with its reason and the bridge commits past it; a bridge SIGKILLed mid-stream, a daemon
// SIGKILLed mid-stream and a rebalance between two bridges lose nothing (re-reads come back from
// ringcast as duplicates, SPEC R12.5).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/e2e/daemon.h"

namespace ringcast::e2e {
namespace {

using test::SinkProcess;
using test::TempDir;

constexpr const char* kTenant = "kafka-tenant";
constexpr const char* kGroup = "e2e-bridge";
constexpr const char* kSecret = "whsec_ZTJlLWthZmthLWJyaWRnZS1zZWNyZXQta2V5LTE=";

std::string kafka_binary(const char* name) {
  std::string p = RINGCAST_BINARY_DIR;
  p += "/bridge/kafka/";
  p += name;
  return p;
}

bool bridge_built() {
#ifdef RINGCAST_KAFKA_BRIDGE_BUILT
  return true;
#else
  return false;
#endif
}

#define RINGCAST_NEEDS_KAFKA_BRIDGE()                                                \
  do {                                                                               \
    if (!bridge_built())                                                             \
      GTEST_SKIP() << "ringcast-kafka-bridge is not built (librdkafka-dev missing: " \
                      "tools/install-deps.sh, RINGCAST_BUILD_KAFKA_BRIDGE)";         \
  } while (0)

// Lines of an NDJSON text.
std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) {
    if (!l.empty()) out.push_back(l);
  }
  return out;
}

// --- the mock cluster ---------------------------------------------------------------------------

struct Record {
  int partition = 0;
  std::string value;
  bool tombstone = false;
  std::vector<std::pair<std::string, std::string>> headers;
};

// The producer side of a test record: headers mode (tenant, id, type, ordering key in headers).
Record event_record(int partition, const std::string& id, const std::string& payload,
                    const std::string& tenant = kTenant, const std::string& ordering_key = "") {
  Record r;
  r.partition = partition;
  r.value = payload;
  if (!tenant.empty()) r.headers.emplace_back("tenant", tenant);
  r.headers.emplace_back("id", id);
  r.headers.emplace_back("type", "order.paid");
  if (!ordering_key.empty()) r.headers.emplace_back("ordering_key", ordering_key);
  return r;
}

struct KafkaMock {
  test::Process process;
  std::string bootstrap;
  uint16_t port = 0;

  // Starts ringcast-kafka-mock with 3 brokers and `topics` ("name:partitions").
  void start(const TempDir& dir, const std::vector<std::string>& topics) {
    std::vector<std::string> argv{kafka_binary("ringcast-kafka-mock"), "--brokers", "3"};
    for (const auto& t : topics) {
      argv.push_back("--topic");
      argv.push_back(t);
    }
    test::ProcessOptions po;
    po.stdout_path = dir.file("kafka-mock.out");
    po.stderr_path = dir.file("kafka-mock.err");
    process = test::Process::start(argv, po);
    auto line = process.wait_for_stdout_line("listening on ", scaled(20s));
    if (!line) throw std::runtime_error("ringcast-kafka-mock did not start");
    port = static_cast<uint16_t>(std::stoi(line->substr(line->rfind(':') + 1)));
    auto b = process.wait_for_stdout_line("bootstrap ", 1s);
    if (!b) throw std::runtime_error("ringcast-kafka-mock printed no bootstrap line");
    bootstrap = b->substr(b->find(' ') + 1);
    while (!bootstrap.empty() && (bootstrap.back() == '\n' || bootstrap.back() == '\r'))
      bootstrap.pop_back();
  }

  // Produces `records` to `topic` in order (acks=all); fails the test on an error.
  void produce(const std::string& topic, const std::vector<Record>& records) {
    for (size_t at = 0; at < records.size(); at += 2000) {
      std::string body;
      for (size_t i = at; i < std::min(records.size(), at + 2000); ++i) {
        const Record& r = records[i];
        body += "{\"partition\":";
        body += std::to_string(r.partition);
        body += ",\"value\":";
        body += r.tombstone ? std::string("null") : quote(r.value);
        body += ",\"headers\":[";
        for (size_t h = 0; h < r.headers.size(); ++h) {
          if (h) body += ',';
          body += '[';
          body += quote(r.headers[h].first);
          body += ',';
          body += quote(r.headers[h].second);
          body += ']';
        }
        body += "]}\n";
      }
      Reply rep = http_request(port, "POST", "/produce?topic=" + topic, body, {}, 60s);
      ASSERT_EQ(rep.status, 200) << rep.describe();
    }
  }

  // Every record of `topic` as the mock reads it back ({"partition","offset","key","value",
  // "headers":[[name,value]...]}).
  std::vector<Json> records(const std::string& topic) const {
    Reply rep = http_request(port, "GET", "/records?topic=" + topic, "", {}, 60s);
    std::vector<Json> out;
    if (rep.status != 200) return out;
    for (const auto& l : lines_of(rep.body)) out.push_back(Json::parse(l));
    return out;
  }

  // partition → {committed offset of `group`, high watermark}.
  std::map<int64_t, std::pair<int64_t, int64_t>> committed(
      const std::string& topic, const std::string& group = kGroup) const {
    std::map<int64_t, std::pair<int64_t, int64_t>> out;
    Reply rep =
        http_request(port, "GET", "/committed?group=" + group + "&topic=" + topic, "", {}, 20s);
    if (rep.status != 200) return out;
    Json j = rep.json();
    for (const Json& p : j["partitions"].items()) {
      out[p["partition"].i64()] = {p["committed"].i64(), p["high"].i64()};
    }
    return out;
  }

  // True once the group's committed offset is the high watermark on every partition of `topic`.
  bool all_committed(const std::string& topic, std::string* why = nullptr) const {
    auto c = committed(topic);
    if (c.empty()) {
      if (why) *why = "no answer";
      return false;
    }
    bool ok = true;
    std::string w;
    for (const auto& [p, ch] : c) {
      w += "p" + std::to_string(p) + " " + std::to_string(ch.first) + "/" +
           std::to_string(ch.second) + " ";
      if (ch.second > 0 && ch.first != ch.second) ok = false;
    }
    if (why) *why = w;
    return ok;
  }
};

// The value of the last header `name` of a record read back ("" when absent).
std::string header(const Json& rec, const std::string& name) {
  std::string v;
  for (const Json& h : rec["headers"].items()) {
    if (h[0].str() == name) v = h[1].str();
  }
  return v;
}

// --- a forwarder, so that the bridge keeps one URL across daemon restarts ----------------------

// A listening TCP socket on 127.0.0.1 and a port of its own: its port; `fd` gets the socket.
uint16_t listen_loopback(const char* who, int& fd) {
  fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd, 64) != 0) {
    std::string why = who;
    why += ": cannot listen";
    throw std::runtime_error(why);
  }
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  return ntohs(a.sin_port);
}

// Accepts on a loopback port of its own and pipes each connection to the daemon's current port
// (a restarted daemon listens on a new one); a connection it cannot pass on is closed at once, as
// a daemon that is down would refuse it.
class Forwarder {
 public:
  explicit Forwarder(std::function<uint16_t()> target) : target_(std::move(target)) {
    port_ = listen_loopback("forwarder", listen_fd_);
    accept_thread_ = std::thread([this] { accept_loop(); });
  }
  ~Forwarder() {
    stop_.store(true);
    ::shutdown(listen_fd_, SHUT_RDWR);
    accept_thread_.join();
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (int fd : open_) ::shutdown(fd, SHUT_RDWR);
    }
    for (auto& t : pipes_) t.join();
    ::close(listen_fd_);
  }
  uint16_t port() const { return port_; }
  // Cuts every connection now (the daemon's SIGKILL cuts its side; this cuts the bridge's).
  void cut_all() {
    std::lock_guard<std::mutex> lock(mu_);
    for (int fd : open_) ::shutdown(fd, SHUT_RDWR);
  }

 private:
  void accept_loop() {
    while (!stop_.load()) {
      pollfd p{listen_fd_, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      int client = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (client < 0) continue;
      int server = open_connection(target_());
      if (server < 0) {
        ::close(client);
        continue;
      }
      timeval none{0, 0};  // open_connection sets 5 s timeouts: a pipe waits on poll instead
      ::setsockopt(server, SOL_SOCKET, SO_RCVTIMEO, &none, sizeof none);
      ::setsockopt(server, SOL_SOCKET, SO_SNDTIMEO, &none, sizeof none);
      {
        std::lock_guard<std::mutex> lock(mu_);
        open_.insert(client);
        open_.insert(server);
      }
      pipes_.emplace_back([this, client, server] { pipe(client, server); });
    }
  }
  void pipe(int a, int b) {
    char buf[65536];
    bool open = true;
    while (open && !stop_.load()) {
      pollfd p[2] = {{a, POLLIN, 0}, {b, POLLIN, 0}};
      if (::poll(p, 2, 200) <= 0) continue;
      for (int i = 0; i < 2 && open; ++i) {
        if (p[i].revents == 0) continue;
        const int from = i == 0 ? a : b;
        const int to = i == 0 ? b : a;
        ssize_t n = ::recv(from, buf, sizeof buf, 0);
        if (n <= 0) {
          open = false;
          break;
        }
        for (ssize_t off = 0; off < n;) {
          ssize_t w = ::send(to, buf + off, static_cast<size_t>(n - off), MSG_NOSIGNAL);
          if (w <= 0) {
            open = false;
            break;
          }
          off += w;
        }
      }
    }
    std::lock_guard<std::mutex> lock(mu_);
    open_.erase(a);
    open_.erase(b);
    ::close(a);
    ::close(b);
  }

  std::function<uint16_t()> target_;
  int listen_fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread accept_thread_;
  std::vector<std::thread> pipes_;  // only the accept thread adds; joined after it ended
  std::mutex mu_;
  std::set<int> open_;
};

// --- a receiver that keeps every body ----------------------------------------------------------

// Answers every POST 200 and keeps (webhook-id, body) of each: what a receiver really got.
class BodyReceiver {
 public:
  BodyReceiver() {
    port_ = listen_loopback("receiver", listen_fd_);
    accept_thread_ = std::thread([this] { accept_loop(); });
  }
  ~BodyReceiver() {
    stop_.store(true);
    ::shutdown(listen_fd_, SHUT_RDWR);
    accept_thread_.join();
    for (auto& t : conns_) t.join();
    ::close(listen_fd_);
  }
  std::string url() const {
    std::string u = "http://127.0.0.1:";
    u += std::to_string(port_);
    u += "/hooks";
    return u;
  }
  // webhook-id → every body received with it.
  std::map<std::string, std::vector<std::string>> bodies() const {
    std::lock_guard<std::mutex> lock(mu_);
    return bodies_;
  }
  size_t requests() const {
    std::lock_guard<std::mutex> lock(mu_);
    return requests_;
  }

 private:
  void accept_loop() {
    while (!stop_.load()) {
      pollfd p{listen_fd_, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd >= 0) conns_.emplace_back([this, fd] { serve(fd); });
    }
  }
  void serve(int fd) {
    std::string in;
    char buf[65536];
    while (!stop_.load()) {
      size_t head_end;
      while ((head_end = in.find("\r\n\r\n")) == std::string::npos) {
        pollfd p{fd, POLLIN, 0};
        if (stop_.load()) break;
        if (::poll(&p, 1, 100) <= 0) continue;
        ssize_t n = ::recv(fd, buf, sizeof buf, 0);
        if (n <= 0) {
          ::close(fd);
          return;
        }
        in.append(buf, static_cast<size_t>(n));
      }
      if (head_end == std::string::npos) break;
      std::string head = in.substr(0, head_end);
      std::string lower = head;
      for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      size_t length = 0;
      size_t cl = lower.find("\r\ncontent-length:");
      if (cl != std::string::npos) length = std::strtoull(lower.c_str() + cl + 17, nullptr, 10);
      std::string id;
      size_t wid = lower.find("\r\nwebhook-id:");
      if (wid != std::string::npos) {
        size_t start = wid + 13;
        size_t end = head.find("\r\n", start);
        id = head.substr(start, end - start);
        id.erase(0, id.find_first_not_of(' '));
        id.erase(id.find_last_not_of(" \r") + 1);
      }
      while (in.size() < head_end + 4 + length) {
        ssize_t n = ::recv(fd, buf, sizeof buf, 0);
        if (n <= 0) {
          ::close(fd);
          return;
        }
        in.append(buf, static_cast<size_t>(n));
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        bodies_[id].push_back(in.substr(head_end + 4, length));
        ++requests_;
      }
      in.erase(0, head_end + 4 + length);
      const std::string ok = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
      if (::send(fd, ok.data(), ok.size(), MSG_NOSIGNAL) <= 0) break;
    }
    ::close(fd);
  }

  int listen_fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread accept_thread_;
  std::vector<std::thread> conns_;
  mutable std::mutex mu_;
  std::map<std::string, std::vector<std::string>> bodies_;
  size_t requests_ = 0;
};

// --- the bridge as a child process -------------------------------------------------------------

struct BridgeOptions {
  std::string topic = "events";
  uint32_t batch_max_events = 200;
  std::string batch_max_wait = "20ms";
  std::string shutdown_grace = "10s";
  std::string mapping;  // more [mapping] keys
};

std::string bridge_toml(const KafkaMock& k, uint16_t api_port, const BridgeOptions& o) {
  std::string t = "[kafka]\nbrokers = \"";
  t += k.bootstrap;
  t += "\"\ntopics = [\"";
  t += o.topic;
  t += "\"]\ngroup_id = \"";
  t += kGroup;
  t += "\"\n[kafka.consumer_properties]\n";
  // Short group timings: a killed member's partitions move on within seconds.
  t += "\"session.timeout.ms\" = 6000\n\"heartbeat.interval.ms\" = 500\n";
  t += "\"topic.metadata.refresh.interval.ms\" = 1000\n";
  t += "[ringcast]\nurl = \"http://127.0.0.1:";
  t += std::to_string(api_port);
  t += "\"\ntoken = \"";
  t += Daemon::kToken;
  t += "\"\nbatch_max_events = ";
  t += std::to_string(o.batch_max_events);
  t += "\nbatch_max_wait = \"";
  t += o.batch_max_wait;
  t += "\"\nretry_initial = \"50ms\"\nretry_max = \"500ms\"\nrequest_timeout = \"10s\"\n";
  t += "shutdown_grace = \"";
  t += o.shutdown_grace;
  t += "\"\n[mapping]\n";
  t += o.mapping;
  t += "\n[dead_letter]\ntopic = \"dead\"\ntimeout = \"10s\"\n[metrics]\nlisten = "
       "\"127.0.0.1:0\"\n";
  return t;
}

struct BridgeProcess {
  test::Process process;
  uint16_t metrics_port = 0;
  std::string err_path;

  void start(const TempDir& dir, const std::string& name, const std::string& toml) {
    const std::string config = dir.file(name + ".toml");
    {
      std::ofstream f(config);
      f << toml;
    }
    static int run = 0;
    ++run;
    test::ProcessOptions po;
    po.stdout_path = dir.file(name + "-" + std::to_string(run) + ".out");
    po.stderr_path = err_path = dir.file(name + "-" + std::to_string(run) + ".err");
    process = test::Process::start({kafka_binary("ringcast-kafka-bridge"), "--config", config}, po);
    auto line = process.wait_for_stderr_line("metrics listening on ", scaled(10s));
    if (!line) throw std::runtime_error("the bridge did not start:\n" + log());
    metrics_port = static_cast<uint16_t>(std::stoi(line->substr(line->rfind(':') + 1)));
  }
  std::string log() const { return test::read_file(err_path); }

  // "name{labels}" → value from GET /metrics; empty when it did not answer.
  std::map<std::string, double> metrics() const {
    std::map<std::string, double> out;
    Reply r = http_request(metrics_port, "GET", "/metrics", "", {}, 5s);
    if (r.status != 200) return out;
    for (const auto& l : lines_of(r.body)) {
      if (l[0] == '#') continue;
      size_t sp = l.rfind(' ');
      out[l.substr(0, sp)] = std::stod(l.substr(sp + 1));
    }
    return out;
  }
  double records(const std::string& result) const {
    auto m = metrics();
    auto it = m.find("ringcast_kafka_bridge_records_total{result=\"" + result + "\"}");
    return it == m.end() ? -1 : it->second;
  }
  double metric(const std::string& name) const {
    auto m = metrics();
    auto it = m.find(name);
    return it == m.end() ? -1 : it->second;
  }
};

// --- what ringcast holds -----------------------------------------------------------------------

// Every delivery of the tenant (paged): event id → how many deliveries it has, and message ids.
struct Deliveries {
  std::map<std::string, int> count;
  std::map<std::string, std::string> message_id;
};
Deliveries all_deliveries(const Daemon& d) {
  Deliveries out;
  std::string cursor;
  for (int page = 0; page < 1000; ++page) {
    std::string path = "/v1/tenants/";
    path += kTenant;
    path += "/deliveries?limit=1000";
    if (!cursor.empty()) {
      path += "&cursor=";
      path += cursor;
    }
    Reply r = d.call("GET", path);
    if (r.status != 200) break;
    Json j = r.json();
    for (const auto& item : j["deliveries"].items()) {
      ++out.count[item["event_id"].str()];
      out.message_id[item["event_id"].str()] = item["message_id"].str();
    }
    if (j["next_cursor"].is_null() || j["next_cursor"].str().empty()) break;
    cursor = j["next_cursor"].str();
  }
  return out;
}

// The end state of a run of `ids`: each has exactly one delivery (accepted once) and the sink
// got a 200 for its message id. Returns "" when it holds, else the first problems.
std::string check_once(const Daemon& d, const SinkProcess& sink,
                       const std::vector<std::string>& ids, size_t* repeats = nullptr) {
  Deliveries all = all_deliveries(d);
  std::map<std::string, int> oks;
  for (const auto& l : sink.ids()) {
    if (l.status == "200") ++oks[l.id];
  }
  std::string problems;
  size_t n_problems = 0;
  size_t rep = 0;
  for (const auto& id : ids) {
    std::string p;
    auto c = all.count.find(id);
    if (c == all.count.end()) {
      p = id + " has no delivery";
    } else if (c->second != 1) {
      p = id + " has " + std::to_string(c->second) + " deliveries";
    } else {
      auto ok = oks.find(all.message_id[id]);
      if (ok == oks.end()) {
        p = id + " has no 200 at the sink";
      } else {
        rep += static_cast<size_t>(ok->second - 1);
      }
    }
    if (!p.empty() && n_problems++ < 5) problems += p + "; ";
  }
  if (n_problems > 5) problems += std::to_string(n_problems) + " problems in all";
  if (repeats) *repeats = rep;
  return problems;
}

std::string event_id(int i) {
  return "kafka-e" + std::to_string(i);
}

std::vector<std::string> event_ids(int from, int to) {
  std::vector<std::string> out;
  for (int i = from; i < to; ++i) out.push_back(event_id(i));
  return out;
}

// Events [from, to) spread over `partitions`, keyed per partition (an ordering key each).
std::vector<Record> plain_events(int from, int to, int partitions) {
  std::vector<Record> out;
  for (int i = from; i < to; ++i) {
    out.push_back(event_record(i % partitions, event_id(i),
                               "{\"n\":" + std::to_string(i) + ",\"pad\":\"kafka\"}"));
  }
  return out;
}

// One test's processes: the mock cluster, a verifying sink, the daemon with the tenant's endpoint,
// and a forwarder in front of the daemon.
struct Rig {
  explicit Rig(const char* name, int partitions)
      : dir(name),
        sink(SinkProcess::start({"--verify", "standard", "--secret", kSecret, "--ids-file",
                                 dir.file("ids.txt"), "--quiet"},
                                dir.path())) {
    kafka.start(dir, {"events:" + std::to_string(partitions), "dead:1"});
    d = std::make_unique<Daemon>();
    d->start();
    Reply r = create_endpoint(*d, kTenant,
                              "{\"url\":" + quote(sink.base_url() + "/hooks") +
                                  ",\"policy\":\"fast\",\"secret\":" + quote(kSecret) + "}");
    if (r.status != 201) throw std::runtime_error("endpoint: " + r.describe());
    Daemon* daemon = d.get();
    forwarder = std::make_unique<Forwarder>([daemon] { return daemon->port(); });
  }
  TempDir dir;
  SinkProcess sink;
  KafkaMock kafka;
  std::unique_ptr<Daemon> d;
  std::unique_ptr<Forwarder> forwarder;
};

// Waits until every event of `ids` is delivered to the sink; "" or what is still missing.
std::string wait_delivered(const Rig& rig, const std::vector<std::string>& ids, Millis timeout) {
  std::string problems;
  wait_until(
      [&] {
        problems = check_once(*rig.d, rig.sink, ids);
        return problems.empty();
      },
      timeout, 250ms);
  return problems;
}

TEST(E2eKafkaBridge, RecordsAreDeliveredOnceAndByteForByte) {
  RINGCAST_NEEDS_KAFKA_BRIDGE();
  TempDir dir("e2e-kafka-bytes");
  BodyReceiver receiver;
  KafkaMock kafka;
  kafka.start(dir, {"events:3", "dead:1"});
  Daemon d;
  d.start();
  Reply ep = create_endpoint(d, kTenant, "{\"url\":" + quote(receiver.url()) + "}");
  ASSERT_EQ(ep.status, 201) << ep.describe();

  // Payloads whose bytes a re-encoding would change: spacing, key order, escapes, UTF-8, number
  // forms, scalars; some pretty-printed over several lines (they cannot be one NDJSON line: the
  // bridge sends those alone) and some with ordering keys.
  const std::vector<std::string> shapes = {
      "{\"b\":1,  \"a\" : [1,2 ,3]}",
      "{\"text\":\"caf\xc3\xa9 \\u00e9 \\\"q\\\" \\\\ \\/\",\"n\":1.50e+3}",
      "[ ]",
      "\"just a string\"",
      "-0.0",
      "true",
      "{\n  \"pretty\": true,\n  \"list\": [\n    1,\n    2\n  ]\n}",
      "{\"emoji\":\"\xf0\x9f\x93\xa6\",\"nested\":{\"z\":null,\"y\":{}}}",
      "\t{\"leading\":\"tab\"}",
  };
  constexpr int kEvents = 450;
  std::vector<Record> records;
  std::map<std::string, std::string> payload_of;
  for (int i = 0; i < kEvents; ++i) {
    std::string payload = shapes[static_cast<size_t>(i) % shapes.size()];
    if (payload.front() == '{') payload.insert(1, "\"i\":" + std::to_string(i) + ",");
    const std::string key = i % 4 == 0 ? "key-" + std::to_string(i % 7) : "";
    records.push_back(event_record(i % 3, event_id(i), payload, kTenant, key));
    // Whitespace around the value is not part of the payload (as on the HTTP routes).
    payload_of[event_id(i)] = payload.substr(payload.find_first_not_of(" \t\r\n"));
  }
  kafka.produce("events", records);

  BridgeProcess bridge;
  bridge.start(dir, "bridge", bridge_toml(kafka, d.port(), BridgeOptions{}));
  ASSERT_TRUE(wait_until([&] { return receiver.bodies().size() >= kEvents; }, scaled(90s), 100ms))
      << receiver.bodies().size() << " of " << kEvents << " received\n"
      << bridge.log() << d.output();
  std::string why;
  EXPECT_TRUE(wait_until([&] { return kafka.all_committed("events", &why); }, scaled(20s))) << why;

  // Each event once, and what the receiver got is the record's value, byte for byte (SPEC R1).
  const auto bodies = receiver.bodies();
  const Deliveries all = all_deliveries(d);
  size_t mismatched = 0;
  for (const auto& [id, payload] : payload_of) {
    ASSERT_EQ(all.count.count(id), 1u) << id << " was not accepted";
    EXPECT_EQ(all.count.at(id), 1) << id;
    auto b = bodies.find(all.message_id.at(id));
    ASSERT_NE(b, bodies.end()) << id << " never reached the receiver";
    EXPECT_EQ(b->second.size(), 1u) << id << " reached the receiver more than once";
    if (b->second.front() != payload && mismatched++ < 3) {
      ADD_FAILURE() << id << ": sent " << quote(payload) << ", received "
                    << quote(b->second.front());
    }
  }
  EXPECT_EQ(mismatched, 0u);
  EXPECT_EQ(receiver.requests(), static_cast<size_t>(kEvents));
  EXPECT_EQ(bridge.records("consumed"), kEvents);
  EXPECT_EQ(bridge.records("acked"), kEvents);
  EXPECT_EQ(bridge.records("duplicate"), 0);
  EXPECT_EQ(bridge.records("dead_lettered"), 0);
  EXPECT_EQ(bridge.records("committed"), kEvents);
  EXPECT_TRUE(kafka.records("dead").empty());

  // `ringcast intake status --kafka-bridge`: the bridge's row beside the daemon's own sources
  // (docs/operations.md §6), read from its metrics listener; one that does not answer says so.
  auto cli = [&](const std::vector<std::string>& args, const std::string& tag) {
    test::ProcessOptions po;
    po.stdout_path = dir.file(tag + ".out");
    po.stderr_path = dir.file(tag + ".err");
    std::vector<std::string> argv = {ringcast_binary(), "--server",
                                     "127.0.0.1:" + std::to_string(d.port()), "--token",
                                     Daemon::kToken};
    argv.insert(argv.end(), args.begin(), args.end());
    test::Process p = test::Process::start(argv, std::move(po));
    auto status = p.wait(10s);
    EXPECT_TRUE(status && status->ok()) << test::read_file(dir.file(tag + ".err"));
    return test::read_file(dir.file(tag + ".out"));
  };
  std::string bridge_at = "127.0.0.1:";
  bridge_at += std::to_string(bridge.metrics_port);
  const Json status_json =
      Json::parse(cli({"--json", "intake", "status", "--kafka-bridge", bridge_at}, "cli-json"));
  ASSERT_EQ(status_json["kafka_bridges"].size(), 1u);
  const Json kb = status_json["kafka_bridges"][0];
  EXPECT_EQ(kb["state"].str(), "up");
  EXPECT_EQ(kb["acked"].i64(), kEvents);
  EXPECT_EQ(kb["committed"].i64(), kEvents);
  EXPECT_EQ(kb["dead_lettered"].i64(), 0);
  EXPECT_TRUE(kb.has("lag"));
  const std::string table =
      cli({"intake", "status", "--kafka-bridge", bridge_at, "--kafka-bridge", "127.0.0.1:1"},
          "cli-table");
  EXPECT_NE(table.find("kafka"), std::string::npos) << table;
  EXPECT_NE(table.find("127.0.0.1:1: Kafka bridge unreachable"), std::string::npos) << table;
  auto m = bridge.metrics();
  for (int p = 0; p < 3; ++p) {
    const std::string lag =
        "ringcast_kafka_bridge_lag{topic=\"events\",partition=\"" + std::to_string(p) + "\"}";
    EXPECT_EQ(m[lag], 0) << lag;
  }

  // SIGTERM: a clean stop that leaves the group.
  bridge.process.signal(SIGTERM);
  auto st = bridge.process.wait(scaled(20s));
  ASSERT_TRUE(st.has_value()) << "the bridge did not stop on SIGTERM\n" << bridge.log();
  EXPECT_TRUE(st->ok()) << st->str() << "\n" << bridge.log();
  EXPECT_NE(bridge.log().find("stopped: consumed 450"), std::string::npos) << bridge.log();
}

TEST(E2eKafkaBridge, PermanentRefusalsAreDeadLetteredWithTheirReasonAndCommittedPast) {
  RINGCAST_NEEDS_KAFKA_BRIDGE();
  Rig rig("e2e-kafka-dead", 2);
  // The first copy of the event a conflict will repeat, accepted before the bridge starts.
  ASSERT_EQ(submit_event(*rig.d, kTenant, "kafka-conflict", "order.paid", "{\"v\":1}").status, 202);

  struct Bad {
    Record record;
    const char* code;
  };
  std::vector<Bad> bad;
  bad.push_back({event_record(0, "kafka-bad-json", "{\"v\": nope}"), "invalid_json"});
  bad.push_back({event_record(1, "kafka-no-tenant", "{}", ""), "missing_field"});
  bad.push_back({event_record(0, "kafka-unknown-tenant", "{}", "nobody-here"), "unknown_tenant"});
  bad.push_back({event_record(1, "kafka-conflict", "{\"v\":2}"), "conflict"});
  bad.push_back({event_record(0, "kafka-dup-field", "{\"a\":1,\"a\":2}"), "duplicate_field"});
  bad.push_back({event_record(1, "kafka id with spaces", "{}"), "invalid_event_id"});
  {
    Record tomb = event_record(0, "kafka-tombstone", "");
    tomb.tombstone = true;
    bad.push_back({tomb, "missing_field"});
  }
  bad.push_back(
      {event_record(1, "kafka-bad-key", "{}", kTenant, std::string("\x01", 1)), "invalid_value"});

  // Good and bad interleaved in both partitions.
  constexpr int kGood = 200;
  std::vector<Record> records;
  size_t next_bad = 0;
  for (int i = 0; i < kGood; ++i) {
    records.push_back(event_record(i % 2, event_id(i), "{\"n\":" + std::to_string(i) + "}"));
    if (i % 25 == 10 && next_bad < bad.size()) records.push_back(bad[next_bad++].record);
  }
  while (next_bad < bad.size()) records.push_back(bad[next_bad++].record);
  rig.kafka.produce("events", records);

  BridgeProcess bridge;
  bridge.start(rig.dir, "bridge", bridge_toml(rig.kafka, rig.forwarder->port(), BridgeOptions{}));
  EXPECT_EQ(wait_delivered(rig, event_ids(0, kGood), scaled(90s)), "") << bridge.log();
  std::vector<Json> dead;
  ASSERT_TRUE(wait_until(
      [&] {
        dead = rig.kafka.records("dead");
        return dead.size() >= bad.size();
      },
      scaled(30s), 200ms))
      << dead.size() << " dead letters\n"
      << bridge.log();
  std::string why;
  EXPECT_TRUE(wait_until([&] { return rig.kafka.all_committed("events", &why); }, scaled(20s)))
      << "the bridge did not commit past its dead letters: " << why << "\n"
      << bridge.log();

  // Each bad record once on the dead-letter topic: its value and headers as produced, plus its
  // reason and where it came from.
  std::vector<Json> sources = rig.kafka.records("events");
  EXPECT_EQ(dead.size(), bad.size());
  for (const Bad& b : bad) {
    std::string id;
    for (const auto& [k, v] : b.record.headers) {
      if (k == "id") id = v;
    }
    const Json* found = nullptr;
    for (const Json& rec : dead) {
      if (header(rec, "id") == id) found = &rec;
    }
    ASSERT_NE(found, nullptr) << id << " is not on the dead-letter topic";
    EXPECT_EQ(header(*found, "ringcast-error-code"), b.code) << id;
    EXPECT_FALSE(header(*found, "ringcast-error-message").empty()) << id;
    EXPECT_EQ(header(*found, "ringcast-source-topic"), "events") << id;
    EXPECT_EQ(header(*found, "ringcast-source-partition"), std::to_string(b.record.partition))
        << id;
    // The source offset names the record on the source topic.
    const std::string offset = header(*found, "ringcast-source-offset");
    bool matched = false;
    for (const Json& src : sources) {
      if (std::to_string(src["offset"].i64()) == offset &&
          src["partition"].i64() == b.record.partition && header(src, "id") == id) {
        matched = true;
      }
    }
    EXPECT_TRUE(matched) << id << " names offset " << offset;
    if (b.record.tombstone) {
      EXPECT_TRUE((*found)["value"].is_null()) << id;
    } else {
      EXPECT_EQ((*found)["value"].str(), b.record.value) << id;
    }
  }
  // The conflict left the first copy as it was.
  Reply first =
      rig.d->call("GET", std::string("/v1/tenants/") + kTenant + "/events/kafka-conflict");
  EXPECT_NE(first.body.find("{\"v\":1}"), std::string::npos) << first.describe();
  EXPECT_EQ(bridge.records("dead_lettered"), static_cast<double>(bad.size()));
  EXPECT_EQ(bridge.records("acked"), kGood);
  EXPECT_EQ(bridge.records("committed"), static_cast<double>(kGood + bad.size()));
}

TEST(E2eKafkaBridge, BridgeKilledMidStreamLosesNothing) {
  RINGCAST_NEEDS_KAFKA_BRIDGE();
  Rig rig("e2e-kafka-kill-bridge", 4);
  const int kEvents = kSanitized ? 1500 : 4000;
  rig.kafka.produce("events", plain_events(0, kEvents, 4));
  BridgeOptions o;
  o.batch_max_events = 100;
  const std::string toml = bridge_toml(rig.kafka, rig.forwarder->port(), o);

  // Three runs: two SIGKILLed once they acked a third of the records each (mid-batch: they
  // commit once per batch of 100), then one that finishes. A kill leaves records acked but not
  // committed: the next run reads them again and ringcast answers them as duplicates.
  double duplicates = 0;
  int kills = 0;
  for (int run = 0; run < 2; ++run) {
    BridgeProcess b;
    b.start(rig.dir, "bridge", toml);
    ASSERT_TRUE(wait_until([&] { return b.records("acked") >= kEvents / 3; }, scaled(120s), 20ms))
        << b.log();
    const double dup = b.records("duplicate");
    b.process.kill();
    ++kills;
    duplicates += dup;
  }
  BridgeProcess last;
  last.start(rig.dir, "bridge", toml);
  const std::string missing = wait_delivered(rig, event_ids(0, kEvents), scaled(180s));
  EXPECT_EQ(missing, "") << last.log();
  std::string why;
  EXPECT_TRUE(wait_until([&] { return rig.kafka.all_committed("events", &why); }, scaled(20s)))
      << why;
  duplicates += last.records("duplicate");
  size_t repeats = 0;
  check_once(*rig.d, rig.sink, event_ids(0, kEvents), &repeats);
  // The run's figures (docs/operations.md §6 quotes the kill test).
  std::printf(
      "[ kafka kill ] bridge SIGKILLed %d times: %d records, %d delivered once, 0 lost; "
      "the runs re-read %.0f records ringcast answered as duplicates; %zu repeated "
      "webhooks\n",
      kills, kEvents, kEvents, duplicates, repeats);
  EXPECT_EQ(last.records("dead_lettered"), 0);
}

TEST(E2eKafkaBridge, DaemonKilledMidStreamLosesNothing) {
  RINGCAST_NEEDS_KAFKA_BRIDGE();
  Rig rig("e2e-kafka-kill-daemon", 3);
  const int kEvents = kSanitized ? 1500 : 3000;
  rig.kafka.produce("events", plain_events(0, kEvents / 2, 3));
  BridgeOptions o;
  o.batch_max_events = 100;
  BridgeProcess bridge;
  bridge.start(rig.dir, "bridge", bridge_toml(rig.kafka, rig.forwarder->port(), o));
  ASSERT_TRUE(wait_until([&] { return bridge.records("acked") >= kEvents / 4; }, scaled(60s), 20ms))
      << bridge.log();
  rig.d->kill9();
  rig.forwarder->cut_all();
  // While the daemon is down: more records arrive, nothing is committed past what ringcast holds,
  // and the bridge keeps trying.
  rig.kafka.produce("events", plain_events(kEvents / 2, kEvents, 3));
  const double retries_before = bridge.metric("ringcast_kafka_bridge_transient_retries_total");
  EXPECT_TRUE(wait_until(
      [&] {
        return bridge.metric("ringcast_kafka_bridge_transient_retries_total") >= retries_before + 3;
      },
      scaled(20s)))
      << bridge.log();
  EXPECT_TRUE(bridge.process.running());
  rig.d->start();
  const std::string missing = wait_delivered(rig, event_ids(0, kEvents), scaled(180s));
  EXPECT_EQ(missing, "") << bridge.log();
  std::string why;
  EXPECT_TRUE(wait_until([&] { return rig.kafka.all_committed("events", &why); }, scaled(20s)))
      << why;
  size_t repeats = 0;
  check_once(*rig.d, rig.sink, event_ids(0, kEvents), &repeats);
  std::printf(
      "[ kafka kill ] daemon SIGKILLed once: %d records, %d delivered once, 0 lost; %.0f "
      "transient retry rounds, %.0f duplicates absorbed, %zu repeated webhooks\n",
      kEvents, kEvents, bridge.metric("ringcast_kafka_bridge_transient_retries_total"),
      bridge.records("duplicate"), repeats);
  EXPECT_EQ(bridge.records("dead_lettered"), 0);
  EXPECT_EQ(bridge.records("consumed"), kEvents);
}

TEST(E2eKafkaBridge, RebalanceBetweenTwoBridgesLosesNothing) {
  RINGCAST_NEEDS_KAFKA_BRIDGE();
  Rig rig("e2e-kafka-rebalance", 6);
  const int kEvents = kSanitized ? 1500 : 3000;
  BridgeOptions o;
  o.batch_max_events = 50;
  const std::string toml = bridge_toml(rig.kafka, rig.forwarder->port(), o);
  rig.kafka.produce("events", plain_events(0, kEvents / 3, 6));
  BridgeProcess a;
  a.start(rig.dir, "bridge-a", toml);
  ASSERT_TRUE(wait_until([&] { return a.metric("ringcast_kafka_bridge_assigned_partitions") == 6; },
                         scaled(30s)))
      << a.log();
  // B joins the group mid-stream: the six partitions are split between the two.
  BridgeProcess b;
  b.start(rig.dir, "bridge-b", toml);
  ASSERT_TRUE(wait_until(
      [&] {
        const double pa = a.metric("ringcast_kafka_bridge_assigned_partitions");
        const double pb = b.metric("ringcast_kafka_bridge_assigned_partitions");
        return pa > 0 && pb > 0 && pa + pb == 6;
      },
      scaled(60s)))
      << "A:\n"
      << a.log() << "B:\n"
      << b.log();
  rig.kafka.produce("events", plain_events(kEvents / 3, 2 * kEvents / 3, 6));
  ASSERT_TRUE(wait_until([&] { return b.records("acked") > 0; }, scaled(60s))) << b.log();
  // A leaves (SIGTERM: it finishes its batch, commits and leaves the group) while records keep
  // coming: B takes every partition.
  a.process.signal(SIGTERM);
  rig.kafka.produce("events", plain_events(2 * kEvents / 3, kEvents, 6));
  auto st = a.process.wait(scaled(30s));
  ASSERT_TRUE(st.has_value()) << a.log();
  EXPECT_TRUE(st->ok()) << st->str() << "\n" << a.log();
  EXPECT_TRUE(wait_until([&] { return b.metric("ringcast_kafka_bridge_assigned_partitions") == 6; },
                         scaled(60s)))
      << b.log();
  const std::string missing = wait_delivered(rig, event_ids(0, kEvents), scaled(180s));
  EXPECT_EQ(missing, "") << "A:\n" << a.log() << "B:\n" << b.log();
  std::string why;
  EXPECT_TRUE(wait_until([&] { return rig.kafka.all_committed("events", &why); }, scaled(20s)))
      << why;
  EXPECT_GE(b.metric("ringcast_kafka_bridge_rebalances_total"), 2);
  EXPECT_EQ(b.records("dead_lettered"), 0);
  size_t repeats = 0;
  check_once(*rig.d, rig.sink, event_ids(0, kEvents), &repeats);
  std::printf(
      "[ kafka rebalance ] %d records over 6 partitions, two bridges: %d delivered once, 0 "
      "lost; B acked %.0f (%.0f duplicates); %zu repeated webhooks\n",
      kEvents, kEvents, b.records("acked"), b.records("duplicate"), repeats);
}

TEST(E2eKafkaBridge, BadConfigurationNamesTheKeyAndExitsNonZero) {
  RINGCAST_NEEDS_KAFKA_BRIDGE();
  TempDir dir("e2e-kafka-config");
  struct Case {
    std::string toml;
    std::string names;
  };
  const std::vector<Case> cases = {
      {"[kafka]\nbrokers = \"127.0.0.1:1\"\n[ringcast]\ntoken = \"t\"\n", "kafka.topics"},
      {"[kafka]\nbrokers = \"127.0.0.1:1\"\ntopics = [\"t\"]\n[ringcast]\ntoken = \"t\"\n"
       "batch_max_events = 0\n",
       "ringcast.batch_max_events"},
      {"[kafka]\nbrokers = \"127.0.0.1:1\"\ntopics = [\"t\"]\n[ringcast]\ntoken = \"t\"\n"
       "[mapping]\nsource = \"xml\"\n",
       "mapping.source"},
      {"[kafka]\nbrokers = \"127.0.0.1:1\"\ntopics = [\"t\"]\n[kafka.properties]\n"
       "\"enable.auto.commit\" = true\n[ringcast]\ntoken = \"t\"\n",
       "kafka.properties.enable.auto.commit"},
      {"[kafka]\nbrokers = \"127.0.0.1:1\"\ntopics = [\"t\"]\n[ringcast]\n", "ringcast.token"},
      {"[kafka]\nbrokers = \"127.0.0.1:1\"\ntopics = [\"t\"]\nbogus = 1\n[ringcast]\ntoken = "
       "\"t\"\n",
       "kafka.bogus"},
  };
  int n = 0;
  for (const Case& c : cases) {
    const std::string path = dir.file("bad-" + std::to_string(++n) + ".toml");
    {
      std::ofstream f(path);
      f << c.toml;
    }
    test::ProcessOptions po;
    po.stdout_path = dir.file("bad.out");
    po.stderr_path = dir.file("bad-" + std::to_string(n) + ".err");
    test::Process p = test::Process::start(
        {kafka_binary("ringcast-kafka-bridge"), "--config", path, "--check-config"}, po);
    auto st = p.wait(10s);
    ASSERT_TRUE(st.has_value());
    EXPECT_TRUE(st->exited && st->code == 2) << c.names << ": " << st->str();
    const std::string err = test::read_file(po.stderr_path);
    EXPECT_NE(err.find(c.names), std::string::npos) << c.names << ": " << err;
    // The token is never echoed.
    EXPECT_EQ(err.find("token = "), std::string::npos) << err;
  }
  // A property librdkafka refuses is named too (at start, not at --check-config).
  const std::string path = dir.file("bad-property.toml");
  {
    std::ofstream f(path);
    f << "[kafka]\nbrokers = \"127.0.0.1:1\"\ntopics = [\"t\"]\n[kafka.properties]\n"
         "\"no.such.property\" = \"x\"\n[ringcast]\ntoken = \"secret-token-value\"\n[metrics]\n"
         "listen = \"\"\n";
  }
  test::ProcessOptions po;
  po.stdout_path = dir.file("prop.out");
  po.stderr_path = dir.file("prop.err");
  test::Process p =
      test::Process::start({kafka_binary("ringcast-kafka-bridge"), "--config", path}, po);
  auto st = p.wait(10s);
  ASSERT_TRUE(st.has_value());
  EXPECT_TRUE(st->exited && st->code == 1) << st->str();
  const std::string err = test::read_file(po.stderr_path);
  EXPECT_NE(err.find("kafka.properties.no.such.property"), std::string::npos) << err;
  EXPECT_EQ(err.find("secret-token-value"), std::string::npos) << err;
}

}  // namespace
}  // namespace ringcast::e2e
