#include "engine/notifier.h"

#include <pthread.h>

#include <algorithm>
#include <cstdio>

#include "core/classify.h"
#include "log/log.h"
#include "net/json_writer.h"
#include "net/loop.h"
#include "views/records.h"

namespace ringcast::engine {

struct Notifier::Item {
  uint64_t order = 0;  // arrival order: the oldest is dropped first when the queue is full
  Notification note;
  std::string body;
  uint16_t attempts = 0;  // attempts made so far
  MonoTime next_at;       // due time of the next attempt
};

class Notifier::Op final : public SendOp {
 public:
  Op(Notifier& owner, std::unique_ptr<Item> item) : owner_(owner), item(std::move(item)) {}
  void on_complete() override { owner_.completed(this); }

 private:
  Notifier& owner_;

 public:
  std::unique_ptr<Item> item;
};

std::string notification_json(const Notification& n) {
  net::JsonWriter w;
  w.begin_object();
  w.field("type", "ringcast.notification");
  views::write_notification_fields(w, n);
  w.end_object();
  return w.take();
}

std::string notification_message_id(const Notification& n) {
  return "ntf_" + std::to_string(n.seq);
}

Notifier::Notifier(NotifierOptions options) : options_(std::move(options)) {}

Result<std::unique_ptr<Notifier>> Notifier::start(NotifierOptions options) {
  if (options.queue_max == 0 || options.max_in_flight == 0)
    return make_error(Errc::kInvalidArgument, "notifier: queue_max and max_in_flight must be > 0");
  std::unique_ptr<Notifier> n(new Notifier(std::move(options)));
  std::promise<Result<void>> started;
  auto fut = started.get_future();
  n->thread_ = std::thread(&Notifier::thread_main, n.get(), std::move(started));
  Result<void> r = fut.get();
  if (!r.ok()) {
    n->thread_.join();
    return r.error();
  }
  return n;
}

Notifier::~Notifier() {
  stop();
}

void Notifier::enqueue(const Notification& n) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!accepting_) {
      metrics_.dropped.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    if (queue_.size() >= options_.queue_max) {
      queue_.pop_front();
      metrics_.dropped.fetch_add(1, std::memory_order_relaxed);
    }
    queue_.push_back(n);
  }
  loop_->wake();
}

void Notifier::stop() {
  if (!thread_.joinable()) return;
  stop_requested_.store(true, std::memory_order_release);
  loop_->wake();
  thread_.join();
}

NotifierStats Notifier::stats() const {
  NotifierStats s;
  s.delivered = metrics_.delivered.load(std::memory_order_relaxed);
  s.failed = metrics_.failed.load(std::memory_order_relaxed);
  s.dropped = metrics_.dropped.load(std::memory_order_relaxed);
  s.attempts = attempts_.load(std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(mu_);
  s.queued = queue_.size() + held_.load(std::memory_order_relaxed);
  s.last_error = last_error_;
  return s;
}

void Notifier::thread_main(std::promise<Result<void>> started) {
  ::pthread_setname_np(::pthread_self(), "rc-notifier");
  auto loop = net::Loop::create({});
  if (!loop.ok()) {
    started.set_value(loop.error());
    return;
  }
  loop_ = std::move(*loop);
  loop_->refresh_now();
  auto transport = net::HttpTransport::create(*loop_, options_.transport, options_.resolver);
  if (!transport.ok()) {
    started.set_value(transport.error());
    return;
  }
  transport_ = std::move(*transport);
  started.set_value(ok());

  bool draining = false;
  MonoTime drain_deadline;
  for (;;) {
    Duration wait = next_wait();
    if (draining) wait = std::max(Duration(0), std::min(wait, drain_deadline - loop_->now()));
    loop_->run_once(wait);
    take_queue();
    if (!draining && stop_requested_.load(std::memory_order_acquire)) {
      draining = true;
      drain_deadline = loop_->now() + options_.stop_drain;
      std::lock_guard<std::mutex> lock(mu_);
      accepting_ = false;
    }
    if (draining) take_queue();  // whatever came in before accepting_ turned false
    launch_due();
    if (draining && ((in_flight_.empty() && !work_due_before(drain_deadline)) ||
                     loop_->now() >= drain_deadline)) {
      break;
    }
  }
  // What is left is dropped: waiting items now, in-flight ones as the transport cancels them.
  metrics_.dropped.fetch_add(waiting_.size(), std::memory_order_relaxed);
  held_.fetch_sub(waiting_.size(), std::memory_order_relaxed);
  waiting_.clear();
  discarding_ = true;
  transport_.reset();  // completes every op still in flight (network_ECANCELED), on this thread
  in_flight_.clear();
  // loop_ stays until ~Notifier: enqueue() and stop() may still wake it.
}

void Notifier::take_queue() {
  std::deque<Notification> got;
  {
    std::lock_guard<std::mutex> lock(mu_);
    got.swap(queue_);
    held_.fetch_add(got.size(), std::memory_order_relaxed);
  }
  if (got.empty()) return;
  MonoTime now = loop_->now();
  for (Notification& n : got) {
    auto item = std::make_unique<Item>();
    item->order = next_order_++;
    item->body = notification_json(n);
    item->note = std::move(n);
    item->next_at = now;
    waiting_.push_back(std::move(item));
  }
  // The bound covers everything the thread holds: drop the oldest waiting ones beyond it.
  while (!waiting_.empty() && waiting_.size() + in_flight_.size() > options_.queue_max) {
    waiting_.erase(waiting_.begin());
    held_.fetch_sub(1, std::memory_order_relaxed);
    metrics_.dropped.fetch_add(1, std::memory_order_relaxed);
  }
}

void Notifier::launch_due() {
  MonoTime now = loop_->now();
  for (size_t i = 0; i < waiting_.size() && in_flight_.size() < options_.max_in_flight;) {
    if (waiting_[i]->next_at <= now) {
      std::unique_ptr<Item> item = std::move(waiting_[i]);
      waiting_.erase(waiting_.begin() + static_cast<ptrdiff_t>(i));
      launch(std::move(item));
    } else {
      ++i;
    }
  }
}

void Notifier::launch(std::unique_ptr<Item> item) {
  auto op = std::make_unique<Op>(*this, std::move(item));
  Item& it = *op->item;
  it.attempts++;
  op->request.attempt = it.attempts;
  op->request.message_id = notification_message_id(it.note);
  op->request.url = options_.url;
  op->request.profile = SignatureProfile::kStandard;  // SPEC R11.2
  if (!options_.secret.empty()) op->request.secrets = {options_.secret};
  op->request.body = it.body;
  Op* raw = op.get();
  in_flight_.push_back(std::move(op));
  transport_->send(raw);  // completes later on this thread, never inside send()
}

void Notifier::completed(Op* op) {
  auto pos = std::find_if(in_flight_.begin(), in_flight_.end(),
                          [op](const std::unique_ptr<Op>& p) { return p.get() == op; });
  if (pos == in_flight_.end()) return;  // cannot happen: every op sent is in in_flight_
  std::unique_ptr<Op> owned = std::move(*pos);
  in_flight_.erase(pos);
  attempts_.fetch_add(1, std::memory_order_relaxed);
  if (discarding_) {
    held_.fetch_sub(1, std::memory_order_relaxed);
    metrics_.dropped.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  Classification c = classify(owned->result, loop_->wall_now());
  if (c.outcome == Outcome::kSuccess) {
    held_.fetch_sub(1, std::memory_order_relaxed);
    metrics_.delivered.fetch_add(1, std::memory_order_relaxed);
    if (options_.on_finished) options_.on_finished(owned->item->note);
    return;
  }
  std::string code = c.code.is_none() ? std::string("unknown") : c.code.str();
  {
    std::lock_guard<std::mutex> lock(mu_);
    last_error_ = code;
  }
  std::unique_ptr<Item> item = std::move(owned->item);
  // Terminal: a 4xx other than 429 (the operator's receiver refuses it: a bad signature, no
  // such path), a refused URL or private address (our own configuration refuses it; a retry
  // cannot change that), or the ladder is used up.
  const size_t pause_index = item->attempts - 1u;
  if (c.outcome == Outcome::kRejected || is_config_refusal(c.code) ||
      pause_index >= options_.retry_ladder.size()) {
    held_.fetch_sub(1, std::memory_order_relaxed);
    metrics_.failed.fetch_add(1, std::memory_order_relaxed);
    log::error("notification_failed",
               {{"tenant", item->note.tenant},
                {"notification", notification_message_id(item->note)},
                {"code", code}},
               "notification {} to the operator webhook failed: {}",
               notification_message_id(item->note).c_str(), code.c_str());
    if (options_.on_finished) options_.on_finished(item->note);
    return;
  }
  Duration pause = options_.retry_ladder[pause_index];
  if (c.retry_after && *c.retry_after > pause) pause = *c.retry_after;  // SPEC R7.2
  item->next_at = loop_->now() + pause;
  auto at = std::lower_bound(
      waiting_.begin(), waiting_.end(), item->order,
      [](const std::unique_ptr<Item>& a, uint64_t order) { return a->order < order; });
  waiting_.insert(at, std::move(item));
}

Duration Notifier::next_wait() const {
  Duration wait = milliseconds(100);
  if (in_flight_.size() >= options_.max_in_flight) return wait;  // completions wake the loop
  MonoTime now = loop_->now();
  for (const auto& it : waiting_) {
    Duration until = it->next_at - now;
    if (until < wait) wait = until;
  }
  return std::max(wait, Duration(0));
}

bool Notifier::work_due_before(MonoTime deadline) const {
  for (const auto& it : waiting_) {
    if (it->next_at <= deadline) return true;
  }
  return false;
}

}  // namespace ringcast::engine
