#include "tools/ringcast/cli_http.h"

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <unistd.h>

#include <charconv>
#include <cstring>
#include <utility>

#include "engine/version.h"

namespace ringcast::cli {
namespace {

constexpr size_t kMaxResponseBytes = 512u * 1024 * 1024;

using net::tls_error_text;

}  // namespace

std::string ServerAddress::authority() const {
  if (host.find(':') != std::string::npos) return "[" + host + "]:" + std::to_string(port);
  return host + ":" + std::to_string(port);
}

std::optional<ServerAddress> parse_server(std::string_view text, std::string* error) {
  auto fail = [&](std::string msg) -> std::optional<ServerAddress> {
    if (error) *error = std::move(msg);
    return std::nullopt;
  };
  std::string_view t = text;
  ServerAddress out;
  if (t.rfind("https://", 0) == 0) {
    out.tls = true;
    t.remove_prefix(8);
  } else if (t.rfind("http://", 0) == 0) {
    t.remove_prefix(7);
  }
  while (!t.empty() && t.back() == '/') t.remove_suffix(1);
  std::string_view port;
  if (!t.empty() && t.front() == '[') {
    size_t close = t.find(']');
    if (close == std::string_view::npos || close + 1 >= t.size() || t[close + 1] != ':') {
      return fail("expected [v6-address]:port, got \"" + std::string(text) + "\"");
    }
    out.host = std::string(t.substr(1, close - 1));
    port = t.substr(close + 2);
  } else {
    size_t colon = t.rfind(':');
    if (colon == std::string_view::npos || t.substr(0, colon).find(':') != std::string_view::npos) {
      return fail("expected host:port (e.g. 127.0.0.1:8080), got \"" + std::string(text) + "\"");
    }
    out.host = std::string(t.substr(0, colon));
    port = t.substr(colon + 1);
  }
  unsigned p = 0;
  auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), p);
  if (out.host.empty() || port.empty() || ec != std::errc() || end != port.data() + port.size() ||
      p == 0 || p > 65535) {
    return fail("expected host:port with a port in 1..65535, got \"" + std::string(text) + "\"");
  }
  out.port = static_cast<uint16_t>(p);
  return out;
}

HttpClient::HttpClient(ServerAddress server, std::string token, std::chrono::milliseconds timeout,
                       TlsTrust trust)
    : server_(std::move(server)),
      token_(std::move(token)),
      timeout_(timeout),
      trust_(std::move(trust)) {}

HttpClient::~HttpClient() {
  conn_.close();
  if (tls_.ctx != nullptr) SSL_CTX_free(tls_.ctx);
}

bool HttpClient::make_tls_context(std::string* error) {
  if (tls_.ctx != nullptr) return true;
  SSL_CTX* ctx = SSL_CTX_new(TLS_method());
  if (ctx == nullptr) {
    *error = "cannot set up TLS: " + tls_error_text();
    return false;
  }
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  SSL_CTX_set_mode(ctx, SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  if (!trust_.pinned_cert.empty()) {
    // Pinned: the peer must present exactly this leaf (checked after the handshake, before a
    // byte of the request); no CA is involved.
    BIO* bio = BIO_new_file(trust_.pinned_cert.c_str(), "r");
    X509* leaf = bio != nullptr ? PEM_read_bio_X509(bio, nullptr, nullptr, nullptr) : nullptr;
    if (bio != nullptr) BIO_free(bio);
    uint8_t* der = nullptr;
    const int len = leaf != nullptr ? i2d_X509(leaf, &der) : -1;
    if (leaf != nullptr) X509_free(leaf);
    if (len <= 0) {
      *error = "cannot read the certificate in " + trust_.pinned_cert + ": " + tls_error_text();
      SSL_CTX_free(ctx);
      return false;
    }
    tls_.pinned_der.assign(reinterpret_cast<const char*>(der), static_cast<size_t>(len));
    OPENSSL_free(der);
  } else {
    // The system's CAs when present; a file the operator named must load.
    if (!trust_.system_ca_file.empty() && ::access(trust_.system_ca_file.c_str(), R_OK) == 0) {
      SSL_CTX_load_verify_locations(ctx, trust_.system_ca_file.c_str(), nullptr);
      ERR_clear_error();
    }
    if (!trust_.ca_file.empty() &&
        SSL_CTX_load_verify_locations(ctx, trust_.ca_file.c_str(), nullptr) != 1) {
      *error = "cannot read the certificates in " + trust_.ca_file + ": " + tls_error_text();
      SSL_CTX_free(ctx);
      return false;
    }
  }
  tls_.ctx = ctx;
  return true;
}

bool HttpClient::connect(std::string* error) {
  reused_ = false;
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  auto c = conn_.open(server_.host, server_.port, deadline);
  if (c.ok() && server_.tls) {
    if (!make_tls_context(error)) {
      conn_.close();
      return false;
    }
    c = conn_.start_tls(server_.host, tls_, deadline);
  }
  if (c.ok()) return true;
  const std::string reason = c.error().reason_or_code();
  const std::string& detail = conn_.detail();
  if (reason == "resolve_failed") {
    *error = "cannot resolve " + server_.host + ": " + detail;
  } else if (reason == "tls_untrusted" && !tls_.pinned_der.empty()) {
    *error = "the certificate of " + server_.authority() + " is not the one in " +
             trust_.pinned_cert + " (server.tls_cert)";
  } else if (reason == "tls_untrusted") {
    *error = "the certificate of " + server_.authority() + " is not trusted: " + detail +
             " (give its CA with --cacert)";
  } else if (reason == "tls_failed") {
    *error = "the TLS handshake with " + server_.authority() + " failed: " + detail +
             " (is it serving https?)";
  } else if (reason == "timeout" && server_.tls && detail != "connect timed out") {
    *error = "the TLS handshake with " + server_.authority() + " timed out";
  } else {
    *error = "cannot connect to " + server_.authority() + ": " +
             (detail.empty() ? std::string(c.error().message) : detail) +
             " (is `ringcast serve` running there?)";
  }
  return false;
}

HttpOutcome HttpClient::request(std::string_view method, std::string_view target,
                                std::string_view body, std::string_view content_type) {
  std::string req;
  req.reserve(body.size() + 256);
  req.append(method).append(" ").append(target).append(" HTTP/1.1\r\n");
  req.append("Host: ").append(server_.authority()).append("\r\n");
  req.append("User-Agent: ringcast-cli/").append(version_string()).append("\r\n");
  if (!token_.empty()) req.append("Authorization: Bearer ").append(token_).append("\r\n");
  if (!body.empty() || method == "POST" || method == "PUT" || method == "PATCH") {
    if (!body.empty()) req.append("Content-Type: ").append(content_type).append("\r\n");
    req.append("Content-Length: ").append(std::to_string(body.size())).append("\r\n");
  }
  req.append("\r\n").append(body);

  for (int attempt = 0; attempt < 2; ++attempt) {
    HttpOutcome out;
    if (!conn_.is_open() && !connect(&out.error)) return out;
    const bool was_reused = reused_;
    auto r = conn_.exchange(req, std::chrono::steady_clock::now() + timeout_, kMaxResponseBytes);
    if (r.ok()) {
      out.ok = true;
      out.reply.status = r->status;
      if (const std::string* ct = r->header("content-type")) out.reply.content_type = *ct;
      out.reply.body = std::move(r->body);
      reused_ = conn_.is_open();  // open: kept alive for the next request
      return out;
    }
    // A keep-alive connection the server had already closed (EOF or reset before any answer
    // byte, e.g. its idle timeout): it read nothing of this request; try once anew.
    const std::string reason = r.error().reason_or_code();
    if (was_reused && reason == "closed") continue;
    if (reason == "timeout") {
      out.error = "timed out waiting for the server's answer";
    } else if (reason == "closed") {
      out.error = "the server closed the connection without answering";
    } else if (reason == "too_large") {
      out.error = "response larger than 512 MiB";
    } else if (reason == "bad_response") {
      out.error =
          std::string(r.error().message) + (conn_.detail().empty() ? "" : ": " + conn_.detail());
    } else {
      out.error =
          std::string("receive failed: ") +
          (r.error().sys_errno != 0 ? std::strerror(r.error().sys_errno) : r.error().message);
    }
    return out;
  }
  HttpOutcome out;
  out.error = "the connection failed twice";
  return out;
}

}  // namespace ringcast::cli
