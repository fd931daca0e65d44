// The shard's intake (engine/intake_part.h; SPEC R12.5: one event per tenant and id): the checks,
// the key lookup, the fan-out into the turn's batch, bulk batches in bounded parts, and, in
// cluster mode, events of partitions held elsewhere queued in their inboxes. Answered once
// durable.
#include "engine/intake_part.h"

#include <algorithm>
#include <memory>
#include <string_view>

#include "core/event_input.h"
#include "core/trace_context.h"
#include "engine/shard_internal.h"
#include "trace/tracer.h"

namespace ringcast::engine {

namespace {

Error invalid_event_id() {
  return make_error(Errc::kInvalidArgument,
                    "event id must be 1-256 printable ASCII characters without spaces", "id",
                    "invalid_event_id");
}

// Event ids travel in webhook headers (SPEC R11): the intakes' rule (core/event_input.h), here
// for what an embedder submits through the C++ API.
bool valid_event_id(std::string_view id) {
  return !check_event_id(id, kMaxEventIdBytes).has_value();
}

}  // namespace

// Redis near maxmemory (Store::full(), docs/cluster.md "Memory back-pressure"): intake waits,
// deliveries go on.
Error ShardIntake::store_full() {
  core_.metrics.intake_store_full.fetch_add(1, std::memory_order_relaxed);
  return make_error(Errc::kUnavailable,
                    "the store is near its memory limit (Redis maxmemory): retry in a moment",
                    nullptr, "store_full");
}

Result<void> ShardIntake::check_event_input(const EventInput& in, bool* to_inbox) {
  if (core_.draining) return shutting_down();
  if (auto bad = check_ordering_key(in.ordering_key)) {  // SPEC R13.1, the C++ API's way in
    core_.metrics.events_rejected.fetch_add(1, std::memory_order_relaxed);
    return make_error(Errc::kInvalidArgument, bad->message.c_str(), "ordering_key", bad->code);
  }
  if (!core_.serves(in.tenant)) {
    if (to_inbox == nullptr || core_.options.inbox == nullptr) return not_owner_error();
    // Another node owns the partition, or nobody does right now: the event goes to the
    // partition's inbox (its script checks the tenant and the id's uniqueness).
    if (!valid_event_id(in.id)) {
      core_.metrics.events_rejected.fetch_add(1, std::memory_order_relaxed);
      return invalid_event_id();
    }
    // Queued events take Redis memory too: the high-water mark holds for them as well. (Not
    // degraded(): the inbox confirms its own writes, and a store that cannot is why an inbox
    // helps.)
    if (core_.store.full()) return store_full();
    *to_inbox = true;
    return ok();
  }
  // A full disk first (Redis' too: it is also why the store is degraded then).
  if (auto d = core_.batch.check_disk(); !d.ok()) return d.error();
  if (core_.store.degraded()) {
    return make_error(Errc::kUnavailable,
                      "the store cannot confirm writes right now (Redis unreachable or failing "
                      "over): retry in a moment",
                      nullptr, "store_unavailable");
  }
  if (core_.store.full()) return store_full();  // deliveries and attempts still write
  if (!core_.known_tenants.count(in.tenant)) {
    core_.metrics.events_rejected.fetch_add(1, std::memory_order_relaxed);
    return unknown_tenant();
  }
  if (!valid_event_id(in.id)) {
    core_.metrics.events_rejected.fetch_add(1, std::memory_order_relaxed);
    return invalid_event_id();
  }
  return ok();
}

Result<SubmitResult> ShardIntake::take_in(EventInput& in,
                                          const std::optional<EventKeyRecord>& stored,
                                          std::optional<trace::Span>* span) {
  if (!core_.serves(in.tenant)) return not_owner_error();  // lost or handed over during the lookup
  uint64_t hash = payload_hash(in.payload);
  auto answer = [&](const EventKeyRecord& rec) -> Result<SubmitResult> {
    if (rec.payload_hash != hash) {
      core_.metrics.events_conflict.fetch_add(1, std::memory_order_relaxed);
      return make_error(Errc::kConflict, "an event with this id was accepted with another payload",
                        "id", "conflict");
    }
    core_.metrics.events_duplicate.fetch_add(1, std::memory_order_relaxed);
    // seq 0: the key is queued in the partition's inbox (Store::EventKeyRef), not taken in yet.
    return SubmitResult{SubmitResult::Kind::kDuplicate, rec.seq, rec.deliveries, rec.seq == 0,
                        rec.message};
  };
  std::string key = in.tenant;
  key.push_back('\0');
  key += in.id;
  // This turn's events first: the store does not have them yet.
  if (auto it = turn_events_.find(key); it != turn_events_.end()) return answer(it->second);
  // Then what was committed while this lookup was outstanding (it may not have seen it).
  if (!settling_.empty()) {
    if (auto it = settling_.find(key); it != settling_.end()) return answer(it->second);
  }
  if (stored) return answer(*stored);

  WallTime now = core_.loop->wall_now();
  Event ev;
  ev.seq = core_.next_id(partition_of(in.tenant));
  ev.tenant = std::move(in.tenant);
  ev.id = std::move(in.id);
  ev.type = std::move(in.type);
  ev.payload = std::move(in.payload);
  ev.ordering_key = std::move(in.ordering_key);
  ev.created_at = now;
  ev.payload_hash = hash;
  // An event drained from its partition's inbox keeps the id its 202 named (core/inbox.h).
  MessageIdBits message = message_id_bits(in.message_id);
  if (message.empty()) {
    message = core_.new_message_bits(now);
    ev.message_id = message_id_of(message);
  } else {
    ev.message_id = std::move(in.message_id);
  }
  // A producer's trace is kept with the event: the deliveries' and attempts' spans join it,
  // after a restart too (docs/tracing.md); without one the trace is derived from the message id.
  ev.trace = stored_trace(in.parent, ev.message_id);
  if (span != nullptr && event_sampled(ev, core_.options.tracer->sample_ratio())) {
    const TraceContext tc = event_trace(ev);
    trace::Span& s = span->emplace();
    s.trace_id = tc.trace_id;
    s.span_id = tc.span_id;
    if (in.parent.valid()) s.parent_span_id = in.parent.span_id;
    s.name = "intake";
    s.kind = trace::SpanKind::kServer;
    s.start_unix_ns = now.ns();
    s.add("ringcast.tenant", ev.tenant)
        .add("ringcast.event.id", ev.id)
        .add("ringcast.message_id", ev.message_id)
        .add("ringcast.event.type", ev.type);
  }
  const EventSeq seq = ev.seq;
  Mutations& mutations = core_.mutations();
  uint32_t n = core_.scheduler->fan_out(std::move(ev), now, core_.ids, mutations);
  if (span != nullptr && span->has_value()) (*span)->add("ringcast.deliveries", int64_t{n});
  if (n > 0) cache_after_commit_.push_back(mutations.events.size() - 1);
  turn_events_.emplace(std::move(key), EventKeyRecord{seq, hash, n, message});
  core_.metrics.events_accepted.fetch_add(1, std::memory_order_relaxed);
  core_.metrics.deliveries_created.fetch_add(n, std::memory_order_relaxed);
  return SubmitResult{SubmitResult::Kind::kAccepted, seq, n, false, message};
}

void ShardIntake::submit(EventInput in, std::function<void(Result<SubmitResult>)> done) {
  std::vector<EventInput> one;
  one.push_back(std::move(in));
  submit_batch(std::move(one), [done = std::move(done)](std::vector<Result<SubmitResult>> rs) {
    done(std::move(rs[0]));
  });
}

void ShardIntake::submit_batch(std::vector<EventInput> events,
                               std::function<void(std::vector<Result<SubmitResult>>)> done) {
  submit_events(std::move(events), false, std::move(done));
}

void ShardIntake::submit_events(std::vector<EventInput> events, bool from_inbox,
                                std::function<void(std::vector<Result<SubmitResult>>)> done) {
  // A turn takes at most max_batch_events of a batch (STYLE 5: bounded work per turn, and one
  // bounded WriteBatch per turn). A larger batch goes in parts: the next part is taken once the
  // part before it is durable (the ack of a part takes the next one, so the parts of a 100k-line
  // bulk request follow each other turn by turn, interleaved with the rest of the shard's work).
  // One answer, in input order, once the last part is durable. While the shard drains, what is
  // left is refused (shutting_down) at once: no part waits on a loop that is about to end.
  struct Parts {
    std::vector<EventInput> events;
    std::vector<Result<SubmitResult>> results;
    size_t next = 0;            // the first event not taken yet
    bool undurable = false;     // an event taken since the last durable point was accepted
    size_t part_first = 0;      // the first event of the part taken last (not durable yet)
    std::vector<size_t> valid;  // the part being looked up: indexes of well-formed events
    std::vector<Store::EventKeyRef> refs;
    bool from_inbox = false;       // drained from inboxes: never queued again
    std::vector<size_t> to_inbox;  // the part's events for partitions not served here
    std::vector<InboxPush> pushes;
    std::vector<uint64_t> push_hashes;  // the pushes' payload hashes (hashed once)
    uint32_t ops_left = 0;              // the part's lookup and inbox push outstanding
    // Cluster mode: the epoch each accepted event's partition was held at (0: none), to
    // withdraw the answer when the store fenced that write.
    std::vector<std::pair<Partition, uint64_t>> epochs;
    // Tracing on: the accepted events' intake spans (index, span), ended with the answer.
    std::vector<std::pair<size_t, trace::Span>> spans;
    std::function<void(std::vector<Result<SubmitResult>>)> done;
  };
  auto parts = std::make_shared<Parts>();
  parts->results.assign(events.size(), Result<SubmitResult>(SubmitResult{}));
  parts->events = std::move(events);
  parts->done = std::move(done);
  parts->from_inbox = from_inbox;

  // Takes the next part: one key lookup for its well-formed events (one MultiGet instead of a
  // lookup each; answered at once by a local store, on a later turn by a networked one), then
  // take_in for each. `self` is this lambda, for the next part.
  // The answer, once what it reports is durable. Cluster mode: an event whose write the store
  // fenced (the partition moved between intake and the write) is answered 503, never 202.
  auto answer = [this](Parts& p) {
    if (!p.epochs.empty()) {
      for (size_t i = 0; i < p.results.size(); ++i) {
        const auto [part, epoch] = p.epochs[i];
        if (epoch == 0 || !p.results[i].ok()) continue;
        if (core_.ownership.fenced(part, epoch)) {
          core_.metrics.intake_fenced.fetch_add(1, std::memory_order_relaxed);
          p.results[i] = not_owner_error();
        }
      }
    }
    // The intake spans end with the answer (docs/tracing.md): OK once durable, else ERROR.
    if (!p.spans.empty()) {
      const int64_t end = core_.loop->wall_now().ns();
      for (auto& [i, span] : p.spans) {
        span.end_unix_ns = end;
        if (p.results[i].ok()) {
          span.status = trace::SpanStatus::kOk;
        } else {
          span.status = trace::SpanStatus::kError;
          span.status_message = p.results[i].error().reason_or_code();
        }
        core_.options.tracer->emit(std::move(span));
      }
      p.spans.clear();
    }
    p.done(std::move(p.results));
  };
  auto take_parts = [this, answer](const auto& self, std::shared_ptr<Parts> p) -> void {
    const size_t part_max = std::max<size_t>(1, core_.options.max_batch_events);
    const size_t first = p->next;
    const size_t last = std::min(p->events.size(), first + part_max);
    p->next = last;
    p->part_first = first;
    p->valid.clear();
    p->refs.clear();
    p->to_inbox.clear();
    p->pushes.clear();
    p->push_hashes.clear();
    for (size_t i = first; i < last; ++i) {
      bool queue = false;
      if (auto c = check_event_input(p->events[i], p->from_inbox ? nullptr : &queue); !c.ok()) {
        p->results[i] = c.error();
        continue;
      }
      if (queue) {
        // Its message id is given now, so the 202 names it; the owner keeps it (core/inbox.h).
        p->events[i].message_id = core_.new_message_id(core_.loop->wall_now());
        p->to_inbox.push_back(i);
        p->pushes.push_back({&p->events[i], payload_hash(p->events[i].payload)});
        p->push_hashes.push_back(p->pushes.back().payload_hash);
        continue;
      }
      p->valid.push_back(i);
      p->refs.push_back({p->events[i].tenant, p->events[i].id, p->from_inbox});
    }
    // After this part: the next one (at once while draining, else once this one is durable),
    // or the answer.
    // The write of the part taken last cannot be confirmed (docs/operations.md "Disk full,
    // read-only and failed syncs"): its events and those not taken yet are answered `e`
    // (503), the earlier parts' answers stand (they are durable).
    auto lost = [p, answer](const Error& e) {
      for (size_t i = p->part_first; i < p->results.size(); ++i) {
        if (p->results[i].ok()) p->results[i] = e;
      }
      answer(*p);
    };
    auto after = [this, self, p, answer, lost] {
      if (p->next < p->events.size()) {
        if (core_.draining) return self(self, p);  // no part waits on a loop that is about to end
        // This part is committed at the end of the turn; the next one is taken once durable.
        p->undurable = false;
        core_.after_durable([self, p]() mutable { self(self, std::move(p)); }, lost);
        core_.loop->wake();  // taken inside an ack: make the next turn commit it without waiting
        return;
      }
      // The last part. Earlier parts are durable already. Refusals only: final at once.
      // Otherwise the answer waits until this turn's commit is durable (a duplicate's original
      // may not be durable yet either).
      if (!p->undurable) return answer(*p);
      core_.after_durable([p, answer]() mutable { answer(*p); }, lost);
    };
    if (p->valid.empty() && p->to_inbox.empty()) return after();
    p->ops_left = (p->valid.empty() ? 0 : 1) + (p->to_inbox.empty() ? 0 : 1);
    if (!p->to_inbox.empty()) {
      // Cluster mode: events of partitions another node owns (or none does now) are queued in
      // their partitions' inboxes; each answer is final once the inbox confirmed it.
      ++inbox_pushes_;
      core_.options.inbox->push(
          std::move(p->pushes), core_.poster,
          [this, p, after](std::vector<Result<InboxAnswer>> answers) {
            --inbox_pushes_;
            for (size_t k = 0; k < p->to_inbox.size(); ++k) {
              const size_t i = p->to_inbox[k];
              const uint64_t hash = p->push_hashes[k];
              if (k >= answers.size() || !answers[k].ok()) {
                p->results[i] = k < answers.size() ? answers[k].error()
                                                   : make_error(Errc::kInternal, "no answer");
                continue;
              }
              const InboxAnswer& a = *answers[k];
              using K = InboxAnswer::Kind;
              if (a.kind == K::kUnknownTenant) {
                core_.metrics.events_rejected.fetch_add(1, std::memory_order_relaxed);
                p->results[i] = unknown_tenant();
              } else if (a.kind != K::kQueued && a.payload_hash != hash) {
                core_.metrics.events_conflict.fetch_add(1, std::memory_order_relaxed);
                p->results[i] = make_error(
                    Errc::kConflict, "an event with this id was accepted with another payload",
                    "id", "conflict");
              } else if (a.kind == K::kQueued) {
                core_.metrics.inbox_queued.fetch_add(1, std::memory_order_relaxed);
                p->results[i] = SubmitResult{SubmitResult::Kind::kAccepted, 0, 0, true,
                                             message_id_bits(p->events[i].message_id)};
              } else if (a.kind == K::kAlreadyQueued) {
                core_.metrics.events_duplicate.fetch_add(1, std::memory_order_relaxed);
                p->results[i] =
                    SubmitResult{SubmitResult::Kind::kDuplicate, 0, 0, true, a.stored.message};
              } else {
                core_.metrics.events_duplicate.fetch_add(1, std::memory_order_relaxed);
                p->results[i] = SubmitResult{SubmitResult::Kind::kDuplicate, a.stored.seq,
                                             a.stored.deliveries, false, a.stored.message};
              }
            }
            if (--p->ops_left == 0) after();
          });
    }
    if (p->valid.empty()) return;
    const uint64_t gen = begin_lookup();
    core_.store.find_event_keys_async(
        p->refs, core_.poster,
        [this, p, gen, after](Result<std::vector<std::optional<EventKeyRecord>>> stored) {
          if (!stored.ok()) core_.metrics.store_errors.fetch_add(1, std::memory_order_relaxed);
          if (stored.ok() && stored->size() != p->valid.size()) {
            stored = make_error(Errc::kInternal, "the store answered another number of keys");
          }
          for (size_t k = 0; k < p->valid.size(); ++k) {
            const size_t i = p->valid[k];
            const Partition part = partition_of(p->events[i].tenant);
            std::optional<trace::Span> span;
            p->results[i] = stored.ok() ? take_in(p->events[i], (*stored)[k],
                                                  core_.options.tracer ? &span : nullptr)
                                        : Result<SubmitResult>(stored.error());
            if (span) {
              // Drained from an inbox: another node answered the producer (kind INTERNAL).
              if (p->from_inbox) span->kind = trace::SpanKind::kInternal;
              p->spans.emplace_back(i, std::move(*span));
            }
            p->undurable = p->undurable || p->results[i].ok();
            if (p->results[i].ok()) {
              if (const uint64_t epoch = core_.ownership.intake_epoch(part); epoch != 0) {
                if (p->epochs.empty()) p->epochs.assign(p->events.size(), {Partition{0}, 0});
                p->epochs[i] = {part, epoch};
              }
            }
          }
          end_lookup(gen);
          if (--p->ops_left == 0) after();
        });
  };
  take_parts(take_parts, std::move(parts));
}

const Event* ShardIntake::turn_event(EventSeq seq) {
  const Mutations& mutations = core_.mutations();
  if (mutations.events.empty()) return nullptr;
  if (turn_event_index_.size() != mutations.events.size()) {
    turn_event_index_.clear();
    for (const Event& e : mutations.events) turn_event_index_.emplace(e.seq, &e);
  }
  auto it = turn_event_index_.find(seq);
  return it == turn_event_index_.end() ? nullptr : it->second;
}

uint64_t ShardIntake::begin_lookup() {
  ++lookups_by_gen_[commit_gen_];
  return commit_gen_;
}

void ShardIntake::end_lookup(uint64_t gen) {
  auto it = lookups_by_gen_.find(gen);
  if (it != lookups_by_gen_.end() && --it->second == 0) lookups_by_gen_.erase(it);
  prune_settling();
}

// A settling key committed in generation g is visible to every lookup issued after g.
void ShardIntake::prune_settling() {
  if (settling_order_.empty()) return;
  const uint64_t oldest = lookups_by_gen_.empty() ? UINT64_MAX : lookups_by_gen_.begin()->first;
  while (!settling_order_.empty() && settling_order_.front().first <= oldest) {
    settling_.erase(settling_order_.front().second);
    settling_order_.pop_front();
  }
}

// The payloads to cache, and the keys a lookup still outstanding may not see.
void ShardIntake::on_written(Mutations& m) {
  for (size_t i : cache_after_commit_) {
    core_.payloads.put(std::make_shared<const Event>(std::move(m.events[i])));
  }
  ++commit_gen_;
  if (!lookups_by_gen_.empty()) {
    for (auto& [key, rec] : turn_events_) {
      settling_order_.emplace_back(commit_gen_, key);
      settling_[key] = rec;
    }
  }
  turn_events_.clear();
  turn_event_index_.clear();
}

void ShardIntake::after_commit(bool dropped) {
  if (dropped) {
    turn_events_.clear();
    turn_event_index_.clear();
  }
  cache_after_commit_.clear();
}

}  // namespace ringcast::engine
