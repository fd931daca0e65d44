#include "cluster/advertise_url.h"

#include <cctype>
#include <charconv>

namespace ringcast::cluster {
namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool is_unspecified(const IpAddress& ip) {
  const size_t n = ip.is_v4() ? 4 : 16;
  for (size_t i = 0; i < n; ++i)
    if (ip.bytes[i] != 0) return false;
  return true;
}

}  // namespace

std::optional<ApiAddress> parse_advertise_url(std::string_view url) {
  bool tls = false;
  if (url.size() > 8 && lower(url.substr(0, 8)) == "https://") {
    tls = true;
    url.remove_prefix(8);
  } else if (url.size() > 7 && lower(url.substr(0, 7)) == "http://") {
    url.remove_prefix(7);
  } else {
    return std::nullopt;
  }
  if (!url.empty() && url.back() == '/') url.remove_suffix(1);
  std::string_view host;
  std::string_view port;
  if (!url.empty() && url.front() == '[') {
    const size_t close = url.find(']');
    if (close == std::string_view::npos || close + 1 >= url.size() || url[close + 1] != ':')
      return std::nullopt;
    host = url.substr(1, close - 1);
    port = url.substr(close + 2);
  } else {
    const size_t colon = url.find(':');
    if (colon == std::string_view::npos) return std::nullopt;
    host = url.substr(0, colon);
    port = url.substr(colon + 1);
  }
  auto ip = parse_ip(host);
  if (!ip) return std::nullopt;
  if (ip->is_v4() == (!url.empty() && url.front() == '[')) return std::nullopt;  // [v4], bare v6
  uint32_t p = 0;
  auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), p);
  if (port.empty() || ec != std::errc() || end != port.data() + port.size() || p == 0 || p > 65535)
    return std::nullopt;
  return ApiAddress{*ip, static_cast<uint16_t>(p), tls};
}

std::string format_advertise_url(const IpAddress& ip, uint16_t port, bool tls) {
  std::string out = tls ? "https://" : "http://";
  if (ip.is_v4()) {
    out += to_string(ip);
  } else {
    out += '[';
    out += to_string(ip);
    out += ']';
  }
  out += ':';
  out += std::to_string(port);
  return out;
}

std::optional<std::string> derive_advertise_url(const IpAddress& ip, uint16_t port, bool tls) {
  if (port == 0 || is_unspecified(ip)) return std::nullopt;
  return format_advertise_url(ip, port, tls);
}

}  // namespace ringcast::cluster
