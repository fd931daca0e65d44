#include "storage/redis_store.h"

#include <pthread.h>

#include <algorithm>
#include <array>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <future>
#include <map>
#include <set>
#include <unordered_map>
#include <utility>

#include "cluster/fence.h"
#include "cluster/keys.h"
#include "log/log.h"
#include "net/loop.h"
#include "redis/cluster.h"
#include "redis/connection.h"
#include "redis/slot.h"
#include "storage/codec.h"

namespace ringcast::storage {
namespace {

using redis::Reply;
using Cmd = std::vector<std::string>;
using Replies = std::vector<Result<Reply>>;

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
constexpr std::string_view kApplyBody = R"lua(
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
constexpr std::string_view kRetentionBody = R"lua(
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

// A script's text without its indentation: EVAL sends the text with every call and Redis hashes
// it (SHA1) each time. Lua does not care about leading blanks (no script has a long string).
std::string compact_lua(std::string_view src) {
  std::string out;
  out.reserve(src.size());
  bool line_start = true;
  for (char c : src) {
    if (line_start && (c == ' ' || c == '\t')) continue;
    line_start = c == '\n';
    out.push_back(c);
  }
  return out;
}

constexpr size_t kFetchChunk = 64;
constexpr size_t kRecoveryChunk = 1024;

std::string be64s(uint64_t v) {
  std::string s;
  put_be64(s, v);
  return s;
}
std::string be16s(uint16_t v) {
  std::string s;
  put_be16(s, v);
  return s;
}
// 16 lowercase hex digits (the key builders run per record: no snprintf).
std::string hex16(uint64_t v) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string s(16, '0');
  for (int i = 15; i >= 0; --i, v >>= 4) s[static_cast<size_t>(i)] = kDigits[v & 0xf];
  return s;
}
std::string key_field(std::string_view tenant, std::string_view id) {
  std::string f(tenant);
  f.push_back('\0');
  f.append(id);
  return f;
}
// The ZRANGEBYLEX / ZREMRANGEBYLEX bounds of a delivery's members in T at: [be64(id), be64(id+1)).
// Built piece by piece: GCC 12's -Wrestrict misfires on `"literal" + std::string&&` at -O3.
std::pair<std::string, std::string> attempts_range(DeliveryId id) {
  std::string from = "[";
  from += be64s(id);
  std::string to = "+";
  if (id != ~DeliveryId{0}) {
    to = "(";
    to += be64s(id + 1);
  }
  return {std::move(from), std::move(to)};
}
std::string tenant_index(uint64_t th) {
  return "ti:" + hex16(th);
}
std::string endpoint_index(uint64_t th, EndpointId e) {
  return "ei:" + hex16(th) + ":" + hex16(e);
}
std::string notifications_key(uint64_t th) {
  return "nt:" + hex16(th);
}

Error redis_error(const Reply& r) {
  if (r.error_is("CONFLICT"))
    return make_error(Errc::kConflict, "an event with this id already exists for the tenant", "id",
                      "conflict");
  if (r.error_is("NOSCRIPT")) return make_error(Errc::kInternal, "redis: script not loaded");
  return make_error(Errc::kUnavailable, "redis answered an error", nullptr, "redis_error");
}

// The reply of a command, or why it has none / an error one.
Result<const Reply*> check(const Result<Reply>& r) {
  if (!r.ok()) return r.error();
  if (r->is_error()) return redis_error(*r);
  return &*r;
}

Error bad_reply() {
  return make_error(Errc::kCorruption, "redis: unexpected reply type");
}

// Pairs of a flat HGETALL reply.
Result<std::vector<std::pair<std::string, std::string>>> pairs_of(const Reply& r) {
  if (!r.is_array() || r.size() % 2 != 0) return bad_reply();
  std::vector<std::pair<std::string, std::string>> out;
  out.reserve(r.size() / 2);
  for (size_t i = 0; i + 1 < r.size(); i += 2) out.emplace_back(r[i].str(), r[i + 1].str());
  return out;
}

// What the key lookups of find_event_keys send: one HMGET of T key per partition and, with
// fencing on (cluster mode), one of T ik (the keys queued in the partition's inbox,
// storage/redis_inbox.h) for the keys not drained from that inbox.
struct KeyLookup {
  std::vector<Cmd> cmds;
  std::vector<std::vector<size_t>> positions;  // per command: the index of each field's key
  std::vector<bool> queued;                    // per command: an HMGET of T ik
  size_t n = 0;
};

Result<std::vector<std::optional<EventKeyRecord>>> parse_key_lookup(const KeyLookup& l,
                                                                    const Replies& rs) {
  std::vector<std::optional<EventKeyRecord>> out(l.n);
  // Accepted keys first; a queued one answers only where no accepted one does, as a record
  // of seq 0 (Shard::take_in: "queued").
  for (int pass = 0; pass < 2; ++pass) {
    for (size_t c = 0; c < l.cmds.size(); ++c) {
      if (l.queued[c] != (pass == 1)) continue;
      auto r = check(rs[c]);
      if (!r) return r.error();
      const Reply& a = **r;
      if (!a.is_array() || a.size() != l.positions[c].size()) return bad_reply();
      for (size_t i = 0; i < a.size(); ++i) {
        if (a[i].is_nil()) continue;
        const std::string& v = a[i].str();
        if (v.size() < 8) return make_error(Errc::kCorruption, "event key: short value");
        std::optional<EventKeyRecord>& slot = out[l.positions[c][i]];
        if (pass == 1) {
          if (!slot) slot = EventKeyRecord{0, get_be64(v.data()), 0};
          continue;
        }
        auto rec = decode_event_key(std::string_view(v).substr(8));
        if (!rec) return rec.error();
        slot = *rec;
      }
    }
  }
  return out;
}

Result<std::optional<Event>> parse_event(EventSeq seq, const Result<Reply>& r) {
  auto c = check(r);
  if (!c) return c.error();
  if ((*c)->is_nil()) return std::optional<Event>();
  if (!(*c)->is_string()) return bad_reply();
  auto e = decode_event(seq, (*c)->str());
  if (!e) return e.error();
  return std::optional<Event>(std::move(*e));
}

// A partition's part of one write(): the script's ARGV. op() takes the puts in batch order and
// gathers them per (command, key); compile() turns the groups into the script's ARGV tail.
struct PartBatch {
  Partition p = 0;
  uint64_t epoch = 0;  // the writer's epoch for p (set_partition_epoch) when write() was called
  uint64_t max_seq = 0;
  std::vector<std::string> ops;  // compiled: groups of code, key suffix, count, arguments

  //   H hash field value (HSET)   D hash field (HDEL)   Z zset member (ZADD 0)
  //   S zset member score (ZADD score)   R zset member (ZREM)
  //   E key field value (idempotency key)   V ed field value (T ed, see kApplyBody)
  // A key gets either E / V ops or the others, never both (split()).
  void op(char code, std::string key, std::string field, std::string value = {}) {
    const char g = code == 'S' ? 'Z' : code;
    Group& grp = group(g, std::move(key));
    grp.order.push_back(next_order_++);
    switch (code) {
      case 'Z':
        grp.args.emplace_back("0");
        grp.args.push_back(std::move(field));
        break;
      case 'S':
        grp.args.push_back(std::move(value));
        grp.args.push_back(std::move(field));
        break;
      case 'D':
      case 'R':
        grp.args.push_back(std::move(field));
        break;
      default:  // H E V
        grp.args.push_back(std::move(field));
        grp.args.push_back(std::move(value));
    }
  }
  void saw(uint64_t id) { max_seq = std::max(max_seq, id_sequence(id)); }

  // Resolves what one key both sets and deletes (the last op of a field or member decides) and
  // flattens the groups; a group longer than kMaxArgs becomes several.
  void compile() {
    for (Group& del : groups_) {
      if (del.code != 'D' && del.code != 'R') continue;
      auto it = index_.find(std::string(1, del.code == 'D' ? 'H' : 'Z') + del.key);
      if (it != index_.end()) resolve(groups_[it->second], del);
    }
    ops.clear();
    for (Group& grp : groups_) {
      const size_t width = grp.code == 'D' || grp.code == 'R' ? 1 : 2;
      for (size_t at = 0; at < grp.args.size();) {
        const size_t c = std::min(grp.args.size() - at, kMaxArgs / width * width);
        ops.emplace_back(1, grp.code);
        ops.push_back(grp.key);
        ops.push_back(std::to_string(c));
        for (size_t j = at; j < at + c; ++j) ops.push_back(std::move(grp.args[j]));
        at += c;
      }
    }
    groups_.clear();
    index_.clear();
  }

 private:
  static constexpr size_t kMaxArgs = 6000;  // per call: Lua's unpack stays under its C stack
  struct Group {
    char code;
    std::string key;
    std::vector<std::string> args;
    std::vector<uint32_t> order;  // batch position of each op (one per field or member)
  };
  Group& group(char code, std::string key) {
    std::string id(1, code);
    id += key;
    auto [it, fresh] = index_.try_emplace(std::move(id), groups_.size());
    if (fresh) groups_.push_back(Group{code, std::move(key), {}, {}});
    return groups_[it->second];
  }
  // `set` (H: field value pairs, Z: score member pairs) and `del` (names) of one key: an entry of
  // either whose name has a later op in the other goes.
  static void resolve(Group& set, Group& del) {
    std::unordered_map<std::string_view, uint32_t> last_set, last_del;
    for (size_t i = 0; i < set.order.size(); ++i) {
      const std::string& name = set.code == 'H' ? set.args[2 * i] : set.args[2 * i + 1];
      uint32_t& o = last_set[name];
      o = std::max(o, set.order[i] + 1);
    }
    for (size_t i = 0; i < del.order.size(); ++i) {
      uint32_t& o = last_del[del.args[i]];
      o = std::max(o, del.order[i] + 1);
    }
    // Decide first, then move: the maps' keys view the arguments.
    std::vector<bool> drop_set(set.order.size()), drop_del(del.order.size());
    for (size_t i = 0; i < set.order.size(); ++i) {
      const std::string& name = set.code == 'H' ? set.args[2 * i] : set.args[2 * i + 1];
      auto d = last_del.find(name);
      drop_set[i] = d != last_del.end() && d->second > last_set[name];
    }
    for (size_t i = 0; i < del.order.size(); ++i) {
      auto st = last_set.find(del.args[i]);
      drop_del[i] = st != last_set.end() && st->second > last_del[del.args[i]];
    }
    last_set.clear();
    last_del.clear();
    std::vector<std::string> keep_set, keep_del;
    std::vector<uint32_t> order_set, order_del;
    for (size_t i = 0; i < set.order.size(); ++i) {
      if (drop_set[i]) continue;
      keep_set.push_back(std::move(set.args[2 * i]));
      keep_set.push_back(std::move(set.args[2 * i + 1]));
      order_set.push_back(set.order[i]);
    }
    for (size_t i = 0; i < del.order.size(); ++i) {
      if (drop_del[i]) continue;
      keep_del.push_back(std::move(del.args[i]));
      order_del.push_back(del.order[i]);
    }
    set.args = std::move(keep_set), set.order = std::move(order_set);
    del.args = std::move(keep_del), del.order = std::move(order_del);
  }
  std::vector<Group> groups_;
  std::unordered_map<std::string, size_t> index_;  // code + key -> its group
  uint32_t next_order_ = 0;
};

// A batch, split by partition (in partition order); the epochs are left to the caller.
// `stamp_ms` (the store's wall clock at write()) scores the retention indexes; a replay sends
// the same ops, so the stamps stay those of the first send.
Result<std::vector<PartBatch>> split(const Mutations& m, int64_t stamp_ms, bool outbox,
                                     bool mail_outbox) {
  const std::string stamp = std::to_string(stamp_ms);
  std::map<Partition, PartBatch> parts;
  auto part = [&](Partition p) -> PartBatch& {
    PartBatch& b = parts[p];
    b.p = p;
    return b;
  };
  std::string v;
  std::vector<EventSeq> fanout;  // event of each new delivery, to count them per event
  for (const auto& dp : m.deliveries) {
    if (dp.is_new) fanout.push_back(dp.delivery.event);
  }
  std::sort(fanout.begin(), fanout.end());
  // (event, delivery) of each new delivery: T ed lists an event's deliveries (retention).
  std::vector<std::pair<EventSeq, DeliveryId>> fan_ids;
  for (const auto& dp : m.deliveries) {
    if (dp.is_new) fan_ids.emplace_back(dp.delivery.event, dp.delivery.id);
  }
  std::sort(fan_ids.begin(), fan_ids.end());
  std::vector<EventSeq> batch_events;
  for (const Event& e : m.events) batch_events.push_back(e.seq);
  std::sort(batch_events.begin(), batch_events.end());
  for (const Event& e : m.events) {
    const Partition p = partition_of(e.tenant);
    if (id_partition(e.seq) != p)
      return make_error(Errc::kInvalidArgument, "event seq is not in its tenant's partition",
                        "seq");
    Event copy;
    const Event* ev = &e;
    if (e.payload_hash == 0) {
      copy = e;
      copy.payload_hash = payload_hash(e.payload);
      ev = &copy;
    }
    PartBatch& b = part(p);
    v.clear();
    encode_event_inline(*ev, v);
    b.op('H', "ev", be64s(e.seq), v);
    auto [lo, hi] = std::equal_range(fanout.begin(), fanout.end(), e.seq);
    std::string rec = be64s(e.seq);
    encode_event_key({e.seq, ev->payload_hash, static_cast<uint32_t>(hi - lo)}, rec);
    b.op('E', "key", key_field(e.tenant, e.id), std::move(rec));
    b.saw(e.seq);
    {  // retention: T ed (its idempotency key and deliveries); T eo when it has none
      const std::string kf = key_field(e.tenant, e.id);
      std::string ed = be16s(static_cast<uint16_t>(std::min<size_t>(kf.size(), 0xffff)));
      ed.append(kf, 0, std::min<size_t>(kf.size(), 0xffff));
      auto lo_it =
          std::lower_bound(fan_ids.begin(), fan_ids.end(), std::make_pair(e.seq, DeliveryId{0}));
      size_t n = 0;
      for (auto it = lo_it; it != fan_ids.end() && it->first == e.seq; ++it, ++n) {
        put_be64(ed, it->second);
      }
      b.op('V', "ed", be64s(e.seq), std::move(ed));
      if (n == 0) b.op('S', "eo", be64s(e.seq), stamp);
    }
  }
  for (const DeliveryPut& dp : m.deliveries) {
    const Delivery& d = dp.delivery;
    const Partition p = id_partition(d.id);
    if (dp.is_new) {
      uint64_t th = dp.tenant_hash;
      if (th == 0) {
        for (const Event& e : m.events) {
          if (e.seq == d.event) th = tenant_hash(e.tenant);
        }
      }
      if (th == 0 || partition_of_hash(th) != p)
        return make_error(Errc::kInvalidArgument,
                          "new delivery without its tenant hash, or outside its partition",
                          "tenant_hash");
    }
  }
  for (const DeliveryPut& dp : m.deliveries) {
    const Delivery& d = dp.delivery;
    PartBatch& b = part(id_partition(d.id));
    v.clear();
    encode_delivery(d, v);
    const std::string id8 = be64s(d.id);
    b.op('H', "dl", id8, v);
    // T act: added when created or reopened (a resend), removed when it ends. Any other put of
    // a live delivery — a lease, a retry, a send given back, recovery's lease_expired — is of
    // one created before or earlier in this batch, so it is in T act already (no ZADD again).
    if (is_terminal(d.status)) {
      b.op('R', "act", id8);
    } else if (dp.is_new || dp.rewrite) {
      b.op('Z', "act", id8);
    }
    if (is_terminal(d.status)) b.op('S', "done", id8, stamp);  // retention: ended at `stamp`
    // A resend reopened it: live again, out of retention's reach until it ends.
    if (dp.rewrite && !is_terminal(d.status)) b.op('R', "done", id8);
    if (dp.is_new) {
      uint64_t th = dp.tenant_hash;
      if (th == 0) {
        for (const Event& e : m.events) {
          if (e.seq == d.event) th = tenant_hash(e.tenant);
        }
      }
      b.op('Z', tenant_index(th), be64s(~d.id));
      b.op('Z', endpoint_index(th, d.endpoint), be64s(~d.id));
      if (!std::binary_search(batch_events.begin(), batch_events.end(), d.event)) {
        // Its event was written earlier (not done by the engine today): T ed gets the id
        // appended (a header naming no key: retention then keeps that event's key entry).
        std::string ed = be16s(0);
        put_be64(ed, d.id);
        b.op('V', "ed", be64s(d.event), std::move(ed));
      }
    }
    b.saw(d.id);
  }
  for (const Attempt& a : m.attempts) {
    // T at: one lexicographic ZSET per partition, member be64(id) + be16(number) + attempt, so
    // a batch's attempts are one ZADD and a delivery's are one ZRANGEBYLEX (attempts_range).
    PartBatch& b = part(id_partition(a.delivery));
    std::string member = be64s(a.delivery);
    put_be16(member, a.number);
    encode_attempt(a, member);
    b.op('Z', "at", std::move(member));
  }
  for (const Endpoint& e : m.endpoints) {
    PartBatch& b = part(id_partition(e.id));
    v.clear();
    encode_endpoint(e, v);
    b.op('H', "ep", be64s(e.id), v);
    b.saw(e.id);
  }
  for (EndpointId id : m.endpoint_deletes) {
    PartBatch& b = part(id_partition(id));
    b.op('D', "ep", be64s(id));
    b.saw(id);  // ids are never reused, also when the newest one is deleted
  }
  for (const Tenant& t : m.tenants) {
    PartBatch& b = part(partition_of(t.name));
    v.clear();
    encode_tenant(t, v);
    b.op('H', "tn", t.name, v);
  }
  for (const Notification& n : m.notifications) {
    const uint64_t th = tenant_hash(n.tenant);
    PartBatch& b = part(partition_of_hash(th));
    std::string member = be64s(~n.seq);
    encode_notification(n, member);
    b.op('Z', notifications_key(th), std::move(member));
    b.op('S', "nto", be64s(th) + be64s(n.seq), stamp);  // retention
    if (outbox) {  // until the operator webhook has it (outbox_done)
      std::string v = be64s(th);
      encode_notification(n, v);
      b.op('H', "ob", be64s(n.seq), std::move(v));
    }
    if (mail_outbox && !n.owner_email.empty()) {  // until the e-mail is sent (mail_outbox_done)
      std::string v = be64s(th);
      encode_notification(n, v);
      b.op('H', "om", be64s(n.seq), std::move(v));
    }
    b.saw(n.seq);
  }
  std::vector<PartBatch> list;
  list.reserve(parts.size());
  for (auto& [p, b] : parts) {
    b.compile();
    list.push_back(std::move(b));
  }
  return list;
}

}  // namespace

struct RedisStore::Impl {
  RedisStoreOptions opt;
  std::atomic<uint64_t>* durable = nullptr;
  bool fencing = false;      // opt.node_id is set
  std::string apply_source;  // kApplyBody, behind cluster::kFencePrelude when fencing
  std::array<std::atomic<uint64_t>, kPartitions> epochs{};

  // Refused writes. Written on the loop thread before durable_seq can pass the batch (release),
  // read by fenced() from any thread: any_fenced[p] says p was refused at some epoch,
  // last_fenced[p] the latest such epoch, fenced_set every (p, epoch) refused.
  std::array<std::atomic<bool>, kPartitions> any_fenced{};
  std::array<std::atomic<uint64_t>, kPartitions> last_fenced{};
  mutable std::mutex fenced_mu;
  std::set<std::pair<Partition, uint64_t>> fenced_set;  // under fenced_mu
  std::atomic<uint64_t> fenced_writes{0};

  // Made and used on the loop thread only (the loop pointer itself is read by posters).
  std::unique_ptr<net::Loop> loop;
  std::unique_ptr<redis::Client> client;
  redis::ClusterClient* cluster = nullptr;

  mutable std::mutex mu;  // next_commit, error, and ordered posting of batches
  std::condition_variable cv;
  uint64_t next_commit = 0;
  std::optional<Error> error;

  struct Inflight {
    uint64_t seq;
    size_t left;
  };
  std::deque<Inflight> inflight;  // loop thread only, in commit order
  // Batches sent and not durable yet, in commit order (loop thread): what a replay sends.
  struct Pending {
    uint64_t seq = 0;
    bool checked = false;
    std::vector<PartBatch> parts;
  };
  std::deque<Pending> pending;
  static constexpr Duration kReplayFirst = milliseconds(100);
  static constexpr Duration kReplayMax = seconds(1);
  uint64_t gen = 0;  // answers of an earlier generation are ignored (a replay began since)
  bool replay_armed = false;
  bool logged_degraded = false;
  MonoTime degraded_since;
  bool closing = false;
  uint64_t replay_upto = 0;  // degraded until durable reaches this (the last batch replayed)
  Duration backoff = kReplayFirst;
  std::atomic<bool> degraded{false};  // unconfirmed writes are being sent again
  // Redis refused a write it could not persist (MISCONF: its AOF or RDB cannot be written, a
  // full or failing disk): disk_health() says kFull until a write is confirmed again.
  std::atomic<bool> persist_refused{false};
  std::atomic<uint64_t> replays{0}, wait_short{0};
  struct ReplayTimer final : net::Timer {
    Impl* impl = nullptr;
    void on_timer() override { impl->replay_now(); }
    void arm_after_on(net::Loop& l, Duration d) { l.arm_after(this, d); }
  } replay_timer;

  std::string prefix(Partition p) const { return "{" + opt.ns + ":" + std::to_string(p) + "}:"; }

  // ---- retention and memory (any thread unless noted) ----
  std::string retention_source;  // kRetentionBody, behind the fence when fencing
  std::mutex retention_mu;       // one run_retention at a time
  std::atomic<uint64_t> retention_fenced{0};
  std::atomic<int64_t> last_stamp{0};
  // The retention stamp: the clock's wall time in ms, monotone within the process (a wall clock
  // stepping back does not reorder T done).
  int64_t stamp_ms() {
    int64_t now = 0;
    if (opt.clock != nullptr) {
      now = opt.clock->wall_now().ms();
    } else {
      now = std::chrono::duration_cast<std::chrono::milliseconds>(
                std::chrono::system_clock::now().time_since_epoch())
                .count();
    }
    int64_t prev = last_stamp.load(std::memory_order_relaxed);
    while (now > prev && !last_stamp.compare_exchange_weak(prev, now)) {
    }
    return std::max(now, prev);
  }

  struct NodeMemory {
    uint64_t used = 0, maxmemory = 0;
    std::string policy;
  };
  std::map<std::string, NodeMemory> node_memory;  // loop thread: the last answer of each primary
  mutable std::mutex mem_mu;
  RedisMemory mem;                      // under mem_mu: the last round's view
  std::string evicting_node, evicting;  // under mem_mu: a primary that evicts, and its policy
  bool no_limit = false;                // under mem_mu: some primary has no limit at all
  std::atomic<bool> full{false};
  bool mem_periodic = false;  // loop thread
  struct MemTimer final : net::Timer {
    Impl* impl = nullptr;
    void on_timer() override { impl->poll_round({}); }
  } mem_timer;

  // The primaries that hold a partition of this namespace (standalone: the one server).
  std::vector<std::pair<std::string, redis::Client*>> primaries() {
    std::vector<std::pair<std::string, redis::Client*>> out;
    if (!cluster) {
      out.emplace_back(opt.servers[0], client.get());
      return out;
    }
    std::set<std::string> seen;
    for (uint32_t p = 0; p < kPartitions; ++p) {
      const std::string node = cluster->node_for_slot(redis::key_slot(prefix(p) + "seq"));
      if (node.empty() || !seen.insert(node).second) continue;
      if (redis::Client* c = cluster->connection(node)) out.emplace_back(node, c);
    }
    return out;
  }

  static uint64_t info_field(const std::string& info, std::string_view name, std::string* text) {
    size_t at = 0;
    while ((at = info.find(name, at)) != std::string::npos) {
      const bool line_start = at == 0 || info[at - 1] == '\n';
      const size_t colon = at + name.size();
      if (line_start && colon < info.size() && info[colon] == ':') {
        size_t end = info.find_first_of("\r\n", colon + 1);
        if (end == std::string::npos) end = info.size();
        std::string v = info.substr(colon + 1, end - colon - 1);
        if (text) *text = v;
        return std::strtoull(v.c_str(), nullptr, 10);
      }
      at = colon;
    }
    return 0;
  }

  struct MemRound {
    size_t left = 0, answered = 0;
    std::vector<std::string> names;
    std::function<void(Result<void>)> done;
  };
  // Loop thread: INFO memory on every primary, then the high-water decision; `done` (may be
  // empty) gets an error when no primary answered. Re-arms itself when periodic.
  void poll_round(std::function<void(Result<void>)> done) {
    auto nodes = primaries();
    auto round = std::make_shared<MemRound>();
    round->left = nodes.size();
    round->done = std::move(done);
    for (auto& [name, c] : nodes) round->names.push_back(name);
    if (nodes.empty()) return conclude(*round);
    redis::CommandOptions o;
    o.key_index = redis::kNoKey;
    for (auto& [name, c] : nodes) {
      c->command(
          {"INFO", "memory"},
          [this, round, name = name](Result<Reply> r) {
            if (r.ok() && r->is_string()) {
              NodeMemory& m = node_memory[name];
              m.used = info_field(r->str(), "used_memory", nullptr);
              m.maxmemory = info_field(r->str(), "maxmemory", nullptr);
              info_field(r->str(), "maxmemory_policy", &m.policy);
              ++round->answered;
            }
            if (--round->left == 0) conclude(*round);
          },
          o);
    }
  }

  void conclude(MemRound& round) {
    // Forget primaries that hold nothing of ours any more (a slot migration, a failover).
    for (auto it = node_memory.begin(); it != node_memory.end();) {
      const bool listed =
          std::find(round.names.begin(), round.names.end(), it->first) != round.names.end();
      it = listed ? std::next(it) : node_memory.erase(it);
    }
    const bool failed = round.answered == 0;
    RedisMemory view;
    double worst = -1;
    bool over = false, all_under = true, unlimited = false;
    std::string evict_node, evict_policy;
    for (const auto& [name, m] : node_memory) {
      if (!m.policy.empty() && m.policy != "noeviction" && evict_node.empty()) {
        evict_node = name;
        evict_policy = m.policy;
      }
      uint64_t limit = m.maxmemory;
      if (opt.max_memory_bytes > 0)
        limit = limit > 0 ? std::min(limit, opt.max_memory_bytes) : opt.max_memory_bytes;
      if (limit == 0) {
        unlimited = true;
        continue;
      }
      const double ratio = static_cast<double>(m.used) / static_cast<double>(limit);
      if (ratio >= opt.high_water) over = true;
      if (ratio >= opt.high_water - RedisStore::kMemoryHysteresis) all_under = false;
      if (ratio > worst) {
        worst = ratio;
        view.used_bytes = m.used;
        view.limit_bytes = limit;
        view.mark_bytes = static_cast<uint64_t>(opt.high_water * static_cast<double>(limit));
      }
    }
    const bool was = full.load(std::memory_order_relaxed);
    bool now_full = was;
    if (opt.high_water > 0) {
      if (!was && over) now_full = true;
      if (was && all_under) now_full = false;
    }
    {
      std::lock_guard lk(mem_mu);
      view.polls = mem.polls + 1;
      view.poll_errors = mem.poll_errors + (failed ? 1 : 0);
      view.full_spells = mem.full_spells + (now_full && !was ? 1 : 0);
      view.full = now_full;
      mem = view;
      evicting_node = evict_node;
      evicting = evict_policy;
      no_limit = unlimited;
    }
    if (now_full != was) {
      full.store(now_full, std::memory_order_release);
      const auto used = static_cast<unsigned long long>(view.used_bytes);
      const auto limit = static_cast<unsigned long long>(view.limit_bytes);
      if (now_full) {
        log::warn(
            "redis store: memory at {} of {} bytes, over the high-water mark: intake "
            "answers 503 store_full",
            used, limit);
      } else {
        log::info("redis store: memory at {} of {} bytes, below the mark again: intake resumes",
                  used, limit);
      }
    }
    if (round.done) {
      round.done(failed ? Result<void>(make_error(Errc::kUnavailable,
                                                  "redis: no primary answered INFO memory"))
                        : ok());
    }
    if (mem_periodic && !closing) loop->arm_after(&mem_timer, opt.memory_poll);
  }

  Result<void> init() {
    auto l = net::Loop::create({});
    if (!l) return l.error();
    loop = std::move(*l);
    redis::ConnectionOptions co;
    co.username = opt.username;
    co.password = opt.password;
    co.tls = opt.tls;
    co.default_timeout = opt.command_timeout;
    co.connect_timeout = opt.command_timeout;
    if (opt.cluster) {
      redis::ClusterOptions cl;
      cl.seeds = opt.servers;
      cl.connection = co;
      auto c = redis::ClusterClient::create(*loop, cl);
      if (!c) return c.error();
      cluster = c->get();
      client = std::move(*c);
    } else {
      if (!redis::parse_address(opt.servers[0], &co.host, &co.port))
        return make_error(Errc::kInvalidArgument, "a server is not numeric-host:port", "servers");
      auto c = redis::Connection::create(*loop, co);
      if (!c) return c.error();
      client = std::move(*c);
    }
    return ok();
  }

  // ---- loop thread ----

  // Reads issued while unconfirmed batches wait for their replay (replay_armed). A read sent at
  // once would not see those batches — they are not in Redis again yet — and break the
  // read-your-writes invariant: an intake lookup then missed an event written before it, and a
  // retried event was taken in twice under two webhook ids (E2eCluster.RedisPrimaryKill…). They
  // go right after the replay has sent the batches again, behind them on the same connections.
  //
  // A read that went out before a write failed can be stale too: a script queued on a
  // connection that was down timed out unsent, and a read queued behind it, with a later
  // deadline, went out alone once the connection was back (ASan CI, 12-03). So a read answered
  // after any script failed since it went out (writes_lost moved) is asked again, parked
  // behind the replay; after kMaxStaleReads such answers it fails instead (kUnavailable).
  struct Read {
    std::vector<Cmd> cmds;
    std::function<void(Replies)> then;
    redis::CommandOptions co;
    int stale = 0;  // answers thrown away as possibly stale
  };
  static constexpr int kMaxStaleReads = 3;
  uint64_t writes_lost = 0;  // scripts that failed (or never went out) so far
  std::vector<Read> parked_reads;

  void send_parked_reads() {
    // A read parks again if the replay was put off meanwhile (replay_armed).
    for (Read& r : std::exchange(parked_reads, {})) send_read(std::move(r));
  }

  // At close: what is still parked gets an error, like what was sent and not answered.
  void fail_parked_reads() {
    for (Read& r : std::exchange(parked_reads, {})) {
      r.then(Replies(r.cmds.size(),
                     Result<Reply>(make_error(Errc::kUnavailable, "redis store closed"))));
    }
  }

  // Sends every command (pipelined, in order), then calls `then` with every answer.
  void send_all(std::vector<Cmd> cmds, std::function<void(Replies)> then,
                const redis::CommandOptions& co = {}) {
    send_read(Read{std::move(cmds), std::move(then), co});
  }

  void send_read(Read r) {
    if (r.cmds.empty()) return r.then({});
    if (replay_armed && !closing) return parked_reads.push_back(std::move(r));
    struct Gather {
      Read r;
      Replies out;
      size_t left;
      uint64_t lost_before;
    };
    auto g = std::make_shared<Gather>();  // API reads and intake lookups, not per delivery
    g->out.assign(r.cmds.size(), Result<Reply>(make_error(Errc::kInternal, "no reply")));
    g->left = r.cmds.size();
    g->lost_before = writes_lost;
    g->r = std::move(r);
    const std::vector<Cmd>& cmds = g->r.cmds;
    for (size_t i = 0; i < cmds.size(); ++i) {
      std::vector<std::string_view> args(cmds[i].begin(), cmds[i].end());
      client->command(
          std::span<const std::string_view>(args),
          [this, g, i](Result<Reply> reply) {
            g->out[i] = std::move(reply);
            if (--g->left == 0) gathered(g->r, std::move(g->out), g->lost_before);
          },
          g->r.co);
    }
  }

  void gathered(Read& r, Replies out, uint64_t lost_before) {
    const bool answered =
        std::any_of(out.begin(), out.end(), [](const Result<Reply>& x) { return x.ok(); });
    if (!answered || lost_before == writes_lost || closing) return r.then(std::move(out));
    if (++r.stale > kMaxStaleReads) {
      return r.then(Replies(out.size(), Result<Reply>(make_error(
                                            Errc::kUnavailable,
                                            "redis store: writes issued before this read are not "
                                            "confirmed (they are being sent again)"))));
    }
    send_read(std::move(r));
  }

  void fail(const Error& e) {
    std::lock_guard lk(mu);
    if (!error) error = e;
    cv.notify_all();
  }

  // The write of partition p at `epoch` was refused (FENCED, or epoch 0 with fencing on).
  // Called before the batch's part counts as done, so before durable_seq can pass it.
  void record_fenced(Partition p, uint64_t epoch) {
    fenced_writes.fetch_add(1, std::memory_order_relaxed);
    bool fresh = false;
    {
      std::lock_guard lk(fenced_mu);
      fresh = fenced_set.emplace(p, epoch).second;
    }
    last_fenced[p].store(epoch, std::memory_order_release);
    any_fenced[p].store(true, std::memory_order_release);
    if (fresh && opt.on_fenced) opt.on_fenced(p, epoch);
  }

  bool was_fenced(Partition p, uint64_t epoch) const {
    if (p >= kPartitions || !any_fenced[p].load(std::memory_order_acquire)) return false;
    if (last_fenced[p].load(std::memory_order_acquire) == epoch) return true;
    std::lock_guard lk(fenced_mu);
    return fenced_set.count({p, epoch}) > 0;
  }

  // Transient: the write may or may not have been applied and sending it again is safe (a
  // timeout, a lost connection, a node failing over, too few replicas). Not transient: the
  // script refused it (CONFLICT) or could not run.
  static bool transient(const Result<Reply>& r) {
    if (!r.ok()) return true;
    if (!r->is_error()) return false;
    return !(r->error_is("CONFLICT") || r->error_is("ERR") || r->error_is("NOSCRIPT") ||
             r->error_is("WRONGTYPE"));
  }

  void advance() {
    uint64_t to = 0;
    while (!inflight.empty() && inflight.front().left == 0) {
      to = inflight.front().seq;
      inflight.pop_front();
    }
    if (to == 0) return;
    if (persist_refused.exchange(false)) {
      log::info("redis store: Redis persists writes again");
    }
    while (!pending.empty() && pending.front().seq <= to) pending.pop_front();
    if (!replay_armed && to >= replay_upto && degraded.load(std::memory_order_relaxed)) {
      // Everything sent again is confirmed.
      backoff = kReplayFirst;
      degraded.store(false, std::memory_order_release);
      logged_degraded = false;
      log::info(
          "redis store: writes are confirmed again (after {:.0f} ms, {} "
          "replays in all)",
          std::chrono::duration<double, std::milli>(loop->now() - degraded_since).count(),
          static_cast<unsigned long long>(replays.load(std::memory_order_relaxed)));
    }
    std::lock_guard lk(mu);
    if (error) return;  // fatal: durable_seq stops
    durable->store(to, std::memory_order_release);
    cv.notify_all();
  }

  // A batch could not be confirmed: every batch not durable yet is sent again, in commit order,
  // after a backoff (100 ms doubling to 1 s) — re-applying a batch is idempotent (whole-record
  // puts, the key check compares the event's seq, seq only grows) and re-applying the later
  // ones after it restores their newer states. Answers to the earlier sends are ignored.
  void replay_later(const Error& why) {
    if (closing) return;
    degraded.store(true, std::memory_order_release);
    replays.fetch_add(1, std::memory_order_relaxed);
    if (replay_armed) return;
    replay_armed = true;
    ++gen;
    inflight.clear();
    node_waits.clear();
    if (!logged_degraded) {  // once per degraded spell
      logged_degraded = true;
      degraded_since = loop->now();
      log::warn(
          "redis store: a write was not confirmed ({}); sending the "
          "unconfirmed batches again until Redis answers",
          why.message);
    }
    replay_timer.arm_after_on(*loop, backoff);
    backoff = std::min<Duration>(backoff * 2, kReplayMax);
  }

  // Sends every unconfirmed batch again, in commit order. With wait_replicas > 0 the batches go
  // without their own WAITs, and one WAIT per primary after all of them covers the lot: a WAIT
  // blocks its connection until it is answered, so one per batch (each up to wait_timeout
  // while the replicas catch up) held the replay up for batches × wait_timeout, past the
  // command timeout under a burst, and the replay was replayed again and again without end.
  // The group WAIT may take up to half a command timeout: it returns as soon as the replicas
  // have everything.
  void replay_now() {
    replay_armed = false;
    replay_upto = pending.empty() ? 0 : pending.back().seq;
    if (opt.wait_replicas == 0 || pending.empty()) {
      for (const Pending& b : pending) transmit(b);
      send_parked_reads();
      return advance();
    }
    const uint64_t g = gen;
    const uint64_t routes = cluster ? cluster->reroutes() : 0;
    std::vector<std::string> nodes;
    for (const Pending& b : pending) {
      transmit(b, /*wait=*/false);
      for (const PartBatch& part : b.parts) {
        std::string node = "standalone";
        if (cluster) node = cluster->node_for_slot(redis::key_slot(prefix(part.p) + "seq"));
        if (node.empty()) {  // the slot map is being refreshed (a failover): later
          ++writes_lost;
          return replay_later(
              make_error(Errc::kUnavailable, "redis: no node known for a partition's slot"));
        }
        if (std::find(nodes.begin(), nodes.end(), node) == nodes.end()) nodes.push_back(node);
      }
    }
    // Every replayed batch waits for the group's WAITs too (its gate).
    for (auto& f : inflight) ++f.left;
    const uint64_t last = pending.back().seq;
    auto open_gates = [this, g, last] {
      if (g != gen) return;
      for (auto& f : inflight) {
        if (f.seq <= last && f.left > 0) --f.left;
      }
      advance();
    };
    auto left = std::make_shared<size_t>(nodes.size());
    const Duration wait_for = std::max<Duration>(opt.wait_timeout, opt.command_timeout / 2);
    const std::string n = std::to_string(opt.wait_replicas);
    const std::string ms = std::to_string(std::max<int64_t>(1, wait_for.count() / 1'000'000));
    for (const std::string& node : nodes) {
      redis::Client* target = cluster ? cluster->connection(node) : client.get();
      if (target == nullptr)
        return replay_later(make_error(Errc::kUnavailable, "redis: no connection to a primary"));
      redis::CommandOptions o;
      o.timeout = opt.command_timeout + wait_for;
      o.key_index = redis::kNoKey;
      const int64_t need = opt.wait_replicas;
      target->command(
          {"WAIT", n, ms},
          [this, g, routes, need, left, open_gates](Result<Reply> r) {
            if (g != gen) return;
            if (!r.ok() || r->is_error())
              return replay_later(make_error(Errc::kUnavailable, "redis: WAIT failed"));
            if (cluster && cluster->reroutes() != routes)
              return replay_later(make_error(
                  Errc::kUnavailable, "redis: a write was redirected; its WAIT does not cover it"));
            if (!r->is_integer() || r->integer_value() < need) {
              wait_short.fetch_add(1, std::memory_order_relaxed);
              return replay_later(
                  make_error(Errc::kUnavailable, "fewer replicas acknowledged than required"));
            }
            if (--*left == 0) open_gates();
          },
          o);
    }
    send_parked_reads();
    advance();
  }

  void send_batch(uint64_t seq, std::vector<PartBatch> all, bool checked) {
    // With fencing on, a partition held at no epoch is refused here, without a round trip: no
    // lease can hold epoch 0. Its part of the batch is done (nothing of it is written).
    Pending b;
    b.seq = seq;
    b.checked = checked;
    b.parts.reserve(all.size());
    for (PartBatch& part : all) {
      if (fencing && part.epoch == 0) {
        record_fenced(part.p, 0);
      } else {
        b.parts.push_back(std::move(part));
      }
    }
    pending.push_back(std::move(b));
    if (replay_armed) return;  // sent with the others when the replay runs
    transmit(pending.back());
    advance();
  }

  // Sends one batch's scripts and (with_wait, when wait_replicas > 0) has it covered by a WAIT
  // per primary; its answers count only for this generation.
  void transmit(const Pending& b, bool with_wait = true) {
    const uint64_t seq = b.seq;
    const uint64_t g = gen;
    const bool wait = with_wait && opt.wait_replicas > 0;
    inflight.push_back({seq, b.parts.size()});
    auto done_one = [this, seq, g] {
      if (g != gen) return;
      for (auto& f : inflight) {
        if (f.seq == seq) {
          --f.left;
          break;
        }
      }
      advance();
    };
    auto on_error = [this, g](const Result<Reply>& r) {
      ++writes_lost;
      if (r.ok() && r->error_is("MISCONF") && !persist_refused.exchange(true)) {
        log::warn(
            "redis store: Redis refuses writes it cannot persist (MISCONF: "
            "its disk is full or failing); intake answers 503 storage_full until it "
            "takes them again");
      }
      if (g != gen) return;
      auto c = check(r);
      if (transient(r))
        return replay_later(c ? make_error(Errc::kUnavailable, "redis") : c.error());
      fail(c.error());
    };
    // Taken before the scripts go out: if any command is redirected (or held) from here to a
    // WAIT's answer, a script may have run on another node, or after that WAIT.
    const uint64_t routes = cluster ? cluster->reroutes() : 0;
    for (const PartBatch& part : b.parts) {
      const std::string pre = prefix(part.p);
      const std::string own = cluster::own_key(opt.ns, part.p);
      const std::string seq_key = pre + "seq";
      const std::string epoch = std::to_string(part.epoch);
      const std::string top = std::to_string(part.max_seq);
      // EVAL, not EVALSHA: a NOSCRIPT fallback would send the script again after commands
      // pipelined behind it (a lookup right after this write, the next batch's script), and
      // those would run first — reads must see the writes issued before them. The cost is the
      // script's text on every call (left for later: load it on every node at connect).
      // Without fencing the body runs alone and ignores KEYS[1], ARGV[1] and ARGV[2].
      std::vector<std::string_view> cmd{"EVAL",      apply_source, "2", own, seq_key,
                                        opt.node_id, epoch,        pre, top, b.checked ? "1" : "0"};
      cmd.reserve(cmd.size() + part.ops.size());
      for (const std::string& o : part.ops) cmd.push_back(o);
      redis::CommandOptions co;
      co.key_index = 3;  // the lease key: the partition's slot, as every key of the script
      client->command(
          std::span<const std::string_view>(cmd),
          [this, done_one, on_error, p = part.p, ep = part.epoch](Result<Reply> r) {
            // FENCED: nothing of p was written; the rest of the batch goes on (not fatal).
            if (fencing && r.ok() && cluster::is_fenced(*r)) {
              record_fenced(p, ep);
              return done_one();
            }
            if (!r.ok() || r->is_error()) return on_error(r);
            done_one();
          },
          co);
    }
    // WAIT counts the replicas that have every write its connection carried before it: one per
    // primary, after all of the batch's scripts.
    std::vector<std::string> waited;
    for (const PartBatch& part : b.parts) {
      if (!wait) break;
      const std::string seq_key = prefix(part.p) + "seq";
      redis::Client* target = client.get();
      std::string node = "standalone";
      if (cluster) {
        node = cluster->node_for_slot(redis::key_slot(seq_key));
        target = node.empty() ? nullptr : cluster->connection(node);
      }
      if (!target) {  // the slot map is being refreshed (a failover): later
        ++writes_lost;
        replay_later(make_error(Errc::kUnavailable, "redis: no node known for a partition's slot"));
        return;
      }
      if (std::find(waited.begin(), waited.end(), node) != waited.end()) continue;
      waited.push_back(node);
      for (auto& f : inflight) {
        if (f.seq == seq) ++f.left;
      }
      // At most one WAIT per primary is out: a WAIT blocks its connection until answered, so
      // one per batch, while the replicas lag, held every later command up for batches ×
      // wait_timeout (a burst then timed out and replayed without end). The batches sent while
      // one is out are covered by the next, sent when it answers (a WAIT counts everything its
      // connection carried before it).
      NodeWait& nw = node_waits[node];
      if (nw.seqs_next.empty()) nw.routes_next = routes;
      nw.seqs_next.push_back(seq);
      if (!nw.out) issue_wait(node, target);
    }
  }

  // Per primary: the WAIT out (if any) and the batches the next one covers. Reset by a replay.
  struct NodeWait {
    bool out = false;
    std::vector<uint64_t> seqs_next;
    uint64_t routes_next = 0;  // reroutes() when the first of seqs_next went out
  };
  std::map<std::string, NodeWait> node_waits;

  void issue_wait(const std::string& node, redis::Client* target) {
    NodeWait& nw = node_waits[node];
    std::vector<uint64_t> covered = std::move(nw.seqs_next);
    nw.seqs_next.clear();
    nw.out = true;
    const uint64_t routes = nw.routes_next;
    const uint64_t g = gen;
    const int64_t need = opt.wait_replicas;
    const std::string n = std::to_string(opt.wait_replicas);
    const std::string ms =
        std::to_string(std::max<int64_t>(1, opt.wait_timeout.count() / 1'000'000));
    redis::CommandOptions o;
    o.timeout = opt.command_timeout + opt.wait_timeout;
    o.key_index = redis::kNoKey;
    target->command(
        {"WAIT", n, ms},
        [this, node, covered = std::move(covered), need, g, routes](Result<Reply> r) {
          if (g != gen) return;
          // Any WAIT error is transient: the data is fine, only its copies are not counted
          // (a node that became a replica in a failover answers "ERR WAIT cannot be used
          // with replica instances").
          if (!r.ok() || r->is_error()) {
            auto c = check(r);
            return replay_later(c ? make_error(Errc::kUnavailable, "redis: WAIT failed")
                                  : c.error());
          }
          if (cluster && cluster->reroutes() != routes) {
            // A WAIT counts the replicas of what its own connection carried before it; a
            // script redirected (MOVED/ASK after a failover or a slot move) or retried
            // (TRYAGAIN, CLUSTERDOWN) ran elsewhere or later, so this count says nothing
            // about it. Sent again once the map is right.
            return replay_later(make_error(
                Errc::kUnavailable, "redis: a write was redirected; its WAIT does not cover it"));
          }
          if (!r->is_integer() || r->integer_value() < need) {
            // Fewer replicas than required have it (one is down or catching up): not
            // durable yet; sent again until enough acknowledge.
            wait_short.fetch_add(1, std::memory_order_relaxed);
            return replay_later(
                make_error(Errc::kUnavailable, "fewer replicas acknowledged than required"));
          }
          for (uint64_t s : covered) {
            for (auto& f : inflight) {
              if (f.seq == s) {
                --f.left;
                break;
              }
            }
          }
          NodeWait& nw = node_waits[node];
          nw.out = false;
          if (!nw.seqs_next.empty()) {
            redis::Client* next = cluster ? cluster->connection(node) : client.get();
            if (next == nullptr)
              return replay_later(
                  make_error(Errc::kUnavailable, "redis: no connection to a primary"));
            issue_wait(node, next);
          }
          advance();
        },
        o);
  }

  // ---- any thread but the loop's ----

  void post(std::function<void()> fn) { loop->post(std::move(fn)); }

  // Hands a split batch to the loop thread; its commit sequence, or the store's error.
  Result<uint64_t> submit(std::vector<PartBatch> list, bool checked) {
    std::lock_guard lk(mu);
    if (error) return *error;
    const uint64_t seq = ++next_commit;
    // Posted under the lock: the loop thread sees batches in commit order.
    post([this, seq, checked, list = std::move(list)]() mutable {
      send_batch(seq, std::move(list), checked);
    });
    return seq;
  }

  Replies run(std::vector<Cmd> cmds, const redis::CommandOptions& co = {}) {
    // Shared: the loop thread may still be inside set_value() when this thread wakes.
    auto pr = std::make_shared<std::promise<Replies>>();
    auto fut = pr->get_future();
    post([this, pr, co, cmds = std::move(cmds)]() mutable {
      send_all(
          std::move(cmds), [pr](Replies r) { pr->set_value(std::move(r)); }, co);
    });
    return fut.get();
  }
  Result<Reply> run1(Cmd cmd) {
    std::vector<Cmd> v;
    v.push_back(std::move(cmd));
    Replies r = run(std::move(v));
    return std::move(r[0]);
  }

  KeyLookup key_lookup(const std::vector<EventKeyRef>& keys) {
    KeyLookup l;
    l.n = keys.size();
    std::map<Partition, size_t> at, queued_at;
    for (size_t i = 0; i < keys.size(); ++i) {
      const Partition p = partition_of(keys[i].tenant);
      auto [it, fresh] = at.emplace(p, l.cmds.size());
      if (fresh) {
        l.cmds.push_back({"HMGET", prefix(p) + "key"});
        l.positions.emplace_back();
        l.queued.push_back(false);
      }
      l.cmds[it->second].push_back(key_field(keys[i].tenant, keys[i].event_id));
      l.positions[it->second].push_back(i);
      if (!fencing || keys[i].from_inbox) continue;
      auto [q, qfresh] = queued_at.emplace(p, l.cmds.size());
      if (qfresh) {
        l.cmds.push_back({"HMGET", prefix(p) + "ik"});
        l.positions.emplace_back();
        l.queued.push_back(true);
      }
      l.cmds[q->second].push_back(key_field(keys[i].tenant, keys[i].event_id));
      l.positions[q->second].push_back(i);
    }
    return l;
  }

  // One HMGET per partition of `ids` on the partition's hash `suffix` (fields be64(id)):
  // cmds[c] asks for the positions pos[c] of `ids`, in its field order.
  struct HmgetPlan {
    std::vector<Cmd> cmds;
    std::vector<std::vector<size_t>> pos;
  };
  HmgetPlan hmget_plan(const std::vector<uint64_t>& ids, std::string_view suffix) const {
    HmgetPlan plan;
    std::map<Partition, size_t> at;
    for (size_t i = 0; i < ids.size(); ++i) {
      const Partition p = id_partition(ids[i]);
      auto [it, fresh] = at.emplace(p, plan.cmds.size());
      if (fresh) {
        plan.cmds.push_back({"HMGET", prefix(p) + std::string(suffix)});
        plan.pos.emplace_back();
      }
      plan.cmds[it->second].push_back(be64s(ids[i]));
      plan.pos[it->second].push_back(i);
    }
    return plan;
  }
  // Walks the plan's answers (rs[0 .. plan.cmds.size())): hit(k, value) for each field found,
  // k its position in the plan's ids.
  template <typename Hit>
  static Result<void> each_hit(const Replies& rs, const HmgetPlan& plan, Hit&& hit) {
    for (size_t c = 0; c < plan.cmds.size(); ++c) {
      auto r = check(rs[c]);
      if (!r) return r.error();
      const Reply& a = **r;
      if (!a.is_array() || a.size() != plan.pos[c].size()) return bad_reply();
      for (size_t i = 0; i < a.size(); ++i) {
        if (a[i].is_nil()) continue;
        if (!a[i].is_string()) return bad_reply();
        if (auto h = hit(plan.pos[c][i], a[i].str()); !h.ok()) return h.error();
      }
    }
    return ok();
  }

  // Deliveries by id (one HMGET per partition), aligned with `ids`.
  Result<std::vector<std::optional<Delivery>>> fetch(const std::vector<DeliveryId>& ids) {
    std::vector<std::optional<Delivery>> out(ids.size());
    if (ids.empty()) return out;
    HmgetPlan plan = hmget_plan(ids, "dl");
    Replies rs = run(std::vector<Cmd>(plan.cmds));
    auto done = each_hit(rs, plan, [&](size_t k, const std::string& v) -> Result<void> {
      auto d = decode_delivery(ids[k], v);
      if (!d) return d.error();
      out[k] = std::move(*d);
      return ok();
    });
    if (!done) return done.error();
    return out;
  }
};

// ---- lifecycle --------------------------------------------------------------------------------

Result<std::unique_ptr<RedisStore>> RedisStore::open(RedisStoreOptions options) {
  if (options.servers.empty())
    return make_error(Errc::kInvalidArgument, "no Redis server given", "servers");
  if (!options.cluster && options.servers.size() > 1)
    return make_error(Errc::kInvalidArgument,
                      "more than one server is only for a cluster (cluster = true)", "servers");
  if (options.ns.empty() || options.ns.find_first_of("{}") != std::string::npos)
    return make_error(Errc::kInvalidArgument, "the namespace must be non-empty, without braces",
                      "ns");
  if (options.command_timeout <= Duration::zero())
    return make_error(Errc::kInvalidArgument, "command timeout must be positive",
                      "command_timeout");
  std::unique_ptr<RedisStore> s(new RedisStore());
  s->impl_ = std::make_unique<Impl>();
  Impl* impl = s->impl_.get();
  impl->opt = std::move(options);
  impl->fencing = !impl->opt.node_id.empty();
  impl->apply_source =
      compact_lua(impl->fencing ? cluster::fenced_source(kApplyBody) : std::string(kApplyBody));
  impl->retention_source =
      impl->fencing ? cluster::fenced_source(kRetentionBody) : std::string(kRetentionBody);
  impl->durable = &s->durable_;
  impl->replay_timer.impl = impl;
  impl->mem_timer.impl = impl;
  auto ready = std::make_shared<std::promise<Result<void>>>();
  auto fut = ready->get_future();
  s->thread_ = std::thread([impl, ready] {
    ::pthread_setname_np(::pthread_self(), "rc-redis-store");
    Result<void> r = impl->init();
    const bool started = r.ok();
    ready->set_value(r);
    if (!started) return;
    impl->loop->run();
    impl->closing = true;  // what fails below is not sent again
    impl->fail_parked_reads();
    impl->client.reset();  // fails what is still held: async callers get an error
    impl->loop->disarm(&impl->replay_timer);
    impl->loop->disarm(&impl->mem_timer);
    impl->cluster = nullptr;
    // The loop itself stays until ~RedisStore has joined this thread: the destructor's post()
    // may still be inside Loop::wake() when run() returns here.
  });
  Result<void> init = fut.get();
  if (!init) {
    s->thread_.join();
    return init.error();
  }
  // The server (or, for a cluster, some node) answers, and the store's script is there.
  for (int attempt = 0;; ++attempt) {
    auto r = impl->run1({"PING"});
    auto c = check(r);
    if (c) break;
    if (attempt >= 20) return c.error();
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  // Memory: what every primary allows (a system of record must not evict), then the periodic
  // high-water poll (docs/cluster.md "Memory back-pressure").
  const bool periodic = impl->opt.high_water > 0 && impl->opt.memory_poll > Duration::zero();
  if (impl->opt.check_memory_policy || periodic) {
    Result<void> polled = ok();
    for (int attempt = 0;; ++attempt) {
      polled = s->poll_memory();
      bool known = polled.ok();
      if (known && impl->cluster != nullptr) {  // the slot map may still be loading
        auto pr = std::make_shared<std::promise<bool>>();
        auto fut = pr->get_future();
        impl->post([impl, pr] { pr->set_value(impl->cluster->map_complete()); });
        known = fut.get();
      }
      if (known || attempt >= 20) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    if (impl->opt.check_memory_policy) {
      if (!polled) return polled.error();
      std::lock_guard lk(impl->mem_mu);
      if (!impl->evicting_node.empty()) {
        log::info("Redis at {} has maxmemory-policy {}", impl->evicting_node.c_str(),
                  impl->evicting.c_str());
        return make_error(Errc::kInvalidArgument,
                          "a Redis primary may evict keys: a system of record must never evict "
                          "(accepted events would be lost); set maxmemory-policy noeviction",
                          "maxmemory-policy", "redis_evicts");
      }
      if (impl->no_limit) {
        log::warn(
            "WARNING: a Redis primary has maxmemory 0 and "
            "storage.redis.max_memory_bytes is not set: no memory back-pressure, Redis "
            "grows until the host runs out (set maxmemory, or "
            "storage.redis.max_memory_bytes)");
      }
    }
  }
  if (periodic) {
    impl->post([impl] {
      impl->mem_periodic = true;
      impl->loop->arm_after(&impl->mem_timer, impl->opt.memory_poll);
    });
  }
  return s;
}

// recover_async's thread: one load at a time, in order (a shard takes several partitions at
// once after a node died; loading them one after another keeps Redis and the loop fair).
struct RedisStore::Loader {
  struct Job {
    Partition p;
    WallTime now;
    Poster* on;
    RecoverDone done;
  };
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Job> jobs;
  bool stop = false;
  bool cancelled = false;  // answers are not posted any more
  std::thread thread;

  void run(RedisStore& store) {
    ::pthread_setname_np(::pthread_self(), "rc-redis-load");
    for (;;) {
      Job job;
      {
        std::unique_lock lk(mu);
        cv.wait(lk, [&] { return stop || !jobs.empty(); });
        if (stop) return;
        job = std::move(jobs.front());
        jobs.pop_front();
        if (cancelled) continue;
      }
      CollectingVisitor c;
      auto st = store.recover(job.p, job.now, c);
      Result<RecoveredPartition> r = st.ok() ? Result<RecoveredPartition>(std::move(c.out))
                                             : Result<RecoveredPartition>(st.error());
      if (r.ok()) r->stats = *st;
      std::lock_guard lk(mu);  // cancel_recovers() waits for a post in progress
      if (cancelled) continue;
      job.on->post(
          [done = std::move(job.done), r = std::move(r)]() mutable { done(std::move(r)); });
    }
  }
};

void RedisStore::recover_async(Partition p, WallTime now, Poster& on, RecoverDone done) {
  {
    std::lock_guard lk(loader_mu_);
    if (!loader_) {
      loader_ = std::make_unique<Loader>();
      loader_->thread = std::thread([this] { loader_->run(*this); });
    }
  }
  std::lock_guard lk(loader_->mu);
  if (loader_->cancelled) return;
  loader_->jobs.push_back({p, now, &on, std::move(done)});
  loader_->cv.notify_one();
}

void RedisStore::cancel_recovers() {
  std::lock_guard lk(loader_mu_);
  if (!loader_) return;
  std::lock_guard jl(loader_->mu);
  loader_->cancelled = true;
  loader_->jobs.clear();
}

Result<void> RedisStore::poll_memory() {
  auto pr = std::make_shared<std::promise<Result<void>>>();
  auto fut = pr->get_future();
  impl_->post([impl = impl_.get(), pr] {
    impl->poll_round([pr](Result<void> r) { pr->set_value(std::move(r)); });
  });
  return fut.get();
}

bool RedisStore::full() const {
  return impl_->full.load(std::memory_order_acquire);
}

RedisMemory RedisStore::memory() const {
  std::lock_guard lk(impl_->mem_mu);
  return impl_->mem;
}

// ---- API keys (SPEC R14.1) --------------------------------------------------------------------

namespace {
constexpr std::string_view kKeyChange =
    "if ARGV[1] == 'put' then redis.call('HSET', KEYS[1], ARGV[2], ARGV[3]) "
    "else redis.call('HDEL', KEYS[1], ARGV[2]) end "
    "return redis.call('INCR', KEYS[2])";
}  // namespace

// The change, then (wait_replicas > 0) a WAIT on the connection of the primary that took it.
Result<void> RedisStore::change_api_key(std::string_view op, std::string_view id, std::string value,
                                        std::string_view hash_suffix) {
  // ":k" the keys, ":c" the portal cutoffs: one slot, one version.
  const std::string hash = "{" + impl_->opt.ns + ":keys}:" + std::string(hash_suffix);
  const std::string version = "{" + impl_->opt.ns + ":keys}:v";
  std::vector<Cmd> cmds;
  cmds.push_back({"EVAL", std::string(kKeyChange), "2", hash, version, std::string(op),
                  std::string(id), std::move(value)});
  redis::CommandOptions co;
  co.key_index = 3;  // KEYS[1]: its slot picks the primary
  Replies rs = impl_->run(std::move(cmds), co);
  auto c = check(rs[0]);
  if (!c) return c.error();
  if (impl_->opt.wait_replicas == 0) return ok();
  auto pr = std::make_shared<std::promise<Result<void>>>();
  auto fut = pr->get_future();
  Impl* im = impl_.get();
  im->post([im, pr, hash] {
    redis::Client* target = im->client.get();
    if (im->cluster) {
      target = im->cluster->connection(im->cluster->node_for_slot(redis::key_slot(hash)));
    }
    if (target == nullptr) {
      return pr->set_value(make_error(Errc::kUnavailable, "redis: no connection to the primary"));
    }
    redis::CommandOptions o;
    o.timeout = im->opt.command_timeout + im->opt.wait_timeout;
    o.key_index = redis::kNoKey;
    const std::string n = std::to_string(im->opt.wait_replicas);
    const std::string ms =
        std::to_string(std::max<int64_t>(1, im->opt.wait_timeout.count() / 1'000'000));
    const int64_t need = im->opt.wait_replicas;
    target->command(
        {"WAIT", n, ms},
        [pr, need](Result<Reply> w) {
          if (!w.ok() || w->is_error() || !w->is_integer() || w->integer_value() < need) {
            return pr->set_value(
                make_error(Errc::kUnavailable, "redis: the key change reached too few replicas"));
          }
          pr->set_value(ok());
        },
        o);
  });
  return fut.get();
}

Result<void> RedisStore::put_api_key(const ApiKey& key) {
  std::string v;
  encode_api_key(key, v);
  return change_api_key("put", key.id, std::move(v));
}

Result<void> RedisStore::delete_api_key(std::string_view id) {
  return change_api_key("del", id, std::string());
}

Result<void> RedisStore::put_portal_cutoff(std::string_view tenant, WallTime not_before) {
  return change_api_key("put", tenant, std::to_string(not_before.ms()), "c");
}

Result<ApiKeySet> RedisStore::load_api_keys() {
  std::vector<Cmd> cmds;
  cmds.push_back({"GET", "{" + impl_->opt.ns + ":keys}:v"});
  cmds.push_back({"HGETALL", "{" + impl_->opt.ns + ":keys}:k"});
  cmds.push_back({"HGETALL", "{" + impl_->opt.ns + ":keys}:c"});
  Replies rs = impl_->run(std::move(cmds));
  ApiKeySet set;
  auto v = check(rs[0]);
  if (!v) return v.error();
  if (!(*v)->is_nil()) set.version = std::strtoull((*v)->str().c_str(), nullptr, 10);
  auto all = check(rs[1]);
  if (!all) return all.error();
  if (!(*all)->is_array() || (*all)->elements().size() % 2 != 0) return bad_reply();
  const auto& el = (*all)->elements();
  for (size_t i = 0; i + 1 < el.size(); i += 2) {
    auto k = decode_api_key(el[i].str(), el[i + 1].str());
    if (!k) return k.error();
    set.keys.push_back(std::move(*k));
  }
  auto cut = check(rs[2]);
  if (!cut) return cut.error();
  if (!(*cut)->is_array() || (*cut)->elements().size() % 2 != 0) return bad_reply();
  const auto& ce = (*cut)->elements();
  for (size_t i = 0; i + 1 < ce.size(); i += 2) {
    set.portal_cutoffs.emplace_back(
        ce[i].str(), WallTime::from_ms(std::strtoll(ce[i + 1].str().c_str(), nullptr, 10)));
  }
  return set;
}

Result<std::string> RedisStore::node_secret(std::string_view name, std::string_view candidate) {
  // SET NX then GET in one script: every node reads the first candidate stored.
  static constexpr std::string_view kSetIfAbsent =
      "redis.call('SET', KEYS[1], ARGV[1], 'NX') return redis.call('GET', KEYS[1])";
  std::vector<Cmd> cmds;
  cmds.push_back({"EVAL", std::string(kSetIfAbsent), "1",
                  "{" + impl_->opt.ns + ":secrets}:" + std::string(name), std::string(candidate)});
  redis::CommandOptions co;
  co.key_index = 3;
  Replies rs = impl_->run(std::move(cmds), co);
  auto c = check(rs[0]);
  if (!c) return c.error();
  if (!(*c)->is_string()) return bad_reply();
  return (*c)->str();
}

Result<uint64_t> RedisStore::api_keys_version() {
  auto r = impl_->run1({"GET", "{" + impl_->opt.ns + ":keys}:v"});
  auto c = check(r);
  if (!c) return c.error();
  if ((*c)->is_nil()) return uint64_t{0};
  return uint64_t{std::strtoull((*c)->str().c_str(), nullptr, 10)};
}

Result<void> RedisStore::outbox_done(uint64_t notification_seq) {
  auto r = impl_->run1(
      {"HDEL", impl_->prefix(id_partition(notification_seq)) + "ob", be64s(notification_seq)});
  if (!r.ok()) return r.error();
  return ok();
}

Result<void> RedisStore::mail_outbox_done(uint64_t notification_seq) {
  auto r = impl_->run1(
      {"HDEL", impl_->prefix(id_partition(notification_seq)) + "om", be64s(notification_seq)});
  if (!r.ok()) return r.error();
  return ok();
}

uint64_t RedisStore::retention_fenced() const {
  return impl_->retention_fenced.load(std::memory_order_relaxed);
}

RedisStore::~RedisStore() {
  {
    // The loader first: a load in progress needs the loop to finish (bounded by its timeouts).
    std::lock_guard lk(loader_mu_);
    if (loader_) {
      {
        std::lock_guard jl(loader_->mu);
        loader_->stop = true;
        loader_->cancelled = true;
      }
      loader_->cv.notify_all();
      loader_->thread.join();
      loader_.reset();
    }
  }
  if (!thread_.joinable()) return;
  impl_->post([impl = impl_.get()] { impl->loop->stop(); });
  thread_.join();
  impl_.reset();  // the loop goes last, on this thread, once nobody can post to it
}

void RedisStore::set_partition_epoch(Partition p, uint64_t epoch) {
  if (p >= kPartitions) return;
  impl_->epochs[p].store(epoch, std::memory_order_release);
}

bool RedisStore::fenced(Partition p, uint64_t epoch) const {
  return impl_->was_fenced(p, epoch);
}

bool RedisStore::degraded() const {
  return impl_->degraded.load(std::memory_order_acquire);
}

DiskHealth RedisStore::disk_health() const {
  return impl_->persist_refused.load(std::memory_order_acquire) ? DiskHealth::kFull
                                                                : DiskHealth::kOk;
}

uint64_t RedisStore::replays() const {
  return impl_->replays.load(std::memory_order_relaxed);
}

uint64_t RedisStore::fenced_writes() const {
  return impl_->fenced_writes.load(std::memory_order_relaxed);
}

std::optional<Error> RedisStore::failed() const {
  std::lock_guard lk(impl_->mu);
  return impl_->error;
}

bool RedisStore::wait_durable(uint64_t seq, Duration timeout) {
  std::unique_lock lk(impl_->mu);
  return impl_->cv.wait_for(lk, timeout, [&] { return impl_->error || durable_seq() >= seq; }) &&
         durable_seq() >= seq;
}

// ---- writes -----------------------------------------------------------------------------------

Result<uint64_t> RedisStore::write(const Mutations& m) {
  {
    std::lock_guard lk(impl_->mu);
    if (impl_->error) return *impl_->error;
    if (m.empty()) return impl_->next_commit;
  }
  auto list = split(m, impl_->stamp_ms(), impl_->opt.notification_outbox, impl_->opt.mail_outbox);
  if (!list) return list.error();
  // The epoch of each partition is the one set when write() is called: the one the caller's
  // fenced(p, epoch) check must name.
  for (PartBatch& b : *list) b.epoch = impl_->epochs[b.p].load(std::memory_order_acquire);
  return impl_->submit(std::move(*list), m.event_keys_checked);
}

// ---- point reads ------------------------------------------------------------------------------

Result<std::vector<std::optional<EventKeyRecord>>> RedisStore::find_event_keys(
    const std::vector<EventKeyRef>& keys) {
  if (keys.empty()) return std::vector<std::optional<EventKeyRecord>>();
  KeyLookup l = impl_->key_lookup(keys);
  Replies rs = impl_->run(l.cmds);
  return parse_key_lookup(l, rs);
}

Result<std::optional<EventKeyRecord>> RedisStore::find_event_key(std::string_view tenant,
                                                                 std::string_view event_id) {
  auto r = find_event_keys({EventKeyRef{tenant, event_id}});
  if (!r) return r.error();
  return (*r)[0];
}

void RedisStore::find_event_keys_async(const std::vector<EventKeyRef>& keys, Poster& on,
                                       EventKeysDone done) {
  KeyLookup l = impl_->key_lookup(keys);
  impl_->post([impl = impl_.get(), &on, l = std::move(l), done = std::move(done)]() mutable {
    std::vector<Cmd> cmds = l.cmds;
    impl->send_all(
        std::move(cmds), [&on, l = std::move(l), done = std::move(done)](Replies rs) mutable {
          auto r = parse_key_lookup(l, rs);
          on.post([done = std::move(done), r = std::move(r)]() mutable { done(std::move(r)); });
        });
  });
}

Result<std::optional<Event>> RedisStore::load_event(EventSeq seq) {
  return parse_event(seq,
                     impl_->run1({"HGET", impl_->prefix(id_partition(seq)) + "ev", be64s(seq)}));
}

void RedisStore::load_event_async(EventSeq seq, Poster& on, EventDone done) {
  Cmd cmd{"HGET", impl_->prefix(id_partition(seq)) + "ev", be64s(seq)};
  impl_->post(
      [impl = impl_.get(), &on, seq, cmd = std::move(cmd), done = std::move(done)]() mutable {
        std::vector<Cmd> cmds;
        cmds.push_back(std::move(cmd));
        impl->send_all(std::move(cmds), [&on, seq, done = std::move(done)](Replies rs) mutable {
          auto r = parse_event(seq, rs[0]);
          on.post([done = std::move(done), r = std::move(r)]() mutable { done(std::move(r)); });
        });
      });
}

Result<std::optional<Event>> RedisStore::find_event(std::string_view tenant,
                                                    std::string_view event_id) {
  auto k = find_event_key(tenant, event_id);
  if (!k) return k.error();
  if (!*k) return std::optional<Event>();
  auto e = load_event((*k)->seq);
  if (!e) return e.error();
  if (*e && ((*e)->tenant != tenant || (*e)->id != event_id))
    return make_error(Errc::kCorruption, "idempotency key points at another event");
  return e;
}

Result<std::optional<DeliveryDetail>> RedisStore::get_delivery(DeliveryId id) {
  auto r = get_deliveries({id});
  if (!r) return r.error();
  return std::move((*r)[0]);
}

// Two round trips whatever the count: the records (one HMGET per partition) with every
// delivery's attempts (one ZRANGEBYLEX each), pipelined; then their events (load_events), for
// the tenant.
Result<std::vector<std::optional<DeliveryDetail>>> RedisStore::get_deliveries(
    const std::vector<DeliveryId>& ids) {
  std::vector<std::optional<DeliveryDetail>> out(ids.size());
  if (ids.empty()) return out;
  Impl::HmgetPlan plan = impl_->hmget_plan(ids, "dl");
  std::vector<Cmd> cmds = plan.cmds;
  const size_t first_range = cmds.size();
  for (DeliveryId id : ids) {
    auto [lo, hi] = attempts_range(id);
    cmds.push_back(
        {"ZRANGEBYLEX", impl_->prefix(id_partition(id)) + "at", std::move(lo), std::move(hi)});
  }
  Replies rs = impl_->run(std::move(cmds));
  auto records = Impl::each_hit(rs, plan, [&](size_t k, const std::string& v) -> Result<void> {
    DeliveryDetail detail;
    if (auto d = decode_delivery(ids[k], v, detail.delivery); !d) return d.error();
    out[k] = std::move(detail);
    return ok();
  });
  if (!records) return records.error();
  std::vector<EventSeq> seqs;
  for (size_t k = 0; k < ids.size(); ++k) {
    if (!out[k]) continue;
    DeliveryDetail& detail = *out[k];
    auto a = check(rs[first_range + k]);
    if (!a) return a.error();
    if (!(*a)->is_array()) return bad_reply();
    // Members come in (id, number) order; an attempt written twice with other bytes (not done
    // by the engine) would appear twice: the first of a number is kept.
    for (const Reply& mem : (*a)->elements()) {
      const std::string& m = mem.str();
      if (m.size() < 10 || get_be64(m.data()) != ids[k])
        return make_error(Errc::kCorruption, "attempt: bad member");
      const uint16_t n = get_be16(m.data() + 8);
      if (!detail.attempts.empty() && detail.attempts.back().number == n) continue;
      auto key = attempt_key(ids[k], n);
      auto att = decode_attempt(key.view(), std::string_view(m).substr(10));
      if (!att) return att.error();
      detail.attempts.push_back(std::move(*att));
    }
    seqs.push_back(detail.delivery.event);
  }
  std::sort(seqs.begin(), seqs.end());
  seqs.erase(std::unique(seqs.begin(), seqs.end()), seqs.end());
  auto evs = load_events(seqs);
  if (!evs) return evs.error();
  for (auto& d : out) {
    if (!d) continue;
    auto it = std::lower_bound(seqs.begin(), seqs.end(), d->delivery.event);
    const auto& ev = (*evs)[static_cast<size_t>(it - seqs.begin())];
    if (ev) d->tenant = ev->tenant;
  }
  return out;
}

// One HMGET of T ev per partition, pipelined: one round trip.
Result<std::vector<std::optional<Event>>> RedisStore::load_events(
    const std::vector<EventSeq>& seqs) {
  std::vector<std::optional<Event>> out(seqs.size());
  if (seqs.empty()) return out;
  Impl::HmgetPlan plan = impl_->hmget_plan(seqs, "ev");
  Replies rs = impl_->run(std::vector<Cmd>(plan.cmds));
  auto done = Impl::each_hit(rs, plan, [&](size_t k, const std::string& v) -> Result<void> {
    auto e = decode_event(seqs[k], v);
    if (!e) return e.error();
    out[k] = std::move(*e);
    return ok();
  });
  if (!done) return done.error();
  return out;
}

// T ed: be16 length + the event's key field, then be64 delivery ids (split(), retention).
Result<std::vector<Delivery>> RedisStore::event_deliveries(EventSeq seq) {
  auto r = impl_->run1({"HGET", impl_->prefix(id_partition(seq)) + "ed", be64s(seq)});
  auto c = check(r);
  if (!c) return c.error();
  std::vector<Delivery> out;
  if ((*c)->is_nil()) return out;
  const std::string& v = (*c)->str();
  if (v.size() < 2) return make_error(Errc::kCorruption, "event deliveries: bad record");
  const size_t head = 2 + get_be16(v.data());
  if (head > v.size() || (v.size() - head) % 8 != 0)
    return make_error(Errc::kCorruption, "event deliveries: bad record");
  std::vector<DeliveryId> ids;
  for (size_t i = head; i < v.size(); i += 8) ids.push_back(get_be64(v.data() + i));
  auto ds = impl_->fetch(ids);
  if (!ds) return ds.error();
  for (auto& d : *ds) {
    if (d) out.push_back(*d);
  }
  return out;
}

// ---- log queries ------------------------------------------------------------------------------

Result<std::vector<Delivery>> RedisStore::recent_deliveries(std::string_view tenant, size_t limit) {
  limit = std::min(limit, kListLimitMax);
  std::vector<Delivery> out;
  if (limit == 0) return out;
  const uint64_t th = tenant_hash(tenant);
  auto r = impl_->run1({"ZRANGEBYLEX", impl_->prefix(partition_of_hash(th)) + tenant_index(th), "-",
                        "+", "LIMIT", "0", std::to_string(limit)});
  auto c = check(r);
  if (!c) return c.error();
  if (!(*c)->is_array()) return bad_reply();
  std::vector<DeliveryId> ids;
  for (const Reply& m : (*c)->elements()) {
    if (m.str().size() != 8) return make_error(Errc::kCorruption, "tenant index: bad member");
    ids.push_back(~get_be64(m.str().data()));
  }
  auto ds = impl_->fetch(ids);
  if (!ds) return ds.error();
  for (auto& d : *ds) {
    if (d) out.push_back(*d);
  }
  return out;
}

Result<DeliveryPage> RedisStore::list_deliveries(std::string_view tenant,
                                                 std::optional<EndpointId> endpoint,
                                                 std::optional<DeliveryStatus> status, size_t limit,
                                                 std::string_view cursor) {
  limit = std::clamp<size_t>(limit, 1, kListLimitMax);
  auto parsed = decode_list_cursor(cursor);
  if (!parsed) return parsed.error();
  const std::optional<DeliveryId> after = *parsed;
  const uint64_t th = tenant_hash(tenant);
  const std::string key = impl_->prefix(partition_of_hash(th)) +
                          (endpoint ? endpoint_index(th, *endpoint) : tenant_index(th));
  std::string from = after ? "(" + be64s(~*after) : "-";
  // A chunk as large as the page (at least kFetchChunk, at most 1 000): a page of 1 000 is then
  // two round trips, not 32 (the filters may need more).
  const size_t chunk_n = std::clamp<size_t>(limit, kFetchChunk, 1000);
  DeliveryPage page;
  size_t scanned = 0;
  DeliveryId last_consumed = 0;
  bool more = false;
  while (true) {
    // One more than a chunk: the extra one only says whether the index goes on.
    auto r =
        impl_->run1({"ZRANGEBYLEX", key, from, "+", "LIMIT", "0", std::to_string(chunk_n + 1)});
    auto c = check(r);
    if (!c) return c.error();
    if (!(*c)->is_array()) return bad_reply();
    std::vector<DeliveryId> chunk;
    for (const Reply& m : (*c)->elements()) {
      if (m.str().size() != 8) return make_error(Errc::kCorruption, "delivery index: bad member");
      chunk.push_back(~get_be64(m.str().data()));
    }
    const bool index_goes_on = chunk.size() > chunk_n;
    if (index_goes_on) chunk.pop_back();
    const size_t room = kListScanMax - scanned;
    bool scan_cut = false;
    if (chunk.size() > room) {
      chunk.resize(room);
      scan_cut = true;
    }
    if (chunk.empty()) break;
    scanned += chunk.size();
    auto ds = impl_->fetch(chunk);
    if (!ds) return ds.error();
    bool full = false;
    for (size_t i = 0; i < chunk.size(); ++i) {
      last_consumed = chunk[i];
      const auto& d = (*ds)[i];
      if (d && (!status || d->status == *status)) {
        page.items.push_back(*d);
        if (page.items.size() == limit) {
          more = i + 1 < chunk.size() || index_goes_on || scan_cut;
          full = true;
          break;
        }
      }
    }
    if (full) break;
    if (scanned >= kListScanMax) {
      more = index_goes_on || scan_cut;
      break;
    }
    if (!index_goes_on) break;
    from = "(" + be64s(~chunk.back());
  }
  if (more) page.next_cursor = encode_cursor(last_consumed);
  return page;
}

Result<std::vector<Notification>> RedisStore::list_notifications(std::string_view tenant,
                                                                 size_t limit) {
  limit = std::min(limit, kListLimitMax);
  std::vector<Notification> out;
  if (limit == 0) return out;
  const uint64_t th = tenant_hash(tenant);
  auto r = impl_->run1({"ZRANGEBYLEX", impl_->prefix(partition_of_hash(th)) + notifications_key(th),
                        "-", "+", "LIMIT", "0", std::to_string(limit)});
  auto c = check(r);
  if (!c) return c.error();
  if (!(*c)->is_array()) return bad_reply();
  for (const Reply& m : (*c)->elements()) {
    const std::string& s = m.str();
    if (s.size() < 8) return make_error(Errc::kCorruption, "notification: bad member");
    auto k = notification_key(th, ~get_be64(s.data()));
    auto n = decode_notification(k.view(), std::string_view(s).substr(8));
    if (!n) return n.error();
    if (n->tenant == tenant) out.push_back(std::move(*n));  // a 64-bit hash collision
  }
  return out;
}

// ---- recovery ---------------------------------------------------------------------------------

Result<RecoveryStats> RedisStore::recover(Partition p, WallTime now, RecoveryVisitor& visitor) {
  if (p >= kPartitions) return make_error(Errc::kInvalidArgument, "no such partition", "partition");
  RecoveryStats st;
  // The leases it turns back are written at the epoch p is held at now (fenced like any write).
  const uint64_t epoch = impl_->epochs[p].load(std::memory_order_acquire);
  uint64_t max_seq = 0;
  const std::string pre = impl_->prefix(p);
  std::vector<Cmd> cmds;
  cmds.push_back({"HGETALL", pre + "ep"});
  cmds.push_back({"HGETALL", pre + "tn"});
  // The active set a page at a time (millions of pending deliveries in a partition must not be
  // one reply): this is the first page.
  cmds.push_back(
      {"ZRANGEBYLEX", pre + "act", "-", "+", "LIMIT", "0", std::to_string(kRecoveryChunk)});
  cmds.push_back({"GET", pre + "seq"});
  const bool outbox = impl_->opt.notification_outbox && impl_->opt.on_outbox;
  const bool mail_outbox = impl_->opt.mail_outbox && impl_->opt.on_mail_outbox;
  size_t outbox_at = 0, mail_at = 0;
  if (outbox) {
    outbox_at = cmds.size();
    cmds.push_back({"HGETALL", pre + "ob"});
  }
  if (mail_outbox) {
    mail_at = cmds.size();
    cmds.push_back({"HGETALL", pre + "om"});
  }
  Replies rs = impl_->run(std::move(cmds));
  // The partition's outboxes: sent by this node, its owner now (SPEC R8.4).
  auto hand_over = [&](size_t at,
                       const std::function<void(std::vector<Notification>)>& to) -> Result<void> {
    auto c = check(rs[at]);
    if (!c) return c.error();
    auto pairs = pairs_of(**c);
    if (!pairs) return pairs.error();
    std::sort(pairs->begin(), pairs->end());  // be64 seq fields: oldest first
    std::vector<Notification> pending;
    for (auto& [f, val] : *pairs) {
      if (f.size() != 8 || val.size() < 8)
        return make_error(Errc::kCorruption, "outbox: bad entry");
      auto k = notification_key(get_be64(val.data()), get_be64(f.data()));
      auto n = decode_notification(k.view(), std::string_view(val).substr(8));
      if (!n) return n.error();
      pending.push_back(std::move(*n));
    }
    if (!pending.empty()) to(std::move(pending));
    return ok();
  };
  if (outbox) {
    if (auto r = hand_over(outbox_at, impl_->opt.on_outbox); !r.ok()) return r.error();
  }
  if (mail_outbox) {
    if (auto r = hand_over(mail_at, impl_->opt.on_mail_outbox); !r.ok()) return r.error();
  }
  {  // endpoints, in id order
    auto c = check(rs[0]);
    if (!c) return c.error();
    auto pairs = pairs_of(**c);
    if (!pairs) return pairs.error();
    std::sort(pairs->begin(), pairs->end());  // be64 fields: byte order is id order
    for (auto& [f, val] : *pairs) {
      if (f.size() != 8) return make_error(Errc::kCorruption, "endpoint: bad key");
      const EndpointId id = get_be64(f.data());
      auto e = decode_endpoint(id, val);
      if (!e) return e.error();
      max_seq = std::max(max_seq, id_sequence(id));
      visitor.on_endpoint(*e);
      ++st.endpoints;
    }
  }
  {  // tenants, in name order
    auto c = check(rs[1]);
    if (!c) return c.error();
    auto pairs = pairs_of(**c);
    if (!pairs) return pairs.error();
    std::sort(pairs->begin(), pairs->end());
    for (auto& [name, val] : *pairs) {
      auto t = decode_tenant(tenant_key(name), val);
      if (!t) return t.error();
      visitor.on_tenant(*t);
      ++st.tenants;
    }
  }
  {  // non-terminal deliveries, in id order, a page at a time; leases are turned back first
    Result<Reply> page = std::move(rs[2]);
    for (;;) {
      auto c = check(page);
      if (!c) return c.error();
      if (!(*c)->is_array()) return bad_reply();
      std::vector<DeliveryId> part;
      std::string last;  // the page's last member: the next page starts after it
      for (const Reply& m : (*c)->elements()) {
        if (m.str().size() != 8) return make_error(Errc::kCorruption, "active: bad member");
        part.push_back(get_be64(m.str().data()));
        last = m.str();
      }
      if (part.empty()) break;
      auto ds = impl_->fetch(part);
      if (!ds) return ds.error();
      std::vector<Delivery> chunk;
      std::vector<size_t> leased;
      for (auto& d : *ds) {
        if (!d || is_terminal(d->status)) continue;  // not expected in the active set
        max_seq = std::max(max_seq, id_sequence(d->id));
        chunk.push_back(*d);
        if (d->status == DeliveryStatus::kInFlight) leased.push_back(chunk.size() - 1);
      }
      if (!leased.empty()) {
        std::vector<Cmd> hk;
        for (size_t i : leased) {
          auto [lo, hi] = attempts_range(chunk[i].id);
          hk.push_back({"ZRANGEBYLEX", pre + "at", std::move(lo), std::move(hi)});
        }
        Replies kr = impl_->run(std::move(hk));
        Mutations m;
        m.event_keys_checked = true;
        for (size_t j = 0; j < leased.size(); ++j) {
          Delivery& d = chunk[leased[j]];
          auto kc = check(kr[j]);
          if (!kc) return kc.error();
          // Never overwrite a recorded attempt: number after the last one stored.
          uint32_t number = std::max<uint32_t>(d.attempts, 1);
          if (!(*kc)->is_array()) return bad_reply();
          for (const Reply& f : (*kc)->elements()) {
            if (f.str().size() >= 10)
              number = std::max<uint32_t>(number, get_be16(f.str().data() + 8) + 1u);
          }
          number = std::min<uint32_t>(number, 0xffff);
          m.attempts.push_back(expire_lease(d, static_cast<uint16_t>(number), now));
          m.deliveries.push_back(DeliveryPut{d, 0, false});
        }
        auto list =
            split(m, impl_->stamp_ms(), impl_->opt.notification_outbox, impl_->opt.mail_outbox);
        if (!list) return list.error();
        for (PartBatch& b : *list) b.epoch = epoch;  // all of p
        auto w = impl_->submit(std::move(*list), m.event_keys_checked);
        if (!w) return w.error();
        if (!wait_durable(*w, impl_->opt.command_timeout * 4)) {
          if (auto e = failed()) return *e;
          return make_error(Errc::kUnavailable, "redis: recovery write did not complete");
        }
        if (fenced(p, epoch))
          return make_error(Errc::kUnavailable, "redis: the partition's lease is not held",
                            "partition", "fenced");
        st.leases_expired += leased.size();
      }
      for (const Delivery& d : chunk) visitor.on_delivery(d);
      st.pending += chunk.size();
      if (part.size() < kRecoveryChunk) break;
      page = impl_->run1({"ZRANGEBYLEX", pre + "act", "(" + last, "+", "LIMIT", "0",
                          std::to_string(kRecoveryChunk)});
    }
  }
  {
    auto c = check(rs[3]);
    if (!c) return c.error();
    if (!(*c)->is_nil())
      max_seq = std::max<uint64_t>(max_seq, std::strtoull((*c)->str().c_str(), nullptr, 10));
  }
  st.next_sequence = max_seq + 1;
  return st;
}

// ---- retention ----------------------------------------------------------------------------------

Result<RetentionStats> RedisStore::run_retention(WallTime now, const std::vector<OwnedEpoch>& owned,
                                                 const std::function<bool()>& stop) {
  Impl& im = *impl_;
  std::lock_guard guard(im.retention_mu);
  RetentionStats st;
  const int64_t cutoff = (now - im.opt.retention).ms();
  if (cutoff <= 0) return st;
  const std::string below = "(" + std::to_string(cutoff);
  const std::string cut = std::to_string(cutoff);
  const size_t chunk = std::max<size_t>(1, im.opt.retention_chunk);
  redis::CommandOptions eval_opts;
  eval_opts.key_index = 3;  // the lease key: the partition's slot

  for (const OwnedEpoch& o : owned) {
    const Partition p = o.partition;
    if (p >= kPartitions || (im.fencing && o.epoch == 0)) continue;
    const std::string pre = im.prefix(p);
    const std::string own = cluster::own_key(im.opt.ns, p);
    const std::string epoch = std::to_string(o.epoch);
    bool fenced = false;
    // Terminal deliveries first (their events may go with them), then events written without a
    // delivery, then notifications.
    for (const char* index : {"done", "eo", "nto"}) {
      if (fenced) break;
      const std::string_view kind(index);
      for (;;) {
        auto r = im.run1(
            {"ZRANGEBYSCORE", pre + index, "-inf", below, "LIMIT", "0", std::to_string(chunk)});
        auto c = check(r);
        if (!c) return c.error();
        if (!(*c)->is_array()) return bad_reply();
        std::vector<std::string> members;
        for (const Reply& m : (*c)->elements()) members.push_back(m.str());
        if (members.empty()) break;
        // Asked once per chunk with work, before it is deleted: the next pass finds the rest.
        if (stop && stop()) {
          st.stopped = true;
          return st;
        }
        std::vector<std::string> ops;
        auto op = [&ops](char code, std::string a, std::string b = {}, std::string c = {}) {
          ops.emplace_back(1, code);
          ops.push_back(std::move(a));
          ops.push_back(std::move(b));
          ops.push_back(std::move(c));
        };
        if (kind == "done") {
          std::vector<DeliveryId> ids;
          for (const std::string& m : members) {
            if (m.size() != 8) return make_error(Errc::kCorruption, "done index: bad member");
            ids.push_back(get_be64(m.data()));
          }
          auto ds = im.fetch(ids);
          if (!ds) return ds.error();
          // The tenant of each event (its T ed header) names the index members.
          std::vector<EventSeq> evs;
          for (const auto& d : *ds) {
            if (d) evs.push_back(d->event);
          }
          std::sort(evs.begin(), evs.end());
          evs.erase(std::unique(evs.begin(), evs.end()), evs.end());
          std::map<EventSeq, uint64_t> tenant_of;  // event -> tenant hash
          if (!evs.empty()) {
            Cmd hm{"HMGET", pre + "ed"};
            for (EventSeq e : evs) hm.push_back(be64s(e));
            const Result<Reply> eds = im.run1(std::move(hm));
            auto er = check(eds);
            if (!er) return er.error();
            if (!(*er)->is_array() || (*er)->size() != evs.size()) return bad_reply();
            for (size_t i = 0; i < evs.size(); ++i) {
              const Reply& v = (**er)[i];
              std::string tenant;
              if (!v.is_nil() && v.str().size() >= 2) {
                const size_t n = get_be16(v.str().data());
                if (v.str().size() >= 2 + n && n > 0) {
                  const std::string kf = v.str().substr(2, n);
                  tenant = kf.substr(0, kf.find('\0'));
                }
              }
              if (tenant.empty()) {  // no key in T ed: the event itself says
                auto ev = load_event(evs[i]);
                if (!ev) return ev.error();
                if (*ev) tenant = (*ev)->tenant;
              }
              if (!tenant.empty()) tenant_of[evs[i]] = tenant_hash(tenant);
            }
          }
          for (size_t i = 0; i < ids.size(); ++i) {
            const auto& d = (*ds)[i];
            auto th = d ? tenant_of.find(d->event) : tenant_of.end();
            if (th == tenant_of.end()) {
              op('D', members[i]);  // no record or no tenant: only what the id names goes
            } else {
              op('D', members[i], tenant_index(th->second),
                 endpoint_index(th->second, d->endpoint));
            }
          }
          for (EventSeq e : evs) op('E', be64s(e));
        } else if (kind == "eo") {
          for (const std::string& m : members) {
            if (m.size() != 8) return make_error(Errc::kCorruption, "event index: bad member");
            op('E', m);
          }
        } else {
          for (const std::string& m : members) {
            if (m.size() != 16)
              return make_error(Errc::kCorruption, "notification index: bad member");
            const uint64_t inv = ~get_be64(m.data() + 8);
            // Bounds piece by piece: `"[" + std::string&&` trips GCC 12's false -Wrestrict
            // at -O3 (the Release build).
            std::string lo(1, '['), hi(1, inv == UINT64_MAX ? '+' : '(');
            lo += be64s(inv);
            if (inv != UINT64_MAX) hi += be64s(inv + 1);
            op('N', m, std::move(lo), std::move(hi));
          }
        }
        Cmd cmd{"EVAL", im.retention_source, "2", own, pre + "seq", im.opt.node_id, epoch, pre,
                cut};
        for (std::string& x : ops) cmd.push_back(std::move(x));
        std::vector<Cmd> one;
        one.push_back(std::move(cmd));
        Replies rs = im.run(std::move(one), eval_opts);
        if (im.fencing && rs[0].ok() && cluster::is_fenced(*rs[0])) {
          im.retention_fenced.fetch_add(1, std::memory_order_relaxed);
          fenced = true;  // the partition moved: its new owner deletes
          break;
        }
        auto ec = check(rs[0]);
        if (!ec) return ec.error();
        const Reply& a = **ec;
        if (!a.is_array() || a.size() != 4) return bad_reply();
        st.deliveries += static_cast<uint64_t>(a[0].integer_value());
        st.attempts += static_cast<uint64_t>(a[1].integer_value());
        st.events += static_cast<uint64_t>(a[2].integer_value());
        st.notifications += static_cast<uint64_t>(a[3].integer_value());
        st.expiry_entries += members.size();
        if (members.size() < chunk) break;
      }
    }
  }
  return st;
}

}  // namespace ringcast::storage
