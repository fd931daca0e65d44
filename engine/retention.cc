#include "engine/retention.h"
#include "log/log.h"

#include <chrono>
#include <cstdio>
#include <utility>

namespace ringcast::engine {

RetentionThread::RetentionThread(Pass pass, Duration interval)
    : pass_(std::move(pass)), interval_(interval) {}

RetentionThread::~RetentionThread() {
  stop();
}

void RetentionThread::start() {
  if (thread_.joinable() || stop_.load()) return;
  thread_ = std::thread([this] { thread_main(); });
}

void RetentionThread::stop() {
  {
    std::lock_guard lock(mu_);
    stop_.store(true, std::memory_order_release);
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void RetentionThread::thread_main() {
  const std::function<bool()> stopping = [this] { return stop_.load(std::memory_order_acquire); };
  for (;;) {
    auto r = pass_(stopping);
    if (!r.ok()) {
      failed_.fetch_add(1, std::memory_order_relaxed);
      log::warn("retention_failed", {{"error", r.error().message}}, "retention: {}",
                r.error().message);
    } else {
      deliveries_.fetch_add(r->deliveries, std::memory_order_relaxed);
      events_.fetch_add(r->events, std::memory_order_relaxed);
      notifications_.fetch_add(r->notifications, std::memory_order_relaxed);
      segments_.fetch_add(r->payload_segments, std::memory_order_relaxed);
      (r->stopped ? stopped_ : done_).fetch_add(1, std::memory_order_relaxed);
    }
    passes_.fetch_add(1, std::memory_order_relaxed);
    std::unique_lock lock(mu_);
    if (cv_.wait_for(lock, interval_, [this] { return stop_.load(std::memory_order_acquire); }))
      return;
  }
}

std::string RetentionThread::metrics_text() const {
  auto row = [](std::string& out, const char* name, const char* label, uint64_t v) {
    out += name;
    out += label;
    out += ' ';
    out += std::to_string(v);
    out += '\n';
  };
  std::string out =
      "# HELP ringcast_retention_passes_total Retention passes (SPEC R10.1) by outcome: done, "
      "stopped at shutdown between chunks, failed.\n"
      "# TYPE ringcast_retention_passes_total counter\n";
  row(out, "ringcast_retention_passes_total", "{outcome=\"done\"}",
      done_.load(std::memory_order_relaxed));
  row(out, "ringcast_retention_passes_total", "{outcome=\"stopped\"}",
      stopped_.load(std::memory_order_relaxed));
  row(out, "ringcast_retention_passes_total", "{outcome=\"failed\"}",
      failed_.load(std::memory_order_relaxed));
  out +=
      "# HELP ringcast_retention_deleted_total What retention removed: terminal deliveries, "
      "events, notifications, payload log segments.\n"
      "# TYPE ringcast_retention_deleted_total counter\n";
  row(out, "ringcast_retention_deleted_total", "{kind=\"deliveries\"}",
      deliveries_.load(std::memory_order_relaxed));
  row(out, "ringcast_retention_deleted_total", "{kind=\"events\"}",
      events_.load(std::memory_order_relaxed));
  row(out, "ringcast_retention_deleted_total", "{kind=\"notifications\"}",
      notifications_.load(std::memory_order_relaxed));
  row(out, "ringcast_retention_deleted_total", "{kind=\"payload_segments\"}",
      segments_.load(std::memory_order_relaxed));
  return out;
}

}  // namespace ringcast::engine
