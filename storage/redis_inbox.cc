#include "storage/redis_inbox.h"

#include <pthread.h>

#include <algorithm>
#include <charconv>
#include <future>
#include <map>
#include <span>
#include <string_view>

#include "cluster/keys.h"
#include "core/trace_context.h"
#include "net/loop.h"
#include "redis/cluster.h"
#include "redis/connection.h"
#include "redis/slot.h"
#include "storage/codec.h"
#include "storage/lua_scripts.h"

namespace ringcast::storage {
namespace {

using redis::Reply;

// KEYS[1] = T in, KEYS[2] = T ik, KEYS[3] = T key, KEYS[4] = T tn. ARGV in nines: key field
// (tenant \0 id), tenant, event id, type, payload, be64(payload hash), ordering key (SPEC R13.1;
// empty: none, and no field "k" in the entry), message id (field "m"; T ik keeps be64(hash) then
// it), the producer's traceparent (docs/tracing.md; empty: none, and no field "c"). One answer
// per event: "N" queued now, "U" unknown tenant, "Q"..be64(hash)..message id queued before,
// "S"..T key's value.
constexpr std::string_view kPushScript = lua::inbox_push;

// KEYS[1] = T in, KEYS[2] = T ik; ARGV[1] = how many entry ids follow, then the ids, then the
// key fields.
constexpr std::string_view kAckScript = lua::inbox_ack;

// KEYS[1] = the doorbell set; ARGV = the caller's partitions. SREMs and answers those rung:
// one SMEMBERS (the set holds only what rang since its owners last looked: small), then one
// SREM of the caller's among them, if any.
constexpr std::string_view kTakeRungScript = lua::inbox_take_rung;

Error unavailable(std::string_view why) {
  (void)why;
  return make_error(Errc::kUnavailable,
                    "the event could not be queued durably for its partition's owner (Redis "
                    "unreachable or failing over): retry in a moment",
                    nullptr, "store_unavailable");
}

std::string be64s(uint64_t v) {
  std::string s;
  put_be64(s, v);
  return s;
}

// The milliseconds of a stream entry id "<ms>-<seq>".
WallTime entry_time(std::string_view id) {
  uint64_t ms = 0;
  std::from_chars(id.data(), id.data() + id.size(), ms);
  return WallTime::from_ms(static_cast<int64_t>(ms));
}

Result<InboxAnswer> parse_answer(const Reply& r) {
  if (!r.is_string() || r.str().empty())
    return make_error(Errc::kCorruption, "redis inbox: unexpected reply");
  const std::string& s = r.str();
  InboxAnswer a;
  switch (s[0]) {
    case 'N':
      a.kind = InboxAnswer::Kind::kQueued;
      return a;
    case 'U':
      a.kind = InboxAnswer::Kind::kUnknownTenant;
      return a;
    case 'Q':
      if (s.size() < 9) break;
      a.kind = InboxAnswer::Kind::kAlreadyQueued;
      a.payload_hash = get_be64(s.data() + 1);
      a.stored.message = message_id_bits(std::string_view(s).substr(9));
      return a;
    case 'S': {
      if (s.size() < 9) break;
      auto rec = decode_event_key(std::string_view(s).substr(9));
      if (!rec) return rec.error();
      a.kind = InboxAnswer::Kind::kStored;
      a.stored = *rec;
      a.payload_hash = rec->payload_hash;
      return a;
    }
    default:
      break;
  }
  return make_error(Errc::kCorruption, "redis inbox: unexpected answer");
}

}  // namespace

struct RedisInbox::Impl {
  RedisInboxOptions opt;
  std::unique_ptr<net::Loop> loop;
  std::unique_ptr<redis::Client> client;
  redis::ClusterClient* cluster = nullptr;
  bool closing = false;

  std::string key(Partition p, std::string_view suffix) const {
    return cluster::partition_key(opt.ns, p, suffix);
  }
  std::string ring_key() const { return "{" + opt.ns + "}:ring"; }

  Result<void> init() {
    auto l = net::Loop::create({});
    if (!l) return l.error();
    loop = std::move(*l);
    redis::ConnectionOptions co;
    co.username = opt.username;
    co.password = opt.password;
    co.tls = opt.tls;
    co.default_timeout = opt.command_timeout;
    co.connect_timeout = opt.command_timeout;
    auto c = redis::make_client(*loop, opt.servers, opt.cluster, co);
    if (!c) return c.error();
    client = std::move(*c);
    cluster = dynamic_cast<redis::ClusterClient*>(client.get());
    return ok();
  }

  // ---- loop thread ----

  struct PushJob {
    std::vector<InboxPush> events;
    std::vector<Result<InboxAnswer>> answers;
    size_t left = 0;      // scripts and WAITs outstanding
    bool failed = false;  // some script or WAIT could not be confirmed
    uint64_t routes = 0;  // ClusterClient::reroutes() when the scripts went out
    Poster* on = nullptr;
    PushDone done;
  };

  void finish(const std::shared_ptr<PushJob>& job) {
    if (--job->left > 0) return;
    if (job->failed) {
      // Not confirmed: nothing is known of any event of the push (a script may have run, its
      // WAIT not): every answer but a refusal becomes "retry". Repeating is idempotent.
      for (auto& a : job->answers) {
        if (!a.ok() || a->kind != InboxAnswer::Kind::kUnknownTenant) a = unavailable("");
      }
    }
    job->on->post([job] { job->done(std::move(job->answers)); });
  }

  void push(std::shared_ptr<PushJob> job) {
    if (closing) {
      job->answers.assign(job->events.size(), Result<InboxAnswer>(unavailable("closed")));
      job->on->post([job] { job->done(std::move(job->answers)); });
      return;
    }
    std::map<Partition, std::vector<size_t>> by_part;
    for (size_t i = 0; i < job->events.size(); ++i)
      by_part[partition_of(job->events[i].event->tenant)].push_back(i);
    job->answers.assign(job->events.size(),
                        Result<InboxAnswer>(make_error(Errc::kInternal, "no answer")));
    job->left = by_part.size() + 1;  // +1: released after every command is out
    job->routes = cluster ? cluster->reroutes() : 0;
    std::vector<std::string> nodes;  // the primaries that ran a script: one WAIT each
    for (auto& [p, idx] : by_part) {
      const std::string in = key(p, "in"), ik = key(p, "ik"), kk = key(p, "key"), tn = key(p, "tn");
      std::vector<std::string> args;
      args.reserve(idx.size() * 9);
      for (size_t i : idx) {
        const EventInput& e = *job->events[i].event;
        std::string f = e.tenant;
        f.push_back('\0');
        f += e.id;
        args.push_back(std::move(f));
        args.push_back(e.tenant);
        args.push_back(e.id);
        args.push_back(e.type);
        args.push_back(e.payload);
        args.push_back(be64s(job->events[i].payload_hash));
        args.push_back(e.ordering_key);
        args.push_back(e.message_id);
        args.push_back(e.parent.valid() ? traceparent(e.parent) : std::string());
      }
      std::vector<std::string_view> cmd{"EVAL", kPushScript, "4", in, ik, kk, tn};
      cmd.reserve(cmd.size() + args.size());
      for (const std::string& a : args) cmd.push_back(a);
      redis::CommandOptions co;
      co.key_index = 3;
      client->command(
          std::span<const std::string_view>(cmd),
          [this, job, idx, rung = p](Result<Reply> r) {
            if (!r.ok() || r->is_error() || !r->is_array() || r->size() != idx.size()) {
              job->failed = true;
            } else {
              bool queued = false;
              for (size_t k = 0; k < idx.size(); ++k) {
                job->answers[idx[k]] = parse_answer((*r)[k]);
                queued =
                    queued || (job->answers[idx[k]].ok() &&
                               job->answers[idx[k]]->kind != InboxAnswer::Kind::kUnknownTenant);
              }
              // The entries are in: ring (after, so an owner that takes the ring finds them).
              if (queued) {
                const std::string part = std::to_string(rung);
                client->command({"SADD", ring_key(), part}, [](Result<Reply>) {});
              }
            }
            finish(job);
          },
          co);
      if (opt.wait_replicas > 0) {
        std::string node = "standalone";
        if (cluster) node = cluster->node_for_slot(redis::key_slot(in));
        if (std::find(nodes.begin(), nodes.end(), node) == nodes.end()) nodes.push_back(node);
      }
    }
    for (const std::string& node : nodes) {
      redis::Client* target = client.get();
      if (cluster) target = node.empty() ? nullptr : cluster->connection(node);
      if (target == nullptr) {  // the slot map is being refreshed (a failover)
        job->failed = true;
        continue;
      }
      ++job->left;
      redis::CommandOptions o;
      o.timeout = opt.command_timeout + opt.wait_timeout;
      o.key_index = redis::kNoKey;
      const std::string n = std::to_string(opt.wait_replicas);
      const std::string ms =
          std::to_string(std::max<int64_t>(1, opt.wait_timeout.count() / 1'000'000));
      target->command(
          {"WAIT", n, ms},
          [this, job](Result<Reply> r) {
            // A WAIT counts what its own connection carried before it: a script redirected or
            // retried meanwhile ran elsewhere or later (RedisStore's rule).
            const bool rerouted = cluster && cluster->reroutes() != job->routes;
            if (!r.ok() || r->is_error() || !r->is_integer() ||
                r->integer_value() < static_cast<int64_t>(opt.wait_replicas) || rerouted)
              job->failed = true;
            finish(job);
          },
          o);
    }
    finish(job);  // the +1
  }

  void read(std::vector<std::pair<Partition, std::string>> after, size_t max_each, Poster* on,
            ReadDone done) {
    struct Job {
      std::vector<InboxRead> out;
      std::optional<Error> error;
      size_t left = 0;
      Poster* on = nullptr;
      ReadDone done;
    };
    auto job = std::make_shared<Job>();
    job->on = on;
    job->done = std::move(done);
    if (closing || after.empty()) {
      if (closing) job->error = unavailable("closed");
      return on->post([job] {
        if (job->error) return job->done(*job->error);
        job->done(std::move(job->out));
      });
    }
    job->out.resize(after.size());
    job->left = after.size();
    const std::string count = std::to_string(std::max<size_t>(1, max_each));
    for (size_t i = 0; i < after.size(); ++i) {
      const auto& [p, cursor] = after[i];
      job->out[i].p = p;
      const std::string in = key(p, "in");
      const std::string from = cursor.empty() ? std::string("-") : "(" + cursor;
      client->command({"XRANGE", in, from, "+", "COUNT", count}, [this, job, i](Result<Reply> r) {
        if (!r.ok() || r->is_error() || !r->is_array()) {
          if (!job->error) job->error = unavailable("read");
        } else {
          for (size_t k = 0; k < r->size(); ++k) {
            const Reply& e = (*r)[k];
            if (!e.is_array() || e.size() != 2 || !e[1].is_array()) continue;
            InboxEntry entry;
            entry.id = e[0].str();
            entry.accepted_at = entry_time(entry.id);
            const Reply& f = e[1];
            for (size_t j = 0; j + 1 < f.size(); j += 2) {
              const std::string& name = f[j].str();
              if (name == "t")
                entry.event.tenant = f[j + 1].str();
              else if (name == "i")
                entry.event.id = f[j + 1].str();
              else if (name == "y")
                entry.event.type = f[j + 1].str();
              else if (name == "p")
                entry.event.payload = f[j + 1].str();
              else if (name == "k")
                entry.event.ordering_key = f[j + 1].str();
              else if (name == "m")
                entry.event.message_id = f[j + 1].str();
              else if (name == "c")  // written only when valid; a bad one is left out
                entry.event.parent = parse_traceparent(f[j + 1].str()).value_or(TraceContext{});
            }
            job->out[i].entries.push_back(std::move(entry));
          }
        }
        if (--job->left > 0) return;
        job->on->post([job] {
          if (job->error) return job->done(*job->error);
          job->done(std::move(job->out));
        });
      });
    }
    (void)this;
  }

  void take_rung(std::vector<Partition> mine, Poster* on, RungDone done) {
    auto answer = [on, done = std::move(done)](Result<std::vector<Partition>> r) mutable {
      on->post([done = std::move(done), r = std::move(r)]() mutable { done(std::move(r)); });
    };
    if (closing) return answer(unavailable("closed"));
    if (mine.empty()) return answer(std::vector<Partition>{});
    const std::string ring = ring_key();
    std::vector<std::string> parts;
    parts.reserve(mine.size());
    for (Partition p : mine) parts.push_back(std::to_string(p));
    std::vector<std::string_view> cmd{"EVAL", kTakeRungScript, "1", ring};
    for (const std::string& s : parts) cmd.push_back(s);
    redis::CommandOptions co;
    co.key_index = 3;
    client->command(
        std::span<const std::string_view>(cmd),
        [answer = std::move(answer)](Result<Reply> r) mutable {
          if (!r.ok() || r->is_error() || !r->is_array()) return answer(unavailable("ring"));
          std::vector<Partition> out;
          for (size_t i = 0; i < r->size(); ++i) {
            uint32_t v = 0;
            const std::string& s = (*r)[i].str();
            std::from_chars(s.data(), s.data() + s.size(), v);
            if (v < kPartitions) out.push_back(static_cast<Partition>(v));
          }
          answer(std::move(out));
        },
        co);
  }

  void ack(Partition p, std::vector<std::string> ids, std::vector<std::string> fields) {
    if (closing || (ids.empty() && fields.empty())) return;
    const std::string in = key(p, "in"), ik = key(p, "ik");
    const std::string n = std::to_string(ids.size());
    std::vector<std::string_view> cmd{"EVAL", kAckScript, "2", in, ik, n};
    cmd.reserve(cmd.size() + ids.size() + fields.size());
    for (const std::string& s : ids) cmd.push_back(s);
    for (const std::string& s : fields) cmd.push_back(s);
    redis::CommandOptions co;
    co.key_index = 3;
    // Best effort: an entry left behind is drained again and answered as a duplicate.
    client->command(
        std::span<const std::string_view>(cmd), [](Result<Reply>) {}, co);
  }
};

Result<std::unique_ptr<RedisInbox>> RedisInbox::open(RedisInboxOptions options) {
  if (options.servers.empty())
    return make_error(Errc::kInvalidArgument, "no Redis server given", "servers");
  std::unique_ptr<RedisInbox> s(new RedisInbox());
  s->impl_ = std::make_unique<Impl>();
  Impl* impl = s->impl_.get();
  impl->opt = std::move(options);
  auto ready = std::make_shared<std::promise<Result<void>>>();
  auto fut = ready->get_future();
  s->thread_ = std::thread([impl, ready] {
    ::pthread_setname_np(::pthread_self(), "rc-redis-inbox");
    Result<void> r = impl->init();
    const bool started = r.ok();
    ready->set_value(r);
    if (!started) return;
    impl->loop->run();
    impl->closing = true;
    impl->client.reset();  // fails what is outstanding: their callbacks answer errors
    impl->cluster = nullptr;
  });
  Result<void> init = fut.get();
  if (!init) {
    s->thread_.join();
    return init.error();
  }
  return s;
}

RedisInbox::~RedisInbox() {
  if (!thread_.joinable()) return;
  impl_->loop->post([impl = impl_.get()] { impl->loop->stop(); });
  thread_.join();
  impl_.reset();
}

void RedisInbox::push(std::vector<InboxPush> events, Poster& on, PushDone done) {
  auto job = std::make_shared<Impl::PushJob>();
  job->events = std::move(events);
  job->on = &on;
  job->done = std::move(done);
  if (job->events.empty()) {
    return on.post([job] { job->done({}); });
  }
  impl_->loop->post([impl = impl_.get(), job]() mutable { impl->push(std::move(job)); });
}

void RedisInbox::read(std::vector<std::pair<Partition, std::string>> after, size_t max_each,
                      Poster& on, ReadDone done) {
  impl_->loop->post([impl = impl_.get(), after = std::move(after), max_each, &on,
                     done = std::move(done)]() mutable {
    impl->read(std::move(after), max_each, &on, std::move(done));
  });
}

void RedisInbox::take_rung(std::vector<Partition> mine, Poster& on, RungDone done) {
  impl_->loop->post(
      [impl = impl_.get(), mine = std::move(mine), &on, done = std::move(done)]() mutable {
        impl->take_rung(std::move(mine), &on, std::move(done));
      });
}

void RedisInbox::ack(Partition p, std::vector<std::string> ids, std::vector<std::string> fields) {
  impl_->loop->post(
      [impl = impl_.get(), p, ids = std::move(ids), fields = std::move(fields)]() mutable {
        impl->ack(p, std::move(ids), std::move(fields));
      });
}

}  // namespace ringcast::storage
