// What a Redis connection needs to speak TLS (SPEC R14, docs/security.md "Redis"): a plain
// value that every Redis user's options carry (store, inbox, leases, Streams intake), so that
// their headers need no TLS or socket type. Invariant: with `enabled` the server is always
// verified (redis/connection.h); nothing here turns verification off.
#pragma once

#include <memory>
#include <string>

#include "core/result.h"

namespace ringcast::net {
class TlsClientContext;
}  // namespace ringcast::net

namespace ringcast::redis {

struct TlsOptions {
  bool enabled = false;
  // Trust anchors for the server's certificate (PEM); only these are trusted. Empty: the
  // system bundle.
  std::string ca_file;
  // This client's certificate chain and key (PEM), for tls-auth-clients yes (mutual TLS).
  // Both or neither.
  std::string cert_file;
  std::string key_file;
  // The name the server's certificate must carry (also sent as SNI), e.g. when it has DNS
  // names only; empty: the numeric address it was reached at must be an IP SAN. In a cluster
  // every node's certificate must carry it.
  std::string server_name;
};

// The client context for `tls` (trust anchors and client certificate loaded once).
// kInvalidArgument / kIo with `field` naming the tls_* option at fault (tls_ca_file,
// tls_cert_file, tls_key_file).
Result<std::unique_ptr<net::TlsClientContext>> make_tls_context(const TlsOptions& tls);

}  // namespace ringcast::redis
