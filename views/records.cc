#include "views/records.h"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>

#include "core/endpoint_headers.h"
#include "net/signing.h"

namespace ringcast::views {
namespace {

bool is_set(WallTime t) {
  return t != WallTime() && t != WallTime::max();
}

void time_field(net::JsonWriter& w, std::string_view key, WallTime t) {
  w.key(key);
  if (is_set(t)) {
    w.value(rfc3339(t));
  } else {
    w.null();
  }
}

double to_ms_double(Duration d) {
  return static_cast<double>(d.count()) / 1e6;
}

void code_field(net::JsonWriter& w, std::string_view key, ErrorCode c) {
  w.key(key);
  if (c.is_none()) {
    w.null();
  } else {
    w.value(c.str());
  }
}

// SPEC R13.1: an event's ordering key, null when it has none.
void ordering_key_field(net::JsonWriter& w, const std::string& key) {
  w.key("ordering_key");
  if (key.empty()) {
    w.null();
  } else {
    w.value(key);
  }
}

void status_field(net::JsonWriter& w, std::string_view key, uint16_t status) {
  w.key(key);
  if (status == 0) {
    w.null();
  } else {
    w.value(static_cast<unsigned>(status));
  }
}

// The id of the delivery that superseded another (SPEC R13.3): the decimal id its record keeps
// in response_prefix; nullopt when that is not one.
std::optional<uint64_t> superseded_by(std::string_view text) {
  uint64_t v = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || p != text.data() + text.size()) return std::nullopt;
  return v;
}

}  // namespace

std::string rfc3339(WallTime t) {
  int64_t ms = t.ms();
  int64_t secs = ms >= 0 ? ms / 1000 : (ms - 999) / 1000;
  int millis = static_cast<int>(ms - secs * 1000);
  time_t tt = static_cast<time_t>(secs);
  struct tm tm {};
  gmtime_r(&tt, &tm);
  char buf[96];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, millis);
  return buf;
}

std::string id_text(uint64_t id) {
  return std::to_string(id);
}

std::string secret_text(const Secret& s) {
  return "whsec_" + net::base64_encode(s.key);
}

const char* breaker_state_name(BreakerSnapshot::State s) {
  switch (s) {
    case BreakerSnapshot::State::kClosed:
      return "closed";
    case BreakerSnapshot::State::kOpen:
      return "open";
    case BreakerSnapshot::State::kHalfOpen:
      return "half_open";
  }
  return "closed";
}

const char* ladder_name(Ladder l) {
  switch (l) {
    case Ladder::kNone:
      return "none";
    case Ladder::kFast:
      return "fast";
    case Ladder::kSlow:
      return "slow";
  }
  return "none";
}

void write_endpoint(net::JsonWriter& w, const Endpoint& e, bool with_secret) {
  w.begin_object();
  w.field("id", id_text(e.id));
  w.field("tenant", e.tenant);
  w.field("url", e.url);
  w.key("event_types").begin_array();
  for (const auto& t : e.event_types) w.value(t);
  w.end_array();
  w.field("policy", e.policy);
  w.field("signature", signature_profile_name(e.signature));
  w.field("state", endpoint_state_name(e.state));
  code_field(w, "disabled_reason", e.disabled_reason);
  w.key("rate_limit").begin_object();
  w.field("per_second", e.rate_limit.per_second);
  w.field("burst", e.rate_limit.burst);
  w.end_object();
  w.field("max_in_flight", e.max_in_flight);
  // In the order they are sent; a receiver credential's value is write-only (SPEC R14.5): its
  // name is shown, its value is null for every reader.
  w.key("headers").begin_object();
  for (const auto& h : e.headers) {
    if (is_credential_header(h.name)) {
      w.key(h.name).null();
    } else {
      w.field(h.name, h.value);
    }
  }
  w.end_object();
  w.field("idempotency_key", e.idempotency_key);
  w.field("on_unknown", on_unknown_name(e.on_unknown));
  w.key("status_url");
  if (e.status_url.empty()) {
    w.null();
  } else {
    w.value(e.status_url);
  }
  // SPEC R13 (docs/operations.md "Ordered delivery"): always shown, defaults too.
  w.field("ordering", ordering_name(e.ordering));
  w.field("on_head_failure", on_head_failure_name(e.on_head_failure));
  w.field("supersede", e.supersede);
  w.field("send_traceparent", e.send_traceparent);  // docs/tracing.md "Propagation"
  w.field("secrets_active", static_cast<unsigned>(e.secrets.size()));
  if (with_secret && !e.secrets.empty()) {
    w.field("secret", secret_text(e.secrets.front()));
    if (e.secrets.size() > 1) {
      time_field(w, "previous_secret_expires_at", e.secrets[1].expires_at);
    }
  }
  time_field(w, "created_at", e.created_at);
  time_field(w, "updated_at", e.updated_at);
  w.end_object();
}

void write_delivery(net::JsonWriter& w, const Delivery& d, const Event* event) {
  w.begin_object();
  w.field("id", id_text(d.id));
  w.field("event_seq", id_text(d.event));
  if (event) {
    w.field("event_id", event->id);
    w.field("message_id", event->message_id);
    w.field("event_type", event->type);
    ordering_key_field(w, event->ordering_key);
  }
  w.field("endpoint", id_text(d.endpoint));
  w.field("status", delivery_status_name(d.status));
  // Still retrying, but the latest attempt's outcome is UNKNOWN (R12.1, R12.10).
  w.key("outcome_pending");
  if (!is_terminal(d.status) && d.last_unknown()) {
    w.value("unknown");
  } else {
    w.null();
  }
  w.field("attempts", static_cast<unsigned>(d.attempts));
  w.field("fast_attempts", static_cast<unsigned>(d.fast_attempts));
  w.field("slow_attempts", static_cast<unsigned>(d.slow_attempts));
  status_field(w, "last_http_status", d.last_http_status);
  code_field(w, "last_code", d.last_code);
  time_field(w, "created_at", d.created_at);
  time_field(w, "next_attempt_at", is_terminal(d.status) ? WallTime() : d.next_attempt_at);
  time_field(w, "first_slow_at", d.first_slow_at);
  w.field("held_ms", to_ms_double(d.held));
  w.field("money", d.money());
  w.field("test", d.test());
  w.end_object();
}

void write_attempt(net::JsonWriter& w, const Attempt& a) {
  w.begin_object();
  if (is_check_record(a.number)) {  // a reconciliation status check (R12.11)
    w.field("kind", "status_check");
    w.field("after_attempt", static_cast<unsigned>((a.number - kCheckBase) / 32));
    // confirmed (2xx: the receiver has it), not_received (404: resent), pending (asked again)
    w.field("answer", a.outcome == Outcome::kSuccess    ? "confirmed"
                      : a.outcome == Outcome::kRejected ? "not_received"
                                                        : "pending");
    code_field(w, "code", a.code);
    status_field(w, "http_status", a.http_status);
    time_field(w, "started_at", a.started_at);
    w.field("duration_ms", to_ms_double(a.duration));
    w.field("response_prefix", a.response_prefix);
    w.end_object();
    return;
  }
  if (a.code.kind == ErrorCode::Kind::kSuperseded) {
    // SPEC R13.3: it ended superseded, replaced by the delivery its response_prefix names.
    w.field("kind", "superseded");
    time_field(w, "at", a.started_at);
    w.key("by");
    if (auto by = superseded_by(a.response_prefix)) {
      w.value(id_text(*by));
    } else {
      w.null();
    }
    w.end_object();
    return;
  }
  if (is_history_record(a.number)) {  // an operator's record, not an attempt (R12.10)
    const bool resolution = a.code.kind == ErrorCode::Kind::kResolvedByOperator;
    w.field("kind", resolution ? "resolution" : "resend");
    w.field("number", static_cast<unsigned>(a.number - kHistoryRecordBase + 1));
    if (resolution) w.field("resolved_as", a.outcome == Outcome::kSuccess ? "delivered" : "failed");
    time_field(w, "at", a.started_at);
    w.field("note", a.response_prefix);
    w.end_object();
    return;
  }
  w.field("kind", "attempt");
  w.field("number", static_cast<unsigned>(a.number));
  w.field("ladder", ladder_name(a.ladder));
  w.field("outcome", outcome_name(a.outcome));
  code_field(w, "code", a.code);
  status_field(w, "http_status", a.http_status);
  w.field("request_written", a.request_written);
  time_field(w, "started_at", a.started_at);
  w.field("duration_ms", to_ms_double(a.duration));
  w.key("timings").begin_object();
  w.field("dns_ms", to_ms_double(a.timings.dns));
  w.field("connect_ms", to_ms_double(a.timings.connect));
  w.field("tls_ms", to_ms_double(a.timings.tls));
  w.field("first_byte_ms", to_ms_double(a.timings.first_byte));
  w.field("total_ms", to_ms_double(a.timings.total));
  w.end_object();
  w.field("response_prefix", a.response_prefix);
  w.end_object();
}

void write_history(net::JsonWriter& w, const std::vector<Attempt>& records) {
  // The stores keep attempts, status checks and operator records in number ranges of their
  // own (core/types.h); the history reads in time order.
  std::vector<const Attempt*> order;
  order.reserve(records.size());
  for (const Attempt& a : records) order.push_back(&a);
  std::stable_sort(order.begin(), order.end(), [](const Attempt* x, const Attempt* y) {
    return x->started_at < y->started_at;
  });
  w.begin_array();
  for (const Attempt* a : order) write_attempt(w, *a);
  w.end_array();
}

void write_delivery_detail(net::JsonWriter& w, const DeliveryDetail& d) {
  w.begin_object();
  w.key("delivery");
  write_delivery(w, d.delivery);
  w.field("tenant", d.tenant);
  w.key("attempts");
  write_history(w, d.attempts);
  w.end_object();
}

void write_event(net::JsonWriter& w, const Event& e) {
  w.begin_object();
  w.field("id", e.id);
  w.field("message_id", e.message_id);  // the webhook id receivers see (R11.3)
  w.field("tenant", e.tenant);
  w.field("type", e.type);
  ordering_key_field(w, e.ordering_key);
  w.field("seq", id_text(e.seq));
  time_field(w, "created_at", e.created_at);
  w.key("payload");
  if (e.payload.empty()) {
    w.null();
  } else {
    w.raw(e.payload);  // validated JSON at intake (R1: delivered byte-for-byte)
  }
  w.end_object();
}

void write_breaker(net::JsonWriter& w, std::string_view tenant, const BreakerView& b) {
  w.begin_object();
  w.field("tenant", tenant);
  w.field("state", breaker_state_name(b.snapshot.state));
  w.field("failed_probes", b.snapshot.failed_probes);
  time_field(w, "opened_at", b.snapshot.opened_at);
  time_field(w, "reopen_at",
             b.snapshot.state == BreakerSnapshot::State::kOpen ? b.snapshot.reopen_at : WallTime());
  w.field("window_total", b.window_total);
  w.field("window_failed", b.window_failed);
  // SPEC R4: only endpoints on a policy with a breaker feed it (smengo-shaped ones do not).
  w.field("endpoints", b.endpoints);
  w.field("endpoints_using_breaker", b.endpoints_using);
  w.end_object();
}

void write_notification(net::JsonWriter& w, const Notification& n) {
  w.begin_object();
  write_notification_fields(w, n);
  w.end_object();
}

void write_notification_fields(net::JsonWriter& w, const Notification& n) {
  w.field("seq", id_text(n.seq));
  w.field("tenant", n.tenant);
  w.key("endpoint");
  if (n.endpoint == 0) {
    w.null();
  } else {
    w.value(id_text(n.endpoint));
  }
  w.field("kind", n.kind);
  code_field(w, "reason", n.reason);
  time_field(w, "at", n.at);
  w.field("message", n.message);
  // What disabled the endpoint (SPEC R8.4): its URL then, the delivery, its attempts and last
  // HTTP status; null in a notification stored before these were kept.
  w.key("endpoint_url");
  if (n.endpoint_url.empty()) {
    w.null();
  } else {
    w.value(n.endpoint_url);
  }
  w.key("delivery");
  if (n.trigger == 0) {
    w.null();
    w.key("attempts").null();
  } else {
    w.value(id_text(n.trigger));
    w.field("attempts", static_cast<uint64_t>(n.attempts));
  }
  w.key("last_http_status");
  if (n.last_http_status == 0) {
    w.null();
  } else {
    w.value(static_cast<uint64_t>(n.last_http_status));
  }
}

}  // namespace ringcast::views
