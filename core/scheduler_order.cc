// Ordered delivery (SPEC R13, docs/operations.md "Ordered delivery"): a delivery with an order
// key (Delivery::order_key(), set at fan-out from the endpoint's `ordering`) is the head of its
// (endpoint, key) — routed like any other: wheel, ready queue, in flight — or waits behind the
// head in the key's list (core/order_keys.h), in acceptance order. When the head ends the next
// one becomes the head; with on_head_failure = block, a head that ends failed, dead or unknown
// holds the key until it is resent or resolved. With `supersede`, a new delivery that joins a
// backlog ends the older waiting ones (and a head that never had an attempt) `superseded`.
// Keys never wait for each other: only a key's own head is ever due.
#include <algorithm>
#include <string>

#include "core/scheduler.h"
#include "core/scheduler_internal.h"

namespace ringcast {

// A delivery that is due (or will be): routed now, or into the wheel until its time.
void Scheduler::place(Pending* s, WallTime now, Mutations& m) {
  if (s->d.next_attempt_at > now) {
    schedule_at(s, s->d.next_attempt_at);
  } else {
    route(s, now, m);
  }
}

void Scheduler::unqueue(Pending* s) {
  if (!s->te.linked()) return;
  RC_CHECK(s->te.expiry_ms != kWaitMark);
  if (s->te.expiry_ms == kReadyMark) {
    ready_unlink(*ep_of(s->d.endpoint), s);
  } else {
    wheel_.cancel(&s->te);
  }
}

// A new delivery (is_new), or an ended one resent (rewrite), is written and placed: routed when
// it is unordered or the head of its key, else queued behind the key's head.
void Scheduler::enter(EpState& ep, Pending* s, WallTime now, Mutations& m, bool is_new,
                      bool rewrite) {
  auto write = [&] {
    put(s, is_new, m);
    if (rewrite) m.deliveries.back().rewrite = true;
  };
  const uint64_t ok = s->d.order_key();
  if (ok == 0 || s->d.test()) {
    write();
    return route(s, now, m);
  }
  const uint64_t id = OrderKeys::key_id(s->d.endpoint, ok);
  // R13.2: resending the head that holds its key lets the key go on (settle_key); the resent
  // one queues behind what waited.
  if (rewrite) settle_key(s->d, now, m);
  if (ep.cfg.supersede && order_keys_.find(id) != nullptr) supersede_backlog(id, s, now, m);
  OrderKeys::Key* k = order_keys_.find(id);
  const bool blocked = !blocked_.empty() && blocked_.count(id) != 0;  // rare: skip the hash
  if (k == nullptr || (k->head == nullptr && !blocked && k->tail == nullptr)) {
    if (k == nullptr) k = &order_keys_.insert(id);
    k->head = &s->te;
    write();
    return route(s, now, m);
  }
  // A blocked key's first waiting delivery carries the block through a restart.
  if (blocked && k->tail == nullptr) s->d.flags |= Delivery::kFlagKeyBlocked;
  write();
  s->te.expiry_ms = kWaitMark;
  OrderKeys::push_back(*k, &s->te);
  ++order_waiting_;
}

// R13.3: `by` joins the backlog of its key: every older waiting delivery ends superseded, and so
// does the head when it never had an attempt and is not on the wire.
void Scheduler::supersede_backlog(uint64_t key_id, const Pending* by, WallTime now, Mutations& m) {
  OrderKeys::Key* k = order_keys_.find(key_id);
  std::vector<Pending*> ended;
  while (TimerEntry* e = OrderKeys::pop_front(*k)) {
    --order_waiting_;
    ended.push_back(pending_of(e));
  }
  if (k->head != nullptr) {
    Pending* h = pending_of(k->head);
    if (h->d.status != DeliveryStatus::kInFlight && h->d.attempts == 0) {
      unqueue(h);
      k->head = nullptr;
      ended.push_back(h);
    }
  }
  if (ended.empty()) return;
  // The key is kept (a blocked one stays blocked); the caller places `by`.
  for (Pending* p : ended) {
    p->te.expiry_ms = 0;
    Attempt rec;
    rec.delivery = p->d.id;
    rec.number = kSupersededRecord;
    rec.outcome = Outcome::kRejected;
    rec.code = ErrorCode::of(K::kSuperseded);
    rec.started_at = now;
    rec.response_prefix = std::to_string(by->d.id);  // the delivery that replaced it
    m.attempts.push_back(std::move(rec));
    p->d.flags &= static_cast<uint8_t>(~Delivery::kFlagKeyBlocked);
    finish(p, DeliveryStatus::kSuperseded, ErrorCode::of(K::kSuperseded), m);
  }
}

// The head of a key ended as `st` (called by finish() after its record is written).
void Scheduler::order_ended(Pending* s, DeliveryStatus st, Mutations& m) {
  const uint64_t ok = s->d.order_key();
  if (ok == 0 || s->d.test()) return;
  const uint64_t id = OrderKeys::key_id(s->d.endpoint, ok);
  OrderKeys::Key* k = order_keys_.find(id);
  if (k == nullptr || k->head != &s->te) return;  // not its head (a waiting one ended)
  k->head = nullptr;
  const EpState* ep = ep_of(s->d.endpoint);
  const bool failed = st != DeliveryStatus::kDelivered && st != DeliveryStatus::kSuperseded;
  if (failed && ep != nullptr && ep->cfg.on_head_failure == OnHeadFailure::kBlock &&
      ep->cfg.state != EndpointState::kDisabled) {
    blocked_[id] = Blocked{s->d.id, now_, s->d.endpoint, ok};  // R13.2: held until resent/resolved
    if (TimerEntry* f = OrderKeys::front(*k)) {
      Pending* first = pending_of(f);
      first->d.flags |= Delivery::kFlagKeyBlocked;
      put(first, false, m);
    }
    return;
  }
  release_key(*k, id, now_, m);
}

// The key's next waiting delivery becomes its head and is routed; a key with none is forgotten.
void Scheduler::release_key(uint64_t key_id, WallTime now, Mutations& m) {
  if (OrderKeys::Key* k = order_keys_.find(key_id)) release_key(*k, key_id, now, m);
}

void Scheduler::release_key(OrderKeys::Key& key, uint64_t key_id, WallTime now, Mutations& m) {
  OrderKeys::Key* k = &key;
  TimerEntry* e = OrderKeys::pop_front(*k);
  if (e == nullptr) {
    if (k->head == nullptr) order_keys_.erase(key_id);
    return;
  }
  --order_waiting_;
  k->head = e;
  Pending* n = pending_of(e);
  n->te.expiry_ms = 0;
  if (n->d.flags & Delivery::kFlagKeyBlocked) {
    n->d.flags &= static_cast<uint8_t>(~Delivery::kFlagKeyBlocked);
    put(n, false, m);
  }
  place(n, now, m);  // nothing after may use k: route() can end n and move its key on
}

bool Scheduler::settle_key(const Delivery& d, WallTime now, Mutations& m) {
  const uint64_t ok = d.order_key();
  if (ok == 0 || d.test() || blocked_.empty()) return false;
  const uint64_t id = OrderKeys::key_id(d.endpoint, ok);
  auto b = blocked_.find(id);
  if (b == blocked_.end() || (b->second.by != d.id && b->second.by != 0)) return false;
  blocked_.erase(b);
  release_key(id, now, m);
  return true;
}

// Recovery (R13.4): the keys are rebuilt in acceptance order (a partition's ids are allocated in
// acceptance order) whatever order the store visits them in; a delivery flagged
// kFlagKeyBlocked holds its key as it was held before the restart.
void Scheduler::restore_ordered(Pending* s, WallTime now) {
  const uint64_t id = OrderKeys::key_id(s->d.endpoint, s->d.order_key());
  OrderKeys::Key* k = order_keys_.find(id);
  if (k == nullptr) k = &order_keys_.insert(id);
  auto older = [](TimerEntry* a, TimerEntry* b) {
    return pending_of(a)->d.id < pending_of(b)->d.id;
  };
  auto wait = [&](Pending* p) {
    p->te.expiry_ms = kWaitMark;
    OrderKeys::insert_sorted(*k, &p->te, older);
    ++order_waiting_;
  };
  if ((s->d.flags & Delivery::kFlagKeyBlocked) && blocked_.count(id) == 0) {
    blocked_[id] = Blocked{0, now, s->d.endpoint, s->d.order_key()};
    if (k->head != nullptr && pending_of(k->head)->d.status != DeliveryStatus::kInFlight) {
      Pending* h = pending_of(k->head);
      unqueue(h);
      k->head = nullptr;
      wait(h);
    }
  }
  if (blocked_.count(id) != 0 || (k->head != nullptr && pending_of(k->head)->d.id < s->d.id)) {
    return wait(s);
  }
  if (k->head != nullptr) {  // s is older than the head found so far: it leads
    Pending* h = pending_of(k->head);
    if (h->d.status == DeliveryStatus::kInFlight) return wait(s);
    unqueue(h);
    wait(h);
  }
  k->head = &s->te;
  schedule_at(s, std::max(s->d.next_attempt_at, now));
}

// s leaves its key's structure without releasing anything (its partition or endpoint is going).
void Scheduler::order_detach(Pending* s) {
  const uint64_t ok = s->d.order_key();
  if (ok == 0 || s->d.test()) return;
  const uint64_t id = OrderKeys::key_id(s->d.endpoint, ok);
  OrderKeys::Key* k = order_keys_.find(id);
  if (k == nullptr) return;
  if (s->te.linked() && s->te.expiry_ms == kWaitMark) {
    OrderKeys::unlink(*k, &s->te);
    s->te.expiry_ms = 0;
    --order_waiting_;
  } else if (k->head == &s->te) {
    k->head = nullptr;
  }
  if (k->head == nullptr && k->tail == nullptr && blocked_.count(id) == 0) order_keys_.erase(id);
}

// Blocks of the endpoint `endpoint` (when non-zero) or of the partitions in `ps` end; a key
// left with nothing is forgotten.
void Scheduler::order_drop_blocked(const PartitionSet* ps, EndpointId endpoint) {
  for (auto it = blocked_.begin(); it != blocked_.end();) {
    bool drop = it->second.endpoint == endpoint;
    if (ps != nullptr) {
      const EpState* ep = ep_of(it->second.endpoint);
      drop = ep == nullptr || ps->test(partition_of_hash(ep->tenant->hash));
    }
    if (!drop) {
      ++it;
      continue;
    }
    if (OrderKeys::Key* k = order_keys_.find(it->first);
        k != nullptr && k->head == nullptr && k->tail == nullptr) {
      order_keys_.erase(it->first);
    }
    it = blocked_.erase(it);
  }
}

// update_endpoint(): a change of `ordering` releases every delivery of the endpoint from its key
// (they are sent unordered; new ones follow the new setting); on_head_failure turned to skip
// releases the blocked keys.
void Scheduler::order_reset_endpoint(EpState& ep, const Endpoint& before, WallTime now,
                                     Mutations& m) {
  if (before.ordering != ep.cfg.ordering) {
    order_drop_blocked(nullptr, ep.cfg.id);
    std::vector<Pending*> waiting;
    for (const auto& chunk : chunks_) {
      for (uint32_t i = 0; i < opts_.slab_chunk_size; ++i) {
        Pending* s = &chunk[i];
        if (s->d.id == 0 || s->d.endpoint != ep.cfg.id || is_orphan(s) || s->d.test()) continue;
        if (s->d.order_key() == 0) continue;
        const bool was_waiting = s->te.linked() && s->te.expiry_ms == kWaitMark;
        order_detach(s);
        s->d.set_order_key(0);
        s->d.flags &= static_cast<uint8_t>(~Delivery::kFlagKeyBlocked);
        put(s, false, m);
        if (was_waiting) waiting.push_back(s);
      }
    }
    for (Pending* s : waiting) place(s, now, m);
    return;
  }
  if (before.on_head_failure == OnHeadFailure::kBlock &&
      ep.cfg.on_head_failure == OnHeadFailure::kSkip) {
    std::vector<uint64_t> ids;
    for (const auto& [id, b] : blocked_) {
      if (b.endpoint == ep.cfg.id) ids.push_back(id);
    }
    for (uint64_t id : ids) {
      blocked_.erase(id);
      release_key(id, now, m);
    }
  }
}

std::vector<OrderKeyView> Scheduler::order_keys_of(EndpointId endpoint, size_t limit) const {
  std::vector<OrderKeyView> out;
  order_keys_.for_each([&](const OrderKeys::Key& k) {
    if (out.size() >= limit) return;
    const TimerEntry* any = k.head != nullptr ? k.head : OrderKeys::front(k);
    auto b = blocked_.find(k.id);
    EndpointId ep = 0;
    if (any != nullptr) {
      ep = pending_of(const_cast<TimerEntry*>(any))->d.endpoint;
    } else if (b != blocked_.end()) {
      ep = b->second.endpoint;
    }
    if (ep != endpoint || (k.head != nullptr && k.tail == nullptr)) return;  // no backlog
    OrderKeyView v;
    if (any != nullptr) v.order_key = pending_of(const_cast<TimerEntry*>(any))->d.order_key();
    if (k.head != nullptr) {
      const Delivery& h = pending_of(k.head)->d;
      v.head = h.id;
      v.since = h.created_at;
    } else if (b != blocked_.end()) {
      v.order_key = b->second.order_key;
      v.blocked = true;
      v.blocked_by = b->second.by;
      v.since = b->second.since;
    }
    if (const TimerEntry* f = OrderKeys::front(k)) {
      v.first_waiting = pending_of(const_cast<TimerEntry*>(f))->d.id;
      const TimerEntry* e = f;
      do {
        ++v.waiting;
        e = e->next;
      } while (e != f && v.waiting < 1000000);
    }
    out.push_back(v);
  });
  return out;
}

}  // namespace ringcast
