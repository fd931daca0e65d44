// Internal to the shard's part files (engine/shard.cc and the upper parts: intake_part.cc,
// send_path.cc, handover.cc, admin_calls.cc, requeue_part.cc), not part of engine/shard.h's
// interface: the errors several parts answer with (in ringcast::engine::shard_detail).
#pragma once

#include "core/result.h"

namespace ringcast::engine {

namespace shard_detail {

inline Error unknown_tenant() {
  return make_error(Errc::kNotFound, "unknown tenant: create an endpoint first", "tenant",
                    "unknown_tenant");
}
inline Error unknown_endpoint() {
  return make_error(Errc::kNotFound, "no such endpoint for this tenant", "endpoint",
                    "unknown_endpoint");
}
inline Error shutting_down() {
  return make_error(Errc::kUnavailable, "the engine is shutting down", nullptr, "shutting_down");
}

}  // namespace shard_detail

using shard_detail::shutting_down;
using shard_detail::unknown_endpoint;
using shard_detail::unknown_tenant;

}  // namespace ringcast::engine
