// `ringcast intake status`: each message-bus intake source's state, lag and counters, Redis
// Streams and NATS JetStream alike (GET /v1/intake, docs/operations.md §6).
#include <CLI/CLI.hpp>
#include <cstdio>

#include "tools/ringcast/cli_commands.h"

namespace ringcast::cli {
namespace {

void run_status(GlobalOptions& g) {
  auto client = make_client(g);
  simdjson::dom::parser p;
  JsonReply r = call_json(*client, p, "GET", "/v1/intake");
  if (g.json) return print_json(r.body);
  simdjson::dom::array items;
  if (r.root["sources"].get(items)) throw CliError("unexpected answer: " + clip(r.body, 200));
  Table t({"SOURCE", "KIND", "STATE", "STREAMS", "GROUP/CONSUMER", "LAG", "PENDING", "UNACKED",
           "READ", "ACCEPTED", "DUPLICATE", "DEAD-LETTERED", "REDELIVERED", "RECONNECTS"});
  auto kind_of = [](simdjson::dom::element s) {
    const std::string k = jstr(s, "kind");
    return k.empty() ? std::string("redis") : k;
  };
  for (auto s : items) {
    const bool nats = kind_of(s) == "nats";
    std::string streams;
    simdjson::dom::array keys;
    if (!s["streams"].get(keys)) {
      for (auto k : keys) {
        std::string_view v;
        if (!k.get(v)) streams += (streams.empty() ? "" : ",") + std::string(v);
      }
    }
    // JetStream: the stream (and the consumer's filter), and the durable consumer.
    if (nats && !jstr(s, "filter_subject").empty())
      streams += " (" + jstr(s, "filter_subject") + ")";
    const int64_t lag = jint(s, "lag");
    t.add({jstr(s, "name"), kind_of(s), jstr(s, "state"), streams,
           nats ? jstr(s, "durable") : jstr(s, "group") + "/" + jstr(s, "consumer"),
           lag < 0 ? "?" : std::to_string(lag), std::to_string(jint(s, "pending")),
           std::to_string(jint(s, "unacked")), std::to_string(jint(s, "read")),
           std::to_string(jint(s, "accepted")), std::to_string(jint(s, "duplicate")),
           std::to_string(jint(s, "dead_lettered")),
           nats ? std::to_string(jint(s, "redelivered")) : std::string("-"),
           std::to_string(jint(s, "reconnects"))});
  }
  t.print("no intake sources are configured");
  // A source that cannot reach its bus says why (a TLS, ACL or credential refusal, SPEC R14; a
  // JetStream stream or consumer that is missing).
  for (auto s : items) {
    const std::string down = jstr(s, "connection_error");
    if (down.empty()) continue;
    if (kind_of(s) == "nats") {
      std::printf("%s: %s\n", jstr(s, "name").c_str(), down.c_str());
    } else {
      std::printf("%s: Redis connection down: %s\n", jstr(s, "name").c_str(), down.c_str());
    }
  }
}

}  // namespace

void add_intake_commands(CLI::App& app, GlobalOptions& g) {
  CLI::App* in = app.add_subcommand(
      "intake", "message-bus intake sources ([[intake.redis]], [[intake.nats]])");
  in->require_subcommand(1);
  CLI::App* status = in->add_subcommand("status", "each source's state, lag and counters");
  status->callback([&g] { run_status(g); });
}

}  // namespace ringcast::cli
