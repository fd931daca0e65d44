// Cluster mode: the inboxes of the partitions held here (core/inbox.h, docs/cluster.md): polled,
// read, and drained through the normal intake; entries leave once what they became is durable.
#include "engine/shard.h"

#include <algorithm>

#include "log/log.h"

namespace ringcast::engine {

void Shard::poll_inboxes() {
  const MonoTime now = loop_->now();
  next_inbox_poll_ = now + options_.inbox_poll;
  if (store_.degraded()) return;  // what is drained could not be written now
  std::vector<std::pair<Partition, std::string>> after;
  for (const auto& [p, o] : leased_->held()) {
    if (o.releasing || o.inbox_busy) continue;
    after.emplace_back(p, o.inbox_cursor);
  }
  if (after.empty()) return;
  inbox_polling_ = true;
  ++inbox_ops_;
  // Every inbox now and then (a sweep: a ring can be lost, and what was queued before this
  // shard held a partition rang nobody's bell); between sweeps only the rung ones.
  if (now >= next_inbox_sweep_ || inbox_sweep_now_) {
    next_inbox_sweep_ = now + options_.inbox_poll * 20;
    inbox_sweep_now_ = false;
    return read_inboxes(std::move(after));
  }
  std::vector<Partition> mine;
  mine.reserve(after.size());
  for (const auto& a : after) mine.push_back(a.first);
  options_.inbox->take_rung(
      std::move(mine), poster_,
      [this, after = std::move(after)](Result<std::vector<Partition>> rung) mutable {
        if (!rung.ok() || rung->empty() || draining_) {
          --inbox_ops_;
          inbox_polling_ = false;
          return;
        }
        std::erase_if(after, [&](const auto& a) {
          return std::find(rung->begin(), rung->end(), a.first) == rung->end();
        });
        // The rung partitions are read even if their drain starts later: the ring is taken.
        for (auto& a : after) {
          if (auto it = leased_->held().find(a.first); it != leased_->held().end())
            a.second = it->second.inbox_cursor;
        }
        --inbox_ops_;
        inbox_polling_ = false;
        if (after.empty()) return;
        inbox_polling_ = true;
        ++inbox_ops_;
        read_inboxes(std::move(after));
      });
}

void Shard::read_inboxes(std::vector<std::pair<Partition, std::string>> after) {
  std::vector<uint64_t> epochs;
  epochs.reserve(after.size());
  for (const auto& a : after) {
    auto it = leased_->held().find(a.first);
    epochs.push_back(it == leased_->held().end() ? 0 : it->second.epoch);
  }
  const size_t max_each = std::clamp<size_t>(options_.max_batch_events, 1, 1000);
  options_.inbox->read(
      std::move(after), max_each, poster_,
      [this, epochs = std::move(epochs), max_each](Result<std::vector<InboxRead>> r) {
        --inbox_ops_;
        inbox_polling_ = false;
        if (!r.ok()) inbox_sweep_now_ = true;  // the rings taken for it are gone: read them all
        if (!r.ok() || draining_) return;
        for (size_t i = 0; i < r->size() && i < epochs.size(); ++i) {
          InboxRead& read = (*r)[i];
          if (read.entries.empty()) continue;
          const bool full = read.entries.size() >= max_each;
          drain_inbox(read.p, epochs[i], std::move(read.entries), full);
        }
      });
}

void Shard::drain_inbox(Partition p, uint64_t epoch, std::vector<InboxEntry> entries, bool full) {
  auto it = leased_->held().find(p);
  if (it == leased_->held().end() || it->second.epoch != epoch || it->second.releasing) return;
  it->second.inbox_busy = true;
  std::vector<EventInput> events;
  std::vector<std::string> ids;
  events.reserve(entries.size());
  ids.reserve(entries.size());
  for (InboxEntry& e : entries) {
    ids.push_back(std::move(e.id));
    events.push_back(std::move(e.event));
  }
  std::vector<std::string> fields;
  fields.reserve(events.size());
  for (const EventInput& e : events) {
    std::string f = e.tenant;
    f.push_back('\0');
    f += e.id;
    fields.push_back(std::move(f));
  }
  const std::string from = it->second.inbox_cursor;
  // Answered once what the events became is durable (and not fenced: a fenced write is
  // answered not_owner). Entries whose answer is final leave the inbox; the first one that
  // could not be taken in now (the store, p's ownership) and those after it stay for the next poll.
  submit_events(std::move(events), true,
                [this, p, epoch, full, from, ids = std::move(ids),
                 fields = std::move(fields)](std::vector<Result<SubmitResult>> rs) mutable {
                  std::vector<std::string> ack_ids, ack_fields;
                  std::string cursor = from;
                  bool stopped = false;
                  for (size_t k = 0; k < rs.size() && k < ids.size(); ++k) {
                    const Result<SubmitResult>& r = rs[k];
                    if (!r.ok()) {
                      const Error& e = r.error();
                      const bool final = e.code == Errc::kConflict || e.code == Errc::kNotFound ||
                                         e.code == Errc::kInvalidArgument;
                      if (!final) {
                        stopped = true;
                        break;
                      }
                      metrics_.inbox_dropped.fetch_add(1, std::memory_order_relaxed);
                      log::warn("shard {}: partition {}: queued event dropped ({}): {}", index_,
                                static_cast<unsigned>(p), e.reason_or_code(),
                                e.message ? e.message : "");
                    } else {
                      metrics_.inbox_drained.fetch_add(1, std::memory_order_relaxed);
                    }
                    ack_ids.push_back(std::move(ids[k]));
                    ack_fields.push_back(std::move(fields[k]));
                    cursor = ack_ids.back();
                  }
                  if (!ack_ids.empty())
                    options_.inbox->ack(p, std::move(ack_ids), std::move(ack_fields));
                  auto it = leased_->held().find(p);
                  if (it == leased_->held().end() || it->second.epoch != epoch) return;
                  it->second.inbox_busy = false;
                  it->second.inbox_cursor = std::move(cursor);
                  // More waiting (a full read), or some left for later (a transient error): read
                  // every inbox at the next poll — at once after a full read — since no ring says
                  // so.
                  if (full || stopped) inbox_sweep_now_ = true;
                  if (full && !stopped) next_inbox_poll_ = loop_->now();
                });
}

}  // namespace ringcast::engine
