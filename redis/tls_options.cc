#include "redis/tls_options.h"

#include <string_view>

#include "net/tls.h"

namespace ringcast::redis {

Result<std::unique_ptr<net::TlsClientContext>> make_tls_context(const TlsOptions& tls) {
  if (tls.cert_file.empty() != tls.key_file.empty()) {
    return make_error(Errc::kInvalidArgument,
                      "redis: a TLS client certificate needs both tls_cert_file and tls_key_file",
                      tls.cert_file.empty() ? "tls_cert_file" : "tls_key_file");
  }
  net::TlsClientOptions o;
  if (!tls.ca_file.empty()) {
    o.ca_file.clear();  // a private CA for Redis: trust it alone, not the public web PKI
    o.extra_ca_file = tls.ca_file;
  }
  o.cert_file = tls.cert_file;
  o.key_file = tls.key_file;
  o.session_cache_max = 256;  // one session per node (ClusterOptions::max_nodes is 64)
  auto r = net::TlsClientContext::create(o);
  if (r.ok()) return r;
  Error e = r.error();
  const std::string_view f = e.field != nullptr ? e.field : "";
  if (f == "extra_ca_file" || f == "ca_file") {
    e.field = "tls_ca_file";
  } else if (f == "cert_file") {
    e.field = "tls_cert_file";
  } else if (f == "key_file") {
    e.field = "tls_key_file";
  }
  return e;
}

}  // namespace ringcast::redis
