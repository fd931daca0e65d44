#include "net/tls.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <unistd.h>

namespace ringcast::net {

namespace {
// The TlsStream* of an SSL, for the new-session callback.
int stream_index() {
  static const int kIndex = SSL_get_ex_new_index(0, nullptr, nullptr, nullptr, nullptr);
  return kIndex;
}

Error tls_error(const char* message) {
  ERR_clear_error();
  return make_error(Errc::kIo, message);
}
}  // namespace

// --- context -------------------------------------------------------------------------------

Result<std::unique_ptr<TlsClientContext>> TlsClientContext::create(
    const TlsClientOptions& options) {
  std::unique_ptr<TlsClientContext> c(new TlsClientContext(options));
  c->ctx_ = SSL_CTX_new(TLS_method());
  if (c->ctx_ == nullptr) return tls_error("SSL_CTX_new failed");
  SSL_CTX* ctx = c->ctx_;
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);  // TLS 1.2+
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
  bool any_anchor = false;
  if (!options.ca_file.empty() && ::access(options.ca_file.c_str(), R_OK) == 0) {
    if (!SSL_CTX_load_verify_locations(ctx, options.ca_file.c_str(), nullptr)) {
      return tls_error("cannot load the CA bundle");
    }
    any_anchor = true;
  }
  if (!options.extra_ca_file.empty()) {
    if (!SSL_CTX_load_verify_locations(ctx, options.extra_ca_file.c_str(), nullptr)) {
      Error e = tls_error("cannot load the extra CA file");
      e.field = "extra_ca_file";
      return e;
    }
    any_anchor = true;
  }
  if (!any_anchor) return make_error(Errc::kInvalidArgument, "no TLS trust anchors", "ca_file");
  if (options.cert_file.empty() != options.key_file.empty()) {
    return make_error(Errc::kInvalidArgument,
                      "a client certificate needs both its certificate and its key file",
                      options.cert_file.empty() ? "cert_file" : "key_file");
  }
  if (!options.cert_file.empty()) {
    if (!SSL_CTX_use_certificate_chain_file(ctx, options.cert_file.c_str())) {
      Error e = tls_error("cannot load the client certificate (PEM)");
      e.field = "cert_file";
      return e;
    }
    if (!SSL_CTX_use_PrivateKey_file(ctx, options.key_file.c_str(), SSL_FILETYPE_PEM)) {
      // BoringSSL checks the key against the certificate as it loads it.
      const uint32_t packed = ERR_peek_last_error();
      const bool mismatch = ERR_GET_LIB(packed) == ERR_LIB_X509 &&
                            (ERR_GET_REASON(packed) == X509_R_KEY_VALUES_MISMATCH ||
                             ERR_GET_REASON(packed) == X509_R_KEY_TYPE_MISMATCH);
      Error e = tls_error(mismatch ? "the client private key does not match the client certificate"
                                   : "cannot load the client private key (PEM)");
      e.field = "key_file";
      return e;
    }
    if (!SSL_CTX_check_private_key(ctx)) {
      Error e = tls_error("the client private key does not match the client certificate");
      e.field = "key_file";
      return e;
    }
  }
  if (options.session_resumption) {
    // An external per-host cache: the client side of BoringSSL keeps no internal one.
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL);
    SSL_CTX_sess_set_new_cb(ctx, &TlsStream::on_new_session);
  } else {
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
  }
  return c;
}

TlsClientContext::~TlsClientContext() {
  for (auto& [key, s] : sessions_) SSL_SESSION_free(s);
  if (ctx_) SSL_CTX_free(ctx_);
}

SSL_SESSION* TlsClientContext::session(const std::string& key) const {
  auto it = sessions_.find(key);
  return it == sessions_.end() ? nullptr : it->second;
}

void TlsClientContext::store_session(const std::string& key, SSL_SESSION* session) {
  auto it = sessions_.find(key);
  if (it != sessions_.end()) {
    SSL_SESSION_free(it->second);
    it->second = session;
  } else {
    if (sessions_.size() >= options_.session_cache_max) {
      // Bounded (STYLE 6): drop an arbitrary entry; a full handshake is the only cost.
      auto victim = sessions_.begin();
      SSL_SESSION_free(victim->second);
      sessions_.erase(victim);
    }
    sessions_.emplace(key, session);
  }
  stats_.sessions_cached++;
}

void TlsClientContext::forget_session(const std::string& key) {
  auto it = sessions_.find(key);
  if (it == sessions_.end()) return;
  SSL_SESSION_free(it->second);
  sessions_.erase(it);
}

// --- stream --------------------------------------------------------------------------------

TlsStream::~TlsStream() {
  if (ssl_) SSL_free(ssl_);  // frees both BIOs
}

int TlsStream::on_new_session(SSL* ssl, SSL_SESSION* session) {
  auto* s = static_cast<TlsStream*>(SSL_get_ex_data(ssl, stream_index()));
  if (s == nullptr || s->context_ == nullptr) return 0;
  s->context_->store_session(s->session_key_, session);
  s->got_session_ = true;
  return 1;  // we own it now
}

Result<void> TlsStream::init(TlsClientContext& context, std::string_view host, bool host_is_ip,
                             std::string session_key) {
  context_ = &context;
  session_key_ = std::move(session_key);
  ssl_ = SSL_new(context.ctx());
  if (ssl_ == nullptr) return tls_error("SSL_new failed");
  rbio_ = BIO_new(BIO_s_mem());
  wbio_ = BIO_new(BIO_s_mem());
  if (rbio_ == nullptr || wbio_ == nullptr) {
    if (rbio_) BIO_free(rbio_);
    if (wbio_) BIO_free(wbio_);
    rbio_ = wbio_ = nullptr;
    return tls_error("BIO_new failed");
  }
  BIO_set_mem_eof_return(rbio_, -1);  // empty = "retry", not EOF
  SSL_set_bio(ssl_, rbio_, wbio_);
  SSL_set_connect_state(ssl_);
  SSL_set_ex_data(ssl_, stream_index(), this);
  const std::string h(host);
  X509_VERIFY_PARAM* param = SSL_get0_param(ssl_);
  if (host_is_ip) {
    if (!X509_VERIFY_PARAM_set1_ip_asc(param, h.c_str())) return tls_error("bad IP literal");
  } else {
    // SNI carries the name; verification checks it against the SANs.
    if (!SSL_set_tlsext_host_name(ssl_, h.c_str())) return tls_error("SNI failed");
    X509_VERIFY_PARAM_set_hostflags(param, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
    if (!X509_VERIFY_PARAM_set1_host(param, h.data(), h.size())) {
      return tls_error("bad host name");
    }
  }
  if (context.resumption()) {
    if (SSL_SESSION* s = context.session(session_key_)) SSL_set_session(ssl_, s);
  }
  return ok();
}

void TlsStream::feed(const char* data, size_t len) {
  BIO_write(rbio_, data, static_cast<int>(len));
}

void TlsStream::feed_eof() {
  BIO_set_mem_eof_return(rbio_, 0);
}

TlsStream::Status TlsStream::fail_status() {
  const uint32_t packed = ERR_peek_last_error();
  last_error_ = packed != 0 ? ERR_reason_error_string(packed) : nullptr;
  ERR_clear_error();
  if (!handshake_done_) {
    if (const long v = SSL_get_verify_result(ssl_); v != X509_V_OK) {
      last_error_ = X509_verify_cert_error_string(v);
      context_->stats().cert_failures++;
      return Status::kCertError;
    }
    context_->stats().handshake_failures++;
    return Status::kHandshakeError;
  }
  return Status::kError;
}

TlsStream::Status TlsStream::handshake() {
  if (handshake_done_) return Status::kOk;
  const int rc = SSL_do_handshake(ssl_);
  if (rc == 1) {
    handshake_done_ = true;
    if (SSL_session_reused(ssl_)) {
      context_->stats().resumed_handshakes++;
    } else {
      context_->stats().full_handshakes++;
    }
    return Status::kOk;
  }
  const int err = SSL_get_error(ssl_, rc);
  if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) return Status::kWantRead;
  if (err == SSL_ERROR_ZERO_RETURN) {
    last_error_ = "close_notify during the handshake";
    return Status::kHandshakeError;
  }
  // A failed resumption must not be retried with the same session.
  if (context_->resumption()) context_->forget_session(session_key_);
  return fail_status();
}

bool TlsStream::resumed() const {
  return ssl_ && SSL_session_reused(ssl_);
}

TlsStream::Status TlsStream::write(const char* data, size_t len) {
  size_t off = 0;
  while (off < len) {
    const int n = SSL_write(ssl_, data + off, static_cast<int>(len - off));
    if (n <= 0) return fail_status();
    off += static_cast<size_t>(n);
  }
  return Status::kOk;
}

size_t TlsStream::read(char* buf, size_t len, Status* status) {
  const int n = SSL_read(ssl_, buf, static_cast<int>(len));
  if (n > 0) {
    *status = Status::kOk;
    return static_cast<size_t>(n);
  }
  const int err = SSL_get_error(ssl_, n);
  if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) {
    *status = Status::kWantRead;
  } else if (err == SSL_ERROR_ZERO_RETURN) {
    *status = Status::kClosed;
  } else if (err == SSL_ERROR_SYSCALL) {
    ERR_clear_error();
    *status = Status::kClosed;  // EOF without close_notify
  } else {
    *status = fail_status();
  }
  return 0;
}

size_t TlsStream::pending_output() const {
  return BIO_ctrl_pending(wbio_);
}

void TlsStream::take_output(std::string& out) {
  const size_t n = BIO_ctrl_pending(wbio_);
  if (n == 0) return;
  const size_t old = out.size();
  out.resize(old + n);
  const int got = BIO_read(wbio_, out.data() + old, static_cast<int>(n));
  out.resize(old + (got > 0 ? static_cast<size_t>(got) : 0));
}

long TlsStream::verify_result() const {
  return ssl_ ? SSL_get_verify_result(ssl_) : -1;
}

}  // namespace ringcast::net
