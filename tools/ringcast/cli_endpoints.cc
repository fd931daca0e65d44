// `ringcast endpoints list|create|update|get|pause|resume|enable|delete|test|rotate|ordering`.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <memory>
#include <optional>

#include "net/json_writer.h"
#include "tools/ringcast/cli_commands.h"

namespace ringcast::cli {
namespace {

struct EndpointArgs {
  std::string tenant;
  std::string id;
  std::string url;
  std::vector<std::string> event_types;
  std::string policy;
  std::string signature;
  std::string secret;
  double rate = -1;
  int64_t burst = -1;
  int64_t max_in_flight = -1;
  bool all_events = false;           // update: drop the event-type filter
  std::vector<std::string> headers;  // "Name: value", repeatable
  bool no_headers = false;           // update: drop every extra header
  bool idempotency_key = false;
  bool no_idempotency_key = false;  // update: stop sending Idempotency-Key
  std::string on_unknown;           // retry | reconcile | review (SPEC R12.11)
  std::optional<std::string> status_url;
  std::string ordering;              // none | per_key | endpoint (SPEC R13)
  std::string on_head_failure;       // block | skip (SPEC R13.2)
  std::string supersede;             // "true" | "false" (SPEC R13.3)
  bool send_traceparent = false;     // docs/tracing.md "Propagation"
  bool no_send_traceparent = false;  // update: stop sending it
  int limit = 0;                     // ordering: keys to list (0: the server's default)
};

// "Name: value" → the pair (the server checks and trims; a line without ':' is refused here).
std::pair<std::string, std::string> split_header(const std::string& h) {
  const size_t colon = h.find(':');
  if (colon == std::string::npos || colon == 0)
    throw CliError("--header wants 'Name: value', got '" + h + "'");
  std::string name = h.substr(0, colon);
  while (!name.empty() && (name.back() == ' ' || name.back() == '\t')) name.pop_back();
  return {std::move(name), h.substr(colon + 1)};
}

std::string base(const EndpointArgs& a) {
  return "/v1/tenants/" + url_escape(a.tenant) + "/endpoints";
}

std::string types_text(simdjson::dom::element e) {
  simdjson::dom::array types;
  if (e["event_types"].get(types) || types.size() == 0) return "*";
  std::string out;
  for (auto t : types) {
    std::string_view s;
    if (t.get(s)) continue;
    if (!out.empty()) out += ",";
    out += s;
  }
  return out;
}

std::string state_text(simdjson::dom::element e) {
  std::string s = jstr(e, "state");
  std::string reason = jstr(e, "disabled_reason");
  return reason.empty() ? s : s + " (" + reason + ")";
}

void print_endpoint(simdjson::dom::element e) {
  Table t({"FIELD", "VALUE"});
  t.add({"id", jstr(e, "id")});
  t.add({"tenant", jstr(e, "tenant")});
  t.add({"url", jstr(e, "url")});
  t.add({"state", state_text(e)});
  t.add({"event types", types_text(e)});
  t.add({"policy", jstr(e, "policy")});
  t.add({"signature", jstr(e, "signature")});
  simdjson::dom::element rl;
  if (!e["rate_limit"].get(rl) && jnum(rl, "per_second") > 0) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%g/s burst %lld", jnum(rl, "per_second"),
                  static_cast<long long>(jint(rl, "burst")));
    t.add({"rate limit", buf});
  }
  int64_t mif = jint(e, "max_in_flight");
  t.add({"max in flight", mif == 0 ? "default" : std::to_string(mif)});
  simdjson::dom::object hs;
  if (!e["headers"].get(hs)) {
    for (auto f : hs) {
      std::string_view v;
      // null: a receiver credential, write-only (SPEC R14.5): named, never shown.
      if (f.value.is_null()) {
        t.add({"header", std::string(f.key) + ": (write-only)"});
        continue;
      }
      if (f.value.get(v)) continue;
      t.add({"header", std::string(f.key) + ": " + std::string(v)});
    }
  }
  bool idem = false;
  if (!e["idempotency_key"].get(idem) && idem) t.add({"idempotency key", "sent (webhook id)"});
  t.add({"on unknown", jtext(e, "on_unknown")});
  if (jtext(e, "status_url") != "-") t.add({"status url", jtext(e, "status_url")});
  t.add({"ordering", jtext(e, "ordering")});  // SPEC R13
  t.add({"on head failure", jtext(e, "on_head_failure")});
  t.add({"supersede", jtext(e, "supersede")});
  bool tp = false;
  if (!e["send_traceparent"].get(tp) && tp) t.add({"traceparent", "sent (W3C trace context)"});
  t.add({"active secrets", std::to_string(jint(e, "secrets_active"))});
  t.add({"created", jtext(e, "created_at")});
  t.add({"updated", jtext(e, "updated_at")});
  std::fputs(t.str().c_str(), stdout);
  std::string secret = jstr(e, "secret");
  if (!secret.empty()) {
    std::printf("\nsecret: %s\n", secret.c_str());
    std::string prev = jtext(e, "previous_secret_expires_at");
    if (prev != "-") std::printf("previous secret keeps signing until %s\n", prev.c_str());
  }
}

void run_list(GlobalOptions& g, EndpointArgs& a) {
  auto client = make_client(g);
  simdjson::dom::parser p;
  JsonReply r = call_json(*client, p, "GET", base(a));
  if (g.json) return print_json(r.body);
  simdjson::dom::array items;
  if (r.root["endpoints"].get(items)) throw CliError("unexpected answer: " + clip(r.body, 200));
  Table t({"ID", "STATE", "POLICY", "SIGNATURE", "EVENT TYPES", "URL"});
  for (auto e : items) {
    t.add({jstr(e, "id"), state_text(e), jstr(e, "policy"), jstr(e, "signature"), types_text(e),
           jstr(e, "url")});
  }
  t.print("no endpoints for tenant " + a.tenant);
}

// The JSON body of a create (POST) or an update (PATCH): only the fields given.
std::string endpoint_body(const EndpointArgs& a) {
  net::JsonWriter w;
  w.begin_object();
  if (!a.url.empty()) w.field("url", a.url);
  if (!a.event_types.empty() || a.all_events) {
    w.key("event_types").begin_array();
    for (const auto& t : a.event_types) w.value(t);
    w.end_array();
  }
  if (!a.policy.empty()) w.field("policy", a.policy);
  if (!a.signature.empty()) w.field("signature", a.signature);
  if (!a.secret.empty()) w.field("secret", a.secret);
  if (a.rate >= 0 || a.burst >= 0) {
    w.key("rate_limit").begin_object();
    if (a.rate >= 0) w.field("per_second", a.rate);
    if (a.burst >= 0) w.field("burst", a.burst);
    w.end_object();
  }
  if (a.max_in_flight >= 0) w.field("max_in_flight", a.max_in_flight);
  if (!a.headers.empty() || a.no_headers) {
    w.key("headers").begin_object();  // replaces the whole set (an update too)
    for (const auto& h : a.headers) {
      auto [name, value] = split_header(h);
      w.field(name, value);
    }
    w.end_object();
  }
  if (a.idempotency_key) w.field("idempotency_key", true);
  if (a.no_idempotency_key) w.field("idempotency_key", false);
  if (!a.on_unknown.empty()) w.field("on_unknown", a.on_unknown);
  if (a.status_url) w.field("status_url", *a.status_url);
  if (!a.ordering.empty()) w.field("ordering", a.ordering);
  if (!a.on_head_failure.empty()) w.field("on_head_failure", a.on_head_failure);
  if (!a.supersede.empty()) w.field("supersede", a.supersede == "true");
  if (a.send_traceparent) w.field("send_traceparent", true);
  if (a.no_send_traceparent) w.field("send_traceparent", false);
  w.end_object();
  return w.take();
}

void run_create(GlobalOptions& g, EndpointArgs& a) {
  auto client = make_client(g);
  simdjson::dom::parser p;
  JsonReply r = call_json(*client, p, "POST", base(a), endpoint_body(a));
  if (g.json) return print_json(r.body);
  std::printf("created endpoint %s\n\n", jstr(r.root, "id").c_str());
  print_endpoint(r.root);
}

void run_update(GlobalOptions& g, EndpointArgs& a) {
  if (a.all_events && !a.event_types.empty())
    throw CliError("--all-events and --event-type cannot be combined");
  if (a.no_headers && !a.headers.empty())
    throw CliError("--no-headers and --header cannot be combined");
  if (a.idempotency_key && a.no_idempotency_key)
    throw CliError("--idempotency-key and --no-idempotency-key cannot be combined");
  if (a.send_traceparent && a.no_send_traceparent)
    throw CliError("--send-traceparent and --no-send-traceparent cannot be combined");
  std::string body = endpoint_body(a);
  if (body == "{}")
    throw CliError(
        "nothing to update: give --url, --event-type, --all-events, --policy, --signature, "
        "--rate, --burst, --max-in-flight, --header, --no-headers, --idempotency-key, "
        "--no-idempotency-key, --on-unknown, --status-url, --ordering, --on-head-failure, "
        "--supersede, --send-traceparent or --no-send-traceparent");
  auto client = make_client(g);
  simdjson::dom::parser p;
  JsonReply r = call_json(*client, p, "PATCH", base(a) + "/" + url_escape(a.id), body);
  if (g.json) return print_json(r.body);
  std::printf("updated endpoint %s\n\n", jstr(r.root, "id").c_str());
  print_endpoint(r.root);
}

// GET …/{id}/ordering (SPEC R13): the endpoint's ordering keys that are blocked or have
// deliveries waiting, by hash (the key's text is not kept there).
void run_ordering(GlobalOptions& g, EndpointArgs& a) {
  std::string target = base(a) + "/" + url_escape(a.id) + "/ordering";
  if (a.limit > 0) target += "?limit=" + std::to_string(a.limit);
  auto client = make_client(g);
  simdjson::dom::parser p;
  JsonReply r = call_json(*client, p, "GET", target);
  if (g.json) return print_json(r.body);
  simdjson::dom::array keys;
  if (r.root["keys"].get(keys)) throw CliError("unexpected answer: " + clip(r.body, 200));
  Table t({"KEY", "HEAD", "BLOCKED", "BLOCKED BY", "HEAD AGE", "WAITING", "FIRST WAITING"});
  for (auto k : keys) {
    std::string age = "-";
    if (jtext(k, "head_age_seconds") != "-") {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.0fs", jnum(k, "head_age_seconds"));
      age = buf;
    }
    t.add({jstr(k, "order_key"), jtext(k, "head"), jbool(k, "blocked") ? "yes" : "no",
           jtext(k, "blocked_by"), age, std::to_string(jint(k, "waiting")),
           jtext(k, "first_waiting")});
  }
  t.print("no blocked or backlogged ordering keys on endpoint " + a.id);
}

// GET, DELETE, or POST …/{id}/{action}.
void run_on_one(GlobalOptions& g, EndpointArgs& a, const std::string& method,
                const std::string& action) {
  std::string target = base(a) + "/" + url_escape(a.id);
  if (!action.empty()) target += "/" + action;
  std::string body;
  if (action == "secret/rotate" && !a.secret.empty()) {
    net::JsonWriter w;
    w.begin_object().field("secret", a.secret).end_object();
    body = w.take();
  }
  auto client = make_client(g);
  simdjson::dom::parser p;
  JsonReply r = call_json(*client, p, method, target, body);
  if (g.json) return print_json(r.body);
  if (method == "DELETE") {
    std::printf("deleted endpoint %s\n", a.id.c_str());
  } else if (action == "test") {
    std::printf("test event queued as delivery %s (see: ringcast deliveries get --tenant %s %s)\n",
                jstr(r.root, "delivery_id").c_str(), a.tenant.c_str(),
                jstr(r.root, "delivery_id").c_str());
  } else {
    print_endpoint(r.root);
  }
}

// --ordering, --on-head-failure, --supersede (SPEC R13) on create and update; unset: the
// server's default on create, unchanged on update.
void add_ordering_options(CLI::App* cmd, EndpointArgs& a) {
  cmd->add_option("--ordering", a.ordering,
                  "what goes out in order: none (default) | per_key | endpoint (SPEC R13)")
      ->check(CLI::IsMember({"none", "per_key", "endpoint"}));
  cmd->add_option("--on-head-failure", a.on_head_failure,
                  "a head that ends failed: block (default, the key waits) | skip")
      ->check(CLI::IsMember({"block", "skip"}));
  cmd->add_option("--supersede", a.supersede,
                  "after a backlog send only a key's newest waiting one: true | false (default)")
      ->check(CLI::IsMember({"true", "false"}));
}

}  // namespace

void add_endpoint_commands(CLI::App& app, GlobalOptions& g) {
  CLI::App* ep = app.add_subcommand("endpoints", "manage a tenant's webhook endpoints");
  ep->require_subcommand(1);
  auto args = std::make_shared<EndpointArgs>();
  auto tenant = [args](CLI::App* sub) { add_tenant_option(sub, args->tenant); };
  auto id = [args](CLI::App* sub) { sub->add_option("id", args->id, "endpoint id")->required(); };

  CLI::App* list = ep->add_subcommand("list", "list the tenant's endpoints");
  tenant(list);
  list->callback([&g, args] { run_list(g, *args); });

  CLI::App* create = ep->add_subcommand("create", "register an endpoint (prints its secret)");
  tenant(create);
  create->add_option("--url", args->url, "receiver URL (https://...)")->required();
  create->add_option(
      "--event-type,-e", args->event_types,
      "event type filter, repeatable; \"payment.*\" matches a prefix (default: all)");
  create->add_option("--policy", args->policy, "smengo | xhub | a [policies.<name>] from config");
  create->add_option("--signature", args->signature, "standard | xhub | smengo")
      ->check(CLI::IsMember({"standard", "xhub", "smengo"}));
  create->add_option("--secret", args->secret, "signing secret (default: generated)");
  create->add_option("--rate", args->rate, "rate limit, requests per second")
      ->check(CLI::NonNegativeNumber);
  create->add_option("--burst", args->burst, "rate limit burst")->check(CLI::NonNegativeNumber);
  create->add_option("--max-in-flight", args->max_in_flight, "concurrent requests to it")
      ->check(CLI::NonNegativeNumber);
  // One value per flag: a header is never taken for the positional id that follows.
  create
      ->add_option("--header,-H", args->headers,
                   "extra request header 'Name: value', repeatable (at most 20, 4 KiB)")
      ->allow_extra_args(false);
  create->add_flag("--idempotency-key", args->idempotency_key,
                   "send Idempotency-Key: <webhook id> (the same on every attempt)");
  create
      ->add_option("--on-unknown", args->on_unknown,
                   "after an UNKNOWN outcome: retry (default) | reconcile | review")
      ->check(CLI::IsMember({"retry", "reconcile", "review"}));
  create->add_option("--status-url", args->status_url,
                     "reconcile: GET this URL first, {webhook_id} filled in");
  create->add_flag("--send-traceparent", args->send_traceparent,
                   "send a W3C traceparent header on every attempt");
  add_ordering_options(create, *args);
  create->callback([&g, args] { run_create(g, *args); });

  CLI::App* update = ep->add_subcommand("update", "change an endpoint (only the options given)");
  tenant(update);
  id(update);
  update->add_option("--url", args->url, "receiver URL");
  update->add_option("--event-type,-e", args->event_types,
                     "event type filter, repeatable (replaces the current one)");
  update->add_flag("--all-events", args->all_events, "drop the event-type filter");
  update->add_option("--policy", args->policy, "smengo | xhub | a [policies.<name>] from config");
  update->add_option("--signature", args->signature, "standard | xhub | smengo")
      ->check(CLI::IsMember({"standard", "xhub", "smengo"}));
  update->add_option("--rate", args->rate, "rate limit, requests per second (0: none)")
      ->check(CLI::NonNegativeNumber);
  update->add_option("--burst", args->burst, "rate limit burst")->check(CLI::NonNegativeNumber);
  update->add_option("--max-in-flight", args->max_in_flight, "concurrent requests (0: default)")
      ->check(CLI::NonNegativeNumber);
  update
      ->add_option("--header,-H", args->headers,
                   "extra request header 'Name: value', repeatable (replaces every current one)")
      ->allow_extra_args(false);
  update->add_flag("--no-headers", args->no_headers, "drop every extra header");
  update->add_flag("--idempotency-key", args->idempotency_key,
                   "send Idempotency-Key: <webhook id> (the same on every attempt)");
  update->add_flag("--no-idempotency-key", args->no_idempotency_key, "stop sending it");
  update
      ->add_option("--on-unknown", args->on_unknown,
                   "after an UNKNOWN outcome: retry | reconcile | review")
      ->check(CLI::IsMember({"retry", "reconcile", "review"}));
  update->add_option("--status-url", args->status_url,
                     "reconcile: GET this URL first, {webhook_id} filled in (\"\": none)");
  update->add_flag("--send-traceparent", args->send_traceparent,
                   "send a W3C traceparent header on every attempt");
  update->add_flag("--no-send-traceparent", args->no_send_traceparent, "stop sending it");
  add_ordering_options(update, *args);
  update->callback([&g, args] { run_update(g, *args); });

  CLI::App* ordering = ep->add_subcommand(
      "ordering", "its ordering keys that are blocked or have deliveries waiting (SPEC R13)");
  tenant(ordering);
  id(ordering);
  ordering->add_option("--limit", args->limit, "keys to list (the server's default: 100)")
      ->check(CLI::Range(1, 1000));
  ordering->callback([&g, args] { run_ordering(g, *args); });

  struct Action {
    const char* name;
    const char* help;
    const char* method;
    const char* path;
  };
  static constexpr Action kActions[] = {
      {"get", "show one endpoint", "GET", ""},
      {"pause", "pause: new events are not queued for it (SPEC R9)", "POST", "pause"},
      {"resume", "resume a paused endpoint", "POST", "resume"},
      {"enable", "re-enable a disabled endpoint (after a successful test)", "POST", "enable"},
      {"delete", "delete an endpoint", "DELETE", ""},
      {"test", "send it a ringcast.test event (also while paused)", "POST", "test"},
      {"rotate", "rotate its signing secret (the old one keeps signing for the overlap)", "POST",
       "secret/rotate"},
  };
  for (const Action& act : kActions) {
    CLI::App* sub = ep->add_subcommand(act.name, act.help);
    tenant(sub);
    id(sub);
    if (std::string_view(act.name) == "rotate") {
      sub->add_option("--secret", args->secret, "the new secret (default: generated)");
    }
    std::string method = act.method;
    std::string path = act.path;
    sub->callback([&g, args, method, path] { run_on_one(g, *args, method, path); });
  }
}

}  // namespace ringcast::cli
