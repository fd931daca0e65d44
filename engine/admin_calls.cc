// The shard's endpoint and tenant calls (engine/admin_calls.h; SPEC R8.5, R9 actions and test
// sends, R11.2 secret rotation, R14 limits, R4.8 breaker reset, R8.4 owner e-mail): checked here,
// applied by the scheduler into the turn's batch, answered once durable.
#include "engine/admin_calls.h"

#include <algorithm>
#include <cctype>
#include <cinttypes>
#include <cstdio>
#include <memory>
#include <utility>

#include "core/endpoint_headers.h"
#include "core/endpoint_rules.h"
#include "core/url.h"
#include "engine/shard_internal.h"
#include "net/signing.h"

namespace ringcast::engine {

std::string AdminCalls::new_secret() {
  uint8_t raw[24];
  core_.random_bytes(raw, sizeof raw);
  return std::string(reinterpret_cast<char*>(raw), sizeof raw);
}

// Endpoint secrets are kept as raw key bytes; users see and give them as "whsec_<base64>"
// (Standard Webhooks) or as plain text, which is used as the key itself.
static Result<std::string> secret_key(const std::optional<std::string>& given,
                                      std::string generated) {
  if (!given) return generated;
  auto key = net::decode_secret(*given);
  if (!key || key->empty() || key->size() > 512)
    return make_error(Errc::kInvalidArgument,
                      "secret must be whsec_<base64> or 1-512 bytes of text", "secret",
                      "invalid_secret");
  return std::move(*key);
}

// send_traceparent writes the `traceparent` header itself (docs/tracing.md "Propagation"): an
// extra header of that name beside it would send two.
static Result<void> check_traceparent_header(bool send, const std::vector<EndpointHeader>& hs) {
  if (!send) return ok();
  for (const EndpointHeader& h : hs) {
    const bool same =
        std::equal(h.name.begin(), h.name.end(), std::string_view("traceparent").begin(),
                   std::string_view("traceparent").end(),
                   [](char a, char b) { return std::tolower(static_cast<unsigned char>(a)) == b; });
    if (same)
      return make_error(Errc::kInvalidArgument,
                        "send_traceparent sets the traceparent header itself: remove it from "
                        "headers",
                        "headers", "reserved_header");
  }
  return ok();
}

std::function<Result<void>(std::string_view)> AdminCalls::url_check() const {
  return [this](std::string_view u) -> Result<void> {
    auto r = check_url(u, core_.options.url_policy);
    if (!r.ok()) return r.error();
    return ok();
  };
}

void AdminCalls::create_endpoint(std::string tenant, EndpointSpec spec, Callback<Endpoint> done) {
  if (core_.draining) return done(shutting_down());
  auto url = check_url(spec.url, core_.options.url_policy);
  if (!url.ok()) return done(url.error());
  if (!core_.options.policies.find(spec.policy))
    return done(
        make_error(Errc::kInvalidArgument, "no policy by this name", "policy", "unknown_policy"));
  if (auto h = check_endpoint_headers(spec.headers); !h.ok()) return done(h.error());
  if (auto t = check_traceparent_header(spec.send_traceparent, spec.headers); !t.ok())
    return done(t.error());
  WallTime now = core_.loop->wall_now();
  Endpoint e;
  e.on_unknown = spec.on_unknown;
  e.status_url = std::move(spec.status_url);
  if (auto rc = check_reconcile(e, url_check()); !rc.ok()) return done(rc.error());
  // SPEC R14: every endpoint multiplies each event toward a host of the tenant's choosing.
  if (core_.scheduler->endpoints_of(tenant).size() >= core_.options.max_endpoints_per_tenant) {
    return done(make_error(Errc::kLimitExceeded,
                           "this tenant has as many endpoints as it may: delete one first",
                           "limits.max_endpoints_per_tenant", "too_many_endpoints"));
  }
  e.id = core_.next_id(partition_of(tenant));
  e.tenant = tenant;
  e.url = std::move(spec.url);
  e.event_types = std::move(spec.event_types);
  e.policy = std::move(spec.policy);
  e.signature = spec.signature;
  auto key = secret_key(spec.secret, new_secret());
  if (!key.ok()) return done(key.error());
  e.secrets.push_back(Secret{std::move(*key), WallTime::max()});
  e.rate_limit = spec.rate_limit;
  e.max_in_flight = spec.max_in_flight;
  e.headers = std::move(spec.headers);
  e.idempotency_key = spec.idempotency_key;
  e.ordering = spec.ordering;  // SPEC R13
  e.on_head_failure = spec.on_head_failure;
  e.supersede = spec.supersede;
  e.send_traceparent = spec.send_traceparent;
  e.created_at = e.updated_at = now;
  auto r = core_.scheduler->create_endpoint(std::move(e), now, core_.mutations());
  if (!r.ok()) return done(r.error());
  if (!core_.known_tenants.count(tenant)) {
    core_.known_tenants[tenant] = true;
    Tenant t;
    t.name = tenant;
    t.updated_at = now;
    core_.scheduler->restore_tenant(t);
    core_.mutations().tenants.push_back(std::move(t));
  }
  core_.after_durable(
      [done = std::move(done), ep = std::move(*r)]() mutable { done(std::move(ep)); });
}

// What the API shows of an endpoint: only the secrets that still sign (secrets_active).
Endpoint AdminCalls::view(const Endpoint& e) const {
  Endpoint v = e;
  const WallTime now = core_.loop->wall_now();
  std::erase_if(v.secrets, [now](const Secret& s) { return s.expires_at <= now; });
  return v;
}

void AdminCalls::list_endpoints(const std::string& tenant, Callback<std::vector<Endpoint>> done) {
  if (!core_.known_tenants.count(tenant)) return done(unknown_tenant());
  std::vector<Endpoint> out;
  for (const Endpoint* e : core_.scheduler->endpoints_of(tenant)) out.push_back(view(*e));
  done(std::move(out));
}

void AdminCalls::order_keys(const std::string& tenant, EndpointId id, size_t limit,
                            Callback<std::vector<OrderKeyView>> done) {
  if (!core_.owned_endpoint(tenant, id)) return done(unknown_endpoint());
  done(core_.scheduler->order_keys_of(id, limit));
}

void AdminCalls::get_endpoint(const std::string& tenant, EndpointId id, Callback<Endpoint> done) {
  const Endpoint* e = core_.owned_endpoint(tenant, id);
  if (!e) return done(unknown_endpoint());
  done(view(*e));
}

void AdminCalls::update_endpoint(const std::string& tenant, EndpointId id, EndpointPatch patch,
                                 Callback<Endpoint> done) {
  if (core_.draining) return done(shutting_down());
  const Endpoint* cur = core_.owned_endpoint(tenant, id);
  if (!cur) return done(unknown_endpoint());
  Endpoint e = *cur;
  if (patch.url) {
    auto url = check_url(*patch.url, core_.options.url_policy);
    if (!url.ok()) return done(url.error());
    e.url = std::move(*patch.url);
  }
  if (patch.policy) {
    if (!core_.options.policies.find(*patch.policy))
      return done(
          make_error(Errc::kInvalidArgument, "no policy by this name", "policy", "unknown_policy"));
    e.policy = std::move(*patch.policy);
  }
  if (patch.event_types) e.event_types = std::move(*patch.event_types);
  if (patch.signature) e.signature = *patch.signature;
  if (patch.rate_limit) e.rate_limit = *patch.rate_limit;
  if (patch.max_in_flight) e.max_in_flight = *patch.max_in_flight;
  if (patch.headers) {
    if (auto h = check_endpoint_headers(*patch.headers); !h.ok()) return done(h.error());
    e.headers = std::move(*patch.headers);
  }
  if (patch.idempotency_key) e.idempotency_key = *patch.idempotency_key;
  if (patch.on_unknown) e.on_unknown = *patch.on_unknown;
  if (patch.status_url) e.status_url = std::move(*patch.status_url);
  if (patch.ordering) e.ordering = *patch.ordering;  // SPEC R13
  if (patch.on_head_failure) e.on_head_failure = *patch.on_head_failure;
  if (patch.supersede) e.supersede = *patch.supersede;
  if (patch.send_traceparent) e.send_traceparent = *patch.send_traceparent;
  if (auto t = check_traceparent_header(e.send_traceparent, e.headers); !t.ok())
    return done(t.error());
  if (auto rc = check_reconcile(e, url_check()); !rc.ok()) return done(rc.error());
  WallTime now = core_.loop->wall_now();
  e.updated_at = now;
  auto r = core_.scheduler->update_endpoint(e, now, core_.mutations());
  if (!r.ok()) return done(r.error());
  core_.after_durable([done = std::move(done), ep = view(*r)]() mutable { done(std::move(ep)); });
}

void AdminCalls::delete_endpoint(const std::string& tenant, EndpointId id, Callback<bool> done) {
  if (core_.draining) return done(shutting_down());
  if (!core_.owned_endpoint(tenant, id)) return done(unknown_endpoint());
  auto r = core_.scheduler->delete_endpoint(id, core_.loop->wall_now(), core_.mutations());
  if (!r.ok()) return done(r.error());
  core_.after_durable([done = std::move(done)] { done(true); });
}

void AdminCalls::endpoint_action(const std::string& tenant, EndpointId id, EndpointAction action,
                                 Callback<Endpoint> done) {
  if (core_.draining) return done(shutting_down());
  if (!core_.owned_endpoint(tenant, id)) return done(unknown_endpoint());
  auto r = core_.scheduler->endpoint_action(id, action, core_.loop->wall_now(), core_.mutations());
  if (!r.ok()) return done(r.error());
  core_.after_durable([done = std::move(done), ep = view(*r)]() mutable { done(std::move(ep)); });
}

void AdminCalls::test_endpoint(const std::string& tenant, EndpointId id,
                               Callback<DeliveryId> done) {
  if (core_.draining) return done(shutting_down());
  const Endpoint* e = core_.owned_endpoint(tenant, id);
  if (!e) return done(unknown_endpoint());
  WallTime now = core_.loop->wall_now();
  {  // SPEC R14: test sends are bounded per endpoint per minute (no amplifier toward a host).
    const int64_t minute = now.ms() / 60'000;
    if (minute != test_sends_minute_) {
      test_sends_.clear();
      test_sends_minute_ = minute;
    }
    TestSends& t = test_sends_[id];
    if (t.sent >= core_.options.test_sends_per_minute) {
      return done(make_error(Errc::kLimitExceeded,
                             "too many test sends to this endpoint this minute: retry later",
                             "limits.test_sends_per_minute", "too_many_test_sends"));
    }
    ++t.sent;
  }
  Event ev;
  ev.seq = core_.next_id(partition_of(tenant));
  ev.tenant = tenant;
  // Ids in the API's form (decimal strings), so the operator can find it; like every event it
  // gets a message id of its own, its webhook id.
  ev.id = "test_";  // built by appends (GCC 12: no false -Wrestrict)
  ev.id += std::to_string(ev.seq);
  ev.message_id = core_.new_message_id(now);
  ev.type = "ringcast.test";
  char buf[160];
  std::snprintf(buf, sizeof buf,
                "{\"type\":\"ringcast.test\",\"endpoint_id\":\"%" PRIu64
                "\",\"sent_at_ms\":%" PRId64 "}",
                id, now.ms());
  ev.payload = buf;
  ev.created_at = now;
  ev.payload_hash = payload_hash(ev.payload);
  // A producer may have used this id: refuse rather than fail the turn's write (R12.5).
  auto held = std::make_shared<Event>(std::move(ev));
  const uint64_t gen = intake_.begin_lookup();
  core_.store.find_event_keys_async(
      {Store::EventKeyRef{held->tenant, held->id}}, core_.poster,
      [this, held, id, gen,
       done = std::move(done)](Result<std::vector<std::optional<EventKeyRecord>>> k) {
        intake_.end_lookup(gen);
        if (!k.ok()) return done(k.error());
        if (k->size() != 1 || (*k)[0].has_value())
          return done(make_error(Errc::kConflict, "an event with the test event's id exists", "id",
                                 "conflict"));
        if (!core_.scheduler->find_endpoint(id))
          return done(unknown_endpoint());  // deleted meanwhile
        core_.batch.keys_unchecked();       // the store's own check covers this event
        auto r = core_.scheduler->add_test_delivery(id, *held, core_.loop->wall_now(), core_.ids,
                                                    core_.mutations());
        if (!r.ok()) return done(r.error());
        core_.after_durable([done, d = *r] { done(d); });
      });
}

void AdminCalls::rotate_secret(const std::string& tenant, EndpointId id,
                               std::optional<std::string> secret, Callback<Endpoint> done) {
  if (core_.draining) return done(shutting_down());
  const Endpoint* cur = core_.owned_endpoint(tenant, id);
  if (!cur) return done(unknown_endpoint());
  WallTime now = core_.loop->wall_now();
  Endpoint e = *cur;
  auto key = secret_key(secret, new_secret());
  if (!key.ok()) return done(key.error());
  std::vector<Secret> kept;
  kept.push_back(Secret{std::move(*key), WallTime::max()});
  for (Secret s : e.secrets) {
    if (s.expires_at <= now) continue;  // expired: no longer signs, pruned
    // At most kMaxSigningSecrets sign at once (newest first): rotating faster than the
    // overlap drops the oldest instead of growing every request's signature header.
    if (kept.size() >= kMaxSigningSecrets) break;
    s.expires_at = std::min(s.expires_at, now + core_.options.secret_rotation_overlap);
    kept.push_back(std::move(s));
  }
  e.secrets = std::move(kept);
  e.updated_at = now;
  auto r = core_.scheduler->update_endpoint(e, now, core_.mutations());
  if (!r.ok()) return done(r.error());
  core_.after_durable(
      [done = std::move(done), ep = std::move(*r)]() mutable { done(std::move(ep)); });
}

// ---- tenant-wide -----------------------------------------------------------------------------

void AdminCalls::get_breaker(const std::string& tenant, Callback<BreakerView> done) {
  if (!core_.known_tenants.count(tenant)) return done(unknown_tenant());
  done(core_.scheduler->breaker_view(tenant, core_.loop->wall_now()));
}

void AdminCalls::reset_breaker(const std::string& tenant, Callback<BreakerView> done) {
  if (!core_.known_tenants.count(tenant)) return done(unknown_tenant());
  WallTime now = core_.loop->wall_now();
  core_.scheduler->reset_breaker(tenant, now, core_.mutations());
  core_.after_durable([this, done = std::move(done), tenant] {
    done(core_.scheduler->breaker_view(tenant, core_.loop->wall_now()));
  });
}

TenantSettings AdminCalls::tenant_settings(const std::string& tenant) const {
  const Scheduler::OwnerEmail e = core_.scheduler->owner_email(tenant);
  TenantSettings s;
  s.owner_email = e.address;
  s.owner_email_confirmed = e.confirmed;
  s.confirmation_sent_at = e.asked_at;
  return s;
}

void AdminCalls::get_tenant_settings(const std::string& tenant, Callback<TenantSettings> done) {
  if (!core_.known_tenants.count(tenant)) return done(unknown_tenant());
  done(tenant_settings(tenant));
}

void AdminCalls::set_tenant_settings(const std::string& tenant, TenantSettings settings,
                                     Callback<TenantSettings> done) {
  if (core_.draining) return done(shutting_down());
  if (!core_.known_tenants.count(tenant)) return done(unknown_tenant());
  auto sent = core_.scheduler->set_owner_email(tenant, settings.owner_email, settings.by_platform,
                                               core_.options.owner_email_confirm_interval,
                                               core_.loop->wall_now(), core_.mutations());
  if (!sent) return done(sent.error());
  core_.after_durable([this, done = std::move(done), tenant, sent = *sent] {
    TenantSettings now = tenant_settings(tenant);
    now.confirmation_sent = sent;
    done(std::move(now));
  });
}

void AdminCalls::confirm_owner_email(const std::string& tenant, const std::string& email,
                                     Callback<TenantSettings> done) {
  if (core_.draining) return done(shutting_down());
  if (!core_.known_tenants.count(tenant)) return done(unknown_tenant());
  auto r = core_.scheduler->confirm_owner_email(tenant, email, core_.loop->wall_now(),
                                                core_.mutations());
  if (!r.ok()) return done(r.error());
  core_.after_durable([this, done = std::move(done), tenant] { done(tenant_settings(tenant)); });
}

void AdminCalls::set_subscription(const std::string& tenant, bool active, Callback<bool> done) {
  if (!core_.known_tenants.count(tenant)) return done(unknown_tenant());
  core_.scheduler->set_subscription(tenant, active, core_.loop->wall_now(), core_.mutations());
  core_.after_durable([done = std::move(done), active] { done(active); });
}

}  // namespace ringcast::engine
