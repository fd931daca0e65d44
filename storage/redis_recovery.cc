// The Redis store's recovery (docs/cluster.md "Reads", recover(p)): loading a partition its new
// owner takes — endpoints, tenants, the active set with its leases turned back, the outboxes
// handed over (SPEC R8.4) — and recover_async's loader thread.
#include "storage/redis_store.h"

#include <pthread.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "core/result.h"
#include "core/store.h"
#include "core/types.h"
#include "redis/reply.h"
#include "storage/codec.h"
#include "storage/redis_store_internal.h"

namespace ringcast::storage {

namespace {

constexpr size_t kRecoveryChunk = 1024;
constexpr size_t kCreatedMembersPerPage = 256;  // T cr members (a batch's ids each) per page

// Pairs of a flat HGETALL reply.
Result<std::vector<std::pair<std::string, std::string>>> pairs_of(const Reply& r) {
  if (!r.is_array() || r.size() % 2 != 0) return bad_reply();
  std::vector<std::pair<std::string, std::string>> out;
  out.reserve(r.size() / 2);
  for (size_t i = 0; i + 1 < r.size(); i += 2) out.emplace_back(r[i].str(), r[i + 1].str());
  return out;
}

}  // namespace

void RedisStore::Loader::run(RedisStore& store) {
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
    job.on->post([done = std::move(job.done), r = std::move(r)]() mutable { done(std::move(r)); });
  }
}

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
  // Leases found in flight are turned back (a lease_expired attempt, written and waited for)
  // before the chunk's deliveries are visited.
  auto settle_chunk = [&](std::vector<Delivery>& chunk) -> Result<void> {
    std::vector<size_t> leased;
    for (size_t i = 0; i < chunk.size(); ++i) {
      if (chunk[i].status == DeliveryStatus::kInFlight) leased.push_back(i);
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
      auto list = split(m, impl_->stamp_ms(), impl_->opt.notification_outbox,
                        impl_->opt.mail_outbox, impl_->created);
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
    return ok();
  };
  // What this store knew of p's created deliveries is rebuilt from T cr below.
  impl_->created.reset_partition(p);
  std::vector<DeliveryId> active;  // T act's ids, ascending
  {                                // the deliveries in T act, in id order, a page at a time
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
      active.insert(active.end(), part.begin(), part.end());
      auto ds = impl_->fetch(part);
      if (!ds) return ds.error();
      std::vector<Delivery> chunk;
      for (auto& d : *ds) {
        if (!d || is_terminal(d->status)) continue;  // not expected in the active set
        max_seq = std::max(max_seq, id_sequence(d->id));
        chunk.push_back(*d);
      }
      if (auto r = settle_chunk(chunk); !r) return r.error();
      if (part.size() < kRecoveryChunk) break;
      page = impl_->run1({"ZRANGEBYLEX", pre + "act", "(" + last, "+", "LIMIT", "0",
                          std::to_string(kRecoveryChunk)});
    }
  }
  std::sort(active.begin(), active.end());
  {  // the created deliveries (docs/cluster.md "Created deliveries"): T cr's members, whose
     // ids not in T act and not ended are only created
    std::string after = "-";
    std::vector<std::string> dead;  // members with no created-only id left
    for (;;) {
      auto page = impl_->run1({"ZRANGEBYLEX", pre + "cr", after, "+", "LIMIT", "0",
                               std::to_string(kCreatedMembersPerPage)});
      auto c = check(page);
      if (!c) return c.error();
      if (!(*c)->is_array()) return bad_reply();
      std::vector<std::vector<DeliveryId>> members;
      std::vector<DeliveryId> ask;  // their ids not in T act
      std::string last;
      for (const Reply& m : (*c)->elements()) {
        const std::string& b = m.str();
        if (b.empty() || b.size() % 8 != 0)
          return make_error(Errc::kCorruption, "created: bad member");
        std::vector<DeliveryId>& ids = members.emplace_back();
        for (size_t at = 0; at < b.size(); at += 8) {
          const DeliveryId id = get_be64(b.data() + at);
          ids.push_back(id);
          max_seq = std::max(max_seq, id_sequence(id));
          if (!std::binary_search(active.begin(), active.end(), id)) ask.push_back(id);
        }
        last = b;
      }
      if (members.empty()) break;
      std::vector<Delivery> live;  // ascending
      for (size_t from = 0; from < ask.size(); from += kRecoveryChunk) {
        const std::vector<DeliveryId> some(
            ask.begin() + static_cast<ptrdiff_t>(from),
            ask.begin() + static_cast<ptrdiff_t>(std::min(ask.size(), from + kRecoveryChunk)));
        auto ds = impl_->fetch(some);
        if (!ds) return ds.error();
        for (auto& d : *ds) {
          if (d && !is_terminal(d->status)) live.push_back(*d);
        }
      }
      std::sort(live.begin(), live.end(),
                [](const Delivery& a, const Delivery& b) { return a.id < b.id; });
      for (size_t mi = 0; mi < members.size(); ++mi) {
        std::vector<DeliveryId> still;
        for (DeliveryId id : members[mi]) {
          auto it = std::lower_bound(live.begin(), live.end(), id,
                                     [](const Delivery& d, DeliveryId x) { return d.id < x; });
          if (it != live.end() && it->id == id) still.push_back(id);
        }
        if (still.empty()) {
          dead.push_back(CreatedGroups::member_of(members[mi]));
        } else {
          impl_->created.recovered_group(p, std::move(members[mi]), still);
        }
      }
      for (size_t from = 0; from < live.size(); from += kRecoveryChunk) {
        std::vector<Delivery> chunk(
            live.begin() + static_cast<ptrdiff_t>(from),
            live.begin() + static_cast<ptrdiff_t>(std::min(live.size(), from + kRecoveryChunk)));
        if (auto r = settle_chunk(chunk); !r) return r.error();
      }
      if (members.size() < kCreatedMembersPerPage) break;
      after = "(" + last;
    }
    // A member none of whose ids is only created stays so (an id never goes back): whoever
    // removes it, and when, does not matter.
    for (size_t from = 0; from < dead.size(); from += kRecoveryChunk) {
      Cmd zrem{"ZREM", pre + "cr"};
      for (size_t i = from; i < std::min(dead.size(), from + kRecoveryChunk); ++i)
        zrem.push_back(std::move(dead[i]));
      if (auto r = check(impl_->run1(std::move(zrem))); !r) return r.error();
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

}  // namespace ringcast::storage
