// The shard's hand-over in cluster mode (engine/handover.h, docs/cluster.md): the partitions it
// holds taken and loaded, released once their results are durable, lost, forgotten; a write its
// ownership no longer covers is fenced, never acknowledged (SPEC R12.5). Then the inboxes of the
// partitions held here (core/inbox.h): polled, read, and drained through the normal intake;
// entries leave once what they became is durable.
#include "engine/handover.h"

#include <algorithm>
#include <optional>

#include "log/log.h"

namespace ringcast::engine {

// The hand-over below runs in cluster mode only: the lease manager calls it (core_.leased is set).
void HandOver::acquire_partition(Partition p, uint64_t epoch) {
  if (core_.leased == nullptr) return;
  std::erase_if(retry_loads_, [&](const RetryLoad& r) { return r.p == p; });
  if (const HeldPartition* h = core_.leased->find(p)) {
    if (h->epoch == epoch) return;
    forget_partition(p);  // an older epoch of ours: what it had is reloaded below
  }
  if (core_.store.degraded()) {
    // Its writes could not be confirmed now (the load turns back leases and waits for that):
    // try when the store is back rather than block this loop for the load's whole timeout.
    retry_loads_.push_back({p, epoch, core_.loop->now() + milliseconds(200)});
    return;
  }
  if (auto it = loading_.find(p); it != loading_.end() && it->second == epoch) return;
  if (std::find(epoch_resets_.begin(), epoch_resets_.end(), p) != epoch_resets_.end()) {
    // What an older epoch of p took in this turn is not written yet: it must go out at that
    // epoch, not this one (its load would not see it). After this turn's commit.
    retry_loads_.push_back({p, epoch, core_.loop->now()});
    return;
  }
  core_.options.ownership->set_epoch(p, epoch);
  // The load runs off this thread (a networked store loads on a thread of its own): the shard
  // goes on serving its other partitions; p's events go to its inbox meanwhile. An answer for
  // an epoch this shard no longer takes p at (lost, handed over, taken again) is dropped.
  loading_[p] = epoch;
  core_.store.recover_async(p, core_.loop->wall_now(), core_.poster,
                            [this, p, epoch](Result<RecoveredPartition> r) {
                              auto it = loading_.find(p);
                              if (it == loading_.end() || it->second != epoch) return;
                              loading_.erase(it);
                              finish_acquire(p, epoch, std::move(r));
                            });
}

void HandOver::finish_acquire(Partition p, uint64_t epoch, Result<RecoveredPartition> loaded) {
  if (!loaded.ok()) {
    // Not taken yet (Redis failing over, say): tried again every 200 ms while its ownership holds.
    // Nothing of p is sent here meanwhile; its intake goes to its inbox (or not_owner).
    log::warn("partition_load_failed",
              {{"shard", core_.index},
               {"partition", static_cast<unsigned>(p)},
               {"epoch", epoch},
               {"error", loaded.error().message}},
              "shard {}: partition {} (epoch {}) did not load: {}; trying again", core_.index,
              static_cast<unsigned>(p), static_cast<unsigned long long>(epoch),
              loaded.error().message);
    core_.options.ownership->set_epoch(p, 0);
    retry_loads_.push_back({p, epoch, core_.loop->now() + milliseconds(200)});
    return;
  }
  ShardRecovery visitor(core_, core_.loop->wall_now());
  for (const Endpoint& e : loaded->endpoints) visitor.on_endpoint(e);
  for (const Tenant& t : loaded->tenants) visitor.on_tenant(t);
  for (const Delivery& d : loaded->deliveries) visitor.on_delivery(d);
  const RecoveryStats* stats = &loaded->stats;
  if (!core_.missing_policies.empty()) {
    for (const auto& [name, count] : core_.missing_policies) {
      log::warn("policy_missing",
                {{"shard", core_.index},
                 {"partition", static_cast<unsigned>(p)},
                 {"endpoints", count},
                 {"policy", name}},
                "shard {}: partition {}: {} stored endpoint(s) use policy \"{}\", "
                "which is not in the config: they are not served here",
                core_.index, static_cast<unsigned>(p), count, name.c_str());
    }
    core_.missing_policies.clear();
  }
  core_.ids.start_at(p, stats->next_sequence);
  core_.leased->hold(p, epoch);
  next_inbox_poll_ = core_.loop->now();  // what was queued for p while nobody held it: a sweep
  inbox_sweep_now_ = true;
  core_.metrics.partitions_acquired.fetch_add(1, std::memory_order_relaxed);
  core_.loop->wake();
}

void HandOver::retry_failed_loads() {
  if (retry_loads_.empty()) return;
  const MonoTime now = core_.loop->now();
  std::vector<RetryLoad> due;
  for (auto it = retry_loads_.begin(); it != retry_loads_.end();) {
    if (it->at <= now) {
      due.push_back(*it);
      it = retry_loads_.erase(it);
    } else {
      ++it;
    }
  }
  for (const RetryLoad& r : due) {
    // Until its ownership is lost (lose_partition drops the entry): an ownership past its
    // local deadline for a moment (Redis failing over) may be renewed at the same epoch.
    if (core_.options.ownership->valid(r.p, r.epoch, now)) {
      acquire_partition(r.p, r.epoch);
    } else {
      retry_loads_.push_back({r.p, r.epoch, now + milliseconds(200)});
    }
  }
}

void HandOver::release_partition(Partition p, uint64_t epoch, std::function<void()> done) {
  std::erase_if(retry_loads_, [&](const RetryLoad& r) { return r.p == p && r.epoch <= epoch; });
  if (auto it = loading_.find(p); it != loading_.end() && it->second <= epoch) {
    loading_.erase(it);  // still loading: nothing of it here yet (its answer is dropped)
    core_.options.ownership->set_epoch(p, 0);
  }
  HeldPartition* h = core_.leased ? core_.leased->find(p) : nullptr;
  if (h == nullptr || h->epoch != epoch) {
    if (done) done();  // nothing of it here (lost meanwhile, or never loaded)
    return;
  }
  core_.leased->start_release(*h);
  h->done = std::move(done);
  core_.loop->wake();
}

void HandOver::lose_partition(Partition p, uint64_t epoch) {
  std::erase_if(retry_loads_, [&](const RetryLoad& r) { return r.p == p && r.epoch <= epoch; });
  if (auto it = loading_.find(p); it != loading_.end() && it->second <= epoch) {
    loading_.erase(it);
    core_.options.ownership->set_epoch(p, 0);
  }
  HeldPartition* h = core_.leased ? core_.leased->find(p) : nullptr;
  if (h == nullptr || h->epoch != epoch) return;
  std::function<void()> done = std::move(h->done);
  forget_partition(p);
  core_.metrics.partitions_lost.fetch_add(1, std::memory_order_relaxed);
  if (done) done();
}

// A releasing partition is done once nothing of it is on the wire and the batch that wrote
// its last results is durable: the next owner, which takes ownership only after done(),
// then reads everything this node did.
void HandOver::progress_releases() {
  // Every turn: no walk over the held partitions for nothing.
  if (core_.leased == nullptr || core_.leased->releasing() == 0) return;
  std::vector<Partition> finished;
  for (auto& [p, o] : core_.leased->held()) {
    if (!o.releasing || o.in_flight > 0) continue;
    if (!o.flushed) {
      o.flushed = true;
      o.release_seq = core_.batch.last_written();  // this turn's commit already ran
    }
    if (core_.store.durable_seq() >= o.release_seq) finished.push_back(p);
  }
  if (finished.empty()) return;
  std::vector<std::function<void()>> dones;
  for (Partition p : finished) dones.push_back(std::move(core_.leased->find(p)->done));
  forget_partitions(finished);
  core_.metrics.partitions_released.fetch_add(finished.size(), std::memory_order_relaxed);
  for (auto& done : dones) {
    if (done) done();
  }
}

void HandOver::forget_partition(Partition p) {
  forget_partitions({p});
}

void HandOver::forget_partitions(const std::vector<Partition>& list) {
  PartitionSet ps;
  for (Partition p : list) ps.set(p);
  core_.scheduler->drop_partitions(ps);
  core_.payloads.drop_partitions(ps);  // the next owner may reuse seqs a fenced write of ours held
  std::erase_if(core_.known_tenants, [&](const auto& t) { return ps.test(partition_of(t.first)); });
  send_.forget(ps);
  // Requeue jobs of these partitions end here (their worker sees `cancel`); their deliveries
  // are the next owner's now.
  requeue_.forget(ps);
  for (Partition p : list) {
    core_.ids.forget(p);
    if (core_.mutations().empty()) {
      core_.options.ownership->set_epoch(p, 0);
    } else if (std::find(epoch_resets_.begin(), epoch_resets_.end(), p) == epoch_resets_.end()) {
      epoch_resets_.push_back(p);
    }
  }
  core_.leased->forget(list);
}

// After every commit: the epochs of partitions forgotten while the turn's writes were not out yet
// (epoch_resets_) go to 0 once those writes are out.
void HandOver::reset_epochs_after_commit() {
  if (epoch_resets_.empty() || !core_.mutations().empty()) return;
  for (Partition p : epoch_resets_) {
    if (!core_.leased->find(p) && !loading_.count(p)) core_.options.ownership->set_epoch(p, 0);
  }
  epoch_resets_.clear();
}

// ---- the inboxes -----------------------------------------------------------------------------

void HandOver::poll_inboxes() {
  const MonoTime now = core_.loop->now();
  next_inbox_poll_ = now + core_.options.inbox_poll;
  if (core_.store.degraded()) return;  // what is drained could not be written now
  std::vector<std::pair<Partition, std::string>> after;
  for (const auto& [p, o] : core_.leased->held()) {
    if (o.releasing || o.inbox_busy) continue;
    after.emplace_back(p, o.inbox_cursor);
  }
  if (after.empty()) return;
  inbox_polling_ = true;
  ++inbox_ops_;
  // Every inbox now and then (a sweep: a ring can be lost, and what was queued before this
  // shard held a partition rang nobody's bell); between sweeps only the rung ones.
  if (now >= next_inbox_sweep_ || inbox_sweep_now_) {
    next_inbox_sweep_ = now + core_.options.inbox_poll * 20;
    inbox_sweep_now_ = false;
    return read_inboxes(std::move(after));
  }
  std::vector<Partition> mine;
  mine.reserve(after.size());
  for (const auto& a : after) mine.push_back(a.first);
  core_.options.inbox->take_rung(
      std::move(mine), core_.poster,
      [this, after = std::move(after)](Result<std::vector<Partition>> rung) mutable {
        if (!rung.ok() || rung->empty() || core_.draining) {
          --inbox_ops_;
          inbox_polling_ = false;
          return;
        }
        std::erase_if(after, [&](const auto& a) {
          return std::find(rung->begin(), rung->end(), a.first) == rung->end();
        });
        // The rung partitions are read even if their drain starts later: the ring is taken.
        for (auto& a : after) {
          if (auto it = core_.leased->held().find(a.first); it != core_.leased->held().end())
            a.second = it->second.inbox_cursor;
        }
        --inbox_ops_;
        inbox_polling_ = false;
        if (after.empty()) return;
        inbox_polling_ = true;
        ++inbox_ops_;
        read_inboxes(std::move(after));
      });
}

void HandOver::read_inboxes(std::vector<std::pair<Partition, std::string>> after) {
  std::vector<uint64_t> epochs;
  epochs.reserve(after.size());
  for (const auto& a : after) {
    auto it = core_.leased->held().find(a.first);
    epochs.push_back(it == core_.leased->held().end() ? 0 : it->second.epoch);
  }
  const size_t max_each = std::clamp<size_t>(core_.options.max_batch_events, 1, 1000);
  core_.options.inbox->read(
      std::move(after), max_each, core_.poster,
      [this, epochs = std::move(epochs), max_each](Result<std::vector<InboxRead>> r) {
        --inbox_ops_;
        inbox_polling_ = false;
        if (!r.ok()) inbox_sweep_now_ = true;  // the rings taken for it are gone: read them all
        if (!r.ok() || core_.draining) return;
        for (size_t i = 0; i < r->size() && i < epochs.size(); ++i) {
          InboxRead& read = (*r)[i];
          if (read.entries.empty()) continue;
          const bool full = read.entries.size() >= max_each;
          drain_inbox(read.p, epochs[i], std::move(read.entries), full);
        }
      });
}

void HandOver::drain_inbox(Partition p, uint64_t epoch, std::vector<InboxEntry> entries,
                           bool full) {
  auto it = core_.leased->held().find(p);
  if (it == core_.leased->held().end() || it->second.epoch != epoch || it->second.releasing) return;
  it->second.inbox_busy = true;
  std::vector<EventInput> events;
  std::vector<std::string> ids;
  events.reserve(entries.size());
  ids.reserve(entries.size());
  for (InboxEntry& e : entries) {
    ids.push_back(std::move(e.id));
    events.push_back(std::move(e.event));
  }
  std::vector<std::string> fields;
  fields.reserve(events.size());
  for (const EventInput& e : events) {
    std::string f = e.tenant;
    f.push_back('\0');
    f += e.id;
    fields.push_back(std::move(f));
  }
  const std::string from = it->second.inbox_cursor;
  // Answered once what the events became is durable (and not fenced: a fenced write is
  // answered not_owner). Entries whose answer is final leave the inbox; the first one that
  // could not be taken in now (the store, p's ownership) and those after it stay for the next poll.
  intake_.submit_events(
      std::move(events), true,
      [this, p, epoch, full, from, ids = std::move(ids),
       fields = std::move(fields)](std::vector<Result<SubmitResult>> rs) mutable {
        std::vector<std::string> ack_ids, ack_fields;
        std::string cursor = from;
        bool stopped = false;
        for (size_t k = 0; k < rs.size() && k < ids.size(); ++k) {
          const Result<SubmitResult>& r = rs[k];
          if (!r.ok()) {
            const Error& e = r.error();
            const bool final = e.code == Errc::kConflict || e.code == Errc::kNotFound ||
                               e.code == Errc::kInvalidArgument;
            if (!final) {
              stopped = true;
              break;
            }
            core_.metrics.inbox_dropped.fetch_add(1, std::memory_order_relaxed);
            const std::string_view tenant_id = fields[k];  // "<tenant>\0<event id>"
            const size_t nul = tenant_id.find('\0');
            log::warn("inbox_event_dropped",
                      {{"shard", core_.index},
                       {"partition", static_cast<unsigned>(p)},
                       {"tenant", tenant_id.substr(0, nul)},
                       {"event_id", nul == tenant_id.npos ? "" : tenant_id.substr(nul + 1)},
                       {"code", e.reason_or_code()},
                       {"error", e.message}},
                      "shard {}: partition {}: queued event dropped ({}): {}", core_.index,
                      static_cast<unsigned>(p), e.reason_or_code(), e.message ? e.message : "");
          } else {
            core_.metrics.inbox_drained.fetch_add(1, std::memory_order_relaxed);
          }
          ack_ids.push_back(std::move(ids[k]));
          ack_fields.push_back(std::move(fields[k]));
          cursor = ack_ids.back();
        }
        if (!ack_ids.empty())
          core_.options.inbox->ack(p, std::move(ack_ids), std::move(ack_fields));
        auto it = core_.leased->held().find(p);
        if (it == core_.leased->held().end() || it->second.epoch != epoch) return;
        it->second.inbox_busy = false;
        it->second.inbox_cursor = std::move(cursor);
        // More waiting (a full read), or some left for later (a transient error): read
        // every inbox at the next poll — at once after a full read — since no ring says
        // so.
        if (full || stopped) inbox_sweep_now_ = true;
        if (full && !stopped) next_inbox_poll_ = core_.loop->now();
      });
}

}  // namespace ringcast::engine
