// GET /v1/cluster (docs/operations.md §7): one node's view of cluster mode as JSON, for the REST
// route and
// `ringcast cluster status`. Shape (every key always present, in this order):
//   {"node_id": str, "synced": bool,
//    "members": [{"node_id": str, "assigned": n}, ...],   live members, sorted; assigned = how
//                                                          many partitions rendezvous gives it
//    "owned": [{"partition": p, "epoch": e}, ...],         held by this node now, ascending
//    "owned_count": n, "releasing": n,
//    "redis_nodes": [str, ...],                            the lease servers (or cluster seeds)
//    "counters": {"acquired", "released", "lost", "fenced", "acquire_refused", "renewals",
//                 "redis_errors"}}                         LeaseCounters, since the start
// Strings are escaped (and invalid UTF-8 repaired) by net::JsonWriter, so the output is
// valid JSON whatever the node ids hold.
#pragma once

#include <string>
#include <vector>

#include "cluster/lease.h"

namespace ringcast::cluster {

// `s.assigned` is read alongside `s.members` (a missing entry counts as 0); the counters are
// read one by one (relaxed), so they need not be a consistent snapshot.
std::string render_cluster_status_json(const ClusterStatus& s, const LeaseCounters& c,
                                       const std::vector<std::string>& redis_nodes);

}  // namespace ringcast::cluster
