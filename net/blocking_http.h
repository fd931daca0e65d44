// The one blocking HTTP/1.1 client, for what runs off the io_uring loop: a node forwarding a
// call to a partition's owner (api/forward.h, on its forward threads) and the CLI
// (tools/ringcast/cli_http.h). Plain sockets with poll(), llhttp for the answer, BoringSSL for
// https. (The delivery path has its own client on the loop, net/http_client.h; ringcast-sink,
// a test receiver, keeps its own on purpose: it shares no code with what it tests.)
// Invariants: every wait is bounded by the caller's deadline; a TLS peer is always verified —
// its chain and the address or name it was reached at, or, pinned, exactly one certificate —
// before a byte of a request is sent; nothing here turns verification off.
#pragma once

#include <openssl/base.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"
#include "net/http_server.h"  // HttpHeader

namespace ringcast::net {

using SteadyTime = std::chrono::steady_clock::time_point;

// How a TLS peer is verified. `ctx` (not owned) carries the trust anchors with SSL_VERIFY_PEER;
// the peer's certificate must then name the numeric address it was reached at (an IP SAN) or,
// reached by name, that name (also sent as SNI). With `pinned_der` set (a leaf, DER) the peer
// must present exactly that certificate instead, whatever its name and issuer (`ctx` then
// verifies nothing itself).
struct BlockingTls {
  SSL_CTX* ctx = nullptr;
  std::string pinned_der;
};

struct BlockingReply {
  int status = 0;
  std::vector<HttpHeader> headers;  // names lower-case
  std::string body;
  bool keep_alive = false;  // the connection may carry another request
  const std::string* header(std::string_view lower_name) const;
};

// One connection. Errors (reason): "resolve_failed", "connect_failed" (sys_errno), "timeout",
// "tls_failed", "tls_untrusted" (the chain, the name or the pin did not hold), "io_failed"
// (sys_errno), "closed" (the peer closed or reset before any byte of an answer: on a reused
// keep-alive connection, it read nothing of the request), "bad_response", "too_large".
// detail() says more for a person (the resolver's or TLS library's words).
class BlockingHttpConnection {
 public:
  BlockingHttpConnection() = default;
  ~BlockingHttpConnection();
  BlockingHttpConnection(const BlockingHttpConnection&) = delete;
  BlockingHttpConnection& operator=(const BlockingHttpConnection&) = delete;

  // Connects to `host` (a numeric IPv4 / IPv6 address, or a name: each address it resolves to
  // is tried in turn) and, with `tls`, completes a verified handshake. Closes a connection
  // already open.
  Result<void> connect(const std::string& host, uint16_t port, const BlockingTls* tls,
                       SteadyTime deadline);
  // The two halves of connect(), for a caller that prepares its TLS trust only once the peer
  // is reached (the CLI: a connect error first): the TCP connection, then the handshake.
  Result<void> open(const std::string& host, uint16_t port, SteadyTime deadline);
  Result<void> start_tls(const std::string& host, const BlockingTls& tls, SteadyTime deadline);
  // Sends `request` (whole bytes) and reads one answer (1xx answers skipped), its headers and
  // body together at most `max_response_bytes`. A peer that answers before it read the whole
  // request (413, say) and closes: its answer is read. After an error the connection is closed.
  Result<BlockingReply> exchange(std::string_view request, SteadyTime deadline,
                                 size_t max_response_bytes);

  bool is_open() const { return fd_ >= 0; }
  void close();
  const std::string& detail() const { return detail_; }

 private:
  // > 0 bytes, 0 EOF, -1 an error (errno; EAGAIN: wait for `*want`).
  long send_some(const char* data, size_t n, short* want);
  long recv_some(char* buf, size_t n, short* want);
  // Closes the connection; an error with `reason` (kUnavailable unless said otherwise).
  Error fail(const char* reason, const char* message, int sys_errno = 0,
             Errc code = Errc::kUnavailable);

  int fd_ = -1;
  SSL* ssl_ = nullptr;
  std::string detail_;
};

// The TLS library's oldest queued error as text ("no detail" when none); clears the queue.
std::string tls_error_text();

// One request on a fresh connection: connect(), exchange(), close.
Result<BlockingReply> blocking_exchange(const std::string& host, uint16_t port,
                                        const BlockingTls* tls, std::string_view request,
                                        SteadyTime deadline, size_t max_response_bytes);

}  // namespace ringcast::net
