// One Redis connection on a net::Loop, the standalone redis::Client (docs/redis.md): the loop owns
// the socket (io_uring connect/send/recv, no blocking call, no second event loop); hiredis is
// only the codec (redis/reply.h).
// Invariants (beyond client.h's):
//   - pipelining: every command queued in one loop turn leaves in one send (up to
//     max_send_batch_bytes); one send is in flight at a time; replies are matched to commands
//     strictly in FIFO order;
//   - bounded: at most max_pending commands are held (queued + awaiting a reply + timed out
//     but still awaiting their reply); beyond that command() completes with kQueueFull;
//   - a command whose deadline passes completes at once (kTimeout if it was sent, and its late
//     reply is then read and discarded so the FIFO stays aligned; kTimeoutUnsent if not);
//   - when the connection drops, every command that was sent fails with kConnectionLost
//     (it may have executed: never re-sent); commands not yet sent stay queued, within their
//     deadlines, for the next connection;
//   - reconnects with bounded exponential backoff (reconnect_min doubling to reconnect_max,
//     +-20 % jitter from a seeded RNG); AUTH and SELECT run on every (re)connect before any
//     queued command is sent; an AUTH/SELECT failure drops the connection like a network error;
//   - TLS (SPEC R14, docs/security.md "Redis"), when options.tls.enabled: after the TCP connect
//     the TLS handshake (net::TlsStream on memory BIOs, the loop still owns the socket), then
//     AUTH / SELECT (or a PING when there is neither, so that a server refusing this client's
//     certificate, which TLS 1.3 tells only after the client's side of the handshake, is seen
//     before kReady), then commands; every byte in both directions goes through the stream. The
//     server is always verified (chain against tls.ca_file, then tls.server_name or else the
//     numeric address as an IP SAN); a certificate or handshake failure drops the connection
//     like a network error (kTlsCert / kTlsHandshake in the event, the library's words in its
//     detail) and it reconnects with backoff. Pipelining, FIFO, bounds and deadlines are the
//     same: one batch of plaintext (<= max_send_batch_bytes) is encrypted per flush and leaves
//     in one send; connect_timeout covers TCP + TLS + AUTH/SELECT.
// Hosts are numeric addresses (cluster nodes report IPs): this module resolves no names.
// Do not destroy a Connection from inside one of its own callbacks.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "core/result.h"
#include "core/time.h"
#include "redis/client.h"
#include "redis/reply.h"
#include "redis/tls_options.h"

namespace ringcast::net {
class TlsClientContext;
}

namespace ringcast::redis {

enum class ConnState : uint8_t {
  kConnecting,   // TCP connect in progress
  kHandshaking,  // TLS handshake, then AUTH / SELECT (a PING on TLS without them) in flight
  kReady,        // commands flow
  kBackoff,      // down, waiting to reconnect
  kClosed,       // close() called: nothing more happens
};
const char* conn_state_name(ConnState s);

struct ConnectionEvent {
  ConnState state;
  Error error;  // why it went down (kBackoff), else default
  uint64_t reconnects = 0;
  // The server's message when AUTH or SELECT was refused; the TLS library's reason when TLS
  // failed ("unable to get local issuer certificate", "TLSV1_ALERT_CERTIFICATE_REQUIRED").
  std::string detail;
};

struct ConnectionOptions {
  std::string host = "127.0.0.1";  // numeric IPv4 or IPv6
  uint16_t port = 6379;
  std::string username;  // ACL user (AUTH user pass); empty: AUTH pass
  std::string password;  // empty: no AUTH
  int db = 0;            // SELECT db when not 0
  TlsOptions tls;        // TLS to Redis (SPEC R14); off by default
  // A context to use for `tls` instead of building one (the cluster client shares one among
  // its nodes). Not owned: it must outlive the connection and be used on this loop's thread
  // only (its session cache is not locked). Null: the connection builds its own.
  net::TlsClientContext* tls_context = nullptr;
  Duration default_timeout = seconds(1);
  Duration connect_timeout = seconds(1);  // TCP connect + TLS handshake + AUTH + SELECT
  Duration reconnect_min = milliseconds(50);
  Duration reconnect_max = seconds(2);
  uint64_t jitter_seed = 1;
  uint32_t max_pending = 1u << 16;
  size_t max_send_batch_bytes = 1u << 20;  // a single larger command still goes (alone)
  size_t recv_buffer_bytes = 64u << 10;
  ReaderLimits reader;
  // State changes, for metrics and logs (on the loop thread; it must not close() or destroy
  // the connection).
  std::function<void(const ConnectionEvent&)> on_event;
};

struct ConnectionStats {
  uint64_t commands = 0;        // accepted by command()
  uint64_t replies = 0;         // delivered to callbacks (incl. error replies)
  uint64_t send_batches = 0;    // flushes: one per turn with something to send
  uint64_t send_calls = 0;      // send submissions (a partial send is resubmitted)
  uint64_t bytes_sent = 0;      // socket bytes (TLS: ciphertext)
  uint64_t bytes_received = 0;  // socket bytes (TLS: ciphertext)
  uint64_t tls_handshakes = 0;  // TLS handshakes completed (resumed ones included)
  uint64_t tls_failures = 0;    // connections dropped for kTlsCert / kTlsHandshake
  uint64_t connects = 0;        // connections that reached kReady
  uint64_t reconnects = 0;      // connect attempts after the first
  uint64_t disconnects = 0;
  uint64_t timeouts = 0;         // kTimeout + kTimeoutUnsent
  uint64_t late_replies = 0;     // replies discarded because their command had timed out
  uint64_t refused = 0;          // kQueueFull, kClosed, kBadCommand
  uint64_t connection_lost = 0;  // commands failed with kConnectionLost
  uint32_t queued = 0;           // not yet sent
  uint32_t awaiting = 0;         // sent, reply not yet read
};

// Totals over every Connection of this process (all loops, all threads), for /metrics: what a
// node costs Redis per delivery (bench/e2e_cluster.sh). Relaxed atomics, one update per flush
// and per receive completion; the AUTH/SELECT handshake counts only in the bytes.
struct ProcessTotals {
  uint64_t commands_sent = 0;  // commands written to a socket (a command re-sent after a
                               // redirect or a reconnect counts again)
  uint64_t send_batches = 0;   // flushes: one pipelined write of queued commands = one round trip
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;
};
ProcessTotals process_totals();

class Connection final : public Client {
 public:
  // Starts connecting at once. kInvalidArgument for a host that is not a numeric address; with
  // TLS (and no tls_context) the errors of make_tls_context().
  static Result<std::unique_ptr<Connection>> create(net::Loop& loop,
                                                    const ConnectionOptions& options);
  // close(), then runs loop turns (bounded) until the kernel has let go of the socket.
  ~Connection() override;
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  using Client::command;
  void command(std::span<const std::string_view> args, Callback cb,
               const CommandOptions& options) override;
  // An already encoded command (encode_command()); the cluster client re-sends these.
  void command_encoded(std::string_view bytes, MonoTime deadline, Callback cb);

  // Fails every held command with kClosed (inline, this is not a submit call) and stops.
  void close();

  ConnState state() const;
  bool ready() const { return state() == ConnState::kReady; }
  const ConnectionStats& stats() const;
  const ConnectionOptions& options() const;
  net::Loop& loop() override;
  Duration default_timeout() const override;

  struct Impl;

 private:
  explicit Connection(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ringcast::redis
