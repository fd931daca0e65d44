#include "tools/ringcast/serve.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>

#include "log/log.h"
#include "node/node.h"

namespace ringcast {

log::Options log_options(const Config& cfg) {
  log::Options o;
  (void)log::parse_level(cfg.log.level, o.level);  // checked by Config::validate()
  (void)log::parse_format(cfg.log.format, o.format);
  o.rate_per_second = cfg.log.rate_per_second;
  o.burst = cfg.log.burst;
  o.async = true;  // a shard that logs never waits for stderr (docs/operations.md §5 "Logs")
  return o;
}

int run_serve(const Config& cfg) {
  // Signals are taken synchronously by this thread; every other thread inherits the mask.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGUSR1);  // the store failed (below)
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  signal(SIGPIPE, SIG_IGN);
  // SPEC R14 (docs/security.md "Local users"): what the daemon creates (the data dir, RocksDB's
  // files, the payload and lease logs) is the service user's alone: 0700 dirs, 0600 files.
  ::umask(077);

  // A failed fsync of the data dir (docs/operations.md "Disk full, read-only and failed syncs"):
  // the store takes nothing more; this thread stops the daemon, which exits kExitStoreFailed for
  // the supervisor to restart it (recovery reads what is really on disk).
  node::NodeHooks hooks;
  hooks.on_store_failed = [] { ::kill(::getpid(), SIGUSR1); };
  std::string why;
  auto opened = node::Node::open(cfg, std::move(hooks), why);
  if (!opened.ok()) {
    log::error("start_failed", {{"error", why}}, "{}", why);
    log::shutdown();
    return 1;  // a bad config or a part that did not start (exit code 2 is `send`'s rejected lines)
  }
  std::unique_ptr<node::Node> node = std::move(*opened);
  const node::NodeInfo& info = node->info();
  for (const node::NodeInfo::Intake& in : info.intakes) {
    std::printf("ringcast: intake %s reading %zu stream(s) as consumer %s of group %s\n",
                in.name.c_str(), in.streams, in.consumer.c_str(), in.group.c_str());
  }
  if (!info.node_id.empty()) {
    std::printf("ringcast: cluster node %s advertises %s\n", info.node_id.c_str(),
                info.advertise_url.c_str());
  }
  if (!info.metrics_address.empty())
    std::printf("ringcast: metrics on %s\n", info.metrics_address.c_str());
  std::printf("ringcast: listening on %s:%u (%u shards, data in %s)\n", info.listen_address.c_str(),
              info.port, info.shards, info.data.c_str());
  std::fflush(stdout);
  if (log::format() == log::Format::kJson) {
    // The lines above are for scripts and people (stdout); a log pipeline sees them as events.
    for (const node::NodeInfo::Intake& in : info.intakes) {
      log::info("intake_started",
                {{"source", in.name},
                 {"streams", in.streams},
                 {"consumer", in.consumer},
                 {"group", in.group}},
                "intake {} reading {} stream(s) as consumer {} of group {}", in.name, in.streams,
                in.consumer, in.group);
    }
    if (!info.node_id.empty()) {
      log::info("cluster_node", {{"node", info.node_id}, {"advertise_url", info.advertise_url}},
                "cluster node {} advertises {}", info.node_id, info.advertise_url);
    }
    if (!info.metrics_address.empty()) {
      log::info("metrics_listening", {{"address", info.metrics_address}}, "metrics on {}",
                info.metrics_address);
    }
    log::info("listening",
              {{"address", info.listen_address},
               {"port", info.port},
               {"shards", info.shards},
               {"data", info.data}},
              "listening on {}:{} ({} shards, data in {})", info.listen_address, info.port,
              info.shards, info.data);
  }

  int sig = 0;
  do {
    sig = sigwaitinfo(&sigs, nullptr);
  } while (sig != SIGTERM && sig != SIGINT && !(sig == SIGUSR1 && node->store_failed()));
  if (sig == SIGUSR1) {
    log::error("store_fsync_failed", {{"exit_code", kExitStoreFailed}},
               "an fsync of the data dir failed: nothing it covered was acknowledged; "
               "stopping, exit {}: restart to recover from what is on disk",
               kExitStoreFailed);
  } else {
    log::info("stopping", {{"signal", sig == SIGTERM ? "SIGTERM" : "SIGINT"}},
              "{}: stopping intake, finishing in-flight work",
              sig == SIGTERM ? "SIGTERM" : "SIGINT");
  }
  // Graceful, in the reverse of the start (node/node.h): retention, the listeners (no new
  // requests; what they have is answered), the API's reads, the bus intake, the engine (in-flight
  // attempts finish or stay leased, the last batch flushed; in cluster mode the partitions
  // handed over), the mailer and the notifier (what is due, bounded; the rest stays in the
  // outbox), then the store closes.
  node->stop();
  const int code = node->store_failed() ? kExitStoreFailed : 0;
  log::info("stopped", {{"exit_code", code}}, "stopped");
  log::shutdown();  // every queued line written before the exit
  return code;
}

}  // namespace ringcast
