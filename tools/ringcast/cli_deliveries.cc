// `ringcast deliveries list|recent|get|resolve` — the delivery log (SPEC R10) and an operator's
// verdict on a delivery that ended `unknown` (R12.10).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <memory>

#include "net/json_writer.h"

#include "tools/ringcast/cli_commands.h"

namespace ringcast::cli {
namespace {

struct DeliveryArgs {
  std::string tenant;
  std::string id;
  std::string endpoint;
  std::string state;
  int limit = 0;
  std::string cursor;
  std::string outcome;
  std::string note;
};

std::string base(const DeliveryArgs& a) {
  return "/v1/tenants/" + url_escape(a.tenant) + "/deliveries";
}

std::string last_text(simdjson::dom::element d) {
  std::string code = jtext(d, "last_code");
  std::string status = jtext(d, "last_http_status");
  if (code == "-" && status == "-") return "-";
  if (code == "-") return status;
  return code;
}

void delivery_row(Table& t, simdjson::dom::element d, const std::string& type) {
  std::vector<std::string> row = {jstr(d, "id"),
                                  jstr(d, "status"),
                                  std::to_string(jint(d, "attempts")),
                                  last_text(d),
                                  jstr(d, "endpoint"),
                                  jtext(d, "created_at"),
                                  jtext(d, "next_attempt_at")};
  if (!type.empty()) row.insert(row.begin() + 2, type);
  t.add(std::move(row));
}

void run_list(GlobalOptions& g, DeliveryArgs& a) {
  std::string target = base(a);
  std::string q;
  auto param = [&](const char* k, const std::string& v) {
    if (v.empty()) return;
    q += (q.empty() ? "?" : "&") + std::string(k) + "=" + url_escape(v);
  };
  param("endpoint", a.endpoint);
  param("state", a.state);
  if (a.limit > 0) param("limit", std::to_string(a.limit));
  param("cursor", a.cursor);
  auto client = make_client(g);
  simdjson::dom::parser p;
  JsonReply r = call_json(*client, p, "GET", target + q);
  if (g.json) return print_json(r.body);
  simdjson::dom::array items;
  if (r.root["deliveries"].get(items)) throw CliError("unexpected answer: " + clip(r.body, 200));
  Table t({"ID", "STATUS", "ATTEMPTS", "LAST", "ENDPOINT", "CREATED", "NEXT ATTEMPT"});
  for (auto d : items) delivery_row(t, d, "");
  t.print("no deliveries");
  std::string next = jstr(r.root, "next_cursor");
  if (!next.empty()) std::printf("\nmore: --cursor %s\n", next.c_str());
}

void run_recent(GlobalOptions& g, DeliveryArgs& a) {
  auto client = make_client(g);
  simdjson::dom::parser p;
  JsonReply r = call_json(*client, p, "GET", base(a) + "/recent");
  if (g.json) return print_json(r.body);
  simdjson::dom::array items;
  if (r.root["deliveries"].get(items)) throw CliError("unexpected answer: " + clip(r.body, 200));
  Table t(
      {"ID", "STATUS", "EVENT TYPE", "ATTEMPTS", "LAST", "ENDPOINT", "CREATED", "NEXT ATTEMPT"});
  for (auto item : items) {
    simdjson::dom::element d, ev;
    if (item["delivery"].get(d)) continue;
    std::string type = item["event"].get(ev) || ev.is_null() ? "-" : jstr(ev, "type");
    delivery_row(t, d, type);
  }
  t.print("no deliveries");
}

void run_get(GlobalOptions& g, DeliveryArgs& a) {
  auto client = make_client(g);
  simdjson::dom::parser p;
  JsonReply r = call_json(*client, p, "GET", base(a) + "/" + url_escape(a.id));
  if (g.json) return print_json(r.body);
  simdjson::dom::element d, ev;
  if (r.root["delivery"].get(d)) throw CliError("unexpected answer: " + clip(r.body, 200));
  Table info({"FIELD", "VALUE"});
  info.add({"id", jstr(d, "id")});
  info.add({"status", jstr(d, "status")});
  info.add({"endpoint", jstr(d, "endpoint")});
  info.add({"attempts", std::to_string(jint(d, "attempts")) + " (fast " +
                            std::to_string(jint(d, "fast_attempts")) + ", slow " +
                            std::to_string(jint(d, "slow_attempts")) + ")"});
  info.add({"last", last_text(d)});
  info.add({"created", jtext(d, "created_at")});
  info.add({"next attempt", jtext(d, "next_attempt_at")});
  if (!r.root["event"].get(ev) && !ev.is_null()) {
    info.add({"event", jstr(ev, "id") + " (" + jstr(ev, "type") + ")"});
    // SPEC R13.1: shown when the event has one.
    if (jtext(ev, "ordering_key") != "-") info.add({"ordering key", jstr(ev, "ordering_key")});
    simdjson::dom::element payload;
    if (!ev["payload"].get(payload)) info.add({"payload", clip(simdjson::minify(payload), 100)});
  }
  std::fputs(info.str().c_str(), stdout);
  simdjson::dom::array attempts;
  if (!r.root["attempts"].get(attempts) && attempts.size() > 0) {
    Table t({"#", "LADDER", "OUTCOME", "CODE", "HTTP", "STARTED", "MS", "RESPONSE"});
    for (auto at : attempts) {
      const std::string kind = jstr(at, "kind");
      if (kind == "resolution" || kind == "resend") {  // an operator's record, not an attempt
        const std::string what =
            kind == "resolution" ? "resolved " + jstr(at, "resolved_as") : std::string("resent");
        t.add({"-", "-", what, "-", "-", jtext(at, "at"), "-", clip(jstr(at, "note"), 40)});
        continue;
      }
      if (kind == "superseded") {  // SPEC R13.3: replaced by a newer delivery of its key
        t.add({"-", "-", "superseded", "-", "-", jtext(at, "at"), "-", "by " + jtext(at, "by")});
        continue;
      }
      char ms[32];
      std::snprintf(ms, sizeof ms, "%.1f", jnum(at, "duration_ms"));
      t.add({std::to_string(jint(at, "number")), jstr(at, "ladder"), jstr(at, "outcome"),
             jtext(at, "code"), jtext(at, "http_status"), jtext(at, "started_at"), ms,
             clip(jstr(at, "response_prefix"), 40)});
    }
    std::printf("\n");
    std::fputs(t.str().c_str(), stdout);
  }
}

void run_resolve(GlobalOptions& g, DeliveryArgs& a) {
  net::JsonWriter w;
  w.begin_object().field("outcome", a.outcome);
  if (!a.note.empty()) w.field("note", a.note);
  w.end_object();
  auto client = make_client(g);
  simdjson::dom::parser p;
  JsonReply r =
      call_json(*client, p, "POST", base(a) + "/" + url_escape(a.id) + "/resolve", w.take());
  if (g.json) return print_json(r.body);
  simdjson::dom::element d;
  if (r.root["delivery"].get(d)) throw CliError("unexpected answer: " + clip(r.body, 200));
  std::printf("delivery %s resolved: %s\n", jstr(d, "id").c_str(), jstr(d, "status").c_str());
}

}  // namespace

void add_delivery_commands(CLI::App& app, GlobalOptions& g) {
  CLI::App* dv = app.add_subcommand("deliveries",
                                    "read the delivery log; resolve deliveries that ended unknown");
  dv->require_subcommand(1);
  auto args = std::make_shared<DeliveryArgs>();
  auto tenant = [args](CLI::App* sub) { add_tenant_option(sub, args->tenant); };

  CLI::App* list = dv->add_subcommand("list", "list deliveries, newest first");
  tenant(list);
  list->add_option("--endpoint", args->endpoint, "only this endpoint id");
  list->add_option("--state", args->state,
                   "pending | in_flight | delivered | failed | dead | unknown (needs review) | "
                   "superseded")
      ->check(CLI::IsMember(
          {"pending", "in_flight", "delivered", "failed", "dead", "unknown", "superseded"}));
  list->add_option("--limit", args->limit, "page size (the server allows up to 1000 by default)")
      ->check(CLI::Range(1, 1000));
  list->add_option("--cursor", args->cursor, "continue after a previous page");
  list->callback([&g, args] { run_list(g, *args); });

  CLI::App* recent = dv->add_subcommand("recent", "the 25 latest deliveries (SPEC R10.2)");
  tenant(recent);
  recent->callback([&g, args] { run_recent(g, *args); });

  CLI::App* get = dv->add_subcommand("get", "one delivery with every attempt");
  tenant(get);
  get->add_option("id", args->id, "delivery id")->required();
  get->callback([&g, args] { run_get(g, *args); });

  CLI::App* resolve = dv->add_subcommand(
      "resolve", "record the verdict on a delivery that ended unknown (needs review)");
  tenant(resolve);
  resolve->add_option("id", args->id, "delivery id")->required();
  resolve->add_option("--outcome", args->outcome, "delivered | failed")
      ->required()
      ->check(CLI::IsMember({"delivered", "failed"}));
  resolve->add_option("--note", args->note, "why (kept in the delivery's history, <= 512 bytes)");
  resolve->callback([&g, args] { run_resolve(g, *args); });
}

}  // namespace ringcast::cli
