// The shard's endpoint and tenant calls (SPEC R8.5, R9 actions and test sends, R11.2 secret
// rotation, R14 limits, R4.8 breaker reset, R8.4 owner e-mail): checked here, applied by the
// scheduler into the turn's batch, answered once durable (SPEC R12.2). Shard thread only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/engine.h"
#include "core/result.h"
#include "core/types.h"
#include "engine/intake_part.h"
#include "engine/shard_core.h"

namespace ringcast::engine {

// SPEC R11.2: every unexpired secret signs during a rotation; at most this many at once.
inline constexpr size_t kMaxSigningSecrets = 10;

class AdminCalls {
 public:
  AdminCalls(ShardCore& core, ShardIntake& intake) : core_(core), intake_(intake) {}
  AdminCalls(const AdminCalls&) = delete;
  AdminCalls& operator=(const AdminCalls&) = delete;

  void create_endpoint(std::string tenant, EndpointSpec spec, Callback<Endpoint> done);
  void list_endpoints(const std::string& tenant, Callback<std::vector<Endpoint>> done);
  void get_endpoint(const std::string& tenant, EndpointId id, Callback<Endpoint> done);
  void update_endpoint(const std::string& tenant, EndpointId id, EndpointPatch patch,
                       Callback<Endpoint> done);
  void delete_endpoint(const std::string& tenant, EndpointId id, Callback<bool> done);
  void endpoint_action(const std::string& tenant, EndpointId id, EndpointAction action,
                       Callback<Endpoint> done);
  void test_endpoint(const std::string& tenant, EndpointId id, Callback<DeliveryId> done);
  // The endpoint URL's rules (UrlPolicy), for a status URL (R12.11).
  std::function<Result<void>(std::string_view)> url_check() const;
  void rotate_secret(const std::string& tenant, EndpointId id, std::optional<std::string> secret,
                     Callback<Endpoint> done);
  void get_breaker(const std::string& tenant, Callback<BreakerView> done);
  void order_keys(const std::string& tenant, EndpointId id, size_t limit,
                  Callback<std::vector<OrderKeyView>> done);  // SPEC R13
  void reset_breaker(const std::string& tenant, Callback<BreakerView> done);
  void set_subscription(const std::string& tenant, bool active, Callback<bool> done);
  void get_tenant_settings(const std::string& tenant, Callback<TenantSettings> done);
  void set_tenant_settings(const std::string& tenant, TenantSettings settings,
                           Callback<TenantSettings> done);
  void confirm_owner_email(const std::string& tenant, const std::string& email,
                           Callback<TenantSettings> done);
  TenantSettings tenant_settings(const std::string& tenant) const;

 private:
  std::string new_secret();
  Endpoint view(const Endpoint& e) const;

  ShardCore& core_;
  ShardIntake& intake_;  // the test event's key lookup (begin_lookup, end_lookup)
  // Test sends per endpoint in the current minute (EngineOptions::test_sends_per_minute);
  // entries of earlier minutes go when the minute turns.
  struct TestSends {
    int64_t minute = 0;
    uint32_t sent = 0;
  };
  std::unordered_map<EndpointId, TestSends> test_sends_;
  int64_t test_sends_minute_ = 0;
};

}  // namespace ringcast::engine
