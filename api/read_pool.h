// A small bounded thread pool for the REST API's blocking delivery-log reads (RocksDB gets and
// scans), so a slow read never stalls the HTTP loop. Invariants: at most `max_queued` reads
// wait; every submitted job's responder is answered exactly once (by its work, or 503 at stop).
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "api/http_names.h"

namespace ringcast::api {

struct ReadPoolOptions {
  uint32_t threads = 2;          // workers; at least 1
  uint32_t max_queued = 64;      // jobs waiting for a worker (running ones not counted)
  const char* name = "rc-read";  // thread names: <name>-<i> (15 characters at most in all)
};

class ReadPool {
 public:
  // Runs on a worker thread; its answer is sent through the job's responder.
  using Work = std::function<HttpResponse()>;
  enum class Submit : uint8_t { kQueued, kFull, kStopped };

  explicit ReadPool(ReadPoolOptions options);
  ~ReadPool();  // stop()
  ReadPool(const ReadPool&) = delete;
  ReadPool& operator=(const ReadPool&) = delete;

  // Any thread. kQueued: `responder` was moved into the job. kFull / kStopped: nothing was
  // queued and `responder` is still the caller's to answer.
  Submit submit(Work work, Responder& responder);

  // Stops taking jobs, answers the queued ones 503 shutting_down, waits for the running ones
  // to finish. Idempotent; any thread but a worker.
  void stop();

  size_t queued() const;

  // 503 answers: the queue is full (with Retry-After: 1) / the pool is stopped.
  static HttpResponse overloaded_response();
  static HttpResponse stopped_response();

 private:
  struct Job {
    Work work;
    Responder responder;
  };
  void run();

  const ReadPoolOptions options_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> queue_;  // guarded by mu_
  bool stopping_ = false;  // guarded by mu_
  std::mutex stop_mu_;     // serializes stop()
  std::vector<std::thread> workers_;
};

}  // namespace ringcast::api
