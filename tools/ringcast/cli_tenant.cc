// `ringcast tenant breaker|breaker-reset|subscription|notifications|settings`: a tenant's circuit
// breaker (SPEC R4, reset by hand: R4.8), its subscription switch (R6 subscription_inactive), its
// operator notifications (R8.4) and its settings (the owner's e-mail address, R8.4).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <memory>

#include "net/json_writer.h"
#include "tools/ringcast/cli_commands.h"

namespace ringcast::cli {
namespace {

struct TenantArgs {
  std::string tenant;
  std::string active;  // subscription: "true" | "false"
  std::string owner_email;
  bool clear_owner_email = false;
};

std::string base(const TenantArgs& a) {
  return "/v1/tenants/" + url_escape(a.tenant);
}

void print_breaker(simdjson::dom::element b) {
  Table t({"FIELD", "VALUE"});
  t.add({"tenant", jstr(b, "tenant")});
  t.add({"state", jstr(b, "state")});
  t.add({"failed probes", std::to_string(jint(b, "failed_probes"))});
  t.add({"opened at", jtext(b, "opened_at")});
  t.add({"next probe at", jtext(b, "reopen_at")});
  t.add({"window", std::to_string(jint(b, "window_failed")) + " failed of " +
                       std::to_string(jint(b, "window_total"))});
  t.add({"endpoints using it", std::to_string(jint(b, "endpoints_using_breaker")) + " of " +
                                   std::to_string(jint(b, "endpoints"))});
  std::fputs(t.str().c_str(), stdout);
}

void run_breaker(GlobalOptions& g, const TenantArgs& a, bool reset) {
  auto client = make_client(g);
  simdjson::dom::parser p;
  JsonReply r = call_json(*client, p, reset ? "POST" : "GET",
                          base(a) + (reset ? "/breaker/reset" : "/breaker"));
  if (g.json) return print_json(r.body);
  if (reset) std::printf("breaker of tenant %s reset\n\n", a.tenant.c_str());
  print_breaker(r.root);
}

void run_subscription(GlobalOptions& g, const TenantArgs& a) {
  net::JsonWriter w;
  w.begin_object().field("active", a.active == "true").end_object();
  auto client = make_client(g);
  simdjson::dom::parser p;
  JsonReply r = call_json(*client, p, "PUT", base(a) + "/subscription", w.str());
  if (g.json) return print_json(r.body);
  std::printf(
      "subscription of tenant %s is %s\n", a.tenant.c_str(),
      jbool(r.root, "active") ? "active" : "inactive (deliveries wait, no attempt is spent)");
}

void run_notifications(GlobalOptions& g, const TenantArgs& a) {
  auto client = make_client(g);
  simdjson::dom::parser p;
  JsonReply r = call_json(*client, p, "GET", base(a) + "/notifications");
  if (g.json) return print_json(r.body);
  simdjson::dom::array items;
  if (r.root["notifications"].get(items)) throw CliError("unexpected answer: " + clip(r.body, 200));
  Table t({"SEQ", "AT", "KIND", "ENDPOINT", "REASON", "MESSAGE"});
  for (auto n : items) {
    t.add({jstr(n, "seq"), jtext(n, "at"), jstr(n, "kind"), jtext(n, "endpoint"),
           jtext(n, "reason"), clip(jstr(n, "message"), 60)});
  }
  t.print("no notifications for tenant " + a.tenant);
}

void run_settings(GlobalOptions& g, const TenantArgs& a) {
  auto client = make_client(g);
  simdjson::dom::parser p;
  const bool change = !a.owner_email.empty() || a.clear_owner_email;
  std::string body;
  if (change) {
    net::JsonWriter w;
    w.begin_object().key("owner_email");
    if (a.clear_owner_email) {
      w.null();
    } else {
      w.value(a.owner_email);
    }
    w.end_object();
    body = w.str();
  }
  JsonReply r = call_json(*client, p, change ? "PUT" : "GET", base(a) + "/settings", body);
  if (g.json) return print_json(r.body);
  Table t({"FIELD", "VALUE"});
  t.add({"tenant", jstr(r.root, "tenant")});
  t.add({"owner e-mail", jtext(r.root, "owner_email")});
  // SPEC R14: notices go to a merchant-set address only once its mailed link confirmed it.
  t.add({"confirmed", jtext(r.root, "owner_email_confirmed")});
  t.add({"confirmation sent at", jtext(r.root, "confirmation_sent_at")});
  std::fputs(t.str().c_str(), stdout);
}

}  // namespace

void add_tenant_commands(CLI::App& app, GlobalOptions& g) {
  CLI::App* tn =
      app.add_subcommand("tenant", "a tenant's breaker, subscription, notifications, settings");
  tn->require_subcommand(1);
  auto args = std::make_shared<TenantArgs>();
  auto tenant = [args](CLI::App* sub) { add_tenant_option(sub, args->tenant); };

  CLI::App* breaker = tn->add_subcommand("breaker", "show the tenant's circuit breaker");
  tenant(breaker);
  breaker->callback([&g, args] { run_breaker(g, *args, false); });

  CLI::App* reset =
      tn->add_subcommand("breaker-reset", "close the breaker by hand (deliveries resume)");
  tenant(reset);
  reset->callback([&g, args] { run_breaker(g, *args, true); });

  CLI::App* sub = tn->add_subcommand(
      "subscription",
      "switch the tenant's subscription (inactive: deliveries are postponed 1 h each time, without "
      "spending attempts)");
  tenant(sub);
  sub->add_option("--active", args->active, "true | false")
      ->required()
      ->check(CLI::IsMember({"true", "false"}));
  sub->callback([&g, args] { run_subscription(g, *args); });

  CLI::App* settings = tn->add_subcommand(
      "settings", "show the tenant's settings, or change them with the options below");
  tenant(settings);
  auto* set_email =
      settings->add_option("--owner-email", args->owner_email,
                           "who gets an e-mail when one of the tenant's endpoints is disabled");
  settings->add_flag("--clear-owner-email", args->clear_owner_email, "no owner e-mail any more")
      ->excludes(set_email);
  settings->callback([&g, args] { run_settings(g, *args); });

  CLI::App* notes = tn->add_subcommand("notifications", "the tenant's operator notifications");
  tenant(notes);
  notes->callback([&g, args] { run_notifications(g, *args); });
}

}  // namespace ringcast::cli
