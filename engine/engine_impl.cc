#include "engine/engine_impl.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

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
    if (!e->options_.leases) {
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
    if (why != nullptr) {  // ISSUE 14 part 3: say which policy, and how many endpoints use it
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

void EngineImpl::resolve_delivery(std::string tenant, DeliveryId id, Resolution verdict,
                                  std::string note, Callback<Delivery> done) {
  if (note.size() > kResolutionNoteBytes) {
    return done(
        make_error(Errc::kInvalidArgument, "note must be at most 512 bytes", "note", "too_long"));
  }
  auto read = get_delivery(tenant, id);  // the store's record, here on the caller's thread
  if (!read) return done(read.error());
  if (!read->has_value() || (*read)->tenant != tenant) {
    return done(make_error(Errc::kNotFound, "no such delivery for this tenant", "delivery",
                           "unknown_delivery"));
  }
  RINGCAST_ROUTE(
      tenant, ([seen = std::move(**read), verdict, note = std::move(note), done](Shard& s) mutable {
        s.resolve_delivery(std::move(seen), verdict, std::move(note), std::move(done));
      }));
}

void EngineImpl::rotate_secret(std::string tenant, EndpointId id, std::optional<std::string> secret,
                               Callback<Endpoint> done) {
  RINGCAST_ROUTE(tenant, ([tenant, id, secret = std::move(secret), done](Shard& s) mutable {
                   s.rotate_secret(tenant, id, std::move(secret), std::move(done));
                 }));
}

void EngineImpl::submit(EventInput event, Callback<SubmitResult> done) {
  // Not RINGCAST_ROUTE: the shard decides about a partition it does not serve (cluster mode:
  // the event goes to the partition's inbox, core/inbox.h, or is answered not_owner).
  Shard& shard = shard_for(event.tenant);
  if (!shard.running()) {
    return done(
        make_error(Errc::kUnavailable, "the engine is not running", nullptr, "shutting_down"));
  }
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
  for (size_t i = 0; i < events.size(); ++i) {
    size_t s = partition_of(events[i].tenant) % shards_.size();
    index[s].push_back(i);
    per_shard[s].push_back(std::move(events[i]));
  }
  for (const auto& ix : index) g->shards_left += ix.empty() ? 0 : 1;
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

void EngineImpl::reset_breaker(std::string tenant, Callback<BreakerView> done) {
  RINGCAST_ROUTE(tenant,
                 ([tenant, done](Shard& s) mutable { s.reset_breaker(tenant, std::move(done)); }));
}

void EngineImpl::set_subscription(std::string tenant, bool active, Callback<bool> done) {
  RINGCAST_ROUTE(tenant, ([tenant, active, done](Shard& s) mutable {
                   s.set_subscription(tenant, active, std::move(done));
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

bool EngineImpl::ready() const {
  if (stopped_.load()) return false;
  for (auto& s : shards_)
    if (!s->running()) return false;
  return true;
}

}  // namespace ringcast::engine
