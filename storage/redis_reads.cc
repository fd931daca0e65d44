// The Redis store's reads (docs/cluster.md "Reads", "Reads wait for the replay while the store
// is degraded", "Delivery-log reads"): sent on the loop thread behind the writes issued before
// them; key lookups, point reads, the delivery-log and notification queries.
#include "storage/redis_store.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/result.h"
#include "core/store.h"
#include "core/types.h"
#include "net/loop.h"
#include "redis/client.h"
#include "redis/reply.h"
#include "storage/codec.h"
#include "storage/log_query.h"
#include "storage/redis_store_internal.h"

namespace ringcast::storage {

namespace {

Error redis_error(const Reply& r) {
  if (r.error_is("CONFLICT"))
    return make_error(Errc::kConflict, "an event with this id already exists for the tenant", "id",
                      "conflict");
  if (r.error_is("NOSCRIPT")) return make_error(Errc::kInternal, "redis: script not loaded");
  return make_error(Errc::kUnavailable, "redis answered an error", nullptr, "redis_error");
}

}  // namespace

namespace redis_detail {

// The reply of a command, or why it has none / an error one.
Result<const Reply*> check(const Result<Reply>& r) {
  if (!r.ok()) return r.error();
  if (r->is_error()) return redis_error(*r);
  return &*r;
}

Error bad_reply() {
  return make_error(Errc::kCorruption, "redis: unexpected reply type");
}

}  // namespace redis_detail

namespace {

Result<std::vector<std::optional<EventKeyRecord>>> parse_key_lookup(const KeyLookup& l,
                                                                    const Replies& rs) {
  std::vector<std::optional<EventKeyRecord>> out(l.n);
  // Accepted keys first; a queued one answers only where no accepted one does, as a record
  // of seq 0 (ShardIntake::take_in: "queued").
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
          // T ik: be64(payload hash), then the message id given when it was queued.
          if (!slot) {
            slot = EventKeyRecord{0, get_be64(v.data()), 0,
                                  message_id_bits(std::string_view(v).substr(8))};
          }
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

}  // namespace

void RedisStore::Impl::send_parked_reads() {
  // A read parks again if the replay was put off meanwhile (replay_armed).
  for (Read& r : std::exchange(parked_reads, {})) send_read(std::move(r));
}

// At close: what is still parked gets an error, like what was sent and not answered.
void RedisStore::Impl::fail_parked_reads() {
  for (Read& r : std::exchange(parked_reads, {})) {
    r.then(Replies(r.cmds.size(),
                   Result<Reply>(make_error(Errc::kUnavailable, "redis store closed"))));
  }
}

// Sends every command (pipelined, in order), then calls `then` with every answer.
void RedisStore::Impl::send_all(std::vector<Cmd> cmds, std::function<void(Replies)> then,
                                const redis::CommandOptions& co) {
  send_read(Read{std::move(cmds), std::move(then), co});
}

void RedisStore::Impl::send_read(Read r) {
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

void RedisStore::Impl::gathered(Read& r, Replies out, uint64_t lost_before) {
  const bool answered =
      std::any_of(out.begin(), out.end(), [](const Result<Reply>& x) { return x.ok(); });
  if (!answered || lost_before == writes_lost || closing) return r.then(std::move(out));
  if (++r.stale > kMaxStaleReads) {
    return r.then(Replies(
        out.size(), Result<Reply>(make_error(Errc::kUnavailable,
                                             "redis store: writes issued before this read are not "
                                             "confirmed (they are being sent again)"))));
  }
  send_read(std::move(r));
}

Replies RedisStore::Impl::run(std::vector<Cmd> cmds, const redis::CommandOptions& co) {
  // Shared: the loop thread may still be inside set_value() when this thread wakes.
  auto pr = std::make_shared<std::promise<Replies>>();
  auto fut = pr->get_future();
  post([this, pr, co, cmds = std::move(cmds)]() mutable {
    send_all(
        std::move(cmds), [pr](Replies r) { pr->set_value(std::move(r)); }, co);
  });
  return fut.get();
}

Result<Reply> RedisStore::Impl::run1(Cmd cmd) {
  std::vector<Cmd> v;
  v.push_back(std::move(cmd));
  Replies r = run(std::move(v));
  return std::move(r[0]);
}

KeyLookup RedisStore::Impl::key_lookup(const std::vector<EventKeyRef>& keys) {
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

RedisStore::Impl::HmgetPlan RedisStore::Impl::hmget_plan(const std::vector<uint64_t>& ids,
                                                         std::string_view suffix) const {
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

// Deliveries by id (one HMGET per partition), aligned with `ids`.
Result<std::vector<std::optional<Delivery>>> RedisStore::Impl::fetch(
    const std::vector<DeliveryId>& ids) {
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
// The semantics are storage/log_query.h's; here only how the index ZSETs are read.

namespace {

// A lexicographic index ZSET of be64(~id) members (T ti:, T ei:), newest first, read with
// ZRANGEBYLEX from an exclusive bound (the cursor: "(" + the last member read). `chunk`: ids per
// read at most. `once`: the index is read once, `at_most` members (recent_deliveries); else each
// read asks one member more, which only says whether the index goes on.
class IndexScan final : public DeliveryScan {
 public:
  IndexScan(RedisStore::Impl& impl, std::string key, std::optional<DeliveryId> after, size_t chunk,
            bool once, const char* bad_member)
      : impl_(impl),
        key_(std::move(key)),
        from_(after ? exclusive(*after) : std::string("-")),
        chunk_(chunk),
        once_(once),
        bad_member_(bad_member) {}

  Result<std::vector<DeliveryId>> next(size_t at_most) override {
    const size_t n = std::min(at_most, chunk_);
    auto r = impl_.run1(
        {"ZRANGEBYLEX", key_, from_, "+", "LIMIT", "0", std::to_string(once_ ? n : n + 1)});
    auto c = check(r);
    if (!c) return c.error();
    if (!(*c)->is_array()) return bad_reply();
    std::vector<DeliveryId> ids;
    for (const Reply& m : (*c)->elements()) {
      if (m.str().size() != 8) return make_error(Errc::kCorruption, bad_member_);
      ids.push_back(~get_be64(m.str().data()));
    }
    goes_on_ = !once_ && ids.size() > n;
    if (goes_on_) ids.pop_back();
    if (!ids.empty()) from_ = exclusive(ids.back());
    return ids;
  }
  bool goes_on() const override { return goes_on_; }
  Result<std::vector<std::optional<Delivery>>> fetch(const std::vector<DeliveryId>& ids) override {
    return impl_.fetch(ids);
  }

 private:
  // "(" + member, built by appends: GCC 12's false -Wrestrict at -O3 on "literal" +
  // std::string&&.
  static std::string exclusive(DeliveryId id) {
    std::string k = "(";
    k += be64s(~id);
    return k;
  }

  RedisStore::Impl& impl_;
  const std::string key_;
  std::string from_;
  const size_t chunk_;
  const bool once_;
  const char* bad_member_;
  bool goes_on_ = false;
};

// A tenant hash's notification ZSET (T nt:<hex th>, members be64(~seq) + the notification),
// newest first, read once: `at_most` members.
class NotesScan final : public NotificationScan {
 public:
  NotesScan(RedisStore::Impl& impl, uint64_t th) : impl_(impl), th_(th) {}

  Result<std::vector<Notification>> next(size_t at_most) override {
    auto r =
        impl_.run1({"ZRANGEBYLEX", impl_.prefix(partition_of_hash(th_)) + notifications_key(th_),
                    "-", "+", "LIMIT", "0", std::to_string(at_most)});
    auto c = check(r);
    if (!c) return c.error();
    if (!(*c)->is_array()) return bad_reply();
    std::vector<Notification> out;
    for (const Reply& m : (*c)->elements()) {
      const std::string& s = m.str();
      if (s.size() < 8) return make_error(Errc::kCorruption, "notification: bad member");
      auto k = notification_key(th_, ~get_be64(s.data()));
      auto n = decode_notification(k.view(), std::string_view(s).substr(8));
      if (!n) return n.error();
      out.push_back(std::move(*n));
    }
    return out;
  }
  bool goes_on() const override { return false; }

 private:
  RedisStore::Impl& impl_;
  const uint64_t th_;
};

}  // namespace

// One read of the tenant index, as many members as asked: a delivery retention removed between
// that read and the fetch leaves the list short (it is not read again).
Result<std::vector<Delivery>> RedisStore::recent_deliveries(std::string_view tenant, size_t limit) {
  const uint64_t th = tenant_hash(tenant);
  IndexScan scan(*impl_, impl_->prefix(partition_of_hash(th)) + tenant_index(th), std::nullopt,
                 SIZE_MAX, /*once=*/true, "tenant index: bad member");
  return collect_recent(limit, scan);
}

Result<DeliveryPage> RedisStore::list_deliveries(std::string_view tenant,
                                                 std::optional<EndpointId> endpoint,
                                                 std::optional<DeliveryStatus> status, size_t limit,
                                                 std::string_view cursor) {
  auto q = page_query(status, limit, cursor);
  if (!q) return q.error();
  const uint64_t th = tenant_hash(tenant);
  std::string key = impl_->prefix(partition_of_hash(th));
  key += endpoint ? endpoint_index(th, *endpoint) : tenant_index(th);
  // A chunk as large as the page (at least kListFetchChunk, at most 1 000): a page of 1 000 is
  // then two round trips, not 32 (the filters may need more).
  IndexScan scan(*impl_, std::move(key), q->after,
                 std::clamp<size_t>(q->limit, kListFetchChunk, 1000), /*once=*/false,
                 "delivery index: bad member");
  return collect_page(*q, scan);
}

// One read of the notification index, as many members as asked: a member of another tenant with
// the same hash leaves the list short (it is not read again).
Result<std::vector<Notification>> RedisStore::list_notifications(std::string_view tenant,
                                                                 size_t limit) {
  NotesScan scan(*impl_, tenant_hash(tenant));
  return collect_notifications(tenant, limit, scan);
}

}  // namespace ringcast::storage
