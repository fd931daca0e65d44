// Endpoint and tenant calls (SPEC R8.5, R9 actions and test sends, R11.2 secret rotation, R14
// limits, R4.8 breaker reset, R8.4 owner e-mail): checked here, applied by the scheduler into the
// turn's batch, answered once durable.
#include "engine/shard.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>

#include "core/endpoint_headers.h"
#include "core/endpoint_rules.h"
#include "core/url.h"
#include "engine/shard_internal.h"
#include "net/signing.h"

namespace ringcast::engine {

std::string Shard::new_secret() {
  uint8_t raw[24];
  random_bytes(raw, sizeof raw);
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

std::function<Result<void>(std::string_view)> Shard::url_check() const {
  return [this](std::string_view u) -> Result<void> {
    auto r = check_url(u, options_.url_policy);
    if (!r.ok()) return r.error();
    return ok();
  };
}

const Endpoint* Shard::owned_endpoint(const std::string& tenant, EndpointId id) const {
  const Endpoint* e = scheduler_->find_endpoint(id);
  return e && e->tenant == tenant ? e : nullptr;
}

void Shard::create_endpoint(std::string tenant, EndpointSpec spec, Callback<Endpoint> done) {
  if (draining_) return done(shutting_down());
  auto url = check_url(spec.url, options_.url_policy);
  if (!url.ok()) return done(url.error());
  if (!options_.policies.find(spec.policy))
    return done(
        make_error(Errc::kInvalidArgument, "no policy by this name", "policy", "unknown_policy"));
  if (auto h = check_endpoint_headers(spec.headers); !h.ok()) return done(h.error());
  WallTime now = loop_->wall_now();
  Endpoint e;
  e.on_unknown = spec.on_unknown;
  e.status_url = std::move(spec.status_url);
  if (auto rc = check_reconcile(e, url_check()); !rc.ok()) return done(rc.error());
  // SPEC R14: every endpoint multiplies each event toward a host of the tenant's choosing.
  if (scheduler_->endpoints_of(tenant).size() >= options_.max_endpoints_per_tenant) {
    return done(make_error(Errc::kLimitExceeded,
                           "this tenant has as many endpoints as it may: delete one first",
                           "limits.max_endpoints_per_tenant", "too_many_endpoints"));
  }
  e.id = next_id(partition_of(tenant));
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
  e.created_at = e.updated_at = now;
  auto r = scheduler_->create_endpoint(std::move(e), now, mutations_);
  if (!r.ok()) return done(r.error());
  if (!known_tenants_.count(tenant)) {
    known_tenants_[tenant] = true;
    Tenant t;
    t.name = tenant;
    t.updated_at = now;
    scheduler_->restore_tenant(t);
    mutations_.tenants.push_back(std::move(t));
  }
  after_durable([done = std::move(done), ep = std::move(*r)]() mutable { done(std::move(ep)); });
}

// What the API shows of an endpoint: only the secrets that still sign (secrets_active).
Endpoint Shard::view(const Endpoint& e) const {
  Endpoint v = e;
  const WallTime now = loop_->wall_now();
  std::erase_if(v.secrets, [now](const Secret& s) { return s.expires_at <= now; });
  return v;
}

void Shard::list_endpoints(const std::string& tenant, Callback<std::vector<Endpoint>> done) {
  if (!known_tenants_.count(tenant)) return done(unknown_tenant());
  std::vector<Endpoint> out;
  for (const Endpoint* e : scheduler_->endpoints_of(tenant)) out.push_back(view(*e));
  done(std::move(out));
}

void Shard::get_endpoint(const std::string& tenant, EndpointId id, Callback<Endpoint> done) {
  const Endpoint* e = owned_endpoint(tenant, id);
  if (!e) return done(unknown_endpoint());
  done(view(*e));
}

void Shard::update_endpoint(const std::string& tenant, EndpointId id, EndpointPatch patch,
                            Callback<Endpoint> done) {
  if (draining_) return done(shutting_down());
  const Endpoint* cur = owned_endpoint(tenant, id);
  if (!cur) return done(unknown_endpoint());
  Endpoint e = *cur;
  if (patch.url) {
    auto url = check_url(*patch.url, options_.url_policy);
    if (!url.ok()) return done(url.error());
    e.url = std::move(*patch.url);
  }
  if (patch.policy) {
    if (!options_.policies.find(*patch.policy))
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
  if (auto rc = check_reconcile(e, url_check()); !rc.ok()) return done(rc.error());
  WallTime now = loop_->wall_now();
  e.updated_at = now;
  auto r = scheduler_->update_endpoint(e, now, mutations_);
  if (!r.ok()) return done(r.error());
  after_durable([done = std::move(done), ep = view(*r)]() mutable { done(std::move(ep)); });
}

void Shard::delete_endpoint(const std::string& tenant, EndpointId id, Callback<bool> done) {
  if (draining_) return done(shutting_down());
  if (!owned_endpoint(tenant, id)) return done(unknown_endpoint());
  auto r = scheduler_->delete_endpoint(id, loop_->wall_now(), mutations_);
  if (!r.ok()) return done(r.error());
  after_durable([done = std::move(done)] { done(true); });
}

void Shard::endpoint_action(const std::string& tenant, EndpointId id, EndpointAction action,
                            Callback<Endpoint> done) {
  if (draining_) return done(shutting_down());
  if (!owned_endpoint(tenant, id)) return done(unknown_endpoint());
  auto r = scheduler_->endpoint_action(id, action, loop_->wall_now(), mutations_);
  if (!r.ok()) return done(r.error());
  after_durable([done = std::move(done), ep = view(*r)]() mutable { done(std::move(ep)); });
}

void Shard::test_endpoint(const std::string& tenant, EndpointId id, Callback<DeliveryId> done) {
  if (draining_) return done(shutting_down());
  const Endpoint* e = owned_endpoint(tenant, id);
  if (!e) return done(unknown_endpoint());
  WallTime now = loop_->wall_now();
  {  // SPEC R14: test sends are bounded per endpoint per minute (no amplifier toward a host).
    const int64_t minute = now.ms() / 60'000;
    if (minute != test_sends_minute_) {
      test_sends_.clear();
      test_sends_minute_ = minute;
    }
    TestSends& t = test_sends_[id];
    if (t.sent >= options_.test_sends_per_minute) {
      return done(make_error(Errc::kLimitExceeded,
                             "too many test sends to this endpoint this minute: retry later",
                             "limits.test_sends_per_minute", "too_many_test_sends"));
    }
    ++t.sent;
  }
  Event ev;
  ev.seq = next_id(partition_of(tenant));
  ev.tenant = tenant;
  // Ids in the API's form (decimal strings), so the operator can find it; like every event it
  // gets a message id of its own, its webhook id.
  ev.id = "test_" + std::to_string(ev.seq);
  ev.message_id = new_message_id(now);
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
  const uint64_t gen = begin_lookup();
  store_.find_event_keys_async(
      {Store::EventKeyRef{held->tenant, held->id}}, poster_,
      [this, held, id, gen,
       done = std::move(done)](Result<std::vector<std::optional<EventKeyRecord>>> k) {
        end_lookup(gen);
        if (!k.ok()) return done(k.error());
        if (k->size() != 1 || (*k)[0].has_value())
          return done(make_error(Errc::kConflict, "an event with the test event's id exists", "id",
                                 "conflict"));
        if (!scheduler_->find_endpoint(id)) return done(unknown_endpoint());  // deleted meanwhile
        batch_.keys_unchecked();  // the store's own check covers this event
        auto r = scheduler_->add_test_delivery(id, *held, loop_->wall_now(), ids_, mutations_);
        if (!r.ok()) return done(r.error());
        after_durable([done, d = *r] { done(d); });
      });
}

void Shard::rotate_secret(const std::string& tenant, EndpointId id,
                          std::optional<std::string> secret, Callback<Endpoint> done) {
  if (draining_) return done(shutting_down());
  const Endpoint* cur = owned_endpoint(tenant, id);
  if (!cur) return done(unknown_endpoint());
  WallTime now = loop_->wall_now();
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
    s.expires_at = std::min(s.expires_at, now + options_.secret_rotation_overlap);
    kept.push_back(std::move(s));
  }
  e.secrets = std::move(kept);
  e.updated_at = now;
  auto r = scheduler_->update_endpoint(e, now, mutations_);
  if (!r.ok()) return done(r.error());
  after_durable([done = std::move(done), ep = std::move(*r)]() mutable { done(std::move(ep)); });
}

// ---- tenant-wide -----------------------------------------------------------------------------

void Shard::get_breaker(const std::string& tenant, Callback<BreakerView> done) {
  if (!known_tenants_.count(tenant)) return done(unknown_tenant());
  done(scheduler_->breaker_view(tenant, loop_->wall_now()));
}

void Shard::reset_breaker(const std::string& tenant, Callback<BreakerView> done) {
  if (!known_tenants_.count(tenant)) return done(unknown_tenant());
  WallTime now = loop_->wall_now();
  scheduler_->reset_breaker(tenant, now, mutations_);
  after_durable([this, done = std::move(done), tenant] {
    done(scheduler_->breaker_view(tenant, loop_->wall_now()));
  });
}

TenantSettings Shard::tenant_settings(const std::string& tenant) const {
  const Scheduler::OwnerEmail e = scheduler_->owner_email(tenant);
  TenantSettings s;
  s.owner_email = e.address;
  s.owner_email_confirmed = e.confirmed;
  s.confirmation_sent_at = e.asked_at;
  return s;
}

void Shard::get_tenant_settings(const std::string& tenant, Callback<TenantSettings> done) {
  if (!known_tenants_.count(tenant)) return done(unknown_tenant());
  done(tenant_settings(tenant));
}

void Shard::set_tenant_settings(const std::string& tenant, TenantSettings settings,
                                Callback<TenantSettings> done) {
  if (draining_) return done(shutting_down());
  if (!known_tenants_.count(tenant)) return done(unknown_tenant());
  auto sent = scheduler_->set_owner_email(tenant, settings.owner_email, settings.by_platform,
                                          options_.owner_email_confirm_interval, loop_->wall_now(),
                                          mutations_);
  if (!sent) return done(sent.error());
  after_durable([this, done = std::move(done), tenant, sent = *sent] {
    TenantSettings now = tenant_settings(tenant);
    now.confirmation_sent = sent;
    done(std::move(now));
  });
}

void Shard::confirm_owner_email(const std::string& tenant, const std::string& email,
                                Callback<TenantSettings> done) {
  if (draining_) return done(shutting_down());
  if (!known_tenants_.count(tenant)) return done(unknown_tenant());
  auto r = scheduler_->confirm_owner_email(tenant, email, loop_->wall_now(), mutations_);
  if (!r.ok()) return done(r.error());
  after_durable([this, done = std::move(done), tenant] { done(tenant_settings(tenant)); });
}

void Shard::set_subscription(const std::string& tenant, bool active, Callback<bool> done) {
  if (!known_tenants_.count(tenant)) return done(unknown_tenant());
  scheduler_->set_subscription(tenant, active, loop_->wall_now(), mutations_);
  after_durable([done = std::move(done), active] { done(active); });
}

}  // namespace ringcast::engine
