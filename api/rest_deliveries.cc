// The REST adapter's delivery log routes (SPEC R10.2, R12.10; docs/operations.md "Delivery
// log"): list, recent, one delivery with its attempts, resolve, resend, requeue jobs.
#include <simdjson.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "api/rest_internal.h"
#include "core/engine.h"
#include "core/result.h"
#include "core/time.h"
#include "core/types.h"
#include "views/records.h"

namespace ringcast::api {

using views::id_text;
using views::rfc3339;
using views::write_delivery;
using views::write_event;
using views::write_history;

namespace rest {

// -- deliveries, tenant state --

// The delivery log is read from the store, which keeps no list of tenants: the shard owning a
// tenant knows whether it exists. A collection read (deliveries, deliveries/recent,
// notifications) that found nothing asks it, so that a tenant that never had an endpoint is
// 404 unknown_tenant there too, as on the endpoint list, intake, breaker and subscription
// routes (and not 200 with an empty list, which hides a misspelt tenant). One hop to the shard,
// only for empty answers; it blocks the read thread (the HTTP loop when read_threads is 0),
// bounded by kTenantCheckWait. Shard threads never wait for either, so this cannot deadlock.
constexpr auto kTenantCheckWait = std::chrono::seconds(5);

Result<void> check_tenant(Engine& engine, const std::string& tenant) {
  auto answer = std::make_shared<std::promise<Result<void>>>();
  std::future<Result<void>> known = answer->get_future();
  engine.list_endpoints(tenant, [answer](Result<std::vector<Endpoint>> r) {
    answer->set_value(r.ok() ? ok() : Result<void>(r.error()));
  });
  if (known.wait_for(kTenantCheckWait) != std::future_status::ready) {
    return make_error(Errc::kUnavailable, "the engine did not answer in time", nullptr,
                      "overloaded");
  }
  return known.get();
}

namespace {

std::optional<DeliveryStatus> parse_status(std::string_view s) {
  // kSuperseded: SPEC R13.3.
  for (auto st : {DeliveryStatus::kPending, DeliveryStatus::kInFlight, DeliveryStatus::kDelivered,
                  DeliveryStatus::kFailed, DeliveryStatus::kDead, DeliveryStatus::kUnknown,
                  DeliveryStatus::kSuperseded}) {
    if (s == delivery_status_name(st)) return st;
  }
  return std::nullopt;
}

// The events `items` carry, by seq, read together (one store call; absent ones map to nullopt,
// and a failed read leaves the items without their event rather than failing the page).
std::unordered_map<EventSeq, std::optional<Event>> events_of(Engine& engine,
                                                             std::string_view tenant,
                                                             const std::vector<Delivery>& items) {
  std::unordered_map<EventSeq, std::optional<Event>> events;
  std::vector<EventSeq> seqs;
  for (const Delivery& d : items) {
    if (events.emplace(d.event, std::nullopt).second) seqs.push_back(d.event);
  }
  auto read = engine.get_events_by_seq(tenant, seqs);
  if (!read) return events;
  for (size_t i = 0; i < seqs.size() && i < read->size(); ++i) {
    events[seqs[i]] = std::move((*read)[i]);
  }
  return events;
}

}  // namespace

void list_deliveries(Call& c, const std::string& tenant) {
  auto q = parse_query(c.req.query());
  if (!q) return c.answer(bad_request("invalid_query", "malformed query string"));
  std::optional<EndpointId> endpoint;
  std::optional<DeliveryStatus> status;
  size_t limit = c.opt.default_list_limit;
  std::string cursor;
  for (const auto& [k, v] : q->params) {
    if (k == "endpoint") {
      if (v.empty()) continue;
      endpoint = parse_u64(v);
      if (!endpoint)
        return c.answer(bad_request("invalid_value", "endpoint must be an id", "endpoint"));
    } else if (k == "state" || k == "status") {
      if (v.empty()) continue;
      status = parse_status(v);
      if (!status) {
        return c.answer(
            bad_request("invalid_value",
                        "state must be pending, in_flight, delivered, failed, dead, unknown or "
                        "superseded",
                        k));
      }
    } else if (k == "limit") {
      auto n = parse_limit(v, c.opt.max_list_limit);
      if (!n) return c.answer(limit_error(c.opt.max_list_limit));
      limit = *n;
    } else if (k == "cursor") {
      cursor = v;
    } else {
      return c.answer(bad_request("unknown_field", "unknown query parameter " + k, k));
    }
  }
  c.read([&engine = c.engine, tenant, endpoint, status, limit,
          cursor = std::move(cursor)]() -> HttpResponse {
    auto page = engine.list_deliveries(tenant, endpoint, status, limit, cursor);
    if (!page) return error_response(page.error());
    if (page->items.empty()) {
      if (auto known = check_tenant(engine, tenant); !known) return error_response(known.error());
    }
    // Each item names its event (producer id and type); a page often shares events (fan-out).
    // Read together: on Redis one round trip per page, not one per event.
    auto events = events_of(engine, tenant, page->items);
    Writer w;
    w.begin_object().key("deliveries").begin_array();
    for (const auto& d : page->items) {
      auto it = events.find(d.event);
      write_delivery(w, d, it != events.end() && it->second ? &*it->second : nullptr);
    }
    w.end_array();
    w.key("next_cursor");
    if (page->next_cursor.empty()) {
      w.null();
    } else {
      w.value(page->next_cursor);
    }
    w.end_object();
    return ok_json(200, w);
  });
}

namespace {

// A delivery with its attempts and, when the engine has it, its event (SPEC R10.2: type, body).
void write_delivery_full(Writer& w, const DeliveryDetail& d, const Event* ev) {
  w.begin_object();
  w.key("delivery");
  write_delivery(w, d.delivery);
  w.key("attempts");
  write_history(w, d.attempts);
  w.key("event");
  if (ev != nullptr) {
    write_event(w, *ev);
  } else {
    w.null();
  }
  w.end_object();
}
void write_delivery_full(Writer& w, Engine& engine, std::string_view tenant,
                         const DeliveryDetail& d) {
  auto ev = engine.get_event_by_seq(tenant, d.delivery.event);
  write_delivery_full(w, d, ev && ev->has_value() ? &**ev : nullptr);
}

}  // namespace

void recent_deliveries(Call& c, const std::string& tenant) {
  c.read([&engine = c.engine, tenant]() -> HttpResponse {
    auto recent = engine.recent_deliveries(tenant);
    if (!recent) return error_response(recent.error());
    if (recent->empty()) {
      if (auto known = check_tenant(engine, tenant); !known) return error_response(known.error());
    }
    // Their attempts and events read together (one round trip each on Redis).
    std::vector<DeliveryId> ids;
    ids.reserve(recent->size());
    for (const auto& d : *recent) ids.push_back(d.id);
    auto details = engine.get_deliveries(tenant, ids);
    if (!details) return error_response(details.error());
    auto events = events_of(engine, tenant, *recent);
    Writer w;
    w.begin_object().key("deliveries").begin_array();
    for (size_t i = 0; i < recent->size(); ++i) {
      DeliveryDetail bare;
      const DeliveryDetail* d = &bare;
      if ((*details)[i]) {
        d = &*(*details)[i];
      } else {
        bare.delivery = (*recent)[i];
      }
      auto it = events.find(d->delivery.event);
      write_delivery_full(w, *d, it != events.end() && it->second ? &*it->second : nullptr);
    }
    w.end_array().end_object();
    return ok_json(200, w);
  });
}

void get_delivery(Call& c, const std::string& tenant, std::string_view id_text_in) {
  auto id = parse_u64(id_text_in);
  if (!id) return c.answer(unknown("delivery", id_text_in));
  c.read(
      [&engine = c.engine, tenant, id = *id, id_text = std::string(id_text_in)]() -> HttpResponse {
        auto d = engine.get_delivery(tenant, id);
        if (!d) return error_response(d.error());
        if (!d->has_value() || (*d)->tenant != tenant) return unknown("delivery", id_text);
        Writer w;
        write_delivery_full(w, engine, tenant, **d);
        return ok_json(200, w);
      });
}

namespace {

// An operator's change of one delivery (resolve, resend), run on a read thread: `start` asks
// the engine, this waits (bounded) for the owning shard's answer, then answers the delivery as
// the store has it now, with its history.
HttpResponse changed_delivery(Engine& engine, const std::string& tenant, DeliveryId id, int status,
                              const char* timeout_message,
                              const std::function<void(Callback<Delivery>)>& start) {
  auto answer = std::make_shared<std::promise<Result<Delivery>>>();
  auto got = answer->get_future();
  start([answer](Result<Delivery> r) { answer->set_value(std::move(r)); });
  if (got.wait_for(std::chrono::seconds(30)) != std::future_status::ready) {
    return HttpResponse::error(503, "timeout", timeout_message);
  }
  Result<Delivery> r = got.get();
  if (!r) return error_response(r.error());
  auto detail = engine.get_delivery(tenant, id);
  Writer w;
  if (detail && detail->has_value()) {
    write_delivery_full(w, engine, tenant, **detail);
  } else {
    DeliveryDetail bare;
    bare.delivery = *r;
    write_delivery_full(w, engine, tenant, bare);
  }
  return ok_json(status, w);
}

}  // namespace

// POST .../deliveries/{id}/resolve {"outcome": "delivered" | "failed", "note"?} (R12.10): an
// operator's verdict on a delivery that ended `unknown`. The engine reads the delivery from the
// store (so this runs on a read thread) and the owning shard records the verdict.
void resolve_delivery(Call& c, const std::string& tenant, std::string_view id_text_in) {
  auto id = parse_u64(id_text_in);
  if (!id) return c.answer(unknown("delivery", id_text_in));
  std::optional<Resolution> verdict;
  std::string note;
  auto bad = read_object(
      c.parsers.ondemand, c.req.body.data(), c.req.body.size(), c.capacity(),
      [&](std::string_view key, od::value& v) -> std::optional<Bad> {
        if (key == "outcome") {
          std::string o;
          if (auto b = get_string(v, "outcome", o)) return b;
          if (o == "delivered") verdict = Resolution::kDelivered;
          if (o == "failed") verdict = Resolution::kFailed;
          if (!verdict) {
            return Bad{"invalid_value", "outcome must be delivered or failed", "outcome"};
          }
        } else if (key == "note") {
          if (auto b = get_string(v, "note", note)) return b;
          if (note.size() > kResolutionNoteBytes) {
            return Bad{"invalid_value", "note must be at most 512 bytes", "note"};
          }
        } else {
          return Bad{"unknown_field", "unknown field " + std::string(key), std::string(key)};
        }
        return std::nullopt;
      });
  if (bad) return c.answer(*bad);
  if (!verdict) {
    return c.answer(
        bad_request("missing_field", "outcome is required (delivered or failed)", "outcome"));
  }
  c.read([&engine = c.engine, tenant, id = *id, verdict = *verdict,
          note = std::move(note)]() mutable -> HttpResponse {
    return changed_delivery(engine, tenant, id, 200, "the resolution was not confirmed in time",
                            [&](Callback<Delivery> cb) {
                              engine.resolve_delivery(tenant, id, verdict, std::move(note),
                                                      std::move(cb));
                            });
  });
}

// -- replay (docs/operations.md "Delivery log") --

// RFC 3339 ("2026-01-02T03:04:05Z", fractions of a second and a ±hh:mm offset allowed).
std::optional<WallTime> parse_rfc3339(std::string_view s) {
  auto digits = [&](size_t at, size_t n, int& out) {
    if (at + n > s.size()) return false;
    out = 0;
    for (size_t i = at; i < at + n; ++i) {
      if (s[i] < '0' || s[i] > '9') return false;
      out = out * 10 + (s[i] - '0');
    }
    return true;
  };
  int y, mo, d, h, mi, sec;
  if (!digits(0, 4, y) || s.size() < 19 || s[4] != '-' || !digits(5, 2, mo) || s[7] != '-' ||
      !digits(8, 2, d) || (s[10] != 'T' && s[10] != 't' && s[10] != ' ') || !digits(11, 2, h) ||
      s[13] != ':' || !digits(14, 2, mi) || s[16] != ':' || !digits(17, 2, sec)) {
    return std::nullopt;
  }
  if (mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || sec > 60) return std::nullopt;
  size_t i = 19;
  int64_t frac_ms = 0;
  if (i < s.size() && s[i] == '.') {
    ++i;
    size_t n = 0;
    for (; i < s.size() && s[i] >= '0' && s[i] <= '9'; ++i, ++n) {
      if (n < 3) frac_ms = frac_ms * 10 + (s[i] - '0');
    }
    if (n == 0) return std::nullopt;
    for (; n < 3; ++n) frac_ms *= 10;
  }
  int64_t offset_min = 0;
  if (i < s.size() && (s[i] == 'Z' || s[i] == 'z')) {
    ++i;
  } else if (i < s.size() && (s[i] == '+' || s[i] == '-')) {
    int oh, om;
    if (!digits(i + 1, 2, oh) || i + 3 >= s.size() || s[i + 3] != ':' || !digits(i + 4, 2, om))
      return std::nullopt;
    offset_min = (s[i] == '-' ? -1 : 1) * (oh * 60 + om);
    i += 6;
  } else {
    return std::nullopt;
  }
  if (i != s.size()) return std::nullopt;
  // Days from the civil date (H. Hinnant's algorithm).
  const int yy = y - (mo <= 2 ? 1 : 0);
  const int era = (yy >= 0 ? yy : yy - 399) / 400;
  const int yoe = yy - era * 400;
  const int doy = (153 * (mo + (mo > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const int doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  const int64_t days = static_cast<int64_t>(era) * 146097 + doe - 719468;
  const int64_t secs = days * 86400 + h * 3600 + mi * 60 + sec - offset_min * 60;
  return WallTime::from_ms(secs * 1000 + frac_ms);
}

// POST .../deliveries/{id}/resend {"note"?}: the same delivery goes out again (202).
void resend_delivery(Call& c, const std::string& tenant, std::string_view id_text_in) {
  auto id = parse_u64(id_text_in);
  if (!id) return c.answer(unknown("delivery", id_text_in));
  std::string note;
  if (!c.req.body.empty()) {
    auto bad = read_object(
        c.parsers.ondemand, c.req.body.data(), c.req.body.size(), c.capacity(),
        [&](std::string_view key, od::value& v) -> std::optional<Bad> {
          if (key == "note") {
            if (auto b = get_string(v, "note", note)) return b;
            if (note.size() > kResolutionNoteBytes) {
              return Bad{"invalid_value", "note must be at most 512 bytes", "note"};
            }
            return std::nullopt;
          }
          return Bad{"unknown_field", "unknown field " + std::string(key), std::string(key)};
        });
    if (bad) return c.answer(*bad);
  }
  if (note.empty()) note = "resend";
  c.read([&engine = c.engine, tenant, id = *id, note = std::move(note)]() mutable -> HttpResponse {
    return changed_delivery(engine, tenant, id, 202, "the resend was not confirmed in time",
                            [&](Callback<Delivery> cb) {
                              engine.resend_delivery(tenant, id, std::move(note), std::move(cb));
                            });
  });
}

namespace {

void write_job(Writer& w, const JobView& j) {
  w.begin_object();
  w.field("id", id_text(j.id));
  w.field("kind", "recover");
  w.field("endpoint", id_text(j.endpoint));
  w.field("state", job_state_name(j.state));
  w.field("since", rfc3339(j.since));
  // No `until` given: null (the job runs to the newest delivery), not the largest time kept.
  if (j.until == WallTime::max()) {
    w.key("until").null();
  } else {
    w.field("until", rfc3339(j.until));
  }
  w.field("total", j.total);
  w.field("scanned", j.scanned);
  w.field("requeued", j.requeued);
  w.field("skipped", j.skipped);
  w.field("in_flight", static_cast<uint64_t>(j.in_flight));
  w.field("scan_done", j.scan_done);
  w.field("queued_at", rfc3339(j.queued_at));
  w.key("started_at");  // null while the job waits queued (SPEC R14 quotas)
  if (j.started_at == WallTime()) {
    w.null();
  } else {
    w.value(rfc3339(j.started_at));
  }
  w.key("finished_at");
  if (j.finished_at == WallTime()) {
    w.null();
  } else {
    w.value(rfc3339(j.finished_at));
  }
  w.key("error");
  if (j.error.empty()) {
    w.null();
  } else {
    w.value(j.error);
  }
  w.end_object();
}

}  // namespace

Callback<JobView> job_answer(SharedResponder r, uint16_t status) {
  return [r, status](Result<JobView> res) {
    if (!res) return r->send(error_response(res.error()));
    Writer w;
    w.begin_object().key("job");
    write_job(w, *res);
    w.end_object();
    r->send(ok_json(status, w));
  };
}

// POST .../endpoints/{id}/recover {"since", "until"?}: a requeue job (202 {"job"}).
// The route keeps the path /recover while the code calls the job a requeue.
void requeue_endpoint(Call& c, const std::string& tenant, EndpointId id) {
  std::optional<WallTime> since, until;
  auto bad = read_object(
      c.parsers.ondemand, c.req.body.data(), c.req.body.size(), c.capacity(),
      [&](std::string_view key, od::value& v) -> std::optional<Bad> {
        if (key != "since" && key != "until") {
          return Bad{"unknown_field", "unknown field " + std::string(key), std::string(key)};
        }
        std::string text;
        if (auto b = get_string(v, std::string(key).c_str(), text)) return b;
        auto t = parse_rfc3339(text);
        if (!t) {
          return Bad{"invalid_value",
                     std::string(key) + " must be an RFC 3339 time (2026-01-02T03:04:05Z)",
                     std::string(key)};
        }
        (key == "since" ? since : until) = *t;
        return std::nullopt;
      });
  if (bad) return c.answer(*bad);
  if (!since) return c.answer(bad_request("missing_field", "since is required", "since"));
  if (!until) until = WallTime::max();
  if (*until < *since) {
    return c.answer(bad_request("invalid_value", "until must not be before since", "until"));
  }
  c.engine.requeue_endpoint(tenant, id, *since, *until,
                            job_answer(share(std::move(c.responder)), 202));
}

}  // namespace rest

}  // namespace ringcast::api
