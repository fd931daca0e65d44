#include "engine/engine_impl.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

#include "net/system_clock.h"

namespace ringcast::engine {

namespace {
constexpr size_t kRecentDeliveries = 25;  // SPEC R10.2

}  // namespace

void EngineImpl::acquire_partition(Partition p, uint64_t epoch) {
  Shard& s = *shards_[p % shards_.size()];
  if (s.running()) s.post([p, epoch](Shard& sh) { sh.acquire_partition(p, epoch); });
}

void EngineImpl::release_partition(Partition p, uint64_t epoch, std::function<void()> done) {
  Shard& s = *shards_[p % shards_.size()];
  if (!s.running()) return done();  // stopped: its results are flushed already
  s.post([p, epoch, done = std::move(done)](Shard& sh) mutable {
    sh.release_partition(p, epoch, std::move(done));
  });
}

void EngineImpl::lose_partition(Partition p, uint64_t epoch) {
  Shard& s = *shards_[p % shards_.size()];
  if (s.running()) s.post([p, epoch](Shard& sh) { sh.lose_partition(p, epoch); });
}

std::vector<std::pair<Partition, uint64_t>> EngineImpl::owned_partitions() const {
  std::vector<std::pair<Partition, uint64_t>> out;
  for (const auto& s : shards_) {
    auto o = s->owned_partitions();
    out.insert(out.end(), o.begin(), o.end());
  }
  std::sort(out.begin(), out.end());
  return out;
}

EngineImpl::EngineImpl(EngineOptions options, Store& store)
    : options_(std::move(options)), store_(store) {}

Result<std::unique_ptr<EngineImpl>> EngineImpl::start(EngineOptions options, Store& store,
                                                      std::string* why) {
  if (options.shards == 0 || options.shards > kPartitions)
    return make_error(Errc::kInvalidArgument, "shards must be between 1 and 256", "engine.shards");
  if (!options.transport_factory)
    return make_error(Errc::kInvalidArgument, "no transport factory", "transport");
  std::unique_ptr<EngineImpl> e(new EngineImpl(std::move(options), store));
  uint32_t n = e->options_.shards;
  for (uint32_t i = 0; i < n; ++i)
    e->shards_.push_back(std::make_unique<Shard>(i, e->options_, store));
  std::optional<Error> policy_error;  // every shard recovers, so the count is complete
  std::map<std::string, uint32_t> missing;
  for (uint32_t i = 0; i < n; ++i) {
    std::vector<Partition> parts;  // cluster mode: none yet (acquire_partition hands them over)
    if (!e->options_.ownership) {
      for (uint32_t p = i; p < kPartitions; p += n) parts.push_back(static_cast<Partition>(p));
    }
    auto r = e->shards_[i]->start(std::move(parts));
    if (r.ok()) continue;
    const char* reason = r.error().reason;
    if (reason != nullptr && std::string_view(reason) == "unknown_policy") {
      policy_error = r.error();
      for (const auto& [name, count] : e->shards_[i]->missing_policies()) missing[name] += count;
      continue;
    }
    e->stop();
    return r.error();
  }
  if (policy_error) {
    e->stop();
    if (why != nullptr) {  // operations.md "Validation": which policy, how many endpoints use it
      why->clear();
      for (const auto& [name, count] : missing) {
        if (!why->empty()) why->append("; ");
        *why += "policy \"" + name + "\" is not in the config but " + std::to_string(count) +
                (count == 1 ? " stored endpoint uses it" : " stored endpoints use it");
      }
      why->append(
          " (put [policies.<name>] back, move those endpoints to another policy with "
          "`ringcast endpoints update --policy`, then remove it)");
    }
    return *policy_error;
  }
  return e;
}

EngineImpl::~EngineImpl() {
  stop();
}

void EngineImpl::stop() {
  if (stopped_.exchange(true)) return;
  std::vector<std::pair<std::thread, std::shared_ptr<RequeueJob>>> jobs;
  {
    std::lock_guard<std::mutex> lock(jobs_mu_);
    jobs.swap(job_threads_);
  }
  for (auto& t : jobs) t.first.join();  // each sees stopped_ within ~100 ms
  for (auto& s : shards_) s->stop();
}

#define RINGCAST_ROUTE(tenant, call)                                                              \
  do {                                                                                            \
    Shard& shard = shard_for(tenant);                                                             \
    if (!shard.running()) {                                                                       \
      return done(                                                                                \
          make_error(Errc::kUnavailable, "the engine is not running", nullptr, "shutting_down")); \
    }                                                                                             \
    shard.post([t_ = std::string(tenant), done, fn_ = call](Shard& s) mutable {                   \
      if (!s.serves(t_)) return done(not_owner_error());                                          \
      fn_(s);                                                                                     \
    });                                                                                           \
  } while (0)

void EngineImpl::create_endpoint(std::string tenant, EndpointSpec spec, Callback<Endpoint> done) {
  RINGCAST_ROUTE(tenant, ([tenant, spec = std::move(spec), done](Shard& s) mutable {
                   s.create_endpoint(std::move(tenant), std::move(spec), std::move(done));
                 }));
}

void EngineImpl::list_endpoints(std::string tenant, Callback<std::vector<Endpoint>> done) {
  RINGCAST_ROUTE(tenant,
                 ([tenant, done](Shard& s) mutable { s.list_endpoints(tenant, std::move(done)); }));
}

void EngineImpl::get_endpoint(std::string tenant, EndpointId id, Callback<Endpoint> done) {
  RINGCAST_ROUTE(tenant, ([tenant, id, done](Shard& s) mutable {
                   s.get_endpoint(tenant, id, std::move(done));
                 }));
}

void EngineImpl::update_endpoint(std::string tenant, EndpointId id, EndpointPatch patch,
                                 Callback<Endpoint> done) {
  RINGCAST_ROUTE(tenant, ([tenant, id, patch = std::move(patch), done](Shard& s) mutable {
                   s.update_endpoint(tenant, id, std::move(patch), std::move(done));
                 }));
}

void EngineImpl::delete_endpoint(std::string tenant, EndpointId id, Callback<bool> done) {
  RINGCAST_ROUTE(tenant, ([tenant, id, done](Shard& s) mutable {
                   s.delete_endpoint(tenant, id, std::move(done));
                 }));
}

void EngineImpl::endpoint_action(std::string tenant, EndpointId id, EndpointAction action,
                                 Callback<Endpoint> done) {
  RINGCAST_ROUTE(tenant, ([tenant, id, action, done](Shard& s) mutable {
                   s.endpoint_action(tenant, id, action, std::move(done));
                 }));
}

void EngineImpl::test_endpoint(std::string tenant, EndpointId id, Callback<DeliveryId> done) {
  RINGCAST_ROUTE(tenant, ([tenant, id, done](Shard& s) mutable {
                   s.test_endpoint(tenant, id, std::move(done));
                 }));
}

// An operator's change of a delivery (resolve, resend): the note's bound, then the delivery as
// the store has it, read on the caller's thread like get_delivery; the owning shard decides.
Result<DeliveryDetail> EngineImpl::ended_delivery_for(std::string_view tenant, DeliveryId id,
                                                      const std::string& note) {
  if (note.size() > kResolutionNoteBytes) {
    return make_error(Errc::kInvalidArgument, "note must be at most 512 bytes", "note", "too_long");
  }
  auto read = get_delivery(tenant, id);
  if (!read) return read.error();
  if (!read->has_value() || (*read)->tenant != tenant) {
    return make_error(Errc::kNotFound, "no such delivery for this tenant", "delivery",
                      "unknown_delivery");
  }
  return std::move(**read);
}

void EngineImpl::resolve_delivery(std::string tenant, DeliveryId id, Resolution verdict,
                                  std::string note, Callback<Delivery> done) {
  auto read = ended_delivery_for(tenant, id, note);
  if (!read) return done(read.error());
  RINGCAST_ROUTE(
      tenant, ([seen = std::move(*read), verdict, note = std::move(note), done](Shard& s) mutable {
        s.resolve_delivery(std::move(seen), verdict, std::move(note), std::move(done));
      }));
}

// ---- replay (docs/operations.md "Delivery log") -------------------------------------------------

void EngineImpl::resend_delivery(std::string tenant, DeliveryId id, std::string note,
                                 Callback<Delivery> done) {
  auto read = ended_delivery_for(tenant, id, note);
  if (!read) return done(read.error());
  RINGCAST_ROUTE(tenant,
                 ([seen = std::move(*read), note = std::move(note), done](Shard& s) mutable {
                   s.resend_delivery(std::move(seen), std::move(note), std::move(done));
                 }));
}

void EngineImpl::replay_event(std::string tenant, std::string event_id, Callback<uint32_t> done) {
  auto ev = store_.find_event(tenant, event_id);  // on the caller's thread, like get_event
  if (!ev) return done(ev.error());
  if (!ev->has_value()) {
    return done(
        make_error(Errc::kNotFound, "no such event for this tenant", "event", "unknown_event"));
  }
  auto had = store_.event_deliveries((*ev)->seq);
  if (!had) return done(had.error());
  std::vector<EndpointId> have;
  have.reserve(had->size());
  for (const Delivery& d : *had) {
    if (!d.test()) have.push_back(d.endpoint);
  }
  RINGCAST_ROUTE(tenant, ([ev = std::move(**ev), have = std::move(have), done](Shard& s) mutable {
                   s.replay_event(std::move(ev), std::move(have), std::move(done));
                 }));
}

void EngineImpl::requeue_endpoint(std::string tenant, EndpointId id, WallTime since, WallTime until,
                                  Callback<JobView> done) {
  if (until < since) {
    return done(make_error(Errc::kInvalidArgument, "until must not be before since", "until",
                           "invalid_value"));
  }
  RINGCAST_ROUTE(tenant, ([this, tenant, id, since, until, done](Shard& s) mutable {
                   s.start_requeue_job(tenant, id, since, until,
                                       [this, done](Result<std::shared_ptr<RequeueJob>> r) {
                                         if (!r) return done(r.error());
                                         std::shared_ptr<RequeueJob> job = *r;
                                         // A queued job's worker starts when a running one ends.
                                         if (job->snapshot().state == JobView::State::kRunning) {
                                           start_job_worker(job);
                                         }
                                         done(job->snapshot());
                                       });
                 }));
}

void EngineImpl::start_job_worker(const std::shared_ptr<RequeueJob>& job) {
  std::lock_guard<std::mutex> lock(jobs_mu_);
  if (stopped_.load()) {
    std::lock_guard<std::mutex> jl(job->mu);
    job->view.state = JobView::State::kFailed;
    job->view.error = "the engine is shutting down";
    return;
  }
  // Join the threads of jobs that have ended (they are returning).
  for (auto it = job_threads_.begin(); it != job_threads_.end();) {
    if (it->second->snapshot().state == JobView::State::kRunning) {
      ++it;
      continue;
    }
    it->first.join();
    it = job_threads_.erase(it);
  }
  job_threads_.emplace_back(std::thread([this, job] {
                              run_requeue(job);
                              // Its slot is free: the oldest queued job of the shard starts.
                              Shard& shard = shard_for(job->view.tenant);
                              if (stopped_.load() || !shard.running()) return;
                              shard.post([this](Shard& s) {
                                while (auto next = s.next_requeue_job()) start_job_worker(next);
                              });
                            }),
                            job);
}

void EngineImpl::get_job(std::string tenant, uint64_t id, Callback<JobView> done) {
  RINGCAST_ROUTE(
      tenant, ([tenant, id, done](Shard& s) mutable { s.get_job(tenant, id, std::move(done)); }));
}

// A requeue job, on a thread of its own: the store is read here (never on a shard's loop: a
// networked store would block it), the resends go to the owning shard in batches, at most
// options_.recover_max_in_flight of the job's deliveries live at once.
void EngineImpl::run_requeue(std::shared_ptr<RequeueJob> job) {
  net::SystemClock clock;
  const std::string tenant = job->view.tenant;
  const EndpointId endpoint = job->view.endpoint;
  const WallTime since = job->view.since, until = job->view.until;
  auto end = [&](JobView::State st, std::string why) {
    std::lock_guard<std::mutex> lock(job->mu);
    job->view.state = st;
    job->view.error = std::move(why);
    job->view.finished_at = clock.wall_now();
  };
  auto stopping = [&] { return stopped_.load() || job->cancel.load(); };
  // 1. The endpoint's deliveries in the window that ended failed, dead or unknown. Listed
  //    newest first, every page (a resend restarts created_at, so the id order is not the
  //    created_at order: no early stop).
  std::vector<DeliveryId> ids;
  std::string cursor;
  do {
    if (stopping()) return end(JobView::State::kFailed, "stopped before it finished");
    auto page = store_.list_deliveries(tenant, endpoint, std::nullopt, 1000, cursor);
    if (!page) return end(JobView::State::kFailed, page.error().message);
    for (const Delivery& d : page->items) {
      const bool ended = d.status == DeliveryStatus::kFailed || d.status == DeliveryStatus::kDead ||
                         d.status == DeliveryStatus::kUnknown;
      if (ended && !d.test() && d.created_at >= since && d.created_at <= until) {
        ids.push_back(d.id);
      }
    }
    cursor = page->next_cursor;
    std::lock_guard<std::mutex> lock(job->mu);
    job->view.scanned += page->items.size();
    job->view.total = ids.size();
  } while (!cursor.empty());
  {
    std::lock_guard<std::mutex> lock(job->mu);
    job->view.scan_done = true;
  }
  // 2. Re-queue them, oldest first, in batches within the in-flight bound.
  std::reverse(ids.begin(), ids.end());
  const uint32_t bound = std::max<uint32_t>(1, options_.recover_max_in_flight);
  constexpr size_t kBatch = 100;
  size_t next = 0;
  while (next < ids.size()) {
    if (stopping()) return end(JobView::State::kFailed, "stopped before it finished");
    const uint32_t live = job->live.load(std::memory_order_relaxed);
    if (live >= bound) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      continue;
    }
    const size_t take = std::min<size_t>({kBatch, bound - live, ids.size() - next});
    std::vector<DeliveryDetail> batch;
    uint64_t skipped = 0;
    auto read = get_deliveries(
        tenant, std::vector<DeliveryId>(ids.begin() + static_cast<std::ptrdiff_t>(next),
                                        ids.begin() + static_cast<std::ptrdiff_t>(next + take)));
    if (!read) return end(JobView::State::kFailed, read.error().message);
    for (auto& r : *read) {
      if (!r || !is_terminal(r->delivery.status)) {
        ++skipped;  // gone (retention) or pending again already
        continue;
      }
      batch.push_back(std::move(*r));
    }
    next += take;
    ResendCounts counts;
    if (!batch.empty()) {
      auto answer = std::make_shared<std::promise<Result<ResendCounts>>>();
      auto got = answer->get_future();
      Shard& shard = shard_for(tenant);
      if (!shard.running()) return end(JobView::State::kFailed, "the engine is shutting down");
      shard.post([tenant, job, batch = std::move(batch), answer](Shard& s) mutable {
        if (!s.serves(tenant)) return answer->set_value(not_owner_error());
        s.resend_batch(std::move(batch), job,
                       [answer](Result<ResendCounts> r) { answer->set_value(std::move(r)); });
      });
      while (got.wait_for(std::chrono::milliseconds(100)) != std::future_status::ready) {
        if (stopped_.load()) return end(JobView::State::kFailed, "the engine is shutting down");
      }
      Result<ResendCounts> r = got.get();
      if (!r) return end(JobView::State::kFailed, r.error().message);
      counts = *r;
    }
    std::lock_guard<std::mutex> lock(job->mu);
    job->view.requeued += counts.requeued;
    job->view.skipped += counts.skipped + skipped;
  }
  end(JobView::State::kDone, "");
}

void EngineImpl::rotate_secret(std::string tenant, EndpointId id, std::optional<std::string> secret,
                               Callback<Endpoint> done) {
  RINGCAST_ROUTE(tenant, ([tenant, id, secret = std::move(secret), done](Shard& s) mutable {
                   s.rotate_secret(tenant, id, std::move(secret), std::move(done));
                 }));
}

namespace {

// SPEC R14: a tenant over limits.tenant_events_per_second on this node.
Error rate_limited() {
  return make_error(Errc::kLimitExceeded,
                    "this tenant sends more events per second than it may: retry in a second",
                    "limits.tenant_events_per_second", "tenant_rate_limited");
}

}  // namespace

void EngineImpl::submit(EventInput event, Callback<SubmitResult> done) {
  // Not RINGCAST_ROUTE: the shard decides about a partition it does not serve (cluster mode:
  // the event goes to the partition's inbox, core/inbox.h, or is answered not_owner).
  Shard& shard = shard_for(event.tenant);
  if (!shard.running()) {
    return done(
        make_error(Errc::kUnavailable, "the engine is not running", nullptr, "shutting_down"));
  }
  if (!tenant_rate_.take(event.tenant, net::SystemClock().mono_now())) return done(rate_limited());
  shard.post([event = std::move(event), done](Shard& s) mutable {
    s.submit(std::move(event), std::move(done));
  });
}

void EngineImpl::submit_batch(std::vector<EventInput> events,
                              std::function<void(std::vector<Result<SubmitResult>>)> done) {
  // Split by shard, one post per shard; the last shard to answer answers in input order.
  struct Gather {
    std::mutex mu;
    std::vector<Result<SubmitResult>> results;
    size_t shards_left = 0;
    std::function<void(std::vector<Result<SubmitResult>>)> done;
  };
  if (events.empty()) return done({});
  auto g = std::make_shared<Gather>();
  g->results.resize(events.size(), Result<SubmitResult>(SubmitResult{}));
  g->done = std::move(done);
  std::vector<std::vector<size_t>> index(shards_.size());
  std::vector<std::vector<EventInput>> per_shard(shards_.size());
  const MonoTime now = net::SystemClock().mono_now();
  for (size_t i = 0; i < events.size(); ++i) {
    if (!tenant_rate_.take(events[i].tenant, now)) {  // not taken in: the producer retries it
      g->results[i] = rate_limited();
      continue;
    }
    size_t s = partition_of(events[i].tenant) % shards_.size();
    index[s].push_back(i);
    per_shard[s].push_back(std::move(events[i]));
  }
  for (const auto& ix : index) g->shards_left += ix.empty() ? 0 : 1;
  if (g->shards_left == 0) return g->done(std::move(g->results));
  auto finish = [g](const std::vector<size_t>& ix, std::vector<Result<SubmitResult>> rs) {
    bool last;
    {
      std::lock_guard<std::mutex> lock(g->mu);
      for (size_t k = 0; k < ix.size(); ++k) g->results[ix[k]] = std::move(rs[k]);
      last = --g->shards_left == 0;
    }
    if (last) g->done(std::move(g->results));
  };
  for (size_t s = 0; s < shards_.size(); ++s) {
    if (index[s].empty()) continue;
    if (!shards_[s]->running()) {
      std::vector<Result<SubmitResult>> rs(
          index[s].size(),
          make_error(Errc::kUnavailable, "the engine is not running", nullptr, "shutting_down"));
      finish(index[s], std::move(rs));
      continue;
    }
    shards_[s]->post(
        [evs = std::move(per_shard[s]), ix = std::move(index[s]), finish](Shard& shard) mutable {
          shard.submit_batch(std::move(evs),
                             [ix = std::move(ix), finish](std::vector<Result<SubmitResult>> rs) {
                               finish(ix, std::move(rs));
                             });
        });
  }
}

void EngineImpl::get_breaker(std::string tenant, Callback<BreakerView> done) {
  RINGCAST_ROUTE(tenant,
                 ([tenant, done](Shard& s) mutable { s.get_breaker(tenant, std::move(done)); }));
}

void EngineImpl::order_keys(std::string tenant, EndpointId endpoint, size_t limit,
                            Callback<std::vector<OrderKeyView>> done) {
  RINGCAST_ROUTE(tenant, ([tenant, endpoint, limit, done](Shard& s) mutable {
                   s.order_keys(tenant, endpoint, limit, std::move(done));
                 }));
}

void EngineImpl::reset_breaker(std::string tenant, Callback<BreakerView> done) {
  RINGCAST_ROUTE(tenant,
                 ([tenant, done](Shard& s) mutable { s.reset_breaker(tenant, std::move(done)); }));
}

void EngineImpl::set_subscription(std::string tenant, bool active, Callback<bool> done) {
  RINGCAST_ROUTE(tenant, ([tenant, active, done](Shard& s) mutable {
                   s.set_subscription(tenant, active, std::move(done));
                 }));
}

void EngineImpl::get_tenant_settings(std::string tenant, Callback<TenantSettings> done) {
  RINGCAST_ROUTE(tenant, ([tenant, done](Shard& s) mutable {
                   s.get_tenant_settings(tenant, std::move(done));
                 }));
}

void EngineImpl::set_tenant_settings(std::string tenant, TenantSettings settings,
                                     Callback<TenantSettings> done) {
  RINGCAST_ROUTE(tenant, ([tenant, settings, done](Shard& s) mutable {
                   s.set_tenant_settings(tenant, std::move(settings), std::move(done));
                 }));
}

void EngineImpl::confirm_owner_email(std::string tenant, std::string email,
                                     Callback<TenantSettings> done) {
  RINGCAST_ROUTE(tenant, ([tenant, email = std::move(email), done](Shard& s) mutable {
                   s.confirm_owner_email(tenant, email, std::move(done));
                 }));
}

#undef RINGCAST_ROUTE

Result<std::optional<DeliveryDetail>> EngineImpl::get_delivery(std::string_view tenant,
                                                               DeliveryId id) {
  auto r = store_.get_delivery(id);
  if (!r.ok()) return r;
  // A delivery id is only visible to its own tenant.
  if (r->has_value() && (*r)->tenant != tenant) return std::optional<DeliveryDetail>{};
  return r;
}

Result<std::vector<std::optional<DeliveryDetail>>> EngineImpl::get_deliveries(
    std::string_view tenant, const std::vector<DeliveryId>& ids) {
  auto r = store_.get_deliveries(ids);
  if (!r.ok()) return r;
  for (auto& d : *r) {
    if (d && d->tenant != tenant) d.reset();  // only visible to its own tenant
  }
  return r;
}

Result<std::vector<std::optional<Event>>> EngineImpl::get_events_by_seq(
    std::string_view tenant, const std::vector<EventSeq>& seqs) {
  auto r = store_.load_events(seqs);
  if (!r.ok()) return r;
  for (auto& e : *r) {
    if (e && e->tenant != tenant) e.reset();
  }
  return r;
}

Result<std::vector<Delivery>> EngineImpl::recent_deliveries(std::string_view tenant) {
  return store_.recent_deliveries(tenant, kRecentDeliveries);
}

Result<DeliveryPage> EngineImpl::list_deliveries(std::string_view tenant,
                                                 std::optional<EndpointId> endpoint,
                                                 std::optional<DeliveryStatus> status, size_t limit,
                                                 std::string_view cursor) {
  return store_.list_deliveries(tenant, endpoint, status, limit, cursor);
}

Result<std::optional<Event>> EngineImpl::get_event(std::string_view tenant,
                                                   std::string_view event_id) {
  return store_.find_event(tenant, event_id);
}

Result<std::optional<Event>> EngineImpl::get_event_by_seq(std::string_view tenant, EventSeq seq) {
  auto r = store_.load_event(seq);
  if (!r.ok()) return r;
  if (r->has_value() && (*r)->tenant != tenant) return std::optional<Event>{};
  return r;
}

Result<std::vector<Notification>> EngineImpl::notifications(std::string_view tenant) {
  return store_.list_notifications(tenant, 100);
}

void EngineImpl::wake_all() {
  for (auto& s : shards_) s->wake();
}

std::string EngineImpl::metrics_text() {
  std::vector<const ShardMetrics*> m;
  for (auto& s : shards_) m.push_back(&s->metrics());
  std::string text = render_prometheus(m, static_cast<uint32_t>(shards_.size()));
  if (options_.extra_metrics) text += options_.extra_metrics();
  return text;
}

const char* EngineImpl::storage_problem() const {
  switch (store_.disk_health()) {
    case DiskHealth::kFull:
      return "storage_full";
    case DiskHealth::kFailed:
      return "storage_failed";
    case DiskHealth::kOk:
      break;
  }
  return nullptr;
}

bool EngineImpl::ready() const {
  if (stopped_.load()) return false;
  for (auto& s : shards_)
    if (!s->running()) return false;
  return true;
}

}  // namespace ringcast::engine
