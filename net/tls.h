// TLS client through BoringSSL with memory BIOs (SPEC R6 `network_*`): the loop owns the socket;
// a TlsStream only turns ciphertext into plaintext and back. Invariant: every peer is verified
// (chain against the trust store, then the host name or IP), TLS 1.2 is the minimum, and no
// socket I/O happens in here. A client certificate (mutual TLS, e.g. Redis with
// tls-auth-clients: SPEC R14, docs/security.md "Redis") is optional and never replaces the
// verification of the peer.
#pragma once

#include <openssl/base.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>

#include "core/result.h"

namespace ringcast::net {

struct TlsClientOptions {
  // The system trust store (Debian's bundle); empty: none (then extra_ca_file must be set).
  std::string ca_file = "/etc/ssl/certs/ca-certificates.crt";
  std::string extra_ca_file;  // more trust anchors, PEM (tests, private CAs)
  // This client's certificate chain and private key (PEM files), for servers that ask for one
  // (mutual TLS). Both or neither; the key must match the certificate.
  std::string cert_file;
  std::string key_file;
  bool session_resumption = true;
  size_t session_cache_max = 4096;  // hosts with a cached session (one session per host)
};

struct TlsStats {
  uint64_t full_handshakes = 0;
  uint64_t resumed_handshakes = 0;
  uint64_t cert_failures = 0;
  uint64_t handshake_failures = 0;
  uint64_t sessions_cached = 0;
};

class TlsClientContext {
 public:
  static Result<std::unique_ptr<TlsClientContext>> create(const TlsClientOptions& options);
  ~TlsClientContext();
  TlsClientContext(const TlsClientContext&) = delete;
  TlsClientContext& operator=(const TlsClientContext&) = delete;

  SSL_CTX* ctx() const { return ctx_; }
  // The cached session for `key` ("host:port"), or nullptr. Not owned by the caller.
  SSL_SESSION* session(const std::string& key) const;
  // Takes ownership of `session` (replacing the previous one for `key`).
  void store_session(const std::string& key, SSL_SESSION* session);
  void forget_session(const std::string& key);
  TlsStats& stats() { return stats_; }
  const TlsStats& stats() const { return stats_; }
  bool resumption() const { return options_.session_resumption; }

 private:
  explicit TlsClientContext(const TlsClientOptions& options) : options_(options) {}
  TlsClientOptions options_;
  SSL_CTX* ctx_ = nullptr;
  std::unordered_map<std::string, SSL_SESSION*> sessions_;
  TlsStats stats_;
};

// One TLS client connection's state machine. Feed it what the socket read, send what
// take_output() yields.
class TlsStream {
 public:
  enum class Status : uint8_t {
    kOk,              // progress made (handshake done / bytes read or written)
    kWantRead,        // needs more ciphertext from the peer
    kClosed,          // the peer sent close_notify or the transport hit EOF
    kCertError,       // chain or host name verification failed → network_tls_cert
    kHandshakeError,  // any other handshake failure → network_tls_handshake
    kError,           // a failure after the handshake (bad record, ...) → network_EPROTO
  };

  TlsStream() = default;
  ~TlsStream();
  TlsStream(const TlsStream&) = delete;
  TlsStream& operator=(const TlsStream&) = delete;

  // Sets up SNI (for names, not IP literals), host name / IP verification and the cached
  // session for `session_key`.
  Result<void> init(TlsClientContext& context, std::string_view host, bool host_is_ip,
                    std::string session_key);

  void feed(const char* data, size_t len);  // ciphertext from the socket
  void feed_eof();                          // the socket reached EOF
  Status handshake();                       // drive the handshake; kOk when done
  bool handshake_done() const { return handshake_done_; }
  bool got_session() const { return got_session_; }  // the peer issued a resumable session
  bool resumed() const;

  // Encrypts all of `data` (the memory BIO takes it whole).
  Status write(const char* data, size_t len);
  // Decrypts into buf. Returns bytes (> 0) with kOk, or 0 with kWantRead / kClosed / kError.
  size_t read(char* buf, size_t len, Status* status);

  size_t pending_output() const;
  // Moves pending ciphertext to the end of `out`.
  void take_output(std::string& out);

  long verify_result() const;  // X509_V_OK or the failure (diagnostics)
  // Why the last kCertError / kHandshakeError / kError happened, as the library words it
  // ("unable to get local issuer certificate", "TLSV1_ALERT_CERTIFICATE_REQUIRED"); static
  // text, nullptr when unknown. For logs and connection events, never parsed.
  const char* last_error() const { return last_error_; }

 private:
  static int on_new_session(SSL* ssl, SSL_SESSION* session);
  friend class TlsClientContext;
  Status fail_status();

  SSL* ssl_ = nullptr;
  BIO* rbio_ = nullptr;  // network → SSL (owned by ssl_)
  BIO* wbio_ = nullptr;  // SSL → network (owned by ssl_)
  TlsClientContext* context_ = nullptr;
  std::string session_key_;
  const char* last_error_ = nullptr;
  bool handshake_done_ = false;
  bool got_session_ = false;
};

}  // namespace ringcast::net
