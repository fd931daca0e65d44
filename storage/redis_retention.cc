// The Redis store's retention and memory (docs/cluster.md "Retention", SPEC R10.1; "Memory
// back-pressure"): the retention stamp, run_retention's fenced chunks per partition, and the
// INFO memory poll of every primary with its high-water mark.
#include "storage/redis_store.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cluster/fence.h"
#include "cluster/keys.h"
#include "core/result.h"
#include "core/time.h"
#include "core/types.h"
#include "log/log.h"
#include "net/loop.h"
#include "redis/client.h"
#include "redis/cluster.h"
#include "redis/reply.h"
#include "redis/slot.h"
#include "storage/codec.h"
#include "storage/redis_store_internal.h"
#include "storage/store_metrics.h"

namespace ringcast::storage {

// The retention stamp: the clock's wall time in ms, monotone within the process (a wall clock
// stepping back does not reorder T done).
int64_t RedisStore::Impl::stamp_ms() {
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

// The primaries that hold a partition of this namespace (standalone: the one server).
std::vector<std::pair<std::string, redis::Client*>> RedisStore::Impl::primaries() {
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

uint64_t RedisStore::Impl::info_field(const std::string& info, std::string_view name,
                                      std::string* text) {
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

// Loop thread: INFO memory on every primary, then the high-water decision; `done` (may be
// empty) gets an error when no primary answered. Re-arms itself when periodic.
void RedisStore::Impl::poll_round(std::function<void(Result<void>)> done) {
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

void RedisStore::Impl::conclude(MemRound& round) {
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
      log::warn("redis_memory_high", {{"used_bytes", used}, {"limit_bytes", limit}},
                "redis store: memory at {} of {} bytes, over the high-water mark: intake "
                "answers 503 store_full",
                used, limit);
    } else {
      log::info("redis_memory_ok", {{"used_bytes", used}, {"limit_bytes", limit}},
                "redis store: memory at {} of {} bytes, below the mark again: intake resumes", used,
                limit);
    }
  }
  if (round.done) {
    round.done(failed ? Result<void>(make_error(Errc::kUnavailable,
                                                "redis: no primary answered INFO memory"))
                      : ok());
  }
  if (mem_periodic && !closing) loop->arm_after(&mem_timer, opt.memory_poll);
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

uint64_t RedisStore::retention_fenced() const {
  return impl_->retention_fenced.load(std::memory_order_relaxed);
}

std::string RedisStore::metrics_text() const {
  const RedisMemory m = memory();
  return render_redis_memory_metrics({m.used_bytes, m.limit_bytes, m.mark_bytes, m.full,
                                      m.poll_errors, m.full_spells, retention_fenced()});
}

// ---- retention ----------------------------------------------------------------------------------

// The partitions come from whoever composed the node (RedisStoreOptions::retention_owned: the
// lease manager's, each at its epoch); alone on Redis, this node owns every partition, unfenced
// (docs/cluster.md "Retention").
Result<RetentionStats> RedisStore::run_retention(WallTime now, const std::function<bool()>& stop) {
  std::vector<OwnedEpoch> owned;
  if (impl_->opt.retention_owned) {
    owned = impl_->opt.retention_owned();
  } else {
    owned.reserve(kPartitions);
    for (uint32_t p = 0; p < kPartitions; ++p) owned.push_back({static_cast<Partition>(p), 0});
  }
  return run_retention_on(now, owned, stop);
}

Result<RetentionStats> RedisStore::run_retention_on(WallTime now,
                                                    const std::vector<OwnedEpoch>& owned,
                                                    const std::function<bool()>& stop) {
  Impl& im = *impl_;
  std::lock_guard guard(im.retention_mu);
  RetentionStats st;
  const int64_t cutoff = (now - im.opt.retention).ms();
  if (cutoff <= 0) return st;
  const std::string cut = std::to_string(cutoff);
  std::string below = "(";  // appended: GCC 12's false -Wrestrict on "literal" + std::string&&
  below += cut;
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
        const size_t fetched = members.size();
        if (kind == "done") {  // at most `chunk` ids per script (one member at least)
          size_t n = 0, keep = 0;
          while (keep < members.size() && (keep == 0 || n + members[keep].size() / 8 <= chunk))
            n += members[keep++].size() / 8;
          members.resize(keep);
        }
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
          // A member is the ids one batch ended (8 bytes each; one id: also what builds before
          // the per-batch members wrote).
          std::vector<DeliveryId> ids;
          std::vector<size_t> first;  // per member: its first index in ids
          for (const std::string& m : members) {
            if (m.empty() || m.size() % 8 != 0)
              return make_error(Errc::kCorruption, "done index: bad member");
            first.push_back(ids.size());
            for (size_t at = 0; at < m.size(); at += 8) ids.push_back(get_be64(m.data() + at));
          }
          first.push_back(ids.size());
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
          for (size_t mi = 0; mi < members.size(); ++mi) {
            op('G', members[mi]);
            for (size_t i = first[mi]; i < first[mi + 1]; ++i) {
              const auto& d = (*ds)[i];
              auto th = d ? tenant_of.find(d->event) : tenant_of.end();
              if (th == tenant_of.end()) {
                op('D', be64s(ids[i]));  // no record or no tenant: only what the id names goes
              } else {
                op('D', be64s(ids[i]), tenant_index(th->second),
                   endpoint_index(th->second, d->endpoint));
              }
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
        if (fetched < chunk && members.size() == fetched) break;
      }
    }
  }
  return st;
}

}  // namespace ringcast::storage
