// Where a node's API is reached by the others (docs/cluster.md "Forwarding"): the URL each node
// publishes with its heartbeat (cluster.advertise_url, or derived from its listener), parsed
// into an IP literal, a port and whether it speaks TLS. Only IP literals, so a forward never
// waits on a resolver that no deadline bounds.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/ip_address.h"

namespace ringcast::cluster {

// Another node's API: http://<IP literal>:<port>.
struct ApiAddress {
  IpAddress ip;
  uint16_t port = 0;
  bool tls = false;  // https://: TLS, the certificate verified for `ip`
};
// "http://10.0.0.7:8080", "https://[fd00::7]:8443" (a trailing "/" is allowed; no path, query,
// userinfo, or port 0); nullopt otherwise.
std::optional<ApiAddress> parse_advertise_url(std::string_view url);
std::string format_advertise_url(const IpAddress& ip, uint16_t port, bool tls = false);
// The URL other nodes reach a listener on `ip`:`port` at; nullopt when `ip` is unspecified
// (0.0.0.0 or ::: a listener on every address names none of them) or `port` is 0.
std::optional<std::string> derive_advertise_url(const IpAddress& ip, uint16_t port,
                                                bool tls = false);

}  // namespace ringcast::cluster
