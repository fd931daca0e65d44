// The Redis keys of cluster mode (docs/cluster.md "Keys", research/scale-out.md design A). Every
// key of one partition carries the hash tag "{<ns>:<p>}", so they share one slot and one Lua script
// can check the lease and write the data atomically (the fence). `ns` ("rc" by default) lets
// several ringcast clusters, or tests, share one Redis.
#pragma once

#include <string>
#include <string_view>

#include "core/types.h"

namespace ringcast::cluster {

inline constexpr std::string_view kDefaultNamespace = "rc";

// "{rc}:members": ZSET, member = node id, score = wall-clock ms of the node's last heartbeat.
std::string members_key(std::string_view ns);
// "{rc}:addr": hash, node id → the URL of its API (cluster.advertise_url), written with its
// heartbeat and pruned with it; same slot as "{rc}:members" (one script writes both).
std::string addr_key(std::string_view ns);
// "{rc:17}": the hash tag of partition 17.
std::string partition_tag(std::string_view ns, Partition p);
// "{rc:17}:<suffix>" (":ev", ":due", ... of the future cluster Store).
std::string partition_key(std::string_view ns, Partition p, std::string_view suffix);
// "{rc:17}:own": hash {node, epoch} with PEXPIRE lease_ttl: the lease.
std::string own_key(std::string_view ns, Partition p);
// "{rc:17}:epoch": the partition's epoch counter; never expires, so an expired lease does not
// take the epoch back (a new owner's epoch is always greater than every earlier one).
std::string epoch_key(std::string_view ns, Partition p);

}  // namespace ringcast::cluster
