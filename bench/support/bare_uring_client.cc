#include "bench/support/bare_uring_client.h"

#include <liburing.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <string>
#include <string_view>
#include <vector>

#include "net/signing.h"

namespace ringcast::bench {
namespace {

constexpr unsigned kRingEntries = 256;
constexpr size_t kRecvBytes = 4096;
// An SQE's user_data: the connection's index << 1 | the operation.
constexpr uint64_t kSendOp = 0;
constexpr uint64_t kRecvOp = 1;

struct Conn {
  int fd = -1;
  std::string req;        // the request on the wire; the next one reuses its capacity
  size_t sent = 0;        // bytes of req the kernel has taken
  bool sending = false;   // a send of req is in flight
  bool answered = false;  // the response to req is complete
  // The response: its head is gathered at the start of buf (`have` bytes); once it is parsed,
  // `left` bytes of body are still to come, read over the start of buf and dropped.
  size_t have = 0;
  bool head_done = false;
  size_t left = 0;
  int status = 0;
  char buf[kRecvBytes];
};

// The status code and Content-Length of a response head (`head` stops before its blank line).
// False when the status line is not "HTTP/1.x NNN" or Content-Length is missing or not a number:
// the sink always sends one, and without it the end of the response is unknown.
bool parse_head(std::string_view head, int& status, size_t& content_length) {
  if (head.size() < 12 || head.compare(0, 7, "HTTP/1.") != 0 || head[8] != ' ') return false;
  status = 0;
  for (size_t i = 9; i < 12; ++i) {
    if (head[i] < '0' || head[i] > '9') return false;
    status = status * 10 + (head[i] - '0');
  }
  constexpr std::string_view kName = "content-length:";
  bool found = false;
  for (size_t eol = head.find("\r\n"); eol != std::string_view::npos;) {
    const size_t from = eol + 2;
    eol = head.find("\r\n", from);
    const std::string_view line =
        head.substr(from, eol == std::string_view::npos ? std::string_view::npos : eol - from);
    if (line.size() <= kName.size() ||
        ::strncasecmp(line.data(), kName.data(), kName.size()) != 0) {
      continue;
    }
    size_t i = kName.size();
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    const size_t digits = i;
    size_t n = 0;
    for (; i < line.size() && line[i] >= '0' && line[i] <= '9'; ++i) {
      n = n * 10 + static_cast<size_t>(line[i] - '0');
    }
    if (i == digits) return false;
    content_length = n;
    found = true;
  }
  return found;
}

struct Client {
  io_uring ring{};
  bool ring_open = false;
  std::vector<Conn> conns;
  std::string head;  // the request up to its signature headers: the same for every request
  const std::string body = make_body();
  const std::vector<std::string> secrets = {kSecret};
  int64_t now_s = 0;    // Unix seconds, read once per loop turn (as the loop does)
  bool running = true;  // new requests are started
  bool failed = false;  // a failure was reported and every socket shut down
  size_t pending = 0;   // SQEs whose CQE has not been reaped yet
  uint64_t done = 0;    // responses
  uint64_t errors = 0;  // responses other than 200
  uint64_t enters = 0;  // io_uring_enter calls

  Client() = default;
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;
  // After a normal run nothing is in flight; after a failed io_uring_enter, exiting the ring
  // cancels what is, before the sockets are closed and the buffers freed.
  ~Client() {
    if (ring_open) io_uring_queue_exit(&ring);
    for (const Conn& c : conns) {
      if (c.fd >= 0) ::close(c.fd);
    }
  }

  bool open(const BareRun& b) {
    if (b.conns < 1 || b.seconds < 1) {
      std::fprintf(stderr, "bare: conns and seconds must be >= 1\n");
      return false;
    }
    // A turn prepares at most two SQEs per connection (a send and a recv), so one submission
    // carries a whole turn. The set-up flags are the loop's (net/loop.cc), the cheapest this
    // kernel offers, with the same fallbacks.
    const unsigned entries = std::max(kRingEntries, 2 * static_cast<unsigned>(b.conns));
    const unsigned attempts[] = {
        IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN,
        IORING_SETUP_COOP_TASKRUN | IORING_SETUP_TASKRUN_FLAG,
        0,
    };
    int rc = -EINVAL;
    for (unsigned flags : attempts) {
      rc = io_uring_queue_init(entries, &ring, flags | IORING_SETUP_SUBMIT_ALL);
      if (rc == -EINVAL) rc = io_uring_queue_init(entries, &ring, flags);  // an older kernel
      if (rc == 0) break;
    }
    if (rc != 0) {
      std::fprintf(stderr, "bare: io_uring_queue_init: %s\n", std::strerror(-rc));
      return false;
    }
    ring_open = true;
    io_uring_register_ring_fd(&ring);  // saves the ring fd lookup on every io_uring_enter

    // The header set ringcast writes (net/http_connection.cc), in its order.
    head = "POST /bench HTTP/1.1\r\nHost: 127.0.0.1:" + std::to_string(b.port) +
           "\r\nUser-Agent: ringcast/" RINGCAST_VERSION
           "\r\nContent-Type: application/json\r\nContent-Length: " +
           std::to_string(body.size()) + "\r\n";

    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(b.port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    conns = std::vector<Conn>(static_cast<size_t>(b.conns));
    for (size_t i = 0; i < conns.size(); ++i) {
      Conn& c = conns[i];
      c.fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      const int one = 1;
      if (c.fd < 0 || ::setsockopt(c.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0 ||
          ::connect(c.fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
        std::fprintf(stderr, "bare: connection %zu to 127.0.0.1:%u: %s\n", i,
                     static_cast<unsigned>(b.port), std::strerror(errno));
        return false;
      }
    }
    return true;
  }

  io_uring_sqe* get_sqe() {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring);
    while (sqe == nullptr) {  // SQ full (the ring is sized so that it is not): flush it
      io_uring_submit(&ring);
      ++enters;
      sqe = io_uring_get_sqe(&ring);
    }
    ++pending;
    return sqe;
  }

  void post_send(size_t i) {
    Conn& c = conns[i];
    io_uring_sqe* sqe = get_sqe();
    io_uring_prep_send(sqe, c.fd, c.req.data() + c.sent, c.req.size() - c.sent, MSG_NOSIGNAL);
    io_uring_sqe_set_data64(sqe, (uint64_t{i} << 1) | kSendOp);
    c.sending = true;
  }

  void post_recv(size_t i) {
    Conn& c = conns[i];
    char* into = c.head_done ? c.buf : c.buf + c.have;
    const size_t room = c.head_done ? kRecvBytes : kRecvBytes - c.have;
    io_uring_sqe* sqe = get_sqe();
    io_uring_prep_recv(sqe, c.fd, into, room, 0);
    io_uring_sqe_set_data64(sqe, (uint64_t{i} << 1) | kRecvOp);
  }

  // A new request on connection i, signed now like a real sender's (fresh timestamp, HMAC of
  // the body), and its send and recv in the same turn: the recv waits in the kernel for the
  // answer, as ringcast keeps one posted on every connection, which saves a turn per request.
  void start_request(size_t i) {
    Conn& c = conns[i];
    c.req.assign(head);
    net::SignInput in;
    in.message_id = kMessageId;
    in.timestamp_s = now_s;
    in.body = body;
    in.secrets = &secrets;
    net::append_signature_headers(in, c.req);
    c.req.append("\r\n").append(body);
    c.sent = 0;
    c.answered = false;
    c.have = 0;
    c.head_done = false;
    c.left = 0;
    c.status = 0;
    post_send(i);
    post_recv(i);
  }

  // Once the window is over nothing new starts: the connection stays idle.
  void next(size_t i) {
    if (running) start_request(i);
  }

  // Reports the first failure and shuts every socket down, so that whatever is in flight
  // completes at once (a recv with 0, a send with an error) and the run ends.
  void fail(size_t i, const char* what, int err) {
    if (!failed) {
      std::fprintf(stderr, "bare: connection %zu: %s%s%s\n", i, what, err != 0 ? ": " : "",
                   err != 0 ? std::strerror(err) : "");
    }
    failed = true;
    running = false;
    for (const Conn& c : conns) ::shutdown(c.fd, SHUT_RDWR);
  }

  void on_send(size_t i, int res) {
    Conn& c = conns[i];
    if (res == -EINTR || res == -EAGAIN) {
      post_send(i);
      return;
    }
    if (res < 0) {
      fail(i, "send", -res);
      return;
    }
    c.sent += static_cast<size_t>(res);
    if (c.sent < c.req.size()) {
      post_send(i);  // a short send: the rest
      return;
    }
    if (c.answered) next(i);  // the answer came before the last byte went out
  }

  void on_recv(size_t i, int res) {
    Conn& c = conns[i];
    if (res == -EINTR || res == -EAGAIN) {
      post_recv(i);
      return;
    }
    if (res < 0) {
      fail(i, "recv", -res);
      return;
    }
    if (res == 0) {
      fail(i, "the sink closed the connection", 0);
      return;
    }
    const size_t n = static_cast<size_t>(res);
    if (!c.head_done) {
      const size_t from = c.have >= 3 ? c.have - 3 : 0;  // "\r\n\r\n" may straddle two reads
      c.have += n;
      const std::string_view got(c.buf, c.have);
      const size_t end = got.find("\r\n\r\n", from);
      if (end == std::string_view::npos) {
        if (c.have == kRecvBytes) {
          fail(i, "a response head over 4 KiB", 0);
          return;
        }
        post_recv(i);
        return;
      }
      size_t length = 0;
      if (!parse_head(got.substr(0, end), c.status, length)) {
        fail(i, "a response head without status or Content-Length", 0);
        return;
      }
      c.head_done = true;
      const size_t body_got = c.have - (end + 4);
      if (body_got > length) {
        fail(i, "bytes after the response", 0);
        return;
      }
      c.left = length - body_got;
    } else {
      if (n > c.left) {
        fail(i, "bytes after the response", 0);
        return;
      }
      c.left -= n;
    }
    if (c.left > 0) {
      post_recv(i);
      return;
    }
    c.answered = true;
    ++done;
    if (c.status != 200) ++errors;
    if (!c.sending) next(i);  // else once the rest of the request is out (on_send)
  }

  void complete(uint64_t data, int res) {
    const auto i = static_cast<size_t>(data >> 1);
    const bool is_send = (data & 1) == kSendOp;
    --pending;
    if (is_send) conns[i].sending = false;
    if (failed) return;  // the sockets are shut down: what was in flight ends, nothing starts
    if (is_send) {
      on_send(i, res);
    } else {
      on_recv(i, res);
    }
  }

  // Every CQE of the turn, handled in place: the SQEs they prepare go out with the next
  // submission.
  void reap() {
    io_uring* r = &ring;
    unsigned head_index = 0;
    unsigned seen = 0;
    io_uring_cqe* cqe = nullptr;
    io_uring_for_each_cqe(r, head_index, cqe) {
      complete(io_uring_cqe_get_data64(cqe), cqe->res);
      ++seen;
    }
    io_uring_cq_advance(r, seen);
  }
};

}  // namespace

PeerResult run_bare(const BareRun& b) {
  pin_to(b.cpu);
  PeerResult r;
  Client cl;
  if (!cl.open(b)) return r;
  rusage r0{}, r1{};
  ::getrusage(RUSAGE_SELF, &r0);
  const auto start = std::chrono::steady_clock::now();
  const auto end = start + std::chrono::seconds(b.seconds);
  auto stop = start;
  bool measured = false;
  uint64_t counted = 0, enters = 0;
  cl.now_s = ::time(nullptr);
  for (size_t i = 0; i < cl.conns.size(); ++i) cl.start_request(i);
  // One turn: submit everything prepared since the last one and wait for at least one
  // completion in a single io_uring_enter, then handle every completion there is.
  while (cl.pending > 0) {
    const int rc = io_uring_submit_and_wait(&cl.ring, 1);
    ++cl.enters;
    if (rc < 0 && rc != -EINTR) {
      std::fprintf(stderr, "bare: io_uring_submit_and_wait: %s\n", std::strerror(-rc));
      break;
    }
    cl.now_s = ::time(nullptr);
    cl.reap();
    if (!cl.running) continue;  // draining what is in flight (or a failure)
    const auto now = std::chrono::steady_clock::now();
    if (now < end) continue;
    stop = now;
    ::getrusage(RUSAGE_SELF, &r1);
    counted = cl.done;
    enters = cl.enters;
    measured = true;
    cl.running = false;
  }
  if (!measured || counted == 0) {
    std::fprintf(stderr, "bare: no figures\n");
    return r;
  }
  const double n = static_cast<double>(counted);
  const double cpu = cpu_seconds(r1) - cpu_seconds(r0);
  r.requests = counted;
  r.wall_rps = n / std::chrono::duration<double>(stop - start).count();
  r.req_per_cpu_s = n / cpu;
  r.user_us_per_req = 1e6 * (user_seconds(r1) - user_seconds(r0)) / n;
  r.sys_us_per_req = 1e6 * cpu / n - r.user_us_per_req;
  r.syscalls_per_req = static_cast<double>(enters) / n;
  if (cl.errors > 0) {
    std::fprintf(stderr, "bare: %llu non-200 answers\n",
                 static_cast<unsigned long long>(cl.errors));
  }
  return r;
}

}  // namespace ringcast::bench
