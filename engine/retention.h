// The store's retention (SPEC R10.1) on a thread of its own: a pass at start, then one every
// `interval`, so a long pass never delays the thread that takes the daemon's signals. stop()
// ends a running pass between chunks (Retention::run_retention's stop check, core/store.h) and
// joins: a shutdown waits for at most one chunk. Counters for /metrics.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "core/result.h"
#include "core/store.h"
#include "core/time.h"

namespace ringcast::engine {

class RetentionThread {
 public:
  // One pass; `stop` answers true once the pass should end (between chunks).
  using Pass = std::function<Result<RetentionStats>(const std::function<bool()>& stop)>;

  RetentionThread(Pass pass, Duration interval);
  ~RetentionThread();  // stop()
  RetentionThread(const RetentionThread&) = delete;
  RetentionThread& operator=(const RetentionThread&) = delete;

  void start();
  // Ends a running pass at its next chunk, cancels the wait for the next one, joins. Idempotent.
  void stop();

  uint64_t passes() const { return passes_.load(std::memory_order_relaxed); }  // ended, any way
  // Prometheus text: passes by outcome, what they deleted.
  std::string metrics_text() const;

 private:
  void thread_main();

  Pass pass_;
  Duration interval_;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> passes_{0}, done_{0}, failed_{0}, stopped_{0};
  std::atomic<uint64_t> deliveries_{0}, events_{0}, notifications_{0}, segments_{0};
};

}  // namespace ringcast::engine
