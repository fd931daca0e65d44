// A Store whose asynchronous lookups answer late, the way a networked store (cluster mode,
// docs/cluster.md) does: the read runs when the call is made ("on the server", against what was
// written so far) and its answer arrives through the caller's Poster `delay` later, from a
// worker thread; meanwhile the caller goes on, commits more turns, and looks up more keys.
// Everything else forwards to an in-memory store behind one mutex (LockedStore).
// Invariant: every asynchronous call is answered exactly once while the store lives; answers
// still queued when it is destroyed are dropped (the engine, which would receive them, is
// gone by then: it must be stopped first).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "core/store.h"
#include "tests/support/locked_store.h"

namespace ringcast::test {

class DeferredStore final : public LockedStore {
 public:
  explicit DeferredStore(std::chrono::milliseconds delay) : delay_(delay) {
    worker_ = std::thread([this] { run(); });
  }
  ~DeferredStore() override {
    {
      std::lock_guard lock(queue_mu_);
      closing_ = true;
    }
    cv_.notify_all();
    worker_.join();
  }

  void find_event_keys_async(const std::vector<EventKeyRef>& keys, Poster& on,
                             EventKeysDone done) override {
    Result<std::vector<std::optional<EventKeyRecord>>> r = find_event_keys(keys);
    key_lookups_.fetch_add(1);
    later(on, [done = std::move(done), r = std::move(r)]() mutable { done(std::move(r)); });
  }
  void load_event_async(EventSeq seq, Poster& on, EventDone done) override {
    Result<std::optional<Event>> r = load_event(seq);
    loads_.fetch_add(1);
    later(on, [done = std::move(done), r = std::move(r)]() mutable { done(std::move(r)); });
  }

  uint64_t key_lookups() const { return key_lookups_.load(); }
  uint64_t loads() const { return loads_.load(); }

 private:
  struct Pending {
    std::chrono::steady_clock::time_point at;
    Poster* on;
    std::function<void()> fn;
  };
  void later(Poster& on, std::function<void()> fn) {
    {
      std::lock_guard lock(queue_mu_);
      queue_.push_back(Pending{std::chrono::steady_clock::now() + delay_, &on, std::move(fn)});
    }
    cv_.notify_all();
  }
  void run() {
    std::unique_lock lock(queue_mu_);
    while (!closing_) {
      if (queue_.empty()) {
        cv_.wait(lock);
        continue;
      }
      const auto at = queue_.front().at;  // FIFO: every item has the same delay
      if (std::chrono::steady_clock::now() < at) {
        cv_.wait_until(lock, at);
        continue;
      }
      Pending p = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      p.on->post(std::move(p.fn));
      lock.lock();
    }
  }

  const std::chrono::milliseconds delay_;
  std::mutex queue_mu_;
  std::condition_variable cv_;
  std::deque<Pending> queue_;
  bool closing_ = false;
  std::atomic<uint64_t> key_lookups_{0}, loads_{0};
  std::thread worker_;
};

}  // namespace ringcast::test
