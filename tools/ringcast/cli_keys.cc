// `ringcast keys create|list|revoke` (admin token: tenant-scoped API keys) and
// `ringcast portal link` (a portal link for one tenant's merchant); SPEC R14.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <memory>

#include "net/json_writer.h"
#include "tools/ringcast/cli_commands.h"

namespace ringcast::cli {
namespace {

struct KeyArgs {
  std::string tenant;
  std::string name;
  bool read_only = false;
  std::string expires_at;  // RFC 3339
  std::string id;
  std::string scope = "manage";  // portal link
  uint64_t ttl_seconds = 0;      // 0: the server's default
};

std::string keys_path(const KeyArgs& a) {
  std::string p = "/v1/tenants/";
  p += url_escape(a.tenant);
  p += "/keys";
  return p;
}

void run_create(GlobalOptions& g, const KeyArgs& a) {
  net::JsonWriter w;
  w.begin_object();
  if (!a.name.empty()) w.field("name", a.name);
  w.field("scope", a.read_only ? "read_only" : "read_write");
  if (!a.expires_at.empty()) w.field("expires_at", a.expires_at);
  w.end_object();
  auto client = make_client(g);
  simdjson::dom::parser p;
  JsonReply r = call_json(*client, p, "POST", keys_path(a), w.str());
  if (g.json) return print_json(r.body);
  simdjson::dom::element rec;
  if (r.root["record"].get(rec)) throw CliError("unexpected answer: " + clip(r.body, 200));
  std::printf("key for tenant %s (shown this once; store it now):\n\n  %s\n\n", a.tenant.c_str(),
              jstr(r.root, "key").c_str());
  Table t({"FIELD", "VALUE"});
  t.add({"id", jstr(rec, "id")});
  t.add({"prefix", jstr(rec, "prefix")});
  t.add({"name", jtext(rec, "name")});
  t.add({"scope", jstr(rec, "scope")});
  t.add({"expires at", jtext(rec, "expires_at")});
  std::fputs(t.str().c_str(), stdout);
}

void run_list(GlobalOptions& g, const KeyArgs& a) {
  auto client = make_client(g);
  simdjson::dom::parser p;
  JsonReply r = call_json(*client, p, "GET", keys_path(a));
  if (g.json) return print_json(r.body);
  simdjson::dom::array items;
  if (r.root["keys"].get(items)) throw CliError("unexpected answer: " + clip(r.body, 200));
  Table t({"ID", "PREFIX", "NAME", "SCOPE", "CREATED", "EXPIRES"});
  for (auto k : items) {
    std::string expires = jtext(k, "expires_at");
    if (jbool(k, "expired")) expires += " (expired)";
    t.add({jstr(k, "id"), jstr(k, "prefix"), clip(jstr(k, "name"), 30), jstr(k, "scope"),
           jtext(k, "created_at"), expires});
  }
  t.print("no keys for tenant " + a.tenant);
}

void run_revoke(GlobalOptions& g, const KeyArgs& a) {
  auto client = make_client(g);
  simdjson::dom::parser p;
  std::string path = keys_path(a);
  path += '/';
  path += url_escape(a.id);
  JsonReply r = call_json(*client, p, "DELETE", path);
  if (g.json) return print_json(R"({"revoked":true})");
  std::printf("key %s of tenant %s revoked\n", a.id.c_str(), a.tenant.c_str());
}

void run_link(GlobalOptions& g, const KeyArgs& a) {
  net::JsonWriter w;
  w.begin_object().field("scope", a.scope);
  if (a.ttl_seconds > 0) w.field("ttl_seconds", a.ttl_seconds);
  w.end_object();
  auto client = make_client(g);
  simdjson::dom::parser p;
  std::string path = "/v1/tenants/";
  path += url_escape(a.tenant);
  path += "/portal-links";
  JsonReply r = call_json(*client, p, "POST", path, w.str());
  if (g.json) return print_json(r.body);
  std::printf("%s\n(%s, until %s)\n", jstr(r.root, "url").c_str(), jstr(r.root, "scope").c_str(),
              jstr(r.root, "expires_at").c_str());
}

}  // namespace

void add_key_commands(CLI::App& app, GlobalOptions& g) {
  auto args = std::make_shared<KeyArgs>();
  CLI::App* keys = app.add_subcommand("keys", "tenant-scoped API keys (with the admin token)");
  keys->require_subcommand(1);

  CLI::App* create = keys->add_subcommand("create", "make a key that reaches one tenant only");
  add_tenant_option(create, args->tenant);
  create->add_option("--name", args->name, "a label for the key");
  create->add_flag("--read-only", args->read_only, "GET requests only");
  create->add_option("--expires-at", args->expires_at, "RFC 3339 time after which it fails");
  create->callback([&g, args] { run_create(g, *args); });

  CLI::App* list = keys->add_subcommand("list", "the tenant's keys (never the secrets)");
  add_tenant_option(list, args->tenant);
  list->callback([&g, args] { run_list(g, *args); });

  CLI::App* revoke = keys->add_subcommand("revoke", "revoke a key at once");
  add_tenant_option(revoke, args->tenant);
  revoke->add_option("id", args->id, "the key's id (keys list)")->required();
  revoke->callback([&g, args] { run_revoke(g, *args); });

  CLI::App* portal = app.add_subcommand("portal", "the merchant portal");
  portal->require_subcommand(1);
  CLI::App* link = portal->add_subcommand("link", "mint a short-lived portal link for a tenant");
  add_tenant_option(link, args->tenant);
  link->add_option("--scope", args->scope, "manage | view")
      ->check(CLI::IsMember({"manage", "view"}));
  link->add_option("--ttl-seconds", args->ttl_seconds, "how long the link can be opened");
  link->callback([&g, args] { run_link(g, *args); });
}

}  // namespace ringcast::cli
