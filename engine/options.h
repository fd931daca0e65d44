// What the engine needs to run: shard count, the scheduler's limits, the policies, how URLs
// and addresses are checked, and how each shard builds its transport on its own loop.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/inbox.h"
#include "core/ip_address.h"
#include "core/policy.h"
#include "core/scheduler.h"
#include "core/store.h"
#include "core/time.h"
#include "core/transport.h"
#include "core/url.h"

namespace ringcast::net {
class Loop;
}
namespace ringcast::trace {
class Tracer;
}

namespace ringcast::engine {

// Builds one shard's transport on that shard's loop (called on the shard thread).
using TransportFactory = std::function<std::unique_ptr<Transport>(net::Loop& loop)>;

// Cluster mode (docs/cluster.md): the partitions a node owns change at run time
// (cluster/lease.h). The shards start with none; EngineImpl::acquire_partition() and friends
// hand them over. These hooks are called on the shard threads and must not block.
struct PartitionOwnership {
  // True while this node holds p at `epoch` and `now` (CLOCK_MONOTONIC) is before its ownership's
  // local deadline: checked before every send (a paused node sends nothing it no longer owns).
  std::function<bool(Partition, uint64_t epoch, MonoTime now)> valid;
  // The epoch the store fences p's writes with (0: p is not owned here any more).
  std::function<void(Partition, uint64_t epoch)> set_epoch;
  // True once the store refused a write of p at `epoch` (FENCED): what that write accepted is
  // not acknowledged.
  std::function<bool(Partition, uint64_t epoch)> fenced;
};

struct EngineOptions {
  uint32_t shards = 1;
  SchedulerOptions scheduler;
  PolicyRegistry policies;
  UrlPolicy url_policy;
  Duration secret_rotation_overlap = hours(24);
  // Intake acknowledgements wait for the store's durable sequence; the loop re-checks it this
  // often while some are waiting, besides the wake-up the store's on_durable hook sends.
  Duration durable_poll = milliseconds(5);
  // Bound on the graceful stop: in-flight attempts get this long to finish; the rest are
  // left leased (kInFlight) and become `lease_expired` attempts at the next start.
  Duration stop_grace = seconds(5);
  uint64_t rng_seed = 0;  // 0: seeded from the wall clock at start
  // Where a shard's loop reads the time (null: the system clock) and where it draws its random
  // bytes — the message-id generator's seed and generated signing secrets (empty: the system
  // CSPRNG). The seeded simulation (tests/sim) sets both: a manual clock and a seeded stream.
  Clock* clock = nullptr;
  std::function<void(uint8_t* out, size_t n)> entropy;
  // A shard takes at most this many events of one submit_batch per loop turn (one store write
  // each); a larger batch goes in parts, the next once the one before it is durable, and is
  // answered once, in input order, when the last part is durable (Shard::submit_batch).
  size_t max_batch_events = 10'000;
  // Events kept in memory for the send path, in bytes, over all shards (payloads also stay in
  // the store; a miss reads them back).
  size_t payload_cache_bytes = size_t{32} << 20;
  TransportFactory transport_factory;
  // Operator notifications (SPEC R8.4), called on the shard thread once the batch that stored
  // the notification is durable (so a notification seen outside is never lost by a crash).
  // Must not block: hand the notification to another thread.
  std::function<void(const Notification&)> on_notification;
  // Embedders: called on the shard thread once a delivery reached a terminal state (delivered,
  // failed, dead) and that state is durable. Must not block.
  std::function<void(const Delivery&)> on_delivery_done;
  // OpenTelemetry spans of intake, deliveries and attempts (docs/tracing.md); null: tracing off
  // (one branch per span site, nothing made). Outlives the engine.
  trace::Tracer* tracer = nullptr;
  // More Prometheus text appended to metrics_text() (e.g. the operator webhook's counters).
  std::function<std::string()> extra_metrics;
  // Set: cluster mode (see PartitionOwnership). Unset: the shards own every partition for good.
  std::optional<PartitionOwnership> ownership;
  // Cluster mode: where events for a partition this node does not own go (core/inbox.h), and
  // how often a shard looks into the inboxes of the partitions it owns. Unset: such events are
  // answered 503 not_owner.
  Inbox* inbox = nullptr;
  Duration inbox_poll = milliseconds(100);
  // Requeue jobs (Engine::requeue_endpoint): at most this many of one job's re-queued
  // deliveries live at once (config limits.recover_max_in_flight); per shard at most
  // max_requeue_jobs running and max_queued_requeue_jobs waiting their turn (config
  // limits.recover_jobs_running, limits.recover_jobs_queued; SPEC R14 quotas). The first is
  // named like its config key.
  uint32_t recover_max_in_flight = 1000;
  uint32_t max_requeue_jobs = 4;
  uint32_t max_queued_requeue_jobs = 64;
  // Quotas (SPEC R14, docs/security.md "Quotas"): each a 429 naming its limit. Endpoints per
  // tenant (a fan-out amplifier toward any host otherwise), test sends per endpoint per minute,
  // and one running or queued requeue job per tenant (above).
  uint32_t max_endpoints_per_tenant = 100;
  // One confirmation e-mail per tenant per this long (a merchant-set owner_email, SPEC R14).
  Duration owner_email_confirm_interval = minutes(10);
  uint32_t test_sends_per_minute = 10;
  // Events per second one tenant may submit on this node, over every intake (HTTP, bulk, bus);
  // burst one second's worth; 0: no limit (engine/tenant_rate.h).
  double tenant_events_per_second = 0;
};

}  // namespace ringcast::engine
