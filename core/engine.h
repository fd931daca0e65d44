// The public C++ API of ringcast (for embedding, and what the HTTP API and CLI adapt).
// Shards own tenants, so calls that touch a tenant's state are routed to the owning shard and
// complete asynchronously: the callback runs on that shard's thread, never inline in the
// call. Reads of the delivery log go to the store directly and return synchronously.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/result.h"
#include "core/store.h"
#include "core/types.h"

namespace ringcast {

template <class T>
using Callback = std::function<void(Result<T>)>;

struct EndpointSpec {
  std::string url;
  std::vector<std::string> event_types;  // empty: every type
  std::string policy = "smengo";         // "smengo" | "xhub" | a named policy from config
  SignatureProfile signature = SignatureProfile::kStandard;
  std::optional<std::string> secret;  // generated when absent
  RateLimit rate_limit;
  uint32_t max_in_flight = 0;
  std::vector<EndpointHeader> headers;  // checked by core/endpoint_headers.h
  bool idempotency_key = false;
  OnUnknown on_unknown = OnUnknown::kRetry;  // reconciliation (R12.11)
  std::string status_url;                    // "{webhook_id}" template; needed by kReconcile
  // SPEC R13 (docs/operations.md "Ordered delivery").
  Ordering ordering = Ordering::kNone;
  OnHeadFailure on_head_failure = OnHeadFailure::kBlock;
  bool supersede = false;
  bool send_traceparent = false;  // a W3C traceparent on every attempt (docs/tracing.md)
};

struct EndpointPatch {
  std::optional<std::string> url;
  std::optional<std::vector<std::string>> event_types;
  std::optional<std::string> policy;
  std::optional<SignatureProfile> signature;
  std::optional<RateLimit> rate_limit;
  std::optional<uint32_t> max_in_flight;
  std::optional<std::vector<EndpointHeader>> headers;  // replaces the whole set
  std::optional<bool> idempotency_key;
  std::optional<OnUnknown> on_unknown;
  std::optional<std::string> status_url;  // "" removes it
  std::optional<Ordering> ordering;       // SPEC R13
  std::optional<OnHeadFailure> on_head_failure;
  std::optional<bool> supersede;
  std::optional<bool> send_traceparent;
};

enum class EndpointAction : uint8_t { kPause, kResume, kEnable };

struct EventInput {
  std::string tenant;
  std::string id;
  std::string type;
  std::string payload;  // raw JSON bytes, delivered byte-for-byte
  // SPEC R13.1: empty (none) or 1..256 bytes of printable ASCII (core/event_input.h
  // check_ordering_key); kInvalidArgument field "ordering_key" otherwise.
  std::string ordering_key{};
  // The message id given when the event was queued for its partition's owner (cluster mode's
  // inbox, core/inbox.h), kept when the owner takes it in; empty: made at intake.
  std::string message_id{};
  // The producer's W3C trace context (its `traceparent`: trace id, its span id, flags), or all
  // zero: none. An invalid header is never a reason to refuse an event: the intakes leave this
  // zero (core/trace_context.h parse_traceparent).
  TraceContext parent{};
};

struct SubmitResult {
  enum class Kind : uint8_t { kAccepted, kDuplicate };  // a conflict is an Error (kConflict)
  Kind kind = Kind::kAccepted;
  EventSeq event = 0;
  uint32_t deliveries = 0;
  // Cluster mode: taken by a node that does not own the tenant's partition, durable in the
  // partition's inbox (core/inbox.h); its owner fans it out, so `deliveries` is not known (0).
  bool queued = false;
  // The webhook id receivers deduplicate by (SPEC R11.3): the 202 names it, and a repeat's 200
  // names the first one's. Empty only for a repeat of an event whose idempotency record predates
  // it.
  MessageIdBits message{};
};

// An operator's verdict on a delivery that ended `unknown` (SPEC R12.10).
enum class Resolution : uint8_t { kDelivered, kFailed };
inline constexpr size_t kResolutionNoteBytes = 512;  // kept like a response prefix (R10.3)

// A requeue job (POST .../endpoints/{id}/recover, docs/operations.md "Recover"): re-queues the
// endpoint's `failed`, `dead` and `unknown` deliveries created in [since, until], paced. Kept in
// memory by the shard that owns the tenant (a restart forgets it; re-running it is safe: only
// deliveries that have ended are re-queued). Past the shard's running jobs it waits `queued`
// in a bounded FIFO (SPEC R14, docs/security.md "Quotas"). The route keeps the path /recover
// (and the job's "kind" is "recover") while the code calls the job a requeue.
struct JobView {
  enum class State : uint8_t { kRunning, kDone, kFailed, kQueued };
  uint64_t id = 0;
  std::string tenant;
  EndpointId endpoint = 0;
  State state = State::kRunning;
  WallTime since, until;   // the window, on Delivery::created_at (inclusive)
  uint64_t total = 0;      // deliveries found in the window (known once the scan is over)
  uint64_t scanned = 0;    // deliveries of the endpoint looked at
  uint64_t requeued = 0;   // re-queued (resent)
  uint64_t skipped = 0;    // ended meanwhile in another way, already pending again, ...
  uint32_t in_flight = 0;  // re-queued by this job and not ended again yet
  bool scan_done = false;
  WallTime queued_at;                // when it was asked for
  WallTime started_at, finished_at;  // started_at zero while queued; finished_at zero until
                                     // it ends
  std::string error;                 // kFailed: why
};
inline const char* job_state_name(JobView::State s) {
  switch (s) {
    case JobView::State::kRunning:
      return "running";
    case JobView::State::kDone:
      return "done";
    case JobView::State::kQueued:
      return "queued";
    case JobView::State::kFailed:
      break;
  }
  return "failed";
}

// A tenant's settings: PUT/GET /v1/tenants/{t}/settings (docs/operations.md "Tenant state").
struct TenantSettings {
  std::string owner_email;  // empty: none
  // In (set): the platform sets it (confirmed at once); otherwise the merchant does and a
  // confirmation link is mailed to it (SPEC R14, docs/security.md "Owner e-mail").
  bool by_platform = false;
  // Out: notices go to the address only once it is confirmed; when the last confirmation
  // e-mail was queued (zero: none); whether this call queued one.
  bool owner_email_confirmed = false;
  WallTime confirmation_sent_at;
  bool confirmation_sent = false;
};

// One ordering key with a backlog or a block (SPEC R13; Scheduler::order_keys_of).
struct OrderKeyView {
  uint64_t order_key = 0;  // ordering_key_hash() of the key, or kEndpointOrderKey
  DeliveryId head = 0;     // the delivery at its head (0: blocked)
  DeliveryId blocked_by =
      0;  // blocked: the head that ended in failure (0: unknown after a restart)
  bool blocked = false;
  WallTime since;        // the head's creation; blocked: when the block began
  uint32_t waiting = 0;  // deliveries waiting behind it (counted up to 1,000,000)
  DeliveryId first_waiting = 0;
};

struct BreakerView {
  BreakerSnapshot snapshot;
  uint32_t window_total = 0;  // deliveries in the sliding window
  uint32_t window_failed = 0;
  // The tenant's endpoints, and those whose retry policy feeds and obeys the breaker (SPEC R4:
  // xhub-shaped policies; smengo's have none). With none, the breaker never opens.
  uint32_t endpoints = 0, endpoints_using = 0;
};

class Engine {
 public:
  virtual ~Engine() = default;

  // Endpoints (R8, R9). URL form errors come back as kInvalidArgument with the R6 reason.
  virtual void create_endpoint(std::string tenant, EndpointSpec spec, Callback<Endpoint> done) = 0;
  virtual void list_endpoints(std::string tenant, Callback<std::vector<Endpoint>> done) = 0;
  virtual void get_endpoint(std::string tenant, EndpointId id, Callback<Endpoint> done) = 0;
  virtual void update_endpoint(std::string tenant, EndpointId id, EndpointPatch patch,
                               Callback<Endpoint> done) = 0;
  virtual void delete_endpoint(std::string tenant, EndpointId id, Callback<bool> done) = 0;
  virtual void endpoint_action(std::string tenant, EndpointId id, EndpointAction action,
                               Callback<Endpoint> done) = 0;
  // Sends a `ringcast.test` event to this endpoint only, also while paused (R9.3).
  virtual void test_endpoint(std::string tenant, EndpointId id, Callback<DeliveryId> done) = 0;
  // Adds a new secret (generated when absent); the old one keeps signing for the overlap.
  virtual void rotate_secret(std::string tenant, EndpointId id, std::optional<std::string> secret,
                             Callback<Endpoint> done) = 0;

  // Intake (R12.5). Completes once the event and its deliveries are durable.
  virtual void submit(EventInput event, Callback<SubmitResult> done) = 0;
  virtual void submit_batch(std::vector<EventInput> events,
                            std::function<void(std::vector<Result<SubmitResult>>)> done) = 0;

  // Tenant-wide state (R4.8, R6 subscription_inactive).
  virtual void get_breaker(std::string tenant, Callback<BreakerView> done) = 0;
  virtual void reset_breaker(std::string tenant, Callback<BreakerView> done) = 0;
  virtual void set_subscription(std::string tenant, bool active, Callback<bool> done) = 0;

  // The delivery log (R10), read from the store.
  virtual Result<std::optional<DeliveryDetail>> get_delivery(std::string_view tenant,
                                                             DeliveryId id) = 0;
  virtual Result<std::vector<Delivery>> recent_deliveries(std::string_view tenant) = 0;
  virtual Result<DeliveryPage> list_deliveries(std::string_view tenant,
                                               std::optional<EndpointId> endpoint,
                                               std::optional<DeliveryStatus> status, size_t limit,
                                               std::string_view cursor) = 0;
  virtual Result<std::optional<Event>> get_event(std::string_view tenant,
                                                 std::string_view event_id) = 0;
  virtual Result<std::vector<Notification>> notifications(std::string_view tenant) = 0;
  // The event a delivery carries (Delivery::event), for the delivery log's type and body
  // (R10.1, R10.2). The default knows none; an engine with a store overrides it.
  virtual Result<std::optional<Event>> get_event_by_seq(std::string_view tenant, EventSeq seq) {
    (void)tenant;
    (void)seq;
    return std::optional<Event>();
  }
  // Several at once, aligned with the argument (one round trip on a networked store); what is
  // not the tenant's reads as absent. The defaults ask one by one.
  virtual Result<std::vector<std::optional<Event>>> get_events_by_seq(
      std::string_view tenant, const std::vector<EventSeq>& seqs) {
    std::vector<std::optional<Event>> out;
    out.reserve(seqs.size());
    for (EventSeq s : seqs) {
      auto r = get_event_by_seq(tenant, s);
      if (!r.ok()) return r.error();
      out.push_back(std::move(*r));
    }
    return out;
  }
  virtual Result<std::vector<std::optional<DeliveryDetail>>> get_deliveries(
      std::string_view tenant, const std::vector<DeliveryId>& ids) {
    std::vector<std::optional<DeliveryDetail>> out;
    out.reserve(ids.size());
    for (DeliveryId id : ids) {
      auto r = get_delivery(tenant, id);
      if (!r.ok()) return r.error();
      out.push_back(std::move(*r));
    }
    return out;
  }

  // R12.10: resolves a delivery that ended `unknown` as delivered or failed; the verdict and
  // `note` (≤ kResolutionNoteBytes) become a record in its history (an Attempt numbered from
  // kHistoryRecordBase, code resolved_by_operator). Reads the delivery from the store on the
  // calling thread (like get_delivery), then completes on the owning shard once durable.
  // kNotFound (reason "unknown_delivery"); kConflict reason "not_unknown" when the delivery is
  // not `unknown` (any more); kInvalidArgument field "note".
  virtual void resolve_delivery(std::string tenant, DeliveryId id, Resolution verdict,
                                std::string note, Callback<Delivery> done) {
    (void)tenant, (void)id, (void)verdict, (void)note;
    done(make_error(Errc::kUnavailable, "this engine cannot resolve deliveries", nullptr,
                    "not_supported"));
  }

  // SPEC R13: the endpoint's ordering keys that have a backlog (deliveries waiting behind
  // their head) or are blocked (R13.2), at most `limit`, from the owning shard's memory.
  // kNotFound "not_found" for an unknown endpoint.
  virtual void order_keys(std::string tenant, EndpointId endpoint, size_t limit,
                          Callback<std::vector<OrderKeyView>> done) {
    (void)tenant, (void)endpoint, (void)limit;
    done(make_error(Errc::kUnavailable, "this engine keeps no ordering keys", nullptr,
                    "not_supported"));
  }

  // Replay (docs/operations.md "Delivery log"). Each reads from the store on the calling thread
  // (like resolve_delivery), then completes on the owning shard once durable.
  // Resend: a delivery that ended (delivered, failed, dead or unknown) goes out again — the
  // same delivery, the same event (webhook id), attempts numbered on, a fresh budget; its
  // history gets a `resent` record with `note`. kNotFound "unknown_delivery"; kConflict
  // "delivery_pending" (it has not ended: a second resend while the first is pending),
  // "endpoint_disabled" (R8.5), "test_delivery"; kNotFound "unknown_endpoint" (deleted).
  virtual void resend_delivery(std::string tenant, DeliveryId id, std::string note,
                               Callback<Delivery> done) {
    (void)tenant, (void)id, (void)note;
    done(make_error(Errc::kUnavailable, "this engine cannot resend deliveries", nullptr,
                    "not_supported"));
  }
  // Replay missing: the event fans out again to every endpoint that matches it now (enabled,
  // filter) and has no delivery of it yet. Returns how many deliveries were created.
  // kNotFound "unknown_event".
  virtual void replay_event(std::string tenant, std::string event_id, Callback<uint32_t> done) {
    (void)tenant, (void)event_id;
    done(make_error(Errc::kUnavailable, "this engine cannot replay events", nullptr,
                    "not_supported"));
  }
  // Starts a requeue job (JobView); kNotFound "unknown_endpoint", kConflict
  // "endpoint_disabled", kLimitExceeded "too_many_jobs".
  virtual void requeue_endpoint(std::string tenant, EndpointId id, WallTime since, WallTime until,
                                Callback<JobView> done) {
    (void)tenant, (void)id, (void)since, (void)until;
    done(make_error(Errc::kUnavailable, "this engine cannot recover endpoints", nullptr,
                    "not_supported"));
  }
  // The tenant's settings (SPEC R8.4); kNotFound "unknown_tenant" (a tenant that never had an
  // endpoint). Completes once durable.
  virtual void get_tenant_settings(std::string tenant, Callback<TenantSettings> done) {
    (void)tenant;
    done(make_error(Errc::kUnavailable, "tenant settings are not supported here", nullptr,
                    "not_supported"));
  }
  virtual void set_tenant_settings(std::string tenant, TenantSettings settings,
                                   Callback<TenantSettings> done) {
    (void)tenant, (void)settings;
    done(make_error(Errc::kUnavailable, "tenant settings are not supported here", nullptr,
                    "not_supported"));
  }
  // A confirmation link for `email` was followed (SPEC R14): confirmed if it is still the
  // tenant's address; kConflict "owner_email_changed" otherwise. Completes once durable.
  virtual void confirm_owner_email(std::string tenant, std::string email,
                                   Callback<TenantSettings> done) {
    (void)tenant, (void)email;
    done(make_error(Errc::kUnavailable, "tenant settings are not supported here", nullptr,
                    "not_supported"));
  }
  // A job's progress; kNotFound "unknown_job".
  virtual void get_job(std::string tenant, uint64_t id, Callback<JobView> done) {
    (void)tenant, (void)id;
    done(make_error(Errc::kNotFound, "no such job", "job", "unknown_job"));
  }

  // Prometheus text exposition (no per-endpoint labels).
  virtual std::string metrics_text() = 0;
  virtual bool ready() const = 0;
  // Why the engine cannot make writes durable now ("storage_full", "storage_failed"), or null
  // (docs/operations.md "Disk full, read-only and failed syncs"): /healthz says degraded.
  virtual const char* storage_problem() const { return nullptr; }
};

}  // namespace ringcast
