// The JSON shape of the domain records (endpoints, deliveries, attempts, events, breaker,
// notifications), in one place for the REST API, the portal, the operator webhook and the
// owner's e-mail. Invariant: 64-bit ids are JSON strings (they exceed 2^53, the
// largest integer a JavaScript client reads exactly); times are RFC 3339 UTC with
// milliseconds, or null when unset; secrets appear only where a writer asks for them.
#pragma once

#include <string>
#include <vector>

#include "core/engine.h"
#include "core/types.h"
#include "net/json_writer.h"

namespace ringcast::views {

std::string rfc3339(WallTime t);   // "2026-01-01T00:00:00.000Z"
std::string id_text(uint64_t id);  // decimal

// "whsec_<base64>": how a secret's raw key is shown (net/signing decode_secret inverts it).
std::string secret_text(const Secret& s);

void write_endpoint(net::JsonWriter& w, const Endpoint& e, bool with_secret);
// With `event`: also "event_id" and "event_type" (the producer's id and the type, R10.2).
void write_delivery(net::JsonWriter& w, const Delivery& d, const Event* event = nullptr);
void write_attempt(net::JsonWriter& w, const Attempt& a);
// A delivery's attempts, status checks and operator records as one array, in time order.
void write_history(net::JsonWriter& w, const std::vector<Attempt>& records);
void write_delivery_detail(net::JsonWriter& w, const DeliveryDetail& d);
void write_event(net::JsonWriter& w, const Event& e);  // the payload verbatim
void write_breaker(net::JsonWriter& w, std::string_view tenant, const BreakerView& b);
void write_notification(net::JsonWriter& w, const Notification& n);
// The same fields without the braces (the operator webhook adds its envelope type).
void write_notification_fields(net::JsonWriter& w, const Notification& n);

const char* breaker_state_name(BreakerSnapshot::State s);
const char* ladder_name(Ladder l);

}  // namespace ringcast::views
