#include "api/routes.h"

#include <array>

namespace ringcast::api {

namespace {

constexpr RouteClass P = RouteClass::kPlatform;
constexpr RouteClass M = RouteClass::kMerchant;
constexpr RouteClass V = RouteClass::kViewer;
constexpr RouteClass Pub = RouteClass::kPublic;

// SPEC R14: the platform's switches are the tenant's billing state (SPEC R6
// subscription_inactive), the breaker reset (SPEC R4.8, an operator's control), the keys, the
// cluster and intake views, and ending a tenant's portal sessions. Public: the API's own
// description, which names no tenant and no node.
constexpr std::array kRoutes = {
    RouteSpec{"GET", kOpenApiPath, Pub},
    RouteSpec{"POST", "/v1/events/bulk", M, false},
    RouteSpec{"GET", "/v1/cluster", P},
    RouteSpec{"GET", "/v1/intake", P},
    RouteSpec{"GET", "/v1/tenants/{t}/endpoints", V},
    RouteSpec{"POST", "/v1/tenants/{t}/endpoints", M},
    RouteSpec{"GET", "/v1/tenants/{t}/endpoints/{id}", V},
    RouteSpec{"PATCH", "/v1/tenants/{t}/endpoints/{id}", M},
    RouteSpec{"DELETE", "/v1/tenants/{t}/endpoints/{id}", M},
    RouteSpec{"POST", "/v1/tenants/{t}/endpoints/{id}/pause", M},
    RouteSpec{"POST", "/v1/tenants/{t}/endpoints/{id}/resume", M},
    RouteSpec{"POST", "/v1/tenants/{t}/endpoints/{id}/enable", M},
    RouteSpec{"POST", "/v1/tenants/{t}/endpoints/{id}/test", M},
    RouteSpec{"POST", "/v1/tenants/{t}/endpoints/{id}/recover", M},
    RouteSpec{"POST", "/v1/tenants/{t}/endpoints/{id}/secret/rotate", M},
    RouteSpec{"GET", "/v1/tenants/{t}/endpoints/{id}/ordering", V},  // SPEC R13
    RouteSpec{"POST", "/v1/tenants/{t}/events", M, false},
    RouteSpec{"GET", "/v1/tenants/{t}/events/{event}", V},
    RouteSpec{"POST", "/v1/tenants/{t}/events/{event}/replay", M},
    RouteSpec{"GET", "/v1/tenants/{t}/jobs/{id}", V},
    RouteSpec{"GET", "/v1/tenants/{t}/deliveries", V},
    RouteSpec{"GET", "/v1/tenants/{t}/deliveries/recent", V},
    RouteSpec{"GET", "/v1/tenants/{t}/deliveries/{id}", V},
    RouteSpec{"POST", "/v1/tenants/{t}/deliveries/{id}/resolve", M},
    RouteSpec{"POST", "/v1/tenants/{t}/deliveries/{id}/resend", M},
    RouteSpec{"GET", "/v1/tenants/{t}/breaker", V},
    RouteSpec{"POST", "/v1/tenants/{t}/breaker/reset", P},
    RouteSpec{"PUT", "/v1/tenants/{t}/subscription", P},
    RouteSpec{"GET", "/v1/tenants/{t}/settings", V},
    RouteSpec{"PUT", "/v1/tenants/{t}/settings", M},
    RouteSpec{"POST", "/v1/tenants/{t}/settings/owner-email/confirm", P},
    RouteSpec{"GET", "/v1/tenants/{t}/keys", P},
    RouteSpec{"POST", "/v1/tenants/{t}/keys", P},
    RouteSpec{"DELETE", "/v1/tenants/{t}/keys/{id}", P},
    RouteSpec{"POST", "/v1/tenants/{t}/portal-links", V, false, true},
    RouteSpec{"POST", "/v1/tenants/{t}/portal-sessions/end", P},
    RouteSpec{"GET", "/v1/tenants/{t}/stats/attempts", V},
    RouteSpec{"GET", "/v1/tenants/{t}/notifications", V},
};

constexpr std::array kOtherRoutes = {
    OtherRoute{"GET", "/healthz", Pub},
    OtherRoute{"GET", "/readyz", Pub},
    OtherRoute{"GET", "/metrics", P},  // unless server.metrics_public (docs/security.md)
    OtherRoute{"HEAD", "/metrics", P},
    OtherRoute{"GET", "/portal/confirm-email", Pub},  // the signed link is the credential
    OtherRoute{"HEAD", "/portal/confirm-email", Pub},
    OtherRoute{"POST", "/portal/confirm-email", Pub},
};

}  // namespace

const char* route_class_name(RouteClass c) {
  switch (c) {
    case RouteClass::kPlatform:
      return "platform";
    case RouteClass::kMerchant:
      return "merchant";
    case RouteClass::kViewer:
      return "viewer";
    case RouteClass::kPublic:
      return "public";
  }
  return "?";
}

std::span<const RouteSpec> route_table() {
  return kRoutes;
}

std::span<const OtherRoute> other_routes() {
  return kOtherRoutes;
}

bool route_path_matches(std::string_view pattern, const std::vector<std::string>& segs) {
  size_t i = 0;
  size_t pos = 1;  // past the leading '/'
  while (pos <= pattern.size()) {
    size_t end = pattern.find('/', pos);
    if (end == std::string_view::npos) end = pattern.size();
    const std::string_view p = pattern.substr(pos, end - pos);
    if (i >= segs.size()) return false;
    const bool param = !p.empty() && p.front() == '{';
    if (!param && segs[i] != p) return false;
    ++i;
    pos = end + 1;
  }
  return i == segs.size();
}

const RouteSpec* find_route(std::string_view method, const std::vector<std::string>& segs) {
  // A literal segment wins over a parameter ("deliveries/recent" over "deliveries/{id}"):
  // the table lists the literal first and the first match is taken.
  for (const RouteSpec& r : kRoutes) {
    if (r.method == method && route_path_matches(r.pattern, segs)) return &r;
  }
  return nullptr;
}

std::vector<std::string_view> pattern_segments(std::string_view pattern) {
  std::vector<std::string_view> out;
  size_t pos = 1;
  while (pos <= pattern.size()) {
    size_t end = pattern.find('/', pos);
    if (end == std::string_view::npos) end = pattern.size();
    out.push_back(pattern.substr(pos, end - pos));
    pos = end + 1;
  }
  return out;
}

}  // namespace ringcast::api
