// The one interface callers of Redis program against, standalone (redis::Connection) or
// Redis Cluster (redis::ClusterClient), and the errors a command can end with (docs/redis.md).
// Invariants: every command() completes exactly once, on the loop's thread, never inside the
// command() call itself (STYLE 5), and no later than its deadline (plus one loop turn);
// nothing throws. Two layers of failure:
//   - the server answered with an error: the Result is ok and holds a Reply of type kError
//     with the server's message verbatim (e.g. "WRONGTYPE Operation against a key ...");
//   - no reply: the Result is an Error whose `reason` is one of the k* codes below, and
//     may_have_executed() says whether the command could have run on the server. A command
//     that may have executed is never re-sent by this module: the caller decides (the same
//     "one retry owner" rule as SPEC R12.3).
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <span>
#include <string_view>

#include "core/result.h"
#include "core/time.h"
#include "redis/reply.h"

namespace ringcast::net {
class Loop;
}

namespace ringcast::redis {

using Callback = std::function<void(Result<Reply>)>;

// Error::reason values. "Not sent" ones (and kTooManyRedirects, whose every answer was a
// redirect) guarantee the command did not run.
inline constexpr const char* kQueueFull = "redis_queue_full";          // not sent
inline constexpr const char* kClosed = "redis_closed";                 // not sent (client closed)
inline constexpr const char* kTimeoutUnsent = "redis_timeout_unsent";  // not sent
inline constexpr const char* kNoRoute = "redis_no_route";              // not sent (cluster)
inline constexpr const char* kBadCommand = "redis_bad_command";        // not sent
inline constexpr const char* kTimeout = "redis_timeout";  // sent, no reply by the deadline
inline constexpr const char* kConnectionLost = "redis_connection_lost";  // sent, then cut
inline constexpr const char* kProtocol = "redis_protocol";              // reply stream broken; sent
inline constexpr const char* kReplyTooLarge = "redis_reply_too_large";  // sent
inline constexpr const char* kTooManyRedirects = "redis_too_many_redirects";  // did not run
// Why a TLS connection went down (ConnectionEvent::error.reason, SPEC R14): the server's
// certificate did not verify (chain or name), or the handshake failed otherwise (including the
// server refusing this client's certificate). A command never fails with these: it waits
// queued for a connection (kTimeoutUnsent at its deadline, whose message then names TLS).
inline constexpr const char* kTlsCert = "redis_tls_cert";
inline constexpr const char* kTlsHandshake = "redis_tls_handshake";

// True unless the error guarantees the command never reached the server.
bool may_have_executed(const Error& e);

// Routing (cluster): args[key_index] is the key whose slot picks the node.
inline constexpr int kKeyAuto = -2;  // args[1] when there is one, else no key
inline constexpr int kNoKey = -1;    // any node

struct CommandOptions {
  Duration timeout = Duration::zero();  // 0: the client's default timeout
  MonoTime deadline = MonoTime();       // when set (not the epoch), overrides `timeout`
  int key_index = kKeyAuto;
};

class Client {
 public:
  virtual ~Client() = default;
  // Sends one command (args are copied: they need not outlive the call). Loop thread only.
  virtual void command(std::span<const std::string_view> args, Callback cb,
                       const CommandOptions& options) = 0;
  void command(std::span<const std::string_view> args, Callback cb) {
    command(args, std::move(cb), CommandOptions{});
  }
  void command(std::initializer_list<std::string_view> args, Callback cb,
               const CommandOptions& options = {}) {
    command(std::span<const std::string_view>(args.begin(), args.size()), std::move(cb), options);
  }
  virtual net::Loop& loop() = 0;
  virtual Duration default_timeout() const = 0;
  // The absolute deadline `options` give a command issued now.
  MonoTime deadline_for(const CommandOptions& options);
};

}  // namespace ringcast::redis
