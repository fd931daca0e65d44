// Cluster mode: the partitions this shard holds and their hand-over (docs/cluster.md): taken
// and loaded, released once their results are durable, lost, forgotten; a write its ownership no
// longer covers is fenced, never acknowledged (SPEC R12.5).
#include "engine/shard.h"

#include <algorithm>

#include "engine/shard_internal.h"
#include "log/log.h"

namespace ringcast::engine {

Error not_owner_error() {
  return make_error(Errc::kUnavailable,
                    "this node does not own the tenant's partition now: retry on another node, "
                    "or here in a moment",
                    nullptr, "not_owner");
}

bool Shard::serves(std::string_view tenant) const {
  return ownership_->serves(partition_of(tenant));
}

std::vector<std::pair<Partition, uint64_t>> Shard::owned_partitions() const {
  if (leased_ == nullptr) return {};  // one node: every partition, for good (none handed over)
  return leased_->snapshot();
}

// The hand-over below runs in cluster mode only: the lease manager calls it (leased_ is set).
void Shard::acquire_partition(Partition p, uint64_t epoch) {
  if (leased_ == nullptr) return;
  std::erase_if(retry_loads_, [&](const RetryLoad& r) { return r.p == p; });
  if (const HeldPartition* h = leased_->find(p)) {
    if (h->epoch == epoch) return;
    forget_partition(p);  // an older epoch of ours: what it had is reloaded below
  }
  if (store_.degraded()) {
    // Its writes could not be confirmed now (the load turns back leases and waits for that):
    // try when the store is back rather than block this loop for the load's whole timeout.
    retry_loads_.push_back({p, epoch, loop_->now() + milliseconds(200)});
    return;
  }
  if (auto it = loading_.find(p); it != loading_.end() && it->second == epoch) return;
  if (std::find(epoch_resets_.begin(), epoch_resets_.end(), p) != epoch_resets_.end()) {
    // What an older epoch of p took in this turn is not written yet: it must go out at that
    // epoch, not this one (its load would not see it). After this turn's commit.
    retry_loads_.push_back({p, epoch, loop_->now()});
    return;
  }
  options_.ownership->set_epoch(p, epoch);
  // The load runs off this thread (a networked store loads on a thread of its own): the shard
  // goes on serving its other partitions; p's events go to its inbox meanwhile. An answer for
  // an epoch this shard no longer takes p at (lost, handed over, taken again) is dropped.
  loading_[p] = epoch;
  store_.recover_async(p, loop_->wall_now(), poster_,
                       [this, p, epoch](Result<RecoveredPartition> r) {
                         auto it = loading_.find(p);
                         if (it == loading_.end() || it->second != epoch) return;
                         loading_.erase(it);
                         finish_acquire(p, epoch, std::move(r));
                       });
}

void Shard::finish_acquire(Partition p, uint64_t epoch, Result<RecoveredPartition> loaded) {
  if (!loaded.ok()) {
    // Not taken yet (Redis failing over, say): tried again every 200 ms while its ownership holds.
    // Nothing of p is sent here meanwhile; its intake goes to its inbox (or not_owner).
    log::warn("shard {}: partition {} (epoch {}) did not load: {}; trying again", index_,
              static_cast<unsigned>(p), static_cast<unsigned long long>(epoch),
              loaded.error().message);
    options_.ownership->set_epoch(p, 0);
    retry_loads_.push_back({p, epoch, loop_->now() + milliseconds(200)});
    return;
  }
  Recovery visitor(*this, loop_->wall_now());
  for (const Endpoint& e : loaded->endpoints) visitor.on_endpoint(e);
  for (const Tenant& t : loaded->tenants) visitor.on_tenant(t);
  for (const Delivery& d : loaded->deliveries) visitor.on_delivery(d);
  const RecoveryStats* stats = &loaded->stats;
  if (!missing_policies_.empty()) {
    for (const auto& [name, count] : missing_policies_) {
      log::warn(
          "shard {}: partition {}: {} stored endpoint(s) use policy \"{}\", "
          "which is not in the config: they are not served here",
          index_, static_cast<unsigned>(p), count, name.c_str());
    }
    missing_policies_.clear();
  }
  ids_.start_at(p, stats->next_sequence);
  leased_->hold(p, epoch);
  next_inbox_poll_ = loop_->now();  // what was queued for p while nobody held it: a sweep
  inbox_sweep_now_ = true;
  metrics_.partitions_acquired.fetch_add(1, std::memory_order_relaxed);
  loop_->wake();
}

void Shard::retry_failed_loads() {
  if (retry_loads_.empty()) return;
  const MonoTime now = loop_->now();
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
    if (options_.ownership->valid(r.p, r.epoch, now)) {
      acquire_partition(r.p, r.epoch);
    } else {
      retry_loads_.push_back({r.p, r.epoch, now + milliseconds(200)});
    }
  }
}

void Shard::release_partition(Partition p, uint64_t epoch, std::function<void()> done) {
  std::erase_if(retry_loads_, [&](const RetryLoad& r) { return r.p == p && r.epoch <= epoch; });
  if (auto it = loading_.find(p); it != loading_.end() && it->second <= epoch) {
    loading_.erase(it);  // still loading: nothing of it here yet (its answer is dropped)
    options_.ownership->set_epoch(p, 0);
  }
  HeldPartition* h = leased_ ? leased_->find(p) : nullptr;
  if (h == nullptr || h->epoch != epoch) {
    if (done) done();  // nothing of it here (lost meanwhile, or never loaded)
    return;
  }
  leased_->start_release(*h);
  h->done = std::move(done);
  loop_->wake();
}

void Shard::lose_partition(Partition p, uint64_t epoch) {
  std::erase_if(retry_loads_, [&](const RetryLoad& r) { return r.p == p && r.epoch <= epoch; });
  if (auto it = loading_.find(p); it != loading_.end() && it->second <= epoch) {
    loading_.erase(it);
    options_.ownership->set_epoch(p, 0);
  }
  HeldPartition* h = leased_ ? leased_->find(p) : nullptr;
  if (h == nullptr || h->epoch != epoch) return;
  std::function<void()> done = std::move(h->done);
  forget_partition(p);
  metrics_.partitions_lost.fetch_add(1, std::memory_order_relaxed);
  if (done) done();
}

// A releasing partition is done once nothing of it is on the wire and the batch that wrote
// its last results is durable: the next owner, which takes ownership only after done(),
// then reads everything this node did.
void Shard::progress_releases() {
  // Every turn: no walk over the held partitions for nothing.
  if (leased_ == nullptr || leased_->releasing() == 0) return;
  std::vector<Partition> finished;
  for (auto& [p, o] : leased_->held()) {
    if (!o.releasing || o.in_flight > 0) continue;
    if (!o.flushed) {
      o.flushed = true;
      o.release_seq = batch_.last_written();  // this turn's commit already ran
    }
    if (store_.durable_seq() >= o.release_seq) finished.push_back(p);
  }
  if (finished.empty()) return;
  std::vector<std::function<void()>> dones;
  for (Partition p : finished) dones.push_back(std::move(leased_->find(p)->done));
  forget_partitions(finished);
  metrics_.partitions_released.fetch_add(finished.size(), std::memory_order_relaxed);
  for (auto& done : dones) {
    if (done) done();
  }
}

void Shard::forget_partition(Partition p) {
  forget_partitions({p});
}

void Shard::forget_partitions(const std::vector<Partition>& list) {
  PartitionSet ps;
  for (Partition p : list) ps.set(p);
  scheduler_->drop_partitions(ps);
  payloads_.drop_partitions(ps);  // the next owner may reuse seqs a fenced write of ours held
  std::erase_if(known_tenants_, [&](const auto& t) { return ps.test(partition_of(t.first)); });
  std::erase_if(unknown_since_, [&](const auto& u) { return ps.test(id_partition(u.first)); });
  // Requeue jobs of these partitions end here (their worker sees `cancel`); their deliveries
  // are the next owner's now.
  for (auto it = job_live_.begin(); it != job_live_.end();) {
    if (!ps.test(id_partition(it->first))) {
      ++it;
      continue;
    }
    it->second->live.fetch_sub(1, std::memory_order_relaxed);
    it = job_live_.erase(it);
  }
  for (auto& [jid, job] : jobs_) {
    if (!ps.test(id_partition(jid))) continue;
    job->cancel.store(true);
    std::lock_guard<std::mutex> jl(job->mu);
    if (job->view.state == JobView::State::kQueued) {  // never started: it ends here
      job->view.state = JobView::State::kFailed;
      job->view.error = "the tenant's partition moved to another node";
      job->view.finished_at = loop_->wall_now();
    }
  }
  for (Partition p : list) {
    ids_.forget(p);
    if (mutations_.empty()) {
      options_.ownership->set_epoch(p, 0);
    } else if (std::find(epoch_resets_.begin(), epoch_resets_.end(), p) == epoch_resets_.end()) {
      epoch_resets_.push_back(p);
    }
  }
  leased_->forget(list);
}

}  // namespace ringcast::engine
