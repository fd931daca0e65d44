// ringcast-kafka-mock: a librdkafka mock cluster (rdkafka_mock.h) in a process of its own, for the
// Kafka bridge's end-to-end tests and benchmark (tests/e2e/kafka_bridge_test.cc,
// bench/e2e_kafka_bridge.sh). The cluster's brokers are real loopback listeners, so the bridge, a
// child process, consumes from them as from Kafka. A small HTTP/1.1 control API on loopback:
//   POST /topics?name=T&partitions=N   create a topic
//   POST /produce?topic=T              NDJSON body, one record per line:
//        {"partition":N?,"key":"..."|null?,"value":"..."|null,"headers":[["name","value"|null],...]?}
//        → {"produced":N} once every record's delivery is reported (acks=all)
//   GET  /records?topic=T              every record of the topic, NDJSON:
//        {"partition","offset","key","value","headers":[[name,value]...]}
//   GET  /committed?group=G&topic=T    {"partitions":[{"partition","committed","high"}]}
//   GET  /healthz
// Prints "bootstrap <servers>" and "listening on <host:port>" on stdout; stops on SIGTERM/SIGINT.
// Test tooling: one request at a time, bounded waits, no security.
#include <arpa/inet.h>
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <simdjson.h>
#include <sys/socket.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "bridge/kafka/config.h"
#include "bridge/kafka/mapping.h"

namespace {

using ringcast::kafka_bridge::append_json_string;
using Clock = std::chrono::steady_clock;

std::atomic<bool> g_stop{false};
extern "C" void on_signal(int) {
  g_stop.store(true);
}

struct Answer {
  int status = 200;
  std::string body;
};

std::string query_param(const std::string& target, const std::string& name) {
  size_t q = target.find('?');
  if (q == std::string::npos) return "";
  std::string rest = target.substr(q + 1);
  size_t pos = 0;
  while (pos <= rest.size()) {
    size_t amp = rest.find('&', pos);
    std::string kv = rest.substr(pos, amp == std::string::npos ? std::string::npos : amp - pos);
    size_t eq = kv.find('=');
    if (eq != std::string::npos && kv.substr(0, eq) == name) return kv.substr(eq + 1);
    if (amp == std::string::npos) break;
    pos = amp + 1;
  }
  return "";
}

Answer error(int status, const std::string& why) {
  Answer a{status, "{\"error\":"};
  append_json_string(why, a.body);
  a.body += "}";
  return a;
}

class Mock {
 public:
  explicit Mock(int brokers) {
    char err[512];
    rd_kafka_conf_t* conf = rd_kafka_conf_new();
    rd_kafka_conf_set(conf, "log_level", "3", err, sizeof err);
    base_ = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err);
    if (!base_) throw std::runtime_error(err);
    cluster_ = rd_kafka_mock_cluster_new(base_, brokers);
    if (!cluster_) throw std::runtime_error("rd_kafka_mock_cluster_new failed");
    bootstraps_ = rd_kafka_mock_cluster_bootstraps(cluster_);
    rd_kafka_conf_t* pconf = client_conf();
    rd_kafka_conf_set(pconf, "acks", "all", err, sizeof err);
    rd_kafka_conf_set(pconf, "linger.ms", "5", err, sizeof err);
    rd_kafka_conf_set_dr_msg_cb(pconf, &Mock::dr_cb);
    rd_kafka_conf_set_opaque(pconf, this);
    producer_ = rd_kafka_new(RD_KAFKA_PRODUCER, pconf, err, sizeof err);
    if (!producer_) throw std::runtime_error(err);
  }
  ~Mock() {
    rd_kafka_flush(producer_, 2000);
    rd_kafka_destroy(producer_);
    rd_kafka_mock_cluster_destroy(cluster_);
    rd_kafka_destroy(base_);
  }
  const std::string& bootstraps() const { return bootstraps_; }

  rd_kafka_conf_t* client_conf() {
    char err[512];
    rd_kafka_conf_t* conf = rd_kafka_conf_new();
    rd_kafka_conf_set(conf, "bootstrap.servers", bootstraps_.c_str(), err, sizeof err);
    rd_kafka_conf_set(conf, "log_level", "3", err, sizeof err);
    return conf;
  }

  Answer create_topic(const std::string& name, int partitions) {
    if (name.empty() || partitions < 1) return error(400, "name and partitions >= 1 required");
    rd_kafka_resp_err_t e = rd_kafka_mock_topic_create(cluster_, name.c_str(), partitions, 1);
    if (e) return error(500, rd_kafka_err2str(e));
    return Answer{200, "{\"created\":true}"};
  }

  Answer produce(const std::string& topic, const std::string& body) {
    if (topic.empty()) return error(400, "topic required");
    simdjson::dom::parser parser;
    size_t pos = 0;
    size_t queued = 0;
    failed_ = 0;
    done_ = 0;
    std::string first_error;
    while (pos < body.size()) {
      size_t nl = body.find('\n', pos);
      std::string line = body.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos);
      pos = nl == std::string::npos ? body.size() : nl + 1;
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      simdjson::dom::element rec;
      if (parser.parse(line).get(rec)) return error(400, "bad NDJSON line: " + line);
      int32_t partition = RD_KAFKA_PARTITION_UA;
      int64_t p = 0;
      if (!rec["partition"].get(p)) partition = static_cast<int32_t>(p);
      std::optional<std::string> key, value;
      std::string_view s;
      if (!rec["key"].get(s)) key = std::string(s);
      if (!rec["value"].get(s)) value = std::string(s);
      rd_kafka_headers_t* hdrs = nullptr;
      simdjson::dom::array harr;
      if (!rec["headers"].get(harr)) {
        hdrs = rd_kafka_headers_new(8);
        for (simdjson::dom::element h : harr) {
          simdjson::dom::array pair;
          std::string_view name, v;
          if (h.get(pair) || pair.size() != 2 || pair.at(0).get(name)) {
            rd_kafka_headers_destroy(hdrs);
            return error(400, "headers are [[name, value-or-null], ...]");
          }
          if (pair.at(1).get(v)) {
            rd_kafka_header_add(hdrs, name.data(), static_cast<ssize_t>(name.size()), nullptr, 0);
          } else {
            rd_kafka_header_add(hdrs, name.data(), static_cast<ssize_t>(name.size()), v.data(),
                                static_cast<ssize_t>(v.size()));
          }
        }
      }
      char* key_data = key ? key->data() : nullptr;
      const size_t key_size = key ? key->size() : 0;
      char* value_data = value ? value->data() : nullptr;
      const size_t value_size = value ? value->size() : 0;
      for (;;) {
        rd_kafka_resp_err_t e = rd_kafka_producev(
            producer_, RD_KAFKA_V_TOPIC(topic.c_str()), RD_KAFKA_V_PARTITION(partition),
            RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_KEY(key_data, key_size),
            RD_KAFKA_V_VALUE(value_data, value_size), RD_KAFKA_V_HEADERS(hdrs), RD_KAFKA_V_END);
        if (e == RD_KAFKA_RESP_ERR__QUEUE_FULL) {
          rd_kafka_poll(producer_, 10);
          continue;
        }
        if (e) {
          if (hdrs) rd_kafka_headers_destroy(hdrs);
          return error(500, rd_kafka_err2str(e));
        }
        break;
      }
      ++queued;
    }
    rd_kafka_flush(producer_, 30000);
    if (done_ != queued || failed_ != 0) {
      return error(500, std::to_string(failed_) + " of " + std::to_string(queued) +
                            " records failed (" + last_error_ + "), " +
                            std::to_string(queued - done_) + " unreported");
    }
    return Answer{200, "{\"produced\":" + std::to_string(queued) + "}"};
  }

  // Partition count of `topic` (0: unknown).
  int partitions(const std::string& topic, rd_kafka_t* rk) {
    rd_kafka_topic_t* t = rd_kafka_topic_new(rk, topic.c_str(), nullptr);
    const rd_kafka_metadata_t* md = nullptr;
    int n = 0;
    if (rd_kafka_metadata(rk, 0, t, &md, 5000) == RD_KAFKA_RESP_ERR_NO_ERROR) {
      if (md->topic_cnt == 1 && md->topics[0].err == RD_KAFKA_RESP_ERR_NO_ERROR) {
        n = md->topics[0].partition_cnt;
      }
      rd_kafka_metadata_destroy(md);
    }
    rd_kafka_topic_destroy(t);
    return n;
  }

  Answer records(const std::string& topic) {
    char err[512];
    rd_kafka_conf_t* conf = client_conf();
    rd_kafka_conf_set(conf, "group.id", "ringcast-kafka-mock-reader", err, sizeof err);
    rd_kafka_conf_set(conf, "enable.auto.commit", "false", err, sizeof err);
    rd_kafka_t* rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof err);
    if (!rk) return error(500, err);
    rd_kafka_poll_set_consumer(rk);
    const int n = partitions(topic, rk);
    std::map<int32_t, int64_t> high;
    rd_kafka_topic_partition_list_t* list = rd_kafka_topic_partition_list_new(n);
    for (int32_t p = 0; p < n; ++p) {
      int64_t lo = 0, hi = 0;
      if (rd_kafka_query_watermark_offsets(rk, topic.c_str(), p, &lo, &hi, 5000)) continue;
      if (hi > lo) {
        high[p] = hi;
        rd_kafka_topic_partition_list_add(list, topic.c_str(), p)->offset = lo;
      }
    }
    std::string out;
    if (list->cnt > 0) rd_kafka_assign(rk, list);
    rd_kafka_topic_partition_list_destroy(list);
    const auto deadline = Clock::now() + std::chrono::seconds(30);
    std::map<int32_t, int64_t> next;
    auto complete = [&] {
      for (auto& [p, hi] : high) {
        if (next[p] < hi) return false;
      }
      return true;
    };
    while (!complete() && Clock::now() < deadline) {
      rd_kafka_message_t* m = rd_kafka_consumer_poll(rk, 100);
      if (!m) continue;
      if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR) {
        next[m->partition] = m->offset + 1;
        out += "{\"partition\":" + std::to_string(m->partition) +
               ",\"offset\":" + std::to_string(m->offset) + ",\"key\":";
        if (m->key) {
          append_json_string(std::string_view(static_cast<const char*>(m->key), m->key_len), out);
        } else {
          out += "null";
        }
        out += ",\"value\":";
        if (m->payload) {
          append_json_string(std::string_view(static_cast<const char*>(m->payload), m->len), out);
        } else {
          out += "null";
        }
        out += ",\"headers\":[";
        rd_kafka_headers_t* hdrs = nullptr;
        if (rd_kafka_message_headers(m, &hdrs) == RD_KAFKA_RESP_ERR_NO_ERROR && hdrs) {
          const char* name;
          const void* v;
          size_t size;
          for (size_t i = 0; !rd_kafka_header_get_all(hdrs, i, &name, &v, &size); ++i) {
            if (i) out += ',';
            out += '[';
            append_json_string(name, out);
            out += ',';
            if (v) {
              append_json_string(std::string_view(static_cast<const char*>(v), size), out);
            } else {
              out += "null";
            }
            out += ']';
          }
        }
        out += "]}\n";
      }
      rd_kafka_message_destroy(m);
    }
    const bool ok = complete();
    rd_kafka_consumer_close(rk);
    rd_kafka_destroy(rk);
    if (!ok) return error(504, "the topic was not read to its high watermark within 30 s");
    return Answer{200, out};
  }

  Answer committed(const std::string& group, const std::string& topic) {
    if (group.empty() || topic.empty()) return error(400, "group and topic required");
    char err[512];
    rd_kafka_conf_t* conf = client_conf();
    rd_kafka_conf_set(conf, "group.id", group.c_str(), err, sizeof err);
    rd_kafka_conf_set(conf, "enable.auto.commit", "false", err, sizeof err);
    rd_kafka_t* rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof err);
    if (!rk) return error(500, err);
    const int n = partitions(topic, rk);
    rd_kafka_topic_partition_list_t* list = rd_kafka_topic_partition_list_new(n);
    for (int32_t p = 0; p < n; ++p) rd_kafka_topic_partition_list_add(list, topic.c_str(), p);
    Answer a;
    rd_kafka_resp_err_t e = rd_kafka_committed(rk, list, 5000);
    if (e) {
      a = error(500, rd_kafka_err2str(e));
    } else {
      a.body = "{\"partitions\":[";
      for (int i = 0; i < list->cnt; ++i) {
        int64_t lo = 0, hi = -1;
        rd_kafka_query_watermark_offsets(rk, topic.c_str(), list->elems[i].partition, &lo, &hi,
                                         5000);
        if (i) a.body += ',';
        a.body += "{\"partition\":" + std::to_string(list->elems[i].partition) +
                  ",\"committed\":" + std::to_string(list->elems[i].offset) +
                  ",\"high\":" + std::to_string(hi) + "}";
      }
      a.body += "]}";
    }
    rd_kafka_topic_partition_list_destroy(list);
    rd_kafka_destroy(rk);
    return a;
  }

 private:
  static void dr_cb(rd_kafka_t*, const rd_kafka_message_t* m, void* opaque) {
    auto* self = static_cast<Mock*>(opaque);
    self->done_++;
    if (m->err) {
      self->failed_++;
      self->last_error_ = rd_kafka_err2str(m->err);
    }
  }

  rd_kafka_t* base_ = nullptr;
  rd_kafka_mock_cluster_t* cluster_ = nullptr;
  rd_kafka_t* producer_ = nullptr;
  std::string bootstraps_;
  size_t done_ = 0, failed_ = 0;
  std::string last_error_;
};

// Reads one request (head + Content-Length body) from `fd`; false on a broken one.
bool read_request(int fd, std::string& method, std::string& target, std::string& body) {
  std::string in;
  char buf[65536];
  size_t head_end;
  while ((head_end = in.find("\r\n\r\n")) == std::string::npos) {
    if (in.size() > (64 << 10)) return false;
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) return false;
    in.append(buf, static_cast<size_t>(n));
  }
  std::string head = in.substr(0, head_end);
  size_t sp1 = head.find(' ');
  size_t sp2 = head.find(' ', sp1 + 1);
  if (sp1 == std::string::npos || sp2 == std::string::npos) return false;
  method = head.substr(0, sp1);
  target = head.substr(sp1 + 1, sp2 - sp1 - 1);
  size_t length = 0;
  for (char& c : head) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  size_t cl = head.find("\r\ncontent-length:");
  if (cl != std::string::npos) length = std::strtoull(head.c_str() + cl + 17, nullptr, 10);
  body = in.substr(head_end + 4);
  while (body.size() < length) {
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) return false;
    body.append(buf, static_cast<size_t>(n));
  }
  body.resize(length);
  return true;
}

void send_answer(int fd, const Answer& a) {
  std::string out =
      "HTTP/1.1 " + std::to_string(a.status) +
      " X\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: " +
      std::to_string(a.body.size()) + "\r\n\r\n" + a.body;
  size_t off = 0;
  while (off < out.size()) {
    ssize_t n = ::send(fd, out.data() + off, out.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return;
    off += static_cast<size_t>(n);
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "ringcast-kafka-mock: a librdkafka mock Kafka cluster with an HTTP control API "
      "(tests and benchmarks of ringcast-kafka-bridge)",
      "ringcast-kafka-mock"};
  int brokers = 3;
  std::string listen = "127.0.0.1:0";
  std::vector<std::string> topics;
  app.add_option("--brokers", brokers, "mock brokers")->check(CLI::Range(1, 9));
  app.add_option("--listen", listen, "the control API's host:port (numeric IPv4)");
  app.add_option("--topic", topics, "name:partitions, created at start (repeatable)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  signal(SIGPIPE, SIG_IGN);
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  try {
    Mock mock(brokers);
    for (const auto& t : topics) {
      size_t colon = t.rfind(':');
      if (colon == std::string::npos) throw std::runtime_error("--topic wants name:partitions");
      Answer a = mock.create_topic(t.substr(0, colon), std::stoi(t.substr(colon + 1)));
      if (a.status != 200) throw std::runtime_error("--topic " + t + ": " + a.body);
    }
    std::string host;
    uint16_t port = 0;
    if (!ringcast::kafka_bridge::split_host_port(listen, host, port)) {
      throw std::runtime_error("--listen wants host:port");
    }
    int lfd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    ::setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    if (::inet_pton(AF_INET, host.c_str(), &a.sin_addr) != 1 ||
        ::bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(lfd, 16) != 0) {
      throw std::runtime_error("cannot listen on " + listen);
    }
    socklen_t len = sizeof a;
    ::getsockname(lfd, reinterpret_cast<sockaddr*>(&a), &len);
    std::printf("bootstrap %s\nlistening on %s:%u\n", mock.bootstraps().c_str(), host.c_str(),
                ntohs(a.sin_port));
    std::fflush(stdout);
    while (!g_stop.load()) {
      pollfd p{lfd, POLLIN, 0};
      if (::poll(&p, 1, 200) <= 0) continue;
      int fd = ::accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      timeval tv{60, 0};
      ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
      std::string method, target, body;
      if (read_request(fd, method, target, body)) {
        std::string path = target.substr(0, target.find('?'));
        Answer ans;
        if (method == "POST" && path == "/topics") {
          std::string parts = query_param(target, "partitions");
          ans =
              mock.create_topic(query_param(target, "name"), parts.empty() ? 1 : std::stoi(parts));
        } else if (method == "POST" && path == "/produce") {
          ans = mock.produce(query_param(target, "topic"), body);
        } else if (method == "GET" && path == "/records") {
          ans = mock.records(query_param(target, "topic"));
        } else if (method == "GET" && path == "/committed") {
          ans = mock.committed(query_param(target, "group"), query_param(target, "topic"));
        } else if (method == "GET" && path == "/healthz") {
          ans = Answer{200, "{\"ok\":true}"};
        } else {
          ans = error(404, "no such route");
        }
        send_answer(fd, ans);
      }
      ::close(fd);
    }
    ::close(lfd);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ringcast-kafka-mock: %s\n", e.what());
    return 1;
  }
  return 0;
}
