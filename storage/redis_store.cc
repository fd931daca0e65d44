// The Redis store's lifecycle (docs/cluster.md "The store on Redis"): open (the loop thread,
// the client, the memory policy check) and close; API keys and node secrets (SPEC R14.1); the
// outboxes (SPEC R8.4). The other roles' files: storage/redis_store_internal.h.
#include "storage/redis_store.h"

#include <pthread.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "cluster/fence.h"
#include "core/result.h"
#include "core/types.h"
#include "log/log.h"
#include "net/loop.h"
#include "redis/cluster.h"
#include "redis/connection.h"
#include "redis/slot.h"
#include "storage/codec.h"
#include "storage/redis_scripts.h"
#include "storage/redis_store_internal.h"

namespace ringcast::storage {

namespace {

// A script's text without its indentation: EVAL sends the text with every call and Redis hashes
// it (SHA1) each time. Lua does not care about leading blanks (no script has a long string).
std::string compact_lua(std::string_view src) {
  std::string out;
  out.reserve(src.size());
  bool line_start = true;
  for (char c : src) {
    if (line_start && (c == ' ' || c == '\t')) continue;
    line_start = c == '\n';
    out.push_back(c);
  }
  return out;
}

}  // namespace

// ---- lifecycle --------------------------------------------------------------------------------

Result<void> RedisStore::Impl::init() {
  auto l = net::Loop::create({});
  if (!l) return l.error();
  loop = std::move(*l);
  redis::ConnectionOptions co;
  co.username = opt.username;
  co.password = opt.password;
  co.tls = opt.tls;
  co.default_timeout = opt.command_timeout;
  co.connect_timeout = opt.command_timeout;
  if (opt.cluster) {
    redis::ClusterOptions cl;
    cl.seeds = opt.servers;
    cl.connection = co;
    auto c = redis::ClusterClient::create(*loop, cl);
    if (!c) return c.error();
    cluster = c->get();
    client = std::move(*c);
  } else {
    if (!redis::parse_address(opt.servers[0], &co.host, &co.port))
      return make_error(Errc::kInvalidArgument, "a server is not numeric-host:port", "servers");
    auto c = redis::Connection::create(*loop, co);
    if (!c) return c.error();
    client = std::move(*c);
  }
  return ok();
}

Result<std::unique_ptr<RedisStore>> RedisStore::open(RedisStoreOptions options) {
  if (options.servers.empty())
    return make_error(Errc::kInvalidArgument, "no Redis server given", "servers");
  if (!options.cluster && options.servers.size() > 1)
    return make_error(Errc::kInvalidArgument,
                      "more than one server is only for a cluster (cluster = true)", "servers");
  if (options.ns.empty() || options.ns.find_first_of("{}") != std::string::npos)
    return make_error(Errc::kInvalidArgument, "the namespace must be non-empty, without braces",
                      "ns");
  if (options.command_timeout <= Duration::zero())
    return make_error(Errc::kInvalidArgument, "command timeout must be positive",
                      "command_timeout");
  std::unique_ptr<RedisStore> s(new RedisStore());
  s->impl_ = std::make_unique<Impl>();
  Impl* impl = s->impl_.get();
  impl->opt = std::move(options);
  impl->fencing = !impl->opt.node_id.empty();
  impl->apply_source =
      compact_lua(impl->fencing ? cluster::fenced_source(kApplyBody) : std::string(kApplyBody));
  impl->retention_source =
      impl->fencing ? cluster::fenced_source(kRetentionBody) : std::string(kRetentionBody);
  impl->durable = &s->durable_;
  impl->replay_timer.impl = impl;
  impl->mem_timer.impl = impl;
  auto ready = std::make_shared<std::promise<Result<void>>>();
  auto fut = ready->get_future();
  s->thread_ = std::thread([impl, ready] {
    ::pthread_setname_np(::pthread_self(), "rc-redis-store");
    Result<void> r = impl->init();
    const bool started = r.ok();
    ready->set_value(r);
    if (!started) return;
    impl->loop->run();
    impl->closing = true;  // what fails below is not sent again
    impl->fail_parked_reads();
    impl->client.reset();  // fails what is still held: async callers get an error
    impl->loop->disarm(&impl->replay_timer);
    impl->loop->disarm(&impl->mem_timer);
    impl->cluster = nullptr;
    // The loop itself stays until ~RedisStore has joined this thread: the destructor's post()
    // may still be inside Loop::wake() when run() returns here.
  });
  Result<void> init = fut.get();
  if (!init) {
    s->thread_.join();
    return init.error();
  }
  // The server (or, for a cluster, some node) answers, and the store's script is there.
  for (int attempt = 0;; ++attempt) {
    auto r = impl->run1({"PING"});
    auto c = check(r);
    if (c) break;
    if (attempt >= 20) return c.error();
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  // Memory: what every primary allows (a system of record must not evict), then the periodic
  // high-water poll (docs/cluster.md "Memory back-pressure").
  const bool periodic = impl->opt.high_water > 0 && impl->opt.memory_poll > Duration::zero();
  if (impl->opt.check_memory_policy || periodic) {
    Result<void> polled = ok();
    for (int attempt = 0;; ++attempt) {
      polled = s->poll_memory();
      bool known = polled.ok();
      if (known && impl->cluster != nullptr) {  // the slot map may still be loading
        auto pr = std::make_shared<std::promise<bool>>();
        auto fut = pr->get_future();
        impl->post([impl, pr] { pr->set_value(impl->cluster->map_complete()); });
        known = fut.get();
      }
      if (known || attempt >= 20) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    if (impl->opt.check_memory_policy) {
      if (!polled) return polled.error();
      std::lock_guard lk(impl->mem_mu);
      if (!impl->evicting_node.empty()) {
        log::info("redis_evicts", {{"node", impl->evicting_node}, {"policy", impl->evicting}},
                  "Redis at {} has maxmemory-policy {}", impl->evicting_node.c_str(),
                  impl->evicting.c_str());
        return make_error(Errc::kInvalidArgument,
                          "a Redis primary may evict keys: a system of record must never evict "
                          "(accepted events would be lost); set maxmemory-policy noeviction",
                          "maxmemory-policy", "redis_evicts");
      }
      if (impl->no_limit) {
        log::warn("redis_no_memory_limit", {},
                  "WARNING: a Redis primary has maxmemory 0 and "
                  "storage.redis.max_memory_bytes is not set: no memory back-pressure, Redis "
                  "grows until the host runs out (set maxmemory, or "
                  "storage.redis.max_memory_bytes)");
      }
    }
  }
  if (periodic) {
    impl->post([impl] {
      impl->mem_periodic = true;
      impl->loop->arm_after(&impl->mem_timer, impl->opt.memory_poll);
    });
  }
  return s;
}

RedisStore::~RedisStore() {
  {
    // The loader first: a load in progress needs the loop to finish (bounded by its timeouts).
    std::lock_guard lk(loader_mu_);
    if (loader_) {
      {
        std::lock_guard jl(loader_->mu);
        loader_->stop = true;
        loader_->cancelled = true;
      }
      loader_->cv.notify_all();
      loader_->thread.join();
      loader_.reset();
    }
  }
  if (!thread_.joinable()) return;
  impl_->post([impl = impl_.get()] { impl->loop->stop(); });
  thread_.join();
  impl_.reset();  // the loop goes last, on this thread, once nobody can post to it
}

// ---- API keys (SPEC R14.1) --------------------------------------------------------------------

namespace {
constexpr std::string_view kKeyChange =
    "if ARGV[1] == 'put' then redis.call('HSET', KEYS[1], ARGV[2], ARGV[3]) "
    "else redis.call('HDEL', KEYS[1], ARGV[2]) end "
    "return redis.call('INCR', KEYS[2])";
}  // namespace

// The change, then (wait_replicas > 0) a WAIT on the connection of the primary that took it.
Result<void> RedisStore::change_api_key(std::string_view op, std::string_view id, std::string value,
                                        std::string_view hash_suffix) {
  // ":k" the keys, ":c" the portal cutoffs: one slot, one version.
  const std::string hash = "{" + impl_->opt.ns + ":keys}:" + std::string(hash_suffix);
  const std::string version = "{" + impl_->opt.ns + ":keys}:v";
  std::vector<Cmd> cmds;
  cmds.push_back({"EVAL", std::string(kKeyChange), "2", hash, version, std::string(op),
                  std::string(id), std::move(value)});
  redis::CommandOptions co;
  co.key_index = 3;  // KEYS[1]: its slot picks the primary
  Replies rs = impl_->run(std::move(cmds), co);
  auto c = check(rs[0]);
  if (!c) return c.error();
  if (impl_->opt.wait_replicas == 0) return ok();
  auto pr = std::make_shared<std::promise<Result<void>>>();
  auto fut = pr->get_future();
  Impl* im = impl_.get();
  im->post([im, pr, hash] {
    redis::Client* target = im->client.get();
    if (im->cluster) {
      target = im->cluster->connection(im->cluster->node_for_slot(redis::key_slot(hash)));
    }
    if (target == nullptr) {
      return pr->set_value(make_error(Errc::kUnavailable, "redis: no connection to the primary"));
    }
    redis::CommandOptions o;
    o.timeout = im->opt.command_timeout + im->opt.wait_timeout;
    o.key_index = redis::kNoKey;
    const std::string n = std::to_string(im->opt.wait_replicas);
    const std::string ms =
        std::to_string(std::max<int64_t>(1, im->opt.wait_timeout.count() / 1'000'000));
    const int64_t need = im->opt.wait_replicas;
    target->command(
        {"WAIT", n, ms},
        [pr, need](Result<Reply> w) {
          if (!w.ok() || w->is_error() || !w->is_integer() || w->integer_value() < need) {
            return pr->set_value(
                make_error(Errc::kUnavailable, "redis: the key change reached too few replicas"));
          }
          pr->set_value(ok());
        },
        o);
  });
  return fut.get();
}

Result<void> RedisStore::put_api_key(const ApiKey& key) {
  std::string v;
  encode_api_key(key, v);
  return change_api_key("put", key.id, std::move(v));
}

Result<void> RedisStore::delete_api_key(std::string_view id) {
  return change_api_key("del", id, std::string());
}

Result<void> RedisStore::put_portal_cutoff(std::string_view tenant, WallTime not_before) {
  return change_api_key("put", tenant, std::to_string(not_before.ms()), "c");
}

Result<ApiKeySet> RedisStore::load_api_keys() {
  std::vector<Cmd> cmds;
  cmds.push_back({"GET", "{" + impl_->opt.ns + ":keys}:v"});
  cmds.push_back({"HGETALL", "{" + impl_->opt.ns + ":keys}:k"});
  cmds.push_back({"HGETALL", "{" + impl_->opt.ns + ":keys}:c"});
  Replies rs = impl_->run(std::move(cmds));
  ApiKeySet set;
  auto v = check(rs[0]);
  if (!v) return v.error();
  if (!(*v)->is_nil()) set.version = std::strtoull((*v)->str().c_str(), nullptr, 10);
  auto all = check(rs[1]);
  if (!all) return all.error();
  if (!(*all)->is_array() || (*all)->elements().size() % 2 != 0) return bad_reply();
  const auto& el = (*all)->elements();
  for (size_t i = 0; i + 1 < el.size(); i += 2) {
    auto k = decode_api_key(el[i].str(), el[i + 1].str());
    if (!k) return k.error();
    set.keys.push_back(std::move(*k));
  }
  auto cut = check(rs[2]);
  if (!cut) return cut.error();
  if (!(*cut)->is_array() || (*cut)->elements().size() % 2 != 0) return bad_reply();
  const auto& ce = (*cut)->elements();
  for (size_t i = 0; i + 1 < ce.size(); i += 2) {
    set.portal_cutoffs.emplace_back(
        ce[i].str(), WallTime::from_ms(std::strtoll(ce[i + 1].str().c_str(), nullptr, 10)));
  }
  return set;
}

Result<std::string> RedisStore::node_secret(std::string_view name, std::string_view candidate) {
  // SET NX then GET in one script: every node reads the first candidate stored.
  static constexpr std::string_view kSetIfAbsent =
      "redis.call('SET', KEYS[1], ARGV[1], 'NX') return redis.call('GET', KEYS[1])";
  std::vector<Cmd> cmds;
  cmds.push_back({"EVAL", std::string(kSetIfAbsent), "1",
                  "{" + impl_->opt.ns + ":secrets}:" + std::string(name), std::string(candidate)});
  redis::CommandOptions co;
  co.key_index = 3;
  Replies rs = impl_->run(std::move(cmds), co);
  auto c = check(rs[0]);
  if (!c) return c.error();
  if (!(*c)->is_string()) return bad_reply();
  return (*c)->str();
}

Result<uint64_t> RedisStore::api_keys_version() {
  auto r = impl_->run1({"GET", "{" + impl_->opt.ns + ":keys}:v"});
  auto c = check(r);
  if (!c) return c.error();
  if ((*c)->is_nil()) return uint64_t{0};
  return uint64_t{std::strtoull((*c)->str().c_str(), nullptr, 10)};
}

// A partition's outbox entries go to the node that takes the partition, from recover(p)
// (RedisStoreOptions::on_outbox, on_mail_outbox; docs/operations.md "8. Cluster mode": "The
// notification outbox on Redis"): nothing is handed out at start.
std::vector<Notification> RedisStore::take_outbox() {
  return {};
}

std::vector<Notification> RedisStore::take_mail_outbox() {
  return {};
}

Result<void> RedisStore::outbox_done(uint64_t notification_seq) {
  auto r = impl_->run1(
      {"HDEL", impl_->prefix(id_partition(notification_seq)) + "ob", be64s(notification_seq)});
  if (!r.ok()) return r.error();
  return ok();
}

Result<void> RedisStore::mail_outbox_done(uint64_t notification_seq) {
  auto r = impl_->run1(
      {"HDEL", impl_->prefix(id_partition(notification_seq)) + "om", be64s(notification_seq)});
  if (!r.ok()) return r.error();
  return ok();
}

}  // namespace ringcast::storage
