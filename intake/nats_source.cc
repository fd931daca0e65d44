#include "intake/nats_source.h"

#include <simdjson.h>

#include <algorithm>
#include <charconv>
#include <cinttypes>
#include <cstdio>
#include <deque>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <sstream>
#include <string_view>
#include <unordered_map>

#include "log/log.h"
#include "nats/jetstream.h"
#include "nats/nkey.h"
#include "net/loop.h"
#include "net/loop_thread.h"

namespace ringcast::intake {

namespace {

constexpr size_t kMaxPulls = 2;           // pull requests outstanding at once (pipelining)
constexpr size_t kMaxSubmitBatch = 1024;  // events per submit_batch
// The key under which a headers-envelope message's body enters EntryMapper: no header name can
// be it (header names have no control characters).
constexpr const char* kBodyKey =
    "\x01"
    "body";

// Engine refusals that are the entry's own fault: they would be refused again (dead-letter).
bool permanent(const Error& e) {
  return e.code == Errc::kInvalidArgument || e.code == Errc::kConflict || e.code == Errc::kNotFound;
}

// Headers the JetStream server acts on: a dead letter must not carry the original's.
bool jetstream_control(std::string_view key) {
  return key == "Nats-Msg-Id" || key.substr(0, 14) == "Nats-Expected-" || key == "Nats-Rollup" ||
         key == "Nats-TTL";
}

std::string padded_copy(std::string_view s) {
  std::string out;
  out.reserve(s.size() + nats::kPayloadSlack);
  out.assign(s);
  return out;
}

}  // namespace

FieldNames default_nats_header_fields() {
  return FieldNames{"Ringcast-Tenant", "Ringcast-Id", "Ringcast-Type", "payload",
                    "Ringcast-Ordering-Key"};
}

// ---- the JSON envelope ------------------------------------------------------------------------

struct EnvelopeReader::Parser {
  simdjson::ondemand::parser p;
};

EnvelopeReader::EnvelopeReader() : parser_(std::make_unique<Parser>()) {}
EnvelopeReader::~EnvelopeReader() = default;

std::optional<EntryError> EnvelopeReader::read(const std::string& body, const FieldNames& names,
                                               Fields& out) {
  namespace od = simdjson::ondemand;
  auto bad_json = [](const char* what, simdjson::error_code e) {
    std::string m = "the message body is not a JSON envelope: ";
    m += what;
    if (e != simdjson::SUCCESS) {
      m += " (";
      m += simdjson::error_message(e);
      m += ')';
    }
    return EntryError{"invalid_json", std::move(m)};
  };
  const char* json = body.data();
  size_t cap = body.capacity();
  if (cap - body.size() < simdjson::SIMDJSON_PADDING) {
    scratch_.reserve(body.size() + simdjson::SIMDJSON_PADDING);
    scratch_.assign(body);
    json = scratch_.data();
    cap = scratch_.capacity();
  }
  od::document doc;
  if (auto e = parser_->p.iterate(json, body.size(), cap).get(doc)) return bad_json("", e);
  od::object obj;
  if (auto e = doc.get_object().get(obj)) return bad_json("not an object", e);
  for (auto field : obj) {
    std::string_view key;
    if (auto e = field.unescaped_key().get(key)) return bad_json("a bad member name", e);
    od::value v;
    if (auto e = field.value().get(v)) return bad_json("a bad value", e);
    if (key == names.payload) {
      od::json_type t;
      if (auto e = v.type().get(t)) return bad_json("a bad payload", e);
      std::string_view raw;
      simdjson::error_code e = simdjson::SUCCESS;
      if (t == od::json_type::object) {
        od::object o;
        e = v.get_object().get(o);
        if (!e) e = o.raw_json().get(raw);
      } else if (t == od::json_type::array) {
        od::array a;
        e = v.get_array().get(a);
        if (!e) e = a.raw_json().get(raw);
      } else {
        raw = v.raw_json_token();
      }
      if (e) return bad_json("a bad payload", e);
      while (!raw.empty() &&
             (raw.back() == ' ' || raw.back() == '\n' || raw.back() == '\r' || raw.back() == '\t'))
        raw.remove_suffix(1);
      out.emplace_back(std::string(key), padded_copy(raw));
      continue;
    }
    if (key == names.tenant || key == names.id || key == names.type || key == names.ordering_key) {
      std::string_view sv;
      if (v.get_string().get(sv)) {
        std::string m(key);
        m += " must be a JSON string";
        return EntryError{"invalid_value", std::move(m)};
      }
      out.emplace_back(std::string(key), std::string(sv));
    }
  }
  // Everything after the object's end: nothing but white space (current_location() is
  // OUT_OF_BOUNDS once every token was read).
  const char* rest = nullptr;
  if (doc.current_location().get(rest) == simdjson::SUCCESS)
    return bad_json("content after the object", simdjson::SUCCESS);
  return std::nullopt;
}

// ---- the source ---------------------------------------------------------------------------------

using net::Mailbox;

struct NatsSource::Impl {
  // A message pulled and not yet acked, naked or terminated.
  struct Entry {
    uint64_t seq = 0;   // its stream sequence (a redelivery has the same)
    std::string reply;  // its $JS.ACK subject (the latest delivery's)
    nats::Msg msg;      // the original, for a dead letter
    MonoTime since;     // taken, or last +WPI
    bool in_engine = false;
    bool dead = false;  // being dead-lettered
    // Headers envelope: the body moved into the engine's EventInput (one copy of each payload
    // on the hot path); a dead letter after the engine refused it reads it back (refetch).
    bool payload_taken = false;
    std::string final;  // the ack body waiting to be published ("+ACK", "-NAK …", "+TERM")
  };
  struct Dead {
    uint64_t seq = 0;
    std::string code;
    std::string message;
  };
  struct Pull {
    uint64_t id = 0;
    uint32_t left = 0;
    MonoTime deadline;
  };

  explicit Impl(NatsSource& s) : self(s), opt(s.options_), c(s.counters_) {}

  NatsSource& self;
  const NatsSourceOptions& opt;
  NatsCounters& c;
  std::unique_ptr<net::Loop> loop;
  std::unique_ptr<nats::Connection> conn;
  std::shared_ptr<Mailbox> mailbox = std::make_shared<Mailbox>();
  std::unique_ptr<EntryMapper> mapper;
  EnvelopeReader envelope;
  FieldNames names;  // as the mapper knows them (headers: the body under kBodyKey)
  std::string pull_inbox, pull_subj, create_subj, create_body, info_subj;

  bool consumer_ready = false;
  bool creating = false;
  bool connected = false;
  bool was_connected = false;
  bool stopping = false;
  bool closing = false;
  bool consumer_error = false;  // the last create failed: its reason is in last_error
  std::deque<Pull> pulls;
  uint64_t next_pull = 1;
  std::unordered_map<uint64_t, Entry*> held;    // by stream sequence
  std::vector<std::unique_ptr<Entry>> entries;  // every Entry made (held or free)
  std::vector<Entry*> free_entries;             // reused: their strings keep their buffers
  Fields fields;                                // reused for each message's mapping
  std::vector<EventInput> batch_events;
  std::vector<uint64_t> batch_seqs;
  size_t submits = 0;
  std::vector<uint64_t> finals;  // entries whose final body is still to be published
  std::vector<Dead> dead_queue;
  size_t dead_in_flight = 0;
  bool flushing_for_stop = false;

  std::unique_ptr<net::Timer> create_timer, pull_timer, submit_timer, finals_timer, dead_timer,
      status_timer, progress_timer, stop_timer;

  template <class F>
  std::unique_ptr<net::Timer> timer(F f) {
    return std::make_unique<net::TimerFn<F>>(std::move(f));
  }
  void arm_after(net::Timer* t, Duration d) {
    if (!closing) loop->arm_after(t, d);
  }
  void arm_once(net::Timer* t, Duration d) {
    if (!t->armed()) arm_after(t, d);
  }

  // ---- state -------------------------------------------------------------------------------

  size_t outstanding() const {
    size_t n = 0;
    for (const auto& p : pulls) n += p.left;
    return n;
  }
  size_t room() const {
    const size_t used = held.size() + outstanding();
    return used >= opt.max_unacked ? 0 : opt.max_unacked - used;
  }
  void set_state(SourceState s) { c.state.store(static_cast<uint8_t>(s)); }
  void refresh_state() {
    if (stopping) return set_state(SourceState::kStopped);
    if (!connected) return set_state(SourceState::kDown);
    if (!consumer_ready)
      return set_state(consumer_error ? SourceState::kDown : SourceState::kStarting);
    if (room() == 0 && held.size() >= opt.max_unacked / 2) return set_state(SourceState::kPaused);
    set_state(SourceState::kReading);
  }
  void count_unacked() { c.unacked.store(static_cast<int64_t>(held.size())); }

  Entry* acquire_entry() {
    if (!free_entries.empty()) {
      Entry* e = free_entries.back();
      free_entries.pop_back();
      return e;
    }
    entries.push_back(std::make_unique<Entry>());
    return entries.back().get();
  }
  // The entry leaves `held`; its strings keep their buffers for the next message (swapped with
  // the parser's, so that neither allocates in the steady state).
  void release(std::unordered_map<uint64_t, Entry*>::iterator it) {
    Entry* e = it->second;
    held.erase(it);
    e->in_engine = e->dead = e->payload_taken = false;
    e->final.clear();
    free_entries.push_back(e);
  }

  // The reason shown in /v1/intake and logged once per change; empty clears it.
  void set_error(const std::string& why) {
    bool changed = false;
    {
      std::lock_guard<std::mutex> lock(c.error_mu);
      changed = c.last_error != why;
      c.last_error = why;
    }
    if (!changed) return;
    if (why.empty()) {
      log::info("intake_source_up",
                {{"source", opt.name}, {"stream", opt.stream}, {"consumer", opt.durable}},
                "intake {}: NATS JetStream consumer {} on stream {} reading again", opt.name,
                opt.durable, opt.stream);
    } else {
      log::warn("intake_source_down", {{"source", opt.name}, {"error", why}}, "intake {}: {}",
                opt.name, why);
    }
  }

  Result<void> init() {
    auto l = net::Loop::create({});
    if (!l.ok()) return l.error();
    loop = std::move(*l);
    mailbox->loop = loop.get();
    names = opt.fields;
    if (opt.envelope == NatsEnvelope::kHeaders) names.payload = kBodyKey;
    mapper = std::make_unique<EntryMapper>(names, opt.limits);
    pull_subj = nats::pull_subject(opt.stream, opt.durable);
    create_subj = nats::consumer_create_subject(opt.stream, opt.durable);
    info_subj = nats::consumer_info_subject(opt.stream, opt.durable);
    nats::ConsumerConfig cc;
    cc.durable = opt.durable;
    cc.filter_subject = opt.filter_subject;
    cc.ack_wait = opt.ack_wait;
    cc.max_ack_pending =
        opt.max_ack_pending > 0 ? opt.max_ack_pending : uint64_t{4} * opt.max_unacked;
    create_body = nats::consumer_create_body(opt.stream, cc);
    held.reserve(opt.max_unacked + 2 * opt.batch);

    nats::ConnectionOptions co;
    co.servers = opt.servers;
    co.name = "ringcast intake " + opt.name;
    co.token = opt.token;
    co.user = opt.user;
    co.password = opt.password;
    co.nkey_seed = self.nkey_seed_;
    co.tls = opt.tls;
    co.default_timeout = opt.request_timeout;
    co.ping_interval = opt.ping_interval;
    co.connect_timeout = opt.request_timeout;
    co.recv_buffer_bytes = 256u << 10;  // a pull's messages in few reads: larger engine batches
    co.on_event = [this](const nats::ConnectionEvent& e) { on_connection(e); };
    co.on_server_error = [this](std::string_view text) {
      c.nats_errors.fetch_add(1);
      log::warn("nats_server_error", {{"source", opt.name}, {"error", text}},
                "intake {}: NATS server error: {}", opt.name, text);
    };
    auto made = nats::Connection::create(*loop, std::move(co));
    if (!made.ok()) return made.error();
    conn = std::move(*made);
    pull_inbox = conn->new_inbox();
    auto sid = conn->subscribe(pull_inbox + ".*", [this](nats::Msg& m) { on_pulled(m); });
    if (!sid.ok()) return sid.error();

    create_timer = timer([this] { ensure_consumer(); });
    pull_timer = timer([this] { on_pull_deadline(); });
    submit_timer = timer([this] { submit(); });
    finals_timer = timer([this] { flush_finals(); });
    dead_timer = timer([this] { flush_dead(); });
    status_timer = timer([this] { poll_status(); });
    progress_timer = timer([this] { progress(); });
    stop_timer = timer([this] { finish_stop(); });
    return ok();
  }

  void on_connection(const nats::ConnectionEvent& e) {
    if (e.state == nats::ConnState::kBackoff) {
      connected = false;
      pulls.clear();  // the server forgets a connection's waiting pull requests
      loop->disarm(pull_timer.get());
      std::string why = "NATS connection down: ";
      why += e.error.reason_or_code();
      why += ": ";
      why += e.error.message;
      if (!e.detail.empty()) {
        why += " (";
        why += e.detail;
        why += ')';
      }
      set_error(why);
      refresh_state();
    } else if (e.state == nats::ConnState::kReady) {
      connected = true;
      if (was_connected) c.reconnects.fetch_add(1);
      was_connected = true;
      consumer_error = false;
      set_error("");
      // The server may have restarted: make sure the consumer is there, then pull; what waits
      // to be acked or dead-lettered goes now.
      consumer_ready = false;
      ensure_consumer();
      flush_finals();
      flush_dead();
      refresh_state();
    }
  }

  // ---- the consumer --------------------------------------------------------------------------

  void ensure_consumer() {
    if (closing || stopping || creating || !connected) return;
    creating = true;
    conn->request(create_subj, create_body, [this](Result<nats::Msg> r) {
      creating = false;
      if (closing) return;
      if (!r.ok()) {
        c.nats_errors.fetch_add(1);
        if (connected) {
          consumer_error = true;
          std::string why = "cannot create the JetStream consumer ";
          why += opt.durable;
          why += " on stream ";
          why += opt.stream;
          why += ": ";
          why += r.error().message;
          if (std::string_view(r.error().reason_or_code()) == nats::kNoResponders)
            why += " (is JetStream enabled on the server?)";
          set_error(why);
        }
        refresh_state();
        return arm_once(create_timer.get(), opt.retry_delay);
      }
      const nats::ApiReply a = nats::parse_api_reply(r->data);
      if (!a.json || a.error) {
        c.nats_errors.fetch_add(1);
        consumer_error = true;
        std::string why = "JetStream refused the consumer ";
        why += opt.durable;
        why += " on stream ";
        why += opt.stream;
        why += ": ";
        why += a.json ? a.description : std::string("an answer that is not JSON");
        if (a.err_code != 0) {
          why += " (err_code ";
          why += std::to_string(a.err_code);
          why += ')';
        }
        set_error(why);
        refresh_state();
        return arm_once(create_timer.get(), opt.retry_delay);
      }
      consumer_ready = true;
      consumer_error = false;
      set_error("");
      if (a.num_pending >= 0) c.lag.store(a.num_pending);
      if (a.num_ack_pending >= 0) c.pending.store(a.num_ack_pending);
      refresh_state();
      pull();
    });
  }

  void consumer_lost(const char* why) {
    if (!consumer_ready) return;
    consumer_ready = false;
    pulls.clear();
    loop->disarm(pull_timer.get());
    log::warn(
        "nats_consumer_lost",
        {{"source", opt.name}, {"stream", opt.stream}, {"consumer", opt.durable}, {"error", why}},
        "intake {}: the JetStream consumer {} on stream {}: {}; creating it again", opt.name,
        opt.durable, opt.stream, why);
    refresh_state();
    arm_once(create_timer.get(), opt.retry_delay);
  }

  void poll_status() {
    if (closing || stopping) return;
    if (!connected) return arm_after(status_timer.get(), opt.status_interval);
    conn->request(info_subj, {}, [this](Result<nats::Msg> r) {
      if (closing) return;
      if (r.ok()) {
        const nats::ApiReply a = nats::parse_api_reply(r->data);
        if (a.error && (a.err_code == nats::kErrConsumerNotFound || a.code == 404)) {
          c.lag.store(-1);
          consumer_lost("it is gone (deleted?)");
        } else if (!a.error) {
          if (a.num_pending >= 0) c.lag.store(a.num_pending);
          if (a.num_ack_pending >= 0) c.pending.store(a.num_ack_pending);
        }
      }
      if (!stopping) arm_after(status_timer.get(), opt.status_interval);
    });
  }

  // ---- pulling ---------------------------------------------------------------------------------

  void pull() {
    if (closing || stopping || !consumer_ready || !connected) return;
    while (pulls.size() < kMaxPulls) {
      // A second request once the first is half served: messages keep flowing meanwhile.
      if (!pulls.empty() && pulls.back().left > opt.batch / 2) break;
      const size_t n = std::min<size_t>(opt.batch, room());
      if (n == 0) break;
      std::string reply = pull_inbox;
      reply += '.';
      reply += std::to_string(next_pull);
      auto r =
          conn->publish(pull_subj, nats::pull_body(static_cast<uint32_t>(n), opt.expires), reply);
      if (!r.ok()) {
        c.nats_errors.fetch_add(1);
        break;  // the connection's event (or the next answer) pulls again
      }
      pulls.push_back(Pull{next_pull++, static_cast<uint32_t>(n),
                           loop->now() + opt.expires + opt.request_timeout});
    }
    if (!pulls.empty() && !pull_timer->armed()) loop->arm(pull_timer.get(), pulls.front().deadline);
    refresh_state();
  }

  // A pull request that got neither its messages nor a status by its expiry and then some:
  // forgotten (the server lost it, or the consumer is gone); the consumer is checked again.
  void on_pull_deadline() {
    const MonoTime now = loop->now();
    bool expired = false;
    while (!pulls.empty() && pulls.front().deadline <= now) {
      pulls.pop_front();
      expired = true;
    }
    if (expired && consumer_ready && connected) {
      consumer_ready = false;
      ensure_consumer();  // idempotent: answers the consumer as it is, then pulls
    }
    if (!pulls.empty()) loop->arm(pull_timer.get(), pulls.front().deadline);
    pull();
  }

  void end_pull(uint64_t id) {
    for (auto it = pulls.begin(); it != pulls.end(); ++it) {
      if (it->id == id) {
        pulls.erase(it);
        break;
      }
    }
    loop->disarm(pull_timer.get());
    if (!pulls.empty()) loop->arm(pull_timer.get(), pulls.front().deadline);
  }

  void on_pulled(nats::Msg& m) {
    if (closing) return;
    if (m.reply.empty()) return on_status(m);
    auto meta = nats::parse_ack_subject(m.reply);
    if (!meta) {  // not a JetStream delivery: nothing to ack it with
      c.nats_errors.fetch_add(1);
      return;
    }
    if (!pulls.empty()) {
      if (--pulls.front().left == 0) end_pull(pulls.front().id);
    }
    if (stopping) {
      // Served by a pull request of before the stop: back at once, for another node or the
      // next start (unless it is held here already).
      if (held.count(meta->stream_seq) == 0)
        (void)conn->publish(m.reply, nats::nak_body(Duration::zero()));
      return;
    }
    c.lag.store(static_cast<int64_t>(meta->pending));
    if (meta->delivered > 1) c.redelivered.fetch_add(1);
    auto [it, fresh] = held.try_emplace(meta->stream_seq, nullptr);
    if (!fresh) {
      // Redelivered while still held here (ack_wait passed): answer with the newest subject.
      it->second->reply.swap(m.reply);
      return;
    }
    c.read.fetch_add(1);
    it->second = acquire_entry();
    Entry& en = *it->second;
    en.seq = meta->stream_seq;
    en.reply.swap(m.reply);
    en.since = loop->now();
    en.msg.subject.swap(m.subject);
    en.msg.headers.swap(m.headers);
    en.msg.data.swap(m.data);
    count_unacked();
    take(en);
    if (!stopping) pull();
  }

  void on_status(const nats::Msg& m) {
    const size_t dot = m.subject.rfind('.');
    uint64_t id = 0;
    if (dot != std::string::npos)
      std::from_chars(m.subject.data() + dot + 1, m.subject.data() + m.subject.size(), id);
    auto h = nats::parse_headers(m.headers);
    const int status = h.ok() ? h->status : 0;
    switch (status) {
      case nats::kStatusIdleHeartbeat:
        return;
      case nats::kStatusNoMessages:
      case nats::kStatusRequestTimeout:
        end_pull(id);
        return pull();
      case nats::kStatusConflict: {
        end_pull(id);
        const std::string& d = h->description;
        if (d.find("Deleted") != std::string::npos || d.find("deleted") != std::string::npos) {
          consumer_lost("deleted");
          return;
        }
        log::warn("nats_pull_conflict", {{"source", opt.name}, {"error", d}},
                  "intake {}: a pull request ended with 409 {}", opt.name, d);
        return arm_once(create_timer.get(), opt.retry_delay);  // checks the consumer, pulls
      }
      case nats::kStatusNoResponders:
        end_pull(id);
        return consumer_lost("no JetStream responder for its pull requests");
      default:
        end_pull(id);
        c.nats_errors.fetch_add(1);
        return arm_once(create_timer.get(), opt.retry_delay);
    }
  }

  // A message mapped to an event (submitted with this turn's others) or dead-lettered.
  void take(Entry& en) {
    fields.clear();  // keeps its capacity
    std::optional<EntryError> bad;
    if (opt.envelope == NatsEnvelope::kHeaders) {
      header_fields(en.msg.headers);
      fields.emplace_back(kBodyKey, std::move(en.msg.data));
    } else {
      bad = envelope.read(en.msg.data, names, fields);
    }
    EventInput ev;
    if (!bad) bad = mapper->map_taking_payload(fields, ev);
    if (bad) {
      if (opt.envelope == NatsEnvelope::kHeaders) {
        en.msg.data = std::move(fields.back().second);  // not taken: the body back in place
        if (bad->code == std::string_view("missing_field")) {
          std::string m = "the message has no header ";
          m += bad->message.substr(bad->message.rfind(' ') + 1);
          bad->message = std::move(m);
        }
      }
      return dead_letter(en, bad->code, std::move(bad->message));
    }
    en.payload_taken = opt.envelope == NatsEnvelope::kHeaders;
    en.in_engine = true;
    batch_events.push_back(std::move(ev));
    batch_seqs.push_back(en.seq);
    if (batch_events.size() >= kMaxSubmitBatch) return submit();
    arm_once(submit_timer.get(), Duration::zero());
  }

  // The header fields EntryMapper looks at (the others are not copied), from a header block
  // "NATS/1.0\r\nKey: value\r\n...\r\n" (nats::parse_headers' rules: values trimmed).
  void header_fields(std::string_view block) {
    size_t at = block.find("\r\n");
    if (block.substr(0, 5) != "NATS/" || at == std::string_view::npos) return;
    at += 2;
    auto trim = [](std::string_view v) {
      while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
      while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);
      return v;
    };
    while (at < block.size()) {
      const size_t eol = block.find("\r\n", at);
      if (eol == std::string_view::npos || eol == at) return;
      const std::string_view line = block.substr(at, eol - at);
      at = eol + 2;
      const size_t colon = line.find(':');
      if (colon == std::string_view::npos) continue;
      const std::string_view key = trim(line.substr(0, colon));
      if (key == names.tenant || key == names.id || key == names.type || key == names.ordering_key)
        fields.emplace_back(std::string(key), std::string(trim(line.substr(colon + 1))));
    }
  }

  void submit() {
    if (batch_events.empty()) return;
    ++submits;
    auto seqs = std::make_shared<std::vector<uint64_t>>(std::move(batch_seqs));
    batch_seqs.clear();
    std::vector<EventInput> events = std::move(batch_events);
    batch_events.clear();
    self.engine_.submit_batch(std::move(events), [mb = mailbox, this, seqs](
                                                     std::vector<Result<SubmitResult>> rs) mutable {
      mb->post([this, seqs, rs = std::move(rs)]() mutable { on_results(*seqs, rs); });
    });
  }

  void on_results(const std::vector<uint64_t>& seqs, std::vector<Result<SubmitResult>>& rs) {
    --submits;
    for (size_t i = 0; i < seqs.size(); ++i) {
      auto it = held.find(seqs[i]);
      if (it == held.end()) continue;  // defensive: every submitted entry stays held
      Entry& en = *it->second;
      en.in_engine = false;
      if (i >= rs.size()) {  // no answer is a transient one
        c.retried.fetch_add(1);
        queue_final(en, nats::nak_body(opt.nak_delay));
        continue;
      }
      const auto& r = rs[i];
      if (r.ok()) {
        (r->kind == SubmitResult::Kind::kDuplicate ? c.duplicate : c.accepted).fetch_add(1);
        queue_final(en, std::string(nats::kAck));
      } else if (permanent(r.error())) {
        const Error& e = r.error();
        dead_letter(en, e.reason_or_code(), e.message ? e.message : "");
      } else {
        c.retried.fetch_add(1);  // SPEC R12.5: never lost, delivered again after nak_delay
        queue_final(en, nats::nak_body(opt.nak_delay));
      }
    }
    flush_finals();
    check_stop();
  }

  // ---- acks, naks, terminations ------------------------------------------------------------

  void queue_final(Entry& en, std::string body) {
    en.final = std::move(body);
    finals.push_back(en.seq);
  }

  // Publishes each queued final body to its entry's $JS.ACK subject; an entry leaves once its
  // body was handed to the connection. Not connected: they wait for the connection.
  void flush_finals() {
    if (closing) return;
    size_t done = 0;
    bool blocked = false;
    for (; done < finals.size(); ++done) {
      auto it = held.find(finals[done]);
      if (it == held.end()) continue;
      Entry& en = *it->second;
      if (!conn->publish(en.reply, en.final).ok()) {
        blocked = true;
        break;
      }
      if (en.final == nats::kAck) {
        c.acked.fetch_add(1);
      }
      release(it);
    }
    finals.erase(finals.begin(), finals.begin() + static_cast<std::ptrdiff_t>(done));
    if (blocked && connected) arm_once(finals_timer.get(), opt.retry_delay);  // output full
    count_unacked();
    refresh_state();
    pull();
    check_stop();
  }

  // ---- dead letters ---------------------------------------------------------------------------

  void dead_letter(Entry& en, std::string code, std::string message) {
    en.dead = true;
    dead_queue.push_back(Dead{en.seq, std::move(code), std::move(message)});
    flush_dead();
  }

  void flush_dead() {
    if (closing || dead_queue.empty()) return;
    if (!connected) return;  // the connection's kReady sends them
    std::vector<Dead> todo = std::move(dead_queue);
    dead_queue.clear();
    for (auto& d : todo) {
      auto it = held.find(d.seq);
      if (it == held.end()) continue;
      Entry& en = *it->second;
      if (en.payload_taken) {  // refused by the engine: its body first
        refetch(std::move(d));
        continue;
      }
      std::vector<std::pair<std::string, std::string>> fields;
      if (!en.msg.headers.empty()) {
        auto h = nats::parse_headers(en.msg.headers);
        if (h.ok()) {
          for (auto& f : h->fields)
            if (!jetstream_control(f.first)) fields.push_back(std::move(f));
        }
      }
      fields.emplace_back("Ringcast-Error-Code", d.code);
      fields.emplace_back("Ringcast-Error-Message", d.message);
      fields.emplace_back("Ringcast-Source-Subject", en.msg.subject);
      fields.emplace_back("Ringcast-Source-Stream", opt.stream);
      fields.emplace_back("Ringcast-Source-Sequence", std::to_string(en.seq));
      // Within the dead-letter stream's duplicate window, a second copy of the same message
      // (a crash before its +TERM, another node after a redelivery) is dropped by the server.
      std::string id = "ringcast-dead-";
      id += opt.stream;
      id += '-';
      id += std::to_string(en.seq);
      fields.emplace_back("Nats-Msg-Id", std::move(id));
      ++dead_in_flight;
      auto held_dead = std::make_shared<Dead>(std::move(d));
      conn->request(
          opt.dead_letter_subject, en.msg.data,
          [this, held_dead](Result<nats::Msg> r) {
            --dead_in_flight;
            if (closing) return;
            std::string why;
            if (!r.ok()) {
              why = r.error().message;
              if (std::string_view(r.error().reason_or_code()) == nats::kNoResponders)
                why += " (no stream captures dead_letter_subject ";
              if (std::string_view(r.error().reason_or_code()) == nats::kNoResponders) {
                why += opt.dead_letter_subject;
                why += ')';
              }
            } else {
              const nats::ApiReply a = nats::parse_api_reply(r->data);
              if (!a.json || a.error || a.seq == 0) {
                why = a.json ? a.description : std::string("a PubAck that is not JSON");
                if (why.empty()) why = "no sequence in the PubAck";
              }
            }
            auto it = held.find(held_dead->seq);
            if (!why.empty()) {
              // Never terminated without a copy: it stays held (+WPI keeps it ours) and is
              // dead-lettered again after retry_delay.
              c.nats_errors.fetch_add(1);
              log::warn(
                  "nats_dead_letter_failed",
                  {{"source", opt.name}, {"subject", opt.dead_letter_subject}, {"error", why}},
                  "intake {}: a dead letter to {} failed: {}; retrying", opt.name,
                  opt.dead_letter_subject, why);
              if (it != held.end()) dead_queue.push_back(std::move(*held_dead));
              arm_once(dead_timer.get(), opt.retry_delay);
              return check_stop();
            }
            if (it == held.end()) return check_stop();
            c.dead_lettered.fetch_add(1);
            queue_final(*it->second, std::string(nats::kTerm));
            flush_finals();
          },
          opt.request_timeout, nats::encode_headers(fields));
    }
  }

  // A message whose body went to the engine, read back from the stream for its dead letter
  // (the rare path: the engine refused it for good). Gone from the stream meanwhile (deleted,
  // past its limits): dead-lettered with its headers and a note.
  void refetch(Dead d) {
    ++dead_in_flight;
    auto hd = std::make_shared<Dead>(std::move(d));
    conn->request(
        nats::msg_get_subject(opt.stream), nats::msg_get_body(hd->seq),
        [this, hd](Result<nats::Msg> r) {
          --dead_in_flight;
          if (closing) return;
          auto it = held.find(hd->seq);
          if (it == held.end()) return check_stop();
          Entry& en = *it->second;
          bool gone = false;
          std::optional<nats::StoredMsg> m;
          if (r.ok()) m = nats::parse_stored_msg(r->data, &gone);
          if (m) {
            en.msg.data = std::move(m->data);
          } else if (gone) {
            en.msg.data.clear();
            hd->message +=
                " (the message left its stream before it could be dead-lettered "
                "whole: its body is not in this copy)";
          } else {
            c.nats_errors.fetch_add(1);
            dead_queue.push_back(std::move(*hd));
            arm_once(dead_timer.get(), opt.retry_delay);
            return check_stop();
          }
          en.payload_taken = false;
          dead_queue.push_back(std::move(*hd));
          flush_dead();
        },
        opt.request_timeout);
  }

  // ---- keeping held messages ours -------------------------------------------------------------

  // +WPI for what is held longer than half of ack_wait (a slow engine answer, a dead letter
  // that keeps failing): the server would deliver it again elsewhere meanwhile.
  void progress() {
    if (closing) return;
    const MonoTime now = loop->now();
    const Duration half = opt.ack_wait / 2;
    if (connected) {
      for (auto& [seq, en] : held) {
        if (!en->final.empty() || now - en->since < half) continue;
        if (conn->publish(en->reply, nats::kProgress).ok()) en->since = now;
      }
    }
    arm_after(progress_timer.get(), std::max<Duration>(opt.ack_wait / 4, milliseconds(100)));
  }

  // ---- stopping -------------------------------------------------------------------------------

  void begin_stop(Duration grace) {
    stopping = true;
    set_state(SourceState::kStopped);
    loop->arm(stop_timer.get(), loop->now() + grace);
    for (auto* t : {create_timer.get(), pull_timer.get(), status_timer.get()}) loop->disarm(t);
    submit();  // what this turn took
    check_stop();
  }

  void check_stop() {
    if (!stopping || flushing_for_stop) return;
    if (submits > 0 || !finals.empty() || dead_in_flight > 0 || !dead_queue.empty()) return;
    finish_stop();
  }

  // What is still held (the engine did not answer in the grace) is naked for a prompt
  // redelivery (to another node, or here after the restart: a duplicate then); a PING's PONG
  // says the acks reached the server, then the loop ends.
  void finish_stop() {
    if (flushing_for_stop) return loop->stop();
    flushing_for_stop = true;
    if (connected) {
      for (auto& [seq, en] : held) (void)conn->publish(en->reply, nats::nak_body(Duration::zero()));
    }
    conn->flush([this](Result<void>) { loop->stop(); });
    loop->arm(stop_timer.get(), loop->now() + opt.request_timeout);
  }

  void run() {
    poll_status();
    arm_after(progress_timer.get(), std::max<Duration>(opt.ack_wait / 4, milliseconds(100)));
    loop->run();
    mailbox->detach();  // late engine answers are dropped: their messages come back
    std::vector<net::Timer*> all{create_timer.get(),   pull_timer.get(), submit_timer.get(),
                                 finals_timer.get(),   dead_timer.get(), status_timer.get(),
                                 progress_timer.get(), stop_timer.get()};
    closing = true;
    for (auto* t : all) loop->disarm(t);
    conn.reset();  // fails what is still held (callbacks see closing and do nothing)
    for (auto* t : all) loop->disarm(t);
    set_state(SourceState::kStopped);
  }
};

NatsSource::NatsSource(NatsSourceOptions options, Engine& engine)
    : options_(std::move(options)), engine_(engine) {}

Result<std::unique_ptr<NatsSource>> NatsSource::start(NatsSourceOptions options, Engine& engine) {
  if (options.servers.empty())
    return make_error(Errc::kInvalidArgument, "a source needs a server", "servers");
  for (const auto& s : options.servers) {
    if (auto a = nats::parse_server(s); !a.ok()) return a.error();
  }
  if (!nats::valid_subject(options.stream) || options.stream.find('.') != std::string::npos)
    return make_error(Errc::kInvalidArgument, "a source needs a stream name (no dots, spaces)",
                      "stream");
  if (!nats::valid_subject(options.durable) || options.durable.find('.') != std::string::npos)
    return make_error(Errc::kInvalidArgument, "durable must be a name without dots or spaces",
                      "durable");
  if (!options.filter_subject.empty() && !nats::valid_subject(options.filter_subject, true))
    return make_error(Errc::kInvalidArgument, "filter_subject is not a valid subject",
                      "filter_subject");
  if (!nats::valid_subject(options.dead_letter_subject))
    return make_error(Errc::kInvalidArgument,
                      "dead_letter_subject must be a subject without wildcards",
                      "dead_letter_subject");
  if (options.batch == 0 || options.max_unacked < options.batch)
    return make_error(Errc::kInvalidArgument, "batch must be at least 1 and at most max_unacked",
                      "batch");
  if (options.expires < milliseconds(10) || options.ack_wait < seconds(1))
    return make_error(Errc::kInvalidArgument, "expires must be >= 10ms and ack_wait >= 1s",
                      "ack_wait");
  std::string seed;
  if (!options.nkey_seed_file.empty()) {
    std::ifstream in(options.nkey_seed_file);
    std::stringstream text;
    text << in.rdbuf();
    if (!in)
      return make_error(Errc::kInvalidArgument, "cannot read nkey_seed_file", "nkey_seed_file");
    seed = text.str();
    if (auto k = nats::nkey_from_seed(seed); !k.ok())
      return make_error(Errc::kInvalidArgument, "nkey_seed_file holds no NKEY user seed",
                        "nkey_seed_file");
  }
  std::unique_ptr<NatsSource> s(new NatsSource(std::move(options), engine));
  s->nkey_seed_ = std::move(seed);
  s->impl_ = std::make_unique<Impl>(*s);
  Impl* impl = s->impl_.get();
  auto started = net::start_loop_thread(
      s->thread_, "rc-intake-nats", [impl] { return impl->init(); }, [impl] { impl->run(); });
  if (!started.ok()) return started.error();
  return s;
}

void NatsSource::stop(Duration grace) {
  if (!thread_.joinable()) return;
  Impl* impl = impl_.get();
  {
    std::lock_guard lock(impl->mailbox->mu);
    if (impl->mailbox->loop) impl->mailbox->loop->post([impl, grace] { impl->begin_stop(grace); });
  }
  thread_.join();
}

NatsSource::~NatsSource() {
  stop(Duration::zero());
}

// ---- rendering -------------------------------------------------------------------------------

namespace {

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

std::string merge_metric_families(const std::vector<std::string>& parts) {
  struct Family {
    std::string help, type, samples;
  };
  std::vector<std::string> order;
  std::map<std::string, Family> fams;
  for (const std::string& text : parts) {
    std::string current;
    size_t at = 0;
    while (at < text.size()) {
      size_t nl = text.find('\n', at);
      if (nl == std::string::npos) nl = text.size();
      const std::string_view line(text.data() + at, nl - at);
      at = nl + 1;
      if (line.empty()) continue;
      const bool help = line.rfind("# HELP ", 0) == 0;
      const bool type = line.rfind("# TYPE ", 0) == 0;
      if (help || type) {
        const std::string_view rest = line.substr(7);
        current.assign(rest.substr(0, rest.find(' ')));
        auto [it, fresh] = fams.try_emplace(current);
        if (fresh) order.push_back(current);
        std::string& slot = help ? it->second.help : it->second.type;
        if (slot.empty()) {
          slot.assign(line);
          slot.push_back('\n');
        }
        continue;
      }
      if (line.front() == '#') continue;
      std::string name(line.substr(0, line.find_first_of("{ ")));
      if (current.empty() || name.rfind(current, 0) != 0) current = name;
      auto [it, fresh] = fams.try_emplace(current);
      if (fresh) order.push_back(current);
      it->second.samples.append(line);
      it->second.samples.push_back('\n');
    }
  }
  std::string out;
  for (const auto& name : order) {
    const Family& f = fams[name];
    out += f.help;
    out += f.type;
    out += f.samples;
  }
  return out;
}

std::string render_metrics(const std::vector<const NatsSource*>& sources) {
  if (sources.empty()) return {};
  std::string out;
  auto line = [&out](const char* name, const std::string& labels, int64_t v) {
    out += name;
    out += '{';
    out += labels;
    out += "} ";
    out += std::to_string(v);
    out += '\n';
  };
  out +=
      "# HELP ringcast_intake_entries_total Bus intake entries (Redis Stream entries, JetStream "
      "messages) by what became of them.\n";
  out += "# TYPE ringcast_intake_entries_total counter\n";
  for (const auto* s : sources) {
    const auto& c = s->counters();
    std::string src = "source=\"";
    src += label(s->options().name);
    src += '"';
    auto result = [&](const char* r, uint64_t v) {
      std::string l = src;
      l += ",result=\"";
      l += r;
      l += '"';
      line("ringcast_intake_entries_total", l, static_cast<int64_t>(v));
    };
    result("read", c.read.load());
    result("accepted", c.accepted.load());
    result("duplicate", c.duplicate.load());
    result("dead_lettered", c.dead_lettered.load());
    result("retried", c.retried.load());
    result("acked", c.acked.load());
    result("redelivered", c.redelivered.load());
  }
  struct Metric {
    const char* name;
    const char* type;
    const char* help;
    int64_t (*get)(const NatsCounters&);
  };
  static const Metric kOthers[] = {
      {"ringcast_intake_lag", "gauge",
       "Entries not yet delivered to any consumer (JetStream: the consumer's num_pending; -1 "
       "unknown).",
       [](const NatsCounters& c) { return c.lag.load(); }},
      {"ringcast_intake_pending", "gauge",
       "Entries delivered and not yet acked (JetStream: the consumer's num_ack_pending).",
       [](const NatsCounters& c) { return c.pending.load(); }},
      {"ringcast_intake_unacked", "gauge", "Entries read by this node and not yet acked.",
       [](const NatsCounters& c) { return c.unacked.load(); }},
      {"ringcast_intake_reconnects_total", "counter", "Bus connections re-established.",
       [](const NatsCounters& c) { return static_cast<int64_t>(c.reconnects.load()); }},
      {"ringcast_intake_nats_errors_total", "counter",
       "NATS requests and publishes of the intake that failed (retried).",
       [](const NatsCounters& c) { return static_cast<int64_t>(c.nats_errors.load()); }},
  };
  for (const auto& m : kOthers) {
    out += "# HELP ";
    out += m.name;
    out += ' ';
    out += m.help;
    out += "\n# TYPE ";
    out += m.name;
    out += ' ';
    out += m.type;
    out += '\n';
    for (const auto* s : sources) {
      std::string src = "source=\"";
      src += label(s->options().name);
      src += '"';
      line(m.name, src, m.get(s->counters()));
    }
  }
  return out;
}

std::string render_status_items(const std::vector<const NatsSource*>& sources) {
  std::string out;
  for (const auto* s : sources) {
    const auto& o = s->options();
    const auto& c = s->counters();
    if (!out.empty()) out += ',';
    auto str = [&out](const char* k, std::string_view v, bool first = false) {
      if (!first) out += ',';
      out += '"';
      out += k;
      out += "\":";
      nats::append_json_string(out, v);
    };
    out += '{';
    str("name", o.name, true);
    str("kind", "nats");
    str("state", source_state_name(s->state()));
    str("stream", o.stream);
    out += ",\"streams\":[";
    nats::append_json_string(out, o.stream);
    out += ']';
    str("durable", o.durable);
    str("group", o.durable);  // the CLI's GROUP/CONSUMER column: the durable is both
    str("consumer", o.durable);
    str("filter_subject", o.filter_subject);
    str("dead_letter_subject", o.dead_letter_subject);
    str("envelope", o.envelope == NatsEnvelope::kJson ? "json" : "headers");
    auto num = [&out](const char* k, int64_t v) {
      out += ",\"";
      out += k;
      out += "\":";
      out += std::to_string(v);
    };
    num("lag", c.lag.load());
    num("pending", c.pending.load());
    num("unacked", c.unacked.load());
    num("read", static_cast<int64_t>(c.read.load()));
    num("accepted", static_cast<int64_t>(c.accepted.load()));
    num("duplicate", static_cast<int64_t>(c.duplicate.load()));
    num("dead_lettered", static_cast<int64_t>(c.dead_lettered.load()));
    num("retried", static_cast<int64_t>(c.retried.load()));
    num("acked", static_cast<int64_t>(c.acked.load()));
    num("redelivered", static_cast<int64_t>(c.redelivered.load()));
    num("reconnects", static_cast<int64_t>(c.reconnects.load()));
    const std::string down = c.connection_error();
    out += ",\"connection_error\":";
    if (down.empty()) {
      out += "null";
    } else {
      nats::append_json_string(out, down);
    }
    out += '}';
  }
  return out;
}

std::string render_intake_metrics(const std::vector<const RedisSource*>& redis,
                                  const std::vector<const NatsSource*>& nats) {
  if (nats.empty()) return render_metrics(redis);
  if (redis.empty()) return merge_metric_families({render_metrics(nats)});
  return merge_metric_families({render_metrics(redis), render_metrics(nats)});
}

std::string render_intake_status(const std::vector<const RedisSource*>& redis,
                                 const std::vector<const NatsSource*>& nats) {
  std::string r = render_status_json(redis);  // {"sources":[...]}
  const std::string n = render_status_items(nats);
  if (n.empty()) return r;
  const size_t open = r.find('[');
  const size_t close = r.rfind(']');
  std::string out = "{\"sources\":[";
  if (open != std::string::npos && close != std::string::npos && close > open + 1) {
    out.append(r, open + 1, close - open - 1);
    out += ',';
  }
  out += n;
  out += "]}";
  return out;
}

}  // namespace ringcast::intake
