// Who may call each /v1 route (SPEC R14; docs/security.md "Route classes"): one table that
// authorization, the route × principal test, the OpenAPI document (docs/openapi.yaml) and the
// docs all read. Invariants: every /v1 route the REST adapter answers has exactly one row per
// method (its few routes outside /v1 are other_routes()); a tenant principal (a key or a portal
// session) reaches only rows of its own tenant and never a platform row; a read-only principal
// reaches only viewer rows; a public row is answered before any credential is looked at.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ringcast::api {

// Who may call a route.
enum class RouteClass : uint8_t {
  kPlatform,  // the admin token only: the platform's switches (billing state, operator controls)
  kMerchant,  // and a read-write tenant key or a manage portal session, for their own tenant
  kViewer,    // and a read-only key or a view session: reads that show nothing write-only
  // No credential at all, and none looked at (nor the failed-authentication throttle): what
  // describes the API and reveals nothing of any tenant or of the node (GET /v1/openapi.json).
  kPublic,
};
const char* route_class_name(RouteClass c);

struct RouteSpec {
  std::string_view method;   // "GET", "POST", ...
  std::string_view pattern;  // "/v1/tenants/{t}/endpoints/{id}"; {t} is the tenant
  RouteClass who;
  bool sessions = true;  // false: a portal session may not call it (the portal has no use for it)
  // Keys of either scope may call it although it writes (minting a view link with a read-only
  // key); the handler checks what the scope allows.
  bool any_key_scope = false;
};

// The OpenAPI document of the API (api/openapi.h), a public row.
inline constexpr std::string_view kOpenApiPath = "/v1/openapi.json";

// Every /v1 route, in the order the docs list them.
std::span<const RouteSpec> route_table();

// The REST adapter's routes outside /v1 (RestApi::handle()): health, readiness, the metrics and
// the owner-address confirmation page. Authorization does not read them (each checks what it
// needs itself: /metrics the admin token, the page its signed link); docs/openapi.yaml lists
// them beside the table's rows, and tests/api/openapi_routes_test.cc holds the two together.
struct OtherRoute {
  std::string_view method;
  std::string_view path;
  RouteClass who;  // kPublic or kPlatform
};
std::span<const OtherRoute> other_routes();

// The row for `method` on the split path `segs` ("v1", "tenants", T, ...); null when no row
// has that method and path (the handler answers 404 or 405).
const RouteSpec* find_route(std::string_view method, const std::vector<std::string>& segs);

// Whether the split path `segs` fits `pattern` (a "{…}" segment matches any one segment).
// Allocates nothing: it runs for every row on every request.
bool route_path_matches(std::string_view pattern, const std::vector<std::string>& segs);

// Splits a pattern into its segments ("v1", "tenants", "{t}", ...).
std::vector<std::string_view> pattern_segments(std::string_view pattern);

}  // namespace ringcast::api
