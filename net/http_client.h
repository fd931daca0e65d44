// The HTTP/1.1 (+TLS) sender on the io_uring loop: ringcast::Transport for the engine's shards
// (SPEC R6, R7, R11, R12).
// Invariants: it never retries (R12.3); it connects only to an address that passed the
// address guard in this attempt and never resolves twice per attempt (DNS rebinding); every
// send() completes exactly once, on the loop thread, never inside send(), and no later than
// exchange_timeout after it left its host queue (where it waits at most max_queue_wait); what
// could not start in time completes deferred (never sent, not an attempt); everything it holds
// is bounded by the options below.
//
//   auto t = net::HttpTransport::create(loop, options);   // loop thread
//   t->send(&op);                                          // op->on_complete() later
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/ip_address.h"
#include "core/resolver.h"
#include "core/transport.h"
#include "core/types.h"
#include "core/url.h"
#include "net/dns.h"
#include "net/http_response.h"
#include "net/loop.h"
#include "net/tls.h"

namespace ringcast::net {

struct HttpTransportOptions {
  // Deadlines (SPEC R12.4). The exchange deadline runs from the moment the request leaves its
  // host queue (DNS before the queue is bounded by it too): connect, TLS, write and read all fit
  // in it (R6 "no answer within 15 s" → timeout). Time spent waiting for our own pacing or a
  // free connection is never charged to the receiver.
  Duration exchange_timeout = seconds(15);
  Duration connect_timeout = seconds(5);         // → network_ETIMEDOUT
  Duration tls_handshake_timeout = seconds(10);  // → network_tls_handshake
  Duration idle_timeout = seconds(30);           // an idle pooled connection is closed after
  // Back-pressure (SPEC R2.3): a request waits in its host's queue at most this long for
  // a pacing token or a connection; past that (or when it could not start in time at all) it
  // completes deferred — not sent, not an attempt — with the time a new try may go.
  Duration max_queue_wait = seconds(5);
  Duration defer_retry = seconds(1);  // not_before for a connection wait of unknown length

  // Pools: keyed by (scheme, host, port); a connection is reused only for the same pinned
  // address, after a complete response, one request at a time (no pipelining).
  uint32_t max_connections_per_host = 32;
  uint32_t max_connections_total = 4096;  // over all hosts; idle ones are evicted first
  uint32_t max_queued_per_host = 4096;    // bulkhead (R12.6); beyond → deferred (queue_full)
  size_t max_hosts = 65536;  // host entries (pool, pacing); idle ones are swept beyond this
  // Receives: multishot recv into a shared ring of `recv_buffers` x `recv_buffer_bytes`
  // (power of two count); without it (or if the kernel refuses) one buffer per connection.
  bool multishot_recv = true;
  uint32_t recv_buffers = 512;
  size_t recv_buffer_bytes = 8 * 1024;

  ResponseLimits response;  // 64 KiB / 100 headers, 512-byte prefix, 1 MiB drain

  // Pacing per host: a token bucket (0 = unlimited), an operator setting that only ever delays
  // (a request without a token in time is deferred, never failed). A receiver's Retry-After is
  // not applied here: it postpones that endpoint's deliveries in the scheduler (SPEC R7), not
  // every endpoint that shares the host.
  RateLimit default_rate;

  // Policy (SPEC R6 refusals). allow_list overrides the address guard's deny ranges.
  UrlPolicy url_policy;
  std::vector<Cidr> allow_list;

  TlsClientOptions tls;
  DnsOptions dns;  // used only when no Resolver is injected
  std::string user_agent = "ringcast/" RINGCAST_VERSION;
};

struct HttpTransportStats {
  uint64_t sends = 0;
  uint64_t completed = 0;
  uint64_t responses = 0;
  uint64_t refused_url = 0;
  uint64_t refused_private_address = 0;
  uint64_t dns_failures = 0;
  uint64_t timeouts = 0;
  uint64_t network_errors = 0;
  uint64_t connections_opened = 0;
  uint64_t connections_closed = 0;
  uint64_t requests_on_reused_connections = 0;
  uint64_t idle_closed_by_peer = 0;  // detected while idle, never used for a request
  uint64_t idle_expired = 0;
  uint64_t deferred[kDeferReasons] = {};  // by DeferReason: given back unsent
  uint64_t queued_max = 0;                // the deepest host queue seen
};

class HttpTransport final : public Transport {
 public:
  // `resolver` may be injected (tests: fakes); nullptr = a CaresResolver owned by the
  // transport. Must be called on the loop thread.
  static Result<std::unique_ptr<HttpTransport>> create(Loop& loop,
                                                       const HttpTransportOptions& options,
                                                       Resolver* resolver = nullptr);
  // Completes every op still in flight with network_ECANCELED (on this thread, before it
  // returns) and closes all connections. Runs loop turns until the kernel has let go.
  ~HttpTransport() override;

  void send(SendOp* op) override;

  // Per-host pacing override ("host" as in the URL, any port).
  void set_rate_limit(std::string_view host, RateLimit limit);
  void close_idle();  // closes every idle pooled connection

  HttpTransportStats stats() const;
  const TlsStats& tls_stats() const;
  uint32_t connections() const;  // open (connecting, idle or busy)
  uint32_t idle_connections() const;
  uint32_t in_flight() const;  // sends not yet completed

  struct Impl;

 private:
  explicit HttpTransport(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ringcast::net
