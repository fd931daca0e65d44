#include "trace/tracer.h"

#include <algorithm>
#include <utility>

#include "core/classify.h"
#include "core/trace_context.h"
#include "log/log.h"
#include "net/loop.h"
#include "net/loop_thread.h"

namespace ringcast::trace {

class Tracer::Op final : public SendOp {
 public:
  explicit Op(Tracer& owner) : owner_(owner) {}
  void on_complete() override { owner_.completed(this); }

 private:
  Tracer& owner_;
};

Tracer::Tracer(TracerOptions options) : options_(std::move(options)) {}

Result<std::unique_ptr<Tracer>> Tracer::start(TracerOptions options) {
  if (options.queue_max == 0 || options.batch_max == 0 || options.url.empty())
    return make_error(Errc::kInvalidArgument, "tracer: url, queue_max and batch_max must be set");
  std::unique_ptr<Tracer> t(new Tracer(std::move(options)));
  Tracer* self = t.get();
  // The loop and the transport are made (and used) on the exporter's own thread.
  auto started = net::start_loop_thread(
      t->thread_, "rc-tracer", [self] { return self->init(); }, [self] { self->run(); });
  if (!started.ok()) return started.error();
  return t;
}

Tracer::~Tracer() {
  stop();
}

bool Tracer::ratio_sampled_(const TraceId& trace) const {
  return ratio_sampled(trace, options_.sample_ratio);
}

void Tracer::emit(Span&& span) {
  bool wake = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!accepting_ || queue_.size() >= options_.queue_max) {
      metrics_.dropped.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    queue_.push_back(std::move(span));
    // A full batch goes at once; smaller ones wait for the thread's next flush (batch_delay).
    wake = queue_.size() == options_.batch_max;
  }
  if (wake) loop_->wake();
}

void Tracer::count_dropped(uint64_t n) {
  metrics_.dropped.fetch_add(n, std::memory_order_relaxed);
}

void Tracer::stop() {
  if (!thread_.joinable()) return;
  stop_requested_.store(true, std::memory_order_release);
  loop_->wake();
  thread_.join();
}

Result<void> Tracer::init() {
  auto loop = net::Loop::create({});
  if (!loop.ok()) return loop.error();
  loop_ = std::move(*loop);
  loop_->refresh_now();
  auto transport = net::HttpTransport::create(*loop_, options_.transport, options_.resolver);
  if (!transport.ok()) return transport.error();
  transport_ = std::move(*transport);
  next_flush_ = loop_->now() + options_.batch_delay;
  return ok();
}

void Tracer::run() {
  bool draining = false;
  MonoTime drain_deadline;
  for (;;) {
    Duration wait = next_wait();
    if (draining) wait = std::max(Duration(0), std::min(wait, drain_deadline - loop_->now()));
    loop_->run_once(wait);
    if (!draining && stop_requested_.load(std::memory_order_acquire)) {
      draining = true;
      drain_deadline = loop_->now() + options_.stop_drain;
      std::lock_guard<std::mutex> lock(mu_);
      accepting_ = false;
    }
    maybe_send(draining);
    if (!draining) continue;
    bool queued = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      queued = !queue_.empty();
    }
    if ((!in_flight_ && batch_.empty() && !queued) || loop_->now() >= drain_deadline) break;
  }
  // What is left is dropped: the batch waiting to be sent again, what is queued, and the batch
  // on the wire as the transport cancels it.
  uint64_t left = batch_.size();
  {
    std::lock_guard<std::mutex> lock(mu_);
    left += queue_.size();
    queue_.clear();
  }
  metrics_.dropped.fetch_add(left, std::memory_order_relaxed);
  batch_.clear();
  discarding_ = true;
  transport_.reset();  // completes the op still in flight (network_ECANCELED), on this thread
  in_flight_.reset();
  // loop_ stays until ~Tracer: emit() and stop() may still wake it.
}

// Sends the batch waiting to go again once its pause is over, else takes the next batch from the
// queue: at once when batch_max spans wait, else at the flush time (batch_delay after the last
// one). While draining nothing waits: what is left goes out, each batch once.
void Tracer::maybe_send(bool draining) {
  if (in_flight_) return;
  const MonoTime now = loop_->now();
  if (!batch_.empty()) {
    if (draining && tries_ > 0 && now < retry_at_) return drop_batch("the daemon is stopping");
    if (now >= retry_at_) send();
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (queue_.empty()) return;
    if (queue_.size() < options_.batch_max && now < next_flush_ && !draining) return;
    const size_t n = std::min(queue_.size(), options_.batch_max);
    batch_.reserve(n);
    for (size_t i = 0; i < n; ++i) {
      batch_.push_back(std::move(queue_.front()));
      queue_.pop_front();
    }
  }
  next_flush_ = now + options_.batch_delay;
  body_ = encode_otlp_json(options_.resource, batch_.data(), batch_.size());
  tries_ = 0;
  send();
}

void Tracer::send() {
  auto op = std::make_unique<Op>(*this);
  ++tries_;
  op->request.attempt = static_cast<uint16_t>(std::min<size_t>(tries_, 0xffff));
  op->request.message_id = "otlp_";  // built by appends (GCC 12: no false -Wrestrict)
  op->request.message_id += std::to_string(++posts_);
  op->request.url = options_.url;
  op->request.profile = SignatureProfile::kStandard;  // no secret: no signature header
  op->request.body = body_;
  Op* raw = op.get();
  in_flight_ = std::move(op);
  transport_->send(raw);  // completes later on this thread, never inside send()
}

void Tracer::drop_batch(const std::string& why) {
  metrics_.dropped.fetch_add(batch_.size(), std::memory_order_relaxed);
  log::warn("trace_spans_dropped",
            {{"spans", static_cast<uint64_t>(batch_.size())}, {"reason", why}},
            "tracing: {} spans dropped: {}", batch_.size(), why);
  batch_.clear();
  body_.clear();
  tries_ = 0;
}

void Tracer::completed(Op* op) {
  if (in_flight_.get() != op) return;  // cannot happen: one op at a time
  std::unique_ptr<Op> done = std::move(in_flight_);
  metrics_.batches.fetch_add(1, std::memory_order_relaxed);
  if (discarding_) return;  // counted as dropped by run()
  const TransportResult& r = done->result;
  const MonoTime now = loop_->now();
  if (r.deferred != DeferReason::kNone) {
    // Not sent (our own back-pressure): no try spent, again once the transport says.
    --tries_;
    retry_at_ = now + std::max(Duration(0), r.not_before - loop_->wall_now());
    return;
  }
  if (r.response_received && r.http_status >= 200 && r.http_status < 300) {
    metrics_.exported.fetch_add(batch_.size(), std::memory_order_relaxed);
    batch_.clear();
    body_.clear();
    tries_ = 0;
    return;
  }
  const Classification c = classify(r, loop_->wall_now());
  const std::string code = c.code.is_none() ? std::string("unknown") : c.code.str();
  const uint16_t st = r.response_received ? r.http_status : 0;
  // A busy or briefly unreachable collector is asked again a little; a refusal (another 4xx or
  // 5xx, a URL or address the transport refuses) never changes by asking again.
  const bool again = r.response_received ? (st == 429 || st == 502 || st == 503 || st == 504)
                                         : !is_config_refusal(c.code);
  if (!again || tries_ > options_.retry_pauses.size()) {
    std::string why = "the collector at tracing.endpoint answered ";
    why += code;
    return drop_batch(why);
  }
  Duration pause = options_.retry_pauses[tries_ - 1];
  if (c.retry_after) pause = std::max(pause, std::min(*c.retry_after, options_.retry_after_max));
  retry_at_ = now + pause;
}

Duration Tracer::next_wait() const {
  const Duration idle = milliseconds(100);
  if (in_flight_) return idle;  // its completion wakes the loop
  const MonoTime now = loop_->now();
  MonoTime due = now + idle;
  if (!batch_.empty()) {
    due = std::min(due, retry_at_);
  } else {
    std::lock_guard<std::mutex> lock(mu_);
    if (!queue_.empty()) due = std::min(due, next_flush_);
  }
  return std::max(Duration(0), due - now);
}

}  // namespace ringcast::trace
