#include "bridge/kafka/metrics.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "bridge/kafka/config.h"

namespace ringcast::kafka_bridge {
namespace {

// One sample with its HELP and TYPE lines; `type` is "counter" or "gauge".
void sample(std::string& out, const char* name, const char* type, const char* help,
            const std::string& v) {
  out += "# HELP ";
  out += name;
  out += ' ';
  out += help;
  out += "\n# TYPE ";
  out += name;
  out += ' ';
  out += type;
  out += '\n';
  out += name;
  out += ' ';
  out += v;
  out += '\n';
}

void counter(std::string& out, const char* name, const char* help, uint64_t v) {
  sample(out, name, "counter", help, std::to_string(v));
}

void gauge(std::string& out, const char* name, const char* help, int64_t v) {
  sample(out, name, "gauge", help, std::to_string(v));
}

// Topic names are [a-zA-Z0-9._-] in Kafka; escaped anyway as Prometheus label values.
void label_value(std::string& out, const std::string& v) {
  for (char c : v) {
    if (c == '\\' || c == '"') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
}

}  // namespace

std::string render_metrics(Counters& c) {
  std::string out;
  out.reserve(4096);
  const char* records = "ringcast_kafka_bridge_records_total";
  out +=
      "# HELP ringcast_kafka_bridge_records_total Records by what became of them: consumed from "
      "Kafka, sent to ringcast (each attempt), acked by ringcast (durable: 202 or 200), "
      "duplicate (of acked: 200), dead_lettered, committed, abandoned (left uncommitted for "
      "the next owner)\n# TYPE ringcast_kafka_bridge_records_total counter\n";
  struct Row {
    const char* result;
    uint64_t v;
  };
  for (Row r : {Row{"consumed", c.consumed.load()}, Row{"sent", c.sent.load()},
                Row{"acked", c.acked.load()}, Row{"duplicate", c.duplicates.load()},
                Row{"dead_lettered", c.dead_lettered.load()}, Row{"committed", c.committed.load()},
                Row{"abandoned", c.abandoned.load()}}) {
    out += records;
    out += "{result=\"";
    out += r.result;
    out += "\"} ";
    out += std::to_string(r.v);
    out += '\n';
  }
  counter(out, "ringcast_kafka_bridge_transient_retries_total",
          "Rounds in which records ringcast could not take were sent again after a backoff",
          c.transient_retries.load());
  counter(out, "ringcast_kafka_bridge_requests_total", "HTTP requests to ringcast",
          c.requests.load());
  counter(out, "ringcast_kafka_bridge_request_failures_total",
          "HTTP requests to ringcast without an answer (refused, reset, timeout)",
          c.request_failures.load());
  counter(out, "ringcast_kafka_bridge_dead_letter_failures_total",
          "Dead-letter produces that failed (retried)", c.dead_letter_failures.load());
  counter(out, "ringcast_kafka_bridge_commit_failures_total", "Offset commits that failed",
          c.commit_failures.load());
  counter(out, "ringcast_kafka_bridge_rebalances_total",
          "Partition assignments and revocations of this member", c.rebalances.load());
  counter(out, "ringcast_kafka_bridge_consume_errors_total",
          "Errors the consumer reported (unknown topic, broker down, ...)",
          c.consume_errors.load());
  gauge(out, "ringcast_kafka_bridge_in_flight", "Records in the batch in hand", c.in_flight.load());
  gauge(out, "ringcast_kafka_bridge_assigned_partitions", "Partitions assigned to this member",
        c.assigned.load());
  std::vector<std::pair<std::pair<std::string, int32_t>, PartitionGauge>> parts;
  {
    std::lock_guard<std::mutex> lock(c.mu);
    parts.assign(c.partitions.begin(), c.partitions.end());
  }
  out +=
      "# HELP ringcast_kafka_bridge_lag Records of an assigned partition behind the group's "
      "committed offset (high watermark - committed; -1: not known yet)\n"
      "# TYPE ringcast_kafka_bridge_lag gauge\n";
  for (const auto& [key, g] : parts) {
    out += "ringcast_kafka_bridge_lag{topic=\"";
    label_value(out, key.first);
    out += "\",partition=\"";
    out += std::to_string(key.second);
    out += "\"} ";
    int64_t lag = -1;
    const int64_t from = g.committed >= 0 ? g.committed : g.start;
    if (g.high >= 0 && from >= 0) lag = g.high > from ? g.high - from : 0;
    out += std::to_string(lag);
    out += '\n';
  }
  out +=
      "# HELP ringcast_kafka_bridge_committed_offset The group's committed offset of an "
      "assigned partition (-1: none yet)\n# TYPE ringcast_kafka_bridge_committed_offset gauge\n";
  for (const auto& [key, g] : parts) {
    out += "ringcast_kafka_bridge_committed_offset{topic=\"";
    label_value(out, key.first);
    out += "\",partition=\"";
    out += std::to_string(key.second);
    out += "\"} ";
    out += std::to_string(g.committed);
    out += '\n';
  }
  return out;
}

MetricsListener::MetricsListener(const std::string& listen, Counters& counters)
    : counters_(counters) {
  std::string host;
  uint16_t port = 0;
  auto fail = [&](const std::string& why) {
    if (listen_fd_ >= 0) ::close(listen_fd_);
    std::string m = "metrics.listen: cannot listen on ";
    m += listen;
    m += ": ";
    m += why;
    throw std::runtime_error(m);
  };
  if (!split_host_port(listen, host, port)) fail("expected host:port");
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | AI_PASSIVE;
  addrinfo* res = nullptr;
  int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (rc != 0) fail(::gai_strerror(rc));
  std::string err = "no address";
  for (addrinfo* a = res; a != nullptr && listen_fd_ < 0; a = a->ai_next) {
    int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd, 16) != 0) {
      err = std::strerror(errno);
      ::close(fd);
      continue;
    }
    listen_fd_ = fd;
  }
  ::freeaddrinfo(res);
  if (listen_fd_ < 0) fail(err);
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&ss), &len);
  char buf[INET6_ADDRSTRLEN] = "";
  uint16_t bound = 0;
  if (ss.ss_family == AF_INET6) {
    auto* s6 = reinterpret_cast<sockaddr_in6*>(&ss);
    ::inet_ntop(AF_INET6, &s6->sin6_addr, buf, sizeof buf);
    bound = ntohs(s6->sin6_port);
    address_.clear();
    address_ += '[';
    address_ += buf;
    address_ += ']';
  } else {
    auto* s4 = reinterpret_cast<sockaddr_in*>(&ss);
    ::inet_ntop(AF_INET, &s4->sin_addr, buf, sizeof buf);
    bound = ntohs(s4->sin_port);
    address_ = buf;
  }
  address_ += ':';
  address_ += std::to_string(bound);
  stop_fd_ = ::eventfd(0, EFD_CLOEXEC);
  if (stop_fd_ < 0) fail(std::strerror(errno));
  thread_ = std::thread([this] { run(); });
}

MetricsListener::~MetricsListener() {
  uint64_t one = 1;
  if (stop_fd_ >= 0 && ::write(stop_fd_, &one, sizeof one) < 0) {
    // Nothing to do: the thread then ends at the next poll timeout.
  }
  if (thread_.joinable()) thread_.join();
  if (listen_fd_ >= 0) ::close(listen_fd_);
  if (stop_fd_ >= 0) ::close(stop_fd_);
}

void MetricsListener::run() {
  for (;;) {
    pollfd p[2] = {{listen_fd_, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
    int n = ::poll(p, 2, 1000);
    if (n < 0 && errno != EINTR) return;
    if (p[1].revents != 0) return;
    if (n <= 0 || (p[0].revents & POLLIN) == 0) continue;
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    serve(fd);
    ::close(fd);
  }
}

void MetricsListener::serve(int fd) {
  // One request per connection, read within 2 s, at most 8 KiB of head.
  timeval tv{2, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  std::string req;
  char buf[2048];
  while (req.find("\r\n\r\n") == std::string::npos && req.size() < 8192) {
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) return;
    req.append(buf, static_cast<size_t>(n));
  }
  std::string target;
  std::string_view line(req);
  line = line.substr(0, line.find("\r\n"));
  bool get = line.substr(0, 4) == "GET ";
  if (get) {
    std::string_view t = line.substr(4);
    target = std::string(t.substr(0, t.find(' ')));
    target = target.substr(0, target.find('?'));
  }
  int status = 404;
  std::string body = "not found\n";
  std::string type = "text/plain; charset=utf-8";
  if (!get) {
    status = 405;
    body = "method not allowed\n";
  } else if (target == "/metrics") {
    status = 200;
    body = render_metrics(counters_);
    type = "text/plain; version=0.0.4; charset=utf-8";
  } else if (target == "/healthz") {
    status = 200;
    body = "ok\n";
  }
  std::string out = "HTTP/1.1 ";
  out += std::to_string(status);
  out += status == 200 ? " OK" : status == 405 ? " Method Not Allowed" : " Not Found";
  out += "\r\nContent-Type: ";
  out += type;
  out += "\r\nContent-Length: ";
  out += std::to_string(body.size());
  out += "\r\nConnection: close\r\n\r\n";
  out += body;
  size_t off = 0;
  while (off < out.size()) {
    ssize_t n = ::send(fd, out.data() + off, out.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return;
    off += static_cast<size_t>(n);
  }
}

}  // namespace ringcast::kafka_bridge
