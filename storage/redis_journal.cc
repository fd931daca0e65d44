// The Redis store's write path (docs/cluster.md "Writes", "Unconfirmed writes are sent again",
// "Fencing"): a batch split by partition, one fenced script each, pipelined; WAITs coalesced per
// primary; unconfirmed batches replayed; the durable sequence, the degraded and fenced state.
#include "storage/redis_store.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cluster/fence.h"
#include "cluster/keys.h"
#include "core/result.h"
#include "core/store.h"
#include "core/store_helpers.h"
#include "core/types.h"
#include "log/log.h"
#include "net/loop.h"
#include "redis/cluster.h"
#include "redis/reply.h"
#include "redis/slot.h"
#include "storage/codec.h"
#include "storage/redis_store_internal.h"

namespace ringcast::storage {

namespace {

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

}  // namespace

namespace redis_detail {

std::string be64s(uint64_t v) {
  std::string s;
  put_be64(s, v);
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

// A batch, split by partition (in partition order); the epochs are left to the caller.
// `stamp_ms` (the store's wall clock at write()) scores the retention indexes; a replay sends
// the same ops, so the stamps stay those of the first send.
Result<std::vector<PartBatch>> split(const Mutations& m, int64_t stamp_ms, bool outbox,
                                     bool mail_outbox, CreatedGroups& created) {
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
    encode_event_key(
        {e.seq, ev->payload_hash, static_cast<uint32_t>(hi - lo), message_id_bits(e.message_id)},
        rec);
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
  // Created deliveries (docs/cluster.md "Created deliveries"): a batch's new ones of a
  // partition are one T cr member, not T act members; the writer remembers them (`created`).
  {
    std::map<Partition, std::vector<DeliveryId>> fresh;
    for (const DeliveryPut& dp : m.deliveries) {
      if (dp.is_new) fresh[id_partition(dp.delivery.id)].push_back(dp.delivery.id);
    }
    for (auto& [p, ids] : fresh) {
      std::sort(ids.begin(), ids.end());
      ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
      part(p).op('Z', "cr", CreatedGroups::member_of(ids));
      created.add_group(p, std::move(ids));
    }
  }
  std::vector<std::string> emptied;                    // T cr members with no created-only id left
  std::map<Partition, std::vector<DeliveryId>> ended;  // per partition: ids this batch ended
  for (const DeliveryPut& dp : m.deliveries) {
    const Delivery& d = dp.delivery;
    PartBatch& b = part(id_partition(d.id));
    v.clear();
    encode_delivery(d, v);
    const std::string id8 = be64s(d.id);
    b.op('H', "dl", id8, v);
    // T act: the live deliveries that are not only created — those that reached a retry's
    // wait, a send given back, a recovered lease, a resend. A lease leaves a created delivery
    // created-only (recovery finds it in T cr and reads its lease in T dl). An end removes the
    // delivery from T act unless it was only created.
    const size_t before = emptied.size();
    if (is_terminal(d.status)) {
      if (!created.take(d.id, emptied)) b.op('R', "act", id8);
    } else if (dp.rewrite) {
      created.take(d.id, emptied);
      b.op('Z', "act", id8);
    } else if (!dp.is_new && d.status != DeliveryStatus::kInFlight) {
      // Already in T act unless it was only created (written by this store, or recovered).
      if (created.take(d.id, emptied)) b.op('Z', "act", id8);
    }
    for (size_t i = before; i < emptied.size(); ++i) b.op('R', "cr", std::move(emptied[i]));
    // Retention: the ids this batch ended in p are one T done member (below). A resend that
    // reopens a delivery leaves its earlier member: retention skips an id that is in T act.
    if (is_terminal(d.status)) ended[id_partition(d.id)].push_back(d.id);
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
  // T done: one member per partition and batch, the ended ids (be64 each, ascending) scored
  // with the batch's stamp, instead of a member per delivery (docs/cluster.md "Retention").
  for (auto& [p, ids] : ended) {
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    std::string member;
    member.reserve(8 * ids.size());
    for (DeliveryId id : ids) put_be64(member, id);
    part(p).op('S', "done", std::move(member), stamp);
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

}  // namespace redis_detail

void RedisStore::Impl::fail(const Error& e) {
  std::lock_guard lk(mu);
  if (!error) error = e;
  cv.notify_all();
}

// The write of partition p at `epoch` was refused (FENCED, or epoch 0 with fencing on).
// Called before the batch's part counts as done, so before durable_seq can pass it.
void RedisStore::Impl::record_fenced(Partition p, uint64_t epoch) {
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

bool RedisStore::Impl::was_fenced(Partition p, uint64_t epoch) const {
  if (p >= kPartitions || !any_fenced[p].load(std::memory_order_acquire)) return false;
  if (last_fenced[p].load(std::memory_order_acquire) == epoch) return true;
  std::lock_guard lk(fenced_mu);
  return fenced_set.count({p, epoch}) > 0;
}

// Transient: the write may or may not have been applied and sending it again is safe (a
// timeout, a lost connection, a node failing over, too few replicas). Not transient: the
// script refused it (CONFLICT) or could not run.
bool RedisStore::Impl::transient(const Result<Reply>& r) {
  if (!r.ok()) return true;
  if (!r->is_error()) return false;
  return !(r->error_is("CONFLICT") || r->error_is("ERR") || r->error_is("NOSCRIPT") ||
           r->error_is("WRONGTYPE"));
}

void RedisStore::Impl::advance() {
  uint64_t to = 0;
  while (!inflight.empty() && inflight.front().left == 0) {
    to = inflight.front().seq;
    inflight.pop_front();
  }
  if (to == 0) return;
  if (persist_refused.exchange(false)) {
    log::info("redis_persists_again", {}, "redis store: Redis persists writes again");
  }
  while (!pending.empty() && pending.front().seq <= to) pending.pop_front();
  if (!replay_armed && to >= replay_upto && degraded.load(std::memory_order_relaxed)) {
    // Everything sent again is confirmed.
    backoff = kReplayFirst;
    degraded.store(false, std::memory_order_release);
    logged_degraded = false;
    log::info("store_recovered",
              {{"degraded_ms",
                std::chrono::duration<double, std::milli>(loop->now() - degraded_since).count()},
               {"replays", replays.load(std::memory_order_relaxed)}},
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
void RedisStore::Impl::replay_later(const Error& why) {
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
    log::warn("store_degraded", {{"error", why.message}},
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
void RedisStore::Impl::replay_now() {
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

void RedisStore::Impl::send_batch(uint64_t seq, std::vector<PartBatch> all, bool checked) {
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
void RedisStore::Impl::transmit(const Pending& b, bool with_wait) {
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
      log::warn("redis_misconf", {},
                "redis store: Redis refuses writes it cannot persist (MISCONF: "
                "its disk is full or failing); intake answers 503 storage_full until it "
                "takes them again");
    }
    if (g != gen) return;
    auto c = check(r);
    if (transient(r)) return replay_later(c ? make_error(Errc::kUnavailable, "redis") : c.error());
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

void RedisStore::Impl::issue_wait(const std::string& node, redis::Client* target) {
  NodeWait& nw = node_waits[node];
  std::vector<uint64_t> covered = std::move(nw.seqs_next);
  nw.seqs_next.clear();
  nw.out = true;
  const uint64_t routes = nw.routes_next;
  const uint64_t g = gen;
  const int64_t need = opt.wait_replicas;
  const std::string n = std::to_string(opt.wait_replicas);
  const std::string ms = std::to_string(std::max<int64_t>(1, opt.wait_timeout.count() / 1'000'000));
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
          return replay_later(c ? make_error(Errc::kUnavailable, "redis: WAIT failed") : c.error());
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

// Hands a split batch to the loop thread; its commit sequence, or the store's error.
Result<uint64_t> RedisStore::Impl::submit(std::vector<PartBatch> list, bool checked) {
  std::lock_guard lk(mu);
  if (error) return *error;
  const uint64_t seq = ++next_commit;
  // Posted under the lock: the loop thread sees batches in commit order.
  post([this, seq, checked, list = std::move(list)]() mutable {
    send_batch(seq, std::move(list), checked);
  });
  return seq;
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

bool RedisStore::retry_disk() {
  return retry_disk_by_health(*this);
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
  auto list = split(m, impl_->stamp_ms(), impl_->opt.notification_outbox, impl_->opt.mail_outbox,
                    impl_->created);
  if (!list) return list.error();
  // The epoch of each partition is the one set when write() is called: the one the caller's
  // fenced(p, epoch) check must name.
  for (PartBatch& b : *list) b.epoch = impl_->epochs[b.p].load(std::memory_order_acquire);
  return impl_->submit(std::move(*list), m.event_keys_checked);
}

}  // namespace ringcast::storage
