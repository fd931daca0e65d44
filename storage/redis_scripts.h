// Internal to the Redis store's files: the bodies of its Lua scripts, the write script's
// (docs/cluster.md "Writes") and a retention chunk's ("Retention"; SPEC R10.1), each sent
// behind cluster::kFencePrelude when fencing is on (RedisStore::open).
#pragma once

#include <string_view>

#include "storage/lua_scripts.h"

namespace ringcast::storage {
namespace redis_detail {

// The body of the write script of one partition. Its calling convention is cluster/fence.h's,
// so that with fencing on (RedisStoreOptions::node_id) it runs behind cluster::kFencePrelude
// unchanged: KEYS[1] = the lease T.."own", KEYS[2] = T.."seq"; ARGV[1] = the writer's node id,
// ARGV[2] = its epoch (decimal), both read by the prelude only; ARGV[3] = T (the partition's key
// prefix), ARGV[4] = the highest id sequence the batch names (0: none), ARGV[5] = "1" when the
// writer checked the event keys itself (Mutations::event_keys_checked), then groups: a code, a
// key suffix, the count c of arguments, then those c arguments (PartBatch::compile):
//   H  hash   field value ...          HSET
//   D  hash   field ...                HDEL
//   Z  zset   score member ...         ZADD
//   R  zset   member ...               ZREM
//   E  hash   tenant\0id be64(seq)+record ...   idempotency keys of new events: each set unless
//                                      present (checked first: CONFLICT when it names another)
//   V  hash   field value ...          T ed: each set, or the delivery ids (be64 each, after the
//                                      be16-length header) it lacks appended
// Every check (the fence, then the keys) runs before the first write, so a FENCED or CONFLICT
// answer leaves the partition untouched.
// The writer gathers a partition's puts by key (one HSET / HDEL / ZADD / ZREM per key and
// batch: Redis's per-command cost — the call, the AOF and replication feeds — was most of a
// delivery's cost with one command per record, bench/e2e_cluster.sh) and resolves the batch
// order itself (a field both set and deleted keeps its last op), so the script does no per-record
// work of its own: each group is one call with the arguments as they came.
inline constexpr std::string_view kApplyBody = lua::apply;

// The body of a retention chunk of one partition (RedisStore::run_retention), with the write
// script's calling convention (KEYS[1] = T own for the fence, KEYS[2] = T seq, ARGV[1..2] read by
// the prelude only); ARGV[3] = T, ARGV[4] = the cutoff (ms), then ops of four:
//   D  be64(id)  ti:<th>  ei:<th>:<ep>    a terminal delivery whose T done stamp is still below
//                                        the cutoff: its record, attempts, index members ("" when
//                                        its tenant is unknown) and T done member go
//   E  be64(seq) -  -                    an event: it goes (T ev, its T key entry when that still
//                                        names it, T ed, T eo) unless a delivery T ed lists is
//                                        still in T dl; it leaves T eo either way (its deliveries
//                                        bring it back when the last of them goes)
//   N  be64(th)+be64(seq)  lo  hi        a notification: its T nto member, and the T nt:<th>
//                                        members in [lo, hi) (be64(~seq) + record)
// Deliveries come before the events they name in one call, so an event whose last delivery goes
// in the same chunk goes too. Answers {deliveries, attempts, events, notifications}.
inline constexpr std::string_view kRetentionBody = lua::retention;

}  // namespace redis_detail

using redis_detail::kApplyBody;
using redis_detail::kRetentionBody;

}  // namespace ringcast::storage
