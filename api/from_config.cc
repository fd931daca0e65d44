#include "api/from_config.h"

#include <chrono>

namespace ringcast::api {

RestApiOptions rest_api_options(const Config& cfg) {
  RestApiOptions a;
  a.api_token = cfg.server.api_token;
  a.metrics_public = cfg.server.metrics_public;
  a.auth_failures_per_minute = cfg.server.auth_failures_per_minute;
  a.max_body_bytes = cfg.limits.max_body_bytes;
  a.max_bulk_body_bytes = cfg.limits.max_bulk_body_bytes;
  a.max_bulk_events = cfg.limits.max_bulk_events;
  a.max_id_bytes = cfg.limits.max_id_bytes;
  a.max_tenant_bytes = cfg.limits.max_tenant_bytes;
  a.max_type_bytes = cfg.limits.max_type_bytes;
  a.max_event_types = cfg.limits.max_event_types;
  a.max_list_limit = cfg.limits.max_list_limit;
  a.stats_max_rows = cfg.limits.stats_max_rows;
  a.stats_max_time =
      std::chrono::duration_cast<std::chrono::milliseconds>(cfg.limits.stats_max_time);
  a.portal.secret = cfg.portal.secret;  // empty: serve takes the store's (node_secret)
  a.portal.public_url = cfg.portal.public_url;
  a.portal.link_ttl = cfg.portal.link_ttl;
  a.portal.link_ttl_max = cfg.portal.link_ttl_max;
  a.portal.session_ttl = cfg.portal.session_ttl;
  a.portal.frame_ancestors = cfg.portal.frame_ancestors;
  return a;
}

}  // namespace ringcast::api
