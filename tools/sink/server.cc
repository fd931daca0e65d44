#include "tools/sink/server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <queue>
#include <random>
#include <stdexcept>
#include <thread>
#include <unordered_set>
#include <vector>

#include "tools/sink/http.h"
#include "tools/sink/verify.h"

namespace ringcast::sink {
namespace {

constexpr size_t kReadChunk = 64 << 10;  // bytes asked of one recv / SSL_read
constexpr size_t kInitialInBuffer = 16 << 10;
constexpr int kMaxEvents = 256;             // per epoll_wait
constexpr int kMaxAcceptsPerEvent = 64;     // bounded work per turn
constexpr size_t kEndlessChunk = 16 << 10;  // one chunk of an endless chunked body
constexpr int kEndlessChunksPerTurn = 4;
constexpr size_t kEndlessOutHighWater = 64 << 10;
constexpr int64_t kLingerCloseNs = 1'000'000'000;  // drain for at most 1 s after our FIN
constexpr int kMaxStatus = 600;
constexpr size_t kMaxTrackedIds = 10'000'000;  // bounds the id sets' memory (~1 GiB at most)
static_assert(kEndlessChunk * kEndlessChunksPerTurn <= kEndlessOutHighWater);

int64_t mono_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

const char* reason_phrase(int status) {
  switch (status) {
    case 100:
      return "Continue";
    case 200:
      return "OK";
    case 201:
      return "Created";
    case 202:
      return "Accepted";
    case 204:
      return "No Content";
    case 301:
      return "Moved Permanently";
    case 302:
      return "Found";
    case 307:
      return "Temporary Redirect";
    case 308:
      return "Permanent Redirect";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 408:
      return "Request Timeout";
    case 409:
      return "Conflict";
    case 410:
      return "Gone";
    case 413:
      return "Content Too Large";
    case 422:
      return "Unprocessable Content";
    case 429:
      return "Too Many Requests";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 501:
      return "Not Implemented";
    case 502:
      return "Bad Gateway";
    case 503:
      return "Service Unavailable";
    case 504:
      return "Gateway Timeout";
    case 505:
      return "HTTP Version Not Supported";
    default:
      return "Status";
  }
}

bool no_body_status(int status) {
  return status == 204 || status == 304 || status < 200;
}

struct Stats {
  std::atomic<uint64_t> requests{0}, control_requests{0}, bad_signatures{0}, ids_received{0};
  std::atomic<uint64_t> connections_accepted{0}, connections_open{0};
  std::atomic<uint64_t> bytes_received{0}, bytes_sent{0};
  std::atomic<uint64_t> resets{0}, hangs{0}, parse_errors{0}, endless{0}, trickles{0};
  std::atomic<uint64_t> delayed{0}, redirects{0}, closes{0}, stalls{0}, status_checks{0};
  std::atomic<uint64_t> tls_handshakes{0}, tls_resumed{0}, tls_handshake_failures{0};
  std::array<std::atomic<uint64_t>, kMaxStatus> by_status{};

  void reset() {
    for (auto* c : {&requests,
                    &control_requests,
                    &bad_signatures,
                    &ids_received,
                    &connections_accepted,
                    &bytes_received,
                    &bytes_sent,
                    &resets,
                    &hangs,
                    &parse_errors,
                    &endless,
                    &trickles,
                    &delayed,
                    &redirects,
                    &closes,
                    &stalls,
                    &status_checks,
                    &tls_handshakes,
                    &tls_resumed,
                    &tls_handshake_failures}) {
      c->store(0, std::memory_order_relaxed);
    }
    for (auto& s : by_status) s.store(0, std::memory_order_relaxed);
  }
};

inline void bump(std::atomic<uint64_t>& c, uint64_t n = 1) {
  c.fetch_add(n, std::memory_order_relaxed);
}

struct FaultEntry {
  FaultRule rule;
  std::atomic<uint64_t> used{0};  // matches so far, for limit=N
};

// Immutable once published, except the `used` counters.
struct FaultTable {
  std::vector<std::unique_ptr<FaultEntry>> entries;  // longest prefix first

  static std::shared_ptr<FaultTable> make(const std::vector<FaultRule>& rules) {
    auto t = std::make_shared<FaultTable>();
    for (const auto& r : rules) {
      auto e = std::make_unique<FaultEntry>();
      e->rule = r;
      t->entries.push_back(std::move(e));
    }
    std::stable_sort(t->entries.begin(), t->entries.end(), [](const auto& a, const auto& b) {
      return a->rule.prefix.size() > b->rule.prefix.size();
    });
    return t;
  }
  // The rule for `target`, counting the match; nullptr if none applies (or its limit is spent).
  const FaultSpec* match(std::string_view target) const {
    for (const auto& e : entries) {
      if (target.substr(0, e->rule.prefix.size()) == e->rule.prefix) {
        if (e->used.fetch_add(1, std::memory_order_relaxed) >= e->rule.spec.limit) return nullptr;
        return &e->rule.spec;
      }
    }
    return nullptr;
  }
};

std::string json_escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

struct Shared {
  explicit Shared(Options o)
      : options(std::move(o)),
        verifier(options.verify, options.secrets, options.timestamp_tolerance_s) {}

  Options options;
  Verifier verifier;
  Stats stats;
  int listen_fd = -1;
  int stop_fd = -1;  // eventfd, readable once stopping
  uint16_t port = 0;
  bssl::UniquePtr<SSL_CTX> ssl_ctx;

  std::mutex ids_mu;  // guards the two sets and the ids file writes
  std::unordered_set<std::string> ids, ids_ok;
  bool ids_capped = false;  // kMaxTrackedIds reached: new ids are no longer counted as unique
  int ids_fd = -1;
  int headers_fd = -1;  // --headers-file

  std::mutex faults_mu;
  std::shared_ptr<FaultTable> faults;
  std::atomic<uint64_t> faults_version{0};

  std::shared_ptr<FaultTable> current_faults() {
    std::lock_guard<std::mutex> lock(faults_mu);
    return faults;
  }
  void set_faults(std::shared_ptr<FaultTable> t) {
    std::lock_guard<std::mutex> lock(faults_mu);
    faults = std::move(t);
    faults_version.fetch_add(1, std::memory_order_release);
  }

  // The ids-file line is written before the answer (see server.h).
  void record(std::string_view id, uint32_t attempt, std::string_view status, bool ok,
              const Request& req) {
    bump(stats.ids_received);
    std::lock_guard<std::mutex> lock(ids_mu);
    auto it = ids.find(std::string(id));
    if (it == ids.end()) {
      if (ids.size() < kMaxTrackedIds) {
        it = ids.emplace(id).first;
      } else {
        ids_capped = true;
      }
    }
    if (ok && it != ids.end()) ids_ok.insert(*it);
    if (ids_fd >= 0) {
      std::string line;
      line.reserve(id.size() + status.size() + 16);
      line.append(id);
      line += ' ';
      line += std::to_string(attempt);
      line += ' ';
      line.append(status);
      line += '\n';
      // O_APPEND: one write per line; the kernel has it even if we are killed right after.
      ssize_t n = ::write(ids_fd, line.data(), line.size());
      (void)n;
    }
    if (headers_fd >= 0) {
      std::string line = "{\"id\":";
      append_json_text(line, id);
      line += ",\"attempt\":";
      line += std::to_string(attempt);
      line += ",\"status\":";
      append_json_text(line, status);
      line += ",\"target\":";
      append_json_text(line, req.target);
      line += ",\"headers\":[";
      std::string_view header_lines = req.header_lines;
      bool first = true;
      while (!header_lines.empty()) {
        const size_t eol = header_lines.find("\r\n");
        std::string_view h = header_lines.substr(0, eol);
        header_lines =
            eol == std::string_view::npos ? std::string_view() : header_lines.substr(eol + 2);
        const size_t colon = h.find(':');
        if (colon == std::string_view::npos) continue;
        std::string_view value = h.substr(colon + 1);
        while (!value.empty() && (value.front() == ' ' || value.front() == '\t'))
          value.remove_prefix(1);
        while (!value.empty() && (value.back() == ' ' || value.back() == '\t'))
          value.remove_suffix(1);
        if (!first) line += ',';
        first = false;
        line += '[';
        append_json_text(line, h.substr(0, colon));
        line += ',';
        append_json_text(line, value);
        line += ']';
      }
      line += "]}\n";
      ssize_t n = ::write(headers_fd, line.data(), line.size());
      (void)n;
    }
  }

  // A JSON string of `s`: quotes, backslashes and control bytes escaped, and every byte above
  // 0x7f as \u00XX, so the line is valid JSON whatever a client sent.
  static void append_json_text(std::string& out, std::string_view s) {
    static constexpr char kHex[] = "0123456789abcdef";
    out += '"';
    for (char ch : s) {
      const auto c = static_cast<unsigned char>(ch);
      if (c == '"' || c == '\\') {
        out += '\\';
        out += ch;
      } else if (c < 0x20 || c >= 0x7f) {
        out += "\\u00";
        out += kHex[c >> 4];
        out += kHex[c & 15];
      } else {
        out += ch;
      }
    }
    out += '"';
  }

  std::string stats_json() {
    const Stats& s = stats;
    auto g = [](const std::atomic<uint64_t>& c) {
      return std::to_string(c.load(std::memory_order_relaxed));
    };
    // Appended piece by piece: `"literal" + std::to_string(...)` (operator+ inserting at the
    // front) trips GCC 12's false -Wrestrict at -O3 (Release) under -Werror.
    std::string j = "{\"requests\":";
    j += g(s.requests);
    j += ",\"by_status\":{";
    bool first = true;
    for (int st = 0; st < kMaxStatus; ++st) {
      uint64_t n = s.by_status[st].load(std::memory_order_relaxed);
      if (n == 0) continue;
      if (!first) j += ',';
      first = false;
      j += '"';
      j += std::to_string(st);
      j += "\":";
      j += std::to_string(n);
    }
    j += "}";
    size_t unique = 0, unique_ok = 0;
    bool capped = false;
    {
      std::lock_guard<std::mutex> lock(ids_mu);
      unique = ids.size();
      unique_ok = ids_ok.size();
      capped = ids_capped;
    }
    j += ",\"bad_signatures\":" + g(s.bad_signatures);
    j += ",\"ids_received\":" + g(s.ids_received);
    j += ",\"unique_ids\":" + std::to_string(unique);
    j += ",\"unique_ids_ok\":" + std::to_string(unique_ok);
    j += std::string(",\"ids_capped\":") + (capped ? "true" : "false");
    j += ",\"connections_accepted\":" + g(s.connections_accepted);
    j += ",\"connections_open\":" + g(s.connections_open);
    j += ",\"bytes_received\":" + g(s.bytes_received);
    j += ",\"bytes_sent\":" + g(s.bytes_sent);
    j += ",\"resets\":" + g(s.resets);
    j += ",\"hangs\":" + g(s.hangs);
    j += ",\"status_checks\":" + g(s.status_checks);
    j += ",\"delayed\":" + g(s.delayed);
    j += ",\"trickles\":" + g(s.trickles);
    j += ",\"endless\":" + g(s.endless);
    j += ",\"redirects\":" + g(s.redirects);
    j += ",\"closes\":" + g(s.closes);
    j += ",\"stalls\":" + g(s.stalls);
    j += ",\"parse_errors\":" + g(s.parse_errors);
    j += ",\"control_requests\":" + g(s.control_requests);
    j += ",\"tls_handshakes\":" + g(s.tls_handshakes);
    j += ",\"tls_resumed\":" + g(s.tls_resumed);
    j += ",\"tls_handshake_failures\":" + g(s.tls_handshake_failures);
    j += ",\"verify\":\"" + std::string(verify_mode_name(options.verify)) + "\"";
    j += ",\"faults\":[";
    auto t = current_faults();
    for (size_t i = 0; i < t->entries.size(); ++i) {
      const auto& e = *t->entries[i];
      if (i) j += ',';
      j += "{\"prefix\":\"" + json_escape(e.rule.prefix) + "\",\"spec\":\"" +
           json_escape(e.rule.spec.text) +
           "\",\"matched\":" + std::to_string(e.used.load(std::memory_order_relaxed)) + "}";
    }
    j += "]}";
    return j;
  }
};

namespace {

struct InBuffer {
  std::unique_ptr<char[]> data;
  size_t cap = 0, begin = 0, end = 0;

  size_t size() const { return end - begin; }
  const char* readable() const { return data.get() + begin; }
  void consume(size_t n) {
    begin += n;
    if (begin == end) begin = end = 0;
  }
  // Room for at least `min` bytes at the end; compacts or grows.
  char* writable(size_t min) {
    if (cap - end < min && begin > 0) {
      std::memmove(data.get(), data.get() + begin, end - begin);
      end -= begin;
      begin = 0;
    }
    if (cap - end < min) {
      size_t ncap = std::max(cap * 2, std::max(end + min, kInitialInBuffer));
      auto n = std::make_unique<char[]>(ncap);
      if (end) std::memcpy(n.get(), data.get(), end);
      data = std::move(n);
      cap = ncap;
    }
    return data.get() + end;
  }
  size_t room() const { return cap - end; }
};

enum class ConnState : uint8_t {
  kHandshake,  // TLS handshake in progress
  kReading,    // parsing requests and answering
  kDelayed,    // an answer waits for its delay
  kTrickle,    // an answer goes out one byte per interval
  kHung,       // fault "hang": never answer
  kEndless,    // fault "endless_chunked"
  kLingering,  // our FIN is sent; draining the peer's data before close
};

struct Conn {
  int fd = -1;
  uint64_t gen = 0;
  bssl::UniquePtr<SSL> ssl;
  ConnState state = ConnState::kReading;
  InBuffer in;
  std::string out;
  size_t out_off = 0;
  bool want_out = false;  // EPOLLOUT registered
  bool reading = true;    // EPOLLIN registered
  bool close_after_flush = false;
  bool peer_eof = false;
  bool continue_sent = false;
  std::string pending;  // a delayed or trickled answer
  size_t pending_off = 0;
  bool pending_close = false;  // close after the pending answer
  Micros trickle{0};
  uint64_t answered = 0;
  uint64_t activity = 0;  // bumps on every read, for the idle timer
  std::string chunked_body;
};

enum class TimerKind : uint8_t { kResume, kTrickle, kIdle, kLingerEnd };

struct Timer {
  int64_t due_ns;
  int fd;
  uint64_t gen;
  uint64_t stamp;
  TimerKind kind;
  bool operator>(const Timer& o) const { return due_ns > o.due_ns; }
};

class Worker {
 public:
  Worker(Shared& shared, int index)
      : sh_(shared),
        rng_(shared.options.seed * 0x9E3779B97F4A7C15ULL + static_cast<uint64_t>(index)) {
    epfd_ = epoll_create1(EPOLL_CLOEXEC);
    if (epfd_ < 0) throw std::runtime_error("epoll_create1 failed");
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLEXCLUSIVE;
    ev.data.fd = sh_.listen_fd;
    if (epoll_ctl(epfd_, EPOLL_CTL_ADD, sh_.listen_fd, &ev) != 0) {
      throw std::runtime_error("epoll_ctl listen failed");
    }
    ev.events = EPOLLIN;
    ev.data.fd = sh_.stop_fd;
    epoll_ctl(epfd_, EPOLL_CTL_ADD, sh_.stop_fd, &ev);
    ok_response_ = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok";
  }

  ~Worker() {
    for (auto& c : conns_) {
      if (c) {
        ::close(c->fd);
        bump(sh_.stats.connections_open, static_cast<uint64_t>(-1));
      }
    }
    ::close(epfd_);
  }

  void run() {
    std::array<epoll_event, kMaxEvents> events;
    while (!stopping_) {
      timespec timeout{1, 0};
      timespec* tp = &timeout;
      if (!timers_.empty()) {
        int64_t wait = std::max<int64_t>(0, timers_.top().due_ns - mono_ns());
        if (wait < 1'000'000'000) timeout = {0, static_cast<long>(wait)};
      }
      int n = epoll_pwait2(epfd_, events.data(), kMaxEvents, tp, nullptr);
      if (n < 0 && errno != EINTR) break;
      for (int i = 0; i < n; ++i) {
        int fd = events[i].data.fd;
        uint32_t ev = events[i].events;
        if (fd == sh_.listen_fd) {
          accept_some();
        } else if (fd == sh_.stop_fd) {
          stopping_ = true;
        } else {
          on_event(fd, ev);
        }
      }
      run_timers();
    }
  }

 private:
  Conn* conn(int fd) {
    return fd >= 0 && static_cast<size_t>(fd) < conns_.size() ? conns_[fd].get() : nullptr;
  }

  void accept_some() {
    for (int i = 0; i < kMaxAcceptsPerEvent; ++i) {
      int fd = accept4(sh_.listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) return;  // EAGAIN (another worker took it), EMFILE, ...
      int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      auto c = std::make_unique<Conn>();
      c->fd = fd;
      c->gen = ++next_gen_;
      if (sh_.options.stall) {
        // --stall: read and discard, never answer, not even a TLS ServerHello.
        bump(sh_.stats.stalls);
        c->state = ConnState::kHung;
      } else if (sh_.ssl_ctx) {
        c->ssl.reset(SSL_new(sh_.ssl_ctx.get()));
        SSL_set_fd(c->ssl.get(), fd);
        SSL_set_accept_state(c->ssl.get());
        c->state = ConnState::kHandshake;
      }
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.fd = fd;
      if (epoll_ctl(epfd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
        ::close(fd);
        continue;
      }
      if (static_cast<size_t>(fd) >= conns_.size()) conns_.resize(fd + 1);
      conns_[fd] = std::move(c);
      bump(sh_.stats.connections_accepted);
      bump(sh_.stats.connections_open);
    }
  }

  void update_events(Conn& c, bool reading, bool want_out) {
    if (c.reading == reading && c.want_out == want_out) return;
    c.reading = reading;
    c.want_out = want_out;
    epoll_event ev{};
    ev.events = (reading ? uint32_t{EPOLLIN} : 0u) | (want_out ? uint32_t{EPOLLOUT} : 0u);
    ev.data.fd = c.fd;
    epoll_ctl(epfd_, EPOLL_CTL_MOD, c.fd, &ev);
  }

  void close_conn(Conn& c, bool rst = false) {
    if (rst) {
      linger l{1, 0};  // RST instead of FIN: "receiver acted, response lost" (SPEC R12.9)
      setsockopt(c.fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
    }
    int fd = c.fd;
    ::close(fd);  // also removes it from the epoll set
    conns_[fd].reset();
    bump(sh_.stats.connections_open, static_cast<uint64_t>(-1));
  }

  void on_event(int fd, uint32_t ev) {
    Conn* c = conn(fd);
    if (c == nullptr) return;
    if (c->state == ConnState::kHandshake) {
      handshake(*c);
      return;
    }
    if (ev & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
      if (!read_some(*c)) return;  // closed
      if (c->state == ConnState::kReading) {
        if (!process(*c)) return;
      }
    }
    if (c->state == ConnState::kEndless) {
      pump_endless(*c);
      return;
    }
    flush(*c);
  }

  void handshake(Conn& c) {
    ERR_clear_error();
    int r = SSL_do_handshake(c.ssl.get());
    if (r == 1) {
      bump(SSL_session_reused(c.ssl.get()) ? sh_.stats.tls_resumed : sh_.stats.tls_handshakes);
      c.state = ConnState::kReading;
      update_events(c, true, false);
      // The first request may already sit in the TLS buffers.
      if (!read_some(c)) return;
      if (process(c)) flush(c);
      return;
    }
    int err = SSL_get_error(c.ssl.get(), r);
    if (err == SSL_ERROR_WANT_READ) {
      update_events(c, true, false);
    } else if (err == SSL_ERROR_WANT_WRITE) {
      update_events(c, true, true);
    } else {
      bump(sh_.stats.tls_handshake_failures);
      close_conn(c);
    }
  }

  // Reads what is available into c.in. False if the connection was closed.
  bool read_some(Conn& c) {
    const size_t limit = sh_.options.max_header_bytes + sh_.options.max_body_bytes + kReadChunk;
    for (;;) {
      if (c.in.size() > limit) {
        close_conn(c);  // a peer pipelining far beyond what we answer
        return false;
      }
      char* dst = c.in.writable(kReadChunk / 4);
      size_t room = c.in.room();
      ssize_t n;
      if (c.ssl) {
        ERR_clear_error();
        int r = SSL_read(c.ssl.get(), dst, static_cast<int>(std::min<size_t>(room, INT32_MAX)));
        if (r > 0) {
          n = r;
        } else {
          int err = SSL_get_error(c.ssl.get(), r);
          if (err == SSL_ERROR_WANT_READ) return true;
          if (err == SSL_ERROR_WANT_WRITE) {
            update_events(c, c.reading, true);
            return true;
          }
          n = (err == SSL_ERROR_ZERO_RETURN) ? 0 : -1;
          if (n < 0) errno = ECONNRESET;
        }
      } else {
        n = ::recv(c.fd, dst, room, 0);
      }
      if (n > 0) {
        c.in.end += static_cast<size_t>(n);
        bump(sh_.stats.bytes_received, static_cast<uint64_t>(n));
        ++c.activity;
        if (c.state == ConnState::kLingering || c.state == ConnState::kHung) {
          c.in.consume(c.in.size());  // never answered: discard
        }
        if (!c.ssl) return true;  // level-triggered: epoll tells us if more is there
        continue;                 // TLS: drain the record layer until WANT_READ
      }
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) return true;
      // EOF or error.
      if (n == 0 && (c.state == ConnState::kReading || c.state == ConnState::kDelayed ||
                     c.state == ConnState::kTrickle)) {
        // Half-close: answer what was sent, then close.
        c.peer_eof = true;
        update_events(c, false, c.want_out);
        if (c.state == ConnState::kReading && c.in.size() == 0 && c.out_off == c.out.size()) {
          close_conn(c);
          return false;
        }
        return true;
      }
      close_conn(c);
      return false;
    }
  }

  // Answers every complete request in c.in while the state allows. False if closed.
  bool process(Conn& c) {
    const Options& o = sh_.options;
    while (c.state == ConnState::kReading && !c.close_after_flush && c.in.size() > 0) {
      Request req;
      int err_status = 0;
      const char* data = c.in.readable();
      const size_t avail = c.in.size();
      ParseResult r = parse_request_head(data, avail, o.max_header_bytes, req, &err_status);
      if (r == ParseResult::kIncomplete) break;
      if (r == ParseResult::kError) {
        bump(sh_.stats.parse_errors);
        send_simple(c, err_status, "bad request\n", /*close=*/true);
        break;
      }
      std::string_view body;
      size_t total = 0;
      if (req.chunked) {
        size_t consumed = 0;
        ParseResult b = parse_chunked_body(data + req.head_bytes, avail - req.head_bytes,
                                           o.max_body_bytes, false, c.chunked_body, &consumed);
        if (b == ParseResult::kIncomplete) {
          maybe_continue(c, req);
          break;
        }
        if (b == ParseResult::kError) {
          bump(sh_.stats.parse_errors);
          send_simple(c, 400, "bad chunked body\n", true);
          break;
        }
        parse_chunked_body(data + req.head_bytes, avail - req.head_bytes, o.max_body_bytes, true,
                           c.chunked_body, &consumed);
        body = c.chunked_body;
        total = req.head_bytes + consumed;
      } else {
        if (req.content_length > o.max_body_bytes) {
          bump(sh_.stats.parse_errors);
          send_simple(c, 413, "body too large\n", true);
          break;
        }
        if (avail - req.head_bytes < req.content_length) {
          maybe_continue(c, req);
          break;
        }
        body = std::string_view(data + req.head_bytes, req.content_length);
        total = req.head_bytes + req.content_length;
      }
      bool alive = handle(c, req, body);
      if (!alive) return false;
      c.in.consume(total);
      c.continue_sent = false;
    }
    if (c.peer_eof && c.state == ConnState::kReading && !c.close_after_flush) {
      // Nothing more will come; close once the answers are out.
      c.close_after_flush = true;
    }
    return true;
  }

  void maybe_continue(Conn& c, const Request& req) {
    if (req.expect_continue && !c.continue_sent) {
      c.continue_sent = true;
      c.out += "HTTP/1.1 100 Continue\r\n\r\n";
    }
  }

  void send_simple(Conn& c, int status, std::string_view body, bool close) {
    c.out += "HTTP/1.1 " + std::to_string(status) + " " + reason_phrase(status) +
             "\r\nContent-Type: text/plain\r\nContent-Length: " + std::to_string(body.size()) +
             (close ? "\r\nConnection: close" : "") + "\r\n\r\n";
    c.out.append(body);
    if (close) c.close_after_flush = true;
  }

  double uniform() { return static_cast<double>(rng_() >> 11) * 0x1.0p-53; }
  bool draw(double p) { return p >= 1 || (p > 0 && uniform() < p); }

  bool handle_control(Conn& c, const Request& req, std::string_view body, std::string_view path) {
    bump(sh_.stats.control_requests);
    const bool close = !req.keep_alive;
    if (path == "/_stats") {
      std::string j = sh_.stats_json();
      c.out += "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " +
               std::to_string(j.size()) + (close ? "\r\nConnection: close" : "") + "\r\n\r\n" + j;
      if (close) c.close_after_flush = true;
    } else if (path == "/_health") {
      send_simple(c, 200, "ok", close);
    } else if (path == "/_reset" && req.method == "POST") {
      sh_.stats.reset();
      {
        std::lock_guard<std::mutex> lock(sh_.ids_mu);
        sh_.ids.clear();
        sh_.ids_ok.clear();
        sh_.ids_capped = false;
      }
      std::vector<FaultRule> rules;
      for (const auto& e : sh_.current_faults()->entries) rules.push_back(e->rule);
      sh_.set_faults(FaultTable::make(rules));  // limit counters start again
      send_simple(c, 200, "reset\n", close);
    } else if (path == "/_fault" && req.method == "POST") {
      std::vector<FaultRule> rules;
      std::string_view rest = body;
      try {
        while (!rest.empty()) {
          size_t nl = rest.find('\n');
          std::string_view line = rest.substr(0, nl);
          if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
          if (!line.empty()) rules.push_back(parse_fault_rule(line));
          if (nl == std::string_view::npos) break;
          rest.remove_prefix(nl + 1);
        }
      } catch (const std::exception& e) {
        send_simple(c, 400, std::string(e.what()) + "\n", close);
        return true;
      }
      sh_.set_faults(FaultTable::make(rules));
      send_simple(c, 200, "faults: " + std::to_string(rules.size()) + "\n", close);
    } else if (path == "/_fault") {
      std::string text;
      for (const auto& e : sh_.current_faults()->entries) {
        text += e->rule.prefix + "=" + e->rule.spec.text + "\n";
      }
      send_simple(c, 200, text, close);
    } else {
      return false;
    }
    return true;
  }

  // GET .../status/<id> (--status): does the receiver have this webhook? Signed requests are
  // verified like deliveries; the fault rules of the path answer first (processing, down).
  bool handle_status(Conn& c, const Request& req, std::string_view body, std::string_view id) {
    bump(sh_.stats.status_checks);
    const bool close = !req.keep_alive;
    if (sh_.verifier.enabled()) {
      const char* reason = "";
      if (!sh_.verifier.verify(req, body, static_cast<int64_t>(::time(nullptr)), &reason)) {
        bump(sh_.stats.bad_signatures);
        send_simple(c, 401, std::string("bad signature: ") + reason + "\n", close);
        return true;
      }
    }
    uint64_t v = sh_.faults_version.load(std::memory_order_acquire);
    if (v != faults_version_ || !faults_) {
      faults_ = sh_.current_faults();
      faults_version_ = v;
    }
    if (const FaultSpec* f = faults_->match(req.target); f != nullptr) {
      if (draw(f->reset) || draw(f->drop)) {
        close_conn(c, /*rst=*/true);
        return false;
      }
      if (draw(f->hang)) {
        c.state = ConnState::kHung;
        return true;
      }
      if (!f->status_mix.empty()) {
        double u = uniform(), acc = 0;
        for (const auto& w : f->status_mix) {
          acc += w.probability;
          if (u < acc) {
            send_simple(c, w.status, "processing\n", close);
            return true;
          }
        }
      }
    }
    bool known = false;
    {
      std::lock_guard<std::mutex> lock(sh_.ids_mu);
      known = sh_.ids.count(std::string(id)) != 0;
    }
    send_simple(c, known ? 200 : 404, known ? "received\n" : "not received\n", close);
    return true;
  }

  // One complete request. False if the connection was closed (reset).
  bool handle(Conn& c, const Request& req, std::string_view body) {
    std::string_view path = req.target.substr(0, req.target.find('?'));
    if (path.size() > 2 && path[0] == '/' && path[1] == '_' && handle_control(c, req, body, path)) {
      return true;
    }
    bump(sh_.stats.requests);
    ++c.answered;
    if (sh_.options.status_route && req.method == "GET") {
      const size_t slash = path.rfind('/');
      const std::string_view parent = path.substr(0, slash == std::string_view::npos ? 0 : slash);
      if (slash != std::string_view::npos && slash + 1 < path.size() && parent.size() >= 7 &&
          parent.substr(parent.size() - 7) == "/status") {
        return handle_status(c, req, body, path.substr(slash + 1));
      }
    }

    // The delivery id: Smengo-Delivery-Id (with the attempt, SPEC R5.4), else webhook-id,
    // else X-Webhook-Id (SPEC R11).
    std::string_view id;
    uint32_t attempt = 0;
    if (!req.smengo_delivery_id.empty() &&
        !split_smengo_id(req.smengo_delivery_id, &id, &attempt)) {
      id = req.smengo_delivery_id;
    }
    if (id.empty()) id = !req.webhook_id.empty() ? req.webhook_id : req.x_webhook_id;

    const bool close_requested = !req.keep_alive;
    if (sh_.verifier.enabled()) {
      const char* reason = "";
      if (!sh_.verifier.verify(req, body, static_cast<int64_t>(::time(nullptr)), &reason)) {
        bump(sh_.stats.bad_signatures);
        bump(sh_.stats.by_status[401]);
        if (!id.empty()) sh_.record(id, attempt, "401", false, req);
        send_simple(c, 401, std::string("bad signature: ") + reason + "\n", close_requested);
        return true;
      }
    }

    uint64_t v = sh_.faults_version.load(std::memory_order_acquire);
    if (v != faults_version_ || !faults_) {
      faults_ = sh_.current_faults();
      faults_version_ = v;
    }
    const FaultSpec* f = faults_->match(req.target);

    if (f != nullptr && draw(f->drop)) {  // lost before the receiver saw it: not recorded
      bump(sh_.stats.resets);
      close_conn(c, /*rst=*/true);
      return false;
    }
    if (f != nullptr && draw(f->reset)) {
      bump(sh_.stats.resets);
      if (!id.empty()) sh_.record(id, attempt, "reset", false, req);
      // SO_LINGER 0 drops whatever is still queued, earlier pipelined answers included.
      close_conn(c, /*rst=*/true);
      return false;
    }
    if (f != nullptr && draw(f->hang)) {
      bump(sh_.stats.hangs);
      if (!id.empty()) sh_.record(id, attempt, "hang", false, req);
      c.state = ConnState::kHung;
      return true;
    }

    int status = 200;
    if (f != nullptr) {
      status = f->ok_status;
      if (!f->redirect.empty()) {
        status = 302;
      } else if (!f->status_mix.empty()) {
        double u = uniform(), acc = 0;
        for (const auto& w : f->status_mix) {
          acc += w.probability;
          if (u < acc) {
            status = w.status;
            break;
          }
        }
      }
    }
    bump(sh_.stats.by_status[status]);
    if (!id.empty()) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "%d", status);
      sh_.record(id, attempt, buf, status >= 200 && status < 300, req);
    }

    bool close = close_requested || (sh_.options.max_requests_per_connection > 0 &&
                                     c.answered >= sh_.options.max_requests_per_connection);
    if (f == nullptr) {
      if (status == 200 && !close && req.method != "HEAD") {
        c.out += ok_response_;  // the benchmark path
      } else {
        send_simple(c, status, req.method == "HEAD" ? "" : "ok", close);
      }
      schedule_idle(c);
      return true;
    }

    if (draw(f->close)) {
      close = true;
      bump(sh_.stats.closes);
    }
    const bool endless = draw(f->endless_chunked);
    std::string resp = "HTTP/1.1 " + std::to_string(status) + " " + reason_phrase(status) + "\r\n";
    resp += "Content-Type: text/plain\r\n";
    if (!f->retry_after.empty()) resp += "Retry-After: " + f->retry_after + "\r\n";
    if (status == 302) {
      bump(sh_.stats.redirects);
      resp += "Location: " + f->redirect + "\r\n";
    }
    for (size_t k = 0; k < f->big_headers_kib; ++k) {
      // 1 KiB per header line: "X-Filler-NNNNNN: " + padding + CRLF.
      std::string name = "X-Filler-" + std::to_string(k) + ": ";
      resp += name;
      resp.append(1024 - name.size() - 2, 'f');
      resp += "\r\n";
    }
    if (close) resp += "Connection: close\r\n";
    if (endless) {
      bump(sh_.stats.endless);
      resp += "Transfer-Encoding: chunked\r\n\r\n";
      c.out += resp;
      c.state = ConnState::kEndless;
      return true;
    }
    std::string_view resp_body = "ok";
    std::string big;
    if (f->body_bytes != FaultSpec::kDefaultBody) {
      big.assign(f->body_bytes, 'b');
      resp_body = big;
    }
    if (no_body_status(status) || req.method == "HEAD") resp_body = {};
    resp += "Content-Length: " + std::to_string(resp_body.size()) + "\r\n\r\n";
    resp.append(resp_body);

    Micros delay{0};
    if (f->delay_max.count() > 0 && draw(f->delay_probability)) {
      delay = f->delay_min;
      if (f->delay_max > f->delay_min) {
        delay += Micros(static_cast<int64_t>(
            uniform() * static_cast<double>((f->delay_max - f->delay_min).count())));
      }
    }
    if (delay.count() > 0 || f->trickle.count() > 0) {
      c.pending = std::move(resp);
      c.pending_off = 0;
      c.pending_close = close;
      c.trickle = f->trickle;
      if (delay.count() > 0) {
        bump(sh_.stats.delayed);
        c.state = ConnState::kDelayed;
        add_timer(c, mono_ns() + delay.count() * 1000, TimerKind::kResume);
      } else {
        start_trickle(c);
      }
      return true;
    }
    c.out += resp;
    if (close) c.close_after_flush = true;
    schedule_idle(c);
    return true;
  }

  void start_trickle(Conn& c) {
    bump(sh_.stats.trickles);
    c.state = ConnState::kTrickle;
    add_timer(c, mono_ns(), TimerKind::kTrickle);
  }

  void add_timer(Conn& c, int64_t due_ns, TimerKind kind) {
    timers_.push(Timer{due_ns, c.fd, c.gen, c.activity, kind});
  }

  void schedule_idle(Conn& c) {
    if (sh_.options.idle_timeout.count() > 0) {
      add_timer(c, mono_ns() + sh_.options.idle_timeout.count() * 1000, TimerKind::kIdle);
    }
  }

  // Back to reading after a delayed / trickled answer; continues with pipelined requests.
  void resume_reading(Conn& c) {
    c.state = ConnState::kReading;
    c.pending.clear();
    if (c.pending_close) c.close_after_flush = true;
    if (process(c)) {
      schedule_idle(c);
      flush(c);
    }
  }

  void run_timers() {
    const int64_t now = mono_ns();
    int budget = 1024;  // bounded work per turn
    while (!timers_.empty() && timers_.top().due_ns <= now && budget-- > 0) {
      Timer t = timers_.top();
      timers_.pop();
      Conn* c = conn(t.fd);
      if (c == nullptr || c->gen != t.gen) continue;
      switch (t.kind) {
        case TimerKind::kResume:
          if (c->state != ConnState::kDelayed) break;
          if (c->trickle.count() > 0) {
            start_trickle(*c);
          } else {
            c->out += c->pending;
            resume_reading(*c);
          }
          break;
        case TimerKind::kTrickle: {
          if (c->state != ConnState::kTrickle) break;
          c->out += c->pending[c->pending_off++];
          if (c->pending_off >= c->pending.size()) {
            resume_reading(*c);  // flushes
          } else {
            if (!flush(*c)) break;
            add_timer(*c, now + c->trickle.count() * 1000, TimerKind::kTrickle);
          }
          break;
        }
        case TimerKind::kIdle:
          if (c->activity == t.stamp && c->state == ConnState::kReading && c->in.size() == 0 &&
              c->out_off == c->out.size()) {
            close_conn(*c);
          }
          break;
        case TimerKind::kLingerEnd:
          if (c->state == ConnState::kLingering) close_conn(*c);
          break;
      }
    }
  }

  // Writes c.out. False if the connection was closed.
  bool flush(Conn& c) {
    while (c.out_off < c.out.size()) {
      ssize_t n;
      size_t len = c.out.size() - c.out_off;
      if (c.ssl) {
        ERR_clear_error();
        int r = SSL_write(c.ssl.get(), c.out.data() + c.out_off,
                          static_cast<int>(std::min<size_t>(len, 1 << 30)));
        if (r > 0) {
          n = r;
        } else {
          int err = SSL_get_error(c.ssl.get(), r);
          if (err == SSL_ERROR_WANT_WRITE || err == SSL_ERROR_WANT_READ) {
            update_events(c, c.reading, true);
            return true;
          }
          close_conn(c);
          return false;
        }
      } else {
        n = ::send(c.fd, c.out.data() + c.out_off, len, MSG_NOSIGNAL);
        if (n < 0) {
          if (errno == EAGAIN || errno == EINTR) {
            update_events(c, c.reading, true);
            return true;
          }
          close_conn(c);
          return false;
        }
      }
      c.out_off += static_cast<size_t>(n);
      bump(sh_.stats.bytes_sent, static_cast<uint64_t>(n));
    }
    c.out.clear();
    c.out_off = 0;
    if (c.state == ConnState::kEndless) {
      update_events(c, c.reading, true);  // keep pumping while the peer reads
      return true;
    }
    update_events(c, c.reading && !c.peer_eof, false);
    if (c.close_after_flush && c.state == ConnState::kReading) return begin_linger(c);
    return true;
  }

  // Our answer is out and we close: send FIN, then drain what the peer still sends for a
  // moment, so that unread input does not turn our FIN into an RST that could destroy the
  // answer in flight.
  bool begin_linger(Conn& c) {
    if (c.peer_eof) {
      close_conn(c);
      return false;
    }
    if (c.ssl) SSL_shutdown(c.ssl.get());  // close_notify, best effort
    ::shutdown(c.fd, SHUT_WR);
    c.state = ConnState::kLingering;
    c.in.consume(c.in.size());
    update_events(c, true, false);
    add_timer(c, mono_ns() + kLingerCloseNs, TimerKind::kLingerEnd);
    return true;
  }

  void pump_endless(Conn& c) {
    static const std::string chunk = [] {
      char head[32];
      std::snprintf(head, sizeof(head), "%zx\r\n", kEndlessChunk);
      return std::string(head) + std::string(kEndlessChunk, 'e') + "\r\n";
    }();
    for (int i = 0; i < kEndlessChunksPerTurn && c.out.size() - c.out_off < kEndlessOutHighWater;
         ++i) {
      c.out += chunk;
    }
    flush(c);
  }

  Shared& sh_;
  int epfd_ = -1;
  bool stopping_ = false;
  std::mt19937_64 rng_;
  uint64_t next_gen_ = 0;
  std::vector<std::unique_ptr<Conn>> conns_;  // by fd
  std::priority_queue<Timer, std::vector<Timer>, std::greater<Timer>> timers_;
  std::shared_ptr<FaultTable> faults_;
  uint64_t faults_version_ = ~uint64_t{0};
  std::string ok_response_;
};

}  // namespace

Sink::Sink(Options options) : shared_(std::make_unique<Shared>(std::move(options))) {
  Shared& sh = *shared_;
  const Options& o = sh.options;

  // Many connections in benchmarks: raise the fd limit to the hard limit.
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }

  sockaddr_storage ss{};
  socklen_t len = 0;
  int family = AF_INET;
  if (o.listen_host.find(':') != std::string::npos) {
    family = AF_INET6;
    auto* a6 = reinterpret_cast<sockaddr_in6*>(&ss);
    a6->sin6_family = AF_INET6;
    a6->sin6_port = htons(o.listen_port);
    if (inet_pton(AF_INET6, o.listen_host.c_str(), &a6->sin6_addr) != 1) {
      throw std::runtime_error("bad IPv6 address: " + o.listen_host);
    }
    len = sizeof(*a6);
  } else {
    auto* a4 = reinterpret_cast<sockaddr_in*>(&ss);
    a4->sin_family = AF_INET;
    a4->sin_port = htons(o.listen_port);
    std::string host = o.listen_host == "localhost" ? "127.0.0.1" : o.listen_host;
    if (inet_pton(AF_INET, host.c_str(), &a4->sin_addr) != 1) {
      throw std::runtime_error("bad IPv4 address: " + o.listen_host);
    }
    len = sizeof(*a4);
  }
  sh.listen_fd = socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (sh.listen_fd < 0) throw std::runtime_error("socket failed");
  int one = 1;
  setsockopt(sh.listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (family == AF_INET6) setsockopt(sh.listen_fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
  if (bind(sh.listen_fd, reinterpret_cast<sockaddr*>(&ss), len) != 0) {
    throw std::runtime_error("bind " + o.listen_host + ":" + std::to_string(o.listen_port) +
                             " failed: " + std::strerror(errno));
  }
  if (listen(sh.listen_fd, 4096) != 0) throw std::runtime_error("listen failed");
  socklen_t blen = len;
  getsockname(sh.listen_fd, reinterpret_cast<sockaddr*>(&ss), &blen);
  sh.port = ntohs(family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                                     : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  sh.stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (sh.stop_fd < 0) throw std::runtime_error("eventfd failed");

  if (!o.tls_cert.empty()) {
    sh.ssl_ctx.reset(SSL_CTX_new(TLS_server_method()));
    SSL_CTX* ctx = sh.ssl_ctx.get();
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    static const uint8_t kSidCtx[] = "ringcast-sink";
    SSL_CTX_set_session_id_context(ctx, kSidCtx, sizeof(kSidCtx) - 1);
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_SERVER);
    if (SSL_CTX_use_certificate_chain_file(ctx, o.tls_cert.c_str()) != 1) {
      throw std::runtime_error("cannot load --tls-cert " + o.tls_cert);
    }
    if (SSL_CTX_use_PrivateKey_file(ctx, o.tls_key.c_str(), SSL_FILETYPE_PEM) != 1 ||
        SSL_CTX_check_private_key(ctx) != 1) {
      throw std::runtime_error("cannot load --tls-key " + o.tls_key);
    }
  }
  if (!o.ids_file.empty()) {
    sh.ids_fd = ::open(o.ids_file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (sh.ids_fd < 0) throw std::runtime_error("cannot open --ids-file " + o.ids_file);
  }
  if (!o.headers_file.empty()) {
    sh.headers_fd = ::open(o.headers_file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (sh.headers_fd < 0) throw std::runtime_error("cannot open --headers-file " + o.headers_file);
  }
  sh.faults = FaultTable::make(o.faults);
}

Sink::~Sink() {
  Shared& sh = *shared_;
  if (sh.listen_fd >= 0) ::close(sh.listen_fd);
  if (sh.stop_fd >= 0) ::close(sh.stop_fd);
  if (sh.ids_fd >= 0) ::close(sh.ids_fd);
  if (sh.headers_fd >= 0) ::close(sh.headers_fd);
}

uint16_t Sink::port() const {
  return shared_->port;
}

std::string Sink::address() const {
  const std::string& h = shared_->options.listen_host;
  bool v6 = h.find(':') != std::string::npos;
  return (v6 ? "[" + h + "]" : h) + ":" + std::to_string(shared_->port);
}

void Sink::run() {
  std::vector<std::unique_ptr<Worker>> workers;
  for (int i = 0; i < shared_->options.threads; ++i) {
    workers.push_back(std::make_unique<Worker>(*shared_, i));
  }
  std::vector<std::thread> threads;
  for (size_t i = 1; i < workers.size(); ++i) {
    threads.emplace_back([w = workers[i].get()] { w->run(); });
  }
  workers[0]->run();
  for (auto& t : threads) t.join();
}

void Sink::stop() {
  uint64_t one = 1;
  ssize_t n = ::write(shared_->stop_fd, &one, sizeof(one));
  (void)n;
}

std::string Sink::stats_json() const {
  return shared_->stats_json();
}

}  // namespace ringcast::sink
