// Endpoint state machine (SPEC R8, R9) and the tenant's subscription hold (R6
// `subscription_inactive`): enabled / paused / disabled(reason). Pure. Invariants: only an
// enabled endpoint takes new deliveries; a disabled endpoint sends nothing but test events;
// a paused endpoint keeps its queue and sends only test events until resumed.
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include "core/engine.h"
#include "core/result.h"
#include "core/types.h"

namespace ringcast {

inline constexpr Duration kSubscriptionPostpone = hours(1);  // SPEC R6: postponed 1 h

// SPEC R9.1: new events are enqueued for enabled endpoints only (not paused, not disabled).
inline bool accepts_new_deliveries(const Endpoint& e) {
  return e.state == EndpointState::kEnabled;
}

// May a delivery go out to this endpoint now? R9.2: a paused endpoint's queue waits; R9.3,
// R8.5: a test event goes out while paused and while disabled.
inline bool may_send(const Endpoint& e, bool test_delivery) {
  return test_delivery || e.state == EndpointState::kEnabled;
}

// Operator actions:
//   kPause:  enabled → paused (paused: no-op); disabled → error (reason "endpoint_disabled").
//   kResume: paused → enabled (enabled: no-op); disabled → error: re-enable it (R8.5).
//   kEnable: disabled or paused → enabled, the disabled reason cleared (R8.5).
// `changed` tells whether the state moved (the caller persists and wakes the queue).
struct ActionResult {
  Endpoint endpoint;
  bool changed = false;
};
Result<ActionResult> apply_endpoint_action(const Endpoint& e, EndpointAction a, WallTime now);

// SPEC R8.2, R8.4: the endpoint as auto-disabled with `reason` (gone, or the exhausting
// attempt's code), and the operator notification that goes with it.
Endpoint disabled_endpoint(const Endpoint& e, ErrorCode reason, WallTime now);
Notification disable_notification(const Endpoint& e, ErrorCode reason, DeliveryId trigger,
                                  uint16_t attempts, WallTime now);

const char* endpoint_action_name(EndpointAction a);

// Reconciliation (SPEC R12.11): the status URL for one webhook id — every "{webhook_id}" in the
// template replaced by it (webhook ids are [0-9A-Za-z_]: nothing to escape).
inline constexpr std::string_view kWebhookIdPlaceholder = "{webhook_id}";
std::string status_check_url(std::string_view tmpl, std::string_view webhook_id);
// The endpoint's on_unknown / status_url pair: kReconcile needs a status_url; a status_url
// names "{webhook_id}" and, filled in, passes `check` (the endpoint URL's own rules). Errors:
// kInvalidArgument, field "status_url" (reason "missing_status_url", "invalid_status_url" or
// the URL rule's reason).
Result<void> check_reconcile(const Endpoint& e,
                             const std::function<Result<void>(std::string_view url)>& check);

}  // namespace ringcast
