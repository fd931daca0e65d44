// Replay (docs/operations.md "Delivery log") from the command line: `ringcast deliveries resend`,
// `ringcast events replay` (replay missing), `ringcast endpoints recover` (a requeue job, followed
// with a progress bar on stderr until it ends) and `ringcast jobs get`.
#include <unistd.h>
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>

#include "net/json_writer.h"
#include "tools/ringcast/cli_commands.h"

namespace ringcast::cli {
namespace {

struct ReplayArgs {
  std::string tenant;
  std::string id;
  std::string note;
  std::string since;
  std::string until;
  bool no_wait = false;
  double poll_seconds = 0.5;
  double timeout_seconds = 0;  // 0: wait until the job ends
};

std::string tenant_base(const ReplayArgs& a) {
  return "/v1/tenants/" + url_escape(a.tenant);
}

// "[#########...........]  45%  scanned 900  requeued 450  skipped 3  live 120"
std::string progress_line(simdjson::dom::element job) {
  if (jstr(job, "state") == "queued")
    return "queued: waits for one of the node's running jobs to end";
  const int64_t total = jint(job, "total");
  const int64_t scanned = jint(job, "scanned");
  const bool scan_done = jbool(job, "scan_done");
  const int64_t done = jint(job, "requeued") + jint(job, "skipped");
  // While the scan runs the total is not known yet: the bar follows the scan.
  const double frac = total > 0 && scan_done
                          ? static_cast<double>(done) / static_cast<double>(total)
                      : total > 0 ? static_cast<double>(scanned) / static_cast<double>(total)
                                  : (scan_done ? 1.0 : 0.0);
  constexpr int kWidth = 30;
  const int filled = static_cast<int>(frac * kWidth + 0.5);
  std::string bar = "[";
  for (int i = 0; i < kWidth; ++i) bar += i < filled ? '#' : '.';
  bar += "] ";
  char pct[16];
  std::snprintf(pct, sizeof pct, "%3d%%", static_cast<int>(frac * 100 + 0.5));
  bar += pct;
  bar += "  scanned ";
  bar += std::to_string(scanned);
  bar += "  requeued ";
  bar += std::to_string(jint(job, "requeued"));
  bar += "  skipped ";
  bar += std::to_string(jint(job, "skipped"));
  bar += "  live ";
  bar += std::to_string(jint(job, "in_flight"));
  return bar;
}

void print_job(simdjson::dom::element job) {
  Table t({"FIELD", "VALUE"});
  for (const char* k :
       {"id", "kind", "endpoint", "state", "since", "until", "total", "scanned", "requeued",
        "skipped", "in_flight", "queued_at", "started_at", "finished_at", "error"}) {
    t.add({k, jtext(job, k)});
  }
  std::fputs(t.str().c_str(), stdout);
}

void run_resend(GlobalOptions& g, ReplayArgs& a) {
  net::JsonWriter w;
  w.begin_object();
  if (!a.note.empty()) w.field("note", a.note);
  w.end_object();
  auto client = make_client(g);
  simdjson::dom::parser p;
  JsonReply r = call_json(*client, p, "POST",
                          tenant_base(a) + "/deliveries/" + url_escape(a.id) + "/resend", w.take());
  if (g.json) return print_json(r.body);
  simdjson::dom::element d;
  if (r.root["delivery"].get(d)) throw CliError("unexpected answer: " + clip(r.body, 200));
  std::printf("delivery %s queued again (status %s; attempts so far %lld)\n", jstr(d, "id").c_str(),
              jstr(d, "status").c_str(), static_cast<long long>(jint(d, "attempts")));
}

void run_replay(GlobalOptions& g, ReplayArgs& a) {
  auto client = make_client(g);
  simdjson::dom::parser p;
  JsonReply r =
      call_json(*client, p, "POST", tenant_base(a) + "/events/" + url_escape(a.id) + "/replay", "");
  if (g.json) return print_json(r.body);
  std::printf("event %s: %lld new deliveries (endpoints that match now and had none)\n",
              a.id.c_str(), static_cast<long long>(jint(r.root, "deliveries")));
}

void run_jobs_get(GlobalOptions& g, ReplayArgs& a) {
  auto client = make_client(g);
  simdjson::dom::parser p;
  JsonReply r = call_json(*client, p, "GET", tenant_base(a) + "/jobs/" + url_escape(a.id));
  if (g.json) return print_json(r.body);
  simdjson::dom::element job;
  if (r.root["job"].get(job)) throw CliError("unexpected answer: " + clip(r.body, 200));
  print_job(job);
}

void run_recover(GlobalOptions& g, ReplayArgs& a) {
  net::JsonWriter w;
  w.begin_object().field("since", a.since);
  if (!a.until.empty()) w.field("until", a.until);
  w.end_object();
  auto client = make_client(g);
  simdjson::dom::parser p;
  JsonReply r = call_json(*client, p, "POST",
                          tenant_base(a) + "/endpoints/" + url_escape(a.id) + "/recover", w.take());
  simdjson::dom::element job;
  if (r.root["job"].get(job)) throw CliError("unexpected answer: " + clip(r.body, 200));
  const std::string job_id = jstr(job, "id");
  if (a.no_wait) {
    if (g.json) return print_json(r.body);
    std::printf("recover job %s started (follow it: ringcast jobs get -t %s %s)\n", job_id.c_str(),
                a.tenant.c_str(), job_id.c_str());
    return;
  }
  // Follow the job until it ends: a progress bar on stderr (redrawn in place on a terminal).
  const bool tty = ::isatty(STDERR_FILENO) != 0;
  const auto started = std::chrono::steady_clock::now();
  std::string body = r.body;
  for (;;) {
    simdjson::dom::parser jp;
    JsonReply now = call_json(*client, jp, "GET", tenant_base(a) + "/jobs/" + url_escape(job_id));
    body = now.body;
    if (now.root["job"].get(job)) throw CliError("unexpected answer: " + clip(now.body, 200));
    const std::string state = jstr(job, "state");
    const std::string line = progress_line(job);
    if (tty) {
      std::fprintf(stderr, "\r%s", line.c_str());
    } else {
      std::fprintf(stderr, "%s\n", line.c_str());
    }
    std::fflush(stderr);
    if (state != "running" && state != "queued") {  // queued: waits for a free job slot
      if (tty) std::fputc('\n', stderr);
      if (g.json) {
        print_json(body);
      } else {
        print_job(job);
      }
      if (state == "failed") throw CliError("the recover job failed: " + jstr(job, "error"));
      return;
    }
    if (a.timeout_seconds > 0 && std::chrono::steady_clock::now() - started >
                                     std::chrono::duration<double>(a.timeout_seconds)) {
      if (tty) std::fputc('\n', stderr);
      throw CliError("the recover job " + job_id + " still runs after --timeout; follow it with " +
                     "`ringcast jobs get`");
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(a.poll_seconds));
  }
}

}  // namespace

void add_replay_commands(CLI::App& app, GlobalOptions& g) {
  auto args = std::make_shared<ReplayArgs>();
  auto tenant = [args](CLI::App* sub) { add_tenant_option(sub, args->tenant); };

  // deliveries resend (the `deliveries` command exists: add_delivery_commands runs first)
  {
    CLI::App* dv = app.get_subcommand("deliveries");
    CLI::App* resend = dv->add_subcommand(
        "resend", "send an ended delivery again (same webhook id, a fresh attempt budget)");
    tenant(resend);
    resend->add_option("id", args->id, "delivery id")->required();
    resend->add_option("--note", args->note, "kept in the delivery's history (<= 512 bytes)");
    resend->callback([&g, args] { run_resend(g, *args); });
  }

  {
    CLI::App* ep = app.get_subcommand("endpoints");
    CLI::App* recover = ep->add_subcommand(
        "recover",
        "re-queue the endpoint's failed, dead and unknown deliveries created in a window (a job "
        "with progress)");
    tenant(recover);
    recover->add_option("id", args->id, "endpoint id")->required();
    recover->add_option("--since", args->since, "window start, RFC 3339 (2026-12-01T00:00:00Z)")
        ->required();
    recover->add_option("--until", args->until, "window end, RFC 3339 (default: now)");
    recover->add_flag("--no-wait", args->no_wait, "start the job and return its id");
    recover->add_option("--poll", args->poll_seconds, "seconds between progress reads (0.5)")
        ->check(CLI::Range(0.05, 60.0));
    recover->add_option("--timeout", args->timeout_seconds, "stop following after N seconds")
        ->check(CLI::NonNegativeNumber);
    recover->callback([&g, args] { run_recover(g, *args); });
  }

  CLI::App* ev = app.add_subcommand("events", "replay an event");
  ev->require_subcommand(1);
  CLI::App* replay = ev->add_subcommand(
      "replay", "fan an event out again to the endpoints that match now and never had it");
  tenant(replay);
  replay->add_option("event_id", args->id, "the producer's event id")->required();
  replay->callback([&g, args] { run_replay(g, *args); });

  CLI::App* jobs = app.add_subcommand("jobs", "background jobs (recover)");
  jobs->require_subcommand(1);
  CLI::App* get = jobs->add_subcommand("get", "one job's progress");
  tenant(get);
  get->add_option("id", args->id, "job id")->required();
  get->callback([&g, args] { run_jobs_get(g, *args); });
}

}  // namespace ringcast::cli
