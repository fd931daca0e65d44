// Cluster mode's "any node answers any API call" (docs/cluster.md) on the REST side: a
// tenant-scoped call that this node's engine answers 503 not_owner is sent on to the node that
// holds the lease of the tenant's partition, and that node's answer is relayed to the client.
// Invariants:
//   - no reusable credential crosses the network (SPEC R14, docs/security.md "Between nodes"):
//     the forwarded call carries the principal this node authenticated, signed under
//     cluster.secret (api/forward_auth.h), and neither the caller's key or cookie nor the
//     admin token;
//   - only to the address a live member published (cluster/membership.h);
//   - one hop: a forwarded request carries `X-Ringcast-Forwarded: <origin node id>` and is never
//     forwarded again; an owner that answers not_owner itself (mid hand-over) reaches the client
//     as that 503 not_owner with Retry-After;
//   - bounded: every forward is answered within `timeout` of the not_owner that started it
//     (queue wait, owner lookup, connect, send and answer all count); at most `max_forwards` run
//     at once and as many wait; beyond that 503 overloaded at once;
//   - never on the HTTP loop: forwards run on their own threads (a ReadPool) with blocking
//     sockets and poll() deadlines;
//   - every failure is a 503 with Retry-After and a JSON error naming the reason (not_owner:
//     nobody holds the lease now; owner_unreachable: the holder has no address or did not
//     answer in time; overloaded).
#pragma once

#include <openssl/base.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "api/forward_auth.h"
#include "api/http_names.h"
#include "api/principal.h"
#include "cluster/advertise_url.h"
#include "core/ip_address.h"
#include "core/result.h"
#include "core/time.h"
#include "core/types.h"
#include "net/blocking_http.h"

namespace ringcast::api {

class ReadPool;
using cluster::ApiAddress;

// Request header that marks a forwarded call (its value: the origin node's id); lower-case as
// HttpRequest::header() wants it.
inline constexpr std::string_view kForwardedHeader = "x-ringcast-forwarded";
// Answer header of a relayed call: the node that answered it.
inline constexpr std::string_view kServedByHeader = "X-Ringcast-Served-By";

// Who holds a partition's lease, and where its API is.
struct ForwardTarget {
  std::string node_id;  // empty: nobody holds the lease now
  std::string url;      // empty: the holder published no address
};

struct ForwardOptions {
  std::string node_id;  // this node: the X-Ringcast-Forwarded value; never forwards to itself
  // cluster.secret: signs what this node forwards and checks what it receives (at least
  // kMinSecretBytes; config refuses shorter).
  std::string secret;
  Duration signature_window = seconds(30);  // a signed call's timestamp: ± this of the clock
  // The CA an https:// owner's certificate must chain to (cluster.ca_file); empty: the system's.
  std::string ca_file;
  // Looks up the lease holder of `p` and its advertised URL; blocks at most `wait`; runs on a
  // forward thread. Unset: forwarding is off (single-node mode).
  std::function<Result<ForwardTarget>(Partition p, Duration wait)> find_owner;
  Duration timeout = seconds(5);
  uint32_t max_forwards = 16;                    // at once; as many more may wait
  size_t max_response_bytes = 64 * 1024 * 1024;  // an owner's answer larger than this: 503
};

// Whether a route (split path, "v1" "tenants" T ...) is sent on to the owner when this node
// does not own T: every tenant route but event intake (POST /v1/tenants/T/events, which the
// per-partition inbox takes on any node).
bool forwardable_route(const std::vector<std::string>& segs);
// The engine's "not the owner" answer (error_response() of a not_owner error).
bool is_not_owner(const HttpResponse& r);

// The forwarded request's bytes: method and target (path and query as received), Host, the
// client's Content-Type, X-Ringcast-Forwarded: origin, the signed principal
// (X-Ringcast-Principal, X-Ringcast-Signature), Content-Length, Connection: close, then the
// body. Nothing else of the client's is sent: no Authorization, no Cookie.
std::string forward_request_bytes(const HttpRequest& req, std::string_view host,
                                  std::string_view origin, const SignedHeaders& signed_headers);

// One HTTP/1.1 exchange on a fresh connection (net/blocking_http.h), blocking until the whole
// answer is read or `deadline` passes. Errors (reason): "timeout", "connect_failed" / "io_failed"
// (sys_errno set), "closed", "bad_response", "too_large", "tls_failed" / "tls_untrusted".
using ExchangeReply = net::BlockingReply;
using SteadyTime = net::SteadyTime;
// `tls`: the client context for an https:// address (to.tls), verifying the peer.
Result<ExchangeReply> http_exchange(const ApiAddress& to, std::string_view request,
                                    SteadyTime deadline, size_t max_response_bytes,
                                    SSL_CTX* tls = nullptr);

// The forwarding itself: owns the forward threads. Shared, because a wrapped Responder (held by
// an engine callback) may outlive the RestApi that made it.
class Forwarder : public std::enable_shared_from_this<Forwarder> {
 public:
  static std::shared_ptr<Forwarder> create(ForwardOptions options);
  ~Forwarder();
  Forwarder(const Forwarder&) = delete;
  Forwarder& operator=(const Forwarder&) = delete;

  // A responder that passes every answer through to `client`, except not_owner: that one
  // starts a forward of `*req`, on behalf of `who`, to the owner of `p`, whose answer goes to
  // `client` instead. Any thread.
  Responder wrap(std::shared_ptr<const HttpRequest> req, Partition p, Principal who,
                 Responder client);

  // Signs and checks forwarded calls (cluster.secret).
  ForwardAuth& auth() { return *auth_; }

  // Forwarded requests received (their X-Ringcast-Forwarded set): counted for the metrics.
  void count_received() { received_.fetch_add(1, std::memory_order_relaxed); }

  // Stops the threads: queued forwards are answered 503 shutting_down, running ones finish
  // (bounded by the timeout), later ones get 503. Idempotent; not from a forward thread.
  void stop();

  // ringcast_api_forwards_total{outcome}, ringcast_api_forwards_in_flight,
  // ringcast_api_forward_seconds_total, ringcast_api_forwarded_received_total.
  std::string metrics_text() const;

  enum class Outcome : uint8_t {
    kAnswered,      // the owner answered (whatever its status)
    kNoOwner,       // nobody holds the lease, or this node does (hand-over): 503 not_owner
    kLookupFailed,  // Redis did not say who holds it: 503 not_owner
    kNoAddress,     // the holder published no (valid) address: 503 owner_unreachable
    kUnreachable,   // connect or I/O failed, or the answer was malformed: 503 owner_unreachable
    kTimeout,       // no answer before the deadline: 503 owner_unreachable
    kOverloaded,    // max_forwards running and as many waiting: 503 overloaded
    kCount,
  };
  static const char* outcome_name(Outcome o);
  uint64_t count(Outcome o) const { return outcomes_[static_cast<size_t>(o)].load(); }
  uint64_t received() const { return received_.load(); }

 private:
  explicit Forwarder(ForwardOptions options);
  void start(std::shared_ptr<const HttpRequest> req, Partition p, Principal who,
             HttpResponse not_owner, Responder client);
  HttpResponse run(const HttpRequest& req, Partition p, const Principal& who,
                   HttpResponse not_owner, SteadyTime deadline);
  void note(Outcome o) { outcomes_[static_cast<size_t>(o)].fetch_add(1); }

  const ForwardOptions options_;
  std::unique_ptr<ForwardAuth> auth_;
  struct SslCtxFree {
    void operator()(SSL_CTX* c) const;
  };
  std::unique_ptr<SSL_CTX, SslCtxFree> tls_ctx_;  // for https:// owners
  std::unique_ptr<ReadPool> pool_;
  std::atomic<uint64_t> outcomes_[static_cast<size_t>(Outcome::kCount)] = {};
  std::atomic<uint64_t> received_{0};
  std::atomic<int64_t> in_flight_{0};
  std::atomic<uint64_t> micros_total_{0};
};

}  // namespace ringcast::api
