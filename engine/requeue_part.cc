// The shard's operator repairs on the owner (engine/requeue_part.h; docs/operations.md "Delivery
// log"): an UNKNOWN delivery resolved (SPEC R12.10), resend, replay of the missing deliveries,
// and requeue jobs with their SPEC R14 quotas.
#include "engine/requeue_part.h"

#include <algorithm>
#include <string_view>
#include <utility>

#include "engine/shard_internal.h"

namespace ringcast::engine {

void Requeue::resolve_delivery(DeliveryDetail seen, Resolution verdict, std::string note,
                               Callback<Delivery> done) {
  if (core_.draining) return done(shutting_down());
  const DeliveryId id = seen.delivery.id;
  const auto changed = rewritten_.find(id);
  const bool stale = changed != rewritten_.end() && seen.attempts.size() < changed->second;
  if (stale || seen.delivery.status != DeliveryStatus::kUnknown) {
    return done(make_error(Errc::kConflict,
                           "only a delivery that ended unknown can be resolved, and this one is "
                           "not (any more)",
                           "state", "not_unknown"));
  }
  const WallTime now = core_.loop->wall_now();
  Mutations& mutations = core_.mutations();
  // The history: attempts, then records numbered from kHistoryRecordBase in their order.
  uint16_t number = kHistoryRecordBase;
  WallTime unknown_from = now;
  for (const Attempt& a : seen.attempts) {
    if (is_history_record(a.number)) {
      number = std::max<uint16_t>(number, static_cast<uint16_t>(a.number + 1));
      continue;
    }
    // Written again with the change (see DeliveryPut::rewrite): whichever of them the store
    // kept inside the ended record stays.
    mutations.attempts.push_back(a);
    if (is_check_record(a.number)) continue;
    // R12.8: the UNKNOWN streak that ended it began at the first UNKNOWN after the last
    // definitive outcome.
    if (a.outcome == Outcome::kUnknown) {
      if (unknown_from == now) unknown_from = a.started_at;
    } else {
      unknown_from = now;
    }
  }
  Delivery d = seen.delivery;
  d.status =
      verdict == Resolution::kDelivered ? DeliveryStatus::kDelivered : DeliveryStatus::kFailed;
  d.flags &= static_cast<uint8_t>(~Delivery::kFlagLastUnknown);
  DeliveryPut put;
  put.delivery = d;
  put.tenant_hash = tenant_hash(seen.tenant);
  put.rewrite = true;
  mutations.deliveries.push_back(put);
  Attempt rec;
  rec.delivery = id;
  rec.number = number;
  rec.outcome = verdict == Resolution::kDelivered ? Outcome::kSuccess : Outcome::kRejected;
  rec.code = ErrorCode::of(ErrorCode::Kind::kResolvedByOperator);
  rec.started_at = now;
  rec.response_prefix = std::move(note);
  mutations.attempts.push_back(std::move(rec));
  // SPEC R13.2: a resolved head that blocked its ordering key lets the key go on.
  core_.scheduler->settle_key(d, now, mutations);

  if (rewritten_.emplace(id, seen.attempts.size() + 1).second) {
    rewritten_order_.push_back(id);
    if (rewritten_order_.size() > kRewrittenKept) {
      rewritten_.erase(rewritten_order_.front());
      rewritten_order_.pop_front();
    }
  } else {
    rewritten_[id] = seen.attempts.size() + 1;
  }
  (verdict == Resolution::kDelivered ? core_.metrics.resolved_delivered
                                     : core_.metrics.resolved_failed)
      .fetch_add(1, std::memory_order_relaxed);
  core_.metrics.unknown_duration.observe(std::max(Duration(0), now - unknown_from));
  core_.after_durable([done = std::move(done), d] { done(d); });
}

void Requeue::note_rewritten(DeliveryId id, size_t history) {
  if (rewritten_.emplace(id, history).second) {
    rewritten_order_.push_back(id);
    if (rewritten_order_.size() > kRewrittenKept) {
      rewritten_.erase(rewritten_order_.front());
      rewritten_order_.pop_front();
    }
  } else {
    rewritten_[id] = history;
  }
}

Result<Delivery> Requeue::resend_one(const DeliveryDetail& seen, const std::string& note,
                                     const std::shared_ptr<RequeueJob>& job) {
  const DeliveryId id = seen.delivery.id;
  // A store read older than a change this shard made (a resend racing another, or a
  // resolution): the delivery may be pending again already — the idempotency rule.
  const auto changed = rewritten_.find(id);
  if (changed != rewritten_.end() && seen.attempts.size() < changed->second) {
    return make_error(Errc::kConflict, "the delivery changed meanwhile: it is pending again",
                      "state", "delivery_pending");
  }
  if (!core_.owned_endpoint(seen.tenant, seen.delivery.endpoint)) {
    return make_error(Errc::kNotFound, "the delivery's endpoint was deleted", "endpoint",
                      "unknown_endpoint");
  }
  const WallTime now = core_.loop->wall_now();
  uint16_t number = kHistoryRecordBase;
  for (const Attempt& a : seen.attempts) {
    if (is_history_record(a.number))
      number = std::max<uint16_t>(number, static_cast<uint16_t>(a.number + 1));
  }
  Mutations& mutations = core_.mutations();
  auto r = core_.scheduler->reopen_delivery(seen.delivery, now, mutations);
  if (!r.ok()) return r.error();
  // RocksStore keeps the record that ended a delivery (an attempt or a status check) inside
  // its ended record, which the reopening removes: every record is written again with it (see
  // DeliveryPut::rewrite).
  for (const Attempt& a : seen.attempts) {
    if (!is_history_record(a.number)) mutations.attempts.push_back(a);
  }
  Attempt rec;
  rec.delivery = id;
  rec.number = number;
  rec.outcome = Outcome::kRetryable;
  rec.code = ErrorCode::of(ErrorCode::Kind::kResent);
  rec.started_at = now;
  rec.response_prefix = note.substr(0, kResolutionNoteBytes);
  mutations.attempts.push_back(std::move(rec));
  note_rewritten(id, seen.attempts.size() + 1);
  send_.drop_unknown(id);
  if (job) {
    auto [it, added] = job_live_.emplace(id, job);
    if (added) job->live.fetch_add(1, std::memory_order_relaxed);
  }
  return r;
}

void Requeue::resend_delivery(DeliveryDetail seen, std::string note, Callback<Delivery> done) {
  if (core_.draining) return done(shutting_down());
  auto r = resend_one(seen, note, nullptr);
  if (!r.ok()) return done(r.error());
  core_.after_durable([done = std::move(done), d = *r] { done(d); });
}

void Requeue::replay_event(Event ev, std::vector<EndpointId> have, Callback<uint32_t> done) {
  if (core_.draining) return done(shutting_down());
  if (auto it = replayed_.find(ev.seq); it != replayed_.end()) {
    have.insert(have.end(), it->second.begin(), it->second.end());
  }
  std::sort(have.begin(), have.end());
  std::vector<EndpointId> created;
  const uint32_t n = core_.scheduler->fan_out_missing(ev, have, core_.loop->wall_now(), core_.ids,
                                                      core_.mutations(), &created);
  if (n > 0) {
    auto [it, added] = replayed_.try_emplace(ev.seq);
    it->second.insert(it->second.end(), created.begin(), created.end());
    if (added) {
      replayed_order_.push_back(ev.seq);
      if (replayed_order_.size() > kReplayedKept) {
        replayed_.erase(replayed_order_.front());
        replayed_order_.pop_front();
      }
    }
  }
  core_.after_durable([done = std::move(done), n] { done(n); });
}

void Requeue::start_requeue_job(const std::string& tenant, EndpointId id, WallTime since,
                                WallTime until, Callback<std::shared_ptr<RequeueJob>> done) {
  if (core_.draining) return done(shutting_down());
  const Endpoint* e = core_.owned_endpoint(tenant, id);
  if (!e) return done(unknown_endpoint());
  if (e->state == EndpointState::kDisabled) {  // SPEC R8.5
    return done(make_error(Errc::kConflict, "the endpoint is disabled: enable it first", "endpoint",
                           "endpoint_disabled"));
  }
  // SPEC R14 quotas: one job per tenant, running or queued, so one tenant cannot take the
  // shard's job slots or its queue from the others; past the running slots a bounded FIFO.
  uint32_t running = 0;
  for (const auto& [jid, job] : jobs_) {
    const JobView::State st = job->snapshot().state;
    if (st != JobView::State::kRunning && st != JobView::State::kQueued) continue;
    if (st == JobView::State::kRunning) ++running;
    if (job->view.tenant == tenant) {
      return done(make_error(Errc::kLimitExceeded,
                             "a recover job of this tenant is running or queued: wait for it to "
                             "end (one per tenant)",
                             "tenant", "too_many_jobs"));
    }
  }
  const bool queue = running >= std::max<uint32_t>(1, core_.options.max_requeue_jobs);
  if (queue && job_queue_.size() >= core_.options.max_queued_requeue_jobs) {
    return done(make_error(Errc::kLimitExceeded,
                           "too many recover jobs are running and queued on this node",
                           "limits.recover_jobs_queued", "too_many_jobs"));
  }
  auto job = std::make_shared<RequeueJob>();
  job->view.id = core_.next_id(partition_of(tenant));
  job->view.tenant = tenant;
  job->view.endpoint = id;
  job->view.since = since;
  job->view.until = until;
  job->view.queued_at = core_.loop->wall_now();
  if (queue) {
    job->view.state = JobView::State::kQueued;
    job_queue_.push_back(job->view.id);
  } else {
    job->view.started_at = job->view.queued_at;
  }
  jobs_.emplace(job->view.id, job);
  jobs_order_.push_back(job->view.id);
  // Forget the oldest jobs that have ended (a running or queued one stays).
  for (size_t tries = jobs_order_.size(); jobs_order_.size() > kJobsKept && tries > 0; --tries) {
    const uint64_t oldest = jobs_order_.front();
    jobs_order_.pop_front();
    auto it = jobs_.find(oldest);
    const JobView::State st =
        it != jobs_.end() ? it->second->snapshot().state : JobView::State::kDone;
    if (st == JobView::State::kRunning || st == JobView::State::kQueued) {
      jobs_order_.push_back(oldest);
    } else if (it != jobs_.end()) {
      jobs_.erase(it);
    }
  }
  done(job);
}

std::shared_ptr<RequeueJob> Requeue::next_requeue_job() {
  uint32_t running = 0;
  for (const auto& [jid, job] : jobs_) {
    if (job->snapshot().state == JobView::State::kRunning) ++running;
  }
  while (!job_queue_.empty() && running < std::max<uint32_t>(1, core_.options.max_requeue_jobs)) {
    const uint64_t id = job_queue_.front();
    job_queue_.pop_front();
    auto it = jobs_.find(id);
    if (it == jobs_.end()) continue;
    std::shared_ptr<RequeueJob> job = it->second;
    std::lock_guard<std::mutex> lock(job->mu);
    if (job->view.state != JobView::State::kQueued) continue;  // ended while it waited
    job->view.state = JobView::State::kRunning;
    job->view.started_at = core_.loop->wall_now();
    return job;
  }
  return nullptr;
}

void Requeue::resend_batch(std::vector<DeliveryDetail> seen, std::shared_ptr<RequeueJob> job,
                           Callback<ResendCounts> done) {
  if (core_.draining) return done(shutting_down());
  if (job->cancel.load()) {
    return done(make_error(Errc::kUnavailable, "the tenant's partition moved to another node",
                           nullptr, "not_owner"));
  }
  ResendCounts c;
  std::string note = "recover job ";  // built by appends (GCC 12: no false -Wrestrict)
  note += std::to_string(job->view.id);
  for (const DeliveryDetail& d : seen) {
    auto r = resend_one(d, note, job);
    if (r.ok()) {
      ++c.requeued;
      continue;
    }
    const char* reason = r.error().reason;
    const std::string_view why = reason != nullptr ? reason : "";
    if (why == "endpoint_disabled" || why == "unknown_endpoint") {
      Error err = r.error();
      core_.after_durable([done, err] { done(err); });  // what was re-queued before it is written
      return;
    }
    ++c.skipped;  // pending again, or a test delivery
  }
  core_.after_durable([done = std::move(done), c] { done(c); });
}

void Requeue::get_job(const std::string& tenant, uint64_t id, Callback<JobView> done) {
  auto it = jobs_.find(id);
  if (it == jobs_.end() || it->second->view.tenant != tenant) {
    return done(make_error(Errc::kNotFound, "no such job for this tenant", "job", "unknown_job"));
  }
  done(it->second->snapshot());
}

// A written batch (Shard::on_written): a requeue job's delivery ended again.
void Requeue::delivery_ended(DeliveryId id) {
  if (!job_live_.empty()) {  // a requeue job's delivery ended again
    if (auto it = job_live_.find(id); it != job_live_.end()) {
      it->second->live.fetch_sub(1, std::memory_order_relaxed);
      job_live_.erase(it);
    }
  }
}

void Requeue::forget(const PartitionSet& ps) {
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
      job->view.finished_at = core_.loop->wall_now();
    }
  }
}

}  // namespace ringcast::engine
