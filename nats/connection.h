// One NATS client connection on a net::Loop (docs/operations.md §6 "NATS JetStream"): the loop
// owns the socket (io_uring connect/send/recv, no blocking call, no second event loop); the text
// protocol is nats/protocol.h's.
// Invariants:
//   - handshake: TCP connect, the server's INFO (plaintext), then TLS when options.tls.enabled
//     (NATS upgrades after INFO; a server whose INFO says tls_required while tls is off is refused
//     with kTlsRequired, as is tls on against a server that offers none), then CONNECT (verbose
//     false, pedantic false, headers true, no_responders true, auth by token, user + password or
//     an NKEY's signature of the INFO nonce),
//     every subscription's SUB, and a PING: kReady once its PONG arrives; an -ERR before it
//     (e.g. "Authorization Violation": kAuth) drops the connection like a network error. The
//     server is always verified on TLS (chain against tls.ca_file, then tls.server_name or else
//     the numeric address as an IP SAN). connect_timeout covers all of it;
//   - what is written in one loop turn leaves in one send; one send is in flight at a time;
//     unsent output is bounded (max_pending_bytes: beyond it publish() answers kQueueFull);
//   - publish() while the connection is not ready queues nothing and answers kNotConnected: the
//     caller keeps what it must send again (a JetStream ack, say). A request() waits for the
//     connection within its deadline; once sent, it completes with its reply, kTimeout at the
//     deadline, or kConnectionLost when the connection drops (it may have been acted on: never
//     re-sent here, SPEC R12.3); a reply with status 503 and no body is kNoResponders;
//   - every request(), subscribe() callback and flush() completes on the loop's thread, never
//     inside the call that started it (STYLE 5), and exactly once (requests and flushes);
//   - subscriptions outlive reconnects: they are sent again on every (re)connect, before kReady;
//     requests share one `_INBOX.<random>.*` subscription per connection;
//   - keepalive: a PING every ping_interval while ready; max_pings_out PINGs without a PONG drop
//     the connection (kStale); the server's PINGs are answered;
//   - reconnects with bounded exponential backoff (reconnect_min doubling to reconnect_max,
//     +-20 % jitter from a seeded RNG), to the next of `servers` each time.
// Hosts are numeric addresses: this module resolves no names. Do not destroy a Connection from
// inside one of its own callbacks.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"
#include "core/time.h"
#include "nats/protocol.h"

namespace ringcast::net {
class Loop;
class TlsClientContext;
}  // namespace ringcast::net

namespace ringcast::nats {

// Error::reason values. "Not sent" ones guarantee the server never saw the operation.
inline constexpr const char* kNotConnected = "nats_not_connected";    // not sent
inline constexpr const char* kQueueFull = "nats_queue_full";          // not sent
inline constexpr const char* kClosed = "nats_closed";                 // not sent (client closed)
inline constexpr const char* kTimeoutUnsent = "nats_timeout_unsent";  // not sent
inline constexpr const char* kBadSubject = "nats_bad_subject";        // not sent
inline constexpr const char* kTooLarge = "nats_too_large";            // not sent (max_payload)
inline constexpr const char* kTimeout = "nats_timeout";  // sent, no reply by the deadline
inline constexpr const char* kConnectionLost = "nats_connection_lost";  // sent, then cut
inline constexpr const char* kNoResponders = "nats_no_responders";      // nobody listens there
// Why a connection went down (ConnectionEvent::error.reason).
inline constexpr const char* kAuth = "nats_auth";  // the server refused the credentials
inline constexpr const char* kStale = "nats_stale_connection";  // PINGs without PONG
inline constexpr const char* kTlsCert = "nats_tls_cert";
inline constexpr const char* kTlsHandshake = "nats_tls_handshake";
inline constexpr const char* kTlsRequired = "nats_tls_required";  // tls on one side only
inline constexpr const char* kServerError = "nats_server_error";  // another -ERR

// TLS to the NATS server (SPEC R14): the [[intake.nats]] tls* keys.
struct TlsOptions {
  bool enabled = false;
  std::string ca_file;    // trust only these anchors (PEM); empty: the system bundle
  std::string cert_file;  // this client's certificate (mutual TLS); both or neither
  std::string key_file;
  std::string server_name;  // the name the server's certificate must carry; empty: its IP
};
// The client context for `tls`; errors name the tls_* option at fault.
Result<std::unique_ptr<net::TlsClientContext>> make_tls_context(const TlsOptions& tls);

// "127.0.0.1:4222", "nats://127.0.0.1:4222", "tls://[::1]:4222" (numeric hosts only).
struct ServerAddress {
  std::string host;
  uint16_t port = 4222;
};
Result<ServerAddress> parse_server(std::string_view text);

// What the server's INFO said.
struct ServerInfo {
  std::string server_id;
  std::string version;
  bool headers = false;
  bool jetstream = false;
  bool tls_required = false;
  bool tls_available = false;
  bool auth_required = false;
  uint64_t max_payload = 1u << 20;
  std::string nonce;  // what an NKEY client signs
};

enum class ConnState : uint8_t {
  kConnecting,   // TCP connect, then the server's INFO
  kHandshaking,  // TLS, CONNECT and the first PING
  kReady,
  kBackoff,  // down, waiting to reconnect
  kClosed,
};
const char* conn_state_name(ConnState s);

struct ConnectionEvent {
  ConnState state;
  Error error;  // why it went down (kBackoff)
  uint64_t reconnects = 0;
  // The server's -ERR text when it refused the connection; the TLS library's reason when TLS
  // failed. Never a credential.
  std::string detail;
};

struct ConnectionOptions {
  std::vector<std::string> servers{"127.0.0.1:4222"};
  std::string name = "ringcast";  // CONNECT name (shows in the server's connz)
  std::string token;              // auth_token
  std::string user;               // user + pass
  std::string password;
  std::string nkey_seed;  // NKEY auth: the user's seed ("SU…", nats/nkey.h); signs INFO's nonce
  TlsOptions tls;
  Duration connect_timeout = seconds(2);  // TCP + INFO + TLS + CONNECT/PONG
  Duration ping_interval = seconds(10);
  uint32_t max_pings_out = 2;
  Duration reconnect_min = milliseconds(50);
  Duration reconnect_max = seconds(2);
  uint64_t jitter_seed = 1;
  Duration default_timeout = seconds(2);  // request()
  size_t max_pending_bytes = 16u << 20;   // unsent output
  size_t recv_buffer_bytes = 64u << 10;
  uint32_t max_requests = 1u << 16;  // requests held (queued + awaiting a reply)
  ParserLimits parser;
  // State changes, for metrics and logs (loop thread; must not close or destroy the connection).
  std::function<void(const ConnectionEvent&)> on_event;
  // An -ERR while ready ("Permissions Violation for Publish to ..."): the server closes the
  // connection after the fatal ones, which then reconnects.
  std::function<void(std::string_view)> on_server_error;
};

struct ConnectionStats {
  uint64_t msgs_in = 0;
  uint64_t msgs_out = 0;  // PUB / HPUB written
  uint64_t bytes_in = 0;  // socket bytes (TLS: ciphertext)
  uint64_t bytes_out = 0;
  uint64_t send_calls = 0;
  uint64_t connects = 0;  // connections that reached kReady
  uint64_t reconnects = 0;
  uint64_t disconnects = 0;
  uint64_t requests = 0;
  uint64_t timeouts = 0;
  uint64_t server_errors = 0;  // -ERR received
  uint64_t tls_handshakes = 0;
};

using MsgHandler = std::function<void(Msg&)>;
using ReplyCallback = std::function<void(Result<Msg>)>;

class Connection {
 public:
  // Starts connecting at once. kInvalidArgument for a server that is not a numeric address;
  // with TLS the errors of make_tls_context().
  static Result<std::unique_ptr<Connection>> create(net::Loop& loop, ConnectionOptions options);
  // close(), then runs loop turns (bounded) until the kernel has let go of the socket.
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // A subscription that lives until unsubscribe() or close(), across reconnects. The handler
  // runs on the loop thread for each message; it may take the message's strings.
  Result<uint64_t> subscribe(std::string subject, MsgHandler handler, std::string queue = {});
  void unsubscribe(uint64_t sid);

  // PUB (HPUB when `headers` is a header block, encode_headers()). Queued for this turn's send.
  Result<void> publish(std::string_view subject, std::string_view data, std::string_view reply = {},
                       std::string_view headers = {});
  // Publishes with a reply subject of this connection's inbox and completes with the first
  // reply. timeout 0: options.default_timeout.
  void request(std::string_view subject, std::string_view data, ReplyCallback cb,
               Duration timeout = Duration::zero(), std::string_view headers = {});
  // A PING: `done` once its PONG arrived (everything written before it was processed by the
  // server), or an error (kNotConnected, kConnectionLost, kClosed).
  void flush(std::function<void(Result<void>)> done);
  // A subject no other connection uses: "_INBOX.<random>" (subscribe to it, or to "<it>.*").
  std::string new_inbox();

  // Fails every held request and flush with kClosed (inline, this is not a submit call).
  void close();

  ConnState state() const;
  bool ready() const { return state() == ConnState::kReady; }
  const ServerInfo& server_info() const;
  const ConnectionStats& stats() const;
  size_t pending_bytes() const;  // output written and not yet handed to the kernel
  net::Loop& loop();

  struct Impl;

 private:
  explicit Connection(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ringcast::nats
