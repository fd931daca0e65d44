// Internal to the Redis store's files (storage/redis_store.cc, redis_journal.cc, redis_reads.cc,
// redis_recovery.cc, redis_retention.cc): what they share.
//   - In ringcast::storage::redis_detail (formerly redis_store.cc's anonymous namespace), named
//     unqualified through the using-declarations below: the command and reply aliases, the key
//     builders and split() (defined in redis_journal.cc), the reply checks (redis_reads.cc),
//     KeyLookup and PartBatch.
//   - RedisStore::Impl, the store's state: the options; the epoch each partition is held at and
//     the writes the fence refused; the loop thread's loop, client and cluster view; the commit
//     counter and the store's error; the batches in flight and those not durable yet, the replay
//     and the WAITs out per primary; the reads parked behind a replay; retention's stamp and lock;
//     the memory view and its poll.
//   - RedisStore::Loader, recover_async's thread and queue.
// The invariants Impl's members keep (their comments say more):
//   - `mu` guards next_commit and error, and batches are posted to the loop thread under it, so
//     the loop thread sees them in commit order;
//   - the loop, the client and the cluster view are made and used on the loop thread only (the
//     loop pointer itself is read by posters), and so are inflight and pending (in commit order),
//     the replay state, node_waits, parked_reads, writes_lost, node_memory and mem_periodic;
//     answers of an earlier generation (gen; a replay began since) are ignored;
//   - a refused write is recorded (any_fenced, last_fenced, fenced_set under fenced_mu) on the
//     loop thread before durable_seq can pass its batch, with release ordering; fenced() reads it
//     from any thread;
//   - mem, evicting_node, evicting and no_limit are under mem_mu; run_retention_on holds
//     retention_mu (one at a time); the retention stamp (last_stamp) never goes back.
// Impl's member functions are defined by role: init() in redis_store.cc; the write path (fail,
// the fencing records, advance, the replay, send_batch, transmit, the WAITs, submit) in
// redis_journal.cc; the reads (the parked reads, send_all, run, run1, key_lookup, hmget_plan,
// fetch) in redis_reads.cc; stamp_ms() and the memory poll in redis_retention.cc. Loader::run()
// is in redis_recovery.cc.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/result.h"
#include "core/store.h"
#include "core/time.h"
#include "core/types.h"
#include "net/loop.h"
#include "redis/client.h"
#include "redis/cluster.h"
#include "redis/reply.h"
#include "storage/redis_created.h"
#include "storage/redis_store.h"

namespace ringcast::storage {
namespace redis_detail {

using redis::Reply;
using Cmd = std::vector<std::string>;
using Replies = std::vector<Result<Reply>>;

// Key builders (storage/redis_journal.cc) and reply checks (storage/redis_reads.cc).
std::string be64s(uint64_t v);
std::string key_field(std::string_view tenant, std::string_view id);
std::pair<std::string, std::string> attempts_range(DeliveryId id);
std::string tenant_index(uint64_t th);
std::string endpoint_index(uint64_t th, EndpointId e);
std::string notifications_key(uint64_t th);
Result<const Reply*> check(const Result<Reply>& r);
Error bad_reply();

// What the key lookups of find_event_keys send: one HMGET of T key per partition and, with
// fencing on (cluster mode), one of T ik (the keys queued in the partition's inbox,
// storage/redis_inbox.h) for the keys not drained from that inbox.
struct KeyLookup {
  std::vector<Cmd> cmds;
  std::vector<std::vector<size_t>> positions;  // per command: the index of each field's key
  std::vector<bool> queued;                    // per command: an HMGET of T ik
  size_t n = 0;
};

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

// storage/redis_journal.cc. `created` is the writer's record of created-only deliveries
// (redis_created.h), updated with the batch.
Result<std::vector<PartBatch>> split(const Mutations& m, int64_t stamp_ms, bool outbox,
                                     bool mail_outbox, CreatedGroups& created);

}  // namespace redis_detail

// The store's files (and RedisStore::Impl below) name these unqualified, as when they were one
// file's own.
using redis_detail::attempts_range;
using redis_detail::bad_reply;
using redis_detail::be64s;
using redis_detail::check;
using redis_detail::Cmd;
using redis_detail::endpoint_index;
using redis_detail::key_field;
using redis_detail::KeyLookup;
using redis_detail::notifications_key;
using redis_detail::PartBatch;
using redis_detail::Replies;
using redis_detail::Reply;
using redis_detail::split;
using redis_detail::tenant_index;

struct RedisStore::Impl {
  RedisStoreOptions opt;
  // The deliveries this store wrote (or recovered) that are only created: not in T act.
  CreatedGroups created;
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

  // storage/redis_retention.cc.
  int64_t stamp_ms();

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

  // storage/redis_retention.cc: the memory poll.
  std::vector<std::pair<std::string, redis::Client*>> primaries();
  static uint64_t info_field(const std::string& info, std::string_view name, std::string* text);

  struct MemRound {
    size_t left = 0, answered = 0;
    std::vector<std::string> names;
    std::function<void(Result<void>)> done;
  };

  void poll_round(std::function<void(Result<void>)> done);
  void conclude(MemRound& round);

  // storage/redis_store.cc.
  Result<void> init();

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

  // storage/redis_reads.cc: reads, parked behind a replay.
  void send_parked_reads();
  void fail_parked_reads();
  void send_all(std::vector<Cmd> cmds, std::function<void(Replies)> then,
                const redis::CommandOptions& co = {});
  void send_read(Read r);
  void gathered(Read& r, Replies out, uint64_t lost_before);

  // storage/redis_journal.cc: the write path.
  void fail(const Error& e);
  void record_fenced(Partition p, uint64_t epoch);
  bool was_fenced(Partition p, uint64_t epoch) const;
  static bool transient(const Result<Reply>& r);
  void advance();
  void replay_later(const Error& why);
  void replay_now();
  void send_batch(uint64_t seq, std::vector<PartBatch> all, bool checked);
  void transmit(const Pending& b, bool with_wait = true);

  // Per primary: the WAIT out (if any) and the batches the next one covers. Reset by a replay.
  struct NodeWait {
    bool out = false;
    std::vector<uint64_t> seqs_next;
    uint64_t routes_next = 0;  // reroutes() when the first of seqs_next went out
  };
  std::map<std::string, NodeWait> node_waits;

  void issue_wait(const std::string& node, redis::Client* target);

  // ---- any thread but the loop's ----

  void post(std::function<void()> fn) { loop->post(std::move(fn)); }

  // storage/redis_journal.cc.
  Result<uint64_t> submit(std::vector<PartBatch> list, bool checked);

  // storage/redis_reads.cc: round trips from other threads, lookups.
  Replies run(std::vector<Cmd> cmds, const redis::CommandOptions& co = {});
  Result<Reply> run1(Cmd cmd);
  KeyLookup key_lookup(const std::vector<EventKeyRef>& keys);

  // One HMGET per partition of `ids` on the partition's hash `suffix` (fields be64(id)):
  // cmds[c] asks for the positions pos[c] of `ids`, in its field order.
  struct HmgetPlan {
    std::vector<Cmd> cmds;
    std::vector<std::vector<size_t>> pos;
  };

  HmgetPlan hmget_plan(const std::vector<uint64_t>& ids, std::string_view suffix) const;

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

  Result<std::vector<std::optional<Delivery>>> fetch(const std::vector<DeliveryId>& ids);
};

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

  // storage/redis_recovery.cc.
  void run(RedisStore& store);
};

}  // namespace ringcast::storage
