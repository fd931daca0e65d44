// The fencing primitive of cluster mode (docs/cluster.md "Fencing"): every write a partition owner
// makes runs as a Lua script that first checks that the partition's lease ({ns:p}:own) holds
// exactly the writer's node and epoch, and otherwise answers an error reply starting with "FENCED"
// without writing anything. The lease and the data share the partition's hash tag (cluster/keys.h),
// so the check and the write are one atomic step in one slot.
// Calling convention of a fenced script: KEYS[1] = the lease key, ARGV[1] = node id,
// ARGV[2] = epoch (decimal); the body's own keys start at KEYS[2] and its arguments at ARGV[3].
// fenced_call() builds exactly that.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/types.h"
#include "redis/client.h"
#include "redis/reply.h"
#include "redis/script.h"

namespace ringcast::cluster {

// The Lua that opens every fenced script (an `if ... return ... end` block: it returns the
// FENCED error or falls through to the body).
extern const std::string_view kFencePrelude;

// kFencePrelude followed by `body`.
std::string fenced_source(std::string_view body);

struct FencedCall {
  std::vector<std::string> keys;  // own key, then the body's keys
  std::vector<std::string> args;  // node, epoch, then the body's args
};
// KEYS/ARGV for a fenced script of partition `p` written by (node, epoch). The body's keys
// should carry p's hash tag (partition_key()), or Redis Cluster refuses them (CROSSSLOT).
FencedCall fenced_call(std::string_view ns, Partition p, std::string_view node, uint64_t epoch,
                       std::span<const std::string> keys = {},
                       std::span<const std::string> args = {});

// Runs a fenced script (made with fenced_source) by evalsha. The reply is the body's, or the
// FENCED error (is_fenced).
void evalsha_fenced(redis::Client& client, const redis::Script& script, std::string_view ns,
                    Partition p, std::string_view node, uint64_t epoch,
                    std::span<const std::string> keys, std::span<const std::string> args,
                    redis::Callback cb, const redis::CommandOptions& options = {});

bool is_fenced(const redis::Reply& r);

}  // namespace ringcast::cluster
