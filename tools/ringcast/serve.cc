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
    log::error("{}", why);
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

  int sig = 0;
  do {
    sig = sigwaitinfo(&sigs, nullptr);
  } while (sig != SIGTERM && sig != SIGINT && !(sig == SIGUSR1 && node->store_failed()));
  if (sig == SIGUSR1) {
    log::error(
        "an fsync of the data dir failed: nothing it covered was acknowledged; "
        "stopping, exit {}: restart to recover from what is on disk",
        kExitStoreFailed);
  } else {
    log::info("{}: stopping intake, finishing in-flight work",
              sig == SIGTERM ? "SIGTERM" : "SIGINT");
  }
  // Graceful, in the reverse of the start (node/node.h): retention, the listeners (no new
  // requests; what they have is answered), the API's reads, the bus intake, the engine (in-flight
  // attempts finish or stay leased, the last batch flushed; in cluster mode the partitions
  // handed over), the mailer and the notifier (what is due, bounded; the rest stays in the
  // outbox), then the store closes.
  node->stop();
  log::info("stopped");
  return node->store_failed() ? kExitStoreFailed : 0;
}

}  // namespace ringcast
