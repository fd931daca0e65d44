#include "node/node.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <future>
#include <mutex>
#include <utility>

#include "api/from_config.h"
#include "api/front.h"
#include "api/keys.h"
#include "api/rest_api.h"
#include "cluster/advertise_url.h"
#include "cluster/status_json.h"
#include "core/ip_address.h"
#include "engine/build.h"
#include "engine/embedded.h"
#include "engine/engine_impl.h"
#include "engine/mailer.h"
#include "engine/metrics.h"
#include "engine/notifier.h"
#include "engine/retention.h"
#include "intake/nats_source.h"
#include "intake/redis_source.h"
#include "log/log.h"
#include "net/http_server.h"
#include "net/signing.h"
#include "net/system_clock.h"
#include "node/services.h"
#include "portal/portal.h"
#include "redis/connection.h"
#include "trace/tracer.h"

namespace ringcast::node {

namespace {

// A data dir that others may read or enter (made before this daemon, or by hand) holds every
// payload: said at start, not changed behind the operator's back.
void warn_if_readable(const Config& cfg) {
  if (cfg.storage.backend != "rocksdb") return;
  struct stat st {};
  if (::stat(cfg.storage.data_dir.c_str(), &st) != 0) return;  // made 0700 by the store
  if ((st.st_mode & 077) != 0) {
    log::warn("data_dir_readable",
              {{"path", cfg.storage.data_dir}, {"mode", static_cast<unsigned>(st.st_mode & 0777)}},
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
  o.fields = {r.tenant_field, r.id_field, r.type_field, r.payload_field, r.ordering_key_field};
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

// [[intake.nats]] → the source's options (the same [limits] as every intake).
intake::NatsSourceOptions nats_source_options(const Config& cfg, const NatsIntakeConfig& n) {
  intake::NatsSourceOptions o;
  o.name = n.name;
  o.servers = n.servers;
  o.token = n.token;
  o.user = n.user;
  o.password = n.password;
  o.nkey_seed_file = n.nkey_seed_file;
  o.tls = {n.tls, n.tls_ca_file, n.tls_cert_file, n.tls_key_file, n.tls_server_name};  // SPEC R14
  o.stream = n.stream;
  o.durable = n.durable;
  o.filter_subject = n.filter_subject;
  o.envelope = n.envelope == "json" ? intake::NatsEnvelope::kJson : intake::NatsEnvelope::kHeaders;
  o.fields = {n.tenant_field, n.id_field, n.type_field, n.payload_field, n.ordering_key_field};
  o.limits.max_tenant_bytes = cfg.limits.max_tenant_bytes;
  o.limits.max_id_bytes = cfg.limits.max_id_bytes;
  o.limits.max_type_bytes = cfg.limits.max_type_bytes;
  o.limits.max_payload_bytes = cfg.limits.max_body_bytes;
  o.dead_letter_subject = n.dead_letter_subject;
  o.batch = n.batch;
  o.expires = n.expires;
  o.max_unacked = n.max_unacked;
  o.max_ack_pending = n.max_ack_pending;
  o.ack_wait = n.ack_wait;
  o.nak_delay = n.nak_delay;
  return o;
}

Error not_started() {
  return make_error(Errc::kUnavailable, "the node did not start (see why)");
}

}  // namespace

// Declared in the order the parts are built (so destroyed in the reverse one): a part's
// callbacks may reach those declared above it.
struct Node::Parts {
  Config cfg;
  NodeHooks hooks;
  NodeInfo info;
  std::atomic<bool> store_failed{false};
  bool stopped = false;

  // The span exporter (docs/tracing.md): its own thread; started first and stopped last, so
  // every part that makes spans hands them to a running exporter.
  std::unique_ptr<trace::Tracer> tracer;
  // The operator webhook and the owner's e-mail (SPEC R8.4): their own threads; they outlive
  // the shards that hand them notifications, and stop before the store closes (they mark its
  // outboxes).
  std::unique_ptr<engine::Notifier> notifier;
  std::unique_ptr<engine::Mailer> mailer;
  // The store, once open (null before open and after stop): the outbox marks and the store's
  // gauges of /metrics.
  std::atomic<Store*> open_store{nullptr};
  // The portal's signer for owner-address confirmation links (SPEC R14): its key is known once
  // the store is open; until then a confirmation e-mail waits on the mailer's ladder.
  struct ConfirmSigner {
    std::mutex mu;
    std::unique_ptr<ringcast::portal::Portal> portal;
  };
  std::shared_ptr<ConfirmSigner> signer = std::make_shared<ConfirmSigner>();
  // Retention (SPEC R10.1) on its own thread: a long pass must not delay a stop.
  std::unique_ptr<engine::RetentionThread> retention;
  std::atomic<engine::RetentionThread*> retention_metrics{nullptr};
  // The bus intake sources (operations.md §6), published once they run (/metrics, /v1/intake).
  std::vector<std::unique_ptr<intake::RedisSource>> sources;
  std::vector<const intake::RedisSource*> source_views;
  std::atomic<const std::vector<const intake::RedisSource*>*> intake_views{nullptr};
  std::vector<std::unique_ptr<intake::NatsSource>> nats_sources;
  std::vector<const intake::NatsSource*> nats_views;
  std::atomic<const std::vector<const intake::NatsSource*>*> nats_intake_views{nullptr};

  std::unique_ptr<engine::Embedded> core;
  std::unique_ptr<api::KeyRegistry> keys;
  std::unique_ptr<api::RestApi> api;
  std::unique_ptr<api::ApiFront> front;  // what the API listener serves: the REST API and portal
  std::unique_ptr<net::HttpServerThread> server;
  std::unique_ptr<MetricsOnly> metrics_handler;
  std::unique_ptr<net::HttpServerThread> metrics_server;

  Services services;  // last: destroyed (so stopped) first

  // Each returns false with `why` set when its part did not start.
  bool start_tracer(std::string& why);
  bool start_notifier(std::string& why);
  bool start_mailer(std::string& why);
  bool start_engine(engine::EngineOptions eopts, std::string& why);
  bool start_keys(std::string& why);
  bool start_intake(std::string& why);
  bool start_api(std::string& why);
  bool start_http(std::string& why);
  bool start_metrics_http(std::string& why);
  void start_retention();
  std::function<void(const Notification&)> outbox_marker(bool mail);
  std::string extra_metrics() const;
  void stop();
};

Node::Node() : parts_(std::make_unique<Parts>()) {}

Node::~Node() {
  stop();
}

const NodeInfo& Node::info() const {
  return parts_->info;
}

bool Node::store_failed() const {
  return parts_->store_failed.load();
}

engine::EngineImpl& Node::engine() {
  return parts_->core->engine();
}

std::string Node::metrics_text() const {
  return parts_->api ? parts_->api->metrics_response().body : std::string();
}

void Node::stop() {
  parts_->stop();
}

// Every part in the reverse of its start; then the store closes (the notifier and the mailer,
// stopped after the engine, have marked its outboxes by then).
void Node::Parts::stop() {
  if (stopped) return;
  stopped = true;
  services.stop_all();
  open_store.store(nullptr, std::memory_order_release);
  if (core) core->close();
}

// What the notifier (mail = false) or the mailer (mail = true) calls once a notification is
// through: its entry leaves the open store's outbox (Outboxes, core/store.h). With no store open
// it stays there and is sent again after the next start.
std::function<void(const Notification&)> Node::Parts::outbox_marker(bool mail) {
  return [this, mail](const Notification& note) {
    Result<void> r = ok();
    if (Store* store = open_store.load(std::memory_order_acquire)) {
      r = mail ? store->mail_outbox_done(note.seq) : store->outbox_done(note.seq);
    }
    if (!r.ok()) {
      log::error("outbox_failed",
                 {{"outbox", mail ? "owner_email" : "notification"},
                  {"tenant", note.tenant},
                  log::Field::id("notification", note.seq),
                  {"error", r.error().message}},
                 "{} outbox: {}", mail ? "owner e-mail" : "notification", r.error().message);
    }
  };
}

bool Node::Parts::start_tracer(std::string& why) {
  if (cfg.tracing.endpoint.empty()) return true;
  const std::string instance = cfg.cluster.node_id.empty()
                                   ? intake::default_consumer_name(cfg.storage.data_dir)
                                   : cfg.cluster.node_id;
  auto t = trace::Tracer::start(engine::tracer_options(cfg, instance));
  if (!t.ok()) {
    why = std::string("the span exporter (tracing.endpoint) did not start: ") + t.error().message;
    return false;
  }
  tracer = std::move(*t);
  return services
      .start(
          "tracer", [] { return ok(); }, [this] { tracer->stop(); })
      .ok();
}

bool Node::Parts::start_notifier(std::string& why) {
  if (cfg.notifications.webhook_url.empty()) return true;
  engine::NotifierOptions nopts = engine::notifier_options(cfg);
  nopts.on_finished = outbox_marker(false);
  auto n = engine::Notifier::start(std::move(nopts));
  if (!n.ok()) {
    why = std::string("the notification webhook did not start: ") + n.error().message;
    return false;
  }
  notifier = std::move(*n);
  return services
      .start(
          "notifier", [] { return ok(); }, [this] { notifier->stop(); })
      .ok();
}

bool Node::Parts::start_mailer(std::string& why) {
  if (cfg.notifications.smtp.host.empty()) return true;
  engine::MailerOptions mopts;
  try {
    mopts = engine::mailer_options(cfg);
  } catch (const ConfigError& e) {
    why = e.what();
    return false;
  }
  mopts.on_finished = outbox_marker(true);
  mopts.confirmation_link = [signer = signer, ttl = cfg.notifications.email.confirm_link_ttl](
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
    why = std::string("the owner e-mail sender did not start: ") + m.error().message;
    return false;
  }
  mailer = std::move(*m);
  return services
      .start(
          "mailer", [] { return ok(); }, [this] { mailer->stop(); })
      .ok();
}

std::string Node::Parts::extra_metrics() const {
  std::string out = notifier ? engine::render_notifier_metrics(notifier->metrics()) : std::string();
  if (tracer) out += engine::render_tracer_metrics(tracer->metrics());
  if (mailer) out += engine::render_mailer_metrics(mailer->metrics());
  const auto* rv = intake_views.load(std::memory_order_acquire);
  const auto* nv = nats_intake_views.load(std::memory_order_acquire);
  if (rv || nv) {  // each family once for both kinds of source
    out += intake::render_intake_metrics(rv ? *rv : std::vector<const intake::RedisSource*>{},
                                         nv ? *nv : std::vector<const intake::NatsSource*>{});
  }
  if (engine::RetentionThread* r = retention_metrics.load(std::memory_order_acquire))
    out += r->metrics_text();
  // The store's own (RocksDB: its bytes; Redis: its memory view).
  if (Store* s = open_store.load(std::memory_order_acquire)) out += s->metrics_text();
  // Every Redis connection of the process (store, leases, bus intake): commands written and
  // pipelined writes (round trips), for bench/e2e_cluster.sh's per-delivery Redis cost.
  const redis::ProcessTotals rt = redis::process_totals();
  out +=
      "# HELP ringcast_redis_commands_total Redis commands written by this process (store, "
      "leases, bus intake).\n# TYPE ringcast_redis_commands_total counter\n"
      "ringcast_redis_commands_total ";
  out += std::to_string(rt.commands_sent);
  out +=
      "\n# HELP ringcast_redis_round_trips_total Pipelined writes to Redis (one per round "
      "trip).\n# TYPE ringcast_redis_round_trips_total counter\nringcast_redis_round_trips_total ";
  out += std::to_string(rt.send_batches);
  out +=
      "\n# HELP ringcast_redis_bytes_total Bytes to and from Redis.\n# TYPE "
      "ringcast_redis_bytes_total counter\nringcast_redis_bytes_total{direction=\"sent\"} ";
  out += std::to_string(rt.bytes_sent);
  out += "\nringcast_redis_bytes_total{direction=\"received\"} ";
  out += std::to_string(rt.bytes_received);
  out += "\n";
  return out;
}

// The store and the engine on it: intake acknowledgements wait for the store's durable
// sequence, whose hook wakes the shards. The service's stop is the engine's (graceful; in
// cluster mode the partitions are handed over first); the store closes after every service.
bool Node::Parts::start_engine(engine::EngineOptions eopts, std::string& why) {
  if (notifier || mailer) {
    eopts.on_notification = [n = notifier.get(), m = mailer.get()](const Notification& note) {
      if (n) n->enqueue(note);
      if (m) m->enqueue(note);  // endpoint_disabled and owner_email_confirmation, addressed
    };
  }
  eopts.extra_metrics = [this] { return extra_metrics(); };
  eopts.tracer = tracer.get();  // null: tracing off
  const bool on_redis = cfg.storage.backend == "redis";
  std::string open_why;
  Result<std::unique_ptr<engine::Embedded>> opened = Error{};
  std::string where;
  if (on_redis) {
    // Cluster mode (docs/cluster.md): Redis (or Redis Cluster) is the system of record; with
    // [cluster] enabled, this node owns the partitions the lease manager gives it.
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
    if (ro.ownership && ro.ownership->node_id.empty())
      ro.ownership->node_id = intake::default_consumer_name(cfg.storage.data_dir);
    where = "Redis " + cfg.storage.redis.servers.front();
    if (cfg.storage.redis.tls) where += " over TLS";  // SPEC R14
    if (ro.ownership) where += " as cluster node " + ro.ownership->node_id;
    opened = engine::Embedded::open_redis(std::move(ro), std::move(eopts), &open_why);
  } else {
    storage::StoreOptions sopts = engine::store_options(cfg);
    sopts.notification_outbox = notifier != nullptr;
    sopts.mail_outbox = mailer != nullptr;
    // A failed fsync of the data dir (docs/operations.md "Disk full, read-only and failed
    // syncs"): the store takes nothing more; the hook's owner stops the node.
    sopts.on_failed = [this](const char*, int) {
      if (!store_failed.exchange(true) && hooks.on_store_failed) hooks.on_store_failed();
    };
    where = sopts.path;
    opened = engine::Embedded::open(std::move(sopts), std::move(eopts), &open_why);
  }
  if (!opened.ok()) {
    why = "cannot start on the store at " + where + ": " + opened.error().message +
          (open_why.empty() ? "" : ": ") + open_why;
    return false;
  }
  core = std::move(*opened);
  info.data = on_redis ? where : cfg.storage.data_dir;
  info.shards = core->engine().shard_count();
  Store& store = core->store();
  open_store.store(&store, std::memory_order_release);
  if (const uint64_t torn = store.open_report().torn_events_dropped; torn > 0)
    log::warn("torn_events_dropped", {{"events", torn}},
              "{} events whose payload did not reach the disk before a power loss (never "
              "acknowledged) were dropped at open",
              torn);
  // What an earlier run stored but did not get to the operator webhook (a crash, a stop with the
  // receiver down): sent now, with the same webhook-id. On Redis the lists are empty: a
  // partition's entries go out from the node that takes it (ro.store.on_outbox above).
  if (notifier) {
    for (const Notification& n : store.take_outbox()) notifier->enqueue(n);
  }
  if (mailer) {  // the owner e-mails an earlier run did not get to the relay
    for (const Notification& n : store.take_mail_outbox()) mailer->enqueue(n);
  }
  return services
      .start(
          "engine", [] { return ok(); }, [this] { core->stop(); })
      .ok();
}

// Tenant-scoped keys (SPEC R14.1), from the store; in a shared store (Redis) another node may
// change them, so they are read again every server.key_refresh.
bool Node::Parts::start_keys(std::string& why) {
  keys = std::make_unique<api::KeyRegistry>(api::KeyRegistryOptions{
      &core->store(), core->store().shared() ? cfg.server.key_refresh : Duration::zero()});
  Result<void> r = services.start(
      "keys", [this] { return keys->start(); }, [this] { keys->stop(); });
  if (!r.ok()) why = std::string("cannot load the API keys: ") + r.error().message;
  return r.ok();
}

// The intake stops before the engine: what it read and the engine has not answered stays
// pending in Redis (read again at the next start), or unacknowledged in JetStream (delivered
// again).
bool Node::Parts::start_intake(std::string& why) {
  for (const auto& r : cfg.intake.redis) {
    auto s = intake::RedisSource::start(redis_source_options(cfg, r), core->engine());
    if (!s.ok()) {
      why = "intake source " + r.name + " did not start: " + s.error().message;
      return false;
    }
    info.intakes.push_back(
        {r.name, (*s)->options().consumer, r.group, static_cast<size_t>(r.streams.size())});
    intake::RedisSource* source = s->get();
    source_views.push_back(source);
    sources.push_back(std::move(*s));
    static_cast<void>(services.start(
        "intake " + r.name, [] { return ok(); },
        [this, source] { source->stop(cfg.server.shutdown_grace / 2); }));
  }
  for (const auto& n : cfg.intake.nats) {
    auto s = intake::NatsSource::start(nats_source_options(cfg, n), core->engine());
    if (!s.ok()) {
      why = "intake source " + n.name + " did not start: " + s.error().message;
      return false;
    }
    info.intakes.push_back({n.name, n.durable, n.stream, 1});
    intake::NatsSource* source = s->get();
    nats_views.push_back(source);
    nats_sources.push_back(std::move(*s));
    static_cast<void>(services.start(
        "intake " + n.name, [] { return ok(); },
        [this, source] { source->stop(cfg.server.shutdown_grace / 2); }));
  }
  if (sources.empty() && nats_sources.empty()) return true;
  // Published once every source runs; withdrawn before the first one stops.
  return services
      .start(
          "intake status",
          [this] {
            intake_views.store(&source_views, std::memory_order_release);
            nats_intake_views.store(&nats_views, std::memory_order_release);
            return ok();
          },
          [this] {
            intake_views.store(nullptr, std::memory_order_release);
            nats_intake_views.store(nullptr, std::memory_order_release);
          })
      .ok();
}

// The REST API with the portal (its options from the config, api/from_config.h), and the front
// the listener serves (api/front.h): the portal's pages mounted beside the REST API, on its
// Portal; its stop lets the delivery-log reads still running finish against the live engine and
// answers the queued ones 503.
bool Node::Parts::start_api(std::string& why) {
  api::RestApiOptions api_opts = api::rest_api_options(cfg);
  api_opts.read_threads = cfg.server.read_threads;  // delivery-log reads off the HTTP loop
  api_opts.keys = keys.get();
  if (api_opts.portal.secret.empty()) {
    // SPEC R14: the portal's key is its own secret, never derived from another; unset, it is a
    // random 256-bit secret made once and kept in the store (every node of a cluster reads the
    // same one through Redis).
    auto secret = core->store().node_secret("portal", net::random_hex(32));
    if (!secret.ok()) {
      why = std::string("cannot read or keep the portal's secret: ") + secret.error().message;
      return false;
    }
    api_opts.portal.secret = std::move(*secret);
  }
  {
    std::lock_guard<std::mutex> lock(signer->mu);
    signer->portal = std::make_unique<portal::Portal>(api_opts.portal);
  }
  {  // GET /v1/intake: the bus sources (none configured: an empty list, not a 404)
    api_opts.intake_status = [this] {
      const auto* v = intake_views.load(std::memory_order_acquire);
      const auto* n = nats_intake_views.load(std::memory_order_acquire);
      return intake::render_intake_status(v ? *v : std::vector<const intake::RedisSource*>{},
                                          n ? *n : std::vector<const intake::NatsSource*>{});
    };
  }
  if (cluster::LeaseManager* lm = core->ownership()) {
    // GET /v1/cluster, `ringcast cluster status` (operations.md §7): this node's view of ownership.
    api_opts.cluster_status = [lm, servers = cfg.storage.redis.servers] {
      return cluster::render_cluster_status_json(lm->status(), lm->counters(), servers);
    };
    // Any node answers any tenant call (operations.md §8): what this node does not own goes to the
    // owner of the tenant's partition, at the address it publishes (api/forward.h).
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
  api = std::make_unique<api::RestApi>(core->engine(), std::move(api_opts));
  front = std::make_unique<api::ApiFront>(*api);
  return services
      .start(
          "api", [] { return ok(); }, [this] { api->stop_reads(); })
      .ok();
}

// The API's listener; its stop takes no new requests and answers what it has (bounded by
// server.shutdown_grace). In cluster mode the node then publishes where it is reached.
bool Node::Parts::start_http(std::string& why) {
  server = std::make_unique<net::HttpServerThread>(*front, engine::server_options(cfg));
  Result<void> r = services.start(
      "http", [this] { return server->start(); },
      [this] { server->stop(cfg.server.shutdown_grace); });
  if (!r.ok()) {
    why = "cannot listen on " + cfg.server.listen + ": " + r.error().message;
    return false;
  }
  info.listen_address = to_string(cfg.server.listen_ip);
  info.port = server->port();
  if (cluster::LeaseManager* lm = core->ownership()) {
    // Published with the heartbeat: where the other nodes forward calls for our partitions.
    // Config::validate() made sure one of the two exists.
    std::string url = cfg.cluster.advertise_url;
    if (url.empty())
      url = cluster::derive_advertise_url(cfg.server.listen_ip, server->port(),
                                          !cfg.server.tls_cert.empty())
                .value_or("");
    lm->set_advertise_url(url);
    info.node_id = lm->options().node_id;
    info.advertise_url = url;
  }
  return true;
}

// The figures on a listener of their own (server.metrics_listen): GET /metrics there needs
// no credential, so it is bound where only the scraper reaches it.
bool Node::Parts::start_metrics_http(std::string& why) {
  if (cfg.server.metrics_listen.empty()) return true;
  const auto at = parse_listen(cfg.server.metrics_listen);  // validated
  net::HttpServerOptions mo = engine::server_options(cfg);
  mo.address = at->first;
  mo.port = at->second;
  mo.max_connections = 64;
  metrics_handler = std::make_unique<MetricsOnly>(*api);
  metrics_server = std::make_unique<net::HttpServerThread>(*metrics_handler, mo);
  Result<void> r = services.start(
      "metrics http", [this] { return metrics_server->start(); },
      [this] { metrics_server->stop(seconds(1)); });
  if (!r.ok()) {
    why = "cannot listen on " + cfg.server.metrics_listen +
          " (server.metrics_listen): " + r.error().message;
    return false;
  }
  info.metrics_address = to_string(at->first) + ":" + std::to_string(metrics_server->port());
  return true;
}

// Retention: off the shards' hot path and off the caller's thread, at start and every
// storage.retention_interval. On Redis (docs/cluster.md "Retention") the pass covers the
// partitions this node owns, each fenced at its epoch (cluster mode: as ownership says; alone on
// Redis: all of them, unfenced): the store learns them from engine::Embedded. Its stop ends a
// running pass at its next chunk.
void Node::Parts::start_retention() {
  retention = std::make_unique<engine::RetentionThread>(
      [store = &core->store()](const std::function<bool()>& stop) {
        return store->run_retention(net::SystemClock().wall_now(), stop);
      },
      cfg.storage.retention_interval);
  static_cast<void>(services.start(
      "retention",
      [this] {
        retention->start();
        retention_metrics.store(retention.get(), std::memory_order_release);
        return ok();
      },
      [this] { retention->stop(); }));
}

Result<std::unique_ptr<Node>> Node::open(const Config& cfg, NodeHooks hooks, std::string& why) {
  warn_if_readable(cfg);
  // What would leave a shard without a transport is refused here, with the key at fault.
  if (std::string problem = engine::transport_problem(cfg); !problem.empty()) {
    why = std::move(problem);
    return not_started();
  }
  engine::EngineOptions eopts;
  try {
    eopts = engine::engine_options(cfg);
  } catch (const ConfigError& e) {  // Config::validate() checks every policy first: defensive
    why = e.what();
    return not_started();
  }
  std::unique_ptr<Node> node(new Node());
  Parts& p = *node->parts_;
  p.cfg = cfg;
  p.hooks = std::move(hooks);
  const bool started = p.start_tracer(why) && p.start_notifier(why) && p.start_mailer(why) &&
                       p.start_engine(std::move(eopts), why) && p.start_keys(why) &&
                       p.start_intake(why) && p.start_api(why) && p.start_http(why) &&
                       p.start_metrics_http(why);
  if (!started) {
    p.stop();
    return not_started();
  }
  p.start_retention();
  return node;
}

}  // namespace ringcast::node
