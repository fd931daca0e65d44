#include "tools/ringcast/serve.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>

#include "api/from_config.h"
#include "api/portal.h"
#include "cluster/advertise_url.h"
#include "cluster/status_json.h"
#include "core/ip_address.h"
#include "engine/build.h"
#include "engine/embedded.h"
#include "engine/engine_impl.h"
#include "engine/mailer.h"
#include "engine/notifier.h"
#include "engine/retention.h"
#include "intake/redis_source.h"
#include "log/log.h"
#include "net/http_server.h"
#include "net/signing.h"
#include "net/system_clock.h"
#include "redis/connection.h"

namespace ringcast {

namespace {

// A data dir that others may read or enter (made before this daemon, or by hand) holds every
// payload: said at start, not changed behind the operator's back.
void warn_if_readable(const Config& cfg) {
  if (cfg.storage.backend != "rocksdb") return;
  struct stat st {};
  if (::stat(cfg.storage.data_dir.c_str(), &st) != 0) return;  // made 0700 by the store
  if ((st.st_mode & 077) != 0) {
    log::warn(
        "warning: the data dir {} is open to other users (mode {:03o}): it "
        "holds every payload; chmod 700 it",
        cfg.storage.data_dir.c_str(), static_cast<unsigned>(st.st_mode & 0777));
  }
}

// server.metrics_listen: GET /metrics and nothing else.
class MetricsOnly final : public net::HttpHandler {
 public:
  explicit MetricsOnly(const api::RestApi& api) : api_(api) {}
  size_t max_body_bytes(const net::HttpRequest&) override { return 0; }
  void handle(net::HttpRequest&& req, net::Responder responder) override {
    if (req.path() != "/metrics") {
      return responder.send(net::HttpResponse::error(404, "not_found", "only /metrics here"));
    }
    if (req.method != "GET" && req.method != "HEAD") {
      net::HttpResponse r = net::HttpResponse::error(405, "method_not_allowed", "use GET");
      r.headers.push_back({"Allow", "GET"});
      return responder.send(std::move(r));
    }
    responder.send(api_.metrics_response());
  }

 private:
  const api::RestApi& api_;
};

}  // namespace

namespace {

// [[intake.redis]] → the source's options (the HTTP intake's limits apply to both intakes).
intake::RedisSourceOptions redis_source_options(const Config& cfg, const RedisIntakeConfig& r) {
  intake::RedisSourceOptions o;
  o.name = r.name;
  o.servers = r.servers;
  o.cluster = r.cluster;
  o.username = r.username;
  o.password = r.password;
  o.tls = engine::redis_tls_options(r);  // SPEC R14
  o.db = static_cast<int>(r.db);
  o.streams = r.streams;
  o.group = r.group;
  o.consumer =
      r.consumer.empty() ? intake::default_consumer_name(cfg.storage.data_dir) : r.consumer;
  o.fields = {r.tenant_field, r.id_field, r.type_field, r.payload_field};
  o.limits.max_tenant_bytes = cfg.limits.max_tenant_bytes;
  o.limits.max_id_bytes = cfg.limits.max_id_bytes;
  o.limits.max_type_bytes = cfg.limits.max_type_bytes;
  o.limits.max_payload_bytes = cfg.limits.max_body_bytes;
  o.dead_letter_stream = r.dead_letter_stream;
  o.dead_letter_max_len = r.dead_letter_max_len;
  o.batch = r.batch;
  o.block = r.block;
  o.max_unacked = r.max_unacked;
  o.claim_idle = r.claim_idle;
  o.claim_interval = r.claim_interval;
  return o;
}

}  // namespace

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
  warn_if_readable(cfg);

  // What would leave a shard without a transport is refused here, with the key at fault.
  if (const std::string problem = engine::transport_problem(cfg); !problem.empty()) {
    log::error("{}", problem);
    return 1;
  }
  engine::EngineOptions eopts;
  try {
    eopts = engine::engine_options(cfg);
  } catch (const ConfigError& e) {  // Config::validate() checks every policy first: defensive
    log::error("{}", e.what());
    return 1;  // a bad config, like every other one (exit code 2 is `send`'s rejected lines)
  }

  // SPEC R8.4: operator notifications also go to notifications.webhook_url. The notifier is
  // declared before the engine, so it outlives the shards that call on_notification.
  std::unique_ptr<engine::Notifier> notifier;
  // The store, once open (null before open and after stop): the notifier's outbox marks and the
  // store-size gauges of /metrics.
  std::atomic<storage::RocksStore*> open_store{nullptr};
  // Redis mode: the store, for /metrics (its memory view) and the notification outbox.
  std::atomic<storage::RedisStore*> open_redis{nullptr};
  // What the notifier (mail = false) or the mailer (mail = true) calls once a notification is
  // through: its entry leaves the open store's outbox (RocksDB; Redis mode: the partition's T ob
  // or T om). With no store open it stays there and is sent again after the next start.
  auto outbox_marker = [&open_store, &open_redis](bool mail) {
    return [&open_store, &open_redis, mail](const Notification& note) {
      Result<void> r = ok();
      if (storage::RocksStore* store = open_store.load(std::memory_order_acquire)) {
        r = mail ? store->mail_outbox_done(note.seq) : store->outbox_done(note.seq);
      } else if (storage::RedisStore* redis = open_redis.load(std::memory_order_acquire)) {
        r = mail ? redis->mail_outbox_done(note.seq) : redis->outbox_done(note.seq);
      }
      if (!r.ok()) {
        log::error("{} outbox: {}", mail ? "owner e-mail" : "notification", r.error().message);
      }
    };
  };
  if (!cfg.notifications.webhook_url.empty()) {
    engine::NotifierOptions nopts = engine::notifier_options(cfg);
    nopts.on_finished = outbox_marker(false);
    auto n = engine::Notifier::start(std::move(nopts));
    if (!n.ok()) {
      log::error("the notification webhook did not start: {}", n.error().message);
      return 1;
    }
    notifier = std::move(*n);
  }
  // SPEC R8.4: the owner's e-mail on auto-disable, through notifications.smtp. Like the notifier:
  // its own thread, declared before the engine, its own outbox in the store.
  std::unique_ptr<engine::Mailer> mailer;
  // The portal's signer for owner-address confirmation links (SPEC R14): its key is known once
  // the store is open (below); until then a confirmation e-mail waits on the mailer's ladder.
  struct ConfirmSigner {
    std::mutex mu;
    std::unique_ptr<api::Portal> portal;
  };
  auto signer = std::make_shared<ConfirmSigner>();
  if (!cfg.notifications.smtp.host.empty()) {
    engine::MailerOptions mopts;
    try {
      mopts = engine::mailer_options(cfg);
    } catch (const ConfigError& e) {
      log::error("{}", e.what());
      return 1;
    }
    mopts.on_finished = outbox_marker(true);
    mopts.confirmation_link = [signer, ttl = cfg.notifications.email.confirm_link_ttl](
                                  const Notification& n) -> Result<std::string> {
      std::lock_guard<std::mutex> lock(signer->mu);
      if (!signer->portal) {
        return make_error(Errc::kUnavailable, "the portal's key is not loaded yet");
      }
      if (signer->portal->options().public_url.empty()) {
        return make_error(Errc::kInvalidArgument,
                          "portal.public_url is not set: a confirmation link cannot be made");
      }
      // The expiry counts from the notification, so a resend after a restart says the same.
      return signer->portal->confirmation_url(
          signer->portal->mint_email_confirmation(n.tenant, n.owner_email, n.at + ttl));
    };
    auto m = engine::Mailer::start(std::move(mopts));
    if (!m.ok()) {
      log::error("the owner e-mail sender did not start: {}", m.error().message);
      return 1;
    }
    mailer = std::move(*m);
  }
  if (notifier || mailer) {
    eopts.on_notification = [n = notifier.get(), m = mailer.get()](const Notification& note) {
      if (n) n->enqueue(note);
      if (m) m->enqueue(note);  // endpoint_disabled and owner_email_confirmation, addressed
    };
  }
  // Retention (SPEC R10.1) runs on its own thread, not on this one: a long pass must not delay
  // SIGTERM. Declared before the engine's metrics hook, which reads its counters.
  std::unique_ptr<engine::RetentionThread> retention;
  std::atomic<engine::RetentionThread*> retention_metrics{nullptr};
  // The bus intake sources (operations.md §6), published once they run (for /metrics, /v1/intake).
  std::vector<std::unique_ptr<intake::RedisSource>> sources;
  std::vector<const intake::RedisSource*> source_views;
  std::atomic<const std::vector<const intake::RedisSource*>*> intake_views{nullptr};
  eopts.extra_metrics = [&open_store, &open_redis, &retention_metrics, &intake_views,
                         n = notifier.get(), ml = mailer.get()] {
    std::string out = n ? engine::render_notifier_metrics(n->metrics()) : std::string();
    if (ml) out += engine::render_mailer_metrics(ml->metrics());
    if (const auto* v = intake_views.load(std::memory_order_acquire))
      out += intake::render_metrics(*v);
    if (engine::RetentionThread* r = retention_metrics.load(std::memory_order_acquire))
      out += r->metrics_text();
    if (storage::RedisStore* r = open_redis.load(std::memory_order_acquire)) {
      const storage::RedisMemory m = r->memory();
      out += engine::render_redis_memory_metrics({m.used_bytes, m.limit_bytes, m.mark_bytes, m.full,
                                                  m.poll_errors, m.full_spells,
                                                  r->retention_fenced()});
    }
    if (storage::RocksStore* s = open_store.load(std::memory_order_acquire)) {
      const storage::StoreSizes z = s->sizes();
      out += engine::render_store_metrics(z.sst_bytes, z.wal_bytes, z.memtable_bytes,
                                          z.payload_log_bytes, z.lease_log_bytes);
    }
    // Every Redis connection of the process (store, leases, bus intake): commands written and
    // pipelined writes (round trips), for bench/e2e_cluster.sh's per-delivery Redis cost.
    const redis::ProcessTotals rt = redis::process_totals();
    out += "# TYPE ringcast_redis_commands_total counter\nringcast_redis_commands_total " +
           std::to_string(rt.commands_sent) +
           "\n# TYPE ringcast_redis_round_trips_total counter\nringcast_redis_round_trips_total " +
           std::to_string(rt.send_batches) +
           "\n# TYPE ringcast_redis_bytes_total "
           "counter\nringcast_redis_bytes_total{direction=\"sent\"} " +
           std::to_string(rt.bytes_sent) + "\nringcast_redis_bytes_total{direction=\"received\"} " +
           std::to_string(rt.bytes_received) + "\n";
    return out;
  };

  // The store and the engine on it: intake acknowledgements wait for the store's durable
  // sequence, whose hook wakes the shards.
  const bool on_redis = cfg.storage.backend == "redis";
  // A failed fsync of the data dir (docs/operations.md "Disk full, read-only and failed syncs"):
  // the store takes nothing more; this thread stops the daemon, which exits kExitStoreFailed for
  // the supervisor to restart it (recovery reads what is really on disk).
  std::atomic<bool> store_failed{false};
  std::string why;
  Result<std::unique_ptr<engine::Embedded>> opened = Error{};
  std::string where;
  if (on_redis) {
    // Cluster mode (docs/cluster.md): Redis (or Redis Cluster) is the system of record; with
    // [cluster] enabled, this node owns the partitions its leases give it.
    engine::RedisModeOptions ro = engine::redis_mode_options(cfg);
    if (notifier) {
      // SPEC R8.4 across a crash: a partition's unsent notifications go out from the node that
      // takes it (after a restart, or from another node after this one died).
      ro.store.notification_outbox = true;
      ro.store.on_outbox = [n = notifier.get()](std::vector<Notification> pending) {
        for (const Notification& note : pending) n->enqueue(note);
      };
    }
    if (mailer) {  // the same for the owner's e-mail (T om)
      ro.store.mail_outbox = true;
      ro.store.on_mail_outbox = [m = mailer.get()](std::vector<Notification> pending) {
        for (const Notification& note : pending) m->enqueue(note);
      };
    }
    if (ro.leases && ro.leases->node_id.empty())
      ro.leases->node_id = intake::default_consumer_name(cfg.storage.data_dir);
    where = "Redis " + cfg.storage.redis.servers.front();
    if (cfg.storage.redis.tls) where += " over TLS";  // SPEC R14
    if (ro.leases) where += " as cluster node " + ro.leases->node_id;
    opened = engine::Embedded::open_redis(std::move(ro), std::move(eopts), &why);
  } else {
    storage::StoreOptions sopts = engine::store_options(cfg);
    sopts.notification_outbox = notifier != nullptr;
    sopts.mail_outbox = mailer != nullptr;
    sopts.on_failed = [&store_failed](const char*, int) {
      store_failed.store(true);
      ::kill(::getpid(), SIGUSR1);
    };
    where = sopts.path;
    opened = engine::Embedded::open(std::move(sopts), std::move(eopts), &why);
  }
  if (!opened.ok()) {
    log::error("cannot start on the store at {}: {}{}{}", where, opened.error().message,
               why.empty() ? "" : ": ", why);
    return 1;
  }
  std::unique_ptr<engine::Embedded> core = std::move(*opened);
  engine::EngineImpl* eng = &core->engine();
  open_store.store(core->rocks(), std::memory_order_release);
  open_redis.store(core->redis(), std::memory_order_release);
  if (storage::RocksStore* rocks = core->rocks()) {
    if (const uint64_t torn = rocks->torn_events_dropped(); torn > 0)
      log::warn(
          "{} events whose payload did not reach the disk before a power loss (never "
          "acknowledged) were dropped at open",
          torn);
    if (notifier) {
      // What an earlier run stored but did not get to the operator webhook (a crash, a stop
      // with the receiver down): sent now, with the same webhook-id.
      for (const Notification& n : rocks->take_outbox()) notifier->enqueue(n);
    }
    if (mailer) {  // the owner e-mails an earlier run did not get to the relay
      for (const Notification& n : rocks->take_mail_outbox()) mailer->enqueue(n);
    }
  }
  // Tenant-scoped keys (SPEC R14.1), from the store; on Redis another node may change them.
  api::KeyRegistry keys(api::KeyRegistryOptions{
      &core->store(), core->redis() != nullptr ? cfg.server.key_refresh : Duration::zero()});
  if (auto r = keys.start(); !r.ok()) {
    log::error("cannot load the API keys: {}", r.error().message);
    core->stop();
    core->close();
    return 1;
  }
  // The engine stops before the notifier and the mailer (the shards hand them notifications),
  // they before the store closes (they mark the outboxes).
  auto shut_down = [&] {
    // The intake stops first: what it read and the engine has not answered stays pending in
    // Redis (read again at the next start).
    intake_views.store(nullptr, std::memory_order_release);
    for (auto& s : sources) s->stop(cfg.server.shutdown_grace / 2);
    core->stop();
    if (notifier) notifier->stop();
    if (mailer) mailer->stop();
    keys.stop();  // its refresher reads the store
    open_store.store(nullptr, std::memory_order_release);
    open_redis.store(nullptr, std::memory_order_release);
    core->close();
  };

  api::RestApiOptions api_opts = api::rest_api_options(cfg);
  api_opts.read_threads = cfg.server.read_threads;  // delivery-log reads off the HTTP loop
  api_opts.keys = &keys;
  if (api_opts.portal.secret.empty()) {
    // SPEC R14: the portal's key is its own secret, never derived from another; unset, it is a
    // random 256-bit secret made once and kept in the store (every node of a cluster reads the
    // same one through Redis).
    auto secret = core->store().node_secret("portal", net::random_hex(32));
    if (!secret.ok()) {
      log::error("cannot read or keep the portal's secret: {}", secret.error().message);
      shut_down();
      return 1;
    }
    api_opts.portal.secret = std::move(*secret);
  }
  {
    std::lock_guard<std::mutex> lock(signer->mu);
    signer->portal = std::make_unique<api::Portal>(api_opts.portal);
  }
  if (!cfg.intake.redis.empty()) {
    api_opts.intake_status = [&intake_views] {
      const auto* v = intake_views.load(std::memory_order_acquire);
      return intake::render_status_json(v ? *v : std::vector<const intake::RedisSource*>{});
    };
  }
  if (cluster::LeaseManager* lm = core->leases()) {
    // GET /v1/cluster, `ringcast cluster status` (operations.md §7): this node's view of leases.
    api_opts.cluster_status = [lm, servers = cfg.storage.redis.servers] {
      return cluster::render_cluster_status_json(lm->status(), lm->counters(), servers);
    };
    // Any node answers any tenant call (operations.md §8): what this node does not own goes to the
    // lease holder of the tenant's partition, at the address it publishes (api/forward.h).
    api_opts.forward.node_id = lm->options().node_id;
    api_opts.forward.secret = cfg.cluster.secret;  // Config::validate(): set, >= 32 characters
    api_opts.forward.ca_file = cfg.cluster.ca_file;
    api_opts.forward.timeout = cfg.cluster.forward_timeout;
    api_opts.forward.max_forwards = cfg.cluster.max_forwards;
    api_opts.forward.find_owner = [lm](Partition p, Duration wait) -> Result<api::ForwardTarget> {
      auto answer = std::make_shared<std::promise<Result<cluster::OwnerInfo>>>();
      std::future<Result<cluster::OwnerInfo>> got = answer->get_future();
      lm->find_owner(p, [answer](Result<cluster::OwnerInfo> r) { answer->set_value(r); });
      if (got.wait_for(wait) != std::future_status::ready)
        return make_error(Errc::kUnavailable, "the owner lookup did not finish in time", nullptr,
                          "timeout");
      Result<cluster::OwnerInfo> r = got.get();
      if (!r.ok()) return r.error();
      return api::ForwardTarget{std::move(r->node_id), std::move(r->url)};
    };
  }
  for (const auto& r : cfg.intake.redis) {
    auto s = intake::RedisSource::start(redis_source_options(cfg, r), *eng);
    if (!s.ok()) {
      log::error("intake source {} did not start: {}", r.name.c_str(), s.error().message);
      shut_down();
      return 1;
    }
    std::printf("ringcast: intake %s reading %zu stream(s) as consumer %s of group %s\n",
                r.name.c_str(), r.streams.size(), (*s)->options().consumer.c_str(),
                r.group.c_str());
    source_views.push_back(s->get());
    sources.push_back(std::move(*s));
  }
  if (!sources.empty()) intake_views.store(&source_views, std::memory_order_release);
  api::RestApi api(*eng, std::move(api_opts));
  net::HttpServerThread server(api, engine::server_options(cfg));
  if (auto r = server.start(); !r.ok()) {
    log::error("cannot listen on {}: {}", cfg.server.listen.c_str(), r.error().message);
    shut_down();
    return 1;
  }
  if (cluster::LeaseManager* lm = core->leases()) {
    // Published with the heartbeat: where the other nodes forward calls for our partitions.
    // Config::validate() made sure one of the two exists.
    std::string url = cfg.cluster.advertise_url;
    if (url.empty())
      url = cluster::derive_advertise_url(cfg.server.listen_ip, server.port(),
                                          !cfg.server.tls_cert.empty())
                .value_or("");
    lm->set_advertise_url(url);
    std::printf("ringcast: cluster node %s advertises %s\n", lm->options().node_id.c_str(),
                url.c_str());
  }
  // The figures on a listener of their own (server.metrics_listen): GET /metrics there needs
  // no credential, so it is bound where only the scraper reaches it.
  MetricsOnly metrics_handler(api);
  std::unique_ptr<net::HttpServerThread> metrics_server;
  if (!cfg.server.metrics_listen.empty()) {
    const auto at = parse_listen(cfg.server.metrics_listen);  // validated
    net::HttpServerOptions mo = engine::server_options(cfg);
    mo.address = at->first;
    mo.port = at->second;
    mo.max_connections = 64;
    metrics_server = std::make_unique<net::HttpServerThread>(metrics_handler, mo);
    if (auto r = metrics_server->start(); !r.ok()) {
      log::error("cannot listen on {} (server.metrics_listen): {}",
                 cfg.server.metrics_listen.c_str(), r.error().message);
      server.stop(cfg.server.shutdown_grace);
      shut_down();
      return 1;
    }
    std::printf("ringcast: metrics on %s:%u\n", to_string(at->first).c_str(),
                metrics_server->port());
  }
  std::printf("ringcast: listening on %s:%u (%u shards, data in %s)\n",
              to_string(cfg.server.listen_ip).c_str(), server.port(), eng->shard_count(),
              on_redis ? where.c_str() : cfg.storage.data_dir.c_str());
  std::fflush(stdout);

  // Retention: off the shards' hot path and off this thread, at start and every
  // storage.retention_interval.
  // On Redis (docs/cluster.md "Retention") the pass covers the partitions this node owns, each
  // fenced at its epoch (cluster mode: the leases; alone on Redis: all of them, unfenced).
  if (storage::RedisStore* store = core->redis()) {
    cluster::LeaseManager* lm = core->leases();
    retention = std::make_unique<engine::RetentionThread>(
        [store, lm](const std::function<bool()>& stop) {
          std::vector<storage::RedisStore::OwnedEpoch> owned;
          if (lm != nullptr) {
            for (const cluster::OwnedPartition& o : lm->owned())
              owned.push_back({o.partition, o.epoch});
          } else {
            for (uint32_t p = 0; p < kPartitions; ++p)
              owned.push_back({static_cast<Partition>(p), 0});
          }
          return store->run_retention(net::SystemClock().wall_now(), owned, stop);
        },
        cfg.storage.retention_interval);
    retention->start();
    retention_metrics.store(retention.get(), std::memory_order_release);
  }
  if (storage::RocksStore* store = core->rocks()) {
    retention = std::make_unique<engine::RetentionThread>(
        [store](const std::function<bool()>& stop) {
          return store->run_retention(net::SystemClock().wall_now(), stop);
        },
        cfg.storage.retention_interval);
    retention->start();
    retention_metrics.store(retention.get(), std::memory_order_release);
  }

  int sig = 0;
  do {
    sig = sigwaitinfo(&sigs, nullptr);
  } while (sig != SIGTERM && sig != SIGINT && !(sig == SIGUSR1 && store_failed.load()));
  if (sig == SIGUSR1) {
    log::error(
        "an fsync of the data dir failed: nothing it covered was acknowledged; "
        "stopping, exit {}: restart to recover from what is on disk",
        kExitStoreFailed);
  } else {
    log::info("{}: stopping intake, finishing in-flight work",
              sig == SIGTERM ? "SIGTERM" : "SIGINT");
  }
  if (retention) retention->stop();  // a running pass ends at its next chunk; before close
  if (metrics_server) metrics_server->stop(seconds(1));
  server.stop(cfg.server.shutdown_grace);  // no new requests; answers what it has
  api.stop_reads();  // reads still running finish against the live engine; queued ones get 503
  shut_down();       // finish or lease in-flight attempts (bounded), flush; the notifier sends what
                     // is due (bounded) and leaves the rest in the outbox
  log::info("stopped");
  return store_failed.load() ? kExitStoreFailed : 0;
}

}  // namespace ringcast
