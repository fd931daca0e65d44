// Internal to the Redis store's files: the bodies of its Lua scripts, the write script's
// (docs/cluster.md "Writes") and a retention chunk's ("Retention"; SPEC R10.1), each sent
// behind cluster::kFencePrelude when fencing is on (RedisStore::open).
#pragma once

#include <string_view>

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
inline constexpr std::string_view kApplyBody = R"lua(
local pre = ARGV[3]
local checked = ARGV[5] == '1'
local n = #ARGV
local i = 6
if not checked then
  while i <= n do
    local c = tonumber(ARGV[i + 2])
    if ARGV[i] == 'E' then
      local k = pre .. ARGV[i + 1]
      for j = i + 3, i + 2 + c, 2 do
        local cur = redis.call('HGET', k, ARGV[j])
        if cur and string.sub(cur, 1, 8) ~= string.sub(ARGV[j + 1], 1, 8) then
          return redis.error_reply('CONFLICT an event with this id already exists for the tenant')
        end
      end
    end
    i = i + 3 + c
  end
  i = 6
end
local cmds = {H = 'HSET', D = 'HDEL', Z = 'ZADD', R = 'ZREM'}
while i <= n do
  local op, k, a = ARGV[i], pre .. ARGV[i + 1], i + 3
  local b = i + 2 + tonumber(ARGV[i + 2])
  local cmd = cmds[op]
  if cmd then
    if b >= a then redis.call(cmd, k, unpack(ARGV, a, b)) end
  elseif op == 'E' then
    if checked then
      if b >= a then redis.call('HSET', k, unpack(ARGV, a, b)) end
    else
      for j = a, b, 2 do
        if redis.call('HEXISTS', k, ARGV[j]) == 0 then redis.call('HSET', k, ARGV[j], ARGV[j + 1]) end
      end
    end
  elseif op == 'V' then
    -- One HMGET and one HSET for the group; a field named twice builds on its first value.
    local fs, vals, stored, order = {}, {}, {}, {}
    for j = a, b, 2 do fs[#fs + 1] = ARGV[j] end
    local curs = redis.call('HMGET', k, unpack(fs))
    for q = 1, #fs do
      local f, v = fs[q], ARGV[a + 2 * q - 1]
      local cur = vals[f] or curs[q]
      if not vals[f] then
        order[#order + 1] = f
        stored[f] = curs[q]
      end
      if not cur then
        vals[f] = v
      else
        local ch = 3 + string.byte(cur, 1) * 256 + string.byte(cur, 2)
        local add = {}
        for x = 3 + string.byte(v, 1) * 256 + string.byte(v, 2), #v, 8 do
          local id, seen = string.sub(v, x, x + 7), false
          for y = ch, #cur, 8 do
            if string.sub(cur, y, y + 7) == id then
              seen = true
              break
            end
          end
          if not seen then add[#add + 1] = id end
        end
        vals[f] = #add > 0 and cur .. table.concat(add) or cur
      end
    end
    local set = {}
    for q = 1, #order do
      local f = order[q]
      if vals[f] ~= stored[f] then
        set[#set + 1] = f
        set[#set + 1] = vals[f]
      end
    end
    if #set > 0 then redis.call('HSET', k, unpack(set)) end
  end
  i = b + 1
end
local top = tonumber(ARGV[4])
if top > 0 and top > tonumber(redis.call('GET', KEYS[2]) or '0') then
  redis.call('SET', KEYS[2], ARGV[4])
end
return 1
)lua";

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
inline constexpr std::string_view kRetentionBody = R"lua(
local pre = ARGV[3]
local cutoff = tonumber(ARGV[4])
local nd, na, ne, nn = 0, 0, 0, 0
local function hex(s)
  local t = {}
  for i = 1, #s do t[i] = string.format('%02x', string.byte(s, i)) end
  return table.concat(t)
end
-- the exclusive lex bound just past every T at member of the delivery be64 id s
local function after(s)
  local b = {string.byte(s, 1, 8)}
  for i = 8, 1, -1 do
    if b[i] < 255 then
      b[i] = b[i] + 1
      for j = i + 1, 8 do b[j] = 0 end
      return '(' .. string.char(unpack(b))
    end
  end
  return '+'
end
local function inv(s)
  local t = {}
  for i = 1, #s do t[i] = string.char(255 - string.byte(s, i)) end
  return table.concat(t)
end
for i = 5, #ARGV, 4 do
  local op, a, b, c = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  if op == 'D' then
    local sc = redis.call('ZSCORE', pre .. 'done', a)
    if sc and tonumber(sc) < cutoff then
      redis.call('ZREM', pre .. 'done', a)
      redis.call('ZREM', pre .. 'act', a)
      nd = nd + redis.call('HDEL', pre .. 'dl', a)
      na = na + redis.call('ZREMRANGEBYLEX', pre .. 'at', '[' .. a, after(a))
      if b ~= '' then
        redis.call('ZREM', pre .. b, inv(a))
        redis.call('ZREM', pre .. c, inv(a))
      end
    end
  elseif op == 'E' then
    local ed = redis.call('HGET', pre .. 'ed', a)
    local live, kf = false, ''
    if ed then
      local h = 3 + string.byte(ed, 1) * 256 + string.byte(ed, 2)
      kf = string.sub(ed, 3, h - 1)
      for j = h, #ed, 8 do
        if redis.call('HEXISTS', pre .. 'dl', string.sub(ed, j, j + 7)) == 1 then
          live = true
          break
        end
      end
    end
    redis.call('ZREM', pre .. 'eo', a)
    if not live then
      ne = ne + redis.call('HDEL', pre .. 'ev', a)
      if kf ~= '' then
        local cur = redis.call('HGET', pre .. 'key', kf)
        if cur and string.sub(cur, 1, 8) == a then redis.call('HDEL', pre .. 'key', kf) end
      end
      redis.call('HDEL', pre .. 'ed', a)
    end
  elseif op == 'N' then
    redis.call('ZREM', pre .. 'nto', a)
    nn = nn + redis.call('ZREMRANGEBYLEX', pre .. 'nt:' .. hex(string.sub(a, 1, 8)), b, c)
  end
end
return {nd, na, ne, nn}
)lua";

}  // namespace redis_detail

using redis_detail::kApplyBody;
using redis_detail::kRetentionBody;

}  // namespace ringcast::storage
