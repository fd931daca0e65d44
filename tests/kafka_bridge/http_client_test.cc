// The bridge's blocking HTTP/1.1 client (bridge/kafka/http_client.h) against a scripted loopback
// server: Content-Length and chunked answers, kept-alive connections (and one the server closed
// meanwhile), refusal and timeouts as "no answer".
#include "bridge/kafka/http_client.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "bridge/kafka/metrics.h"

namespace ringcast::kafka_bridge {
namespace {

using namespace std::chrono_literals;

// Answers each request with the next scripted answer; "" = read it and never answer; a "CLOSE"
// suffix closes the connection after the answer.
class ScriptedServer {
 public:
  explicit ScriptedServer(std::vector<std::string> script) : script_(script.begin(), script.end()) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(::listen(fd_, 8), 0);
    socklen_t len = sizeof a;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port = ntohs(a.sin_port);
    thread_ = std::thread([this] { run(); });
  }
  ~ScriptedServer() {
    stop_.store(true);
    thread_.join();
    ::close(fd_);
  }
  int connections() const { return connections_.load(); }
  std::vector<std::string> requests() {
    std::lock_guard<std::mutex> lock(mu_);
    return requests_;
  }
  uint16_t port = 0;

 private:
  void run() {
    while (!stop_.load()) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0) continue;
      connections_++;
      serve(c);
      ::close(c);
    }
  }
  void serve(int c) {
    std::string in;
    char buf[4096];
    while (!stop_.load()) {
      size_t end;
      while ((end = in.find("\r\n\r\n")) == std::string::npos) {
        pollfd p{c, POLLIN, 0};
        if (stop_.load()) return;
        if (::poll(&p, 1, 50) <= 0) continue;
        ssize_t n = ::recv(c, buf, sizeof buf, 0);
        if (n <= 0) return;
        in.append(buf, static_cast<size_t>(n));
      }
      size_t cl = in.find("Content-Length: ");
      size_t len = cl == std::string::npos ? 0 : std::strtoul(in.c_str() + cl + 16, nullptr, 10);
      while (in.size() < end + 4 + len) {
        ssize_t n = ::recv(c, buf, sizeof buf, 0);
        if (n <= 0) return;
        in.append(buf, static_cast<size_t>(n));
      }
      std::string answer;
      {
        std::lock_guard<std::mutex> lock(mu_);
        requests_.push_back(in.substr(0, end + 4 + len));
        if (!script_.empty()) {
          answer = script_.front();
          script_.pop_front();
        }
      }
      in.erase(0, end + 4 + len);
      if (answer.empty()) {
        while (!stop_.load()) std::this_thread::sleep_for(10ms);  // never answers
        return;
      }
      bool close = answer.size() >= 5 && answer.compare(answer.size() - 5, 5, "CLOSE") == 0;
      if (close) answer.resize(answer.size() - 5);
      ::send(c, answer.data(), answer.size(), MSG_NOSIGNAL);
      if (close) return;
    }
  }
  int fd_ = -1;
  std::atomic<bool> stop_{false};
  std::atomic<int> connections_{0};
  std::thread thread_;
  std::mutex mu_;
  std::deque<std::string> script_;
  std::vector<std::string> requests_;
};

ApiUrl url_for(uint16_t port, const std::string& prefix = "") {
  std::string text = "http://127.0.0.1:";
  text += std::to_string(port);
  text += prefix;
  return parse_api_url(text, "ringcast.url");
}

TEST(KafkaBridgeHttpClient, PostsWithTheTokenAndReadsLengthAndChunkedAnswers) {
  ScriptedServer s({"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
                    "HTTP/1.1 202 Accepted\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n"
                    "2;ext=1\r\nde\r\n0\r\nX-Trailer: 1\r\n\r\n"});
  HttpClient c(url_for(s.port, "/base"), 1000ms, 2000ms);
  HttpAnswer a = c.post("/v1/events/bulk", "application/x-ndjson", "{\"x\":1}\n", "tok");
  EXPECT_EQ(a.status, 200) << a.error;
  EXPECT_EQ(a.body, "hello");
  HttpAnswer b = c.post("/v1/events/bulk", "application/x-ndjson", "{}\n", "tok");
  EXPECT_EQ(b.status, 202) << b.error;
  EXPECT_EQ(b.body, "abcde");
  EXPECT_EQ(s.connections(), 1);  // kept alive
  auto reqs = s.requests();
  ASSERT_EQ(reqs.size(), 2u);
  EXPECT_EQ(reqs[0].rfind("POST /base/v1/events/bulk HTTP/1.1\r\n", 0), 0u) << reqs[0];
  EXPECT_NE(reqs[0].find("\r\nAuthorization: Bearer tok\r\n"), std::string::npos);
  EXPECT_NE(reqs[0].find("\r\nContent-Type: application/x-ndjson\r\n"), std::string::npos);
  EXPECT_NE(reqs[0].find("\r\n\r\n{\"x\":1}\n"), std::string::npos);
}

TEST(KafkaBridgeHttpClient, AConnectionTheServerClosedIsOpenedAgain) {
  ScriptedServer s({"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\naCLOSE",
                    "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nConnection: close\r\n\r\nb",
                    "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nc"});
  HttpClient c(url_for(s.port), 1000ms, 2000ms);
  EXPECT_EQ(c.post("/x", "t", "1", "k").body, "a");
  // The server closed without saying so: the next request goes on a new connection.
  EXPECT_EQ(c.post("/x", "t", "2", "k").body, "b");
  EXPECT_EQ(c.post("/x", "t", "3", "k").body, "c");
  EXPECT_EQ(s.connections(), 3);
}

TEST(KafkaBridgeHttpClient, RefusalAndSilenceAreNoAnswer) {
  uint16_t closed_port;
  {
    ScriptedServer s({});
    closed_port = s.port;
  }
  HttpClient refused(url_for(closed_port), 500ms, 1000ms);
  HttpAnswer a = refused.post("/x", "t", "b", "k");
  EXPECT_EQ(a.status, 0);
  EXPECT_FALSE(a.error.empty());

  ScriptedServer silent({""});
  HttpClient c(url_for(silent.port), 500ms, 300ms);
  const auto t0 = std::chrono::steady_clock::now();
  HttpAnswer b = c.post("/x", "t", "b", "k");
  EXPECT_EQ(b.status, 0);
  EXPECT_NE(b.error.find("timeout"), std::string::npos) << b.error;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s);

  ScriptedServer broken({"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshortCLOSE"});
  HttpClient d(url_for(broken.port), 500ms, 1000ms);
  EXPECT_EQ(d.post("/x", "t", "b", "k").status, 0);
}

TEST(KafkaBridgeMetrics, TheListenerServesPrometheusTextWithLagPerPartition) {
  Counters c;
  c.consumed = 10;
  c.acked = 7;
  c.duplicates = 2;
  c.dead_lettered = 1;
  {
    std::lock_guard<std::mutex> lock(c.mu);
    c.partitions[{"events", 0}] = PartitionGauge{40, 45, 0};
    c.partitions[{"events", 1}] = PartitionGauge{-1, 12, 2};  // nothing committed: from the start
    c.partitions[{"events", 2}] = PartitionGauge{-1, -1, -1};
  }
  MetricsListener l("127.0.0.1:0", c);
  const std::string addr = l.address();
  const uint16_t port = static_cast<uint16_t>(std::stoi(addr.substr(addr.rfind(':') + 1)));
  HttpClient get(url_for(port), 1000ms, 2000ms);
  // The client only POSTs; the listener answers any method but GET 405.
  EXPECT_EQ(get.post("/metrics", "t", "", "k").status, 405);
  const std::string text = render_metrics(c);
  EXPECT_NE(text.find("ringcast_kafka_bridge_records_total{result=\"consumed\"} 10\n"),
            std::string::npos);
  EXPECT_NE(text.find("ringcast_kafka_bridge_records_total{result=\"duplicate\"} 2\n"),
            std::string::npos);
  EXPECT_NE(text.find("ringcast_kafka_bridge_lag{topic=\"events\",partition=\"0\"} 5\n"),
            std::string::npos);
  EXPECT_NE(text.find("ringcast_kafka_bridge_lag{topic=\"events\",partition=\"1\"} 10\n"),
            std::string::npos);
  EXPECT_NE(text.find("ringcast_kafka_bridge_lag{topic=\"events\",partition=\"2\"} -1\n"),
            std::string::npos);
  // GET /metrics over a raw socket.
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  const std::string req = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
  ASSERT_EQ(::send(fd, req.data(), req.size(), 0), static_cast<ssize_t>(req.size()));
  std::string got;
  char buf[4096];
  for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;)
    got.append(buf, static_cast<size_t>(n));
  ::close(fd);
  EXPECT_EQ(got.rfind("HTTP/1.1 200", 0), 0u) << got;
  EXPECT_NE(got.find("ringcast_kafka_bridge_records_total{result=\"acked\"} 7\n"),
            std::string::npos)
      << got;
}

}  // namespace
}  // namespace ringcast::kafka_bridge
