#include "intake/redis_source.h"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cinttypes>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <string_view>
#include <unordered_set>

#include "log/log.h"
#include "net/loop.h"
#include "net/loop_thread.h"
#include "redis/client.h"
#include "redis/cluster.h"
#include "redis/connection.h"

namespace ringcast::intake {

namespace {

constexpr size_t kMaxAckIds = 1024;    // ids per XACK command
constexpr uint32_t kClaimCount = 512;  // entries per XAUTOCLAIM call
constexpr size_t kMaxStreams = 64;     // streams per source
static_assert(kClaimCount <= kMaxAckIds);

// Where no-reply errors and error replies are both "the command did not do its job".
bool failed(const Result<redis::Reply>& r) {
  return !r.ok() || r->is_error();
}

// Engine refusals that are the entry's own fault: they would be refused again (dead-letter).
// Everything else (shutting_down, unavailable, a store error, an internal error) is retried.
bool permanent(const Error& e) {
  return e.code == Errc::kInvalidArgument || e.code == Errc::kConflict || e.code == Errc::kNotFound;
}

using Args = std::vector<std::string>;

void send(redis::Client& c, const Args& args, redis::Callback cb, redis::CommandOptions o) {
  std::vector<std::string_view> views(args.begin(), args.end());
  c.command(std::span<const std::string_view>(views), std::move(cb), o);
}

// An entry while it is read and not yet acked: its stream and its id "<ms>-<seq>", parsed (no
// string per entry on the hot path).
struct EntryKey {
  uint64_t ms = 0;
  uint64_t seq = 0;
  uint16_t stream = 0;
  bool operator==(const EntryKey&) const = default;
};
struct EntryKeyHash {
  size_t operator()(const EntryKey& k) const {
    uint64_t h = k.ms * 0x9E3779B97F4A7C15ull ^ (k.seq + (uint64_t{k.stream} << 48));
    h ^= h >> 29;
    h *= 0xBF58476D1CE4E5B9ull;
    return static_cast<size_t>(h ^ (h >> 32));
  }
};
EntryKey key_of(uint16_t stream, std::string_view id) {
  EntryKey k;
  k.stream = stream;
  const size_t dash = id.find('-');
  const char* end = id.data() + id.size();
  if (dash != std::string_view::npos &&
      std::from_chars(id.data(), id.data() + dash, k.ms).ptr == id.data() + dash &&
      std::from_chars(id.data() + dash + 1, end, k.seq).ptr == end) {
    return k;
  }
  // Not the form Redis gives ids: keyed by a hash of the text (never seen in practice).
  k.ms = std::hash<std::string_view>{}(id);
  k.seq = UINT64_MAX;
  return k;
}

}  // namespace

const char* source_state_name(SourceState s) {
  switch (s) {
    case SourceState::kStarting:
      return "starting";
    case SourceState::kRecovering:
      return "recovering";
    case SourceState::kReading:
      return "reading";
    case SourceState::kPaused:
      return "paused";
    case SourceState::kDown:
      return "down";
    case SourceState::kStopped:
      return "stopped";
  }
  return "unknown";
}

// Engine answers arrive on shard threads; they reach the loop only while it exists.
using net::Mailbox;

struct RedisSource::Impl {
  struct Entry {
    uint16_t stream = 0;
    std::string id;
    Fields fields;
    // The payload moved into the engine's EventInput (take): read the entry back from the
    // stream before it is needed again (refetch).
    bool payload_taken = false;
  };
  struct Dead {
    Entry entry;
    std::string code;
    std::string message;
  };
  // One XREADGROUP covers these streams (all of them standalone; one each on a cluster, whose
  // keys need not share a slot).
  struct ReadGroup {
    std::vector<uint16_t> streams;
    std::vector<std::string> cursor;  // own-pending phase: the last id seen per stream
    bool recovering = true;           // reading own pending entries ("0"), not new ones (">")
    bool in_flight = false;
    bool recover_next = false;  // re-read own pending before the next read (reconnected)
    std::unique_ptr<net::Timer> retry;
  };

  Impl(RedisSource& self) : self(self), opt(self.options_), c(self.counters_) {}

  RedisSource& self;
  const RedisSourceOptions& opt;
  SourceCounters& c;
  std::unique_ptr<net::Loop> loop;
  std::unique_ptr<redis::Client> reader;  // blocking reads only (a BLOCK holds its FIFO)
  std::unique_ptr<redis::Client> cmd;     // acks, dead letters, claims, XINFO, XGROUP
  std::shared_ptr<Mailbox> mailbox = std::make_shared<Mailbox>();
  std::unique_ptr<EntryMapper> mapper;

  std::vector<ReadGroup> groups;
  bool groups_ready = false;
  bool groups_creating = false;
  bool stopping = false;
  bool down = false;
  MonoTime stop_deadline;

  std::unordered_set<EntryKey, EntryKeyHash> inflight;  // every entry read and not yet acked
  size_t submits = 0;                                   // submit_batch calls not answered yet
  std::vector<std::vector<std::string>> ack_queue;      // per stream
  size_t acks_in_flight = 0;
  std::vector<Dead> dead_queue;
  size_t dead_in_flight = 0;
  size_t refetches_in_flight = 0;
  std::vector<Entry> retry_queue;  // transient engine refusals
  std::vector<std::string> claim_cursor;
  size_t claims_in_flight = 0;

  std::unique_ptr<net::Timer> group_timer, ack_timer, dead_timer, retry_timer, claim_timer,
      status_timer, stop_timer;

  bool closing = false;  // after the loop ended: the clients are being destroyed

  void arm_after(net::Timer* t, Duration d) {
    if (!closing) loop->arm_after(t, d);
  }

  template <class F>
  std::unique_ptr<net::Timer> timer(F f) {
    return std::make_unique<net::TimerFn<F>>(std::move(f));
  }

  void set_state(SourceState s) { c.state.store(static_cast<uint8_t>(s)); }
  void refresh_state() {
    if (stopping) return;
    if (!groups_ready) return set_state(down ? SourceState::kDown : SourceState::kStarting);
    if (down) return set_state(SourceState::kDown);
    if (inflight.size() >= opt.max_unacked) return set_state(SourceState::kPaused);
    for (const auto& g : groups)
      if (g.recovering) return set_state(SourceState::kRecovering);
    set_state(SourceState::kReading);
  }
  void count_unacked() { c.unacked.store(static_cast<int64_t>(inflight.size())); }

  redis::CommandOptions copts(int key_index = redis::kKeyAuto) {
    redis::CommandOptions o;
    o.timeout = opt.command_timeout;
    o.key_index = key_index;
    return o;
  }

  Result<std::unique_ptr<redis::Client>> make_client() {
    redis::ConnectionOptions co;
    co.username = opt.username;
    co.password = opt.password;
    co.tls = opt.tls;
    co.db = opt.db;
    co.default_timeout = opt.command_timeout;
    auto was_down = std::make_shared<bool>(false);
    co.on_event = [this, was_down](const redis::ConnectionEvent& e) {
      if (e.state == redis::ConnState::kBackoff) {
        *was_down = true;
        std::string why = e.error.reason_or_code();
        why += ": ";
        why += e.error.message;
        if (!e.detail.empty()) why += " (" + e.detail + ")";
        bool changed = false;
        {
          std::lock_guard<std::mutex> lock(c.error_mu);
          changed = c.last_error != why;
          c.last_error = why;
        }
        if (changed) {
          log::warn("intake_source_down", {{"source", opt.name}, {"error", why}},
                    "intake {}: Redis connection down: {}", opt.name.c_str(), why.c_str());
        }
      }
      if (e.state == redis::ConnState::kReady) {
        std::lock_guard<std::mutex> lock(c.error_mu);
        if (!c.last_error.empty()) {
          c.last_error.clear();
          log::info("intake_source_up", {{"source", opt.name}},
                    "intake {}: Redis connection up again", opt.name.c_str());
        }
      }
      if (e.state == redis::ConnState::kReady && *was_down) {
        *was_down = false;
        c.reconnects.fetch_add(1);
        // Redis may have restarted: acks sent just before it went away can be lost (AOF
        // fsyncs once a second), leaving entries in this consumer's pending list that are no
        // longer in `inflight`. Read that list again before new entries (a read in flight on
        // the other connection must finish first: its cursor is for ">").
        for (auto& g : groups) g.recover_next = true;
      }
    };
    return redis::make_client(*loop, opt.servers, opt.cluster, std::move(co));
  }

  Result<void> init() {
    auto l = net::Loop::create({});
    if (!l.ok()) return l.error();
    loop = std::move(*l);
    mailbox->loop = loop.get();
    auto r = make_client();
    if (!r.ok()) return r.error();
    reader = std::move(*r);
    auto k = make_client();
    if (!k.ok()) return k.error();
    cmd = std::move(*k);
    mapper = std::make_unique<EntryMapper>(opt.fields, opt.limits);
    ack_queue.resize(opt.streams.size());
    claim_cursor.assign(opt.streams.size(), "0-0");
    if (opt.cluster) {
      groups.resize(opt.streams.size());
      for (uint16_t s = 0; s < opt.streams.size(); ++s) groups[s].streams.push_back(s);
    } else {
      groups.emplace_back();
      for (uint16_t s = 0; s < opt.streams.size(); ++s) groups.back().streams.push_back(s);
    }
    for (auto& g : groups) {
      g.cursor.assign(g.streams.size(), "0");
      g.retry = timer([this, gp = &g] { read(*gp); });
    }
    group_timer = timer([this] { ensure_groups(); });
    ack_timer = timer([this] { flush_acks(); });
    dead_timer = timer([this] { flush_dead(); });
    retry_timer = timer([this] { resubmit(); });
    claim_timer = timer([this] { claim_all(); });
    status_timer = timer([this] { poll_status(); });
    stop_timer = timer([this] { loop->stop(); });
    return ok();
  }

  // ---- consumer groups ----------------------------------------------------------------------

  void ensure_groups() {
    if (closing || stopping || groups_creating) return;
    groups_creating = true;
    auto left = std::make_shared<size_t>(opt.streams.size());
    auto ok_all = std::make_shared<bool>(true);
    for (const auto& stream : opt.streams) {
      send(
          *cmd, {"XGROUP", "CREATE", stream, opt.group, "0", "MKSTREAM"},
          [this, left, ok_all](Result<redis::Reply> r) {
            if (failed(r) && !(r.ok() && r->error_is("BUSYGROUP"))) {
              *ok_all = false;
              c.redis_errors.fetch_add(1);
            }
            if (--*left > 0) return;
            groups_creating = false;
            if (!*ok_all) {
              down = true;
              refresh_state();
              return arm_after(group_timer.get(), opt.retry_delay);
            }
            down = false;
            groups_ready = true;
            refresh_state();
            for (auto& g : groups) read(g);
          },
          copts(2));
    }
  }

  // A group went missing (a Redis restart without persistence, or someone destroyed it):
  // create it again and read own pending entries first (there are none in a new group).
  void lost_group() {
    groups_ready = false;
    for (auto& g : groups) start_recovery(g);
    ensure_groups();
  }

  void start_recovery(ReadGroup& g) {
    g.recovering = true;
    for (std::string& c : g.cursor) c.assign(1, '0');  // not = "0": GCC 12's -Wrestrict at -O3
  }

  // ---- reading ----------------------------------------------------------------------------------

  size_t room() const {
    return inflight.size() >= opt.max_unacked ? 0 : opt.max_unacked - inflight.size();
  }

  void read(ReadGroup& g) {
    if (closing || stopping || !groups_ready || g.in_flight || g.retry->armed()) return;
    if (g.recover_next) {
      g.recover_next = false;
      start_recovery(g);
    }
    const size_t n = std::min<size_t>(opt.batch, room());
    if (n == 0) return refresh_state();  // paused: the next ack reads again
    Args args{"XREADGROUP", "GROUP", opt.group, opt.consumer, "COUNT", std::to_string(n)};
    redis::CommandOptions o = copts();
    if (!g.recovering) {
      args.push_back("BLOCK");
      args.push_back(std::to_string(std::max<int64_t>(1, to_ms(opt.block))));
      o.timeout = opt.block + opt.command_timeout;  // the deadline must exceed the BLOCK
    }
    args.push_back("STREAMS");
    o.key_index = static_cast<int>(args.size());
    for (uint16_t s : g.streams) args.push_back(opt.streams[s]);
    for (size_t i = 0; i < g.streams.size(); ++i) args.push_back(g.recovering ? g.cursor[i] : ">");
    g.in_flight = true;
    refresh_state();
    send(
        *reader, args, [this, gp = &g](Result<redis::Reply> r) { on_read(*gp, std::move(r)); }, o);
  }

  void on_read(ReadGroup& g, Result<redis::Reply> r) {
    g.in_flight = false;
    if (failed(r)) {
      c.redis_errors.fetch_add(1);
      if (r.ok() && r->error_is("NOGROUP")) return lost_group();
      // A read that may have run delivered its entries to this consumer's pending list: read
      // that list again before new entries, or they would wait for XAUTOCLAIM.
      if (!r.ok() && redis::may_have_executed(r.error())) start_recovery(g);
      down = !r.ok();
      refresh_state();
      return arm_after(g.retry.get(), opt.retry_delay);
    }
    down = false;
    if (stopping) return;  // what it brought stays pending: read again at the next start
    std::vector<Entry> entries;
    size_t seen = 0;
    if (r->is_array()) {
      // The reply is ours: its strings move into the entries (no copy of a payload).
      for (auto& per_stream : r->mutable_elements()) {
        if (!per_stream.is_array() || per_stream.size() != 2) continue;
        const std::string& key = per_stream[0].str();
        size_t gi = 0;
        while (gi < g.streams.size() && opt.streams[g.streams[gi]] != key) ++gi;
        if (gi == g.streams.size()) continue;
        for (auto& e : per_stream.mutable_elements()[1].mutable_elements()) {
          if (!e.is_array() || e.size() != 2) continue;
          ++seen;
          if (g.recovering) g.cursor[gi] = e[0].str();
          Entry en;
          en.stream = g.streams[gi];
          en.id = e.mutable_elements()[0].take_str();
          if (e[1].is_nil()) {
            // Deleted (XDEL, trimming) while pending: nothing to deliver; ack it.
            if (inflight.insert(key_of(en.stream, en.id)).second) queue_ack(en);
            continue;
          }
          auto& fv = e.mutable_elements()[1].mutable_elements();
          en.fields.reserve(fv.size() / 2);
          for (size_t f = 0; f + 1 < fv.size(); f += 2)
            en.fields.emplace_back(fv[f].take_str(), fv[f + 1].take_str());
          entries.push_back(std::move(en));
        }
      }
    }
    if (g.recovering && seen == 0) g.recovering = false;  // own pending list read to its end
    take(std::move(entries), false);
    refresh_state();
    read(g);
  }

  // Entries from a read or a claim: map, dead-letter the bad ones, submit the rest.
  void take(std::vector<Entry> entries, bool claimed) {
    std::vector<Entry> batch;
    std::vector<EventInput> events;
    for (auto& en : entries) {
      // Already here (own pending re-read, a claim of an entry this consumer holds): skip.
      if (!inflight.insert(key_of(en.stream, en.id)).second) continue;
      c.read.fetch_add(1);
      if (claimed) c.claimed.fetch_add(1);
      EventInput ev;
      if (auto bad = mapper->map_taking_payload(en.fields, ev)) {
        dead_queue.push_back(Dead{std::move(en), bad->code, std::move(bad->message)});
        continue;
      }
      en.payload_taken = true;
      events.push_back(std::move(ev));
      batch.push_back(std::move(en));
    }
    count_unacked();
    if (!dead_queue.empty()) flush_dead();
    submit(std::move(batch), std::move(events));
  }

  void submit(std::vector<Entry> batch, std::vector<EventInput> events) {
    if (events.empty()) return;
    ++submits;
    auto held = std::make_shared<std::vector<Entry>>(std::move(batch));
    self.engine_.submit_batch(std::move(events), [mb = mailbox, this, held](
                                                     std::vector<Result<SubmitResult>> rs) mutable {
      mb->post([this, held, rs = std::move(rs)]() mutable { on_results(*held, rs); });
    });
  }

  void on_results(std::vector<Entry>& batch, std::vector<Result<SubmitResult>>& rs) {
    --submits;
    for (size_t i = 0; i < batch.size(); ++i) {
      Entry& en = batch[i];
      if (i >= rs.size()) {  // defensive: no answer is a transient one
        retry_queue.push_back(std::move(en));
        continue;
      }
      const auto& r = rs[i];
      if (r.ok()) {
        (r->kind == SubmitResult::Kind::kDuplicate ? c.duplicate : c.accepted).fetch_add(1);
        queue_ack(en);
      } else if (permanent(r.error())) {
        const Error& e = r.error();
        dead_queue.push_back(Dead{std::move(en), e.reason_or_code(), e.message ? e.message : ""});
      } else {
        c.retried.fetch_add(1);
        retry_queue.push_back(std::move(en));
      }
    }
    flush_acks();
    if (!dead_queue.empty()) flush_dead();
    if (!retry_queue.empty() && !retry_timer->armed())
      arm_after(retry_timer.get(), opt.retry_delay);
    check_stop();
  }

  void resubmit() {
    if (stopping || retry_queue.empty()) return;
    std::vector<Entry> batch = std::move(retry_queue);
    retry_queue.clear();
    std::vector<Entry> keep;
    std::vector<EventInput> events;
    for (auto& en : batch) {
      if (en.payload_taken) {  // read it back first; it is submitted from there
        refetch(std::move(en), [this](Entry& got, Refetch how) {
          if (how == Refetch::kFailed) {
            retry_queue.push_back(std::move(got));
            if (!retry_timer->armed()) arm_after(retry_timer.get(), opt.retry_delay);
            return;
          }
          if (how == Refetch::kGone) {  // deleted from the stream meanwhile: nothing to send
            queue_ack(got);
            return flush_acks();
          }
          std::vector<Entry> one;
          std::vector<EventInput> ev(1);
          if (mapper->map_taking_payload(got.fields, ev[0])) return;  // mapped fine before
          got.payload_taken = true;
          one.push_back(std::move(got));
          submit(std::move(one), std::move(ev));
        });
        continue;
      }
      EventInput ev;
      if (auto bad = mapper->map_taking_payload(en.fields, ev)) continue;  // mapped fine before
      en.payload_taken = true;
      events.push_back(std::move(ev));
      keep.push_back(std::move(en));
    }
    submit(std::move(keep), std::move(events));
  }

  // ---- reading an entry back ------------------------------------------------------------------
  // A payload handed to the engine moved with it (one copy of it on the hot path). The rare
  // paths that need the entry again — a dead letter after the engine refused it, a resubmission
  // after a transient refusal — read it back from the stream, where it still is (not acked).
  enum class Refetch : uint8_t { kFound, kGone, kFailed };
  void refetch(Entry en, std::function<void(Entry&, Refetch)> then) {
    auto held = std::make_shared<Entry>(std::move(en));
    ++refetches_in_flight;
    send(
        *cmd, {"XRANGE", opt.streams[held->stream], held->id, held->id},
        [this, held, then = std::move(then)](Result<redis::Reply> r) {
          --refetches_in_flight;
          if (failed(r) || !r->is_array()) {
            c.redis_errors.fetch_add(1);
            then(*held, Refetch::kFailed);
            return check_stop();
          }
          if (r->size() != 1 || !(*r)[0].is_array() || (*r)[0].size() != 2 ||
              !(*r)[0][1].is_array()) {
            then(*held, Refetch::kGone);  // deleted (XDEL, trimming) meanwhile
            return check_stop();
          }
          auto& fv = r->mutable_elements()[0].mutable_elements()[1].mutable_elements();
          held->fields.clear();
          for (size_t f = 0; f + 1 < fv.size(); f += 2)
            held->fields.emplace_back(fv[f].take_str(), fv[f + 1].take_str());
          held->payload_taken = false;
          then(*held, Refetch::kFound);
          check_stop();
        },
        copts());
  }

  // ---- acks and dead letters
  // ---------------------------------------------------------------------

  // The entry is done with: its id moves into the queue.
  void queue_ack(Entry& en) { ack_queue[en.stream].push_back(std::move(en.id)); }

  // One XACK per stream with every id queued this turn (pipelined on the cmd connection).
  // XACK is idempotent, so a failed one is simply sent again.
  void flush_acks() {
    if (closing) return;
    for (uint16_t s = 0; s < ack_queue.size(); ++s) {
      while (!ack_queue[s].empty()) {
        const size_t n = std::min(kMaxAckIds, ack_queue[s].size());
        auto ids = std::make_shared<std::vector<std::string>>(
            std::make_move_iterator(ack_queue[s].end() - n),
            std::make_move_iterator(ack_queue[s].end()));
        ack_queue[s].resize(ack_queue[s].size() - n);
        std::vector<std::string_view> args{"XACK", opt.streams[s], opt.group};
        args.insert(args.end(), ids->begin(), ids->end());  // views: the ids are not copied
        ++acks_in_flight;
        cmd->command(
            std::span<const std::string_view>(args),
            [this, s, ids](Result<redis::Reply> r) {
              --acks_in_flight;
              if (failed(r)) {
                c.redis_errors.fetch_add(1);
                auto& q = ack_queue[s];
                q.insert(q.end(), ids->begin(), ids->end());
                if (!ack_timer->armed()) arm_after(ack_timer.get(), opt.retry_delay);
                return check_stop();
              }
              for (const auto& id : *ids) inflight.erase(key_of(s, id));
              c.acked.fetch_add(ids->size());
              count_unacked();
              refresh_state();
              for (auto& g : groups) read(g);
              check_stop();
            },
            copts());
      }
    }
  }

  // XADD to the dead-letter stream, then (only once it succeeded) XACK the entry.
  void flush_dead() {
    if (closing) return;
    std::vector<Dead> todo = std::move(dead_queue);
    dead_queue.clear();
    for (auto& d : todo) {
      if (d.entry.payload_taken) {  // refused by the engine: its original fields first
        auto code = std::move(d.code);
        auto message = std::move(d.message);
        refetch(std::move(d.entry), [this, code, message](Entry& got, Refetch how) {
          if (how == Refetch::kGone) {
            // Deleted from the stream meanwhile: dead-lettered with what is left of it.
            got.payload_taken = false;
            std::string m = message;
            m += " (the entry was deleted from its stream before it could be dead-lettered "
                 "whole: its payload is not in this copy)";
            dead_queue.push_back(Dead{std::move(got), code, std::move(m)});
          } else {
            if (how == Refetch::kFailed) {
              dead_queue.push_back(Dead{std::move(got), code, message});  // again later
              if (!dead_timer->armed()) arm_after(dead_timer.get(), opt.retry_delay);
              return;
            }
            dead_queue.push_back(Dead{std::move(got), code, message});
          }
          flush_dead();
        });
        continue;
      }
      Args args{"XADD", opt.dead_letter_stream};
      if (opt.dead_letter_max_len > 0) {  // approximate trimming: whole radix-tree nodes
        args.insert(args.end(), {"MAXLEN", "~", std::to_string(opt.dead_letter_max_len)});
      }
      args.push_back("*");
      for (const auto& [k, v] : d.entry.fields) {
        args.push_back(k);
        args.push_back(v);
      }
      args.insert(args.end(), {"error_code", d.code, "error_message", d.message, "source_stream",
                               opt.streams[d.entry.stream], "source_id", d.entry.id});
      ++dead_in_flight;
      auto held = std::make_shared<Dead>(std::move(d));
      send(
          *cmd, args,
          [this, held](Result<redis::Reply> r) {
            --dead_in_flight;
            if (failed(r)) {
              // Not re-sent at once: it may have been added (then the entry is dead-lettered
              // twice, which the source_id shows); never acked without a copy.
              c.redis_errors.fetch_add(1);
              dead_queue.push_back(std::move(*held));
              if (!dead_timer->armed()) arm_after(dead_timer.get(), opt.retry_delay);
              return check_stop();
            }
            c.dead_lettered.fetch_add(1);
            queue_ack(held->entry);
            flush_acks();
          },
          copts());
    }
  }

  // ---- claiming other consumers' stale entries
  // ----------------------------------------------------

  void claim_all() {
    if (stopping || !groups_ready) return arm_claim();
    for (uint16_t s = 0; s < opt.streams.size(); ++s) claim(s);
  }
  void arm_claim() {
    if (!stopping && !claim_timer->armed() && claims_in_flight == 0)
      arm_after(claim_timer.get(), opt.claim_interval);
  }

  void claim(uint16_t s) {
    if (closing) return;
    const size_t n = std::min<size_t>(kClaimCount, room());
    if (n == 0) return arm_claim();
    ++claims_in_flight;
    send(
        *cmd,
        {"XAUTOCLAIM", opt.streams[s], opt.group, opt.consumer,
         std::to_string(std::max<int64_t>(0, to_ms(opt.claim_idle))), claim_cursor[s], "COUNT",
         std::to_string(n)},
        [this, s](Result<redis::Reply> r) {
          --claims_in_flight;
          if (failed(r) || !r->is_array() || r->size() < 2) {
            c.redis_errors.fetch_add(1);
            if (r.ok() && r->error_is("NOGROUP")) lost_group();
            return arm_claim();
          }
          claim_cursor[s] = (*r)[0].str();
          std::vector<Entry> entries;
          for (const auto& e : (*r)[1].elements()) {
            if (!e.is_array() || e.size() != 2 || !e[1].is_array()) continue;
            Entry en;
            en.stream = s;
            en.id = e[0].str();
            for (size_t f = 0; f + 1 < e[1].size(); f += 2)
              en.fields.emplace_back(e[1][f].str(), e[1][f + 1].str());
            entries.push_back(std::move(en));
          }
          if (!stopping) take(std::move(entries), true);
          // More to claim: go on at once (within the cap); else wait for the next interval.
          if (claim_cursor[s] != "0-0" && !stopping) return claim(s);
          arm_claim();
        },
        copts());
  }

  // ---- status
  // --------------------------------------------------------------------------------------

  void poll_status() {
    auto lag = std::make_shared<int64_t>(0);
    auto pending = std::make_shared<int64_t>(0);
    auto left = std::make_shared<size_t>(opt.streams.size());
    auto known = std::make_shared<bool>(true);
    for (const auto& stream : opt.streams) {
      send(
          *cmd, {"XINFO", "GROUPS", stream},
          [this, lag, pending, left, known](Result<redis::Reply> r) {
            bool found = false;
            if (!failed(r) && r->is_array()) {
              for (const auto& grp : r->elements()) {
                int64_t gl = -1, gp = -1;
                bool mine = false;
                for (size_t i = 0; i + 1 < grp.size(); i += 2) {
                  const std::string& k = grp[i].str();
                  if (k == "name") mine = grp[i + 1].str() == opt.group;
                  if (k == "lag" && grp[i + 1].is_integer()) gl = grp[i + 1].integer_value();
                  if (k == "pending" && grp[i + 1].is_integer()) gp = grp[i + 1].integer_value();
                }
                if (!mine) continue;
                found = true;
                // lag is nil when Redis cannot tell (after deletions): count it unknown.
                if (gl < 0) *known = false;
                *lag += std::max<int64_t>(0, gl);
                *pending += std::max<int64_t>(0, gp);
              }
            }
            if (!found) *known = false;
            if (--*left > 0) return;
            c.lag.store(*known ? *lag : -1);
            c.pending.store(*pending);
            if (!stopping) arm_after(status_timer.get(), opt.status_interval);
          },
          copts(2));
    }
  }

  // ---- stopping
  // ------------------------------------------------------------------------------------

  void begin_stop(Duration grace) {
    stopping = true;
    set_state(SourceState::kStopped);
    stop_deadline = loop->now() + grace;
    loop->arm(stop_timer.get(), stop_deadline);
    for (auto* t : {group_timer.get(), retry_timer.get(), claim_timer.get(), status_timer.get()})
      loop->disarm(t);
    for (auto& g : groups) loop->disarm(g.retry.get());
    check_stop();
  }

  void check_stop() {
    if (!stopping) return;
    bool acks_left = false;
    for (const auto& q : ack_queue) acks_left = acks_left || !q.empty();
    if (submits == 0 && !acks_left && acks_in_flight == 0 && dead_in_flight == 0 &&
        refetches_in_flight == 0 && dead_queue.empty()) {
      loop->stop();
    }
  }

  void run() {
    ensure_groups();
    arm_after(claim_timer.get(), opt.claim_interval);
    poll_status();
    loop->run();
    {
      std::lock_guard lock(mailbox->mu);
      mailbox->loop = nullptr;  // late engine answers are dropped: their entries stay pending
    }
    std::vector<net::Timer*> all{group_timer.get(), ack_timer.get(),   dead_timer.get(),
                                 retry_timer.get(), claim_timer.get(), status_timer.get(),
                                 stop_timer.get()};
    for (auto& g : groups) all.push_back(g.retry.get());
    closing = true;
    for (auto* t : all) loop->disarm(t);
    reader.reset();  // fails what is still held (callbacks see stopping and do little)
    cmd.reset();
    for (auto* t : all) loop->disarm(t);  // callbacks above may have re-armed some
    set_state(SourceState::kStopped);
  }
};

RedisSource::RedisSource(RedisSourceOptions options, Engine& engine)
    : options_(std::move(options)), engine_(engine) {}

Result<std::unique_ptr<RedisSource>> RedisSource::start(RedisSourceOptions options,
                                                        Engine& engine) {
  if (options.streams.empty() || options.streams.size() > kMaxStreams)
    return make_error(Errc::kInvalidArgument, "a source reads 1-64 streams", "streams");
  if (options.servers.empty())
    return make_error(Errc::kInvalidArgument, "a source needs a server", "servers");
  if (!options.cluster && options.servers.size() != 1)
    return make_error(Errc::kInvalidArgument,
                      "more than one server is only for a cluster (cluster = true)", "servers");
  if (options.consumer.empty() || options.group.empty())
    return make_error(Errc::kInvalidArgument, "group and consumer must not be empty", "consumer");
  if (options.dead_letter_stream.empty())
    return make_error(Errc::kInvalidArgument, "a source needs a dead_letter_stream",
                      "dead_letter_stream");
  if (options.batch == 0 || options.max_unacked == 0)
    return make_error(Errc::kInvalidArgument, "batch and max_unacked must be at least 1", "batch");
  std::unique_ptr<RedisSource> s(new RedisSource(std::move(options), engine));
  s->impl_ = std::make_unique<Impl>(*s);
  // The loop and clients are made (and used) on the source's own thread.
  Impl* impl = s->impl_.get();
  auto started = net::start_loop_thread(
      s->thread_, "rc-intake", [impl] { return impl->init(); }, [impl] { impl->run(); });
  if (!started.ok()) return started.error();
  return s;
}

void RedisSource::stop(Duration grace) {
  if (!thread_.joinable()) return;
  Impl* impl = impl_.get();
  {
    std::lock_guard lock(impl->mailbox->mu);
    if (impl->mailbox->loop) impl->mailbox->loop->post([impl, grace] { impl->begin_stop(grace); });
  }
  thread_.join();
}

RedisSource::~RedisSource() {
  stop(Duration::zero());
}

// ---- rendering -------------------------------------------------------------------------------

namespace {
std::string json_string(std::string_view s) {
  std::string out = "\"";
  for (unsigned char ch : s) {
    if (ch == '"' || ch == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(ch));
    } else if (ch < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", ch);
      out += buf;
    } else {
      out.push_back(static_cast<char>(ch));
    }
  }
  out.push_back('"');
  return out;
}
std::string label(std::string_view s) {
  std::string out;
  for (char ch : s) {
    if (ch == '"' || ch == '\\') out.push_back('\\');
    if (ch == '\n') {
      out += "\\n";
      continue;
    }
    out.push_back(ch);
  }
  return out;
}
}  // namespace

std::string render_metrics(const std::vector<const RedisSource*>& sources) {
  if (sources.empty()) return {};
  std::string out;
  auto line = [&out](const std::string& name, const std::string& labels, int64_t v) {
    out += name + "{" + labels + "} " + std::to_string(v) + "\n";
  };
  // The same text as the NATS sources' (one family for both kinds of bus).
  out +=
      "# HELP ringcast_intake_entries_total Bus intake entries (Redis Stream entries, JetStream "
      "messages) by what became of them.\n";
  out += "# TYPE ringcast_intake_entries_total counter\n";
  for (const auto* s : sources) {
    const auto& c = s->counters();
    const std::string src = "source=\"" + label(s->options().name) + "\"";
    line("ringcast_intake_entries_total", src + ",result=\"read\"", c.read.load());
    line("ringcast_intake_entries_total", src + ",result=\"accepted\"", c.accepted.load());
    line("ringcast_intake_entries_total", src + ",result=\"duplicate\"", c.duplicate.load());
    line("ringcast_intake_entries_total", src + ",result=\"dead_lettered\"",
         c.dead_lettered.load());
    line("ringcast_intake_entries_total", src + ",result=\"retried\"", c.retried.load());
    line("ringcast_intake_entries_total", src + ",result=\"acked\"", c.acked.load());
    line("ringcast_intake_entries_total", src + ",result=\"claimed\"", c.claimed.load());
  }
  struct Metric {
    const char* name;
    const char* type;
    const char* help;
    int64_t (*get)(const SourceCounters&);
  };
  static const Metric kOthers[] = {
      {"ringcast_intake_lag", "gauge",
       "Entries of the group not yet delivered to any consumer (XINFO GROUPS lag; -1 unknown).",
       [](const SourceCounters& c) { return c.lag.load(); }},
      {"ringcast_intake_pending", "gauge",
       "Entries delivered to a consumer of the group and not yet acked (XINFO GROUPS pending).",
       [](const SourceCounters& c) { return c.pending.load(); }},
      {"ringcast_intake_unacked", "gauge", "Entries read by this node and not yet acked.",
       [](const SourceCounters& c) { return c.unacked.load(); }},
      {"ringcast_intake_reconnects_total", "counter", "Redis connections re-established.",
       [](const SourceCounters& c) { return static_cast<int64_t>(c.reconnects.load()); }},
      {"ringcast_intake_redis_errors_total", "counter",
       "Redis commands of the intake that failed (retried).",
       [](const SourceCounters& c) { return static_cast<int64_t>(c.redis_errors.load()); }},
  };
  for (const auto& m : kOthers) {
    out += std::string("# HELP ") + m.name + " " + m.help + "\n";
    out += std::string("# TYPE ") + m.name + " " + m.type + "\n";
    for (const auto* s : sources)
      line(m.name, "source=\"" + label(s->options().name) + "\"", m.get(s->counters()));
  }
  return out;
}

std::string render_status_json(const std::vector<const RedisSource*>& sources) {
  std::string out = "{\"sources\":[";
  bool first = true;
  for (const auto* s : sources) {
    const auto& o = s->options();
    const auto& c = s->counters();
    if (!first) out += ",";
    first = false;
    out += "{\"name\":" + json_string(o.name) + ",\"kind\":\"redis\",\"state\":\"" +
           source_state_name(s->state()) + "\",\"streams\":[";
    for (size_t i = 0; i < o.streams.size(); ++i) {
      if (i) out += ',';  // appended piece by piece: GCC 12's false -Wrestrict at -O3
      out += json_string(o.streams[i]);
    }
    out += "],\"group\":" + json_string(o.group) + ",\"consumer\":" + json_string(o.consumer) +
           ",\"dead_letter_stream\":" + json_string(o.dead_letter_stream);
    auto num = [&out](const char* k, int64_t v) {
      out += std::string(",\"") + k + "\":" + std::to_string(v);
    };
    num("lag", c.lag.load());
    num("pending", c.pending.load());
    num("unacked", c.unacked.load());
    num("read", static_cast<int64_t>(c.read.load()));
    num("accepted", static_cast<int64_t>(c.accepted.load()));
    num("duplicate", static_cast<int64_t>(c.duplicate.load()));
    num("dead_lettered", static_cast<int64_t>(c.dead_lettered.load()));
    num("retried", static_cast<int64_t>(c.retried.load()));
    num("claimed", static_cast<int64_t>(c.claimed.load()));
    num("reconnects", static_cast<int64_t>(c.reconnects.load()));
    const std::string down = c.connection_error();
    out += ",\"connection_error\":";
    out += down.empty() ? std::string("null") : json_string(down);
    out += "}";
  }
  out += "]}";
  return out;
}

std::string default_consumer_name(const std::string& data_dir) {
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0 || host[0] == '\0')
    std::snprintf(host, sizeof host, "node");
  std::error_code ec;
  std::filesystem::path p =
      std::filesystem::weakly_canonical(std::filesystem::absolute(data_dir, ec), ec);
  std::string text = p.string();
  uint64_t h = 1469598103934665603ull;  // FNV-1a: stable across builds and runs
  for (unsigned char ch : text) {
    h ^= ch;
    h *= uint64_t{1099511628211u};
  }
  char buf[300];
  std::snprintf(buf, sizeof buf, "%s-%08" PRIx64, host, static_cast<uint64_t>(h & 0xffffffffu));
  return buf;
}

}  // namespace ringcast::intake
