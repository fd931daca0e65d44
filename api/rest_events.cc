// The REST adapter's event intake (SPEC R1, R12.5): one event, the NDJSON bulk route with its
// per-line results, and the replay of an event (docs/operations.md "Delivery log").
#include <simdjson.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "api/rest_internal.h"
#include "core/engine.h"
#include "core/event_input.h"
#include "core/result.h"
#include "core/trace_context.h"

namespace ringcast::api::rest {

// -- events --

namespace {

struct ParsedEvent {
  EventInput input;
};

// Reads one event object. `tenant` is the path's (single form) or nullptr (bulk: each line
// names its own).
std::optional<Bad> read_event(RestApi::Parsers& p, const RestApiOptions& opt, const char* data,
                              size_t len, size_t capacity, const std::string* tenant,
                              EventInput& ev) {
  bool have_payload = false;
  bool have_id = false;
  bool have_type = false;
  bool have_tenant = tenant != nullptr;
  bool have_ordering_key = false;
  if (tenant) ev.tenant = *tenant;
  auto bad = read_object(
      p.ondemand, data, len, capacity,
      [&](std::string_view key, od::value& v) -> std::optional<Bad> {
        if (key == "id") {
          if (auto b = get_string(v, "id", ev.id)) return b;
          have_id = true;
        } else if (key == "type") {
          if (auto b = get_string(v, "type", ev.type)) return b;
          have_type = true;
        } else if (key == "payload") {
          std::string_view raw;
          if (auto b = raw_value(v, p.dom, "payload", raw)) return b;
          ev.payload.assign(raw);
          have_payload = true;
        } else if (key == "ordering_key") {  // SPEC R13.1
          if (auto b = get_string(v, "ordering_key", ev.ordering_key)) return b;
          have_ordering_key = true;
        } else if (key == "tenant" && tenant == nullptr) {
          if (auto b = get_string(v, "tenant", ev.tenant)) return b;
          have_tenant = true;
        } else if (key == "traceparent" && tenant == nullptr) {
          // A bulk line's own producer context (docs/tracing.md): one that does not parse is
          // ignored, never a reason to refuse the line.
          std::string tp;
          if (!get_string(v, "traceparent", tp))
            ev.parent = parse_traceparent(tp).value_or(TraceContext{});
        } else {
          return Bad{"unknown_field", "unknown field " + std::string(key), std::string(key)};
        }
        return std::nullopt;
      });
  if (bad) return bad;
  if (!have_tenant) return Bad{"missing_field", "tenant is required on every line", "tenant"};
  if (!have_id) return Bad{"missing_field", "id is required", "id"};
  if (!have_type) return Bad{"missing_field", "type is required", "type"};
  if (!have_payload) return Bad{"missing_field", "payload is required", "payload"};
  if (auto e = check_event_names(ev.tenant, ev.id, ev.type, event_limits(opt))) {
    return Bad{e->code, std::move(e->message), e->field};
  }
  // SPEC R13.1: a named key is 1..256 bytes of printable ASCII (an empty one is an error too).
  if (have_ordering_key) {
    if (auto e = check_ordering_key(ev.ordering_key, /*given=*/true)) {
      return Bad{e->code, std::move(e->message), e->field};
    }
  }
  return std::nullopt;
}

// SPEC R11.3: the webhook id receivers deduplicate by, named in the answer so a producer can
// match its event to what its receivers see (absent only for a repeat of an event whose
// idempotency record predates it).
void write_message_id(Writer& w, MessageIdBits message) {
  if (message.empty()) return;
  char id[kMessageIdChars];
  w.field("message_id", std::string_view(id, format_message_id(message, id)));
}

void write_submit_body(Writer& w, std::string_view event_id, const SubmitResult& s) {
  w.begin_object().field("event_id", event_id);
  write_message_id(w, s.message);
  w.field("deliveries", s.deliveries);
  // Cluster mode: taken by a node that does not own the tenant's partition; its owner fans it
  // out (deliveries not known here).
  if (s.queued) w.field("queued", true);
  w.end_object();
}

}  // namespace

namespace {

// The producer's W3C `traceparent` header (docs/tracing.md): its trace is the event's; one that
// does not parse is ignored, never a reason to refuse the event.
TraceContext producer_trace(const HttpRequest& req) {
  const std::string* tp = req.header("traceparent");
  return tp ? parse_traceparent(*tp).value_or(TraceContext{}) : TraceContext{};
}

}  // namespace

void submit_event(Call& c, const std::string& tenant) {
  EventInput ev;
  if (auto bad = read_event(c.parsers, c.opt, c.req.body.data(), c.req.body.size(), c.capacity(),
                            &tenant, ev)) {
    return c.answer(*bad);
  }
  ev.parent = producer_trace(c.req);
  auto r = share(std::move(c.responder));
  std::string id = ev.id;
  c.engine.submit(std::move(ev), [r, id = std::move(id)](Result<SubmitResult> res) {
    if (!res) return r->send(error_response(res.error()));
    Writer w;
    write_submit_body(w, id, *res);
    // SPEC R12.5: a repeat of the same event is answered like the first time, but 200.
    r->send(ok_json(res->kind == SubmitResult::Kind::kAccepted ? 202 : 200, w));
  });
}

namespace {

// Per-line result of a bulk request.
struct LineResult {
  uint32_t line = 0;  // 1-based
  std::string event_id;
  std::optional<Bad> bad;                      // rejected before the engine
  std::optional<Result<SubmitResult>> result;  // the engine's answer
};

HttpResponse bulk_response(std::vector<LineResult>& lines) {
  uint64_t accepted = 0, duplicates = 0, conflicts = 0, errors = 0;
  Writer items;
  items.begin_array();
  for (auto& l : lines) {
    items.begin_object().field("line", l.line);
    if (!l.event_id.empty()) items.field("event_id", l.event_id);
    if (l.bad) {
      errors++;
      items.field("status", 400).key("error").begin_object();
      items.field("code", l.bad->code).field("message", l.bad->message);
      if (!l.bad->field.empty()) items.field("field", l.bad->field);
      items.end_object();
    } else if (l.result && l.result->ok()) {
      const SubmitResult& s = l.result->value();
      bool dup = s.kind == SubmitResult::Kind::kDuplicate;
      (dup ? duplicates : accepted)++;
      write_message_id(items, s.message);
      items.field("status", dup ? 200 : 202).field("deliveries", s.deliveries);
      if (s.queued) items.field("queued", true);
    } else {
      Error e = l.result ? l.result->error()
                         : make_error(Errc::kInternal, "the engine gave no result for this line");
      if (e.code == Errc::kConflict) {
        conflicts++;
      } else {
        errors++;
      }
      items.field("status", static_cast<unsigned>(http_status_for(e))).key("error").begin_object();
      items.field("code", e.reason_or_code()).field("message", e.message ? e.message : "");
      if (e.field) items.field("field", e.field);
      items.end_object();
    }
    items.end_object();
  }
  items.end_array();
  Writer w;
  w.begin_object();
  w.field("lines", static_cast<uint64_t>(lines.size()));
  w.field("accepted", accepted).field("duplicates", duplicates);
  w.field("conflicts", conflicts).field("errors", errors);
  w.key("results").raw(items.str());
  w.end_object();
  return ok_json(200, w);
}

}  // namespace

void submit_bulk(Call& c) {
  const std::string& body = c.req.body;
  auto lines = std::make_shared<std::vector<LineResult>>();
  std::vector<EventInput> batch;
  std::vector<size_t> batch_line;  // index into *lines for each batch entry
  size_t pos = 0;
  uint32_t line_no = 0;
  const TraceContext request_trace = producer_trace(c.req);  // for lines without their own
  while (pos < body.size()) {
    size_t nl = body.find('\n', pos);
    size_t end = nl == std::string::npos ? body.size() : nl;
    line_no++;
    std::string_view line(body.data() + pos, end - pos);
    size_t start = pos;
    pos = end + 1;
    if (trim_ws(line).empty()) continue;
    if (lines->size() >= c.opt.max_bulk_events) {
      return c.answer(HttpResponse::error(
          413, "too_many_events",
          "a bulk request holds at most " + std::to_string(c.opt.max_bulk_events) + " events",
          "body"));
    }
    LineResult lr;
    lr.line = line_no;
    EventInput ev;
    lr.bad = read_event(c.parsers, c.opt, body.data() + start, line.size(), body.capacity() - start,
                        nullptr, ev);
    lr.event_id = ev.id;
    if (!lr.bad && !c.who.admin() && ev.tenant != c.who.tenant) {
      // A tenant key reaches its own tenant only, and says nothing of another's existence.
      lr.result = Result<SubmitResult>(make_error(
          Errc::kNotFound, "unknown tenant: create an endpoint first", "tenant", "unknown_tenant"));
    } else if (!lr.bad) {
      if (!ev.parent.valid()) ev.parent = request_trace;
      batch_line.push_back(lines->size());
      batch.push_back(std::move(ev));
    }
    lines->push_back(std::move(lr));
  }
  if (lines->empty()) {
    return c.answer(
        Bad{"invalid_json", "the bulk body holds no event (NDJSON: one per line)", "body"});
  }
  if (batch.empty()) return c.answer(bulk_response(*lines));
  auto r = share(std::move(c.responder));
  c.engine.submit_batch(std::move(batch), [r, lines, batch_line = std::move(batch_line)](
                                              std::vector<Result<SubmitResult>> results) {
    for (size_t i = 0; i < batch_line.size(); ++i) {
      if (i < results.size()) (*lines)[batch_line[i]].result = std::move(results[i]);
    }
    r->send(bulk_response(*lines));
  });
}

// -- replay (docs/operations.md "Delivery log") --

// POST .../events/{event_id}/replay: "replay missing" (202 {"event_id", "deliveries"}).
void replay_event(Call& c, const std::string& tenant, const std::string& event_id) {
  c.read([&engine = c.engine, tenant, event_id]() mutable -> HttpResponse {
    auto answer = std::make_shared<std::promise<Result<uint32_t>>>();
    auto got = answer->get_future();
    engine.replay_event(tenant, event_id,
                        [answer](Result<uint32_t> r) { answer->set_value(std::move(r)); });
    if (got.wait_for(std::chrono::seconds(30)) != std::future_status::ready) {
      return HttpResponse::error(503, "timeout", "the replay was not confirmed in time");
    }
    Result<uint32_t> r = got.get();
    if (!r) return error_response(r.error());
    Writer w;
    w.begin_object().field("event_id", event_id).field("deliveries", *r).end_object();
    return ok_json(202, w);
  });
}

}  // namespace ringcast::api::rest
