#include "core/endpoint_rules.h"

namespace ringcast {

const char* endpoint_action_name(EndpointAction a) {
  switch (a) {
    case EndpointAction::kPause:
      return "pause";
    case EndpointAction::kResume:
      return "resume";
    case EndpointAction::kEnable:
      return "enable";
  }
  return "?";
}

Result<ActionResult> apply_endpoint_action(const Endpoint& e, EndpointAction a, WallTime now) {
  ActionResult out{e, false};
  Endpoint& n = out.endpoint;
  auto move_to = [&](EndpointState s) {
    if (n.state == s && n.disabled_reason.is_none()) return;
    n.state = s;
    n.disabled_reason = ErrorCode::none();
    n.updated_at = now;
    out.changed = true;
  };
  switch (a) {
    case EndpointAction::kPause:  // SPEC R9
      if (e.state == EndpointState::kDisabled) {
        return make_error(Errc::kInvalidArgument, "endpoint is disabled; enable it first", "state",
                          "endpoint_disabled");
      }
      move_to(EndpointState::kPaused);
      break;
    case EndpointAction::kResume:  // SPEC R9.2
      if (e.state == EndpointState::kDisabled) {
        return make_error(Errc::kInvalidArgument,
                          "endpoint is disabled; send a test event, then enable it (R8.5)", "state",
                          "endpoint_disabled");
      }
      move_to(EndpointState::kEnabled);
      break;
    case EndpointAction::kEnable:  // SPEC R8.5
      move_to(EndpointState::kEnabled);
      break;
  }
  return out;
}

Endpoint disabled_endpoint(const Endpoint& e, ErrorCode reason, WallTime now) {
  Endpoint n = e;
  n.state = EndpointState::kDisabled;  // SPEC R8.2
  n.disabled_reason = reason;          // SPEC R8.4: the endpoint shows the reason
  n.updated_at = now;
  return n;
}

Notification disable_notification(const Endpoint& e, ErrorCode reason, DeliveryId trigger,
                                  uint16_t attempts, WallTime now) {
  Notification n;
  n.tenant = e.tenant;
  n.endpoint = e.id;
  n.kind = "endpoint_disabled";
  n.reason = reason;
  n.at = now;
  const std::string code = reason.is_none() ? std::string("unknown") : reason.str();
  if (reason.kind == ErrorCode::Kind::kGone) {
    n.message = "endpoint " + e.url + " answered 410 Gone (delivery " + std::to_string(trigger) +
                "); it is disabled and its queued deliveries are dead";
  } else {
    n.message = "endpoint " + e.url + " exhausted " + std::to_string(attempts) +
                " attempts (delivery " + std::to_string(trigger) + ", last error " + code +
                "); it is disabled and its queued deliveries are dead";
  }
  n.message += ". Fix the receiver, send a test event, see 2xx, then re-enable.";
  return n;
}

std::string status_check_url(std::string_view tmpl, std::string_view webhook_id) {
  std::string out;
  out.reserve(tmpl.size() + webhook_id.size());
  size_t at = 0;
  for (size_t hit; (hit = tmpl.find(kWebhookIdPlaceholder, at)) != std::string_view::npos;) {
    out.append(tmpl.substr(at, hit - at));
    out.append(webhook_id);
    at = hit + kWebhookIdPlaceholder.size();
  }
  out.append(tmpl.substr(at));
  return out;
}

Result<void> check_reconcile(const Endpoint& e,
                             const std::function<Result<void>(std::string_view url)>& check) {
  if (e.status_url.empty()) {
    if (e.on_unknown != OnUnknown::kReconcile) return ok();
    return make_error(Errc::kInvalidArgument,
                      "on_unknown \"reconcile\" needs a status_url to ask (with {webhook_id})",
                      "status_url", "missing_status_url");
  }
  if (e.status_url.find(kWebhookIdPlaceholder) == std::string::npos) {
    return make_error(Errc::kInvalidArgument,
                      "status_url must name the delivery with {webhook_id}, e.g. "
                      "https://example.com/webhooks/{webhook_id}/status",
                      "status_url", "invalid_status_url");
  }
  // A webhook id's longest form (make_message_id): the filled-in URL's length is checked too.
  Result<void> r = check(status_check_url(e.status_url, "msg_00000000000000000000000000"));
  if (r.ok()) return r;
  Error err = r.error();
  err.field = "status_url";
  return err;
}

}  // namespace ringcast
